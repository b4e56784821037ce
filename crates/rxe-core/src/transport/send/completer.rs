//! The completer: RC responses in, work completions out.
//!
//! It shares the requester's state (`Requester`): the queue, `una` (the
//! oldest unacknowledged PSN) and `high` (one past the newest sent). A
//! response is first placed against that window: a PSN behind `una` is a
//! duplicate or stale response, one at or past `high` answers nothing that
//! was sent; both are ignored and counted.
//!
//! Rules, with their sources:
//!
//! - An ACK acknowledges every PSN up to and including its own (IBTA
//!   9.7.5.1.2, coalesced ACKs); so do, for the PSNs before theirs, a READ
//!   response, an atomic ACK and a NAK (implicit acknowledgement). A SEND
//!   or WRITE completes when its last PSN is acknowledged.
//! - A READ or atomic completes only with its own response. An
//!   acknowledgement of a PSN after a READ or atomic whose response has not
//!   arrived means that response was lost (the responder answers in order):
//!   the requester resends from that request (an implied NAK; kernel rxe
//!   does the same and counts it as a retry).
//! - READ responses are taken only in order, at the PSN of the first one
//!   missing; FIRST/MIDDLE carry exactly one path MTU, LAST/ONLY the rest
//!   (IBTA 9.7.2, C9-92); anything else completes the READ with
//!   BAD_RESP_ERR. Each payload goes straight into the work request's SGEs
//!   (they need LOCAL_WRITE; a violation is LOC_PROT_ERR).
//! - NAK codes (IBTA 9.7.5.2, Table 44 in the AETH): PSN sequence error →
//!   retransmit from the PSN it names (counted in `rcvd_seq_err`, one retry);
//!   invalid request / remote access / remote operational error →
//!   REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR for the request, QP to
//!   ERR. Invalid RD request (RD only) is REM_INV_RD_REQ_ERR; a reserved code
//!   is REM_OP_ERR, as kernel rxe treats unknown NAKs.
//! - RNR NAK: wait the time its timer code gives, then resend from its PSN
//!   (IBTA 9.7.5.2.8); `rnr_retry` limits how often (7: without end).

