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
use crate::transport::qp::QpCommon;
use crate::transport::qp::{rnr_timer, QpState, QpType};
use crate::transport::time::Instant;
use crate::transport::wr::{SendData, SendOp, WcStatus};
use crate::wire::{NakCode, Operation, Position, Syndrome, TransportPacket};

impl Requester {
    /// A response (ACK, NAK, READ response, atomic ACK) for this QP.
    pub fn handle_response(
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
            self.retry_from(common, counters, resume);
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
        // Everything before the NAK'd PSN arrived.
        let lost = self.implicit_ack(common, now, p);
        let status = match code {
            NakCode::PsnSequenceError => {
                counters.inc(Counter::RcvdSeqErr);
                // The responder expects `p`, or a lost READ response comes
                // first: resume from the oldest unacknowledged PSN.
                let to = lost.unwrap_or(self.una);
                return self.retry_from(common, counters, to);
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
            return self.retry_from(common, counters, resume);
        }
        let Some(w) = self.sq.front() else {
            return counters.inc(Counter::DropUnexpectedResponse);
        };
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
            SendData::Sges(sges) => scatter(sges, offset, pkt.payload, mem, common.init.pd),
            SendData::Inline(_) => Err(MemError::Overflow),
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
            return self.retry_from(common, counters, resume);
        }
        let Some(w) = self.sq.front() else {
            return counters.inc(Counter::DropUnexpectedResponse);
        };
        if !w.started || w.first_psn != p || !w.wr.op.is_atomic() {
            return counters.inc(Counter::DropUnexpectedResponse);
        }
        // Host byte order: what a C program reading the uint64_t sees.
        let written = match &w.wr.data {
            SendData::Sges(sges) => scatter(sges, 0, &orig.to_ne_bytes(), mem, common.init.pd),
            SendData::Inline(_) => Err(MemError::Overflow),
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

#[cfg(test)]
mod tests {
    use super::super::requester::rig::*;
    use super::*;
    use crate::transport::qp::{rnr_timer, AccessFlags};
    use crate::transport::wr::SendWr;
    use crate::wire::Opcode;

    const M: usize = 256;

    fn read(addr: u64) -> SendOp {
        SendOp::RdmaRead {
            remote_addr: addr,
            rkey: 0x55,
        }
    }

    fn sends(r: &mut Rig, n: u64, len: u32) {
        for i in 1..=n {
            let wr: SendWr = r.wr(i, SendOp::Send, vec![r.src_sge(0, len)]);
            r.post(wr).unwrap();
        }
    }

    #[test]
    fn coalesced_partial_duplicate_and_stray_acks() {
        let mut r = Rig::rc();
        sends(&mut r, 3, 2 * M as u32); // PSNs 100-101, 102-103, 104-105
        assert_eq!(r.drain().len(), 6);
        // Inside the second message: the first completes, the second not.
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.req.una, Psn::new(103));
        // Older than the oldest outstanding: a duplicate, ignored.
        r.rx(&ack(101));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 1);
        // Beyond the newest sent: answers nothing, ignored.
        r.rx(&ack(106));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        assert!(r.take_wcs().is_empty());
        // One ACK for the newest completes the rest in order.
        r.rx(&ack(105));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
        r.rx(&ack(105));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 2);
    }

