//! The responder: the receive side of a QP. It checks each request packet's
//! PSN, assembles SEND messages into receive work requests, executes RDMA
//! WRITE, READ and atomics through [`MemoryAccess`], and queues the
//! acknowledgements, READ responses and ATOMIC Acknowledges that
//! `poll_transmit` then writes out, in PSN order.
//!
//! It follows the conventions of the [transport
//! documentation](crate::transport), section "Conventions the requester,
//! completer and responder share". Choices beyond them:
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
//! - RC, with selective retransmission on (`reorder`): a SEND or WRITE
//!   packet ahead of the expected PSN is still NAK'd (once per gap) and
//!   not executed, but kept; when the gap is filled the kept packets are
//!   executed in PSN order, an ACK then covers them, and a further gap
//!   among them is NAK'd at once. Resent copies of them are duplicates.
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
//! - SEND with Invalidate: at the message's last packet the responder asks
//!   [`MemoryAccess::invalidate`] to invalidate the R_Key, and the
//!   completion reports it. A refusal (another PD's region, a stale key, a
//!   region that may not be invalidated remotely, which every `ibv_reg_mr`
//!   region is) completes the receive with REM_INV_REQ_ERR, answers NAK
//!   Invalid Request and moves the QP to ERR. Kernel rxe completes the
//!   receive the same way but ACKs the packet, so its requester sees the
//!   SEND succeed and then loses the connection.
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

use super::queue::RecvQueue;
use super::resources::Resources;
use super::srq::Srq;
use crate::transport::counters::Counters;
use crate::transport::error::PostError;
use crate::transport::io::{RecvMeta, Transmit};
use crate::transport::memory::{MemoryAccess, Region};
use crate::transport::psn::Psn;
use crate::transport::qp::{AsyncEvent, QpCommon, QpState, QpType};
use crate::transport::time::Instant;
use crate::transport::wr::{RecvWr, WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use crate::wire::icrc::ICRC_LEN;
use crate::wire::{
    pad_for, AethRepr, AtomicAckEthRepr, BthRepr, ExtReprs, NakCode, Opcode, Syndrome,
    TransportPacket, TransportRepr,
};

/// Zeros for the payload slot of a READ response, which memory then fills
/// in place (the largest path MTU).
static ZEROS: [u8; 4096] = [0; 4096];

/// The message being received.
#[derive(Debug, Default)]
pub(super) enum Msg {
    #[default]
    Idle,
    /// A SEND: the receive it fills and the bytes written so far.
    Send { wr: RecvWr, written: u64 },
    /// An RDMA WRITE: the validated RETH range and the bytes written.
    Write { region: Region, written: u64 },
}

/// A READ response being sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadOut {
    /// The first PSN of the READ this answers (its saved entry).
    pub(super) res_psn: Psn,
    /// The PSN of the request (original or duplicate) being answered.
    pub(super) req_psn: Psn,
    /// The PSN of the next response packet.
    pub(super) next_psn: Psn,
    pub(super) region: Region,
    /// Bytes of `region` sent so far.
    pub(super) sent: usize,
    /// Whether its first packet has gone.
    pub(super) started: bool,
    pub(super) msn: u32,
}

/// Something to send.
#[derive(Debug, Clone, Copy)]
pub(super) enum Out {
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
    /// The empty RDMA READ Response Only that answers an ATOMIC WRITE or
    /// FLUSH with PSN `psn`.
    pub(super) fn zero_response(psn: Psn, va: u64, msn: u32) -> Out {
        Out::Read(ReadOut {
            res_psn: psn,
            req_psn: psn,
            next_psn: psn,
            region: Region::empty(va),
            sent: 0,
            started: false,
            msn,
        })
    }

    /// A NAK after which the QP is in ERR: it still goes out.
    pub(super) fn is_final(&self) -> bool {
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
pub(super) enum Fail {
    /// No receive posted: RNR NAK (RC), drop (UC).
    NoRecv,
    /// NAK with this code (RC), drop (UC). Receive completions in error
    /// have been made already.
    Nak(NakCode),
}

/// The responder of one QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    pub(super) rq: RecvQueue,
    /// Expected PSN.
    pub(super) epsn: Psn,
    /// Message sequence number: request messages completed, mod 2^24.
    pub(super) msn: u32,
    /// A packet has arrived since the QP entered RTR.
    pub(super) seen_packet: bool,
    /// RC: a sequence-error or RNR NAK answers the current gap.
    pub(super) nak_sent: bool,
    /// UC: dropping until the next FIRST or ONLY.
    pub(super) uc_discard: bool,
    pub(super) msg: Msg,
    pub(super) resources: Resources,
    pub(super) out: VecDeque<Out>,
    /// SRQ: Last WQE Reached has been raised for this entry into ERR.
    pub(super) last_wqe_raised: bool,
}

impl Responder {
    pub(crate) fn new() -> Responder {
        Responder::default()
    }

