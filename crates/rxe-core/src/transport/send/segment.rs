//! The send queue's entries and how one becomes packets: segmentation into
//! path-MTU packets, the opcode of each packet, its extended headers, and
//! the copies between the work request's scatter/gather list and a packet.
//!
//! Nothing here keeps protocol state (PSNs, window, timers): that is the
//! requester's and completer's business. This module answers "what does
//! packet `k` of this work request look like" and writes it.
//!
//! Rules, with their sources:
//!
//! - A message of `L` bytes with path MTU `M` is one ONLY packet when
//!   `L <= M` (also `L == 0`), else FIRST (`M` bytes), MIDDLE (`M` bytes)
//!   ... and LAST (1..=`M` bytes) (IBTA 9.7.2, C9-92 as cited in
//!   `wire::opcode`).
//! - An RDMA READ request is one packet but takes `max(1, ceil(L / M))` PSNs,
//!   one per response packet (IBTA 9.7.2; the shared engine contract).
//! - RETH on WRITE FIRST/ONLY and READ; ImmDt on LAST/ONLY with immediate;
//!   IETH on SEND LAST/ONLY with invalidate; DETH on UD (IBTA 9.2, Table 38,
//!   which `wire::opcode` encodes).
//! - A UD work request whose Q_Key has the high bit set is sent with the
//!   QP's own Q_Key (IBTA 10.2.5, as cited by `qp::qkey_is_controlled`).