    #[test]
    fn nak_sequence_error_goes_back_to_the_named_psn() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                ..Rts::default()
            },
        );
        sends(&mut r, 3, 2 * M as u32);
        assert_eq!(r.drain().len(), 6);
        let seq = |psn| ack_with(psn, Syndrome::Nak(NakCode::PsnSequenceError));
        r.rx(&seq(103));
        // Everything before 103 arrived: the first request completes.
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.counters.get(Counter::RcvdSeqErr), 1);
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [103, 104, 105]);
        // The same NAK again (duplicated by the network) starts nothing.
        r.rx(&seq(103));
        assert!(r.drain().is_empty());
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        // The NAK spent the one retry: the next timeout is one too many.
        r.fire();
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::RetryExcErr), (3, WcStatus::WrFlushErr)]
        );
    }

    /// Kernel rxe answers the packets in flight behind an RNR NAK'd one
    /// with a NAK PSN sequence error for the same PSN. That is no new
    /// error: many RNR rounds must not spend `retry_cnt`.
    #[test]
    fn a_sequence_nak_behind_an_rnr_nak_costs_no_retry() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                rnr_retry: 7,
                ..Rts::default()
            },
        );
        sends(&mut r, 3, 10);
        assert_eq!(r.drain().len(), 3);
        let rnr = ack_with(100, Syndrome::RnrNak { timer: 14 });
        let seq = ack_with(100, Syndrome::Nak(NakCode::PsnSequenceError));
        for _ in 0..10 {
            r.rx(&rnr);
            r.rx(&seq);
            assert!(r.tx().is_none(), "waits for the RNR timer");
            r.fire();
            let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
            assert_eq!(psns, [100, 101, 102], "resent once, from the NAK'd PSN");
            // The sequence NAK of the previous round, late, starts nothing.
            r.rx(&seq);
            assert!(r.drain().is_empty());
        }
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 0);
        assert!(r.take_wcs().is_empty());
        r.rx(&ack(102));
        assert_eq!(
            r.take_wcs(),
            [
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::Success)
            ]
        );
        // A sequence NAK after progress is a real one and costs a retry.
        sends(&mut r, 2, 10);
        assert_eq!(r.drain().len(), 2);
        r.rx(&ack_with(103, Syndrome::Nak(NakCode::PsnSequenceError)));
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [103, 104]);
    }

    #[test]
    fn fatal_naks_complete_with_their_status_and_flush() {
        for (code, status) in [
            (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
            (NakCode::RemoteAccessError, WcStatus::RemAccessErr),
            (NakCode::RemoteOperationalError, WcStatus::RemOpErr),
            (NakCode::Reserved(9), WcStatus::RemOpErr),
        ] {
            let mut r = Rig::rc();
            sends(&mut r, 3, 10);
            r.drain();
            r.rx(&ack_with(101, Syndrome::Nak(code)));
            assert_eq!(
                r.take_wcs(),
                [
                    (1, WcStatus::Success),
                    (2, status),
                    (3, WcStatus::WrFlushErr)
                ],
                "{code:?}"
            );
            assert_eq!(r.common.state(), QpState::Error);
            assert_eq!(r.req.poll_timeout(), None);
            assert!(r.tx().is_none());
        }
    }

    #[test]
    fn rnr_nak_waits_then_resends_until_rnr_retry_is_spent() {
        for rnr_retry in [0u8, 2, 7] {
            let mut r = Rig::new(
                QpType::Rc,
                Rts {
                    rnr_retry,
                    ..Rts::default()
                },
            );
            sends(&mut r, 2, 10);
            assert_eq!(r.drain().len(), 2);
            let rnr = ack_with(100, Syndrome::RnrNak { timer: 14 });
            let wait = rnr_timer(14);
            let rounds = if rnr_retry == 7 { 50 } else { rnr_retry };
            for i in 0..rounds {
                let at = r.now;
                r.rx(&rnr);
                assert_eq!(r.counters.get(Counter::RcvdRnrErr), 2 * u64::from(i) + 1);
                assert!(r.tx().is_none(), "waits for the RNR timer");
                // A duplicate of the same RNR NAK changes nothing.
                r.rx(&rnr);
                assert_eq!(r.fire(), at.saturating_add(wait));
                let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
                assert_eq!(psns, [100, 101], "resent from the NAK'd PSN");
            }
            if rnr_retry == 7 {
                r.rx(&ack(101));
                assert_eq!(
                    r.take_wcs(),
                    [(1, WcStatus::Success), (2, WcStatus::Success)]
                );
                continue;
            }
            r.rx(&rnr);
            assert_eq!(
                r.take_wcs(),
                [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
            );
            assert_eq!(r.counters.get(Counter::RetryRnrExceededErr), 1);
        }
    }

    #[test]
    fn rnr_nak_acknowledges_what_came_before() {
        let mut r = Rig::rc();
        sends(&mut r, 3, 10);
        r.drain();
        r.rx(&ack_with(101, Syndrome::RnrNak { timer: 1 }));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        r.fire();
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [101, 102]);
    }

    #[test]
    fn read_responses_scatter_into_the_sges() {
        let mut r = Rig::rc();
        let len = 3 * M + 10;
        let sges = vec![r.dst_sge(0, 300), r.dst_sge(1000, (len - 300) as u32)];
        r.post(r.wr(1, read(0xa000), sges)).unwrap();
        assert_eq!(r.drain().len(), 1);
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            100,
            &data[..M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            101,
            &data[M..2 * M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &data[2 * M..3 * M],
        ));
        assert!(r.take_wcs().is_empty());
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            103,
            &data[3 * M..],
        ));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.dst_bytes(0, 300), data[..300]);
        assert_eq!(r.dst_bytes(1000, len - 300), data[300..]);
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn lost_read_response_is_requested_again_for_the_rest() {
        let mut r = Rig::rc();
        let len = 4 * M;
        r.post(r.wr(1, read(0xa000), vec![r.dst_sge(0, len as u32)]))
            .unwrap();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 2); // READ 100..=103, SEND 104
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            100,
            &[1; M],
        ));
        // 101 is lost; 102 arrives out of order and is not taken.
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &[3; M],
        ));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        r.fire();
        let again = r.drain();
        assert_eq!(again.len(), 2);
        let p = parse(&again[0]);
        assert_eq!(p.repr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert_eq!(p.repr.bth.psn, 101);
        let reth = p.repr.ext.reth.unwrap();
        assert_eq!((reth.va, reth.dma_len), (0xa000 + M as u64, 3 * M as u32));
        assert_eq!(psn_of(&again[1]), 104);
        // The responder answers the rest from 101 on, FIRST again.
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            101,
            &[2; M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &[3; M],
        ));
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 103, &[4; M]));
        r.rx(&ack(104));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        let want: Vec<u8> = [1u8, 2, 3, 4].iter().flat_map(|&b| [b; M]).collect();
        assert_eq!(r.dst_bytes(0, len), want);
    }

    #[test]
    fn ack_past_an_unanswered_read_resends_the_read() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.post(r.wr(2, read(0), vec![r.dst_sge(0, 8)])).unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 3); // 100, 101, 102
                                        // The READ response was lost: the ACK of 102 implies it.
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        let again: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(again, [101, 102]);
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 101, &[5; 8]));
        r.rx(&ack(102));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
    }

    #[test]
    fn malformed_read_response_is_a_bad_response() {
        let mut r = Rig::rc();
        r.post(r.wr(1, read(0), vec![r.dst_sge(0, 2 * M as u32)]))
            .unwrap();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        r.drain();
        // ONLY where FIRST is due (two packets expected).
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[0; M]));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::BadRespErr), (2, WcStatus::WrFlushErr)]
        );
    }

    #[test]
    fn read_into_memory_gone_is_a_local_protection_error() {
        let mut r = Rig::rc();
        r.post(r.wr(1, read(0), vec![r.dst_sge(0, 8)])).unwrap();
        r.drain();
        let dst = r.dst;
        r.mem.deregister(dst).unwrap();
        r.mem
            .register(1, DST_VA, BUF_LEN, AccessFlags::empty())
            .unwrap();
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[0; 8]));
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
    }

    #[test]
    fn atomic_ack_writes_the_original_value() {
        let mut r = Rig::rc();
        let cs = SendOp::CmpSwap {
            remote_addr: 0x40,
            rkey: 1,
            compare: 0,
            swap: 1,
        };
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.post(r.wr(2, cs, vec![r.dst_sge(16, 8)])).unwrap();
        r.drain();
        let orig = 0x0102_0304_0506_0708u64;
        // A wrong PSN (the SEND's) is not an atomic's answer.
        r.rx(&atomic_ack(100, orig));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        // It also acknowledges the SEND before it.
        r.rx(&atomic_ack(101, orig));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        assert_eq!(r.dst_bytes(16, 8), orig.to_ne_bytes());
        assert_eq!(r.req.rd_atomic, 0);
    }
}
