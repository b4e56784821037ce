//! Per-reason event and drop counters, in the manner of the kernel rxe's
//! hardware counters (`rdma statistic show`, `/sys/class/infiniband/*/ports/*/hw_counters`).
//!
//! The first fifteen counters carry the kernel rxe names, in its order
//! (`rxe_hw_counters.c`), so that tools and people comparing the two see the
//! same words. After them come one drop counter per parse error reason of
//! the wire layer ([`wire::Error::reason`](crate::wire::Error::reason)),
//! named `drop_<reason>`.

use core::fmt;

use crate::wire::{Error as WireError, ErrorKind};

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// One counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Counter {
            $( $(#[$doc])* $variant, )*
        }

        impl Counter {
            /// Every counter, in printing order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];
            /// How many counters there are.
            pub const COUNT: usize = Counter::ALL.len();

            /// The stable name printed for the counter.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Counter::$variant => $name, )*
                }
            }
        }
    };
}

counters! {
    /// Packets handed to the network.
    SentPkts => "sent_pkts",
    /// Packets received (before any checks).
    RcvdPkts => "rcvd_pkts",
    /// Responder: a request with a PSN already seen.
    DuplicateRequest => "duplicate_request",
    /// Responder: a request with a PSN ahead of the expected one.
    OutOfSeqRequest => "out_of_seq_request",
    /// Requester: RNR NAKs received.
    RcvdRnrErr => "rcvd_rnr_err",
    /// Responder: RNR NAKs sent.
    SendRnrErr => "send_rnr_err",
    /// Requester: NAK sequence errors received.
    RcvdSeqErr => "rcvd_seq_err",
    /// Completer: an acknowledgement whose processing was deferred.
    AckDeferred => "ack_deferred",
    /// Requester: the transport retry count was exhausted.
    RetryExceededErr => "retry_exceeded_err",
    /// Requester: the RNR retry count was exhausted.
    RetryRnrExceededErr => "retry_rnr_exceeded_err",
    /// Completer: a retransmission was started.
    CompleterRetryErr => "completer_retry_err",
    /// A packet could not be sent.
    SendErr => "send_err",
    /// The link went down.
    LinkDowned => "link_downed",
    /// SEND messages sent.
    RdmaSends => "rdma_sends",
    /// SEND messages received.
    RdmaRecvs => "rdma_recvs",
    /// Copies of multicast packets handed to attached QPs (one per QP).
    RcvdMcastCopies => "rcvd_mcast_copies",
    /// Notification point: packets that arrived marked CE (ConnectX
    /// `np_ecn_marked_roce_packets`).
    NpEcnMarkedPackets => "np_ecn_marked_roce_packets",
    /// Notification point: CNPs sent (ConnectX `np_cnp_sent`).
    NpCnpSent => "np_cnp_sent",
    /// Notification point: CE-marked packets of a QP answered by no CNP,
    /// because its last one was sent less than `min_time_between_cnps` ago.
    NpCnpSuppressed => "np_cnp_suppressed",
    /// Reaction point: CNPs that reached a QP that reacts (ConnectX
    /// `rp_cnp_handled`).
    RpCnpHandled => "rp_cnp_handled",
    /// Reaction point: CNPs for no QP, or a QP that cannot react (ConnectX
    /// `rp_cnp_ignored`).
    RpCnpIgnored => "rp_cnp_ignored",
    /// Reaction point: rate reductions made (DCQCN).
    RpRateReductions => "rp_rate_reductions",
    /// Requester: an RC QP with a new packet to send waited because the
    /// port's QPs together had the port window's PSNs in flight to its
    /// destination (`port_window`), counted once per wait.
    PortWindowWaits => "port_window_waits",
    /// Path migration: the requester's retries on the primary path were
    /// spent and the QP moved to its armed alternate path (IBTA 17.2.8).
    PathMigrated => "path_migrated",
    /// Path migration: a packet with MigReq arrived on the armed alternate
    /// path and the QP moved there, following its peer.
    PathMigratedByPeer => "path_migrated_by_peer",
    /// Path migration: the QP should have migrated but its alternate
    /// path's source GID is gone (`IBV_EVENT_PATH_MIG_ERR`).
    PathMigErr => "path_mig_err",
    /// Requester: a few measured round trips passed without an answer and
    /// it resent from its oldest unacknowledged PSN, spending no retry
    /// (early retransmission, `send::adaptive_timer`); with selective
    /// retransmission that packet alone, until its answer.
    AdaptiveRetransmit => "adaptive_retransmit",
    /// Requester: after a NAK PSN Sequence Error it resent the NAK'd
    /// packet alone, and its answer decides whether the rest follow
    /// (selective retransmission, `recv::reorder`).
    SelectiveRetransmit => "selective_retransmit",
    /// Responder: an RC SEND or WRITE packet ahead of the expected PSN was
    /// NAK'd and held, to be executed when the gap before it is filled
    /// (`recv::reorder`).
    OooHeld => "ooo_held",
    /// Responder: a held packet was executed, in PSN order, after the gap
    /// before it was filled.
    OooReplayed => "ooo_replayed",
    /// Responder: held packets thrown away unexecuted (the QP changed
    /// state or was destroyed, a held one failed, or the PSNs moved past
    /// them), or a packet ahead not held (too far ahead, over the bounds).
    OooDiscarded => "ooo_discarded",
    /// Dropped: fewer bytes than a header needs.
    DropTruncated => "drop_truncated",
    /// Dropped: a field with a value not allowed there.
    DropBadField => "drop_bad_field",
    /// Dropped: an opcode the IBTA does not define.
    DropUnknownOpcode => "drop_unknown_opcode",
    /// Dropped: a pad count larger than the payload.
    DropBadPadCount => "drop_bad_pad_count",
    /// Dropped: a payload where the opcode allows none.
    DropPayloadNotAllowed => "drop_payload_not_allowed",
    /// Dropped: no payload where the opcode needs one.
    DropPayloadRequired => "drop_payload_required",
    /// Dropped: a payload of the wrong size for the opcode.
    DropBadPayloadLength => "drop_bad_payload_length",
    /// Dropped: a length that is not whole 4-byte words.
    DropNotWordAligned => "drop_not_word_aligned",
    /// Dropped: a length field that disagrees with the bytes present.
    DropLengthMismatch => "drop_length_mismatch",
    /// Dropped: a bad invariant CRC.
    DropBadIcrc => "drop_bad_icrc",
    /// Dropped: a bad variant CRC.
    DropBadVcrc => "drop_bad_vcrc",
    /// Dropped: an extended header missing (building packets).
    DropMissingHeader => "drop_missing_header",
    /// Dropped: an extended header the opcode does not carry.
    DropUnexpectedHeader => "drop_unexpected_header",
    /// Dropped: a malformed Ethernet, IP or UDP header.
    DropMalformed => "drop_malformed",
    /// Dropped: no QP with the packet's destination QPN.
    DropUnknownQp => "drop_unknown_qp",
    /// Dropped: a multicast packet (QPN 0xFFFFFF) for a group no QP of
    /// the port is attached to.
    DropMcastNoGroup => "drop_mcast_no_group",
    /// Dropped: the opcode's transport is not the QP's type.
    DropWrongTransport => "drop_wrong_transport",
    /// Dropped: the QP is in a state that does not receive.
    DropQpState => "drop_qp_state",
    /// Dropped: a packet for a connected QP (RC, UC) from a source other
    /// than the QP's destination GID, or to a destination other than its
    /// source GID.
    DropWrongAddress => "drop_wrong_address",
    /// Dropped: the BTH P_Key does not match.
    DropPkeyMismatch => "drop_pkey_mismatch",
    /// Dropped: the DETH Q_Key does not match the QP's (UD).
    DropQkeyMismatch => "drop_qkey_mismatch",
    /// Dropped: a UD message with no receive posted.
    DropNoRecv => "drop_no_recv",
    /// Dropped: a UC message with a lost packet (the rest is discarded).
    DropUcIncomplete => "drop_uc_incomplete",
    /// Dropped: a response that answers nothing outstanding.
    DropUnexpectedResponse => "drop_unexpected_response",
    /// Dropped: a response for a PSN already acknowledged (a duplicate or
    /// a late response after a retransmission).
    DropDuplicateResponse => "drop_duplicate_response",
}

