//! Time as a value. The engine has no clock: every call that needs the
//! time is given it, so a simulator can drive it deterministically.

use core::time::Duration;

/// A point in time, in nanoseconds since an epoch the caller chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time rather than wrapping.
    pub fn saturating_add(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_and_since_clamps() {
        let t = Instant::from_nanos(10);
        assert_eq!(
            t.saturating_add(Duration::from_nanos(5)),
            Instant::from_nanos(15)
        );
        assert_eq!(
            Instant::from_nanos(u64::MAX - 1).saturating_add(Duration::MAX),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(t.saturating_since(Instant::from_nanos(20)), Duration::ZERO);
        assert_eq!(
            Instant::from_nanos(20).saturating_since(t),
            Duration::from_nanos(10)
        );
    }
}
