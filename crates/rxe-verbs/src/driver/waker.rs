//! [`DriverWaker`]: what other threads ask of the driver (wake-ups,
//! deadlines, busy polls, the poller's comings and goings, a verb's
//! flush). Cheap to clone.

use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};

use rxe_core::transport::Instant;
use rxe_net::NetPort;

use super::turn::{flush, poller_turn, Sends};
use super::{poller_fresh, try_lock, Engine, Shared, AWAKE};

/// Wakes the driver thread; cheap to clone, usable from any thread.
#[derive(Debug, Clone)]
pub struct DriverWaker {
    pub(super) shared: Arc<Shared>,
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
    /// again now, not within `POLLER_FRESH` (else the sleeper's next
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
    /// the thread only looks in every `POLLER_FRESH`.
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
    /// user space): if nobody holds the engine, [`turn`](super::turn()) (receive, due
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
