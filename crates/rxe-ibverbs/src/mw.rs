//! Memory windows through `ibv_context.ops` (`ibv_alloc_mw`,
//! `ibv_bind_mw` and `ibv_dealloc_mw` are inline in verbs.h and call the
//! `alloc_mw`, `bind_mw` and `dealloc_mw` slots), and the resolution of
//! the `ibv_mw` and `ibv_mr` pointers of a BIND_MW work request.
//!
//! `IBV_MW_TYPE_2` windows are type 2B, associated with the QP that binds
//! them, as kernel rxe's are.

use std::ffi::c_int;

use rxe_verbs::{AccessFlags, MwBind, MwType};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::{ibv_mr, ibv_mw, ibv_mw_bind, ibv_mw_bind_info, ibv_pd, ibv_qp};

use crate::errno::{errno_of, set_errno};
use crate::handles::{self, Kind};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;

#[repr(C)]
pub struct Mw {
    pub mw: ibv_mw,
    pub inner: rxe_verbs::Mw,
}

impl Mw {
    pub fn from_ibv(p: *const ibv_mw) -> Option<&'static Mw> {
        // SAFETY: a live Mw of ours (ibv_mw is its first field).
        handles::is(p, Kind::Mw).then(|| unsafe { &*p.cast::<Mw>() })
    }
}

/// The L_Key of a live `ibv_mr` of ours.
fn lkey_of(mr: *const ibv_mr) -> Option<u32> {
    if !handles::is(mr, Kind::Mr) {
        return None;
    }
    // SAFETY: a live Mr of ours (ibv_mr is its first field).
    Some(unsafe { &*mr.cast::<Mr>() }.inner.lkey())
}

/// The window's access flags of a C bind (`IBV_ACCESS_*`): its remote
/// rights.
fn window_access(flags: u32) -> AccessFlags {
    AccessFlags::from_mr_bits(flags).remote()
}

/// The BIND_MW of a C work request (`ibv_send_wr.bind_mw`, or
/// `ibv_wr_bind_mw`): `mw` and `info.mr` must be live objects of ours
/// (`None` otherwise: the request is refused with EINVAL).
pub fn bind_of(mw: *const ibv_mw, new_rkey: u32, info: &ibv_mw_bind_info) -> Option<MwBind> {
    let m = Mw::from_ibv(mw)?;
    let mr_lkey = lkey_of(info.mr)?;
    Some(MwBind {
        mw_rkey: m.inner.rkey(),
        new_rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: window_access(info.mw_access_flags),
        verb: false,
    })
}

callback! {fn alloc_mw(pd: *mut ibv_pd, mw_type: u32) -> *mut ibv_mw, fail = std::ptr::null_mut(), {
    let Some(p) = Pd::from_ibv(pd) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let ty = match mw_type {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2B,
        _ => {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
    };
    match p.inner.alloc_mw(ty) {
        Ok(inner) => {
            let rkey = inner.rkey();
            let m = Box::into_raw(Box::new(Mw {
                mw: ibv_mw {
                    context: p.pd.context,
                    pd,
                    rkey,
                    handle: rkey >> 8,
                    mw_type,
                },
                inner,
            }));
            handles::insert(m, Kind::Mw);
            m.cast()
        }
        Err(e) => {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        }
    }
}}

callback! {fn dealloc_mw(mw: *mut ibv_mw) -> c_int, fail = libc::EIO, {
    let Some(m) = Mw::from_ibv(mw) else { return libc::EINVAL };
    if let Err(e) = m.inner.dealloc() {
        return crate::errno::fail(&e);
    }
    handles::remove(mw, Kind::Mw);
    // SAFETY: Box::into_raw'd by alloc_mw; no longer a live handle.
    drop(unsafe { Box::from_raw(mw.cast::<Mw>()) });
    0
}}

// `ibv_bind_mw` (type 1; verbs.h checked the type and the PD): posts the
// bind on the QP and sets `mw->rkey` to the new R_Key, as rdma-core's
// providers do.
callback! {fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int, fail = libc::EIO, {
    let (Some(q), Some(m)) = (Qp::from_ibv(qp), Mw::from_ibv(mw)) else {
        return libc::EINVAL;
    };
    if mw_bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's ibv_mw_bind.
    let b = unsafe { &*mw_bind };
    let info = b.bind_info;
    let mr = if info.mr.is_null() {
        None
    } else if handles::is(info.mr, Kind::Mr) {
        // SAFETY: a live Mr of ours.
        Some(&unsafe { &*info.mr.cast::<Mr>() }.inner)
    } else {
        return libc::EINVAL;
    };
    let signaled = b.send_flags & IBV_SEND_SIGNALED != 0;
    match m.inner.bind(&q.inner, b.wr_id, mr, info.addr, info.length, window_access(info.mw_access_flags), signaled) {
        Ok(rkey) => {
            // SAFETY: our own ibv_mw, which the application reads.
            unsafe { (*mw).rkey = rkey };
            0
        }
        Err(e) => errno_of(&e),
    }
}}
