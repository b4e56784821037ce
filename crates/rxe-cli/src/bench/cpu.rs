//! CPU time as getrusage(2) counts it, user plus system: of the calling
//! thread (the raw UDP sides run as threads of `rxe bench`) or of the
//! children reaped so far (the rxe sides run as `rxe perf` child
//! processes, so that every thread of each side's device is counted).

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

fn of(who: UsageWho) -> Duration {
    match getrusage(who) {
        Ok(u) => tv(u.user_time()) + tv(u.system_time()),
        Err(e) => {
            tracing::warn!(error = %e, "getrusage failed");
            Duration::ZERO
        }
    }
}

fn tv(t: TimeVal) -> Duration {
    let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
    let micros = u64::try_from(t.tv_usec()).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// The calling thread's CPU time so far.
pub fn thread() -> Duration {
    of(UsageWho::RUSAGE_THREAD)
}

/// The CPU time of every child waited for so far (grandchildren
/// included, once waited for by their parent).
pub fn children() -> Duration {
    of(UsageWho::RUSAGE_CHILDREN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_spins_is_charged_for_it() {
        let before = thread();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // Spinning 30 ms of wall clock costs CPU (at least a few ms even
        // on a loaded machine) and never less than nothing.
        assert!(thread() > before, "no CPU time counted");
    }
}
