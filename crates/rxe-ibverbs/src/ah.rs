//! Address handles (`ibv_create_ah`, `ibv_create_ah_from_wc`,
//! `ibv_init_ah_from_wc`, `ibv_destroy_ah`). RoCE addresses are GIDs, so
//! an AH needs its GRH (`is_global`).

use std::ffi::c_int;

use rxe_verbs::{AddressVector, AhAttr, WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use rxe_verbs_abi::consts::IBV_WC_GRH;
use rxe_verbs_abi::*;

use crate::context::Context;
use crate::errno::{errno_of, set_errno};
use crate::handles::{self, Kind};
use crate::pd::Pd;

#[repr(C)]
pub struct Ah {
    pub ah: ibv_ah,
    pub inner: rxe_verbs::Ah,
}

/// The address of the AH at `p` (a `wr.ud.ah` of a UD send), if it is a
/// live AH of ours.
pub fn av_of(p: u64) -> Option<AddressVector> {
    let p = p as usize as *const ibv_ah;
    // SAFETY: a live Ah of ours; ibv_ah is its first field.
    handles::is(p, Kind::Ah).then(|| unsafe { &*p.cast::<Ah>() }.inner.address_vector())
}

fn ah_attr_of(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        // RoCE routes by GID; a LID-only address names nothing.
        return Err(libc::EINVAL);
    }
    Ok(AhAttr {
        dgid: a.grh.dgid.into(),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        port_num: a.port_num,
    })
}

fn create(pd: *mut ibv_pd, attr: &AhAttr) -> Result<*mut ibv_ah, c_int> {
    let p = Pd::from_ibv(pd).ok_or(libc::EINVAL)?;
    let inner = p.inner.create_ah(attr).map_err(|e| errno_of(&e))?;
    let a = Box::into_raw(Box::new(Ah {
        ah: ibv_ah {
            context: p.pd.context,
            pd,
            handle: 0,
        },
        inner,
    }));
    handles::insert(a, Kind::Ah);
    Ok(a.cast())
}

export! {"IBVERBS_1.1" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah, fail = std::ptr::null_mut(), {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    ah_attr_of(a).and_then(|x| create(pd, &x)).unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}}

export! {"IBVERBS_1.1" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int, fail = libc::EIO, {
    if !handles::is(ah, Kind::Ah) {
        return libc::EINVAL;
    }
    // SAFETY: a live Ah of ours.
    let a = unsafe { &*ah.cast::<Ah>() };
    if let Err(e) = a.inner.destroy() {
        return errno_of(&e);
    }
    handles::remove(ah, Kind::Ah);
    // SAFETY: Box::into_raw'd by create, no longer live.
    drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
    0
}}

/// The AH attributes that answer a UD receive: `wc` plus the 40 bytes of
/// GRH space at the start of its buffer.
fn attr_from_wc(
    ctx: &Context,
    port: u8,
    wc: *const ibv_wc,
    grh: *const u8,
) -> Result<AhAttr, c_int> {
    if wc.is_null() || grh.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's completion.
    let w = unsafe { &*wc };
    let mut g = rxe_verbs::InlineData::new();
    // SAFETY: ibv_create_ah_from_wc(3): grh points to the 40-byte GRH
    // space of the receive buffer.
    unsafe { crate::foreign::copy_in(grh as usize as u64, 40, &mut g) };
    let mut rw = WorkCompletion::new(
        w.wr_id,
        WcStatus::Success,
        WcOpcode::Recv,
        w.qp_num,
        WorkQueue::Recv,
    );
    rw.grh = w.wc_flags & IBV_WC_GRH != 0;
    rw.sl = w.sl;
    rw.src_qp = w.src_qp;
    let dev = ctx.device()?;
    rxe_verbs::ah_attr_from_wc(&dev, port, &rw, &g).map_err(|e| errno_of(&e))
}

fn attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: a.dgid.into(),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: a.port_num,
    }
}

export! {"IBVERBS_1.1" fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut u8, ah_attr: *mut ibv_ah_attr) -> c_int, fail = -1, {
    let Some(ctx) = Context::from_ibv(context) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if ah_attr.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    match attr_from_wc(ctx, port_num, wc, grh) {
        Ok(a) => {
            // SAFETY: the caller's out struct.
            unsafe { ah_attr.write(attr_to_c(&a)) };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}}

export! {"IBVERBS_1.1" fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut u8, port_num: u8) -> *mut ibv_ah, fail = std::ptr::null_mut(), {
    let Some(p) = Pd::from_ibv(pd) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    attr_from_wc(p.ctx, port_num, wc, grh).and_then(|a| create(pd, &a)).unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}}
