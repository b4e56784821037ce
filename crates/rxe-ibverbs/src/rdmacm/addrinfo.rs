//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`: the host's `getaddrinfo`
//! (numeric addresses and names alike), its first answer turned into an
//! `rdma_addrinfo` as librdmacm does: a passive lookup gives the source
//! address (what `rdma_bind_addr` takes), an active one the destination;
//! the QP type and port space follow the hints, else the socket type and
//! protocol (stream: RC over `RDMA_PS_TCP`, datagram: UD over
//! `RDMA_PS_UDP`). RoCEv2 has no SA to ask for routes, so `RAI_SA` is
//! refused and no `ai_route` is given.
//!
//! Everything is allocated with `malloc`, as librdmacm does, so that
//! `rdma_freeaddrinfo` may free what a program put in.

use std::ffi::{c_char, c_int, c_void};

use rxe_verbs_abi::consts::{IBV_QPT_RC, IBV_QPT_UD};
use rxe_verbs_abi::rdmacm::*;

use super::fail;

/// A malloc'd copy of `len` bytes at `src`, or NULL.
///
/// # Safety
/// `src` holds `len` readable bytes.
unsafe fn copy_out(src: *const c_void, len: usize) -> *mut c_void {
    if src.is_null() || len == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: plain allocation.
    let p = unsafe { libc::malloc(len) };
    if !p.is_null() {
        // SAFETY: both hold `len` bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len) };
    }
    p
}

/// The `getaddrinfo` hints for `h`.
fn ai_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: all-zero is a valid addrinfo (no pointers set).
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai.ai_family = h.ai_family;
    ai.ai_socktype = match h.ai_qp_type as u32 {
        IBV_QPT_UD => libc::SOCK_DGRAM,
        0 => 0,
        _ => libc::SOCK_STREAM,
    };
    ai.ai_protocol = match h.ai_port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// # Safety
/// The pointers are the caller's C strings and hints (each may be NULL).
unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
) -> Result<*mut rdma_addrinfo, c_int> {
    let none = rdma_addrinfo {
        ai_flags: 0,
        ai_family: 0,
        ai_qp_type: 0,
        ai_port_space: 0,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: std::ptr::null_mut(),
        ai_dst_addr: std::ptr::null_mut(),
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    };
    let h = hints.unwrap_or(&none);
    if h.ai_flags & RAI_SA != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if h.ai_family == libc::AF_IB {
        return Err(libc::EAFNOSUPPORT);
    }
    // SAFETY: calloc'd, so every field starts zero/NULL.
    let rai =
        unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    if rai.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: just allocated and zeroed.
    let r = unsafe { &mut *rai };
    if !node.is_null() || !service.is_null() {
        let want = ai_hints(h);
        let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: C strings or NULL, our hints, our out pointer.
        let rc = unsafe {
            libc::getaddrinfo(
                node,
                service,
                if hints.is_some() {
                    &want
                } else {
                    std::ptr::null()
                },
                &mut ai,
            )
        };
        if rc != 0 {
            // SAFETY: our own allocation, empty.
            unsafe { libc::free(rai.cast()) };
            // librdmacm returns getaddrinfo's own (EAI_*) code.
            return Err(rc);
        }
        // SAFETY: getaddrinfo succeeded: `ai` is its first answer.
        let a = unsafe { &*ai };
        r.ai_qp_type = if h.ai_qp_type != 0 {
            h.ai_qp_type
        } else if a.ai_socktype == libc::SOCK_DGRAM {
            IBV_QPT_UD as c_int
        } else {
            IBV_QPT_RC as c_int
        };
        r.ai_port_space = if h.ai_port_space != 0 {
            h.ai_port_space
        } else if a.ai_protocol == libc::IPPROTO_UDP {
            RDMA_PS_UDP as c_int
        } else {
            RDMA_PS_TCP as c_int
        };
        r.ai_family = a.ai_family;
        // SAFETY: getaddrinfo's address of its length; its canonical name
        // a C string or NULL.
        unsafe {
            let addr = copy_out(a.ai_addr.cast(), a.ai_addrlen as usize);
            let canon = if a.ai_canonname.is_null() {
                std::ptr::null_mut()
            } else {
                libc::strdup(a.ai_canonname)
            };
            if a.ai_flags & libc::AI_PASSIVE != 0 {
                r.ai_flags = RAI_PASSIVE;
                r.ai_src_addr = addr;
                r.ai_src_len = a.ai_addrlen;
                r.ai_src_canonname = canon;
            } else {
                r.ai_dst_addr = addr;
                r.ai_dst_len = a.ai_addrlen;
                r.ai_dst_canonname = canon;
            }
            libc::freeaddrinfo(ai);
        }
    } else {
        r.ai_flags = h.ai_flags;
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        // SAFETY: the hints' address of its length.
        r.ai_dst_addr = unsafe { copy_out(h.ai_dst_addr, h.ai_dst_len as usize) };
        r.ai_dst_len = if r.ai_dst_addr.is_null() {
            0
        } else {
            h.ai_dst_len
        };
    }
    if r.ai_src_len == 0 && h.ai_src_len != 0 {
        // SAFETY: the hints' source address of its length.
        r.ai_src_addr = unsafe { copy_out(h.ai_src_addr, h.ai_src_len as usize) };
        r.ai_src_len = if r.ai_src_addr.is_null() {
            0
        } else {
            h.ai_src_len
        };
    }
    Ok(rai)
}

