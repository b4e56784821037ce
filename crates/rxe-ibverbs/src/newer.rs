//! The symbols of rdma-core's newer version nodes, IBVERBS_1.15 to 1.18
//! (DMA handles, `ibv_reg_mr_ex`, port speed, library-allocated buffers,
//! completion counters). Debian 12's programs import none of them, but a
//! program built against a newer rdma-core that references one would not
//! even start without it (its loader checks every `name@VERSION`). rxe has
//! none of these features, so each answers as rdma-core itself does for a
//! device whose provider lacks them: NULL with errno EOPNOTSUPP for a
//! constructor, the errno value EOPNOTSUPP for an int-returning verb, -1
//! with errno EOPNOTSUPP for a file-descriptor export.

use std::ffi::{c_int, c_void};

use rxe_verbs_abi::{ibv_context, ibv_mr, ibv_pd, ibv_qp};

use crate::errno::set_errno;

/// A constructor of a feature rxe lacks: NULL, errno EOPNOTSUPP.
fn no_object<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// An fd export of a feature rxe lacks: -1, errno EOPNOTSUPP.
fn no_fd() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

export! {"IBVERBS_1.15" fn ibv_alloc_dmah(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void, fail = std::ptr::null_mut(), {
    let _ = (context, attr);
    no_object()
}}

export! {"IBVERBS_1.15" fn ibv_dealloc_dmah(dmah: *mut c_void) -> c_int, fail = libc::EIO, {
    let _ = dmah;
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.15" fn ibv_reg_mr_ex(pd: *mut ibv_pd, attr: *mut c_void) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    let _ = (pd, attr);
    no_object()
}}

export! {"IBVERBS_1.16" fn ibv_dm_export_dmabuf_fd(dm: *mut c_void) -> c_int, fail = -1, {
    let _ = dm;
    no_fd()
}}

export! {"IBVERBS_1.16" fn ibv_query_port_speed(context: *mut ibv_context, port_num: u32, speed: *mut u64) -> c_int, fail = libc::EIO, {
    let _ = (context, port_num, speed);
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.17" fn ibv_alloc_buf(pd: *mut ibv_pd, size: usize, buf: *mut *mut c_void) -> *mut c_void, fail = std::ptr::null_mut(), {
    let _ = (pd, size, buf);
    no_object()
}}

// ibv_alloc_buf never hands out a buffer, so there is none to free.
export! {"IBVERBS_1.17" fn ibv_free_buf(buf: *mut c_void) -> (), fail = (), {
    let _ = buf;
}}

export! {"IBVERBS_1.17" fn ibv_reg_buf_mr(pd: *mut ibv_pd, buf: *mut c_void, access: c_int) -> *mut ibv_mr, fail = std::ptr::null_mut(), {
    let _ = (pd, buf, access);
    no_object()
}}

export! {"IBVERBS_1.18" fn _ibv_query_comp_cntr_caps(context: *mut ibv_context, caps: *mut c_void, caps_size: usize) -> c_int, fail = libc::EIO, {
    let _ = (context, caps, caps_size);
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.18" fn ibv_create_comp_cntr(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void, fail = std::ptr::null_mut(), {
    let _ = (context, attr);
    no_object()
}}

export! {"IBVERBS_1.18" fn ibv_destroy_comp_cntr(cntr: *mut c_void) -> c_int, fail = libc::EIO, {
    let _ = cntr;
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.18" fn ibv_export_buf_dmabuf_fd(buf: *mut c_void) -> c_int, fail = -1, {
    let _ = buf;
    no_fd()
}}

export! {"IBVERBS_1.18" fn ibv_qp_attach_comp_cntr(qp: *mut ibv_qp, cntr: *mut c_void, attr: *mut c_void) -> c_int, fail = libc::EIO, {
    let _ = (qp, cntr, attr);
    libc::EOPNOTSUPP
}}

/// The counter verbs that take an amount or a value.
macro_rules! counter_verb {
    ($name:ident($arg:ident: $ty:ty)) => {
        export! {"IBVERBS_1.18" fn $name(cntr: *mut c_void, $arg: $ty) -> c_int, fail = libc::EIO, {
            let _ = (cntr, $arg);
            libc::EOPNOTSUPP
        }}
    };
}

counter_verb!(ibv_inc_comp_cntr(amount: u64));
counter_verb!(ibv_inc_err_comp_cntr(amount: u64));
counter_verb!(ibv_set_comp_cntr(value: u64));
counter_verb!(ibv_set_err_comp_cntr(value: u64));
counter_verb!(ibv_read_comp_cntr(value: *mut u64));
counter_verb!(ibv_read_err_comp_cntr(value: *mut u64));

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn every_newer_verb_says_not_supported_as_rdma_core_does() {
        // SAFETY: the stubs never dereference their arguments.
        unsafe {
            assert!(ibv_alloc_dmah(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(ibv_dealloc_dmah(std::ptr::null_mut()), libc::EOPNOTSUPP);
            assert!(ibv_reg_mr_ex(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(ibv_dm_export_dmabuf_fd(std::ptr::null_mut()), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            let mut speed = 0u64;
            assert_eq!(
                ibv_query_port_speed(std::ptr::null_mut(), 1, &mut speed),
                libc::EOPNOTSUPP
            );
            assert!(ibv_alloc_buf(std::ptr::null_mut(), 4096, std::ptr::null_mut()).is_null());
            ibv_free_buf(std::ptr::null_mut());
            assert!(ibv_reg_buf_mr(std::ptr::null_mut(), std::ptr::null_mut(), 0).is_null());
            assert!(ibv_create_comp_cntr(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(ibv_inc_comp_cntr(std::ptr::null_mut(), 1), libc::EOPNOTSUPP);
            assert_eq!(
                ibv_read_err_comp_cntr(std::ptr::null_mut(), &mut speed),
                libc::EOPNOTSUPP
            );
            assert_eq!(ibv_export_buf_dmabuf_fd(std::ptr::null_mut()), -1);
        }
    }
}
