//! The C-ABI conversion fuzzing harness, shared by the cargo-fuzz target
//! (`fuzz_targets/ibverbs_conv.rs`) and the plain test that replays the
//! committed seeds (`integration/tests/fuzz_replay.rs`).
//!
//! It drives the value conversions of `rxe-ibverbs`' `conv` module with
//! values built field by field from the input bytes, in safe code:
//! `send_wr_from_c` (an `ibv_send_wr`'s fields and its SGE array as
//! values), `qp_attr_from_c` (an `ibv_qp_attr` and any attribute mask) with
//! `qp_attr_to_c` back, and `wc_to_c` (any work completion).
//!
//! What it does not fuzz, and why: the code that reads those values out of
//! the C program's memory (`ibv_post_send`'s walk of the `next` chain and
//! its `sg_list` pointer, `ibv_post_recv`/`ibv_post_srq_recv`'s receive
//! requests, which have no value conversion: `qp.rs` and `srq.rs` read
//! them in place, and the inline-data copy out of SGE addresses).
//! Arbitrary bytes taken as a `repr(C)` struct holding pointers would be
//! undefined behaviour the moment a pointer is followed; those paths trust
//! the C caller exactly as libibverbs does, and are covered by the C
//! programs of the interop tests instead.
//!
//! Input: one selector byte (`% 3`: send WR, QP attributes, completion),
//! then the values, little-endian; missing bytes read as zero.
//!
//! Invariants: nothing panics, and
//!
//! - a send WR converts iff its opcode is one rxe takes and (UD) its AH
//!   resolves; what converts keeps the wr_id, the flags, the SGEs (or the
//!   inline bytes), and the opcode's fields, the QPN masked to 24 bits;
//! - QP attributes convert iff the mask has only bits rxe takes and the
//!   values are in range; what converts has exactly the masked attributes
//!   set, and `qp_attr_from_c(qp_attr_to_c(x), mask)` gives them back;
//! - a completion's C form keeps every field, and its flags say exactly
//!   which of GRH, immediate and invalidated R_Key it carries.

#![forbid(unsafe_code)]

// rxe-ibverbs' library is named `ibverbs` (it builds libibverbs.so).
use ibverbs::conv::{self, CSendWr, WrError};
use rxe_verbs::{
    AddressVector, QpAttr, QpCap, QpInfo, QpState, QpType, SendData, SendOp, WcOpcode, WcStatus,
    WorkCompletion, WorkQueue,
};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::*;

/// `ibv_qp_attr_mask` bits the checks name (verbs.h; rxe-verbs-abi names
/// only the ones the library itself uses).
const IBV_QP_AV: u32 = 1 << 7;
const IBV_QP_DEST_QPN: u32 = 1 << 20;

/// Reads little-endian values off the input; zeros once it runs out.
pub struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = self.0.len().min(N);
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

/// Which conversions one input reached, for the replay test.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub send_ok: bool,
    pub send_refused: bool,
    pub attr_ok: bool,
    pub attr_refused: bool,
    pub wc: bool,
}

pub fn run(data: &[u8]) -> Outcome {
    let Some((&sel, rest)) = data.split_first() else {
        return Outcome::default();
    };
    let mut b = Bytes(rest);
    let mut out = Outcome::default();
    match sel % 3 {
        0 => send_wr(&mut b, &mut out),
        1 => qp_attr(&mut b, &mut out),
        _ => wc(&mut b, &mut out),
    }
    out
}

/// The opcodes `send_wr_from_c` takes.
const OPCODES: [u32; 8] = [
    IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
    IBV_WR_SEND_WITH_INV,
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_RDMA_READ,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
];

