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
//!   wait) while the driver thread still sends the ACK under it. 6.7
//!   context switches per iteration in event mode against 1.4 in poll mode,
//!   and 1.7 eventfd reads, 1.7 eventfd writes and 4.8 futex calls per
//!   iteration. Each wake-up of a sleeping thread costs several
//!   microseconds here (scheduler, idle exit, IPI), so event mode paid
//!   about 30 µs more per round trip than poll mode, where the polling
//!   thread receives its packets itself (`Device::busy_poll`) and nobody
//!   sleeps. Kernel Soft-RoCE wakes the waiter straight from the packet's
//!   softirq: one wake-up.
//! - **Bounded, then sleep.** The spin ends at the first event or after the
//!   bound; then the wait sleeps exactly as before (the eventfd, or the
//!   CQ's condition variable), so an idle program burns no core: it costs
//!   at most one bound of CPU per wait that sleeps. The default,
//!   [`DEFAULT_BOUND`] (50 µs), is about twice the loopback round trip of
//!   poll mode on this machine, so a ping-pong's answer comes within it;
//!   Linux's `net.core.busy_read` suggests 50 µs for sockets too.
//!   `RXE_CQ_SPIN_US` sets it (0 turns the spin off, at most
//!   [`MAX_BOUND`]). `docs/performance.md` has the measurements.
//! - **What a spin turn is.** The same turn as an empty `poll_cq`
//!   (`rxe_net::DriverWaker::busy_poll`): receive, due timers, transmit,
//!   only if nobody else holds the engine. So the spin never waits for a
//!   lock and never delays the driver thread.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::device::Device;

/// The spin's bound when `RXE_CQ_SPIN_US` is not set.
pub const DEFAULT_BOUND: Duration = Duration::from_micros(50);
/// The longest bound `RXE_CQ_SPIN_US` may ask for (a longer spin is a busy
/// loop, not a wait).
pub const MAX_BOUND: Duration = Duration::from_millis(1);

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
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
