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
//! poster flushes its own packets ([`flush`]), so the driver thread is
//! needed only for what comes later: responses, acknowledgements, timers.
//!
//! A passive side (no application thread polls: a WRITE or READ target
//! whose application waits on something else) keeps the thread awake
//! while its traffic lasts: after a turn that received packets it turns
//! again, yielding in between, for `SPIN` past the last arrival before
//! it sleeps in epoll again, as NAPI polls while busy; not while a yield
//! shows another thread waiting for the core (`SPIN_CONTENDED`).
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
//! now and then (every `LOOK_MIN` to `POLLER_FRESH`) and treats what
//! the poller missed as the poller would (`Sends::Look`).
//!
//! Files: `turn` (what one turn does, on any thread, and the one way
//! down, [`flush`]), `waker` ([`DriverWaker`]: what other threads ask of
//! the driver, busy polls among them), `thread` ([`Driver`]: the thread
//! and its sleep), `engine` (what the driver drives).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use mio::{Token, Waker};
use rxe_core::transport::Instant;

pub use engine::{EndpointEngine, Engine};
pub use thread::Driver;
pub use turn::{flush, turn, Deferral, Turn};
pub use waker::DriverWaker;

mod engine;
mod thread;
mod turn;
mod waker;

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

/// The engine lock if it is free (a poisoned lock is taken as it is: the
/// engine's state is still the best there is).
fn try_lock<E: ?Sized>(m: &Mutex<E>) -> Option<MutexGuard<'_, E>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
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

#[cfg(test)]
mod tests;
