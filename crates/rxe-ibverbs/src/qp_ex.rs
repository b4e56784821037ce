//! Extended QPs: `ibv_create_qp_ex` (the `verbs_context` slot) and the
//! `ibv_wr_*` work-request builder behind `ibv_qp_ex`'s function pointers
//! (`ibv_rc_pingpong -N`).
//!
//! `wr_start` opens a batch; each `wr_<opcode>` starts a request from the
//! QP's `wr_id` and `wr_flags` at that moment; `wr_set_*` fill in the
//! latest request; `wr_complete` posts the batch (nothing of it if a
//! request was bad, as kernel rxe's provider does) and returns an errno;
//! `wr_abort` drops it.

use std::ffi::{c_int, c_void};

use rxe_verbs::{InlineData, SendData, SendOp, SendWr, Sge, UdDest};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::*;

use crate::context::Context;
use crate::errno::{errno_of, set_errno};
use crate::qp::Qp;

/// `ibv_qp_init_attr_mask` bits rxe takes.
const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `ibv_qp_create_send_ops_flags` rxe has: RDMA_WRITE(_WITH_IMM),
/// SEND(_WITH_IMM), RDMA_READ, the two atomics, LOCAL_INV (128), BIND_MW
/// (256), SEND_WITH_INV (512), FLUSH (1 << 11, rdma-core after v44, in
/// the gap v44 leaves) and ATOMIC_WRITE (1 << 12): kernel rxe's set.
const SEND_OPS: u64 = 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256 | 512 | 1 << 11 | 1 << 12;

/// The requests of one `wr_start` .. `wr_complete`.
#[derive(Debug, Default)]
pub struct Batch {
    open: bool,
    wrs: Vec<SendWr>,
    /// The first error, reported by wr_complete.
    err: Option<c_int>,
}

/// `struct ibv_data_buf` of `wr_set_inline_data_list`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

fn qp_of(qp: *mut ibv_qp_ex) -> Option<&'static Qp> {
    Qp::from_ibv(qp.cast()).filter(|q| q.ex)
}

/// Runs `f` on the open batch of `qp` (nothing if there is none).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut Batch)) {
    if let Some(q) = qp_of(qp) {
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if b.open {
            f(q, &mut b);
        }
    }
}

/// Starts a request of `op` from the QP's current wr_id and wr_flags.
fn start(qp: *mut ibv_qp_ex, op: SendOp) {
    with_batch(qp, |q, b| {
        let flags = q.qpx.wr_flags;
        b.wrs.push(SendWr {
            wr_id: q.qpx.wr_id,
            op,
            data: SendData::Sges(Vec::new()),
            signaled: flags & IBV_SEND_SIGNALED != 0,
            fence: flags & IBV_SEND_FENCE != 0,
            solicited: flags & IBV_SEND_SOLICITED != 0,
            ud: None,
        });
    });
}

/// Changes the latest request (an error if there is none).
fn last(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr) -> Result<(), c_int>) {
    with_batch(qp, |_, b| {
        let r = match b.wrs.last_mut() {
            Some(w) => f(w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err.get_or_insert(e);
        }
    });
}

callback! {fn wr_start(qp: *mut ibv_qp_ex) -> (), fail = (), {
    if let Some(q) = qp_of(qp) {
        *q.batch.lock().unwrap_or_else(|e| e.into_inner()) = Batch { open: true, ..Batch::default() };
    }
}}

callback! {fn wr_complete(qp: *mut ibv_qp_ex) -> c_int, fail = libc::EIO, {
    let Some(q) = qp_of(qp) else { return libc::EINVAL };
    let b = std::mem::take(&mut *q.batch.lock().unwrap_or_else(|e| e.into_inner()));
    if !b.open {
        return libc::EINVAL;
    }
    if let Some(e) = b.err {
        return e;
    }
    if b.wrs.is_empty() {
        return 0;
    }
    match q.inner.post_send_list(b.wrs) {
        Ok(()) => 0,
        Err((_, e)) => errno_of(&e),
    }
}}

callback! {fn wr_abort(qp: *mut ibv_qp_ex) -> (), fail = (), {
    if let Some(q) = qp_of(qp) {
        *q.batch.lock().unwrap_or_else(|e| e.into_inner()) = Batch::default();
    }
}}

callback! {fn wr_send(qp: *mut ibv_qp_ex) -> (), fail = (), {
    start(qp, SendOp::Send)
}}

callback! {fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) -> (), fail = (), {
    start(qp, SendOp::SendWithImm { imm: u32::from_be(imm_data) })
}}