fn send_wr(b: &mut Bytes<'_>, out: &mut Outcome) {
    // A small opcode most of the time, so that the known ones are hit.
    let raw = b.u32();
    let opcode = if raw & 0x8000_0000 == 0 {
        raw % 12
    } else {
        raw
    };
    let send_flags = b.u32();
    let ctl = b.u8();
    let ud = ctl & 1 != 0;
    let ah_resolves = ctl & 2 != 0;
    let w = CSendWr {
        wr_id: b.u64(),
        opcode,
        send_flags,
        imm_data: b.u32(),
        wr: [b.u64(), b.u64(), b.u64(), b.u64()],
        sges: &[],
        mw: None,
    };
    let n = usize::from(b.u8() % 8);
    let sges: Vec<ibv_sge> = (0..n)
        .map(|_| ibv_sge {
            addr: b.u64(),
            length: b.u32(),
            lkey: b.u32(),
        })
        .collect();
    let w = CSendWr { sges: &sges, ..w };
    let inline_bytes: Vec<u8> = sges.iter().map(|s| s.length as u8).collect();
    let av = AddressVector {
        dgid: rxe_core::Gid::from([b.u8(); 16]),
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
        src_port: None,
    };
    let mut asked = None;
    let r = conv::send_wr_from_c(
        &w,
        ud,
        |s| {
            assert_eq!(s.len(), sges.len(), "inline sees the WR's SGEs");
            inline_bytes[..].into()
        },
        |ah| {
            asked = Some(ah);
            ah_resolves.then_some(av)
        },
    );
    let known = OPCODES.contains(&opcode);
    match r {
        Err(WrError::Opcode) => {
            assert!(!known, "opcode {opcode} refused");
            out.send_refused = true;
        }
        Err(WrError::BadMw) => {
            // The harness resolves no window: a BIND_MW is refused.
            assert_eq!(opcode, IBV_WR_BIND_MW, "BadMw for opcode {opcode}");
            out.send_refused = true;
        }
        Ok(s) if opcode == IBV_WR_LOCAL_INV => {
            // A local operation: the key from invalidate_rkey, no data, no
            // destination, whatever the flags and the QP type say.
            assert_eq!(s.op, SendOp::LocalInv { key: w.imm_data });
            assert_eq!(s.data, SendData::Sges(Vec::new()));
            assert!(s.ud.is_none());
            assert_eq!(s.signaled, send_flags & IBV_SEND_SIGNALED != 0);
            out.send_ok = true;
        }
        Err(WrError::BadAh) => {
            assert!(known && ud && !ah_resolves, "BadAh without cause");
            assert_eq!(asked, Some(w.wr[0]), "the AH comes from wr.ud.ah");
            out.send_refused = true;
        }
        Ok(s) => {
            assert!(known, "opcode {opcode} converted");
            assert!(!ud || ah_resolves, "a UD WR without an AH converted");
            assert_eq!(s.wr_id, w.wr_id);
            assert_eq!(s.signaled, send_flags & IBV_SEND_SIGNALED != 0);
            assert_eq!(s.fence, send_flags & IBV_SEND_FENCE != 0);
            assert_eq!(s.solicited, send_flags & IBV_SEND_SOLICITED != 0);
            let inline = send_flags & IBV_SEND_INLINE != 0 && !s.op.is_read_or_atomic();
            match &s.data {
                SendData::Inline(v) => {
                    assert!(inline, "inline data without IBV_SEND_INLINE");
                    assert_eq!(&v[..], &inline_bytes[..]);
                }
                gathered => {
                    let v = gathered.sge_list();
                    assert!(!inline, "IBV_SEND_INLINE ignored");
                    assert_eq!(v.len(), sges.len());
                    for (a, c) in v.iter().zip(&sges) {
                        assert_eq!((a.addr, a.length, a.lkey), (c.addr, c.length, c.lkey));
                    }
                }
            }
            check_op(&s.op, &w);
            match s.ud {
                Some(d) => {
                    assert!(ud);
                    assert_eq!(d.av, av);
                    assert_eq!(d.remote_qpn, w.wr[1] as u32 & 0xff_ffff);
                    assert_eq!(d.remote_qkey, (w.wr[1] >> 32) as u32);
                }
                None => assert!(!ud),
            }
            out.send_ok = true;
        }
    }
}

