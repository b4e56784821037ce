//! Executing a request at the expected PSN (RC and UC): the opcode
//! sequence and payload length checks, then SEND into a receive, RDMA
//! WRITE, RDMA READ and atomics through [`MemoryAccess`], each gated by the
//! QP's access flags and the memory's own checks.

use super::queue::{scatter, MAX_MESSAGE};
use super::resources::{Entry, Saved};
use super::responder::{Fail, Msg, Out, ReadOut, Responder};
use super::srq::Srq;
use crate::transport::counters::{Counter, Counters};
use crate::transport::memory::{AtomicOp, Key, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{AccessFlags, QpCommon, QpType};
use crate::transport::wr::{WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use crate::wire::{NakCode, Operation, Position, TransportPacket};

impl Responder {
    // ---- executing a request at the expected PSN (RC and UC) -------------

    /// Executes the packet at the expected PSN; returns the PSNs it takes
    /// (a READ takes one per response packet).
    pub(super) fn execute(
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
            Operation::AtomicWrite if common.qp_type() == QpType::Rc => {
                self.exec_atomic_write(common, pkt, mem)
            }
            Operation::Flush if common.qp_type() == QpType::Rc => self.exec_flush(common, pkt, mem),
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
            // SEND with Invalidate: the region stops answering before the
            // completion exists. A key that may not be invalidated (another
            // PD's, a stale one, an ordinary region's) fails the receive
            // and the QP, and the requester learns it from a NAK Invalid
            // Request (IBTA 10.6.7 / 9.7.5.2.x, not checked against the
            // text; kernel rxe completes the receive with REM_INV_REQ_ERR
            // too, but ACKs the packet before moving the QP to ERR).
            if let Some(ieth) = pkt.repr.ext.ieth {
                if mem
                    .invalidate(Key::new(ieth.rkey), common.mem_ref())
                    .is_err()
                {
                    common.complete(WorkCompletion::new(
                        wr.wr_id,
                        WcStatus::RemInvReqErr,
                        WcOpcode::Recv,
                        common.qpn,
                        WorkQueue::Recv,
                    ));
                    common.fatal();
                    return Err(Fail::Nak(NakCode::InvalidRequest));
                }
            }
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
                    common.mem_ref(),
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

    /// A READ or an atomic runs only if the QP enables `right` and fewer
    /// than `max_dest_rd_atomic` of them are outstanding; otherwise it is
    /// NAK Invalid Request.
    fn admit_rd_atomic(&self, common: &QpCommon, right: AccessFlags) -> Result<(), Fail> {
        let max = common.config.attrs().max_dest_rd_atomic.unwrap_or(0);
        if qp_allows(common, right) && self.outstanding() < usize::from(max) {
            Ok(())
        } else {
            Err(Fail::Nak(NakCode::InvalidRequest))
        }
    }

    fn exec_read(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        self.admit_rd_atomic(common, AccessFlags::REMOTE_READ)?;
        let invalid = Fail::Nak(NakCode::InvalidRequest);
        let reth = pkt.repr.ext.reth.ok_or(invalid)?;
        if u64::from(reth.dma_len) > MAX_MESSAGE {
            return Err(invalid);
        }
        let region = mem
            .check_rdma(
                Key::new(reth.rkey),
                common.mem_ref(),
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
        self.admit_rd_atomic(common, AccessFlags::REMOTE_ATOMIC)?;
        let invalid = Fail::Nak(NakCode::InvalidRequest);
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
            .atomic(Key::new(a.rkey), common.mem_ref(), a.va, op)
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
}

impl Responder {
    /// IBTA 1.5 ATOMIC WRITE: the 8 payload bytes placed at once at an
    /// 8-byte aligned address of a region granting REMOTE_WRITE (the QP
    /// enabling it too), answered by an empty READ response; a responder
    /// resource, so it counts against `max_dest_rd_atomic`, and a
    /// duplicate is answered again without being executed (kernel rxe for
    /// behaviour; IBTA 1.5 9.4.x, not checked against the text).
    fn exec_atomic_write(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        self.admit_rd_atomic(common, AccessFlags::REMOTE_WRITE)?;
        let invalid = Fail::Nak(NakCode::InvalidRequest);
        let reth = pkt.repr.ext.reth.ok_or(invalid)?;
        if reth.dma_len != 8 || pkt.payload.len() != 8 {
            return Err(invalid);
        }
        let region = mem
            .check_rdma(
                Key::new(reth.rkey),
                common.mem_ref(),
                AccessFlags::REMOTE_WRITE,
                reth.va,
                8,
            )
            .map_err(|e| Fail::Nak(e.nak_code()))?;
        // Key, PD, right and bounds first, alignment last, as for atomics.
        if reth.va % 8 != 0 {
            return Err(invalid);
        }
        // One aligned 8-byte write: one word store in the region's buffer.
        mem.write(&region, 0, pkt.payload)
            .map_err(|e| Fail::Nak(e.nak_code()))?;
        self.answer_zero(pkt, reth.va);
        Ok(1)
    }

    /// IBTA 1.5 FLUSH (Annex A19): the FETH's placement type names the
    /// rights the region must grant (FLUSH_GLOBAL for global visibility,
    /// FLUSH_PERSISTENT for persistence), its selectivity level the memory
    /// (the RETH's range, or the whole region of its R_Key). rxe's regions
    /// are host memory without a write cache of the device's own: a write
    /// is globally visible once executed, and requests execute in PSN
    /// order, so a FLUSH has nothing left to push out and is answered (an
    /// empty READ response) after its checks. Persistence is refused at
    /// registration (no rxe region is persistent), so a FLUSH asking for
    /// it meets a region without FLUSH_PERSISTENT: Remote Access Error.
    fn exec_flush(
        &mut self,
        common: &mut QpCommon,
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Result<u32, Fail> {
        use crate::wire::feth::{
            PLT_GLOBAL_VISIBILITY, PLT_PERSISTENCE, SEL_MEMORY_RANGE, SEL_MEMORY_REGION,
        };
        self.admit_rd_atomic(common, AccessFlags::empty())?;
        let invalid = Fail::Nak(NakCode::InvalidRequest);
        let feth = pkt.repr.ext.feth.ok_or(invalid)?;
        let reth = pkt.repr.ext.reth.ok_or(invalid)?;
        let plt = feth.placement_type;
        if plt == 0 || plt & !(PLT_GLOBAL_VISIBILITY | PLT_PERSISTENCE) != 0 {
            return Err(invalid);
        }
        let mut needed = AccessFlags::empty();
        if plt & PLT_GLOBAL_VISIBILITY != 0 {
            needed = needed | AccessFlags::FLUSH_GLOBAL;
        }
        if plt & PLT_PERSISTENCE != 0 {
            needed = needed | AccessFlags::FLUSH_PERSISTENT;
        }
        let key = Key::new(reth.rkey);
        let checked = match feth.selectivity_level {
            SEL_MEMORY_RANGE => {
                mem.check_rdma(key, common.mem_ref(), needed, reth.va, reth.dma_len)
            }
            SEL_MEMORY_REGION => mem.check_whole(key, common.mem_ref(), needed),
            _ => return Err(invalid),
        };
        checked.map_err(|e| Fail::Nak(e.nak_code()))?;
        self.answer_zero(pkt, reth.va);
        Ok(1)
    }

    /// Saves an executed ATOMIC WRITE or FLUSH and queues its empty READ
    /// response.
    fn answer_zero(&mut self, pkt: &TransportPacket<'_>, va: u64) {
        let psn = Psn::new(pkt.repr.bth.psn);
        self.msn = (self.msn + 1) & Psn::MASK;
        self.resources.push(Entry {
            saved: Saved::Zero { psn },
            msn: self.msn,
        });
        self.push(Out::zero_response(psn, va, self.msn));
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