callback! {fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) -> (), fail = (), {
    start(qp, SendOp::SendWithInv { rkey: invalidate_rkey })
}}

callback! {fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> (), fail = (), {
    start(qp, SendOp::RdmaWrite { remote_addr, rkey })
}}

callback! {fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32) -> (), fail = (), {
    start(qp, SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: u32::from_be(imm_data) })
}}

callback! {fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> (), fail = (), {
    start(qp, SendOp::RdmaRead { remote_addr, rkey })
}}

callback! {fn wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> (), fail = (), {
    start(qp, SendOp::CmpSwap { remote_addr, rkey, compare, swap })
}}

callback! {fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) -> (), fail = (), {
    start(qp, SendOp::FetchAdd { remote_addr, rkey, add })
}}

callback! {fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) -> (), fail = (), {
    last(qp, |w| {
        w.data = SendData::Sge(Sge { addr, length, lkey });
        Ok(())
    })
}}

callback! {fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) -> (), fail = (), {
    last(qp, |w| {
        if num_sge > 32 || (num_sge > 0 && sg_list.is_null()) {
            return Err(libc::EINVAL);
        }
        let list: &[ibv_sge] = if num_sge == 0 {
            &[]
        } else {
            // SAFETY: the caller's array of num_sge entries.
            unsafe { std::slice::from_raw_parts(sg_list, num_sge) }
        };
        let sge = |s: &ibv_sge| Sge { addr: s.addr, length: s.length, lkey: s.lkey };
        w.data = match list {
            [one] => SendData::Sge(sge(one)),
            list => SendData::Sges(list.iter().map(sge).collect()),
        };
        Ok(())
    })
}}

callback! {fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) -> (), fail = (), {
    last(qp, |w| {
        let len = u32::try_from(length).map_err(|_| libc::EINVAL)?;
        let mut v = InlineData::new();
        // SAFETY: ibv_wr_set_inline_data(3): addr..addr+length is readable
        // now; the bytes are copied at once.
        unsafe { crate::foreign::copy_in(addr as usize as u64, len, &mut v) };
        w.data = SendData::Inline(v);
        Ok(())
    })
}}

callback! {fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) -> (), fail = (), {
    last(qp, |w| {
        if num_buf > 0 && buf_list.is_null() {
            return Err(libc::EINVAL);
        }
        let mut v = InlineData::new();
        for i in 0..num_buf {
            // SAFETY: the caller's array of num_buf entries.
            let b = unsafe { &*buf_list.add(i) };
            let len = u32::try_from(b.length).map_err(|_| libc::EINVAL)?;
            // SAFETY: each buffer is readable now (copied at once).
            unsafe { crate::foreign::copy_in(b.addr as usize as u64, len, &mut v) };
        }
        w.data = SendData::Inline(v);
        Ok(())
    })
}}

callback! {fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> (), fail = (), {
    last(qp, |w| {
        let av = crate::ah::av_of(ah as usize as u64).ok_or(libc::EINVAL)?;
        w.ud = Some(UdDest { av, remote_qpn: remote_qpn & 0xff_ffff, remote_qkey });
        Ok(())
    })
}}

callback! {fn wr_bind_mw(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info) -> (), fail = (), {
    let bind = if bind_info.is_null() {
        None
    } else {
        // SAFETY: the caller's ibv_mw_bind_info, read now.
        crate::mw::bind_of(mw, rkey, unsafe { &*bind_info })
    };
    match bind {
        Some(b) => start(qp, SendOp::BindMw(b)),
        None => with_batch(qp, |_, b| {
            b.err.get_or_insert(libc::EINVAL);
        }),
    }
}}

