//! Extended CQs: `ibv_create_cq_ex` (the `verbs_context` slot) and the
//! `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` iterator with its
//! `ibv_wc_read_*` accessors behind `ibv_cq_ex`'s function pointers.
//!
//! rxe has no completion clock, so timestamps (and VLAN, flow tag, tag
//! matching fields) are refused with EOPNOTSUPP, as a device without them
//! does; `ibv_rc_pingpong -t` asks for timestamps and stops there.

use std::ffi::{c_int, c_void};

use rxe_verbs::WorkCompletion;
use rxe_verbs_abi::*;

use crate::context::Context;
use crate::cq::Cq;
use crate::errno::set_errno;

/// `ibv_create_cq_wc_flags` rxe fills: byte_len, imm, qp_num, src_qp,
/// slid, sl, dlid_path_bits.
const WC_FLAGS: u64 = 0x7f;
/// `ibv_cq_init_attr_mask`: `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;

fn cq_of(cq: *mut ibv_cq_ex) -> Option<&'static Cq> {
    Cq::from_ibv(cq.cast())
}

/// Publishes `w` as the current completion (status, wr_id in the struct,
/// the rest for the read_* functions).
fn set_current(c: &Cq, w: WorkCompletion) {
    let wc = crate::conv::wc_to_c(&w);
    *c.current.lock().unwrap_or_else(|e| e.into_inner()) = wc;
    let p = &c.ex as *const CqExTail as *mut CqExTail;
    // SAFETY: our own live struct; C reads status and wr_id after
    // start_poll/next_poll return, on the polling thread.
    unsafe {
        (*p).status = wc.status;
        (*p).wr_id = wc.wr_id;
    }
}

fn next(cq: *mut ibv_cq_ex) -> c_int {
    let Some(c) = cq_of(cq) else {
        return libc::EINVAL;
    };
    match c.inner.poll_one() {
        Ok(Some(w)) => {
            set_current(c, w);
            0
        }
        Ok(None) => libc::ENOENT,
        Err(_) => libc::EIO,
    }
}

callback! {fn start_poll(cq: *mut ibv_cq_ex, attr: *mut c_void) -> c_int, fail = libc::EIO, {
    // attr (ibv_poll_cq_attr) has only a comp_mask, which must be 0.
    // SAFETY: NULL or the caller's struct, whose first field is a u32.
    if !attr.is_null() && unsafe { *attr.cast::<u32>() } != 0 {
        return libc::EINVAL;
    }
    next(cq)
}}

callback! {fn next_poll(cq: *mut ibv_cq_ex) -> c_int, fail = libc::EIO, {
    next(cq)
}}

callback! {fn end_poll(cq: *mut ibv_cq_ex) -> (), fail = (), {
    let _ = cq;
}}

fn current(cq: *mut ibv_cq_ex) -> ibv_wc {
    cq_of(cq)
        .map(|c| *c.current.lock().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_default()
}

callback! {fn read_opcode(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).opcode }}
callback! {fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).vendor_err }}
callback! {fn read_byte_len(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).byte_len }}
callback! {fn read_imm_data(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).imm_data }}
callback! {fn read_qp_num(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).qp_num }}
callback! {fn read_src_qp(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).src_qp }}
callback! {fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).wc_flags }}
callback! {fn read_slid(cq: *mut ibv_cq_ex) -> u32, fail = 0, { current(cq).slid.into() }}
callback! {fn read_sl(cq: *mut ibv_cq_ex) -> u8, fail = 0, { current(cq).sl }}
callback! {fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8, fail = 0, { current(cq).dlid_path_bits }}

/// The function pointers of `ibv_cq_ex` (144..288); the slots of fields
/// rxe refuses at creation stay NULL.
pub fn ops() -> [*mut c_void; 18] {
    let mut o = [std::ptr::null_mut(); 18];
    o[0] = start_poll as *mut c_void;
    o[1] = next_poll as *mut c_void;
    o[2] = end_poll as *mut c_void;
    o[3] = read_opcode as *mut c_void;
    o[4] = read_vendor_err as *mut c_void;
    o[5] = read_byte_len as *mut c_void;
    o[6] = read_imm_data as *mut c_void;
    o[7] = read_qp_num as *mut c_void;
    o[8] = read_src_qp as *mut c_void;
    o[9] = read_wc_flags as *mut c_void;
    o[10] = read_slid as *mut c_void;
    o[11] = read_sl as *mut c_void;
    o[12] = read_dlid_path_bits as *mut c_void;
    o
}

callback! {fn vctx_create_cq_ex(context: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex, fail = std::ptr::null_mut(), {
    let fail = |e: c_int| {
        set_errno(e);
        std::ptr::null_mut()
    };
    if Context::from_ibv(context).is_none() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's init attributes.
    let a = unsafe { &*attr };
    if a.wc_flags & !WC_FLAGS != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 || (a.comp_mask != 0 && a.flags != 0) {
        return fail(libc::EOPNOTSUPP);
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else { return fail(libc::EINVAL) };
    let Ok(vector) = c_int::try_from(a.comp_vector) else { return fail(libc::EINVAL) };
    crate::cq::create(context, cqe, a.cq_context, a.channel, vector).cast()
}}
