//! The synchronous endpoint calls of `<rdma/rdma_verbs.h>`:
//! `rdma_create_ep` (an ID that is bound, or resolved to its destination
//! with its route, and has its QP, in one call), `rdma_destroy_ep`, and
//! `rdma_get_request` (a passive endpoint's next connection request, its
//! ID given a QP made like the listener's). rdma_server and rdma_client
//! are written with these.

use std::ffi::c_int;

use rxe_verbs_abi::rdmacm::*;
use rxe_verbs_abi::{ibv_pd, ibv_qp_cap, ibv_qp_init_attr};

use super::id::{self, CId};
use super::{fail, qp, ret};

/// The QP a passive endpoint gives each request's ID (with the
/// listener's PD).
pub struct EpQp {
    qp_context: usize,
    send_cq: usize,
    recv_cq: usize,
    srq: usize,
    cap: ibv_qp_cap,
    qp_type: u32,
    sq_sig_all: c_int,
}

impl EpQp {
    fn of(a: &ibv_qp_init_attr) -> EpQp {
        EpQp {
            qp_context: a.qp_context as usize,
            send_cq: a.send_cq as usize,
            recv_cq: a.recv_cq as usize,
            srq: a.srq as usize,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        }
    }

    fn attr(&self) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: self.qp_context as *mut _,
            send_cq: self.send_cq as *mut _,
            recv_cq: self.recv_cq as *mut _,
            srq: self.srq as *mut _,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

/// `rdma_create_ep`, or the errno.
fn create_ep(
    res: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Result<&'static CId, c_int> {
    let c = id::create_id(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        res.ai_port_space as u32,
    )?;
    let r = (|| {
        if res.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the addrinfo's source address.
            let a = unsafe { super::sockaddr::read(res.ai_src_addr) }?;
            c.inner.bind_addr(a).map_err(|e| super::errno_of(&e))?;
            c.refresh();
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes.
                let mut q = EpQp::of(unsafe { &*qp_init_attr });
                // The QP type is the addrinfo's, as librdmacm sets it.
                q.qp_type = res.ai_qp_type as u32;
                c.lock().ep_qp = Some(q);
            }
            if !pd.is_null() {
                // SAFETY: our own C struct.
                unsafe { (*c.c()).pd = pd };
            }
            return Ok(());
        }
        // SAFETY: the addrinfo's addresses (the source may be NULL).
        unsafe { id::resolve_addr(c, res.ai_src_addr, res.ai_dst_addr, 2000) }?;
        id::resolve_route(c, 2000)?;
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's attributes.
            let a = unsafe { &mut *qp_init_attr };
            a.qp_type = res.ai_qp_type as u32;
            qp::create_qp(c, pd, a)?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(c),
        Err(e) => {
            id::destroy(c);
            Err(e)
        }
    }
}

export! {"RDMACM_1.0" fn rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int, fail = -1, {
    if id.is_null() || res.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's addrinfo.
    match create_ep(unsafe { &*res }, pd, qp_init_attr) {
        Ok(c) => {
            // SAFETY: the caller's out pointer.
            unsafe { *id = c.c() };
            0
        }
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rdma_destroy_ep(id: *mut rdma_cm_id) -> (), fail = (), {
    let Some(c) = CId::from_c(id) else { return };
    qp::destroy_qp(c);
    // SAFETY: the ID's own SRQ, if any (checked by the callee).
    unsafe { super::qp::rdma_destroy_srq(id) };
    id::destroy(c);
}}

/// `rdma_get_request`, or the errno.
fn get_request(l: &CId) -> Result<*mut rdma_cm_id, c_int> {
    if !l.is_sync() {
        return Err(libc::EINVAL);
    }
    let ch = l.channel().ok_or(libc::EINVAL)?;
    let e = ch.next()?;
    // SAFETY: an event just handed to us.
    let ev = unsafe { &*e };
    let ack = || {
        // SAFETY: ours, not handed out.
        unsafe { super::channel::rdma_ack_cm_event(e) };
    };
    if ev.status != 0 {
        let s = ev.status.abs();
        ack();
        return Err(s);
    }
    if ev.event != event::CONNECT_REQUEST {
        ack();
        return Err(libc::EINVAL);
    }
    let Some(child) = CId::from_c(ev.id) else {
        ack();
        return Err(libc::EINVAL);
    };
    // The request's event stays in the new ID until its next call.
    // SAFETY: the child's own C struct.
    unsafe { (*child.c()).event = e };
    let ep = l.lock().ep_qp.as_ref().map(EpQp::attr);
    if let Some(mut attr) = ep {
        // SAFETY: the listener's own C struct.
        let pd = unsafe { (*l.c()).pd };
        if let Err(err) = qp::create_qp(child, pd, &mut attr) {
            let _ = child.inner.reject(&[]);
            id::destroy(child);
            return Err(err);
        }
    }
    Ok(child.c())
}

export! {"RDMACM_1.0" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int, fail = -1, {
    let Some(l) = CId::from_c(listen) else { return fail(libc::EINVAL) };
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    match get_request(l) {
        Ok(c) => {
            // SAFETY: the caller's out pointer.
            unsafe { *id = c };
            0
        }
        Err(e) => ret(Err(e)),
    }
}}