use crate::transport::memory::{Key, MemError, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{AccessFlags, QpType};
use crate::transport::wr::{SendData, SendOp, SendWr, Sge, WcStatus};
use crate::wire::{
    AtomicEth, AtomicEthRepr, Bth, BthRepr, Deth, DethRepr, Error as WireError, ErrorKind,
    ExtHeader, ExtReprs, Feth, FethRepr, Ieth, IethRepr, ImmDt, ImmDtRepr, Layer, Opcode, Reth,
    RethRepr, Transport, TransportRepr,
};

/// One posted send work request and the requester's bookkeeping for it.
#[derive(Debug, Clone)]
pub(super) struct SendWqe {
    pub wr: SendWr,
    /// Message length in bytes (at most 2^31, checked at post time).
    pub len: u32,
    /// Whether the requester has given it PSNs (it stays started through
    /// retransmissions).
    pub started: bool,
    /// The path MTU its packets were cut with (fixed when it started).
    pub mtu: u32,
    /// Its first and last PSN; meaningful once started.
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// READ: response packets received in order so far (the re-request
    /// after a loss asks for the rest).
    pub read_done: u32,
    /// Counted against `max_rd_atomic` (a started READ or atomic).
    pub rd_atomic: bool,
    /// An error found while building its packets: it completes with this
    /// status once every earlier request has completed.
    pub error: Option<WcStatus>,
}

impl SendWqe {
    pub(super) fn new(wr: SendWr, len: u32) -> SendWqe {
        SendWqe {
            wr,
            len,
            started: false,
            mtu: 0,
            first_psn: Psn::ZERO,
            last_psn: Psn::ZERO,
            read_done: 0,
            rd_atomic: false,
            error: None,
        }
    }

    /// Gives the request its PSNs from `psn` on, with path MTU `mtu`.
    pub(super) fn start(&mut self, psn: Psn, mtu: u32) {
        self.started = true;
        self.mtu = mtu;
        self.first_psn = psn;
        self.last_psn = psn.add(psns_for(self.wr.op, self.len, mtu) - 1);
        self.read_done = 0;
    }

    /// Whether `psn` is one of its PSNs (once started).
    pub(super) fn holds(&self, psn: Psn) -> bool {
        self.started && !self.wr.op.is_local() && psn.in_range(self.first_psn, self.last_psn.next())
    }

    /// Where a (re)transmission of this request resumes: the PSN of its
    /// first response not yet received (READ) or its first PSN.
    pub(super) fn resume_psn(&self) -> Psn {
        self.first_psn.add(self.read_done)
    }
}

/// Packets of a SEND or WRITE of `len` bytes: `max(1, ceil(len / mtu))`.
pub(super) fn packets_for(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// PSNs a request takes: one per packet, for a READ one per response
/// packet, for an atomic one.
pub(super) fn psns_for(op: SendOp, len: u32, mtu: u32) -> u32 {
    if op.is_atomic() || op.is_zero_response() {
        1
    } else {
        packets_for(len, mtu)
    }
}

/// The transport of a QP's packets.
fn transport_of(qp_type: QpType) -> Transport {
    match qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud | QpType::Gsi => Transport::Ud,
    }
}

/// The opcode of a request packet; `first`/`last` say where it stands in
/// its message (both for ONLY). READ and atomic requests are always one
/// packet.
pub(super) fn request_opcode(qp_type: QpType, op: SendOp, first: bool, last: bool) -> Opcode {
    // Low five bits, RC numbering (IBTA 9.2, Table 38).
    let pick = |f: u8, m: u8, l: u8, o: u8| match (first, last) {
        (true, true) => o,
        (true, false) => f,
        (false, false) => m,
        (false, true) => l,
    };
    let code = match op {
        SendOp::Send => pick(0x00, 0x01, 0x02, 0x04),
        SendOp::SendWithImm { .. } => pick(0x00, 0x01, 0x03, 0x05),
        SendOp::SendWithInv { .. } => pick(0x00, 0x01, 0x16, 0x17),
        SendOp::RdmaWrite { .. } => pick(0x06, 0x07, 0x08, 0x0a),
        SendOp::RdmaWriteWithImm { .. } => pick(0x06, 0x07, 0x09, 0x0b),
        SendOp::RdmaRead { .. } => 0x0c,
        SendOp::CmpSwap { .. } => 0x13,
        SendOp::FetchAdd { .. } => 0x14,
        SendOp::Flush { .. } => 0x1c,
        SendOp::AtomicWrite { .. } => 0x1d,
        // Local operations send no packet: the requester performs them
        // instead of asking for one (`Requester::run_local`), so this arm
        // is never taken; SEND ONLY keeps the function total.
        SendOp::BindMw(_) | SendOp::LocalInv { .. } | SendOp::RegMr(_) => 0x04,
    };
    Opcode::on(transport_of(qp_type), code)
}

/// What the requester knows when it builds one packet.
#[derive(Debug, Clone, Copy)]
pub(super) struct PacketCtx {
    pub qp_type: QpType,
    pub src_qpn: u32,
    pub pkey: u16,
    /// The BTH MigReq bit (`qp::migration`): RC/UC while MIGRATED.
    pub mig_req: bool,
    /// RC/UC: the QP's `dest_qpn` (UD takes the work request's).
    pub dest_qpn: u32,
    /// UD: the QP's own Q_Key, used when the work request's is controlled.
    pub qkey: u32,
}

/// Packet `k` of `wqe`: its header values and where its payload comes from
/// (`offset`, `len` into the message). For a READ, `k` is the index of the
/// first response packet it asks for.
pub(super) fn packet_repr(
    ctx: &PacketCtx,
    wqe: &SendWqe,
    k: u32,
    ack_req: bool,
) -> (TransportRepr, usize, usize) {
    let wr = &wqe.wr;
    let mtu = wqe.mtu;
    let psn = wqe.first_psn.add(k).value();
    let mut ext = ExtReprs::default();
    let mut dest_qp = ctx.dest_qpn;
    let (opcode, offset, len, solicited) = if wr.op.is_read_or_atomic() {
        let op = request_opcode(ctx.qp_type, wr.op, true, true);
        match wr.op {
            SendOp::RdmaRead { remote_addr, rkey } => {
                let done = u64::from(k) * u64::from(mtu);
                ext.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(done),
                    rkey,
                    dma_len: u32::try_from(u64::from(wqe.len).saturating_sub(done)).unwrap_or(0),
                });
            }
            SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                ext.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: swap,
                    compare,
                })
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                ext.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: add,
                    compare: 0,
                })
            }
            SendOp::AtomicWrite { remote_addr, rkey } => {
                ext.reth = Some(RethRepr {
                    va: remote_addr,
                    rkey,
                    dma_len: 8,
                });
            }
            SendOp::Flush {
                remote_addr,
                rkey,
                len,
                placement,
                selectivity,
            } => {
                ext.feth = Some(FethRepr {
                    selectivity_level: selectivity,
                    placement_type: placement,
                });
                ext.reth = Some(RethRepr {
                    va: remote_addr,
                    rkey,
                    dma_len: len,
                });
            }
            _ => unreachable!("is_read_or_atomic"),
        }
        // ATOMIC WRITE carries its 8 bytes; the others no payload.
        let len = if matches!(wr.op, SendOp::AtomicWrite { .. }) {
            8
        } else {
            0
        };
        (op, 0, len, false)
    } else {
        let npkts = packets_for(wqe.len, mtu);
        let first = k == 0;
        let last = k + 1 == npkts;
        let offset = k as usize * mtu as usize;
        let len = (wqe.len as usize - offset).min(mtu as usize);
        let op = request_opcode(ctx.qp_type, wr.op, first, last);
        match wr.op {
            SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } if last => {
                ext.immdt = Some(ImmDtRepr { imm });
            }
            SendOp::SendWithInv { rkey } if last => ext.ieth = Some(IethRepr { rkey }),
            _ => {}
        }
        match wr.op {
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            } if first => {
                ext.reth = Some(RethRepr {
                    va: remote_addr,
                    rkey,
                    dma_len: wqe.len,
                })
            }
            _ => {}
        }
        if let Some(ud) = wr.ud.filter(|_| ctx.qp_type.is_datagram()) {
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                ctx.qkey
            } else {
                ud.remote_qkey
            };
            ext.deth = Some(DethRepr {
                qkey,
                src_qp: ctx.src_qpn,
            });
            dest_qp = ud.remote_qpn;
        }
        // BTH SE: the last packet of a solicited SEND or WRITE with
        // immediate (IBTA 9.2.1 / 10.8.3.x as per the contract).
        let se = last
            && wr.solicited
            && !matches!(wr.op, SendOp::RdmaWrite { .. })
            && !matches!(wr.op, SendOp::RdmaRead { .. });
        (op, offset, len, se)
    };
    let bth = BthRepr {
        opcode,
        solicited,
        mig_req: ctx.mig_req,
        pad_count: 0,
        pkey: ctx.pkey,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: ack_req && ctx.qp_type == QpType::Rc,
        psn,
    };
    (TransportRepr::new(bth, ext, len), offset, len)
}

