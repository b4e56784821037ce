//! The device's driver: the one place that moves packets between its
//! port (rxe-net's `NetPort`: the sockets, host I/O only) and its engine
//! (the transport endpoint with its memory and GID table, behind
//! [`Engine`]). Every packet goes down `flush` (engine → port) once and
//! up `NetPort::receive` (port → engine) once, on whichever thread drives:
//! a verb that posted ([`DriverWaker::flush`]), a busy poller
//! ([`DriverWaker::busy_poll`]), or the driver thread.
//!
//! The driver thread feeds received packets and time into the engine and
//! sends what it emits, then sleeps until a socket is readable (or, with
//! packets queued, writable), it is woken, or the engine's next deadline.
//!
//! Each turn: lock the engine; `receive`; `handle_timeout` if a deadline
//! passed; `flush`; read `poll_timeout`; unlock; sleep in mio's `Poll`
//! (epoll, edge-triggered). The engine's lock is never held while sleeping.
//!
//! Posts do not always pay for a wake-up: the thread publishes the
//! deadline it sleeps until, and [`DriverWaker::notify_deadline`] wakes it
//! only for an earlier one. It never sleeps longer than [`TICK`], so the
//! retransmission timer a post starts (67 ms at perftest's default
//! timeout) is later than what it sleeps until and wakes nobody. The
//! poster flushes its own packets (see `NetPort::flush`), so the driver is
//! needed only for what comes later: responses, acknowledgements, timers.
//!
//! A passive side (no application thread polls: a WRITE or READ target
//! whose application waits on something else) keeps the thread awake
//! while its traffic lasts: after a turn that received packets it turns
//! again, yielding in between, for [`SPIN`] past the last arrival before
//! it sleeps in epoll again, as NAPI polls while busy; not while a yield
//! shows another thread waiting for the core ([`SPIN_CONTENDED`]).
//!
//! Busy polling ([`DriverWaker::busy_poll`]): an application thread that
//! finds its CQ empty does the same [`turn`] itself, so a poll loop does
//! not wait for this thread to be scheduled. While such a poller is
//! active the thread, woken by a packet, does not queue on the engine
//! lock behind it (a futex sleep and a futex wake per packet, measured:
//! 1.8 futex calls per round trip of `rxe perf write --lat`): it leaves a
//! note (`missed`) that the poller reads after unlocking, and the poller
//! takes one more turn. With busy polling preferred, a poller's turn that
//! received a request or two leaves the answer for its next turn or post
//! (`poller_turn`): the application sees what came one system call
//! sooner, and the ACK leaves with its next post. The thread then does
//! not watch the sockets at all while the poller is at work: it looks in
//! now and then (every [`LOOK_MIN`] to [`POLLER_FRESH`]) and treats what
//! the poller missed as the poller would (`Sends::Look`).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use rxe_core::transport::Instant;

use rxe_net::{NetCounter, NetPort, Outgoing, RoceSocket};

pub use engine::{EndpointEngine, Engine};

mod engine;

