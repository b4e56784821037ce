//! RC request packets that arrived ahead of the expected PSN, held so that
//! they need not be sent again: the responder's half of selective
//! retransmission.
//!
//! IBTA RC is go-back-N: a responder that sees a PSN ahead of the one it
//! expects sends one NAK PSN Sequence Error and discards the packet, and the
//! requester resends everything from the NAK'd PSN (9.7.5.1.1, 9.7.5.2.1).
//! On a link that loses one packet in a hundred with 128 packets in flight,
//! that is more resent than new. So the responder here still NAKs and
//! executes nothing out of order, but keeps the SEND and RDMA WRITE
//! packets that came early; when the missing packet arrives and is
//! executed, the held ones are executed after it, in PSN order, through the
//! same path as if they had just arrived, and the ACK that follows covers
//! them. What the peer sees is a responder that received them late: a
//! requester that resends them anyway (kernel rxe, any go-back-N one) finds
//! them answered as duplicates (ACKed, not executed twice), and rxe's
//! requester, which resends only the NAK'd packet first
//! (`send::requester`, "probe"), goes on after the ACK with what is new.
//! Precedent: NVIDIA ConnectX's selective repeat for RoCE.
//!
//! Held are only packets a duplicate answer is complete for (SEND and
//! WRITE: an ACK); a READ or atomic request ahead is discarded as before,
//! since its response must come from executing it in order. Bounds: at
//! most [`MAX_HELD`] packets per QP, within [`MAX_HELD`] PSNs of the
//! expected one, and the endpoint's byte budget over all QPs; what does not
//! fit is discarded (the requester resends it).

use std::collections::HashMap;

use crate::transport::io::RecvMeta;
use crate::transport::psn::Psn;

/// Packets held per QP at most, and how far ahead of the expected PSN one
/// may be: twice the requester's window (128), so that a window sent
/// after a resent one still fits.
pub(crate) const MAX_HELD: u32 = 256;

/// One held packet: BTH..ICRC as received, and its metadata.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) meta: RecvMeta,
    pub(crate) bytes: Vec<u8>,
}

/// The packets one QP holds, by PSN.
#[derive(Debug, Default)]
pub(crate) struct ReorderBuffer {
    held: HashMap<u32, Held>,
    bytes: usize,
}

impl ReorderBuffer {
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds the packet with PSN `psn`, ahead of `expected`; `false` (and
    /// nothing held) if it is too far ahead, the QP holds
    /// [`MAX_HELD`] packets already, or that PSN is held already (a
    /// duplicate of a held packet changes nothing).
    pub(crate) fn hold(&mut self, psn: Psn, expected: Psn, meta: RecvMeta, bytes: &[u8]) -> bool {
        let ahead = expected.distance_to(psn);
        if ahead == 0 || ahead >= MAX_HELD || self.held.len() >= MAX_HELD as usize {
            return false;
        }
        if self.held.contains_key(&psn.value()) {
            return false;
        }
        // Counted already when it arrived: a replay must not raise CNPs
        // for it again.
        let meta = RecvMeta { ce: false, ..meta };
        self.bytes += bytes.len();
        self.held.insert(
            psn.value(),
            Held {
                meta,
                bytes: bytes.to_vec(),
            },
        );
        true
    }

    /// The held packet with PSN `psn`, removed.
    pub(crate) fn take(&mut self, psn: Psn) -> Option<Held> {
        let h = self.held.remove(&psn.value())?;
        self.bytes -= h.bytes.len();
        Some(h)
    }

    /// Drops what is no longer ahead of `expected` (it arrived again and
    /// was executed); returns how many packets were dropped.
    pub(crate) fn prune(&mut self, expected: Psn) -> usize {
        let before = self.held.len();
        let mut freed = 0;
        self.held.retain(|&p, h| {
            let ahead = expected.distance_to(Psn::new(p));
            let keep = ahead != 0 && ahead < MAX_HELD;
            if !keep {
                freed += h.bytes.len();
            }
            keep
        });
        self.bytes -= freed;
        before - self.held.len()
    }

    /// Drops everything; returns how many packets that was.
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.held.len();
        self.held.clear();
        self.bytes = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Gid;

    fn meta() -> RecvMeta {
        let mut m = RecvMeta::between(Gid::from([1; 16]), Gid::from([2; 16]));
        m.ce = true;
        m
    }

    #[test]
    fn holds_only_what_is_ahead_and_within_bounds() {
        let mut b = ReorderBuffer::default();
        let e = Psn::new(0xff_fff0);
        assert!(!b.hold(e, e, meta(), &[1]), "the expected PSN is not held");
        assert!(!b.hold(Psn::new(0xff_ffe0), e, meta(), &[1]), "behind");
        assert!(!b.hold(e.add(MAX_HELD), e, meta(), &[1]), "too far ahead");
        // Across the 24-bit wrap.
        assert!(b.hold(e.add(20), e, meta(), &[1, 2, 3]));
        assert!(!b.hold(e.add(20), e, meta(), &[9]), "held already");
        assert_eq!(b.bytes(), 3);
        let h = b.take(e.add(20)).expect("held");
        assert_eq!(h.bytes, [1, 2, 3]);
        assert!(!h.meta.ce, "a replay raises no second CNP");
        assert!(b.is_empty());
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn at_most_max_held_packets() {
        let mut b = ReorderBuffer::default();
        let e = Psn::new(5);
        for k in 1..MAX_HELD {
            assert!(b.hold(e.add(k), e, meta(), &[0; 4]));
        }
        assert!(!b.hold(e.add(MAX_HELD - 1), e, meta(), &[0; 4]));
        assert_eq!(b.bytes(), 4 * (MAX_HELD as usize - 1));
        assert_eq!(b.clear(), MAX_HELD as usize - 1);
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn prune_drops_what_the_expected_psn_passed() {
        let mut b = ReorderBuffer::default();
        let e = Psn::new(100);
        for k in [1, 2, 5, 9] {
            assert!(b.hold(e.add(k), e, meta(), &[0; 10]));
        }
        assert_eq!(b.prune(e.add(5)), 3, "101, 102 and 105 itself");
        assert_eq!(b.bytes(), 10);
        assert!(b.take(e.add(9)).is_some());
    }
}
