//! DCQCN, the reaction point (RP) of RoCEv2 congestion control, as a pure
//! state machine: CNPs and sent bytes in, the QP's sending rate out, with
//! the time of every call given (sans-IO). The endpoint asks it when the
//! QP may send its next packet ([`Dcqcn::send_at`]) and tells it what was
//! sent ([`Dcqcn::on_sent`]).
//!
//! # Decisions, with their sources
//!
//! - The algorithm is the one of Zhu et al., "Congestion Control for
//!   Large-Scale RDMA Deployments" (SIGCOMM 2015), as ConnectX firmware
//!   implements it, with the firmware's parameter names (`rpg_*`, `dce_tcp_*`,
//!   the `ecn/roce_rp` sysfs names of mlx5) and defaults as NVIDIA's "DCQCN
//!   CC Parameters" table gives them ([`DcqcnParams::default`]).
//! - Rate reduction on a CNP: the target rate becomes the current rate
//!   (`Rt = Rc`), the current rate is cut by `alpha / 2` (firmware: the
//!   10-bit fixed-point alpha shifted right by `rpg_gd` = 11, which is
//!   `alpha / 2` exactly), never by more than `rpg_min_dec_fac` percent of
//!   it, and never below `rpg_min_rate`; the increase counters restart. At
//!   most one reduction per `rate_reduce_monitor_period`: a CNP inside that
//!   period is remembered and its reduction applied when the period ends.
//!   The paper's rule `Rt = Rc` at every reduction is applied always (the
//!   firmware's `clamp_tgt_rate` variants are not offered).
//! - The first CNP of a QP at line rate starts the state: rate
//!   `rate_to_set_on_first_cnp` (0: the line rate, `rpg_max_rate`), alpha
//!   `initial_alpha_value`, then the reduction above.
//! - Alpha: once per `dce_tcp_rtt`, `alpha = (1 - g) alpha + g` if a CNP
//!   arrived in that period, `alpha = (1 - g) alpha` otherwise, with
//!   `g = (1024 - dce_tcp_g) / 1024` (the firmware's 10-bit fixed point).
//! - Rate increase: two counters, the timer `T` (one step every
//!   `rpg_time_reset`) and the byte counter `BC` (one step every
//!   `rpg_byte_reset` × 64 bytes sent). Each step is an increase event:
//!   while both counters are at most `rpg_threshold` (F), fast recovery
//!   `Rc = (Rt + Rc) / 2`; when both exceed F, hyper increase
//!   `Rt += rpg_hai_rate`; otherwise additive increase `Rt += rpg_ai_rate`;
//!   after either, `Rc = (Rt + Rc) / 2`. (Reading F as "the number of
//!   times a stage counter counts before the state advances", as the
//!   firmware's description of `rpg_threshold` says; the paper's F = 5 gives
//!   its five fast-recovery steps.) Rates never exceed `rpg_max_rate`.
//! - Once the current rate is back at the line rate the QP is released:
//!   no pacing, no state, as before its first CNP.
//! - Lazy timers: the alpha and rate-increase timers are not engine timers.
//!   Each call first replays the timer events due since the last call, in
//!   time order ([`Dcqcn::advance`]), which gives the rate that periodic
//!   timers would have given, with no wake-up for an idle QP. A replay
//!   longer than [`MAX_REPLAY_EVENTS`] steps releases the QP: that many
//!   increase steps without a CNP bring any rate back to line rate.
//! - Pacing: a packet of `n` bytes at rate `R` holds the next one back by
//!   `n × 8 / R`. A QP that was held back less than it could have been
//!   (the device woke late) may catch up, but by at most [`PACING_SLACK`]
//!   worth of sending, so an idle QP does not burst at line rate when it
//!   starts again. The bytes counted are the transport bytes (BTH through
//!   ICRC) of every request packet.

use core::time::Duration;

use super::time::Instant;