const WAKE_TOKEN: Token = Token(usize::MAX);
/// The published deadline while the thread is awake (it will read the
/// engine's deadline again before sleeping).
const AWAKE: u64 = 0;
/// The published deadline while it sleeps without one.
const NO_DEADLINE: u64 = u64::MAX;
/// The shortest sleep when the engine's deadline is already due after a
/// turn (an engine that keeps a past deadline must not make this spin).
const MIN_SLEEP: Duration = Duration::from_millis(1);
/// The longest sleep: an idle device turns 40 times a second, and a
/// deadline later than this (a post's retransmission timer) needs no
/// wake-up.
pub const TICK: Duration = Duration::from_millis(25);
/// After a turn that received packets, with no application thread polling
/// the device, the thread keeps turning (a non-blocking receive, then
/// `sched_yield`) this long instead of sleeping, and again after every
/// turn that receives: a passive side's traffic (a WRITE or READ target,
/// whose application waits elsewhere) then finds it awake, where waking
/// it costs a context switch per batch. The NAPI way: poll while busy,
/// sleep on the interrupt when quiet. About one round trip of a loopback
/// READ, so a request-response stream keeps it awake and a pause of its
/// own length lets it sleep.
const SPIN: Duration = Duration::from_micros(50);
/// The thread spins only when no application thread has polled the
/// device's CQs for this long: a poller receives for itself, and one that
/// spins on memory without yielding (`ib_write_lat`) would share its core
/// with a spinning thread, both running only at the scheduler's ticks
/// (docs/performance.md, "Adaptive spin").
const SPIN_POLLER_QUIET: Duration = Duration::from_millis(10);
/// A `sched_yield` of the spinning thread that took longer than this gave
/// the core to another thread that wanted it: the cores are busy. The
/// thread then sleeps between arrivals again for [`SPIN_BACKOFF`]. With
/// two cores and three busy threads (perftest's `ib_write_bw` client over
/// the drop-in library, whose driver thread works too), spinning without
/// this cost a fifth of 64-byte WRITEs. 20 µs also caught the brief
/// wake-ups of other threads and ended most spins where they paid; 200 µs
/// let the three threads fight. 60 µs kept both (docs/performance.md).
const SPIN_CONTENDED: Duration = Duration::from_micros(60);
/// How long the thread does not spin after a contended yield.
const SPIN_BACKOFF: Duration = Duration::from_millis(10);
/// A busy poll this recent counts as a poller at work: the thread does not
/// wait for the engine lock while one may hold it.
const POLLER_FRESH: Duration = Duration::from_millis(1);
/// With busy polling preferred and a poller at work the thread does not
/// watch the sockets: it looks in every [`POLLER_FRESH`] at most, and
/// after a look that found packets the poller had not taken, four times
/// sooner, down to this (the poller polls seldom, or watches memory between
/// its polls: its arrivals wait for the looks); each look that finds none
/// doubles the interval again.
const LOOK_MIN: Duration = Duration::from_micros(50);

#[derive(Debug)]
struct Shared {
    waker: Arc<Waker>,
    stop: AtomicBool,
    /// Nanoseconds of the deadline the thread sleeps until, `AWAKE` or
    /// `NO_DEADLINE`. Written by the thread under the engine lock.
    sleep_until: AtomicU64,
    /// Nanoseconds (engine clock) of the last busy poll, 0 for none.
    polled_at: AtomicU64,
    /// The thread found the engine locked while a poller was at work and
    /// skipped its turn: whoever unlocks next takes one (or wakes it).
    missed: AtomicBool,
    /// See [`DriverWaker::set_prefer_busy_poll`].
    prefer_busy_poll: AtomicBool,
    /// The answers a poller's turn left for its post ([`Sends`]).
    deferral: Deferral,
}

/// When a busy poller's turn left the engine's sends for later
/// ([`Sends::Poller`]), in the engine clock's nanoseconds; 0: not
/// deferred. Every [`flush`] clears it.
#[derive(Debug, Default)]
pub struct Deferral(AtomicU64);