impl Counter {
    /// The drop counter for a wire parse error. The match is exhaustive, so
    /// a new [`ErrorKind`] cannot be added without a counter.
    pub const fn for_drop(e: &WireError) -> Counter {
        match e.kind {
            ErrorKind::Truncated { .. } => Counter::DropTruncated,
            ErrorKind::BadField { .. } => Counter::DropBadField,
            ErrorKind::UnknownOpcode(_) => Counter::DropUnknownOpcode,
            ErrorKind::PadExceedsPayload { .. } => Counter::DropBadPadCount,
            ErrorKind::PayloadNotAllowed { .. } => Counter::DropPayloadNotAllowed,
            ErrorKind::PayloadRequired => Counter::DropPayloadRequired,
            ErrorKind::PayloadLength { .. } => Counter::DropBadPayloadLength,
            ErrorKind::NotWordAligned { .. } => Counter::DropNotWordAligned,
            ErrorKind::LengthMismatch { .. } => Counter::DropLengthMismatch,
            ErrorKind::BadIcrc { .. } => Counter::DropBadIcrc,
            ErrorKind::BadVcrc { .. } => Counter::DropBadVcrc,
            ErrorKind::MissingHeader(_) => Counter::DropMissingHeader,
            ErrorKind::UnexpectedHeader(_) => Counter::DropUnexpectedHeader,
            ErrorKind::Malformed(_) => Counter::DropMalformed,
        }
    }

