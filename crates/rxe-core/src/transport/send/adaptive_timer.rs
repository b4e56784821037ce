//! Adaptive retransmission: an RC requester that hears nothing for a few
//! measured round trips resends from its oldest unacknowledged PSN long
//! before the transport timer would.
//!
//! # Why
//!
//! The responder NAKs a sequence error once and then stays silent until
//! the PSN it expects arrives (IBTA 9.7.5.1.1: no further NAK except in
//! answer to a request with the expected PSN). So a lost NAK, or a
//! retransmitted packet lost again, is only repaired by the transport
//! timer: 67 ms at perftest's timeout 14, where the loopback round trip is
//! tens of µs. With 1 % loss that timer was most of a transfer's time.
//!
//! # Decisions, with their sources
//!
//! - Hardware does the same: NVIDIA ConnectX "Adaptive Retransmission"
//!   starts from a short timeout, doubles it on each timeout without
//!   progress, lowers it again on progress, caps it at the QP's
//!   `timeout`, and fails the QP only after the QP's own total
//!   (`timeout` × `retry_cnt`) without progress (NVIDIA, "Adaptive
//!   Retransmission: Parameters Control").
//! - So here an early retransmission spends no retry and changes nothing
//!   of the transport timer: RETRY_EXC_ERR comes exactly when it would
//!   without this, and a peer that is merely slow costs duplicates (which
//!   the responder answers, IBTA 9.7.5.1.1), never the connection.
//! - The interval is the round-trip estimate of RFC 6298 (smoothed RTT
//!   plus four mean deviations), at least [`FLOOR`], doubled for each early
//!   retransmission without progress, and never at or past the nominal
//!   timeout: from there on the transport timer alone acts.
//! - Samples, as Karn's algorithm: one packet at a time is timed, a packet
//!   with AckReq that is sent for the first time (the responder answers it
//!   at once), not a READ request (its "acknowledgement" is its whole
//!   response), and a retransmission discards the sample in flight.
//! - Before the first sample the interval is [`INITIAL`].
//! - Only after a loss: the timer acts for [`LOSS_MEMORY`] after the QP's
//!   last sign of one (a NAK sequence error, an implied NAK, a transport
//!   timeout). A queue that fills faster than the estimate follows makes a
//!   round trip jump by milliseconds; on a path that has lost nothing,
//!   resending then would only add load where there is congestion.

use core::time::Duration;

use crate::transport::psn::Psn;
use crate::transport::time::Instant;

/// The shortest early-retransmission interval. A busy 2-core host
/// deschedules a process for a few ms; a retransmission that comes too
/// early only costs duplicates, one that comes too late costs idle time.
pub(crate) const FLOOR: Duration = Duration::from_millis(1);
/// The interval before any round trip has been measured.
pub(crate) const INITIAL: Duration = Duration::from_millis(4);
/// How long after a sign of loss early retransmissions stay enabled.
pub(crate) const LOSS_MEMORY: Duration = Duration::from_millis(500);
/// At most this many doublings without progress (FLOOR × 2^10 ≈ 1 s, past
/// any nominal timeout an application uses with this enabled).
const MAX_BACKOFF: u32 = 10;

/// One QP's round-trip estimate and early-retransmission deadline.
#[derive(Debug, Clone, Default)]
pub(crate) struct AdaptiveTimer {
    enabled: bool,
    /// Smoothed round trip and its mean deviation, in ns (RFC 6298 2.2).
    srtt: Option<u64>,
    rttvar: u64,
    /// The packet being timed, and when it left.
    sample: Option<(Psn, Instant)>,
    /// Early retransmissions since the last progress.
    backoff: u32,
    /// When the next early retransmission is due.
    due: Option<Instant>,
    /// The last sign of loss.
    loss_at: Option<Instant>,
}

impl AdaptiveTimer {
    /// A timer that never fires unless `enabled`.
    pub(crate) fn new(enabled: bool) -> AdaptiveTimer {
        AdaptiveTimer {
            enabled,
            ..AdaptiveTimer::default()
        }
    }

