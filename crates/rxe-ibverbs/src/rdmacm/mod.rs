//! The drop-in `librdmacm.so.1`: the RDMA connection manager's C API
//! (`<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`, symbol versions
//! RDMACM_1.0 ... 1.3) over the CM of rxe-verbs ([`rxe_verbs::cm`]), which
//! speaks the IBTA CM protocol in MADs on each device's QP1.
//!
//! **Why it lives in this library.** The `ibv_context`, `ibv_pd`, `ibv_cq`
//! and `ibv_qp` pointers librdmacm hands a program must be this
//! libibverbs' own objects, and the CM must drive the same devices and
//! QPs. So the `rdma_*` functions are exported from this very file, with
//! their RDMACM_1.x versions; `rxe exec` puts a `librdmacm.so.1` link to
//! it beside `libibverbs.so.1`. The loader sees one file under two names
//! (same inode), maps it once, and binds a program's
//! `rdma_connect@RDMACM_1.0` here: one Rust runtime and one device
//! registry per process, and no second ABI between two libraries. (The
//! design note's alternative, a separate library reaching this one
//! through a `dlsym`'d table, would need a C ABI for every CM call.)
//!
//! One job per file: [`devices`] (the CM's own context and PD on every
//! device, `rdma_get_devices`), [`channel`] (event channels, their
//! eventfd, `rdma_get_cm_event`/`rdma_ack_cm_event`), [`event`] (a Rust
//! event as a `struct rdma_cm_event`), [`id`] (`struct rdma_cm_id` and its
//! calls), [`multicast`] (`rdma_join_multicast`, `rdma_leave_multicast`),
//! [`qp`] (`rdma_create_qp`, `rdma_init_qp_attr`, SRQs),
//! [`addrinfo`] (`rdma_getaddrinfo`), [`ep`] (the synchronous calls:
//! `rdma_create_ep`, `rdma_get_request`), [`sockaddr`] (C socket
//! addresses), [`unsupported`] (what rxe does not do yet: rsockets,
//! ECE), each refusing with the errno librdmacm would give.
//!
//! Conventions, as librdmacm's: calls return 0, or -1 with `errno` set;
//! those returning a pointer return NULL with `errno` set.

pub mod addrinfo;
pub mod channel;
pub mod devices;
pub mod ep;
pub mod event;
pub mod id;
pub mod multicast;
pub mod qp;
pub mod rsocket;
pub mod sockaddr;
pub mod unsupported;

use std::ffi::c_int;

use rxe_verbs::cm::CmApiError;

use crate::errno::set_errno;

/// The errno librdmacm (and the kernel's rdma_cm behind it) gives for `e`.
pub fn errno_of(e: &CmApiError) -> c_int {
    match e {
        CmApiError::Verbs(v) => crate::errno::errno_of(v),
        CmApiError::Connect(_) => libc::EINVAL,
        CmApiError::Cm(rxe_cm::CmError::AlreadyListening(_)) => libc::EADDRINUSE,
        CmApiError::Cm(rxe_cm::CmError::OutOfIds) => libc::ENOMEM,
        CmApiError::Cm(_) => libc::EINVAL,
        CmApiError::IpCm(_) => libc::EINVAL,
        CmApiError::NoDevice(_) => libc::ENODEV,
        CmApiError::NotReady(_) => libc::EINVAL,
        CmApiError::Unsupported(_) => libc::EOPNOTSUPP,
        CmApiError::WrongDevice => libc::EINVAL,
        CmApiError::NotMulticast(_) => libc::EINVAL,
        CmApiError::AlreadyJoined(_) => libc::EADDRINUSE,
        CmApiError::NotJoined(_) => libc::EADDRNOTAVAIL,
    }
}

/// librdmacm's failure: errno set, -1 returned.
pub fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// [`fail`] with the errno of a CM error.
pub fn fail_cm(e: &CmApiError) -> c_int {
    tracing::debug!(error = %e, "rdma_cm call failed");
    fail(errno_of(e))
}

/// `Ok(())` is 0, an errno is -1 with errno set.
pub fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}
