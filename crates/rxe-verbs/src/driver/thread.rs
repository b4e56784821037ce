//! [`Driver`]: the driver thread of one port and engine, and its sleep in
//! mio's `Poll` over the port's sockets and a waker.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use rxe_core::transport::Instant;
use rxe_net::{NetCounter, NetPort, RoceSocket};

use super::turn::{poller_turn, turn, Deferral, Sends};
use super::*;

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
