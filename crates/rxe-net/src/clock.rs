//! The device's clock: the engine has none (`rxe_core::transport::Instant`
//! is nanoseconds since an epoch the caller chooses), so the device picks
//! one monotonic base and hands out times relative to it.

use std::time::Duration;

use rxe_core::transport::Instant;

/// A monotonic clock whose epoch is the moment it was made. Copies share
/// the epoch, so every thread of one device agrees on what an `Instant`
/// means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    base: std::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            base: std::time::Instant::now(),
        }
    }

    /// Now, in nanoseconds since the clock's epoch (saturating after ~584
    /// years).
    pub fn now(&self) -> Instant {
        let ns = self.base.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// How long until `t`; zero if it has passed.
    pub fn until(&self, t: Instant) -> Duration {
        t.saturating_since(self.now())
    }

    /// `t` as a `std::time::Instant`, saturating at what the platform can
    /// represent.
    pub fn to_std(&self, t: Instant) -> std::time::Instant {
        let d = Duration::from_nanos(t.as_nanos());
        self.base
            .checked_add(d)
            .unwrap_or(self.base + Duration::from_secs(u32::MAX.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone>() {}

    #[test]
    fn monotonic_and_shared_by_copies() {
        assert_send_sync::<Clock>();
        let c = Clock::new();
        let d = c;
        let a = c.now();
        std::thread::sleep(Duration::from_millis(2));
        let b = d.now();
        assert!(b > a);
        assert!(b.saturating_since(a) >= Duration::from_millis(2));
        assert_eq!(c.until(a), Duration::ZERO);
        let later = a.saturating_add(Duration::from_secs(10));
        assert!(c.until(later) > Duration::from_secs(9));
        assert_eq!(c.to_std(Instant::ZERO), c.base);
        let _ = c.to_std(Instant::from_nanos(u64::MAX));
    }
}