/// The operation carries the fields of the C union that its opcode names.
fn check_op(op: &SendOp, w: &CSendWr<'_>) {
    let rkey = |x: u64| x as u32;
    let want = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm {
            imm: u32::from_be(w.imm_data),
        },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { rkey: w.imm_data },
        IBV_WR_RDMA_WRITE => SendOp::RdmaWrite {
            remote_addr: w.wr[0],
            rkey: rkey(w.wr[1]),
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm {
            remote_addr: w.wr[0],
            rkey: rkey(w.wr[1]),
            imm: u32::from_be(w.imm_data),
        },
        IBV_WR_RDMA_READ => SendOp::RdmaRead {
            remote_addr: w.wr[0],
            rkey: rkey(w.wr[1]),
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CmpSwap {
            remote_addr: w.wr[0],
            compare: w.wr[1],
            swap: w.wr[2],
            rkey: rkey(w.wr[3]),
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr: w.wr[0],
            add: w.wr[1],
            rkey: rkey(w.wr[3]),
        },
        other => panic!("opcode {other} converted"),
    };
    assert_eq!(*op, want);
}

fn ah_attr(b: &mut Bytes<'_>) -> ibv_ah_attr {
    let mut dgid = [0u8; 16];
    dgid.iter_mut().for_each(|x| *x = b.u8());
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid,
            flow_label: b.u32(),
            sgid_index: b.u8(),
            hop_limit: b.u8(),
            traffic_class: b.u8(),
        },
        dlid: b.u16(),
        sl: b.u8(),
        src_path_bits: b.u8(),
        static_rate: b.u8(),
        // Mostly global, as RoCE needs.
        is_global: u8::from(b.u8() % 8 != 0),
        port_num: b.u8(),
    }
}

fn qp_attr(b: &mut Bytes<'_>, out: &mut Outcome) {
    // Small enum values most of the time, so that valid ones are hit.
    let small = |b: &mut Bytes<'_>| {
        let v = b.u32();
        if v & 0x8000_0000 == 0 {
            v % 8
        } else {
            v
        }
    };
    let raw_mask = b.u32();
    let a = ibv_qp_attr {
        qp_state: small(b),
        cur_qp_state: small(b),
        path_mtu: small(b),
        path_mig_state: small(b),
        qkey: b.u32(),
        rq_psn: b.u32(),
        sq_psn: b.u32(),
        dest_qp_num: b.u32(),
        qp_access_flags: b.u32() as i32,
        cap: ibv_qp_cap {
            max_send_wr: b.u32(),
            max_recv_wr: b.u32(),
            max_send_sge: b.u32(),
            max_recv_sge: b.u32(),
            max_inline_data: b.u32(),
        },
        ah_attr: ah_attr(b),
        alt_ah_attr: ah_attr(b),
        pkey_index: b.u16(),
        alt_pkey_index: b.u16(),
        en_sqd_async_notify: b.u8(),
        sq_draining: b.u8(),
        max_rd_atomic: b.u8(),
        max_dest_rd_atomic: b.u8(),
        min_rnr_timer: b.u8(),
        port_num: b.u8(),
        timeout: b.u8(),
        retry_cnt: b.u8(),
        rnr_retry: b.u8(),
        alt_port_num: b.u8(),
        alt_timeout: b.u8(),
        rate_limit: b.u32(),
    };
    // Without the top bit, only the attribute bits rxe knows (and
    // IBV_QP_CAP, which it refuses), so that masks it takes are common.
    let mask = if raw_mask & 0x8000_0000 == 0 {
        raw_mask & 0x1f_ffff
    } else {
        raw_mask
    };
    let r = conv::qp_attr_from_c(&a, mask);
    let Ok((q, m)) = r else {
        out.attr_refused = true;
        return;
    };
    assert_eq!(m.bits(), mask, "the mask comes back as given");
    assert_eq!(q.qp_state.is_some(), mask & IBV_QP_STATE != 0);
    assert_eq!(q.av.is_some(), mask & IBV_QP_AV != 0);
    assert_eq!(q.dest_qpn.is_some(), mask & IBV_QP_DEST_QPN != 0);
    if let Some(p) = q.rq_psn {
        assert_eq!(p.value(), a.rq_psn & 0xff_ffff);
    }
    if let Some(p) = q.sq_psn {
        assert_eq!(p.value(), a.sq_psn & 0xff_ffff);
    }
    if let Some(f) = q.access_flags {
        assert_eq!(f.bits() as i32, a.qp_access_flags & 0xf);
    }
    if let Some(av) = q.av {
        assert_eq!(av.dgid, rxe_core::Gid::from(a.ah_attr.grh.dgid));
        assert_eq!(av.flow_label, a.ah_attr.grh.flow_label);
    }
    // Back to C and in again: the same attributes.
    let info = QpInfo {
        state: q.qp_state.unwrap_or(QpState::Reset),
        attr: q,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let c = conv::qp_attr_to_c(&info);
    let (q2, m2) = conv::qp_attr_from_c(&c, mask).expect("what converted converts back");
    assert_eq!(m2, m);
    // ibv_query_qp reports one state for both state fields.
    let norm = |x: QpAttr| QpAttr {
        cur_qp_state: None,
        ..x
    };
    assert_eq!(norm(q2), norm(q), "qp_attr_from_c(qp_attr_to_c(x)) != x");
    out.attr_ok = true;
}

