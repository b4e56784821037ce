//! `rdma_join_multicast`, `rdma_join_multicast_ex` and
//! `rdma_leave_multicast` over [`rxe_verbs::cm::CmId::join_multicast`].
//!
//! librdmacm attaches the ID's QP when the program reads the JOIN event
//! and hands back the `context` it was given as the event's
//! `param.ud.private_data`. Here the Rust CM attaches at the join itself
//! (the QP receives a little sooner; a failure is the join's errno rather
//! than a MULTICAST_ERROR event), and the contexts are kept per ID, by
//! group, for [`super::event`] to put in the event.

use std::ffi::{c_int, c_void};
use std::net::IpAddr;

use rxe_verbs::cm::CmApiError;
use rxe_verbs_abi::rdmacm::*;

use super::id::CId;
use super::{fail, fail_cm, sockaddr};

/// `RDMA_CM_JOIN_MC_ATTR_*` (comp_mask bits) and `RDMA_MC_JOIN_FLAG_*`.
const ATTR_ADDRESS: u32 = 1 << 0;
const ATTR_JOIN_FLAGS: u32 = 1 << 1;
const FLAG_FULLMEMBER: u32 = 0;
const FLAG_SENDONLY_FULLMEMBER: u32 = 1;

/// The `context` a join was given, for its event.
pub fn context_of(c: &CId, group: IpAddr) -> *mut c_void {
    let l = c.local.lock().unwrap_or_else(|e| e.into_inner());
    l.mcast_contexts
        .iter()
        .find(|(g, _)| *g == group)
        .map_or(std::ptr::null_mut(), |(_, ctx)| *ctx as *mut c_void)
}

/// The join; 0 or -1 with errno.
///
/// # Safety
/// `addr` is a socket address.
unsafe fn join(
    id: *mut rdma_cm_id,
    addr: *const c_void,
    flags: u32,
    context: *mut c_void,
) -> c_int {
    let Some(c) = CId::from_c(id) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's socket address.
    let a = match unsafe { sockaddr::read(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let group = a.ip();
    {
        let mut l = c.local.lock().unwrap_or_else(|e| e.into_inner());
        l.mcast_contexts.retain(|(g, _)| *g != group);
        l.mcast_contexts.push((group, context as usize));
    }
    if let Err(e) = c
        .inner
        .join_multicast(group, flags == FLAG_SENDONLY_FULLMEMBER)
    {
        forget(c, group);
        // librdmacm's: joining twice is EADDRINUSE (its list of groups).
        if matches!(e, CmApiError::AlreadyJoined(_)) {
            return fail(libc::EADDRINUSE);
        }
        return fail_cm(&e);
    }
    match c.finish() {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn forget(c: &CId, group: IpAddr) {
    let mut l = c.local.lock().unwrap_or_else(|e| e.into_inner());
    l.mcast_contexts.retain(|(g, _)| *g != group);
}

export! {"RDMACM_1.0" fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut c_void, context: *mut c_void) -> c_int, fail = -1, {
    // SAFETY: the caller's socket address.
    unsafe { join(id, addr, FLAG_FULLMEMBER, context) }
}}

export! {"RDMACM_1.1" fn rdma_join_multicast_ex(id: *mut rdma_cm_id, attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int, fail = -1, {
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { attr.read() };
    // As librdmacm: the address and the flags must both be given, the
    // flags one of the two kinds of full member.
    if a.comp_mask & ATTR_ADDRESS == 0
        || a.comp_mask & ATTR_JOIN_FLAGS == 0
        || a.join_flags > FLAG_SENDONLY_FULLMEMBER
    {
        return fail(libc::EINVAL);
    }
    // SAFETY: the address the attributes name.
    unsafe { join(id, a.addr, a.join_flags, context) }
}}

export! {"RDMACM_1.0" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut c_void) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    // SAFETY: the caller's socket address.
    let a = match unsafe { sockaddr::read(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    match c.inner.leave_multicast(a.ip()) {
        Ok(()) => {
            forget(c, a.ip());
            0
        }
        // librdmacm: a group the ID never joined is EADDRNOTAVAIL.
        Err(CmApiError::NotJoined(_)) => fail(libc::EADDRNOTAVAIL),
        Err(e) => fail_cm(&e),
    }
}}
