//! Protection domains (`ibv_alloc_pd`, `ibv_dealloc_pd`). Allocating the
//! first PD attaches the context's engine (binds the device's port).

use std::ffi::c_int;

use rxe_verbs_abi::{ibv_context, ibv_pd};

use crate::context::Context;
use crate::errno::{errno_of, set_errno};
use crate::handles::{self, Kind};

#[repr(C)]
pub struct Pd {
    pub pd: ibv_pd,
    pub inner: rxe_verbs::Pd,
    pub ctx: &'static Context,
}

impl Pd {
    pub fn from_ibv(p: *const ibv_pd) -> Option<&'static Pd> {
        // SAFETY: a live Pd of ours (ibv_pd is its first field).
        handles::is(p, Kind::Pd).then(|| unsafe { &*p.cast::<Pd>() })
    }
}

export! {"IBVERBS_1.1" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd, fail = std::ptr::null_mut(), {
    let Some(ctx) = Context::from_ibv(context) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let dev = match ctx.device() {
        Ok(d) => d,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    match dev.alloc_pd() {
        Ok(inner) => {
            let p = Box::into_raw(Box::new(Pd {
                pd: ibv_pd { context, handle: inner.id() },
                inner,
                ctx,
            }));
            handles::insert(p, Kind::Pd);
            p.cast()
        }
        Err(e) => {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        }
    }
}}

export! {"IBVERBS_1.1" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int, fail = libc::EIO, {
    let Some(p) = Pd::from_ibv(pd) else { return libc::EINVAL };
    if let Err(e) = p.inner.dealloc() {
        return crate::errno::fail(&e);
    }
    handles::remove(pd, Kind::Pd);
    // SAFETY: Box::into_raw'd by ibv_alloc_pd; no longer a live handle.
    drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
    0
}}