callback! {fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) -> (), fail = (), {
    start(qp, SendOp::LocalInv { key: invalidate_rkey })
}}

callback! {fn wr_atomic_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) -> (), fail = (), {
    if atomic_wr.is_null() {
        return with_batch(qp, |_, b| {
            b.err.get_or_insert(libc::EINVAL);
        });
    }
    let mut v = InlineData::new();
    // SAFETY: ibv_wr_atomic_write(3): atomic_wr points to the 8 bytes to
    // write, read now.
    unsafe { crate::foreign::copy_in(atomic_wr as usize as u64, 8, &mut v) };
    start(qp, SendOp::AtomicWrite { remote_addr, rkey });
    last(qp, |w| {
        w.data = SendData::Inline(v);
        Ok(())
    })
}}

// ibv_wr_flush(qp, rkey, remote_addr, len, type, level) of rdma-core after
// v44: `type` is the FETH placement type (IBV_FLUSH_GLOBAL 1,
// IBV_FLUSH_PERSISTENT 2), `level` its selectivity (IBV_FLUSH_RANGE 0,
// IBV_FLUSH_MR 1).
callback! {fn wr_flush(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, len: usize, placement: u8, level: u8) -> (), fail = (), {
    match u32::try_from(len) {
        Ok(len) => start(qp, SendOp::Flush { remote_addr, rkey, len, placement, selectivity: level }),
        Err(_) => with_batch(qp, |_, b| {
            b.err.get_or_insert(libc::EINVAL);
        }),
    }
}}

/// An op rxe does not have: the batch fails at wr_complete.
fn unsupported(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| {
        b.err.get_or_insert(libc::EOPNOTSUPP);
    });
}

callback! {fn wr_unsupported(qp: *mut ibv_qp_ex) -> (), fail = (), {
    unsupported(qp)
}}

/// The function pointers of an extended QP (`ibv_qp_ex`, 184..360).
pub fn ops() -> [*mut c_void; 22] {
    // TSO and XRC have no rxe opcode; their slots fail the batch with EOPNOTSUPP (the
    // extra arguments of those slots are ignored, which the C calling
    // convention allows).
    let none = wr_unsupported as *mut c_void;
    [
        wr_atomic_cmp_swp as *mut c_void,
        wr_atomic_fetch_add as *mut c_void,
        wr_bind_mw as *mut c_void,
        wr_local_inv as *mut c_void,
        wr_rdma_read as *mut c_void,
        wr_rdma_write as *mut c_void,
        wr_rdma_write_imm as *mut c_void,
        wr_send as *mut c_void,
        wr_send_imm as *mut c_void,
        wr_send_inv as *mut c_void,
        none, // wr_send_tso
        wr_set_ud_addr as *mut c_void,
        none, // wr_set_xrc_srqn
        wr_set_inline_data as *mut c_void,
        wr_set_inline_data_list as *mut c_void,
        wr_set_sge as *mut c_void,
        wr_set_sge_list as *mut c_void,
        wr_start as *mut c_void,
        wr_complete as *mut c_void,
        wr_abort as *mut c_void,
        wr_atomic_write as *mut c_void,
        wr_flush as *mut c_void,
    ]
}

callback! {fn vctx_create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp, fail = std::ptr::null_mut(), {
    let fail = |e: c_int| {
        set_errno(e);
        std::ptr::null_mut()
    };
    if Context::from_ibv(context).is_none() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's extended init attributes.
    let a = unsafe { &mut *attr };
    let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.comp_mask & !known != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if ex && a.send_ops_flags & !SEND_OPS != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let mut init = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    match crate::qp::create(a.pd, &mut init, ex) {
        Ok(q) => {
            a.cap = init.cap;
            q
        }
        Err(e) => fail(e),
    }
}}
