//! The bounded busy poll that a completion wait does before it sleeps
//! ([`crate::Cq::wait`], and `ibv_get_cq_event` in the drop-in
//! libibverbs): the waiting thread takes the driver's turns itself
//! ([`crate::Device::busy_poll`]) for at most [`SpinWait::bound`], and
//! sleeps only if no event came by then.
//!
//! # Decisions, with their sources
//!
//! - **Why spin at all: the sleeping path costs two wake-ups per message.**
//!   Measured on this 2-core machine (release build, `ibv_rc_pingpong -e
//!   -n 20000 -s 64` between two `rxe exec` processes, `perf stat -e
//!   context-switches` and `strace -f -tt` on the client): in event mode a
//!   message first wakes the driver thread out of `epoll_wait`, which
//!   receives it, pushes the completion and writes the channel's eventfd;
//!   that wakes the application out of `read` in `ibv_get_cq_event`, which
//!   then polls and posts, often queueing on the engine lock (a futex
//!   wait) while the driver thread still sends the ACK under it: 4.7 to
//!   6.7 context switches per iteration in event mode against 0.9 to 1.4
//!   in poll mode (two runs), and 1.7 eventfd reads, 1.7 eventfd writes and
//!   4.8 futex calls per iteration. Each wake-up of a sleeping thread costs
//!   several microseconds here (scheduler, idle exit, IPI): `ib_send_lat
//!   -e` had 72 µs typical latency against 11 µs polling, where the
//!   polling thread receives its packets itself (`Device::busy_poll`) and
//!   nobody sleeps. Kernel Soft-RoCE wakes the waiter straight from the
//!   packet's softirq: one wake-up.
//! - **Bounded, then sleep.** The spin ends at the first event or after the
//!   bound; then the wait sleeps exactly as before (the eventfd, or the
//!   CQ's condition variable), so an idle program burns no core: it costs
//!   at most one bound of CPU per wait that sleeps. The default,
//!   [`DEFAULT_BOUND`] (50 µs), is about twice the loopback round trip of
//!   poll mode on this machine, so a ping-pong's answer comes within it;
//!   Linux's `net.core.busy_read` suggests 50 µs for sockets too.
//!   `RXE_CQ_SPIN_US` sets it (0 turns the spin off, at most
//!   [`MAX_BOUND`]). Each CQ and channel stretches its own bound up to
//!   [`MAX_STRETCH`] times that (400 µs by default) while its events come
//!   just after the spin ends ([`AdaptiveSpin`] says why), so the most a
//!   wait that sleeps can spin is 400 µs, and a waiter whose events are far
//!   apart spins 50 µs per sleep. `docs/performance.md` has the
//!   measurements.
//! - **What a spin turn is.** The same turn as an empty `poll_cq`
//!   (`crate::driver::DriverWaker::busy_poll`): receive, due timers, transmit,
//!   only if nobody else holds the engine. So the spin never waits for a
//!   lock and never delays the driver thread. A spin that gives up says so
//!   ([`crate::Device::busy_poll_ended`]): with busy polling preferred (the
//!   default; `RXE_PREFER_BUSY_POLL=0` turns it off) the driver thread
//!   stops watching the sockets while a poller is at work, and would
//!   otherwise look again only up to a millisecond later, late for the
//!   sleeper's packet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::device::Device;

/// The spin's bound when `RXE_CQ_SPIN_US` is not set.
pub const DEFAULT_BOUND: Duration = Duration::from_micros(50);
/// The longest bound `RXE_CQ_SPIN_US` may ask for (a longer spin is a busy
/// loop, not a wait).
pub const MAX_BOUND: Duration = Duration::from_millis(1);

/// How far [`AdaptiveSpin`] may stretch the process's bound.
pub const MAX_STRETCH: u32 = 8;

/// How long a completion wait busy-polls before it sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinWait {
    bound: Duration,
}

impl SpinWait {
    /// A spin of at most `bound` (capped at [`MAX_BOUND`]).
    pub fn new(bound: Duration) -> SpinWait {
        SpinWait {
            bound: bound.min(MAX_BOUND),
        }
    }

