//! rdma-core's error conventions: which errno a failure becomes.
//!
//! They differ per function (design §2.7): `ibv_post_*`, `ibv_modify_qp`,
//! `ibv_destroy_*`, `ibv_dealloc_pd`, `ibv_dereg_mr` and `ibv_query_port`
//! return the errno value; `ibv_query_gid`, `ibv_query_pkey` and
//! `ibv_get_cq_event` return -1 with errno set; functions returning a
//! pointer return NULL with errno set. Each export follows its own.

use rxe_core::transport::{EndpointError, McastError, PostError};
use rxe_verbs::VerbsError;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno` (what a failed call of ours just set).
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|e| *e != 0)
        .unwrap_or(libc::EIO)
}

/// The errno value rdma-core (and kernel rxe behind it) gives for `e`.
pub fn errno_of(e: &VerbsError) -> i32 {
    match e {
        VerbsError::DeviceRemoved(_) => libc::ENODEV,
        VerbsError::NoSuchDevice(_) | VerbsError::NoSuchInterface(_) => libc::ENODEV,
        VerbsError::NameInUse(_) => libc::EEXIST,
        VerbsError::AddressNotLocal(_) => libc::EADDRNOTAVAIL,
        VerbsError::NoAddress(_) | VerbsError::NoAddresses => libc::EADDRNOTAVAIL,
        VerbsError::PortBusy { .. } => libc::EADDRINUSE,
        VerbsError::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        VerbsError::Capture(_) => libc::EIO,
        VerbsError::Destroyed(_) => libc::EINVAL,
        VerbsError::Busy { .. } => libc::EBUSY,
        VerbsError::WrongDevice(_) | VerbsError::PdMismatch { .. } => libc::EINVAL,
        VerbsError::LimitReached { .. } => libc::ENOMEM,
        VerbsError::InvalidArgument(_) => libc::EINVAL,
        VerbsError::NoSuchPort(_) | VerbsError::NoSuchGid(_) | VerbsError::NoSuchPkey(_) => {
            libc::EINVAL
        }
        VerbsError::CqOverrun => libc::EIO,
        VerbsError::Timeout => libc::ETIMEDOUT,
        // A full work queue is ENOMEM, as kernel rxe's provider says.
        VerbsError::Post(PostError::QueueFull { .. }) => libc::ENOMEM,
        VerbsError::Post(_) => libc::EINVAL,
        VerbsError::Endpoint(EndpointError::McastAttached(_)) => libc::EBUSY,
        VerbsError::Endpoint(EndpointError::Mcast(McastError::Limit(_))) => libc::ENOMEM,
        VerbsError::Modify(_) | VerbsError::Endpoint(_) => libc::EINVAL,
        VerbsError::Memory(_) => libc::EINVAL,
    }
}

/// Sets errno from `e` and returns it (for functions returning the errno).
pub fn fail(e: &VerbsError) -> i32 {
    let n = errno_of(e);
    tracing::debug!(error = %e, errno = n, "verb failed");
    set_errno(n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_follow_rdma_core() {
        assert_eq!(
            errno_of(&VerbsError::Post(PostError::QueueFull { depth: 4 })),
            libc::ENOMEM
        );
        assert_eq!(
            errno_of(&VerbsError::Post(PostError::BadState)),
            libc::EINVAL
        );
        assert_eq!(
            errno_of(&VerbsError::Busy {
                kind: rxe_verbs::ObjectKind::Cq,
                users: 1,
                what: "x"
            }),
            libc::EBUSY
        );
        assert_eq!(
            errno_of(&VerbsError::PortBusy {
                addr: "127.0.0.1".parse().unwrap(),
                port: 4791
            }),
            libc::EADDRINUSE
        );
        set_errno(libc::EAGAIN);
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EAGAIN);
    }
}
