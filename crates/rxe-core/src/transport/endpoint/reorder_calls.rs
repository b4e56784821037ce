//! The endpoint's part of selective retransmission (`recv::reorder`):
//! holding an RC request that came ahead of the expected PSN, once the
//! QP's checks passed and its responder NAK'd it, and executing what is
//! held, in PSN order, after the packet that fills the gap.

use super::*;

/// Bytes held over all QPs of the endpoint at most: enough for 64 QPs
/// each recovering a full window of 4 KiB packets, while a peer that
/// sends ahead on purpose costs this much memory and no more.
pub(super) const MAX_HELD_BYTES: usize = 64 << 20;

impl Endpoint {
    /// `pkt` (parsed from `bytes`) is a request of RC QP `qpn` ahead of
    /// the expected PSN, which passed the endpoint's checks and which the
    /// responder NAK'd (or stayed silent for, after the gap's NAK): hold
    /// it if it is a SEND or WRITE and fits the bounds.
    pub(super) fn hold_ahead(
        &mut self,
        qpn: u32,
        meta: &RecvMeta,
        bytes: &[u8],
        pkt: &TransportPacket<'_>,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        // A READ or atomic ahead is not held: its answer comes from
        // executing it in order, and a requester resends it anyway.
        let holdable = matches!(pkt.info.operation, Operation::Send | Operation::RdmaWrite);
        // No longer than the path MTU allows (its execution would refuse
        // it anyway): a QP holds at most MAX_HELD such packets.
        let fits = pkt.payload.len() <= qp.common.mtu() as usize
            && self.held_bytes + bytes.len() <= MAX_HELD_BYTES;
        let psn = Psn::new(pkt.repr.bth.psn);
        let (before, count) = (qp.held.bytes(), qp.held.len());
        if holdable && fits && qp.held.hold(psn, qp.resp.expected_psn(), *meta, bytes) {
            self.counters.inc(Counter::OooHeld);
            // It may have taken the slot of a stale packet of an old gap.
            if qp.held.len() == count {
                self.counters.inc(Counter::OooDiscarded);
            }
        } else {
            self.counters.inc(Counter::OooDiscarded);
        }
        self.held_bytes -= before;
        self.held_bytes += qp.held.bytes();
    }

    /// Executes the packets QP `qpn` holds that are next in PSN order, each
    /// through [`Endpoint::deliver`] as if it arrived now. Stops at a gap
    /// (which is NAK'd now if packets past it are held: they came before
    /// it was found) or at a held packet that did not execute (RNR NAK,
    /// NAK, the QP left a receiving state): the rest is discarded then, and
    /// the requester resends it.
    pub(super) fn replay_held(&mut self, qpn: u32, now: Instant, mem: &mut dyn MemoryAccess) {
        let mut replayed = false;
        loop {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                return;
            };
            if qp.held.is_empty() && !replayed {
                return;
            }
            let expected = qp.resp.expected_psn();
            let Some(h) = qp.held.take(expected) else {
                let before = qp.held.bytes();
                let pruned = qp.held.prune(expected);
                self.held_bytes -= before - qp.held.bytes();
                if replayed {
                    qp.resp.ack_replayed();
                }
                let naked = !qp.held.is_empty() && qp.resp.nak_gap();
                self.counters.add(Counter::OooDiscarded, pruned as u64);
                if replayed || naked {
                    self.after(qpn);
                }
                return;
            };
            self.held_bytes -= h.bytes.len();
            let pkt = match TransportRepr::parse(&h.bytes) {
                Ok(p) => p,
                // It parsed when it came: cannot happen; dropped if it does.
                Err(_) => {
                    self.counters.inc(Counter::OooDiscarded);
                    continue;
                }
            };
            self.counters.inc(Counter::OooReplayed);
            self.deliver(qpn, now, &h.meta, &h.bytes, &pkt, mem);
            let Some(qp) = self.qps.get_mut(&qpn) else {
                return;
            };
            qp.held.recycle(h.bytes);
            if qp.resp.expected_psn() == expected {
                let mut held = core::mem::take(&mut qp.held);
                self.release_held(&mut held);
                return;
            }
            replayed = true;
        }
    }

    /// Discards what `held` holds, counted, and gives its bytes back to
    /// the endpoint's budget.
    pub(super) fn release_held(&mut self, held: &mut ReorderBuffer) {
        self.held_bytes -= held.bytes();
        let n = held.clear();
        self.counters.add(Counter::OooDiscarded, n as u64);
    }
}
