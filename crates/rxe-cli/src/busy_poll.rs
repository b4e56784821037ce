//! Busy polling as `pingpong` and `perf` do it: like the real tools, but
//! yielding the CPU at every empty poll, under a deadline that starts
//! again whenever something arrives.

use std::time::{Duration, Instant};

/// How often, in empty polls, the clock is read for the deadline.
const CLOCK_EVERY: u32 = 256;

/// One wait: the timeout, and when progress was last made.
#[derive(Debug)]
pub struct BusyPoll {
    timeout: Option<Duration>,
    since: Instant,
    polls: u32,
}

impl BusyPoll {
    /// A wait bounded by `timeout` (without end if `None`).
    pub fn new(timeout: Option<Duration>) -> BusyPoll {
        BusyPoll {
            timeout,
            since: Instant::now(),
            polls: 0,
        }
    }

    /// Something arrived: the deadline starts again.
    pub fn progressed(&mut self) {
        self.since = Instant::now();
    }

    /// After an empty poll: yields the CPU, which the device's own threads
    /// need to make progress (measured on 2 CPUs: 1-byte RC round trips
    /// took 3x longer when yielding only every 64 polls). True once
    /// nothing has arrived for longer than the timeout.
    pub fn idle(&mut self) -> bool {
        std::thread::yield_now();
        self.polls = self.polls.wrapping_add(1);
        self.polls % CLOCK_EVERY == 0 && self.timeout.is_some_and(|t| self.since.elapsed() > t)
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No wall-clock race: the wait's start is moved back in time instead
    /// of sleeping past a short timeout on a loaded machine.
    #[test]
    fn times_out_only_after_the_timeout_and_only_with_one() {
        let hour = Duration::from_secs(3600);
        let mut w = BusyPoll::new(Some(hour));
        assert!(!(0..4 * CLOCK_EVERY).any(|_| w.idle()), "too early");
        w.since = Instant::now()
            .checked_sub(2 * hour)
            .expect("a clock two hours in");
        assert!((0..CLOCK_EVERY).any(|_| w.idle()), "the timeout passed");
        assert!(
            !(0..CLOCK_EVERY - 1).any(|_| w.idle()),
            "the clock is read only every CLOCK_EVERY polls"
        );
        w.progressed();
        assert!(
            !(0..4 * CLOCK_EVERY).any(|_| w.idle()),
            "progress restarts it"
        );
        let mut forever = BusyPoll::new(None);
        forever.since = w.since.checked_sub(2 * hour).unwrap_or(w.since);
        assert!(!(0..4 * CLOCK_EVERY).any(|_| forever.idle()));
    }
}
