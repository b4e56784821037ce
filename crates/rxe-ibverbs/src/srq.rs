//! Shared receive queues (`ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, the `post_srq_recv` slot).

use std::ffi::c_int;

use rxe_verbs::SrqInitAttr;
use rxe_verbs_abi::*;

use crate::async_events::{Element, EventCount};
use crate::errno::{errno_of, set_errno};
use crate::handles::{self, Kind};
use crate::pd::Pd;

/// `ibv_srq_attr_mask`.
const IBV_SRQ_MAX_WR: c_int = 1;
const IBV_SRQ_LIMIT: c_int = 2;

#[repr(C)]
pub struct Srq {
    pub srq: ibv_srq,
    pub inner: rxe_verbs::Srq,
    pub pd: &'static Pd,
    pub events: EventCount,
}

impl Srq {
    pub fn from_ibv(p: *const ibv_srq) -> Option<&'static Srq> {
        // SAFETY: a live Srq of ours; ibv_srq is its first field.
        handles::is(p, Kind::Srq).then(|| unsafe { &*p.cast::<Srq>() })
    }
}

pub fn event_delivered(p: usize) {
    if let Some(s) = Srq::from_ibv(p as *const ibv_srq) {
        s.events.delivered();
    }
}

pub fn event_acked(p: usize) {
    if let Some(s) = Srq::from_ibv(p as *const ibv_srq) {
        s.events.acked(1);
    }
}

export! {"IBVERBS_1.1" fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq, fail = std::ptr::null_mut(), {
    let fail = |e: c_int| {
        set_errno(e);
        std::ptr::null_mut()
    };
    let Some(p) = Pd::from_ibv(pd) else { return fail(libc::EINVAL) };
    if srq_init_attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's init attributes.
    let a = unsafe { &mut *srq_init_attr };
    let inner = match p.inner.create_srq(&SrqInitAttr {
        max_wr: a.attr.max_wr,
        max_sge: a.attr.max_sge,
        srq_limit: a.attr.srq_limit,
    }) {
        Ok(s) => s,
        Err(e) => return fail(errno_of(&e)),
    };
    let srqn = inner.srq_num();
    let s = Box::into_raw(Box::new(Srq {
        srq: ibv_srq {
            context: p.pd.context,
            srq_context: a.srq_context,
            pd,
            handle: srqn,
            mutex: pthread_mutex_opaque([0; 40]),
            cond: pthread_cond_opaque([0; 48]),
            events_completed: 0,
        },
        inner,
        pd: p,
        events: EventCount::default(),
    }));
    p.ctx.events.add(Element::Srq, srqn, s as usize);
    handles::insert(s, Kind::Srq);
    s.cast()
}}

export! {"IBVERBS_1.1" fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int, fail = libc::EIO, {
    let Some(s) = Srq::from_ibv(srq) else { return libc::EINVAL };
    if srq_attr.is_null() || srq_attr_mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*srq_attr };
    let max_wr = (srq_attr_mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
    let limit = (srq_attr_mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
    match s.inner.modify(max_wr, limit) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}}

export! {"IBVERBS_1.1" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int, fail = libc::EIO, {
    let Some(s) = Srq::from_ibv(srq) else { return libc::EINVAL };
    if srq_attr.is_null() {
        return libc::EINVAL;
    }
    match s.inner.query() {
        Ok(q) => {
            // SAFETY: the caller's out struct.
            unsafe { srq_attr.write(ibv_srq_attr { max_wr: q.max_wr, max_sge: q.max_sge, srq_limit: q.srq_limit }) };
            0
        }
        Err(e) => errno_of(&e),
    }
}}

export! {"IBVERBS_1.1" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int, fail = libc::EIO, {
    let Some(s) = Srq::from_ibv(srq) else { return libc::EINVAL };
    if let Err(e) = s.inner.destroy() {
        return errno_of(&e);
    }
    handles::remove(srq, Kind::Srq);
    s.pd.ctx.events.remove(Element::Srq, s.inner.srq_num(), srq as usize);
    s.events.wait_all_acked();
    // SAFETY: Box::into_raw'd by ibv_create_srq, no longer live.
    drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
    0
}}

callback! {fn post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int, fail = libc::EIO, {
    let Some(s) = Srq::from_ibv(srq) else {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = wr };
        }
        return libc::EINVAL;
    };
    crate::qp::post_recv_list(wr, bad_wr, |r| s.inner.post_recv(r))
}}
