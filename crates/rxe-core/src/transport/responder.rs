//! The responder: the receive side of a QP. It checks each request packet's
//! PSN, assembles SEND messages into receive work requests, executes RDMA
//! WRITE, READ and atomics through [`MemoryAccess`], and queues the
//! acknowledgements, READ responses and ATOMIC Acknowledges that
//! `poll_transmit` then writes out, in PSN order.
//!
//! It follows the conventions of the [module documentation](super), section
//! "Conventions the requester, completer and responder share". Choices
//! beyond them:
//!
//! - Outgoing responses sit in one queue in the order they were made, so an
//!   ACK never overtakes the READ response or ATOMIC Acknowledge of an
//!   earlier PSN (a requester may read an ACK that covers an unanswered
//!   READ as a lost response). A new ACK replaces an ACK that is still the
//!   last one queued (coalescing: ACKs are cumulative).
//! - RC: after a PSN sequence error NAK or an RNR NAK the responder stays
//!   silent for packets ahead of the expected PSN until that PSN arrives,
//!   so that one gap (or one RNR condition) gives one NAK (IBTA 9.7.5.1.1
//!   for the sequence error; kernel rxe also sends one, but would answer the
//!   packets that follow an RNR NAK with a sequence-error NAK, which sends
//!   the requester back before its RNR wait is over).
//! - The MSN counts request messages completed, incremented at the last
//!   packet of a SEND or WRITE and when a READ or atomic is executed
//!   (IBTA C9-147, as quoted by the kernel rxe change that made it so).
//! - "Outstanding" READ/atomic requests, for the `max_dest_rd_atomic` limit,
//!   are those whose responses are still queued here, not yet sent. A new
//!   one beyond the limit is answered with NAK Invalid Request (a requester
//!   that honours its `max_rd_atomic` can never trigger this).
//! - The QP's `access_flags` gate remote operations: a WRITE, READ or atomic
//!   that the QP does not enable is NAK Invalid Request on RC (the
//!   operation is not supported by this QP; kernel rxe answers the same) and
//!   dropped on UC.
//! - A receive that completes in error (LOC_LEN_ERR, LOC_PROT_ERR) moves the
//!   QP to ERR for every QP type, so that the rest is flushed (IBTA 10.8:
//!   a work request completed in error puts the QP in Error, except the
//!   UD/UC send queue's SQE). Kernel rxe leaves UD and UC QPs running after
//!   a receive length error.
//! - UC: a PSN behind the expected one is a stale duplicate (the network
//!   duplicated it) and is dropped; only a PSN ahead means loss. Kernel rxe
//!   treats both as loss, which lets a duplicated UC SEND ONLY be delivered
//!   twice. While a UC message is being discarded, the expected PSN follows
//!   the packets dropped, so that late copies of them count as stale.
//! - SEND with Invalidate: the completion reports the R_Key; invalidating
//!   the memory region is the verbs layer's job (it owns the MR table).
//! - Shared receive queue: a QP created with `QpInit::srq` takes the receive
//!   for each new SEND (at its first packet) or WRITE with immediate (at its
//!   last packet, the one with the immediate) from the SRQ the endpoint
//!   passes in, exactly where it would take one from its own queue; an empty
//!   SRQ means RNR NAK (RC) or drop (UC, UD), as an empty receive queue
//!   does. A UC message that lost a packet gives its receive back to the
//!   front of the SRQ. Taking a receive may reach the SRQ limit, which the
//!   responder raises as `AsyncEvent::SrqLimitReached` through the QP's
//!   events. In ERR the SRQ's receives are not flushed (they are not this
//!   QP's); only the one this QP took for a message in progress completes
//!   with WR_FLUSH_ERR, and then `AsyncEvent::LastWqeReached` is raised once
//!   (IBTA 10.3.1 / 11.6.3, not checked against the text; kernel rxe raises
//!   it when it flushes an SRQ QP's receive side).

use std::collections::VecDeque;

