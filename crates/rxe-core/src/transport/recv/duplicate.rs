//! Duplicate RC requests (IBTA 9.7.5.1.1): a request PSN behind the
//! expected one was executed already and is answered again without being
//! executed twice, from what the responder resources saved.

use super::resources::{Entry, Saved};
use super::responder::{Out, ReadOut, Responder};
use crate::transport::memory::{Key, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{AccessFlags, QpCommon};
use crate::wire::{Operation, Syndrome, TransportPacket};

impl Responder {
    /// A request already executed (IBTA 9.7.5.1.1): SEND and WRITE are
    /// acknowledged again (C9-105 as kernel rxe cites it), a READ is
    /// executed again from the duplicate's RETH, an atomic is answered from
    /// its saved result. A duplicate this responder no longer remembers is
    /// dropped.
    pub(super) fn rc_duplicate(
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
                    common.mem_ref(),
                    AccessFlags::REMOTE_READ,
                    reth.va,
                    reth.dma_len,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        // The memory went away since the READ ran (a
                        // region deregistered, a window invalidated). A
                        // requester still waiting for this READ fails it on
                        // the NAK; a stale copy (a network duplicate, a
                        // retry overtaken by its own answer) gets a NAK the
                        // requester drops as a duplicate response. Either
                        // way a duplicate leaves the responder's state as
                        // it was (IBTA 9.7.5.1.1, not checked against the
                        // text): no move to ERR, unlike a new request.
                        self.push(Out::Ack {
                            psn,
                            syndrome: Syndrome::Nak(e.nak_code()),
                            msn: self.msn,
                        });
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
            Operation::AtomicWrite | Operation::Flush => {
                let Some(Entry {
                    saved: Saved::Zero { .. },
                    msn,
                }) = self.resources.find(psn)
                else {
                    return;
                };
                let queued = self
                    .out
                    .iter()
                    .any(|o| matches!(o, Out::Read(r) if r.res_psn == psn));
                if !queued {
                    let va = pkt.repr.ext.reth.map_or(0, |r| r.va);
                    self.push(Out::zero_response(psn, va, msn));
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
}