    /// When the next early retransmission is due, if one is.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The current interval at `now`: `None` with no recent loss, or
    /// when it would reach the nominal timeout (or there is none), so that
    /// the transport timer alone acts.
    fn interval(&self, now: Instant, nominal: Option<Duration>) -> Option<Duration> {
        let nominal = nominal?;
        let lossy = self
            .loss_at
            .is_some_and(|t| now.saturating_since(t) < LOSS_MEMORY);
        if !self.enabled || !lossy {
            return None;
        }
        let base = match self.srtt {
            Some(srtt) => Duration::from_nanos(srtt.saturating_add(4 * self.rttvar)).max(FLOOR),
            None => INITIAL,
        };
        let t = base.saturating_mul(1 << self.backoff.min(MAX_BACKOFF));
        (t < nominal).then_some(t)
    }

    /// A packet with PSN `psn` went out at `now`; `timed` if it may be the
    /// sample (first transmission, AckReq, not a READ request). Arms the
    /// deadline if none is running.
    pub(crate) fn on_sent(
        &mut self,
        psn: Psn,
        timed: bool,
        now: Instant,
        nominal: Option<Duration>,
    ) {
        if !self.enabled {
            return;
        }
        if timed && self.sample.is_none() {
            self.sample = Some((psn, now));
        }
        if self.due.is_none() {
            self.due = self.interval(now, nominal).map(|t| now.saturating_add(t));
        }
    }

    /// A sign of loss at `now` (a NAK sequence error, an implied NAK, a
    /// transport timeout): early retransmissions are enabled for
    /// [`LOSS_MEMORY`]; the retransmission it causes arms the deadline.
    pub(crate) fn on_loss(&mut self, now: Instant) {
        self.loss_at = Some(now);
    }

    /// PSNs before `una` were newly acknowledged at `now`: take the sample
    /// if it is among them, start the interval over, and re-arm while
    /// PSNs are still `outstanding`.
    pub(crate) fn on_progress(
        &mut self,
        una: Psn,
        now: Instant,
        nominal: Option<Duration>,
        outstanding: bool,
    ) {
        if !self.enabled {
            return;
        }
        if let Some((psn, sent)) = self.sample {
            if psn.is_before(una) {
                self.sample = None;
                self.measure(now.saturating_since(sent));
            }
        }
        self.backoff = 0;
        self.due = if outstanding {
            self.interval(now, nominal).map(|t| now.saturating_add(t))
        } else {
            None
        };
    }

    /// RFC 6298 2.2 and 2.3, with its gains of 1/8 and 1/4.
    fn measure(&mut self, rtt: Duration) {
        let r = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
    }

    /// Whether an early retransmission is due at `now`. If so it is taken:
    /// the sample is dropped (the timed packet goes out again), the
    /// interval doubles and the next deadline is set from `now`.
    pub(crate) fn fire(&mut self, now: Instant, nominal: Option<Duration>) -> bool {
        if self.due.is_none_or(|t| t > now) {
            return false;
        }
        self.sample = None;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.due = self.interval(now, nominal).map(|t| now.saturating_add(t));
        true
    }

    /// A retransmission of any cause: the packet being timed will be sent
    /// again, so its acknowledgement no longer says when it arrived.
    pub(crate) fn forget_sample(&mut self) {
        self.sample = None;
    }

    /// Nothing outstanding any more, or a wait (RNR) that is not a loss:
    /// no early retransmission until packets go out again.
    pub(crate) fn stop(&mut self) {
        self.due = None;
    }

    /// The smoothed round trip, once measured.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOMINAL: Option<Duration> = Some(Duration::from_millis(67));

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    /// A timer that has seen a loss at time 0.
    fn lossy() -> AdaptiveTimer {
        let mut t = AdaptiveTimer::new(true);
        t.on_loss(at(0));
        t
    }

    #[test]
    fn disabled_never_fires() {
        let mut t = AdaptiveTimer::new(false);
        t.on_loss(at(0));
        t.on_sent(Psn::new(1), true, at(0), NOMINAL);
        assert_eq!(t.due(), None);
        assert!(!t.fire(at(1_000_000), NOMINAL));
    }