    /// The process's setting: `RXE_CQ_SPIN_US` microseconds, or
    /// [`DEFAULT_BOUND`] if it is unset or not a number (read once).
    pub fn from_env() -> SpinWait {
        static FROM_ENV: OnceLock<SpinWait> = OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            let v = std::env::var("RXE_CQ_SPIN_US").ok();
            SpinWait::parse(v.as_deref())
        })
    }

    /// `RXE_CQ_SPIN_US`'s value as a spin (unset or bad: the default).
    fn parse(v: Option<&str>) -> SpinWait {
        match v.map(|s| s.trim().parse::<u64>()) {
            Some(Ok(us)) => SpinWait::new(Duration::from_micros(us)),
            Some(Err(_)) => {
                tracing::warn!(value = ?v, "RXE_CQ_SPIN_US is not a number of microseconds");
                SpinWait::new(DEFAULT_BOUND)
            }
            None => SpinWait::new(DEFAULT_BOUND),
        }
    }

    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// Busy-polls `devices` until `ready()` is true (then returns true) or
    /// the bound has passed (false). `ready` is asked first, so a wait
    /// whose event is already there spins not at all.
    pub fn spin(&self, devices: &[Device], mut ready: impl FnMut() -> bool) -> bool {
        if ready() {
            return true;
        }
        if self.bound.is_zero() || devices.is_empty() {
            return false;
        }
        let start = Instant::now();
        loop {
            for d in devices {
                d.busy_poll();
            }
            if ready() {
                return true;
            }
            if start.elapsed() >= self.bound {
                for d in devices {
                    d.busy_poll_ended();
                }
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

/// The spin of one waitable object (a CQ, a completion channel), fitted
/// to how soon its events come: a spin that ended too early for an event
/// that came within twice the bound doubles the bound (up to
/// [`MAX_STRETCH`] times the process's setting); an event much later than
/// that halves it again (not below the setting). A spin that catches its
/// event keeps the bound.
///
/// Why: a ping-pong over two waiters has two steady states. If both
/// spins catch their events, a round trip is the poll-mode one (about
/// 30 µs here) and every spin succeeds; if one side sleeps, the other's
/// wait is the sleeping round trip (about 60 µs here), longer than a 50 µs
/// spin, so it sleeps too, and both stay there. `ib_send_lat -e` sat in
/// the second state: 1816 of 2000 spins ended without their event,
/// 75 µs typical latency against 31 µs without any spin and 17 µs with a
/// 100 µs spin. Stretching the bound when an event just missed it moves a
/// pair to the first state; the cap and the shrink keep a waiter whose
/// events are far apart at the setting (one bound of CPU per sleep).
#[derive(Debug)]
pub struct AdaptiveSpin {
    /// The process's setting, which the bound never goes below.
    base: Duration,
    /// The current bound, nanoseconds.
    bound_ns: AtomicU64,
}

impl Default for AdaptiveSpin {
    fn default() -> AdaptiveSpin {
        AdaptiveSpin::new()
    }
}

impl AdaptiveSpin {
    /// Starts at the process's setting ([`SpinWait::from_env`]).
    pub fn new() -> AdaptiveSpin {
        AdaptiveSpin::with_base(SpinWait::from_env().bound())
    }

    fn with_base(base: Duration) -> AdaptiveSpin {
        AdaptiveSpin {
            base,
            bound_ns: AtomicU64::new(base.as_nanos() as u64),
        }
    }

    /// The spin to do now.
    pub fn current(&self) -> SpinWait {
        SpinWait {
            bound: Duration::from_nanos(self.bound_ns.load(Ordering::Relaxed)),
        }
    }

    /// After a wait: `spun` is the spin it did, `caught` whether the spin
    /// found the event, `waited` how long the whole wait took.
    pub fn record(&self, spun: SpinWait, caught: bool, waited: Duration) {
        let base = self.base;
        if caught || base.is_zero() {
            return;
        }
        let b = spun.bound();
        let next = if waited < b.saturating_mul(2) {
            b.saturating_mul(2)
                .min(base.saturating_mul(MAX_STRETCH))
                .min(MAX_BOUND)
        } else {
            (b / 2).max(base)
        };
        self.bound_ns
            .store(next.as_nanos() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_just_missed_stretches_the_spin_and_a_late_one_shrinks_it() {
        let us = Duration::from_micros;
        let base = us(50);
        let a = AdaptiveSpin::with_base(base);
        a.record(a.current(), true, us(30));
        assert_eq!(a.current().bound(), us(50), "caught: kept");
        a.record(a.current(), false, us(70));
        assert_eq!(a.current().bound(), us(100), "missed by a little: doubled");
        for _ in 0..10 {
            a.record(a.current(), false, us(150));
        }
        assert!(a.current().bound() <= base * MAX_STRETCH, "capped");
        a.record(a.current(), false, Duration::from_millis(50));
        assert!(
            a.current().bound() < base * MAX_STRETCH,
            "a late event halves it"
        );
        for _ in 0..10 {
            a.record(a.current(), false, Duration::from_millis(50));
        }
        assert_eq!(a.current().bound(), base, "not below the setting");
    }

    #[test]
    fn the_setting_is_microseconds_capped_and_defaults_when_unset_or_bad() {
        assert_eq!(SpinWait::parse(None).bound(), DEFAULT_BOUND);
        assert_eq!(SpinWait::parse(Some("0")).bound(), Duration::ZERO);
        assert_eq!(
            SpinWait::parse(Some(" 20 ")).bound(),
            Duration::from_micros(20)
        );
        assert_eq!(SpinWait::parse(Some("999999999")).bound(), MAX_BOUND);
        assert_eq!(SpinWait::parse(Some("fast")).bound(), DEFAULT_BOUND);
    }

    #[test]
    fn a_spin_without_devices_or_bound_only_asks_once() {
        let mut asked = 0;
        assert!(!SpinWait::new(DEFAULT_BOUND).spin(&[], || {
            asked += 1;
            false
        }));
        assert_eq!(asked, 1);
        assert!(SpinWait::new(Duration::ZERO).spin(&[], || true));
    }
}
