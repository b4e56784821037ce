//! The Global Identifier (IBTA 4.1.1): 128 bits naming a port, laid out as
//! an IPv6 address. RoCEv2 uses a port's IP addresses as its GIDs; an IPv4
//! address is named by its IPv4-mapped IPv6 address `::ffff:a.b.c.d`
//! (RoCEv2 Annex A17.4.5.1, unchecked section number).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A GID: 16 bytes in network order, as the GRH, address vectors, CM
/// paths and GID tables hold them.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid([u8; 16]);

impl Gid {
    /// The all-zero GID (an unused GID table entry, an unset path).
    pub const ZERO: Gid = Gid([0; 16]);

    pub const fn from_bytes(bytes: [u8; 16]) -> Gid {
        Gid(bytes)
    }

    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Whether this is an IPv4-mapped GID (`::ffff:a.b.c.d`), the RoCEv2
    /// GID of an IPv4 address.
    pub fn is_ipv4_mapped(&self) -> bool {
        Ipv6Addr::from(self.0).to_ipv4_mapped().is_some()
    }

    /// The IP address the GID stands for: IPv4 for an IPv4-mapped GID,
    /// IPv6 otherwise.
    pub fn to_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// The GID as the kernel's sysfs `gids/N` files and `ibv_devinfo`'s
    /// short form print it: eight groups of four hex digits, no `::`.
    pub fn to_sysfs_string(&self) -> String {
        let mut s = String::with_capacity(39);
        for (i, c) in self.0.chunks(2).enumerate() {
            if i > 0 {
                s.push(':');
            }
            s.push_str(&format!("{:02x}{:02x}", c[0], c[1]));
        }
        s
    }
}

impl From<[u8; 16]> for Gid {
    fn from(bytes: [u8; 16]) -> Gid {
        Gid(bytes)
    }
}

impl From<Gid> for [u8; 16] {
    fn from(gid: Gid) -> [u8; 16] {
        gid.0
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(ip: Ipv6Addr) -> Gid {
        Gid(ip.octets())
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => v4.into(),
            IpAddr::V6(v6) => v6.into(),
        }
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(gid: Gid) -> Ipv6Addr {
        Ipv6Addr::from(gid.0)
    }
}

/// IPv6 text form, as `ibv_devinfo -v` and the dissector print a GID
/// (`::ffff:127.0.0.1`, `fe80::1`).
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_maps_to_ffff_and_back() {
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let g = Gid::from(ip);
        assert_eq!(
            g.as_bytes(),
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2]
        );
        assert!(g.is_ipv4_mapped());
        assert_eq!(g.to_ip(), ip);
        assert_eq!(g.to_string(), "::ffff:127.0.0.2");
        assert_eq!(format!("{g:?}"), "Gid(::ffff:127.0.0.2)");
        assert_eq!(
            g.to_sysfs_string(),
            "0000:0000:0000:0000:0000:ffff:7f00:0002"
        );
    }

    #[test]
    fn ipv6_is_itself() {
        for s in ["fd99::1", "::1", "fe80::5054:ff:fe99:2"] {
            let ip: IpAddr = s.parse().unwrap();
            let g = Gid::from(ip);
            assert!(!g.is_ipv4_mapped());
            assert_eq!(g.to_ip(), ip);
            assert_eq!(g.to_string(), s);
        }
        let b = [7u8; 16];
        assert_eq!(<[u8; 16]>::from(Gid::from_bytes(b)), b);
        assert_eq!(Gid::default(), Gid::ZERO);
    }
}