impl Deferral {
    /// Whether a turn at `now` may leave the engine's sends for later:
    /// yes, once after each flush (which it then notes, with `now`).
    fn defer_once(&self, now: Instant) -> bool {
        let at = now.as_nanos().max(1);
        self.0
            .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// When the sends now waiting were left for later, if they are.
    pub fn since(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Instant::from_nanos(t)),
        }
    }

    fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Sends what the engine has (its `poll_transmit` at `now`, each packet
/// from the address its `sgid_index` names in the engine's GID table),
/// then `after_batch` (completions to their CQs: after the ACKs are out).
/// Every send of the device goes through here, so that it ends any
/// deferral. Returns the packets handed to the kernel.
pub fn flush<E: Engine + ?Sized>(
    port: &NetPort,
    e: &mut E,
    now: Instant,
    deferral: &Deferral,
) -> usize {
    deferral.clear();
    let sent = port.flush(|buf| {
        let transmit = e.poll_transmit(now, buf)?;
        Some(Outgoing {
            source: e.source_gid(transmit.dest.sgid_index),
            transmit,
        })
    });
    e.after_batch();
    sent
}

/// Wakes the driver thread; cheap to clone, usable from any thread.
#[derive(Debug, Clone)]
pub struct DriverWaker {
    shared: Arc<Shared>,
}

impl DriverWaker {
    /// Wakes the thread for one more turn.
    pub fn wake(&self) {
        if let Err(e) = self.shared.waker.wake() {
            tracing::warn!(error = %e, "waking the driver failed");
        }
    }

    /// Tells the thread about the engine's deadline after a change made
    /// outside it (a post that started a timer). Wakes it only if the
    /// deadline is earlier than the one it sleeps until; call it after the
    /// change, with the engine's `poll_timeout()`.
    pub fn notify_deadline(&self, deadline: Option<Instant>) {
        let Some(d) = deadline else { return };
        let d = d.as_nanos().max(AWAKE + 1);
        let prev = self.shared.sleep_until.fetch_min(d, Ordering::SeqCst);
        if d < prev {
            self.wake();
        }
    }

    /// Prefer busy polling (as `SO_PREFER_BUSY_POLL` does for a socket):
    /// while a poller is at work (it polled in the last millisecond), the
    /// thread does not watch the sockets, so arrivals wake nobody; the
    /// poller receives them. For applications that keep polling a CQ
    /// while they wait (`rxe perf`'s latency loops, `ib_send_lat`,
    /// perftest's bandwidth loops). One that polls, then waits by spinning
    /// on memory (`ib_write_lat`) has what it misses taken by the thread's
    /// looks (every 50 µs to 1 ms, `LOOK_MIN`) as its own turn would
    /// (`Sends::Look`): its answers leave with its next post, so that the
    /// peer's next request comes while it polls again.
    pub fn set_prefer_busy_poll(&self, on: bool) {
        self.shared.prefer_busy_poll.store(on, Ordering::Relaxed);
        self.wake();
    }

    /// A busy poller stops (a completion wait whose spin ended without its
    /// event, about to sleep): the thread no longer counts it as at work,
    /// and with busy polling preferred it is woken to watch the sockets
    /// again now, not within [`POLLER_FRESH`] (else the sleeper's next
    /// packet would wait for that look). Another poller still at work
    /// counts again at its next poll.
    pub fn poller_left(&self) {
        self.shared.polled_at.store(0, Ordering::Relaxed);
        if self.shared.prefer_busy_poll.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    /// A poll that found completions (so took no turn): the poller is
    /// still at work, and will take a turn at its next empty poll. Without
    /// it a loop that always finds completions (many QPs) would look gone
    /// to the thread, which would queue on the engine lock behind every
    /// post.
    pub fn poller_busy(&self, now: Instant) {
        self.shared
            .polled_at
            .store(now.as_nanos().max(1), Ordering::Relaxed);
    }

    /// Whether busy polling is preferred and a poller is at work, so that
    /// the thread only looks in every [`POLLER_FRESH`].
    pub fn poller_at_work(&self, now: Instant) -> bool {
        self.shared.prefer_busy_poll.load(Ordering::Relaxed) && poller_fresh(&self.shared, now)
    }

    /// Call after unlocking the engine from outside the thread: if the
    /// thread skipped a turn because the engine was locked, wake it.
    pub fn after_unlock(&self) {
        // Pairs with the fence in `lock_or_note`: either the thread saw
        // the lock free, or this sees its note.
        fence(Ordering::SeqCst);
        if self.shared.missed.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Sends what the engine has now ([`flush`]) on the caller's thread:
    /// a verb's kick, right after a post.
    pub fn flush<E: Engine + ?Sized>(&self, port: &NetPort, e: &mut E) -> usize {
        flush(port, e, port.clock().now(), &self.shared.deferral)
    }

    /// One busy-poll turn on the caller's thread (NAPI busy polling, in
    /// user space): if nobody holds the engine, [`turn`] (receive, due
    /// timers, transmit) and tell the thread the deadline. A thread that
    /// polls an empty CQ calls it, so that a poll loop makes progress
    /// without waiting for the driver thread to be scheduled. Returns
    /// whether it took a turn (`false`: someone else is in the engine).
    pub fn busy_poll<E: Engine + ?Sized>(&self, port: &NetPort, engine: &Mutex<E>) -> bool {
        let now = port.clock().now();
        self.shared
            .polled_at
            .store(now.as_nanos().max(1), Ordering::Relaxed);
        let Some(mut e) = try_lock(engine) else {
            return false;
        };
        let sends = if self.shared.prefer_busy_poll.load(Ordering::Relaxed) {
            Sends::Poller
        } else {
            Sends::Now
        };
        // A packet that arrives while we hold the lock wakes the thread,
        // which leaves a note instead of waiting: one more turn here.
        for k in 0..2 {
            // A second turn comes after the first one's work: it reads
            // the clock again.
            let d = poller_turn(
                port,
                &mut *e,
                &self.shared.deferral,
                sends,
                (k == 0).then_some(now),
            )
            .deadline;
            drop(e);
            self.notify_deadline(d);
            fence(Ordering::SeqCst);
            if !self.shared.missed.swap(false, Ordering::SeqCst) {
                return true;
            }
            match try_lock(engine) {
                Some(g) => e = g,
                None => {
                    // Someone else (a verb) holds it now and may not look
                    // at the note: the thread takes the turn.
                    self.wake();
                    return true;
                }
            }
        }
        // Still behind after two turns: leave the rest to the thread.
        self.shared.missed.store(true, Ordering::SeqCst);
        drop(e);
        self.after_unlock();
        true
    }
}

/// The engine lock if it is free (a poisoned lock is taken as it is: the
/// engine's state is still the best there is).
fn try_lock<E: ?Sized>(m: &Mutex<E>) -> Option<MutexGuard<'_, E>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// What one [`turn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Packets received and handed to the engine.
    pub received: usize,
    /// The engine's next deadline.
    pub deadline: Option<Instant>,
    /// What the engine had to send was left for the next turn.
    pub sends_deferred: bool,
}

/// One engine turn, the same for the driver thread and a busy poller:
/// the datagrams waiting on the sockets into the engine, the timers that
/// are due, then what the engine has to send. The caller holds the engine
/// lock.
///
/// The engine's `after_batch` (where the verbs layer moves completions to
/// their CQs and so wakes completion-event waiters) runs once, after the
/// flush: the ACK of a received SEND is on the wire before its receiver's
/// application is woken. Delivering first (as `NetPort::receive` alone
/// does) woke the waiter while this turn still held the engine lock to send
/// the ACK, and the waiter's first verb then slept on that lock (seen with
/// `strace -f` on `ibv_rc_pingpong -e`: a futex wait and wake per message).
pub fn turn<E: Engine + ?Sized>(port: &NetPort, e: &mut E, deferral: &Deferral) -> Turn {
    poller_turn(port, e, deferral, Sends::Now, None)
}

/// A poller's turn that received more packets than this is a stream's,
/// not a ping-pong's: it sends at once (deferring there cost 6 % of 64 B
/// WRITEs to a busy-polling server, docs/performance.md).
const DEFER_MAX_RECEIVED: usize = 2;

/// Sends a poller's turn left for its next post (see [`Sends::Look`]) are
/// sent by the thread's look once they have waited this long: a poller
/// that stopped without posting delays its peer's completions by at most
/// this and one look.
const DEFER_BOUND: Duration = Duration::from_micros(500);

/// What a turn does with what the engine has to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sends {
    /// Send it (the driver thread's turn when no poller is at work, and a
    /// poller's without busy polling preferred).
    Now,
    /// A busy poller's turn with busy polling preferred: the answers to
    /// one or two received requests wait for the poller's next post or
    /// turn (`poller_turn`).
    Poller,
    /// The driver thread's look while such a poller is at work: what the
    /// poller's turn would do, on its behalf, for what arrived while it
    /// was busy elsewhere (`ib_write_lat` watches memory between its
    /// polls of the send CQ), so its answer leaves with the poller's
    /// next post and the peer, polling for that answer, finds the
    /// poller's next request with it; and sends that a poller's turn left
    /// for its post stay until they have waited [`DEFER_BOUND`]. Sending
    /// them at the look instead put the ACK on the wire alone, a moment
    /// before the post that would have carried it, once in a while: the
    /// peer then took the ACK, went back to watching memory, and its
    /// next WRITE waited for its own driver's look (a millisecond), which
    /// is where `ib_write_lat`'s 99th percentile was (570 µs).
    Look,
}

/// [`turn`], for a busy poller with busy polling preferred
/// (`Sends::Poller`), or the thread's look on its behalf (`Sends::Look`):
/// when the turn received one or two packets, one of them
/// a request (a SEND, WRITE, READ or atomic: so the engine has its ACK or
/// response to send), what the engine then has to send waits for the next
/// turn or the next post, one turn at most. An `ib_write_lat`-style loop
/// then sees the peer's WRITE one `sendmmsg` sooner, and its ACK leaves
/// with the WRITE the loop posts in answer, in one `sendmmsg` (and
/// arrives with it, in one `recvmmsg`). A turn that received only ACKs (a
/// stream's sender, whose window they open) or many packets (a stream's
/// receiver) sends at once: deferring there held data and ACKs back from
/// streams. A poller that stops polling without a post leaves the sends to
/// the thread, which looks in within [`POLLER_FRESH`] while a poller is at
/// work and sends them once they have waited [`DEFER_BOUND`], and at once
/// when the poller leaves (`poller_left`); the device's ACK
/// delay (`local_ca_ack_delay`, IBTA 9.7.6.1.3: the requester's timeout
/// allows for it) is far longer.
///
/// `polled_at` is when the caller read the clock just before: a turn that
/// receives nothing goes on at that time, without reading the clock again
/// (an empty busy poll read it four times, 7 % of a ping-pong side).
fn poller_turn<E: Engine + ?Sized>(
    port: &NetPort,
    e: &mut E,
    deferral: &Deferral,
    sends: Sends,
    polled_at: Option<Instant>,
) -> Turn {
    let got = port.receive(|now, meta, packet| e.handle(now, meta, packet));
    let now = match polled_at {
        Some(t) if got.packets == 0 => t,
        _ => port.clock().now(),
    };
    if e.poll_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
    let answers_wait = sends != Sends::Now
        && got.requests > 0
        && got.packets <= DEFER_MAX_RECEIVED
        && deferral.defer_once(now);
    let still_waiting = sends == Sends::Look
        && deferral
            .since()
            .is_some_and(|t| now.saturating_since(t) < DEFER_BOUND);
    let sends_deferred = answers_wait || still_waiting;
    let c = port.counters();
    if answers_wait {
        c.inc(NetCounter::AnswersDeferred);
    }
    if sends == Sends::Look && got.packets > 0 {
        c.add(NetCounter::LookRcvdPkts, got.packets as u64);
    }
    if sends_deferred {
        e.after_batch();
    } else {
        flush(port, e, now, deferral);
    }
    let received = got.packets;
    Turn {
        received,
        deadline: e.poll_timeout(),
        sends_deferred,
    }
}

/// The driver thread of one port and engine.
#[derive(Debug)]
pub struct Driver {
    shared: Arc<Shared>,
    port: Arc<NetPort>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the thread ("rxe-driver").
    pub fn spawn<E: Engine + 'static>(
        port: Arc<NetPort>,
        engine: Arc<Mutex<E>>,
    ) -> io::Result<Driver> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN)?);
        let shared = Arc::new(Shared {
            waker: waker.clone(),
            stop: AtomicBool::new(false),
            sleep_until: AtomicU64::new(AWAKE),
            polled_at: AtomicU64::new(0),
            missed: AtomicBool::new(false),
            prefer_busy_poll: AtomicBool::new(false),
            deferral: Deferral::default(),
        });
        port.set_waker(Some(waker));
        let (p, s) = (port.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("rxe-driver".into())
            .spawn(move || run(p, engine, poll, s));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                port.set_waker(None);
                return Err(e);
            }
        };
        Ok(Driver {
            shared,
            port,
            thread: Some(thread),
        })
    }

    pub fn waker(&self) -> DriverWaker {
        DriverWaker {
            shared: self.shared.clone(),
        }
    }

    /// Stops the thread and waits for it (also on drop). Do not hold the
    /// engine's lock while stopping: the thread may be waiting for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.waker.wake();
        if t.join().is_err() {
            tracing::error!("the driver thread panicked");
        }
        self.port.set_waker(None);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The sockets registered with the poll, and with which interest.
