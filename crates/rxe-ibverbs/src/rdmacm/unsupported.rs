//! What librdmacm has and rxe does not do yet, refused the way a program
//! can handle: -1 (or NULL, or `(size_t)-1`) with `errno` ENOSYS, so that
//! every program linked against librdmacm loads and only the call fails.
//!
//! - rsockets (`rsocket`, `rconnect`, ...: sockets over RC QPs, a protocol
//!   of librdmacm's own). `rpoll` and `rselect` are the exception: on
//!   plain file descriptors they are `poll` and `select`, and an rsocket
//!   can never exist here, so forwarding them is exact.
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
    "RDMACM_1.0" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int = -1;
    "RDMACM_1.0" fn rbind(socket: c_int, addr: *const c_void, len: u32) -> c_int = -1;
    "RDMACM_1.0" fn rlisten(socket: c_int, backlog: c_int) -> c_int = -1;
    "RDMACM_1.0" fn raccept(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int = -1;
    "RDMACM_1.0" fn rconnect(socket: c_int, addr: *const c_void, len: u32) -> c_int = -1;
    "RDMACM_1.0" fn rshutdown(socket: c_int, how: c_int) -> c_int = -1;
    "RDMACM_1.0" fn rclose(socket: c_int) -> c_int = -1;
    "RDMACM_1.0" fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize = -1;
    "RDMACM_1.0" fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src: *mut c_void, slen: *mut u32) -> isize = -1;
    "RDMACM_1.0" fn rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize = -1;
    "RDMACM_1.0" fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize = -1;
    "RDMACM_1.0" fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dst: *const c_void, dlen: u32) -> isize = -1;
    "RDMACM_1.0" fn rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize = -1;
    "RDMACM_1.0" fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize = -1;
    "RDMACM_1.0" fn rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize = -1;
    "RDMACM_1.0" fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize = -1;
    "RDMACM_1.0" fn rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize = -1;
    "RDMACM_1.0" fn rgetpeername(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int = -1;
    "RDMACM_1.0" fn rgetsockname(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int = -1;
    "RDMACM_1.0" fn rsetsockopt(socket: c_int, level: c_int, name: c_int, val: *const c_void, len: u32) -> c_int = -1;
    "RDMACM_1.0" fn rgetsockopt(socket: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut u32) -> c_int = -1;
    "RDMACM_1.0" fn rfcntl(socket: c_int, cmd: c_int, arg: usize) -> c_int = -1;
    "RDMACM_1.0" fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: i64) -> i64 = -1;
    "RDMACM_1.0" fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int = -1;
    "RDMACM_1.0" fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: i64, flags: c_int) -> usize = usize::MAX;
    "RDMACM_1.3" fn rdma_get_remote_ece(id: *mut c_void, ece: *mut c_void) -> c_int = -1;
    "RDMACM_1.3" fn rdma_set_local_ece(id: *mut c_void, ece: *mut c_void) -> c_int = -1;
}

export! {"RDMACM_1.3" fn rdma_reject_ece(id: *mut rxe_verbs_abi::rdmacm::rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int, fail = -1, {
    // A reject with ECE's reason is a reject: rxe sends it as consumer
    // defined (no ECE options were offered).
    // SAFETY: forwarded as given.
    unsafe { super::id::rdma_reject(id, private_data, private_data_len) }
}}

export! {"RDMACM_1.0" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int, fail = -1, {
    // SAFETY: the caller's pollfd array, as poll(2) takes it.
    unsafe { libc::poll(fds, nfds, timeout) }
}}

export! {"RDMACM_1.0" fn rselect(nfds: c_int, readfds: *mut libc::fd_set, writefds: *mut libc::fd_set, exceptfds: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int, fail = -1, {
    // SAFETY: the caller's sets, as select(2) takes them.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}}