use super::counters::{Counter, Counters};
use super::memory::{AtomicOp, Key, MemoryAccess, Region};
use super::psn::{classify_request, Psn, RequestPsn};
use super::qp::{AsyncEvent, QpCommon, RecvMeta, Transmit};
use super::qp_attr::{AccessFlags, QpState, QpType, GSI_QKEY};
use super::recv_queue::{scatter, total_len, RecvQueue, MAX_MESSAGE};
use super::responder_resources::{Entry, Resources, Saved};
use super::srq::Srq;
use super::time::Instant;
use super::wr::{PostError, RecvWr, WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use crate::wire::{
    pad_for, AethRepr, AtomicAckEthRepr, BthRepr, ExtReprs, NakCode, Opcode, Operation, Position,
    Syndrome, TransportPacket, TransportRepr,
};

/// Bytes of GRH space at the start of a UD receive buffer (IBTA 11.4.1.2).
pub const GRH_LEN: usize = 40;
/// The ICRC slot after every packet.
const ICRC_LEN: usize = 4;
/// Zeros for the payload slot of a READ response, which memory then fills
/// in place (the largest path MTU).
static ZEROS: [u8; 4096] = [0; 4096];

/// The message being received.
#[derive(Debug, Default)]
enum Msg {
    #[default]
    Idle,
    /// A SEND: the receive it fills and the bytes written so far.
    Send { wr: RecvWr, written: u64 },
    /// An RDMA WRITE: the validated RETH range and the bytes written.
    Write { region: Region, written: u64 },
}

/// A READ response being sent.
#[derive(Debug, Clone, Copy)]
struct ReadOut {
    /// The first PSN of the READ this answers (its saved entry).
    res_psn: Psn,
    /// The PSN of the request (original or duplicate) being answered.
    req_psn: Psn,
    /// The PSN of the next response packet.
    next_psn: Psn,
    region: Region,
    /// Bytes of `region` sent so far.
    sent: usize,
    /// Whether its first packet has gone.
    started: bool,
    msn: u32,
}

/// Something to send.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// Acknowledge: ACK, RNR NAK or NAK.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    Read(ReadOut),
}

impl Out {
    /// A NAK after which the QP is in ERR: it still goes out.
    fn is_final(&self) -> bool {
        matches!(
            self,
            Out::Ack {
                syndrome: Syndrome::Nak(code),
                ..
            } if *code != NakCode::PsnSequenceError
        )
    }
}

/// Why a request could not be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// No receive posted: RNR NAK (RC), drop (UC).
    NoRecv,
    /// NAK with this code (RC), drop (UC). Receive completions in error
    /// have been made already.
    Nak(NakCode),
}

/// The responder of one QP.
#[derive(Debug, Default)]
pub struct Responder {
    rq: RecvQueue,
    /// Expected PSN.
    epsn: Psn,
    /// Message sequence number: request messages completed, mod 2^24.
    msn: u32,
    /// A packet has arrived since the QP entered RTR.
    seen_packet: bool,
    /// RC: a sequence-error or RNR NAK answers the current gap.
    nak_sent: bool,
    /// UC: dropping until the next FIRST or ONLY.
    uc_discard: bool,
    msg: Msg,
    resources: Resources,
    out: VecDeque<Out>,
    /// SRQ: Last WQE Reached has been raised for this entry into ERR.
    last_wqe_raised: bool,
}

impl Responder {
    pub fn new() -> Responder {
        Responder::default()
    }

    /// The PSN the responder expects next.
    pub fn expected_psn(&self) -> Psn {
        self.epsn
    }

    /// Receives posted and not yet used.
    pub fn posted_recvs(&self) -> usize {
        self.rq.len()
    }

    /// After a Modify QP: on entering RTR take the expected PSN from
    /// `rq_psn`; keep the saved-request table as large as
    /// `max_dest_rd_atomic`.
    pub fn on_modify(&mut self, common: &mut QpCommon, from: QpState) {
        let attrs = common.config.attrs();
        self.resources
            .set_capacity(usize::from(attrs.max_dest_rd_atomic.unwrap_or(1)));
        if common.state() == QpState::Rtr && from != QpState::Rtr {
            self.epsn = attrs.rq_psn.unwrap_or_default();
            self.msn = 0;
            self.seen_packet = false;
            self.nak_sent = false;
            self.uc_discard = false;
        }
    }

    /// `ibv_post_recv` (see [`RecvQueue::post`]; refused with `QpHasSrq` on
    /// a QP attached to an SRQ).
    pub fn post_recv(&mut self, common: &QpCommon, wr: RecvWr) -> Result<(), PostError> {
        self.rq.post(common, wr)
    }