struct Registered {
    sockets: Vec<Arc<RoceSocket>>,
    generation: Option<u64>,
    /// `None`: registered for nothing (not in the poll at all).
    interest: Option<Interest>,
}

impl Registered {
    fn interest(readable: bool, writable: bool) -> Option<Interest> {
        match (readable, writable) {
            (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
            (true, false) => Some(Interest::READABLE),
            (false, true) => Some(Interest::WRITABLE),
            (false, false) => None,
        }
    }

    /// Brings the registrations up to the port's sockets and the interest
    /// wanted. Holding the `Arc`s keeps each descriptor open until it is
    /// deregistered, so a removed address never leaves a stale (or reused)
    /// descriptor in the poll. A socket registered again that is already
    /// readable is reported at once (epoll checks readiness on insert).
    fn update(&mut self, poll: &Poll, port: &NetPort, readable: bool, writable: bool) {
        let g = port.generation();
        let want = Registered::interest(readable, writable);
        if self.generation == Some(g) && self.interest == want {
            return;
        }
        let reg = poll.registry();
        for s in self.sockets.drain(..) {
            let fd = s.as_raw_fd();
            if let Err(e) = reg.deregister(&mut SourceFd(&fd)) {
                tracing::debug!(error = %e, "deregister");
            }
        }
        if let Some(interest) = want {
            self.sockets = port.sockets();
            let receiving = self.sockets.len();
            // The send-only source-port sockets matter only for a send
            // that waits for room.
            if writable {
                self.sockets.extend(port.source_sockets());
            }
            for (i, s) in self.sockets.iter().enumerate() {
                let fd = s.as_raw_fd();
                let interest = if i < receiving {
                    interest
                } else {
                    Interest::WRITABLE
                };
                if let Err(e) = reg.register(&mut SourceFd(&fd), Token(i), interest) {
                    tracing::error!(error = %e, local = %s.local_addr(), "cannot poll socket");
                }
            }
        }
        self.generation = Some(g);
        self.interest = want;
    }
}

fn run<E: Engine>(port: Arc<NetPort>, engine: Arc<Mutex<E>>, mut poll: Poll, shared: Arc<Shared>) {
    let clock = port.clock();
    let mut events = Events::with_capacity(64);
    let mut reg = Registered {
        sockets: Vec::new(),
        generation: None,
        interest: None,
    };
    tracing::debug!("driver started");
    let mut spin_until: Option<Instant> = None;
    let mut no_spin_until = Instant::from_nanos(0);
    let mut look_every = POLLER_FRESH;
    while !shared.stop.load(Ordering::SeqCst) {
        let deadline = match lock_or_note(&engine, &shared, clock.now()) {
            Some(mut e) => {
                let look = shared.prefer_busy_poll.load(Ordering::Relaxed)
                    && poller_fresh(&shared, clock.now());
                let t = if look {
                    let t = poller_turn(&port, &mut *e, &shared.deferral, Sends::Look, None);
                    look_every = if t.received > 0 {
                        (look_every / 4).max(LOOK_MIN)
                    } else {
                        (look_every * 2).min(POLLER_FRESH)
                    };
                    t
                } else {
                    look_every = POLLER_FRESH;
                    turn(&port, &mut *e, &shared.deferral)
                };
                let now = clock.now();
                if t.received > 0
                    && now >= no_spin_until
                    && !poller_within(&shared, now, SPIN_POLLER_QUIET)
                {
                    spin_until = Some(now.saturating_add(SPIN));
                }
                if spin_until.is_some_and(|s| now < s) {
                    // Awake: a post need not wake the thread.
                    drop(e);
                    port.counters().inc(NetCounter::DriverSpinTurns);
                    shared.sleep_until.store(AWAKE, Ordering::SeqCst);
                    std::thread::yield_now();
                    let back = clock.now();
                    if back.saturating_since(now) > SPIN_CONTENDED {
                        spin_until = None;
                        no_spin_until = back.saturating_add(SPIN_BACKOFF);
                    }
                    continue;
                }
                spin_until = None;
                let cap = now.saturating_add(TICK);
                let d = Some(t.deadline.map_or(cap, |d| d.min(cap)));
                publish(&shared, d);
                d
            }
            None => {
                // A poller holds the engine and will see the note; should
                // it stop polling, the next try is soon.
                let d = Some(clock.now().saturating_add(MIN_SLEEP));
                publish(&shared, d);
                d
            }
        };
        // With busy polling preferred and a poller at work, arrivals are
        // the poller's: the thread stops watching for them (each would
        // wake it, a context switch per packet), and looks again within
        // `look_every` whether the poller is still there, and for what it
        // missed (`Sends::Look`).
        let quiet =
            shared.prefer_busy_poll.load(Ordering::Relaxed) && poller_fresh(&shared, clock.now());
        reg.update(&poll, &port, !quiet, port.has_pending_sends());
        let deadline = if quiet {
            let check = clock.now().saturating_add(look_every);
            deadline.map(|d| d.min(check))
        } else {
            deadline
        };
        let timeout = if port.has_unread() && !quiet {
            Some(Duration::ZERO)
        } else {
            deadline.map(|d| {
                let now = clock.now();
                if d <= now {
                    MIN_SLEEP
                } else {
                    d.saturating_since(now)
                }
            })
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "poll failed");
                std::thread::sleep(MIN_SLEEP);
            }
        }
        shared.sleep_until.store(AWAKE, Ordering::SeqCst);
    }
    let r = poll.registry();
    for s in reg.sockets.drain(..) {
        let _ = r.deregister(&mut SourceFd(&s.as_raw_fd()));
    }
    tracing::debug!("driver stopped");
}