    /// The PSN the responder expects next.
    pub(crate) fn expected_psn(&self) -> Psn {
        self.epsn
    }

    /// Held packets were executed (`reorder`): acknowledge everything
    /// before the expected PSN now, whether or not the last of them asked
    /// for it, so that a requester waiting on its resend of the gap's
    /// packet learns at once how far the peer got.
    pub(crate) fn ack_replayed(&mut self) {
        self.queue_ack(self.epsn.prev());
    }

    /// Packets ahead of the expected PSN are held (`reorder`) beyond a gap
    /// that was just found, when the packets past it had come already:
    /// the NAK the first of them would have drawn, now, once per gap
    /// (IBTA 9.7.5.1.1).
    ///
    /// The NAK replaces an ACK still queued last: it acknowledges the same
    /// (everything before the expected PSN), and a requester that resent
    /// one packet and waits for its answer must not read that ACK alone
    /// as "nothing after it was kept".
    /// Returns whether it queued the NAK.
    pub(crate) fn nak_gap(&mut self) -> bool {
        if self.nak_sent {
            return false;
        }
        self.nak_sent = true;
        self.push_over_ack(Out::Ack {
            psn: self.epsn,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: self.msn,
        });
        true
    }

    /// Receives posted and not yet used.
    #[cfg(test)]
    pub(crate) fn posted_recvs(&self) -> usize {
        self.rq.len()
    }

    /// After a Modify QP: on entering RTR take the expected PSN from
    /// `rq_psn`; keep the saved-request table as large as
    /// `max_dest_rd_atomic`.
    pub(crate) fn on_modify(&mut self, common: &mut QpCommon, from: QpState) {
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
    pub(crate) fn post_recv(&mut self, common: &QpCommon, wr: RecvWr) -> Result<(), PostError> {
        self.rq.post(common, wr)
    }

    /// The receive a SEND in progress has taken, if any, leaving no message
    /// in progress. The endpoint gives it back to the SRQ when a QP attached
    /// to one is reset or destroyed mid-message.
    pub(crate) fn take_in_progress_recv(&mut self) -> Option<RecvWr> {
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
    pub(crate) fn handle_request(
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
    pub(super) fn take_recv(
        &mut self,
        common: &mut QpCommon,
        srq: Option<&mut Srq>,
    ) -> Option<RecvWr> {
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
    pub(super) fn has_recv(&self, srq: Option<&Srq>) -> bool {
        match srq {
            Some(srq) => !srq.is_empty(),
            None => !self.rq.is_empty(),
        }
    }

    /// The next ACK, NAK, READ response or ATOMIC Acknowledge, in the order
    /// they were made.
    pub(crate) fn poll_transmit(
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
                mig_req: common.sends_mig_req(),
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
    pub(crate) fn flush(&mut self, common: &mut QpCommon) {
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

    // ---- the response queue ---------------------------------------------

    /// Whether all there is to send is one positive ACK: it may wait for
    /// the QP's requests of the same turn (`endpoint`'s module docs).
    pub(crate) fn only_ack_queued(&self) -> bool {
        self.out.len() == 1
            && matches!(
                self.out.front(),
                Some(Out::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                })
            )
    }

    pub(super) fn push(&mut self, out: Out) {
        self.out.push_back(out);
    }

    /// Queues an ACK of everything up to `psn`, replacing an ACK that is
    /// still the last thing queued.
    pub(super) fn queue_ack(&mut self, psn: Psn) {
        self.push_over_ack(Out::Ack {
            psn,
            syndrome: Syndrome::ACK_CREDITS_INVALID,
            msn: self.msn,
        });
    }

    /// Queues `out` in place of a positive ACK that is still the last
    /// thing queued (what it acknowledges, `out` acknowledges too), or
    /// after whatever else is.
    fn push_over_ack(&mut self, out: Out) {
        match self.out.back_mut() {
            Some(
                last @ Out::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                },
            ) => *last = out,
            _ => self.out.push_back(out),
        }
    }
}