/// How far behind its schedule a paced QP may fall and still catch up
/// (send back to back). The device's driver sleeps in epoll, whose timeout
/// has millisecond resolution (mio rounds up), so a QP paced at 20 µs a
/// packet is woken about once a millisecond: with 100 µs of slack it
/// kept a tenth of its rate (measured in the namespace test, a flow
/// DCQCN allowed 400 Mb/s moved 110). 2 ms lets the rate hold across
/// such wake-ups; the price is a burst of at most 2 ms at the QP's rate.
pub const PACING_SLACK: Duration = Duration::from_millis(2);
/// The most timer events one call replays before it gives up and releases
/// the QP (see the module's decisions).
pub const MAX_REPLAY_EVENTS: u32 = 100_000;

/// The reaction point's parameters, named after ConnectX firmware's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnParams {
    /// `rpg_max_rate`, Mb/s: the line rate, where a QP is released.
    /// ConnectX's 0 means the port's speed; rxe has no wire of its own, so
    /// the default is a rate above what it moves on one QP (25 Gb/s).
    pub max_rate_mbps: u32,
    /// `rpg_min_rate`, Mb/s (default 1).
    pub min_rate_mbps: u32,
    /// `rate_to_set_on_first_cnp`, Mb/s; 0 (default): the line rate.
    pub rate_on_first_cnp_mbps: u32,
    /// `rpg_min_dec_fac`, percent (default 50): a reduction keeps at least
    /// this share of the current rate.
    pub min_dec_fac: u8,
    /// `rpg_gd` (default 11): the rate is cut by alpha (10-bit fixed
    /// point) shifted right by this.
    pub gd: u8,
    /// `rate_reduce_monitor_period` (default 4 µs): at most one reduction
    /// per period.
    pub rate_reduce_monitor_period: Duration,
    /// `initial_alpha_value`, in 1/1024 (default 1023).
    pub initial_alpha: u16,
    /// `dce_tcp_g`, in 1/1024 (default 1019): `g = (1024 - dce_tcp_g) / 1024`.
    pub dce_tcp_g: u16,
    /// `dce_tcp_rtt` (default 1 µs): the alpha update period.
    pub dce_tcp_rtt: Duration,
    /// `rpg_time_reset` (default 300 µs): the rate-increase timer.
    pub time_reset: Duration,
    /// `rpg_byte_reset`, in 64-byte units (default 32767, about 2 MiB): the
    /// rate-increase byte counter.
    pub byte_reset: u32,
    /// `rpg_threshold` (default 1): F, the steps of fast recovery.
    pub threshold: u32,
    /// `rpg_ai_rate`, Mb/s (default 5): the additive increase.
    pub ai_rate_mbps: u32,
    /// `rpg_hai_rate`, Mb/s (default 50): the hyper increase.
    pub hai_rate_mbps: u32,
}

impl Default for DcqcnParams {
    fn default() -> DcqcnParams {
        DcqcnParams {
            max_rate_mbps: 25_000,
            min_rate_mbps: 1,
            rate_on_first_cnp_mbps: 0,
            min_dec_fac: 50,
            gd: 11,
            rate_reduce_monitor_period: Duration::from_micros(4),
            initial_alpha: 1023,
            dce_tcp_g: 1019,
            dce_tcp_rtt: Duration::from_micros(1),
            time_reset: Duration::from_micros(300),
            byte_reset: 32767,
            threshold: 1,
            ai_rate_mbps: 5,
            hai_rate_mbps: 50,
        }
    }
}

impl DcqcnParams {
    /// The parameters made safe to compute with: rates at least 1 Mb/s,
    /// the minimum not above the maximum, periods and counters at least 1.
    fn sane(mut self) -> DcqcnParams {
        self.max_rate_mbps = self.max_rate_mbps.max(1);
        self.min_rate_mbps = self.min_rate_mbps.clamp(1, self.max_rate_mbps);
        self.min_dec_fac = self.min_dec_fac.min(100);
        self.gd = self.gd.min(31);
        self.initial_alpha = self.initial_alpha.min(1024);
        self.dce_tcp_g = self.dce_tcp_g.min(1024);
        let one_us = Duration::from_micros(1);
        self.dce_tcp_rtt = self.dce_tcp_rtt.max(one_us);
        self.time_reset = self.time_reset.max(one_us);
        self.byte_reset = self.byte_reset.max(1);
        self
    }
}