    #[test]
    fn first_interval_is_initial_then_measured_with_floor() {
        let mut t = lossy();
        t.on_sent(Psn::new(10), true, at(0), NOMINAL);
        assert_eq!(t.due(), Some(at(0).saturating_add(INITIAL)));
        // A 30 µs round trip: srtt 30, rttvar 15, 90 µs, below the floor.
        t.on_progress(Psn::new(11), at(30), NOMINAL, true);
        assert_eq!(t.srtt(), Some(Duration::from_micros(30)));
        assert_eq!(t.due(), Some(at(30).saturating_add(FLOOR)));
        // Nothing outstanding: no deadline.
        t.on_progress(Psn::new(11), at(40), NOMINAL, false);
        assert_eq!(t.due(), None);
    }

    #[test]
    fn a_long_round_trip_sets_the_interval() {
        let mut t = lossy();
        t.on_sent(Psn::new(0), true, at(0), NOMINAL);
        t.on_progress(Psn::new(1), at(2_000), NOMINAL, true);
        // srtt 2 ms + 4 × 1 ms.
        assert_eq!(t.due(), Some(at(2_000 + 6_000)));
    }

    #[test]
    fn only_the_timed_packet_is_sampled() {
        let mut t = AdaptiveTimer::new(true);
        t.on_sent(Psn::new(5), false, at(0), NOMINAL);
        t.on_sent(Psn::new(6), true, at(10), NOMINAL);
        t.on_sent(Psn::new(7), true, at(20), NOMINAL);
        // An ACK of 5 only: the sample (6) is still in flight.
        t.on_progress(Psn::new(6), at(100), NOMINAL, true);
        assert_eq!(t.srtt(), None);
        t.on_progress(Psn::new(8), at(110), NOMINAL, false);
        assert_eq!(t.srtt(), Some(Duration::from_micros(100)));
    }

    #[test]
    fn fires_doubles_and_stops_short_of_the_nominal_timeout() {
        let mut t = lossy();
        t.on_sent(Psn::new(0), true, at(0), NOMINAL);
        t.on_progress(Psn::new(1), at(10), NOMINAL, true);
        t.on_sent(Psn::new(1), true, at(10), NOMINAL);
        let mut now = at(10).saturating_add(FLOOR);
        assert!(!t.fire(at(500), NOMINAL));
        let mut fired = 0;
        while t.fire(now, NOMINAL) {
            fired += 1;
            let Some(next) = t.due() else { break };
            assert_eq!(
                next.saturating_since(now),
                FLOOR * (1 << fired),
                "doubles each time"
            );
            now = next;
        }
        // 1, 2, 4, ..., 64 ms: 64 ms is below 67, 128 is not.
        assert_eq!(fired, 7);
        assert_eq!(t.due(), None);
        // Progress starts over from the measured interval.
        t.on_progress(Psn::new(2), now, NOMINAL, true);
        assert_eq!(t.due(), Some(now.saturating_add(FLOOR)));
    }

    #[test]
    fn without_a_recent_loss_it_stays_quiet() {
        let mut t = AdaptiveTimer::new(true);
        t.on_sent(Psn::new(0), true, at(0), NOMINAL);
        t.on_progress(Psn::new(1), at(30), NOMINAL, true);
        assert_eq!(t.due(), None, "no loss yet");
        // The round trip is measured all the same.
        assert_eq!(t.srtt(), Some(Duration::from_micros(30)));
        t.on_loss(at(40));
        t.on_sent(Psn::new(1), true, at(40), NOMINAL);
        assert_eq!(t.due(), Some(at(40).saturating_add(FLOOR)));
        // Long after that loss, progress leaves it disarmed again.
        let later = at(40).saturating_add(LOSS_MEMORY);
        t.on_progress(Psn::new(2), later, NOMINAL, true);
        assert_eq!(t.due(), None);
    }

    #[test]
    fn a_retransmission_drops_the_sample() {
        let mut t = AdaptiveTimer::new(true);
        t.on_sent(Psn::new(3), true, at(0), NOMINAL);
        t.forget_sample();
        t.on_progress(Psn::new(4), at(5_000), NOMINAL, false);
        assert_eq!(t.srtt(), None);
    }

    #[test]
    fn no_nominal_timeout_means_no_early_retransmission() {
        let mut t = lossy();
        t.on_sent(Psn::new(0), true, at(0), None);
        assert_eq!(t.due(), None);
        // A short nominal timeout leaves no room below it.
        t.on_sent(Psn::new(1), true, at(0), Some(Duration::from_millis(1)));
        assert_eq!(t.due(), None);
    }
}
