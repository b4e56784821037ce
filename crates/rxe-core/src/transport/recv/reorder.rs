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

use crate::transport::io::RecvMeta;
use crate::transport::psn::Psn;

/// Packets held per QP at most, and how far ahead of the expected PSN one
/// may be: twice the requester's window (128), so that a window sent
/// after a resent one still fits. A power of two: the slot of a PSN is
/// its low bits, and no two PSNs fewer than this apart share one.
pub(crate) const MAX_HELD: u32 = 256;

/// One held packet: BTH..ICRC as received, and its metadata.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) psn: Psn,
    pub(crate) meta: RecvMeta,
    pub(crate) bytes: Vec<u8>,
}

/// The packets one QP holds, each in the slot its PSN's low bits name
/// (no hashing, no search on the per-packet path), with the buffers of
/// packets already replayed kept for the next ones (no allocation per
/// packet once a loss has been repaired).
#[derive(Debug, Default)]
pub(crate) struct ReorderBuffer {
    slots: Vec<Option<Held>>,
    held: usize,
    bytes: usize,
    spare: Vec<Vec<u8>>,
    /// No held PSN is before this one (a lower bound, exact after a
    /// `prune`): while the expected PSN has not passed it, nothing is
    /// stale and `prune` has nothing to scan for.
    lowest: Option<Psn>,
}

fn slot(psn: Psn) -> usize {
    (psn.value() & (MAX_HELD - 1)) as usize
}

impl ReorderBuffer {
    pub(crate) fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Packets held.
    pub(crate) fn len(&self) -> usize {
        self.held
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds the packet with PSN `psn`, ahead of `expected`; `false` (and
    /// nothing held) if it is too far ahead or that PSN is held already
    /// (a duplicate of a held packet changes nothing).
    pub(crate) fn hold(&mut self, psn: Psn, expected: Psn, meta: RecvMeta, bytes: &[u8]) -> bool {
        let ahead = expected.distance_to(psn);
        if ahead == 0 || ahead >= MAX_HELD {
            return false;
        }
        if self.slots.is_empty() {
            self.slots.resize_with(MAX_HELD as usize, || None);
        }
        let s = &mut self.slots[slot(psn)];
        match s {
            Some(h) if h.psn == psn => return false,
            // A packet of a gap the PSNs have moved past (a late copy of it
            // was executed): stale, this one takes its place.
            Some(h) => {
                self.bytes -= h.bytes.len();
                self.held -= 1;
            }
            None => {}
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        // Counted already when it arrived: a replay must not raise CNPs
        // for it again.
        let meta = RecvMeta { ce: false, ..meta };
        self.bytes += buf.len();
        self.held += 1;
        *s = Some(Held {
            psn,
            meta,
            bytes: buf,
        });
        if self.lowest.is_none_or(|l| psn.is_before(l)) {
            self.lowest = Some(psn);
        }
        true
    }

    /// The held packet with PSN `psn`, removed. Give its buffer back with
    /// [`ReorderBuffer::recycle`] once done with it.
    pub(crate) fn take(&mut self, psn: Psn) -> Option<Held> {
        let s = self.slots.get_mut(slot(psn))?;
        if s.as_ref().is_none_or(|h| h.psn != psn) {
            return None;
        }
        let h = s.take()?;
        self.bytes -= h.bytes.len();
        self.held -= 1;
        if self.lowest == Some(psn) {
            self.lowest = Some(psn.next());
        }
        self.release_if_drained();
        Some(h)
    }

    /// Nothing held: the slots and spare buffers go too, so that a QP
    /// that once repaired a loss keeps no memory for it (the slots alone
    /// are about 28 KiB; idle QPs must stay small).
    fn release_if_drained(&mut self) {
        if self.held == 0 {
            *self = ReorderBuffer::default();
        }
    }

    /// Keeps a replayed packet's buffer for the next packet held, while
    /// packets are still held (a loss repaired while another is pending).
    pub(crate) fn recycle(&mut self, bytes: Vec<u8>) {
        if self.held > 0 && self.spare.len() < MAX_HELD as usize {
            self.spare.push(bytes);
        }
    }

    /// Drops what is no longer ahead of `expected` (it arrived again and
    /// was executed); returns how many packets were dropped. Scans the
    /// slots only if `expected` passed the lowest PSN held.
    pub(crate) fn prune(&mut self, expected: Psn) -> usize {
        if self.held == 0 || self.lowest.is_some_and(|l| expected.is_before(l)) {
            return 0;
        }
        let mut dropped = 0;
        let mut lowest: Option<Psn> = None;
        for s in &mut self.slots {
            if let Some(h) = s.as_ref() {
                let ahead = expected.distance_to(h.psn);
                if ahead != 0 && ahead < MAX_HELD && lowest.is_none_or(|l| h.psn.is_before(l)) {
                    lowest = Some(h.psn);
                }
            }
            let stale = s.as_ref().is_some_and(|h| {
                let ahead = expected.distance_to(h.psn);
                ahead == 0 || ahead >= MAX_HELD
            });
            if stale {
                if let Some(h) = s.take() {
                    self.bytes -= h.bytes.len();
                    self.held -= 1;
                    dropped += 1;
                    if self.spare.len() < MAX_HELD as usize {
                        self.spare.push(h.bytes);
                    }
                }
            }
        }
        self.lowest = lowest;
        self.release_if_drained();
        dropped
    }

    /// Drops everything (buffers too); returns how many packets that was.
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.held;
        *self = ReorderBuffer::default();
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
    fn at_most_max_held_packets_and_buffers_are_reused() {
        let mut b = ReorderBuffer::default();
        let e = Psn::new(5);
        for k in 1..MAX_HELD {
            assert!(b.hold(e.add(k), e, meta(), &[0; 4]));
        }
        assert!(!b.hold(e.add(MAX_HELD - 1), e, meta(), &[0; 4]));
        assert!(!b.hold(e.add(MAX_HELD), e, meta(), &[0; 4]));
        assert_eq!(b.bytes(), 4 * (MAX_HELD as usize - 1));
        let h = b.take(e.add(1)).unwrap();
        let ptr = h.bytes.as_ptr();
        b.recycle(h.bytes);
        assert!(b.hold(e.add(MAX_HELD), e.add(1), meta(), &[1; 4]));
        assert_eq!(b.take(e.add(MAX_HELD)).unwrap().bytes.as_ptr(), ptr);
        assert_eq!(b.clear(), MAX_HELD as usize - 2);
        assert_eq!(b.bytes(), 0);
        assert!(b.is_empty());
    }

    #[test]
    fn a_drained_buffer_keeps_no_memory() {
        let mut b = ReorderBuffer::default();
        let e = Psn::new(9);
        assert!(b.hold(e.add(1), e, meta(), &[1; 100]));
        assert!(b.hold(e.add(2), e, meta(), &[2; 100]));
        let h = b.take(e.add(1)).unwrap();
        b.recycle(h.bytes);
        assert_eq!((b.slots.len(), b.spare.len()), (MAX_HELD as usize, 1));
        let h = b.take(e.add(2)).unwrap();
        b.recycle(h.bytes);
        assert!(b.is_empty());
        assert_eq!(
            (b.slots.capacity(), b.spare.capacity(), b.bytes()),
            (0, 0, 0)
        );
        assert!(b.hold(e.add(3), e, meta(), &[3; 100]));
        assert_eq!(b.prune(e.add(4)), 1);
        assert_eq!((b.slots.capacity(), b.spare.capacity()), (0, 0));
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