const STATUSES: [WcStatus; 22] = [
    WcStatus::Success,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::LocEecOpErr,
    WcStatus::LocProtErr,
    WcStatus::WrFlushErr,
    WcStatus::MwBindErr,
    WcStatus::BadRespErr,
    WcStatus::LocAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemAccessErr,
    WcStatus::RemOpErr,
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::LocRddViolErr,
    WcStatus::RemInvRdReqErr,
    WcStatus::RemAbortErr,
    WcStatus::InvEecnErr,
    WcStatus::InvEecStateErr,
    WcStatus::FatalErr,
    WcStatus::RespTimeoutErr,
    WcStatus::GeneralErr,
];

const WC_OPCODES: [(WcOpcode, u32); 7] = [
    (WcOpcode::Send, IBV_WC_SEND),
    (WcOpcode::RdmaWrite, IBV_WC_RDMA_WRITE),
    (WcOpcode::RdmaRead, IBV_WC_RDMA_READ),
    (WcOpcode::CompSwap, IBV_WC_COMP_SWAP),
    (WcOpcode::FetchAdd, IBV_WC_FETCH_ADD),
    (WcOpcode::Recv, IBV_WC_RECV),
    (WcOpcode::RecvRdmaWithImm, IBV_WC_RECV_RDMA_WITH_IMM),
];

fn wc(b: &mut Bytes<'_>, out: &mut Outcome) {
    let s = usize::from(b.u8()) % STATUSES.len();
    let (opcode, c_opcode) = WC_OPCODES[usize::from(b.u8()) % WC_OPCODES.len()];
    let flags = b.u8();
    let mut w = WorkCompletion::new(
        b.u64(),
        STATUSES[s],
        opcode,
        b.u32(),
        if flags & 1 != 0 {
            WorkQueue::Recv
        } else {
            WorkQueue::Send
        },
    );
    w.byte_len = b.u32();
    let (imm, rkey) = (b.u32(), b.u32());
    w.imm_data = (flags & 2 != 0).then_some(imm);
    // A completion carries an immediate or an invalidated R_Key, not both
    // (they share the C field).
    w.invalidated_rkey = (flags & 4 != 0 && flags & 2 == 0).then_some(rkey);
    w.src_qp = b.u32();
    w.grh = flags & 8 != 0;
    w.pkey_index = b.u16();
    w.sl = b.u8();
    w.solicited = flags & 16 != 0;
    let c = conv::wc_to_c(&w);
    // rxe-core keeps libibverbs' order of ibv_wc_status.
    assert_eq!(c.status as usize, s);
    assert_eq!(c.opcode, c_opcode);
    assert_eq!(
        (c.wr_id, c.byte_len, c.qp_num, c.src_qp, c.pkey_index, c.sl),
        (w.wr_id, w.byte_len, w.qp_num, w.src_qp, w.pkey_index, w.sl)
    );
    assert_eq!(c.wc_flags & IBV_WC_GRH != 0, w.grh);
    assert_eq!(c.wc_flags & IBV_WC_WITH_IMM != 0, w.imm_data.is_some());
    assert_eq!(
        c.wc_flags & IBV_WC_WITH_INV != 0,
        w.invalidated_rkey.is_some()
    );
    if let Some(i) = w.imm_data {
        assert_eq!(c.imm_data, i.to_be(), "immediate data is big-endian");
    }
    if let Some(r) = w.invalidated_rkey {
        assert_eq!(c.imm_data, r, "invalidate_rkey is host order");
    }
    out.wc = true;
}

