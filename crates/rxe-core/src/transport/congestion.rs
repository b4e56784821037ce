//! RoCEv2 congestion control, per port: ECN on the packets a device sends,
//! the notification point (NP: a CE-marked packet makes the receiving QP
//! send a CNP to the QP that sent it) and the reaction point (RP: a CNP
//! lowers the QP's rate, `dcqcn`). This file holds the configuration and
//! the NP's per-QP state; the endpoint applies both.
//!
//! # Decisions, with their sources
//!
//! - The CNP (RoCEv2 Annex A17.9.3): BTH opcode 0x81, the P_Key of the QP,
//!   BECN set, DestQP the QPN of the QP that sent the marked packet (the
//!   connected QP's destination QPN), PSN 0, A 0, then 16 reserved zero
//!   bytes and the ICRC. Mellanox's "RoCEv2 CNP Packet Format Example"
//!   shows the same bytes (`81 00 ff ff 40 ...`).
//! - The NP answers CE on RC and UC QPs only: a connected QP knows its
//!   peer's QPN. (ConnectX also notifies for UD; rxe does not, because a
//!   UD sender's QPN comes from each packet's DETH and the reaction would
//!   rate-limit every destination of that QP.) Any CE-marked packet of the
//!   QP counts, requests and responses alike: READ responses carry the
//!   bulk of a READ's data.
//! - At most one CNP per QP per `min_time_between_cnps` (ConnectX
//!   `min_time_between_cnps`, default 4 µs as NVIDIA's DCQCN parameter
//!   table gives it); marked packets inside that time are counted
//!   (`np_cnp_suppressed`) and answered by nothing.
//! - CNPs go out non-ECT (a congestion signal must not be marked or
//!   dropped as data is) with DSCP `cnp_dscp` (ConnectX `cnp_dscp`, default
//!   48) and the 802.1p priority `cnp_802p_prio` (default 6, recorded for
//!   devices on a VLAN; rxe's UDP sockets carry no VLAN tag). Data packets
//!   go out ECT(0) when `ecn` is on (on by default, as on a ConnectX with
//!   ECN enabled), unless their address vector sets the ECN field itself. Both are the device's job (`rxe-net`): it reads the
//!   opcode of each packet.
//! - The RP ignores a CNP (`rp_cnp_ignored`) for an unknown QPN, a QP that
//!   is not RC or UC, a QP that cannot send (not RTS or SQD), a CNP that
//!   fails the QP's P_Key or path checks, and every CNP when the RP is
//!   off; it handles the rest (`rp_cnp_handled`), and counts each rate
//!   reduction (`rp_rate_reductions`).

use core::time::Duration;

use super::dcqcn::DcqcnParams;
use super::io::Transmit;
use super::qp::QpCommon;
use super::time::Instant;
use crate::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};

/// The CNP's 16 reserved bytes (Annex A17.9.3: sent as zero).
pub(crate) const CNP_RESERVED_LEN: usize = 16;

/// ConnectX's `cnp_dscp` default.
pub const DEFAULT_CNP_DSCP: u8 = 48;
/// ConnectX's `cnp_802p_prio` default.
pub const DEFAULT_CNP_PRIO: u8 = 6;
/// ConnectX's `min_time_between_cnps` default.
pub const DEFAULT_MIN_TIME_BETWEEN_CNPS: Duration = Duration::from_micros(4);
/// The ECN field (the low two bits of the IPv4 TOS / IPv6 traffic class,
/// RFC 3168 section 5).
pub const ECN_MASK: u8 = 0b11;
/// ECT(0): ECN-capable transport.
pub const ECN_ECT0: u8 = 0b10;
/// CE: congestion experienced.
pub const ECN_CE: u8 = 0b11;

/// A port's congestion control settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CongestionConfig {
    /// Send data packets ECN-capable, ECT(0) (the device's job).
    pub ecn: bool,
    /// Notification point: answer CE-marked packets with CNPs.
    pub np: bool,
    /// Reaction point: lower a QP's rate when a CNP arrives (DCQCN).
    pub rp: bool,
    /// `min_time_between_cnps`: per QP.
    pub min_time_between_cnps: Duration,
    /// `cnp_dscp`: the DSCP of CNPs (6 bits).
    pub cnp_dscp: u8,
    /// `cnp_802p_prio`: the priority of CNPs (3 bits).
    pub cnp_prio: u8,
    pub dcqcn: DcqcnParams,
}