/// What a CNP did to the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CnpEffect {
    /// The rate was reduced now.
    Reduced,
    /// Inside the monitor period of the last reduction: the next one is
    /// due when that period ends.
    Deferred,
}

/// The rate state of one QP.
#[derive(Debug, Clone)]
pub struct Dcqcn {
    p: DcqcnParams,
    /// Whether the QP is rate limited at all (it is from its first CNP
    /// until its rate is back at line rate).
    limited: bool,
    /// Current and target rates, Mb/s.
    rc: f64,
    rt: f64,
    /// In [0, 1].
    alpha: f64,
    /// Start of the current alpha period, and whether a CNP came in it.
    alpha_at: Instant,
    cnp_in_period: bool,
    /// The last reduction, and a CNP waiting for its monitor period to end.
    reduced_at: Instant,
    reduce_pending: bool,
    /// The next rate-increase timer event.
    timer_at: Instant,
    /// Increase steps of the timer and of the byte counter since the last
    /// reduction.
    t_count: u32,
    bc_count: u32,
    /// Bytes sent since the byte counter's last step.
    bytes: u64,
    /// Pacing: the earliest time of the next packet.
    next_send: Instant,
    reductions: u64,
}

impl Dcqcn {
    /// A QP at line rate: not limited until its first CNP.
    pub fn new(params: DcqcnParams) -> Dcqcn {
        let p = params.sane();
        Dcqcn {
            p,
            limited: false,
            rc: f64::from(p.max_rate_mbps),
            rt: f64::from(p.max_rate_mbps),
            alpha: 0.0,
            alpha_at: Instant::ZERO,
            cnp_in_period: false,
            reduced_at: Instant::ZERO,
            reduce_pending: false,
            timer_at: Instant::ZERO,
            t_count: 0,
            bc_count: 0,
            bytes: 0,
            next_send: Instant::ZERO,
            reductions: 0,
        }
    }

    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// Whether the QP is paced (between a CNP and its recovery).
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// The current rate, Mb/s (the line rate when not limited).
    pub fn rate_mbps(&self) -> f64 {
        self.rc
    }