/// Why a packet could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BuildError {
    /// The headers do not suit the opcode, or `buf` is too small.
    Wire(WireError),
    /// The local memory of the work request could not be read.
    Mem(MemError),
}

/// Writes `repr` to the front of `buf`: BTH, extended headers, then lets
/// `fill` write the payload straight into its place, then the pad and a
/// zero ICRC. Returns the bytes used. The same bytes as
/// [`TransportRepr::emit`], without an intermediate payload buffer.
pub(super) fn emit_with(
    repr: &TransportRepr,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> Result<(), MemError>,
) -> Result<usize, BuildError> {
    repr.check().map_err(BuildError::Wire)?;
    let info = repr.info().map_err(BuildError::Wire)?;
    let total = repr.buffer_len().map_err(BuildError::Wire)?;
    if buf.len() < total {
        return Err(BuildError::Wire(WireError::truncated(
            Layer::Bth,
            total,
            buf.len(),
        )));
    }
    let buf = &mut buf[..total];
    let mut bth = repr.bth;
    bth.pad_count = crate::wire::pad_for(repr.payload_len);
    let mut at = crate::wire::bth::HEADER_LEN;
    bth.emit(&mut Bth::new_unchecked(&mut buf[..at]));
    let e = &repr.ext;
    for &h in info.headers.as_slice() {
        let dst = &mut buf[at..at + h.len()];
        let missing = || BuildError::Wire(WireError::new(h.layer(), ErrorKind::MissingHeader(h)));
        match h {
            ExtHeader::Deth => e
                .deth
                .ok_or_else(missing)?
                .emit(&mut Deth::new_unchecked(dst)),
            ExtHeader::Reth => e
                .reth
                .ok_or_else(missing)?
                .emit(&mut Reth::new_unchecked(dst)),
            ExtHeader::AtomicEth => e
                .atomic_eth
                .ok_or_else(missing)?
                .emit(&mut AtomicEth::new_unchecked(dst)),
            ExtHeader::ImmDt => e
                .immdt
                .ok_or_else(missing)?
                .emit(&mut ImmDt::new_unchecked(dst)),
            ExtHeader::Ieth => e
                .ieth
                .ok_or_else(missing)?
                .emit(&mut Ieth::new_unchecked(dst)),
            ExtHeader::Feth => e
                .feth
                .ok_or_else(missing)?
                .emit(&mut Feth::new_unchecked(dst)),
            // No request that this requester builds carries the others.
            _ => return Err(missing()),
        }
        at += h.len();
    }
    let end = at + repr.payload_len;
    fill(&mut buf[at..end]).map_err(BuildError::Mem)?;
    buf[end..].fill(0);
    Ok(total)
}