    /// The receive a SEND in progress has taken, if any, leaving no message
    /// in progress. The endpoint gives it back to the SRQ when a QP attached
    /// to one is reset or destroyed mid-message.
    pub fn take_in_progress_recv(&mut self) -> Option<RecvWr> {
        match core::mem::take(&mut self.msg) {
            Msg::Send { wr, .. } => Some(wr),
            other => {
                self.msg = other;
                None
            }
        }
    }

    /// A request packet for this QP, which the endpoint has checked (QPN,
    /// transport, state, P_Key). `srq` is the SRQ the QP is attached to
    /// (`QpInit::srq`), `None` for a QP with its own receive queue.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_request(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        _now: Instant,
        meta: &RecvMeta,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        if !self.seen_packet {
            self.seen_packet = true;
            // IBTA 11.6.3: Communication Established, for a connected QP
            // that receives its first packet while in RTR.
            if common.state() == QpState::Rtr && !common.qp_type().is_datagram() {
                common.event(AsyncEvent::CommEstablished { qpn: common.qpn });
            }
        }
        match common.qp_type() {
            QpType::Rc => self.rc(common, counters, srq, pkey_index, pkt, mem),
            QpType::Uc => self.uc(common, counters, srq, pkey_index, pkt, mem),
            QpType::Ud | QpType::Gsi => self.ud(common, counters, srq, meta, pkey_index, pkt, mem),
        }
    }

    /// Takes the receive for a new message: from the SRQ if the QP has
    /// one (raising SRQ Limit Reached when that take reached the limit),
    /// else from its own queue.
    fn take_recv(&mut self, common: &mut QpCommon, srq: Option<&mut Srq>) -> Option<RecvWr> {
        match srq {
            Some(srq) => {
                let wr = srq.pop()?;
                if srq.take_limit_reached() {
                    common.event(AsyncEvent::SrqLimitReached { srqn: srq.srqn() });
                }
                Some(wr)
            }
            None => self.rq.pop(),
        }
    }

    /// Whether a receive is there to take.
    fn has_recv(&self, srq: Option<&Srq>) -> bool {
        match srq {
            Some(srq) => !srq.is_empty(),
            None => !self.rq.is_empty(),
        }
    }

    /// The next ACK, NAK, READ response or ATOMIC Acknowledge, in the order
    /// they were made.
    pub fn poll_transmit(
        &mut self,
        common: &mut QpCommon,
        _counters: &mut Counters,
        mem: &mut dyn MemoryAccess,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        loop {
            let state = common.state();
            if matches!(state, QpState::Reset | QpState::Init) {
                return None;
            }
            let front = self.out.front_mut()?;
            // In ERR only the NAK that put the QP there still goes out.
            if state == QpState::Error && !front.is_final() {
                self.out.pop_front();
                continue;
            }
            let bth = |opcode: Opcode, psn: Psn| BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: common.pkey,
                fecn: false,
                becn: false,
                dest_qp: common.config.attrs().dest_qpn.unwrap_or(0),
                ack_req: false,
                psn: psn.value(),
            };
            let len = match *front {
                Out::Ack { psn, syndrome, msn } => {
                    let ext = ExtReprs {
                        aeth: Some(AethRepr { syndrome, msn }),
                        ..ExtReprs::default()
                    };
                    let repr = TransportRepr::new(bth(Opcode::RC_ACKNOWLEDGE, psn), ext, 0);
                    let len = repr.emit(buf, &[]).ok()?;
                    self.out.pop_front();
                    len
                }
                Out::AtomicAck { psn, orig, msn } => {
                    let ext = ExtReprs {
                        aeth: Some(AethRepr {
                            syndrome: Syndrome::ACK_CREDITS_INVALID,
                            msn,
                        }),
                        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: orig }),
                        ..ExtReprs::default()
                    };
                    let opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                    let repr = TransportRepr::new(bth(opcode, psn), ext, 0);
                    let len = repr.emit(buf, &[]).ok()?;
                    self.out.pop_front();
                    len
                }
                Out::Read(ref mut r) => {
                    let mtu = (common.mtu() as usize).min(ZEROS.len());
                    let remaining = r.region.len().saturating_sub(r.sent);
                    let n = remaining.min(mtu);
                    let last = remaining <= mtu;
                    let opcode = match (r.started, last) {
                        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    };
                    let ext = ExtReprs {
                        aeth: (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(
                            AethRepr {
                                syndrome: Syndrome::ACK_CREDITS_INVALID,
                                msn: r.msn,
                            },
                        ),
                        ..ExtReprs::default()
                    };
                    let repr = TransportRepr::new(bth(opcode, r.next_psn), ext, n);
                    let len = repr.emit(buf, &ZEROS[..n]).ok()?;
                    // The payload sits before the pad and the ICRC slot.
                    let at = len - ICRC_LEN - usize::from(pad_for(n)) - n;
                    if let Err(e) = mem.read(&r.region, r.sent, &mut buf[at..at + n]) {
                        // The region went away after the READ was checked.
                        let psn = r.req_psn;
                        *front = Out::Ack {
                            psn,
                            syndrome: Syndrome::Nak(e.nak_code()),
                            msn: self.msn,
                        };
                        common.fatal();
                        continue;
                    }
                    r.sent += n;
                    r.next_psn = r.next_psn.next();
                    r.started = true;
                    if last {
                        self.out.pop_front();
                    }
                    len
                }
            };
            return Some(Transmit {
                len,
                dest: common.config.attrs().av.unwrap_or_default(),
                src_qpn: common.qpn,
            });
        }
    }

    /// The QP is in ERR: every posted receive (and the one a SEND was
    /// filling) completes with WR_FLUSH_ERR; only a final NAK stays queued.
    /// A QP attached to an SRQ flushes only the receive it took (the SRQ's
    /// belong to the SRQ and stay queued for its other QPs), then raises
    /// Last WQE Reached, once per entry into ERR.
    pub fn flush(&mut self, common: &mut QpCommon) {
        let qpn = common.qpn;
        let flushed = |wr_id| {
            WorkCompletion::new(
                wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                qpn,
                WorkQueue::Recv,
            )
        };
        if let Msg::Send { wr, .. } = core::mem::take(&mut self.msg) {
            common.complete(flushed(wr.wr_id));
        }
        for wr in self.rq.drain() {
            common.complete(flushed(wr.wr_id));
        }
        self.out.retain(Out::is_final);
        self.resources.clear();
        // In ERR no request reaches the responder any more (the endpoint
        // drops them), so nothing more will be taken from the SRQ.
        if common.init.srq.is_some() && common.state() == QpState::Error && !self.last_wqe_raised {
            self.last_wqe_raised = true;
            common.event(AsyncEvent::LastWqeReached { qpn: common.qpn });
        }
    }

    // ---- RC -------------------------------------------------------------

    fn rc(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        let bth = &pkt.repr.bth;
        let psn = Psn::new(bth.psn);
        match classify_request(psn, self.epsn) {
            RequestPsn::Expected => {
                self.nak_sent = false;
                match self.execute(common, counters, srq, pkey_index, pkt, mem) {
                    Ok(npsn) => {
                        self.epsn = psn.add(npsn);
                        let responded = matches!(
                            pkt.info.operation,
                            Operation::RdmaReadRequest
                                | Operation::CompareSwap
                                | Operation::FetchAdd
                        );
                        let ends = matches!(
                            pkt.info.position,
                            None | Some(Position::Last | Position::Only)
                        );
                        if !responded && (bth.ack_req || ends) {
                            self.queue_ack(psn);
                        }
                    }
                    Err(Fail::NoRecv) => {
                        // The expected PSN stays: the requester resends
                        // this packet after the RNR wait.
                        counters.inc(Counter::SendRnrErr);
                        let timer = common.config.attrs().min_rnr_timer.unwrap_or(0);
                        self.push(Out::Ack {
                            psn,
                            syndrome: Syndrome::RnrNak { timer },
                            msn: self.msn,
                        });
                        self.nak_sent = true;
                    }
                    Err(Fail::Nak(code)) => {
                        // Class B/C errors (IBTA 9.7.5.2.x): NAK the packet,
                        // then the QP goes to ERR.
                        self.push(Out::Ack {
                            psn,
                            syndrome: Syndrome::Nak(code),
                            msn: self.msn,
                        });
                        common.fatal();
                    }
                }
            }
            RequestPsn::Duplicate { .. } => {
                counters.inc(Counter::DuplicateRequest);
                self.rc_duplicate(common, pkt, mem);
            }
            RequestPsn::OutOfSequence { .. } => {
                counters.inc(Counter::OutOfSeqRequest);
                if !self.nak_sent {
                    self.nak_sent = true;
                    self.push(Out::Ack {
                        psn: self.epsn,
                        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                        msn: self.msn,
                    });
                }
            }
        }
    }

    /// A request already executed (IBTA 9.7.5.1.1): SEND and WRITE are
    /// acknowledged again (C9-105 as kernel rxe cites it), a READ is
    /// executed again from the duplicate's RETH, an atomic is answered from
    /// its saved result. A duplicate this responder no longer remembers is
    /// dropped.
    fn rc_duplicate(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        let psn = Psn::new(pkt.repr.bth.psn);
        match pkt.info.operation {
            Operation::Send | Operation::RdmaWrite => self.queue_ack(self.epsn.prev()),
            Operation::RdmaReadRequest => {
                let Some(entry) = self.resources.find(psn) else {
                    return;
                };
                let Saved::Read {
                    first,
                    rkey,
                    va,
                    len,
                    ..
                } = entry.saved
                else {
                    return;
                };
                let Some(reth) = pkt.repr.ext.reth else {
                    return;
                };
                // The resent request must ask for a part of the original.
                let end = va.saturating_add(u64::from(len));
                let new_end = reth.va.checked_add(u64::from(reth.dma_len));
                let inside =
                    reth.rkey == rkey && reth.va >= va && new_end.is_some_and(|e| e <= end);
                if !inside {
                    return;
                }
                let region = match mem.check_rdma(
                    Key::new(reth.rkey),
                    common.init.pd,
                    AccessFlags::REMOTE_READ,
                    reth.va,
                    reth.dma_len,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        self.push(Out::Ack {
                            psn,
                            syndrome: Syndrome::Nak(e.nak_code()),
                            msn: self.msn,
                        });
                        common.fatal();
                        return;
                    }
                };
                let restart = ReadOut {
                    res_psn: first,
                    req_psn: psn,
                    next_psn: psn,
                    region,
                    sent: 0,
                    started: false,
                    msn: entry.msn,
                };
                // A stream of the same READ still queued restarts in place.
                let queued = self
                    .out
                    .iter_mut()
                    .find(|o| matches!(o, Out::Read(r) if r.res_psn == first));
                match queued {
                    Some(o) => *o = Out::Read(restart),
                    None => self.push(Out::Read(restart)),
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let Some(Entry {
                    saved: Saved::Atomic { orig, .. },
                    msn,
                }) = self.resources.find(psn)
                else {
                    return;
                };
                let queued = self
                    .out
                    .iter()
                    .any(|o| matches!(o, Out::AtomicAck { psn: p, .. } if *p == psn));
                if !queued {
                    self.push(Out::AtomicAck { psn, orig, msn });
                }
            }
            _ => {}
        }
    }

    // ---- UC -------------------------------------------------------------

    fn uc(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        mut srq: Option<&mut Srq>,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        let psn = Psn::new(pkt.repr.bth.psn);
        let starts = matches!(
            pkt.info.position,
            Some(Position::First | Position::Only) | None
        );
        // One packet, one drop count at most: once the message in progress
        // is counted as dropped, this packet (which ended it) is not again.
        let mut counted = false;
        match classify_request(psn, self.epsn) {
            RequestPsn::Duplicate { .. } => {
                counters.inc(Counter::DuplicateRequest);
                return;
            }
            RequestPsn::OutOfSequence { .. } => {
                // Packets were lost: the message they belonged to is gone.
                counters.inc(Counter::OutOfSeqRequest);
                counted = self.uc_abort(counters, srq.as_deref_mut());
                if !starts {
                    self.uc_discard = true;
                }
            }
            RequestPsn::Expected => {}
        }
        if self.uc_discard && !starts {
            if !counted {
                counters.inc(Counter::DropUcIncomplete);
            }
            self.epsn = psn.next();
            return;
        }
        self.uc_discard = false;
        match self.execute(common, counters, srq.as_deref_mut(), pkey_index, pkt, mem) {
            Ok(n) => self.epsn = psn.add(n),
            Err(fail) => {
                if !self.uc_abort(counters, srq) && !counted {
                    counters.inc(match fail {
                        Fail::NoRecv => Counter::DropNoRecv,
                        Fail::Nak(_) => Counter::DropUcIncomplete,
                    });
                }
                self.uc_discard =
                    !matches!(pkt.info.position, Some(Position::Last | Position::Only));
                self.epsn = psn.next();
            }
        }
    }

    /// Drops the UC message in progress; a SEND gives its receive back, to
    /// the front of the queue it came from (its own or the SRQ). Returns
    /// whether there was one (and it was counted).
    fn uc_abort(&mut self, counters: &mut Counters, srq: Option<&mut Srq>) -> bool {
        match core::mem::take(&mut self.msg) {
            Msg::Idle => return false,
            Msg::Send { wr, .. } => match srq {
                Some(srq) => srq.push_front(wr),
                None => self.rq.push_front(wr),
            },
            Msg::Write { .. } => {}
        }
        counters.inc(Counter::DropUcIncomplete);
        true
    }

    // ---- UD -------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn ud(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        meta: &RecvMeta,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        self.epsn = Psn::new(pkt.repr.bth.psn).next();
        let Some(deth) = pkt.repr.ext.deth else {
            return counters.inc(Counter::DropMissingHeader);
        };
        // IBTA 10.2.5 / C10-15: the DETH Q_Key must be the QP's; QP1 has the
        // well-known GSI Q_Key (IBTA 13.5.x).
        let qkey = match common.qp_type() {
            QpType::Gsi => common.config.attrs().qkey.unwrap_or(GSI_QKEY),
            _ => match common.config.attrs().qkey {
                Some(q) => q,
                None => return counters.inc(Counter::DropQkeyMismatch),
            },
        };
        if deth.qkey != qkey {
            return counters.inc(Counter::DropQkeyMismatch);
        }
        if pkt.info.operation != Operation::Send {
            return counters.inc(Counter::DropWrongTransport);
        }
        // A UD message is one packet of at most the path MTU (the port's):
        // a longer one no conforming sender makes is dropped before it takes
        // a receive, as kernel rxe does (IBTA 9.8; section not checked).
        if pkt.payload.len() > common.mtu() as usize {
            return counters.inc(Counter::DropBadPayloadLength);
        }
        let Some(wr) = self.take_recv(common, srq) else {
            return counters.inc(Counter::DropNoRecv);
        };
        let mut wc = WorkCompletion::new(
            wr.wr_id,
            WcStatus::Success,
            WcOpcode::Recv,
            common.qpn,
            WorkQueue::Recv,
        );
        wc.src_qp = deth.src_qp;
        wc.pkey_index = pkey_index;
        let pd = common.init.pd;
        // The buffer starts with 40 bytes of GRH space (IBTA 11.4.1.2).
        let total = (GRH_LEN + pkt.payload.len()) as u64;
        let res = if total_len(&wr.sg_list) < total {
            Err(WcStatus::LocLenErr)
        } else {
            scatter(mem, pd, &wr.sg_list, 0, &meta.grh)
                .and_then(|()| scatter(mem, pd, &wr.sg_list, GRH_LEN as u64, pkt.payload))
        };
        match res {
            Ok(()) => {
                wc.grh = true;
                wc.byte_len = total as u32;
                wc.imm_data = pkt.repr.ext.immdt.map(|i| i.imm);
                wc.solicited = pkt.repr.bth.solicited;
                counters.inc(Counter::RdmaRecvs);
                common.complete(wc);
            }
            Err(status) => {
                wc.status = status;
                common.complete(wc);
                common.fatal();
            }
        }
    }

    // ---- executing a request at the expected PSN (RC and UC) -------------

    /// Executes the packet at the expected PSN; returns the PSNs it takes
    /// (a READ takes one per response packet).
    fn execute(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        let info = pkt.info;
        let continues = matches!(info.position, Some(Position::Middle | Position::Last));
        // The opcode must fit the message in progress (IBTA 9.7.5.1.x, 9.8.3
        // for UC): MIDDLE/LAST continue a message of their kind, anything else
        // starts one, and nothing starts while one is open.
        let in_order = match (&self.msg, info.operation) {
            (Msg::Send { .. }, Operation::Send) | (Msg::Write { .. }, Operation::RdmaWrite) => {
                continues
            }
            (Msg::Idle, _) => !continues,
            _ => false,
        };
        if !in_order {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        if matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            // FIRST and MIDDLE carry exactly one path MTU, LAST and ONLY at
            // most one (IBTA 9.7.x, C9-92).
            let mtu = common.mtu() as usize;
            let n = pkt.payload.len();
            let len_ok = match info.position {
                Some(Position::First | Position::Middle) => n == mtu,
                _ => n <= mtu,
            };
            if !len_ok {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
        }
        match info.operation {
            Operation::Send => self.exec_send(common, counters, srq, pkey_index, pkt, mem),
            Operation::RdmaWrite => self.exec_write(common, counters, srq, pkey_index, pkt, mem),
            Operation::RdmaReadRequest if common.qp_type() == QpType::Rc => {
                self.exec_read(common, pkt, mem)
            }
            Operation::CompareSwap | Operation::FetchAdd if common.qp_type() == QpType::Rc => {
                self.exec_atomic(common, pkt, mem)
            }
            // FLUSH, ATOMIC WRITE and anything else: not supported.
            _ => Err(Fail::Nak(NakCode::InvalidRequest)),
        }
    }

    fn exec_send(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        if matches!(self.msg, Msg::Idle) {
            let wr = self.take_recv(common, srq).ok_or(Fail::NoRecv)?;
            self.msg = Msg::Send { wr, written: 0 };
        }
        let Msg::Send { wr, written } = &mut self.msg else {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        };
        if let Err(status) = scatter(mem, common.init.pd, &wr.sg_list, *written, pkt.payload) {
            // Too long for the receive: LOC_LEN_ERR here, Invalid Request
            // there; a bad receive buffer: LOC_PROT_ERR here, Remote
            // Operational Error there (IBTA 9.7.5.2.x, class A/C).
            let code = match status {
                WcStatus::LocLenErr => NakCode::InvalidRequest,
                _ => NakCode::RemoteOperationalError,
            };
            let Msg::Send { wr, .. } = core::mem::take(&mut self.msg) else {
                unreachable!()
            };
            common.complete(WorkCompletion::new(
                wr.wr_id,
                status,
                WcOpcode::Recv,
                common.qpn,
                WorkQueue::Recv,
            ));
            common.fatal();
            return Err(Fail::Nak(code));
        }
        *written += pkt.payload.len() as u64;
        if matches!(pkt.info.position, Some(Position::Last | Position::Only)) {
            let Msg::Send { wr, written } = core::mem::take(&mut self.msg) else {
                unreachable!()
            };
            let mut wc = WorkCompletion::new(
                wr.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                common.qpn,
                WorkQueue::Recv,
            );
            // written <= the receive's length <= 2^31.
            wc.byte_len = u32::try_from(written).unwrap_or(u32::MAX);
            wc.imm_data = pkt.repr.ext.immdt.map(|i| i.imm);
            wc.invalidated_rkey = pkt.repr.ext.ieth.map(|i| i.rkey);
            wc.pkey_index = pkey_index;
            wc.solicited = pkt.repr.bth.solicited;
            common.complete(wc);
            counters.inc(Counter::RdmaRecvs);
            self.msn = (self.msn + 1) & Psn::MASK;
        }
        Ok(1)
    }

    fn exec_write(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        srq: Option<&mut Srq>,
        pkey_index: u16,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        let info = pkt.info;
        // WRITE with immediate consumes a receive: check before any side
        // effect, so that the packet the RNR NAK names can simply be resent.
        // (Nothing else can take from a shared SRQ between this check and
        // the take below: both happen in this one call.)
        if info.immediate && !self.has_recv(srq.as_deref()) {
            return Err(Fail::NoRecv);
        }
        if matches!(self.msg, Msg::Idle) {
            if !qp_allows(common, AccessFlags::REMOTE_WRITE) {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
            let Some(reth) = pkt.repr.ext.reth else {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            };
            let region = mem
                .check_rdma(
                    Key::new(reth.rkey),
                    common.init.pd,
                    AccessFlags::REMOTE_WRITE,
                    reth.va,
                    reth.dma_len,
                )
                .map_err(|e| Fail::Nak(e.nak_code()))?;
            self.msg = Msg::Write { region, written: 0 };
        }
        let Msg::Write { region, written } = &mut self.msg else {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        };
        // The packets must add up to the RETH DMA length exactly.
        let dma_len = region.len() as u64;
        let end = *written + pkt.payload.len() as u64;
        let ends = matches!(info.position, Some(Position::Last | Position::Only));
        let fits = if ends { end == dma_len } else { end < dma_len };
        if !fits {
            self.msg = Msg::Idle;
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        let offset = usize::try_from(*written).map_err(|_| Fail::Nak(NakCode::InvalidRequest))?;
        if let Err(e) = mem.write(region, offset, pkt.payload) {
            self.msg = Msg::Idle;
            return Err(Fail::Nak(e.nak_code()));
        }
        *written = end;
        if ends {
            self.msg = Msg::Idle;
            self.msn = (self.msn + 1) & Psn::MASK;
            if info.immediate {
                let Some(wr) = self.take_recv(common, srq) else {
                    return Err(Fail::NoRecv);
                };
                let mut wc = WorkCompletion::new(
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    common.qpn,
                    WorkQueue::Recv,
                );
                wc.byte_len = u32::try_from(dma_len).unwrap_or(u32::MAX);
                wc.imm_data = pkt.repr.ext.immdt.map(|i| i.imm);
                wc.pkey_index = pkey_index;
                wc.solicited = pkt.repr.bth.solicited;
                common.complete(wc);
                counters.inc(Counter::RdmaRecvs);
            }
        }
        Ok(1)
    }

    /// READ and atomic responses still queued, for the
    /// `max_dest_rd_atomic` limit.
    fn outstanding(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Out::Read(_) | Out::AtomicAck { .. }))
            .count()
    }

    fn rd_atomic_allowed(&self, common: &QpCommon) -> bool {
        let max = common.config.attrs().max_dest_rd_atomic.unwrap_or(0);
        self.outstanding() < usize::from(max)
    }

    fn exec_read(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        let invalid = Fail::Nak(NakCode::InvalidRequest);
        if !qp_allows(common, AccessFlags::REMOTE_READ) || !self.rd_atomic_allowed(common) {
            return Err(invalid);
        }
        let reth = pkt.repr.ext.reth.ok_or(invalid)?;
        if u64::from(reth.dma_len) > MAX_MESSAGE {
            return Err(invalid);
        }
        let region = mem
            .check_rdma(
                Key::new(reth.rkey),
                common.init.pd,
                AccessFlags::REMOTE_READ,
                reth.va,
                reth.dma_len,
            )
            .map_err(|e| Fail::Nak(e.nak_code()))?;
        // One PSN per response packet, at least one (IBTA 9.7.2).
        let npkts = reth.dma_len.div_ceil(common.mtu()).max(1);
        let psn = Psn::new(pkt.repr.bth.psn);
        self.msn = (self.msn + 1) & Psn::MASK;
        self.resources.push(Entry {
            saved: Saved::Read {
                first: psn,
                npkts,
                rkey: reth.rkey,
                va: reth.va,
                len: reth.dma_len,
            },
            msn: self.msn,
        });
        self.push(Out::Read(ReadOut {
            res_psn: psn,
            req_psn: psn,
            next_psn: psn,
            region,
            sent: 0,
            started: false,
            msn: self.msn,
        }));
        Ok(npkts)
    }

    fn exec_atomic(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        let invalid = Fail::Nak(NakCode::InvalidRequest);
        if !qp_allows(common, AccessFlags::REMOTE_ATOMIC) || !self.rd_atomic_allowed(common) {
            return Err(invalid);
        }
        let a = pkt.repr.ext.atomic_eth.ok_or(invalid)?;
        let op = if pkt.info.operation == Operation::CompareSwap {
            AtomicOp::CmpSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        // Key, PD, right and bounds: Remote Access Error; misaligned:
        // Invalid Request (`MemError::nak_code`).
        let orig = mem
            .atomic(Key::new(a.rkey), common.init.pd, a.va, op)
            .map_err(|e| Fail::Nak(e.nak_code()))?;
        let psn = Psn::new(pkt.repr.bth.psn);
        self.msn = (self.msn + 1) & Psn::MASK;
        self.resources.push(Entry {
            saved: Saved::Atomic { psn, orig },
            msn: self.msn,
        });
        self.push(Out::AtomicAck {
            psn,
            orig,
            msn: self.msn,
        });
        Ok(1)
    }

    // ---- the response queue ---------------------------------------------

    fn push(&mut self, out: Out) {
        self.out.push_back(out);
    }

    /// Queues an ACK of everything up to `psn`, replacing an ACK that is
    /// still the last thing queued.
    fn queue_ack(&mut self, psn: Psn) {
        let ack = Out::Ack {
            psn,
            syndrome: Syndrome::ACK_CREDITS_INVALID,
            msn: self.msn,
        };
        match self.out.back_mut() {
            Some(
                last @ Out::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                },
            ) => *last = ack,
            _ => self.out.push_back(ack),
        }
    }
}

/// Whether the QP's `access_flags` enable a remote operation.
fn qp_allows(common: &QpCommon, right: AccessFlags) -> bool {
    common
        .config
        .attrs()
        .access_flags
        .is_some_and(|a| a.contains(right))
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod tests;
