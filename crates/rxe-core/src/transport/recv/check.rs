//! The checks each transport makes of a request packet before the
//! responder executes it: RC classifies the PSN (expected, duplicate or
//! ahead) and answers with an ACK, an RNR NAK or a NAK; UC drops a message
//! that lost a packet whole; UD checks the Q_Key and delivers its one-packet
//! message. The choices these follow are in the [responder's
//! documentation](super::responder).

use super::queue::{scatter, total_len};
use super::responder::{Fail, Msg, Out, Responder};
use super::srq::Srq;
use crate::transport::counters::{Counter, Counters};
use crate::transport::io::RecvMeta;
use crate::transport::memory::MemoryAccess;
use crate::transport::psn::{classify_request, Psn, RequestPsn};
use crate::transport::qp::{QpCommon, QpType, GSI_QKEY};
use crate::transport::wr::{WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use crate::wire::{grh, NakCode, Operation, Position, Syndrome, TransportPacket};

impl Responder {
    // ---- RC -------------------------------------------------------------

    pub(super) fn rc(
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
                                | Operation::AtomicWrite
                                | Operation::Flush
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

    // ---- UC -------------------------------------------------------------

    pub(super) fn uc(
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
    pub(super) fn uc_abort(&mut self, counters: &mut Counters, srq: Option<&mut Srq>) -> bool {
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
    pub(super) fn ud(
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
        let total = (grh::HEADER_LEN + pkt.payload.len()) as u64;
        let res = if total_len(&wr.sg_list) < total {
            Err(WcStatus::LocLenErr)
        } else {
            scatter(mem, pd, &wr.sg_list, 0, &meta.grh)
                .and_then(|()| scatter(mem, pd, &wr.sg_list, grh::HEADER_LEN as u64, pkt.payload))
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
}
