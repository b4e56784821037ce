//! Memory registration of the application's own memory, in place
//! (`ibv_reg_mr`, `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_dereg_mr`).
//! The device reads and writes the bytes where they are, through
//! [`crate::foreign::ForeignBytes`]; nothing is copied or pinned.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use rxe_verbs::AccessFlags;
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::{ibv_mr, ibv_pd};

use crate::errno::{errno_of, set_errno};
use crate::foreign::ForeignBytes;
use crate::handles::{self, Kind};
use crate::pd::Pd;

#[repr(C)]
pub struct Mr {
    pub mr: ibv_mr,
    pub inner: rxe_verbs::Mr,
}

/// The access rights of `ibv_reg_mr(3)` flags. Bits in
/// `IBV_ACCESS_OPTIONAL_RANGE` (relaxed ordering, ...) may be ignored by
/// definition; on-demand paging is refused (rxe has no page faults to
/// serve); MW_BIND lets memory windows be bound to the region; anything
/// unknown is EINVAL.
pub fn access_of(flags: u32) -> Result<(AccessFlags, bool), c_int> {
    let f = flags & !IBV_ACCESS_OPTIONAL_RANGE;
    if f & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_ZERO_BASED
        | IBV_ACCESS_FLUSH_GLOBAL
        | IBV_ACCESS_FLUSH_PERSISTENT;
    if f & !known != 0 {
        return Err(libc::EINVAL);
    }
    Ok((AccessFlags::from_mr_bits(f), f & IBV_ACCESS_ZERO_BASED != 0))
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: Option<u64>,
    access: u32,
) -> *mut ibv_mr {
    let fail = |e: c_int| {
        set_errno(e);
        std::ptr::null_mut()
    };
    let Some(p) = Pd::from_ibv(pd) else {
        return fail(libc::EINVAL);
    };
    let (flags, zero_based) = match access_of(access) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let ptr = match NonNull::new(addr.cast::<u8>()) {
        Some(p) => p,
        None if length == 0 => NonNull::dangling(),
        None => return fail(libc::EINVAL),
    };
    if (ptr.as_ptr() as usize).checked_add(length).is_none() {
        return fail(libc::EINVAL);
    }
    let iova = if zero_based {
        Some(0)
    } else {
        Some(iova.unwrap_or(addr as usize as u64))
    };
    // SAFETY: ibv_reg_mr(3): the memory stays valid until ibv_dereg_mr,
    // which ends the region (the Arc is dropped with the Mr); the range
    // does not wrap (checked above).
    let bytes = unsafe { ForeignBytes::new(ptr, length) };
    match p.inner.reg_mr_with(Arc::new(bytes), iova, flags) {
        Ok(inner) => {
            let m = Box::into_raw(Box::new(Mr {
                mr: ibv_mr {
                    context: p.pd.context,
                    pd,
                    addr,
                    length,
                    handle: inner.lkey(),
                    lkey: inner.lkey(),
                    rkey: inner.rkey(),
                },
                inner,
            }));
            handles::insert(m, Kind::Mr);
            m.cast()
        }
        Err(e) => fail(errno_of(&e)),
    }
}

export! {"IBVERBS_1.1" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    reg(pd, addr, length, None, access as u32)
}}

export! {"IBVERBS_1.7" fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    reg(pd, addr, length, Some(iova), access as u32)
}}

export! {"IBVERBS_1.8" fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    reg(pd, addr, length, Some(iova), access)
}}

export! {"IBVERBS_1.1" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int, fail = libc::EIO, {
    if !handles::is(mr, Kind::Mr) {
        return libc::EINVAL;
    }
    // SAFETY: a live Mr of ours.
    let m = unsafe { &*mr.cast::<Mr>() };
    if let Err(e) = m.inner.dereg_in_place() {
        return crate::errno::fail(&e);
    }
    handles::remove(mr, Kind::Mr);
    // SAFETY: Box::into_raw'd by reg; no longer a live handle.
    drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
    0
}}

export! {"IBVERBS_1.1" fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int, fail = IBV_REREG_MR_ERR_INPUT, {
    let _ = (mr, flags, pd, addr, length, access);
    // Not supported: deregister and register again instead.
    set_errno(libc::EOPNOTSUPP);
    IBV_REREG_MR_ERR_INPUT
}}

export! {"IBVERBS_1.12" fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    let _ = (pd, offset, length, iova, fd, access);
    // A software device has no DMA to share a dma-buf with.
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_follow_ibv_reg_mr() {
        let (a, z) = access_of(
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING,
        )
        .unwrap();
        assert_eq!(a, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        assert!(!z);
        assert_eq!(access_of(IBV_ACCESS_ON_DEMAND), Err(libc::EOPNOTSUPP));
        assert_eq!(access_of(1 << 10), Err(libc::EINVAL));
        // The FLUSH rights and MW_BIND are kept (rxe-verbs refuses
        // FLUSH_PERSISTENT: no rxe region is persistent).
        let (f, _) = access_of(IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_MW_BIND).unwrap();
        assert_eq!(f, AccessFlags::FLUSH_GLOBAL | AccessFlags::MW_BIND);
        assert!(access_of(IBV_ACCESS_ZERO_BASED).unwrap().1);
    }
}