    /// Is this one of the `drop_*` counters?
    pub const fn is_drop(self) -> bool {
        self as usize >= Counter::DropTruncated as usize
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of counters, all starting at zero. Counts saturate at `u64::MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    values: [u64; Counter::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    pub const fn new() -> Counters {
        Counters {
            values: [0; Counter::COUNT],
        }
    }

    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize]
    }

    pub fn inc(&mut self, c: Counter) {
        self.add(c, 1);
    }

    pub fn add(&mut self, c: Counter, n: u64) {
        let v = &mut self.values[c as usize];
        *v = v.saturating_add(n);
    }

    /// Counts a packet dropped for `e`.
    pub fn record_drop(&mut self, e: &WireError) {
        self.inc(Counter::for_drop(e));
    }

    /// The sum of the `drop_*` counters.
    pub fn drops(&self) -> u64 {
        self.iter_counters()
            .filter(|(c, _)| c.is_drop())
            .fold(0u64, |acc, (_, v)| acc.saturating_add(v))
    }

    /// Adds every counter of `other` into `self` (e.g. per-QP into
    /// per-device).
    pub fn merge(&mut self, other: &Counters) {
        for &c in Counter::ALL {
            self.add(c, other.get(c));
        }
    }

    /// Sets every counter to zero.
    pub fn reset(&mut self) {
        self.values = [0; Counter::COUNT];
    }

    /// (counter, value) pairs in [`Counter::ALL`] order.
    pub fn iter_counters(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// (name, value) pairs in a stable order, for printing.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.iter_counters().map(|(c, v)| (c.name(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ExtHeader, Layer};

    fn one_error_per_kind() -> Vec<WireError> {
        let kinds = [
            ErrorKind::Truncated {
                needed: 12,
                available: 3,
            },
            ErrorKind::BadField {
                field: "tver",
                value: 1,
            },
            ErrorKind::UnknownOpcode(0xff),
            ErrorKind::PadExceedsPayload {
                pad: 3,
                available: 0,
            },
            ErrorKind::PayloadNotAllowed { len: 4 },
            ErrorKind::PayloadRequired,
            ErrorKind::PayloadLength {
                expected: 28,
                found: 4,
            },
            ErrorKind::NotWordAligned { len: 3 },
            ErrorKind::LengthMismatch {
                field: "len",
                declared: 10,
                actual: 8,
            },
            ErrorKind::BadIcrc {
                computed: 1,
                carried: 2,
            },
            ErrorKind::BadVcrc {
                computed: 1,
                carried: 2,
            },
            ErrorKind::MissingHeader(ExtHeader::Deth),
            ErrorKind::UnexpectedHeader(ExtHeader::Deth),
            ErrorKind::Malformed("ipv4"),
        ];
        kinds
            .into_iter()
            .map(|k| WireError::new(Layer::Bth, k))
            .collect()
    }

    #[test]
    fn kernel_names_first_in_kernel_order() {
        let names: Vec<_> = Counters::new().iter().map(|(n, _)| n).take(15).collect();
        assert_eq!(
            names,
            [
                "sent_pkts",
                "rcvd_pkts",
                "duplicate_request",
                "out_of_seq_request",
                "rcvd_rnr_err",
                "send_rnr_err",
                "rcvd_seq_err",
                "ack_deferred",
                "retry_exceeded_err",
                "retry_rnr_exceeded_err",
                "completer_retry_err",
                "send_err",
                "link_downed",
                "rdma_sends",
                "rdma_recvs",
            ]
        );
        assert!(Counter::ALL[..15].iter().all(|c| !c.is_drop()));
    }

    #[test]
    fn names_are_unique_and_order_stable() {
        let names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn every_wire_reason_has_its_drop_counter() {
        let errors = one_error_per_kind();
        // One distinct drop counter per wire reason (the transport adds
        // drop counters of its own after them).
        let wire: std::collections::BTreeSet<_> = errors.iter().map(Counter::for_drop).collect();
        assert_eq!(wire.len(), errors.len());
        assert!(wire.iter().all(|c| c.is_drop()));
        let mut c = Counters::new();
        for (i, e) in errors.iter().enumerate() {
            let counter = Counter::for_drop(e);
            assert_eq!(counter.name(), format!("drop_{}", e.reason()));
            c.record_drop(e);
            c.record_drop(e);
            assert_eq!(c.get(counter), 2);
            assert_eq!(c.drops(), 2 * (i as u64 + 1));
        }
        assert_eq!(c.get(Counter::RcvdPkts), 0);
    }

    #[test]
    fn inc_add_merge_reset_saturate() {
        let mut a = Counters::new();
        a.inc(Counter::SentPkts);
        a.add(Counter::RdmaSends, 5);
        let mut b = Counters::default();
        b.add(Counter::SentPkts, u64::MAX);
        b.merge(&a);
        assert_eq!(b.get(Counter::SentPkts), u64::MAX);
        assert_eq!(b.get(Counter::RdmaSends), 5);
        let printed: Vec<_> = a.iter().filter(|&(_, v)| v != 0).collect();
        assert_eq!(printed, [("sent_pkts", 1), ("rdma_sends", 5)]);
        a.reset();
        assert!(a.iter().all(|(_, v)| v == 0));
        assert_eq!(a.iter().count(), Counter::COUNT);
        assert_eq!(Counter::DropBadIcrc.to_string(), "drop_bad_icrc");
    }
}