/// Builds inputs in the order [`run`] reads them.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn ah(&mut self, last: u8) -> &mut Self {
        for i in 0..16 {
            self.u8(if i >= 10 { 0xff } else { 0 });
        }
        let n = self.0.len();
        self.0[n - 1] = last;
        // flow label, sgid index, hop limit, traffic class, dlid, sl,
        // src_path_bits, static_rate, is_global (1: any non-multiple of 8),
        // port.
        self.u32(0)
            .u8(0)
            .u8(64)
            .u8(0)
            .u16(0)
            .u8(0)
            .u8(0)
            .u8(0)
            .u8(1)
            .u8(1)
    }
}

/// The seed inputs: every opcode on RC and UD (AH found and not), the
/// attributes of the INIT, RTR and RTS transitions and a refused mask,
/// completions of every opcode with and without immediate, invalidated
/// R_Key and GRH.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, &op) in OPCODES.iter().chain(&[IBV_WR_BIND_MW]).enumerate() {
        for ctl in [0u8, 1, 3] {
            let mut w = Writer::default();
            w.u8(0).u32(op);
            let flags = IBV_SEND_SIGNALED | if i % 2 == 0 { IBV_SEND_INLINE } else { 0 };
            w.u32(flags).u8(ctl).u64(0x1000 + i as u64).u32(0x0102_0304);
            w.u64(0x5000)
                .u64((0x1111_1111u64 << 32) | 0x42)
                .u64(7)
                .u64(0x1234);
            w.u8(2);
            for s in 0..2u64 {
                w.u64(0x10_0000 + s * 64).u32(64).u32(0x100);
            }
            w.u8(9);
            out.push(w.0);
        }
    }
    // (mask, state): INIT, RTR, RTS, and IBV_QP_CAP (refused).
    let rtr = IBV_QP_STATE | IBV_QP_AV | 0x100 | IBV_QP_DEST_QPN | 0x1000 | 0x20000 | 0x8000;
    let rts = IBV_QP_STATE | 0x200 | 0x400 | 0x2000 | 0x10000 | 0x4000;
    let init = IBV_QP_STATE | 0x10 | 0x20 | 0x8;
    for (mask, state) in [(init, 1), (rtr, 2), (rts, 3), (IBV_QP_CAP, 0)] {
        let mut w = Writer::default();
        w.u8(1).u32(mask).u32(state).u32(0).u32(3).u32(0);
        w.u32(0x1111_1111)
            .u32(0xab_cdef)
            .u32(0x12_3456)
            .u32(0x99)
            .u32(0xf);
        w.u32(16).u32(16).u32(1).u32(1).u32(64);
        w.ah(2).ah(3);
        w.u16(0)
            .u16(0)
            .u8(0)
            .u8(0)
            .u8(1)
            .u8(1)
            .u8(12)
            .u8(1)
            .u8(14)
            .u8(7)
            .u8(7);
        w.u8(1).u8(14).u32(0);
        out.push(w.0);
    }
    for op in 0..7u8 {
        for flags in [0u8, 1 | 2 | 8, 1 | 4 | 16] {
            let mut w = Writer::default();
            w.u8(2)
                .u8(op * 3)
                .u8(op)
                .u8(flags)
                .u64(0x77 + u64::from(op))
                .u32(0x12);
            w.u32(100)
                .u32(0x0102_0304)
                .u32(0x5601)
                .u32(0x34)
                .u16(0)
                .u8(0);
            out.push(w.0);
        }
    }
    out
}
