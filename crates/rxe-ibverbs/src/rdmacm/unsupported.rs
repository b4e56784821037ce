//! What librdmacm has and rxe does not do yet, refused the way a program
//! can handle: -1 (or NULL, or `(size_t)-1`) with `errno` ENOSYS, so that
//! every program linked against librdmacm loads and only the call fails.
//!
//! - rsockets' `msghdr` calls (`rsendmsg`, `rrecvmsg`); the stream calls
//!   and the I/O map are in [`super::rsocket`].
//!   `rselect` is `select` on the program's own descriptors: an rsocket in
//!   its sets is never ready (use `rpoll`).
//! - ECE (`rdma_set_local_ece`, ...): vendor connection options; rxe
//!   offers none.

use std::ffi::{c_int, c_void};

use super::fail;

/// `export_enosys! { "VERSION" fn name(args) -> T = failure; ... }`
macro_rules! export_enosys {
    ($($ver:literal fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $failv:expr;)*) => {
        $(
            export! {$ver fn $name($($arg: $ty),*) -> $ret, fail = $failv, {
                let _ = ($($arg,)*);
                fail(libc::ENOSYS);
                $failv
            }}
        )*
    };
}

export_enosys! {
    "RDMACM_1.0" fn rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize = -1;
    "RDMACM_1.0" fn rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize = -1;
    "RDMACM_1.3" fn rdma_get_remote_ece(id: *mut c_void, ece: *mut c_void) -> c_int = -1;
    "RDMACM_1.3" fn rdma_set_local_ece(id: *mut c_void, ece: *mut c_void) -> c_int = -1;
}

export! {"RDMACM_1.3" fn rdma_reject_ece(id: *mut rxe_verbs_abi::rdmacm::rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int, fail = -1, {
    // A reject with ECE's reason is a reject: rxe sends it as consumer
    // defined (no ECE options were offered).
    // SAFETY: forwarded as given.
    unsafe { super::id::rdma_reject(id, private_data, private_data_len) }
}}

export! {"RDMACM_1.0" fn rselect(nfds: c_int, readfds: *mut libc::fd_set, writefds: *mut libc::fd_set, exceptfds: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int, fail = -1, {
    // SAFETY: the caller's sets, as select(2) takes them.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}}