/// Copies `dst.len()` bytes of the message, from byte `offset` on, out of
/// the work request's data: inline bytes, or the SGEs' local memory read
/// through L_Keys in protection domain `pd` (IBTA 10.6: a local read needs
/// no access right).
pub(super) fn gather(
    data: &SendData,
    offset: usize,
    dst: &mut [u8],
    mem: &dyn MemoryAccess,
    pd: u32,
) -> Result<(), MemError> {
    match data {
        SendData::Inline(bytes) => {
            let end = offset.checked_add(dst.len()).ok_or(MemError::Overflow)?;
            let src = bytes.get(offset..end).ok_or(MemError::OutOfBounds {
                va: offset as u64,
                len: dst.len(),
            })?;
            dst.copy_from_slice(src);
            Ok(())
        }
        SendData::Sges(_) | SendData::Sge(_) => {
            walk_sges(data.sge_list(), offset, dst.len(), |sge, at, range| {
                let region = mem.check(
                    Key::new(sge.lkey),
                    pd,
                    false,
                    AccessFlags::empty(),
                    at,
                    range.len(),
                )?;
                mem.read(&region, 0, &mut dst[range])
            })
        }
    }
}

/// Copies `src` into the message's SGEs from byte `offset` on (a READ
/// response's payload, an atomic's original value), which need
/// `LOCAL_WRITE`.
pub(super) fn scatter(
    sges: &[Sge],
    offset: usize,
    src: &[u8],
    mem: &mut dyn MemoryAccess,
    pd: u32,
) -> Result<(), MemError> {
    walk_sges(sges, offset, src.len(), |sge, at, range| {
        let region = mem.check(
            Key::new(sge.lkey),
            pd,
            false,
            AccessFlags::LOCAL_WRITE,
            at,
            range.len(),
        )?;
        mem.write(&region, 0, &src[range])
    })
}

/// Calls `f(sge, va, range)` for each piece of `len` message bytes from
/// `offset` on: the SGE it lies in, its virtual address, and its range in
/// the packet's payload.
fn walk_sges(
    sges: &[Sge],
    offset: usize,
    len: usize,
    mut f: impl FnMut(&Sge, u64, core::ops::Range<usize>) -> Result<(), MemError>,
) -> Result<(), MemError> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sl = sge.length as usize;
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let n = (sl - skip).min(len - done);
        let at = sge
            .addr
            .checked_add(skip as u64)
            .ok_or(MemError::Overflow)?;
        f(sge, at, done..done + n)?;
        done += n;
        skip = 0;
    }
    if done < len {
        return Err(MemError::OutOfBounds {
            va: offset as u64,
            len,
        });
    }
    Ok(())
}

/// Checks every non-empty SGE of a work request once, when it starts:
/// `needed` is empty for data that is sent, `LOCAL_WRITE` for where a READ
/// response or an atomic's original value lands.
pub(super) fn check_sges(
    data: &SendData,
    mem: &dyn MemoryAccess,
    pd: u32,
    needed: AccessFlags,
) -> Result<(), MemError> {
    for sge in data.sge_list().iter().filter(|s| s.length > 0) {
        mem.check(
            Key::new(sge.lkey),
            pd,
            false,
            needed,
            sge.addr,
            sge.length as usize,
        )?;
    }
    Ok(())
}