export! {"RDMACM_1.0" fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int, fail = -1, {
    if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
        return fail(libc::EINVAL);
    }
    if let Err(e) = super::devices::init() {
        return fail(e);
    }
    // SAFETY: the caller's hints, if any.
    let h = unsafe { hints.as_ref() };
    // SAFETY: the caller's strings and hints.
    match unsafe { getaddrinfo(node, service, h) } {
        Ok(r) => {
            // SAFETY: the caller's out pointer.
            unsafe { *res = r };
            0
        }
        Err(e) if e < 0 => e,
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) -> (), fail = (), {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list of rdma_getaddrinfo (malloc'd, as its fields).
        unsafe {
            let r = &*p;
            let next = r.ai_next;
            for f in [r.ai_connect, r.ai_route, r.ai_src_canonname.cast(), r.ai_dst_canonname.cast(), r.ai_src_addr, r.ai_dst_addr] {
                libc::free(f);
            }
            libc::free(p.cast());
            p = next;
        }
    }
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_and_active_lookups_fill_the_right_side() {
        let hints = rdma_addrinfo {
            ai_flags: RAI_PASSIVE | RAI_NUMERICHOST,
            ai_port_space: RDMA_PS_TCP as c_int,
            ..unsafe_zeroed()
        };
        // SAFETY: C strings and our hints.
        let r =
            unsafe { getaddrinfo(c"127.0.0.9".as_ptr(), c"7174".as_ptr(), Some(&hints)) }.unwrap();
        // SAFETY: just made.
        let a = unsafe { &*r };
        assert_eq!(a.ai_flags, RAI_PASSIVE);
        assert_eq!(a.ai_port_space, RDMA_PS_TCP as c_int);
        assert_eq!(a.ai_qp_type, IBV_QPT_RC as c_int);
        assert!(a.ai_dst_addr.is_null());
        // SAFETY: a sockaddr_in of getaddrinfo.
        let sa = unsafe { super::super::sockaddr::read(a.ai_src_addr) }.unwrap();
        assert_eq!(sa, "127.0.0.9:7174".parse().unwrap());
        // SAFETY: ours.
        unsafe { rdma_freeaddrinfo(r) };

        let hints = rdma_addrinfo {
            ai_qp_type: IBV_QPT_UD as c_int,
            ai_port_space: RDMA_PS_UDP as c_int,
            ..unsafe_zeroed()
        };
        // SAFETY: as above.
        let r = unsafe { getaddrinfo(c"::1".as_ptr(), c"7174".as_ptr(), Some(&hints)) }.unwrap();
        // SAFETY: as above.
        let a = unsafe { &*r };
        assert_eq!(a.ai_flags, 0);
        assert_eq!(a.ai_qp_type, IBV_QPT_UD as c_int);
        // SAFETY: as above.
        let sa = unsafe { super::super::sockaddr::read(a.ai_dst_addr) }.unwrap();
        assert_eq!(sa, "[::1]:7174".parse().unwrap());
        // SAFETY: as above.
        unsafe { rdma_freeaddrinfo(r) };
    }

    fn unsafe_zeroed() -> rdma_addrinfo {
        // SAFETY: all-zero is a valid rdma_addrinfo (NULL pointers).
        unsafe { std::mem::zeroed() }
    }
}