    /// The target rate, Mb/s.
    pub fn target_mbps(&self) -> f64 {
        self.rt
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Rate reductions so far.
    pub fn reductions(&self) -> u64 {
        self.reductions
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Instant) -> CnpEffect {
        self.advance(now);
        if !self.limited {
            self.limited = true;
            let first = match self.p.rate_on_first_cnp_mbps {
                0 => self.p.max_rate_mbps,
                r => r.min(self.p.max_rate_mbps),
            };
            self.rc = f64::from(first);
            self.rt = self.rc;
            self.alpha = f64::from(self.p.initial_alpha) / 1024.0;
            self.alpha_at = now;
            self.next_send = now;
            self.reduce(now);
            // The first CNP set alpha; it does not raise it again.
            self.cnp_in_period = false;
            return CnpEffect::Reduced;
        }
        self.cnp_in_period = true;
        if now.saturating_since(self.reduced_at) >= self.p.rate_reduce_monitor_period {
            self.reduce(now);
            CnpEffect::Reduced
        } else {
            self.reduce_pending = true;
            CnpEffect::Deferred
        }
    }

    /// `bytes` were sent at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if !self.limited {
            return;
        }
        self.advance(now);
        if !self.limited {
            return;
        }
        // The next packet waits for this one's time at the current rate.
        let ns = (bytes as f64 * 8_000.0 / self.rc).ceil() as u64;
        let floor = Instant::from_nanos(
            now.as_nanos()
                .saturating_sub(PACING_SLACK.as_nanos() as u64),
        );
        self.next_send = self
            .next_send
            .max(floor)
            .saturating_add(Duration::from_nanos(ns));
        self.bytes = self.bytes.saturating_add(bytes as u64);
        let step = u64::from(self.p.byte_reset) * 64;
        while self.limited && self.bytes >= step {
            self.bytes -= step;
            self.bc_count = self.bc_count.saturating_add(1);
            self.increase();
        }
    }

    /// When the QP may send its next packet: `None` if now (or it is not
    /// limited), else the time to wake it.
    pub fn send_at(&mut self, now: Instant) -> Option<Instant> {
        if !self.limited {
            return None;
        }
        self.advance(now);
        (self.limited && self.next_send > now).then_some(self.next_send)
    }

    /// Replays the timer events due by `now`: the alpha periods, a
    /// deferred reduction, the rate-increase timer.
    pub fn advance(&mut self, now: Instant) {
        if !self.limited {
            return;
        }
        self.advance_alpha(now);
        let mut events = 0u32;
        loop {
            let reduce_due = self
                .reduce_pending
                .then(|| {
                    self.reduced_at
                        .saturating_add(self.p.rate_reduce_monitor_period)
                })
                .filter(|t| *t <= now);
            let timer_due = (self.timer_at <= now).then_some(self.timer_at);
            match (reduce_due, timer_due) {
                (Some(r), t) if t.is_none_or(|t| r <= t) => {
                    self.reduce_pending = false;
                    self.reduce(r);
                }
                (_, Some(t)) => {
                    self.timer_at = t.saturating_add(self.p.time_reset);
                    self.t_count = self.t_count.saturating_add(1);
                    self.increase();
                }
                _ => break,
            }
            events += 1;
            if !self.limited {
                return;
            }
            if events >= MAX_REPLAY_EVENTS {
                self.release();
                return;
            }
        }
    }

    fn advance_alpha(&mut self, now: Instant) {
        let period = self.p.dce_tcp_rtt.as_nanos() as u64;
        let elapsed = now.saturating_since(self.alpha_at).as_nanos() as u64;
        let n = elapsed / period;
        if n == 0 {
            return;
        }
        let keep = f64::from(self.p.dce_tcp_g) / 1024.0;
        let g = 1.0 - keep;
        let mut rest = n;
        if self.cnp_in_period {
            self.alpha = keep * self.alpha + g;
            self.cnp_in_period = false;
            rest -= 1;
        }
        // (1 - g)^rest, without a loop over possibly millions of periods.
        let rest = i32::try_from(rest).unwrap_or(i32::MAX);
        self.alpha = (self.alpha * keep.powi(rest)).clamp(0.0, 1.0);
        self.alpha_at = Instant::from_nanos(self.alpha_at.as_nanos().saturating_add(n * period));
    }

    fn reduce(&mut self, now: Instant) {
        self.rt = self.rc;
        let cut = self.alpha * 1024.0 / f64::from(1u32 << self.p.gd);
        let keep = (1.0 - cut).max(f64::from(self.p.min_dec_fac) / 100.0);
        self.rc = (self.rc * keep).max(f64::from(self.p.min_rate_mbps));
        self.t_count = 0;
        self.bc_count = 0;
        self.bytes = 0;
        self.timer_at = now.saturating_add(self.p.time_reset);
        self.reduced_at = now;
        self.reductions += 1;
    }

    fn increase(&mut self) {
        let f = self.p.threshold;
        let max = f64::from(self.p.max_rate_mbps);
        if self.t_count.max(self.bc_count) <= f {
            // Fast recovery: towards the rate before the last reduction.
        } else if self.t_count.min(self.bc_count) > f {
            self.rt += f64::from(self.p.hai_rate_mbps);
        } else {
            self.rt += f64::from(self.p.ai_rate_mbps);
        }
        self.rt = self.rt.min(max);
        self.rc = ((self.rt + self.rc) / 2.0).min(max);
        // Halving the distance never reaches the target exactly: within
        // a thousandth of a Mb/s of the line rate is the line rate.
        if max - self.rc < 1e-3 {
            self.release();
        }
    }

    fn release(&mut self) {
        *self = Dcqcn {
            reductions: self.reductions,
            ..Dcqcn::new(self.p)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Instant {
        Instant::from_nanos(n * 1000)
    }

    fn params() -> DcqcnParams {
        DcqcnParams {
            max_rate_mbps: 10_000,
            ..DcqcnParams::default()
        }
    }

    #[test]
    fn defaults_are_connectx_firmware_values() {
        let p = DcqcnParams::default();
        assert_eq!(
            (p.ai_rate_mbps, p.hai_rate_mbps, p.threshold, p.byte_reset),
            (5, 50, 1, 32767)
        );
        assert_eq!(p.time_reset, Duration::from_micros(300));
        assert_eq!(
            (p.dce_tcp_g, p.initial_alpha, p.gd, p.min_dec_fac),
            (1019, 1023, 11, 50)
        );
        assert_eq!(p.dce_tcp_rtt, Duration::from_micros(1));
        assert_eq!(p.rate_reduce_monitor_period, Duration::from_micros(4));
        assert_eq!((p.min_rate_mbps, p.rate_on_first_cnp_mbps), (1, 0));
    }

    #[test]
    fn unlimited_until_the_first_cnp_then_halved() {
        let mut d = Dcqcn::new(params());
        assert!(!d.is_limited());
        assert_eq!(d.send_at(us(5)), None);
        d.on_sent(us(5), 4096);
        assert_eq!(d.send_at(us(5)), None, "no pacing before a CNP");
        assert_eq!(d.on_cnp(us(10)), CnpEffect::Reduced);
        assert!(d.is_limited());
        // alpha 1023/1024, cut by alpha/2.
        let want = 10_000.0 * (1.0 - 1023.0 / 2048.0);
        assert!((d.rate_mbps() - want).abs() < 1e-6, "{}", d.rate_mbps());
        assert_eq!(d.target_mbps(), 10_000.0);
        assert_eq!(d.reductions(), 1);
    }

    #[test]
    fn a_second_cnp_inside_the_monitor_period_waits_for_its_end() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(0));
        let r1 = d.rate_mbps();
        assert_eq!(d.on_cnp(us(2)), CnpEffect::Deferred);
        assert_eq!(d.rate_mbps(), r1);
        d.advance(us(4));
        assert_eq!(d.reductions(), 2);
        assert!(d.rate_mbps() < r1 * 0.6);
        // Past the period a CNP reduces at once.
        assert_eq!(d.on_cnp(us(20)), CnpEffect::Reduced);
        assert_eq!(d.reductions(), 3);
    }

    #[test]
    fn alpha_rises_with_cnps_and_decays_without() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(0));
        let a0 = d.alpha();
        d.advance(us(1000));
        let g: f64 = 5.0 / 1024.0;
        let want = a0 * (1.0 - g).powi(1000);
        assert!((d.alpha() - want).abs() < 1e-9, "{} vs {want}", d.alpha());
        let low = d.alpha();
        d.on_cnp(us(1000));
        d.advance(us(1001));
        let want = (1.0 - g) * low + g;
        assert!((d.alpha() - want).abs() < 1e-9);
    }

    #[test]
    fn a_reduction_never_cuts_below_min_dec_fac_or_min_rate() {
        let p = DcqcnParams {
            gd: 9, // cut = 2 alpha: more than the 50 % floor allows
            ..params()
        };
        let mut d = Dcqcn::new(p);
        d.on_cnp(us(0));
        assert!((d.rate_mbps() - 5_000.0).abs() < 1e-6);
        let mut t = 0;
        for _ in 0..40 {
            t += 10;
            d.on_cnp(us(t));
        }
        assert_eq!(d.rate_mbps(), 1.0);
    }

    #[test]
    fn increase_stages_fast_recovery_then_additive_then_hyper() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(0));
        d.on_cnp(us(10));
        let (rc0, rt0) = (d.rate_mbps(), d.target_mbps());
        assert!(rt0 < 9_000.0);
        // Timer step 1 (T = 1 <= F): fast recovery, Rt unchanged.
        d.advance(us(310));
        assert_eq!(d.target_mbps(), rt0);
        assert!((d.rate_mbps() - (rt0 + rc0) / 2.0).abs() < 1e-6);
        // Timer step 2 (T = 2 > F, BC = 0): additive increase.
        d.advance(us(610));
        assert!((d.target_mbps() - (rt0 + 5.0)).abs() < 1e-6);
        // Byte step 1 (BC = 1, not > F): additive again.
        let step = 32767 * 64;
        d.on_sent(us(610), step);
        assert!((d.target_mbps() - (rt0 + 10.0)).abs() < 1e-6);
        // Byte step 2: both counters > F: hyper increase.
        d.on_sent(us(610), step);
        assert!((d.target_mbps() - (rt0 + 60.0)).abs() < 1e-6);
        let rc = d.rate_mbps();
        assert!(rc > rc0 && rc < d.target_mbps());
    }

    #[test]
    fn recovers_to_line_rate_and_releases() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(0));
        assert!(d.is_limited());
        // Rt is the line rate (the first reduction's target): timer steps
        // alone bring Rc back to it.
        d.advance(us(300 * 40));
        assert!(!d.is_limited(), "rate {}", d.rate_mbps());
        assert_eq!(d.rate_mbps(), 10_000.0);
        assert_eq!(d.send_at(us(300 * 41)), None);
        assert_eq!(d.reductions(), 1, "kept across the release");
    }

    #[test]
    fn a_long_idle_replays_in_bounded_time() {
        let mut d = Dcqcn::new(DcqcnParams {
            time_reset: Duration::from_micros(1),
            ai_rate_mbps: 0,
            hai_rate_mbps: 0,
            ..params()
        });
        d.on_cnp(us(0));
        d.on_cnp(us(10));
        // Rt below line rate and no increase: only the replay bound ends it.
        d.advance(us(10_000_000));
        assert!(!d.is_limited());
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate() {
        let mut d = Dcqcn::new(DcqcnParams {
            rate_on_first_cnp_mbps: 2_000,
            ..params()
        });
        d.on_cnp(us(0));
        let rate = d.rate_mbps();
        d.on_sent(us(0), 1000);
        let at = d.send_at(us(0)).expect("paced");
        let want = (1000.0 * 8_000.0 / rate).ceil() as u64;
        assert_eq!(at.as_nanos(), want);
        // A late caller may catch up by at most PACING_SLACK.
        let late = us(10_000);
        d.on_sent(late, 1000);
        let next = d.send_at(late);
        assert!(next.is_none() || next.unwrap() <= late.saturating_add(PACING_SLACK));
        let mut t = late;
        let mut n = 0;
        while d.send_at(t).is_none() && n < 1000 {
            d.on_sent(t, 1000);
            n += 1;
        }
        let burst_bytes = n as f64 * 1000.0;
        let slack_bytes = PACING_SLACK.as_secs_f64() * d.rate_mbps() * 1e6 / 8.0;
        assert!(
            burst_bytes <= slack_bytes + 2000.0,
            "{burst_bytes} > {slack_bytes}"
        );
        t = d.send_at(t).unwrap();
        assert!(t > late);
    }

    #[test]
    fn nonsense_parameters_do_not_panic() {
        let p = DcqcnParams {
            max_rate_mbps: 0,
            min_rate_mbps: 0,
            gd: 200,
            dce_tcp_rtt: Duration::ZERO,
            time_reset: Duration::ZERO,
            byte_reset: 0,
            initial_alpha: u16::MAX,
            dce_tcp_g: u16::MAX,
            ..DcqcnParams::default()
        };
        let mut d = Dcqcn::new(p);
        for i in 0..100 {
            d.on_cnp(us(i));
            d.on_sent(us(i), 4096);
            let _ = d.send_at(us(i));
        }
        d.advance(Instant::from_nanos(u64::MAX));
        assert!(d.rate_mbps().is_finite());
    }
}
