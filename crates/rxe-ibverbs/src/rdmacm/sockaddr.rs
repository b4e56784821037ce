//! C socket addresses (`struct sockaddr_in`, `sockaddr_in6`) to and from
//! [`SocketAddr`]. Only these two families: RoCEv2 addresses are IP
//! addresses (`AF_IB` is InfiniBand's own and refused).

use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use rxe_verbs_abi::rdmacm::sockaddr_storage_opaque;

/// Reads the address at `p`: its family says how many bytes it has.
///
/// # Safety
/// `p` is NULL or points to a `struct sockaddr` of its family's size.
pub unsafe fn read(p: *const c_void) -> Result<SocketAddr, i32> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: every sockaddr starts with its family.
    let family = unsafe { p.cast::<libc::sa_family_t>().read_unaligned() };
    match c_int_of(family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let a = unsafe { p.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let a = unsafe { p.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

fn c_int_of(f: libc::sa_family_t) -> i32 {
    i32::from(f)
}

/// The size of `a` as a C socket address.
pub fn len_of(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>() as u32,
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>() as u32,
    }
}

/// `a` as the bytes of a `struct sockaddr_storage`.
pub fn storage(a: &SocketAddr) -> sockaddr_storage_opaque {
    let mut out = [0u8; 128];
    match a {
        SocketAddr::V4(v4) => {
            out[0..2].copy_from_slice(&(libc::AF_INET as libc::sa_family_t).to_ne_bytes());
            out[2..4].copy_from_slice(&v4.port().to_be_bytes());
            out[4..8].copy_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            out[0..2].copy_from_slice(&(libc::AF_INET6 as libc::sa_family_t).to_ne_bytes());
            out[2..4].copy_from_slice(&v6.port().to_be_bytes());
            out[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            out[8..24].copy_from_slice(&v6.ip().octets());
            out[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
        }
    }
    sockaddr_storage_opaque(out)
}

/// The unspecified address of `a`'s family with no port (a fresh ID's).
pub fn unspecified_like(a: &IpAddr) -> SocketAddr {
    match a {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_c_layout() {
        for s in ["10.99.0.2:7174", "[fd99::1]:18515", "0.0.0.0:0"] {
            let a: SocketAddr = s.parse().unwrap();
            let st = storage(&a);
            // SAFETY: a sockaddr_storage holds any family.
            let back = unsafe { read(st.0.as_ptr().cast()) }.unwrap();
            assert_eq!(back, a);
        }
        let mut ib = [0u8; 128];
        ib[0..2].copy_from_slice(&27u16.to_ne_bytes());
        // SAFETY: as above.
        assert_eq!(unsafe { read(ib.as_ptr().cast()) }, Err(libc::EAFNOSUPPORT));
        // SAFETY: NULL is refused before any read.
        assert_eq!(unsafe { read(std::ptr::null()) }, Err(libc::EINVAL));
    }

    /// A program's address need not be aligned, and a `sockaddr_in` is
    /// only 16 bytes: `read` takes no more than its family's size, at any
    /// offset (Miri, in scripts/miri.sh, checks each access).
    #[test]
    fn unaligned_addresses_of_their_exact_size_are_read() {
        let v4: SocketAddr = "239.1.2.3:4791".parse().unwrap();
        let v6: SocketAddr = "[fd99::2%3]:7174".parse().unwrap();
        for a in [v4, v6] {
            let len = len_of(&a) as usize;
            let st = storage(&a);
            for offset in 1..4 {
                // Exactly the family's size, at an odd place.
                let mut buf = vec![0u8; offset + len];
                buf[offset..].copy_from_slice(&st.0[..len]);
                // SAFETY: `len` bytes of a socket address of that family.
                let back = unsafe { read(buf.as_ptr().add(offset).cast()) };
                assert_eq!(back, Ok(a));
            }
        }
        assert_eq!(len_of(&v4), 16);
        assert_eq!(len_of(&v6), 28);
        assert_eq!(unspecified_like(&v6.ip()), "[::]:0".parse().unwrap());
    }
}