use super::requester::{complete, Requester};
use super::segment::scatter;
use crate::transport::counters::{Counter, Counters};
use crate::transport::memory::{MemError, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{rnr_timer, QpCommon, QpState, QpType};
use crate::transport::time::Instant;
use crate::transport::wr::{SendData, SendOp, WcStatus};
use crate::wire::{NakCode, Operation, Position, Syndrome, TransportPacket};

impl Requester {
    /// A response (ACK, NAK, READ response, atomic ACK) for this QP.
    pub(crate) fn handle_response(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        if common.qp_type() != QpType::Rc || !matches!(common.state(), QpState::Rts | QpState::Sqd)
        {
            return counters.inc(Counter::DropUnexpectedResponse);
        }
        let p = Psn::new(pkt.repr.bth.psn);
        if !p.in_range(self.una, self.high) {
            return counters.inc(if p.is_before(self.una) {
                Counter::DropDuplicateResponse
            } else {
                Counter::DropUnexpectedResponse
            });
        }
        let syndrome = pkt.repr.ext.aeth.map(|a| a.syndrome);
        match (pkt.info.operation, syndrome) {
            (Operation::Acknowledge, Some(Syndrome::Ack { .. })) => {
                self.on_ack(common, counters, now, p)
            }
            (Operation::Acknowledge, Some(Syndrome::RnrNak { timer })) => {
                self.on_rnr_nak(common, counters, now, p, timer)
            }
            (Operation::Acknowledge, Some(Syndrome::Nak(code))) => {
                self.on_nak(common, counters, now, p, code)
            }
            (Operation::RdmaReadResponse, s) if s.is_none_or(|s| s.is_ack()) => {
                self.on_read_response(common, counters, now, p, pkt, mem)
            }
            (Operation::AtomicAcknowledge, Some(Syndrome::Ack { .. })) => {
                let orig = pkt.repr.ext.atomic_ack_eth.map_or(0, |a| a.orig_data);
                self.on_atomic_ack(common, counters, now, p, orig, mem)
            }
            _ => counters.inc(Counter::DropUnexpectedResponse),
        }
        if common.state() == QpState::Error {
            return;
        }
        self.fix_position();
        self.complete_local_front(common);
        self.complete_errors(common);
        self.check_drained(common);
    }

    /// Completes, oldest first, the SENDs and WRITEs that acknowledging
    /// every PSN before `end` finishes, and moves `una` up to `end`.
    /// Returns the resume PSN of a READ or atomic that lies wholly before
    /// `end` (its response was lost), where it stops.
    fn implicit_ack(&mut self, common: &mut QpCommon, now: Instant, end: Psn) -> Option<Psn> {
        let mut progressed = false;
        let lost = loop {
            let Some(w) = self.sq.front() else {
                break None;
            };
            if !w.started || w.error.is_some() {
                break None;
            }
            if w.wr.op.is_local() {
                // Performed when it reached the send position; it
                // completes as soon as it is the oldest.
                if let Some(w) = self.pop_front() {
                    complete(common, &w, WcStatus::Success);
                }
                continue;
            }
            let to_end = self.una.distance_to(end);
            let to_last = self.una.distance_to(w.last_psn);
            if w.wr.op.is_read_or_atomic() {
                break (to_last < to_end).then(|| w.resume_psn());
            }
            if to_last < to_end {
                let last = w.last_psn;
                if let Some(w) = self.pop_front() {
                    complete(common, &w, WcStatus::Success);
                }
                self.una = last.next();
                progressed = true;
            } else {
                if to_end > 0 {
                    self.una = end;
                    progressed = true;
                }
                break None;
            }
        };
        if progressed {
            self.progress(common, now);
        }
        lost
    }

    fn on_ack(&mut self, common: &mut QpCommon, counters: &mut Counters, now: Instant, p: Psn) {
        if let Some(resume) = self.implicit_ack(common, now, p.next()) {
            self.retry_from(common, counters, now, resume);
        }
    }

    fn on_nak(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        p: Psn,
        code: NakCode,
    ) {
        if code == NakCode::PsnSequenceError {
            self.probe_nakd(p);
        }
        // Everything before the NAK'd PSN arrived.
        let lost = self.implicit_ack(common, now, p);
        let status = match code {
            NakCode::PsnSequenceError => {
                counters.inc(Counter::RcvdSeqErr);
                // The responder expects `p`, or a lost READ response comes
                // first: resume from the oldest unacknowledged PSN.
                let to = lost.unwrap_or(self.una);
                self.retry_from(common, counters, now, to);
                // A lost READ response is answered by resending from it
                // all at once; a gap at the NAK'd PSN, selectively.
                if lost.is_none() && common.qp_type() == QpType::Rc {
                    self.probe(counters, to);
                }
                return;
            }
            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
            NakCode::Reserved(_) => WcStatus::RemOpErr,
        };
        self.fail_front(common, status);
    }

    fn on_rnr_nak(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        p: Psn,
        timer: u8,
    ) {
        counters.inc(Counter::RcvdRnrErr);
        if self.rnr_until.is_some() {
            // Already waiting: a duplicate of the NAK being served.
            return;
        }
        self.implicit_ack(common, now, p);
        self.rnr_retry(common, counters, now.saturating_add(rnr_timer(timer)));
    }

    fn on_read_response(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        p: Psn,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        if let Some(resume) = self.implicit_ack(common, now, p) {
            return self.retry_from(common, counters, now, resume);
        }
        let Some(w) = self.sq.front() else {
            return counters.inc(Counter::DropUnexpectedResponse);
        };
        if w.wr.op.is_zero_response() && w.holds(p) {
            // ATOMIC WRITE and FLUSH: one RDMA READ Response Only without
            // payload at the request's PSN completes them.
            let shape_ok = pkt.info.position == Some(Position::Only) && pkt.payload.is_empty();
            if !shape_ok {
                return self.fail_front(common, WcStatus::BadRespErr);
            }
            if let Some(w) = self.pop_front() {
                complete(common, &w, WcStatus::Success);
            }
            self.una = p.next();
            return self.progress(common, now);
        }
        if !w.holds(p) || !matches!(w.wr.op, SendOp::RdmaRead { .. }) {
            return counters.inc(Counter::DropUnexpectedResponse);
        }
        let expected = w.resume_psn();
        if p != expected {
            // Behind: a duplicate. Ahead: one before it was lost, and the
            // transport timer will ask again from the missing one.
            return counters.inc(if p.is_before(expected) {
                Counter::DropDuplicateResponse
            } else {
                Counter::DropUnexpectedResponse
            });
        }
        let mtu = w.mtu as usize;
        let offset = w.read_done as usize * mtu;
        let remaining = (w.len as usize).saturating_sub(offset);
        let is_last = remaining <= mtu;
        let n = pkt.payload.len();
        let shape_ok = match pkt.info.position {
            Some(Position::First | Position::Middle) => !is_last && n == mtu,
            Some(Position::Last | Position::Only) => is_last && n == remaining,
            None => false,
        };
        if !shape_ok {
            return self.fail_front(common, WcStatus::BadRespErr);
        }
        let written = match &w.wr.data {
            SendData::Inline(_) => Err(MemError::Overflow),
            d => scatter(d.sge_list(), offset, pkt.payload, mem, common.init.pd),
        };
        if written.is_err() {
            return self.fail_front(common, WcStatus::LocProtErr);
        }
        let w = &mut self.sq[0];
        w.read_done += 1;
        self.una = p.next();
        if is_last {
            if let Some(w) = self.pop_front() {
                complete(common, &w, WcStatus::Success);
            }
        }
        self.progress(common, now);
    }

    fn on_atomic_ack(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        p: Psn,
        orig: u64,
        mem: &mut dyn MemoryAccess,
    ) {
        if let Some(resume) = self.implicit_ack(common, now, p) {
            return self.retry_from(common, counters, now, resume);
        }
        let Some(w) = self.sq.front() else {
            return counters.inc(Counter::DropUnexpectedResponse);
        };
        if !w.started || w.first_psn != p || !w.wr.op.is_atomic() {
            return counters.inc(Counter::DropUnexpectedResponse);
        }
        // Host byte order: what a C program reading the uint64_t sees.
        let written = match &w.wr.data {
            SendData::Inline(_) => Err(MemError::Overflow),
            d => scatter(d.sge_list(), 0, &orig.to_ne_bytes(), mem, common.init.pd),
        };
        if written.is_err() {
            return self.fail_front(common, WcStatus::LocProtErr);
        }
        if let Some(w) = self.pop_front() {
            complete(common, &w, WcStatus::Success);
        }
        self.una = p.next();
        self.progress(common, now);
    }
}
