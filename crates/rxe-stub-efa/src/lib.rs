//! A stub `libefa.so.1`. Debian's perftest links rdma-core's EFA
//! direct-verbs library and calls it only for SRD QPs on EFA devices;
//! under rxe every entry fails with EOPNOTSUPP. The real libefa cannot be
//! used: it needs private symbols of the real libibverbs.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

fn unsupported() {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
}

type P = *mut c_void;

/// `efadv_create_qp_ex@@EFA_1.1`: not available on rxe.
#[export_name = "__rxe_efadv_create_qp_ex"]
pub unsafe extern "C" fn efadv_create_qp_ex(context: P, attr_ex: P, efa_attr: P, inlen: u32) -> P {
    let _ = (context, attr_ex, efa_attr, inlen);
    unsupported();
    std::ptr::null_mut()
}
#[cfg(not(test))]
core::arch::global_asm!(".symver __rxe_efadv_create_qp_ex, efadv_create_qp_ex@@EFA_1.1");

/// `efadv_query_device@@EFA_1.1`: not available on rxe.
#[export_name = "__rxe_efadv_query_device"]
pub unsafe extern "C" fn efadv_query_device(context: P, attr: P, inlen: u32) -> c_int {
    let _ = (context, attr, inlen);
    unsupported();
    libc::EOPNOTSUPP
}
#[cfg(not(test))]
core::arch::global_asm!(".symver __rxe_efadv_query_device, efadv_query_device@@EFA_1.1");

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_fails_with_eopnotsupp() {
        // SAFETY: the stubs ignore their arguments.
        unsafe {
            assert_eq!(
                super::efadv_query_device(std::ptr::null_mut(), std::ptr::null_mut(), 0),
                libc::EOPNOTSUPP
            );
            assert!(super::efadv_create_qp_ex(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0
            )
            .is_null());
        }
    }
}