impl Default for CongestionConfig {
    fn default() -> CongestionConfig {
        CongestionConfig {
            ecn: true,
            np: true,
            rp: true,
            min_time_between_cnps: DEFAULT_MIN_TIME_BETWEEN_CNPS,
            cnp_dscp: DEFAULT_CNP_DSCP,
            cnp_prio: DEFAULT_CNP_PRIO,
            dcqcn: DcqcnParams::default(),
        }
    }
}

impl CongestionConfig {
    /// Everything off: no ECT, no CNPs, no reaction (the kernel's
    /// Soft-RoCE behaves so).
    pub fn off() -> CongestionConfig {
        CongestionConfig {
            ecn: false,
            np: false,
            rp: false,
            ..CongestionConfig::default()
        }
    }

    /// The IPv4 TOS / IPv6 traffic class of a CNP: `cnp_dscp`, not ECT.
    pub fn cnp_traffic_class(&self) -> u8 {
        (self.cnp_dscp & 0x3f) << 2
    }

    /// The traffic class a data packet goes out with, from its address
    /// vector's (DSCP in the upper six bits): ECT(0) in the ECN field when
    /// `ecn` is on and the address vector leaves the field Not-ECT. An
    /// address vector that sets the ECN field itself keeps it (a test or
    /// the demo sends CE that way, standing in for a marking switch).
    pub fn data_traffic_class(&self, av_traffic_class: u8) -> u8 {
        data_traffic_class(self.ecn, av_traffic_class)
    }
}

/// [`CongestionConfig::data_traffic_class`] with `ecn` given alone (the
/// device's send path keeps only that bit).
pub const fn data_traffic_class(ecn: bool, av_traffic_class: u8) -> u8 {
    if ecn && av_traffic_class & ECN_MASK == 0 {
        av_traffic_class | ECN_ECT0
    } else {
        av_traffic_class
    }
}

/// Whether an IPv4 TOS / IPv6 traffic class says congestion experienced.
pub const fn is_ce(traffic_class: u8) -> bool {
    traffic_class & ECN_MASK == ECN_CE
}

/// The notification point's state of one QP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Notifier {
    /// When the last CNP was queued.
    last: Option<Instant>,
    /// A CNP waits to be sent.
    pub(crate) pending: bool,
}

impl Notifier {
    /// A CE-marked packet arrived at `now`: whether a CNP is due (it is
    /// then queued), or the last one was too recent.
    pub(crate) fn on_ce(&mut self, now: Instant, min_gap: Duration) -> bool {
        if self.last.is_some_and(|t| now.saturating_since(t) < min_gap) {
            return false;
        }
        self.last = Some(now);
        self.pending = true;
        true
    }
}

/// Writes the CNP of connected QP `common` to its peer QP into `buf`
/// (Annex A17.9.3; see the module's decisions). `None` when the QP has no
/// path or `buf` is too small.
pub(crate) fn emit_cnp(common: &QpCommon, buf: &mut [u8]) -> Option<Transmit> {
    let attrs = common.config.attrs();
    let dest = attrs.av?;
    let bth = BthRepr {
        opcode: Opcode::CNP,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: common.pkey,
        fecn: false,
        becn: true,
        dest_qp: attrs.dest_qpn?,
        ack_req: false,
        psn: 0,
    };
    let repr = TransportRepr::new(bth, ExtReprs::default(), CNP_RESERVED_LEN);
    let len = repr.emit(buf, &[0; CNP_RESERVED_LEN]).ok()?;
    Some(Transmit {
        len,
        dest,
        src_qpn: common.qpn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_classes_of_data_and_cnps() {
        let c = CongestionConfig::default();
        assert_eq!(c.data_traffic_class(0), 0b10);
        assert_eq!(c.data_traffic_class(0xb8), 0xb8 | 0b10);
        assert_eq!(c.data_traffic_class(0xb8 | 0b11), 0xb8 | 0b11, "CE kept");
        assert_eq!(c.cnp_traffic_class(), 48 << 2);
        assert!(!is_ce(c.cnp_traffic_class()));
        let off = CongestionConfig::off();
        assert_eq!(off.data_traffic_class(0x21), 0x21);
        assert!(is_ce(0b11) && is_ce(0xff) && !is_ce(0b10) && !is_ce(0b01));
    }

    #[test]
    fn one_cnp_per_min_time() {
        let mut n = Notifier::default();
        let gap = Duration::from_micros(4);
        let t = |us: u64| Instant::from_nanos(us * 1000);
        assert!(n.on_ce(t(10), gap));
        assert!(n.pending);
        n.pending = false;
        assert!(!n.on_ce(t(12), gap));
        assert!(!n.pending);
        assert!(n.on_ce(t(14), gap));
        // A gap of zero answers every marked packet.
        assert!(n.on_ce(t(14), Duration::ZERO));
    }
}