/// Publishes the deadline the thread will sleep until. Called under the
/// engine lock (or right after finding it held): a poster that changes the
/// deadline later sees it and wakes the thread if needed.
fn publish(shared: &Shared, d: Option<Instant>) {
    shared.sleep_until.store(
        d.map_or(NO_DEADLINE, |d| d.as_nanos().max(AWAKE + 1)),
        Ordering::SeqCst,
    );
}

/// Whether a busy poll came within the last [`POLLER_FRESH`].
fn poller_fresh(shared: &Shared, now: Instant) -> bool {
    poller_within(shared, now, POLLER_FRESH)
}

/// Whether a busy poll (or a poll that found completions) came within the
/// last `window`.
fn poller_within(shared: &Shared, now: Instant, window: Duration) -> bool {
    let polled = shared.polled_at.load(Ordering::Relaxed);
    polled != 0 && now.as_nanos().saturating_sub(polled) < window.as_nanos() as u64
}

/// The engine lock for the thread's turn. While a busy poller is at work
/// the thread does not queue behind it: if the lock is held it leaves the
/// `missed` note and returns `None`, and the holder takes the turn (see
/// `DriverWaker::busy_poll`, `after_unlock`).
fn lock_or_note<'a, E>(
    engine: &'a Mutex<E>,
    shared: &Shared,
    now: Instant,
) -> Option<MutexGuard<'a, E>> {
    if !poller_fresh(shared, now) {
        return Some(engine.lock().unwrap_or_else(PoisonError::into_inner));
    }
    shared.missed.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let g = try_lock(engine)?;
    shared.missed.store(false, Ordering::SeqCst);
    Some(g)
}

#[cfg(test)]
mod tests;
