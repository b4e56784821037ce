//! The RDMA IP CM service: how librdmacm and the kernel's rdma_cm map an
//! IP port onto the IB CM. Facts from rdma-core's `librdmacm/rdma_cma.h`
//! (the port spaces and the ServiceID prefix) and the kernel's
//! `drivers/infiniband/core/cma.c` (the private data header), checked
//! against the golden capture `rping.pcap` (frame 1).
//!
//! A ServiceID is `0x0000_0000_0100_0000 | port_space << 16 | port`. The
//! REQ's (and SIDR_REQ's) private data starts with a 36-byte addressing
//! header, followed by the user's private data:
//!
//! ```text
//!  0 CM version (0x00)      1 IP version << 4      2 source port (be16)
//!  4 source address (16)   20 destination address (16)     36 user data
//! ```
//!
//! IPv4 addresses sit in the last 4 bytes of their 16 (the first 12 zero).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The prefix of every IP CM ServiceID (`RDMA_IB_IP_PS_MASK`'s fixed part).
pub const SERVICE_ID_PREFIX: u64 = 0x0000_0000_0100_0000;
/// Bytes of the addressing header.
pub const HEADER_LEN: usize = 36;
/// The header's version byte that Linux sends (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// User private data that fits in a REQ after the header.
pub const REQ_USER_DATA_LEN: usize = crate::mad::req::PRIVATE_DATA_LEN - HEADER_LEN;
/// User private data that fits in a SIDR_REQ after the header.
pub const SIDR_REQ_USER_DATA_LEN: usize = crate::mad::sidr::REQ_PRIVATE_DATA_LEN - HEADER_LEN;

/// librdmacm's port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// `RDMA_PS_TCP`: reliable connected (RC) services.
    Tcp,
    /// `RDMA_PS_UDP`: UD services, resolved with SIDR.
    Udp,
    /// `RDMA_PS_IB`: RC or UD, the QP type the user picks.
    Ib,
    /// Any other 16-bit value.
    Other(u16),
}

impl PortSpace {
    pub const fn code(self) -> u16 {
        match self {
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
            PortSpace::Other(c) => c,
        }
    }
    pub const fn from_code(c: u16) -> PortSpace {
        match c {
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            0x013f => PortSpace::Ib,
            c => PortSpace::Other(c),
        }
    }
}

/// The ServiceID of `port` in `ps`.
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    SERVICE_ID_PREFIX | (ps.code() as u64) << 16 | port as u64
}

/// The port space and port of an IP CM ServiceID, `None` if the ServiceID
/// is not one (the high 32 bits are not 0, or byte 4 is not 0x01).
pub const fn parse_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 || (sid >> 24) & 0xff != 0x01 {
        return None;
    }
    Some((PortSpace::from_code((sid >> 16) as u16), sid as u16))
}

/// Words for a ServiceID, for `rxe dissect`.
pub(crate) fn describe_service_id(sid: u64) -> Option<String> {
    let (ps, port) = parse_service_id(sid)?;
    let name = match ps {
        PortSpace::Tcp => "RDMA_PS_TCP".to_owned(),
        PortSpace::Udp => "RDMA_PS_UDP".to_owned(),
        PortSpace::Ib => "RDMA_PS_IB".to_owned(),
        PortSpace::Other(c) => format!("port space {c:#06x}"),
    };
    Some(format!("IP CM {name} port {port}"))
}

/// Why a private data header did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpCmError {
    #[error("IP CM header: {len} bytes of private data, {HEADER_LEN} needed")]
    Truncated { len: usize },
    #[error("IP CM header: version {0:#04x}, only 0x00 is known")]
    BadCmaVersion(u8),
    #[error("IP CM header: IP version {0}, 4 or 6 expected")]
    BadIpVersion(u8),
    #[error("IP CM header: the source and destination are different IP versions")]
    MixedVersions,
    #[error("IP CM header: {len} bytes of user private data, at most {max} fit")]
    UserDataTooLong { len: usize, max: usize },
}

/// The addressing header of an IP CM REQ or SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpCmHeader {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn addr_from(version: u8, b: &[u8]) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    if version == 4 {
        IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

impl IpCmHeader {
    /// Reads the header from the start of a REQ's or SIDR_REQ's private data.
    pub fn parse(private_data: &[u8]) -> Result<IpCmHeader, IpCmError> {
        if private_data.len() < HEADER_LEN {
            return Err(IpCmError::Truncated {
                len: private_data.len(),
            });
        }
        if private_data[0] != CMA_VERSION {
            return Err(IpCmError::BadCmaVersion(private_data[0]));
        }
        let version = private_data[1] >> 4;
        if version != 4 && version != 6 {
            return Err(IpCmError::BadIpVersion(version));
        }
        Ok(IpCmHeader {
            src_port: u16::from_be_bytes([private_data[2], private_data[3]]),
            src: addr_from(version, &private_data[4..20]),
            dst: addr_from(version, &private_data[20..36]),
        })
    }

    /// Writes the header into the first 36 bytes of `out` (a shorter
    /// buffer is refused).
    pub fn emit(&self, out: &mut [u8]) -> Result<(), IpCmError> {
        let version = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(IpCmError::MixedVersions),
        };
        let Some(o) = out.get_mut(..HEADER_LEN) else {
            return Err(IpCmError::Truncated { len: out.len() });
        };
        o[0] = CMA_VERSION;
        o[1] = version << 4;
        o[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        o[4..20].copy_from_slice(&addr16(self.src));
        o[20..36].copy_from_slice(&addr16(self.dst));
        Ok(())
    }

    /// The header followed by the user's private data, as a REQ's (or,
    /// with `field_len` 216, a SIDR_REQ's) private data field.
    pub fn with_user_data(&self, user: &[u8], field_len: usize) -> Result<Vec<u8>, IpCmError> {
        let max = field_len.saturating_sub(HEADER_LEN);
        if user.len() > max {
            return Err(IpCmError::UserDataTooLong {
                len: user.len(),
                max,
            });
        }
        let mut v = vec![0u8; field_len.max(HEADER_LEN)];
        self.emit(&mut v)?;
        v[HEADER_LEN..HEADER_LEN + user.len()].copy_from_slice(user);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids() {
        // rping's default port 7174 in RDMA_PS_TCP, as the kernel sent it (rping.pcap frame 1).
        assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(parse_service_id(0x0106_1c06), Some((PortSpace::Tcp, 7174)));
        assert_eq!(service_id(PortSpace::Udp, 7174), 0x0111_1c06);
        assert_eq!(service_id(PortSpace::Ib, 1), 0x013f_0001);
        assert_eq!(parse_service_id(0x1_0106_1c06), None);
        assert_eq!(parse_service_id(0x0206_1c06), None);
        assert_eq!(
            describe_service_id(0x0106_1c06).unwrap(),
            "IP CM RDMA_PS_TCP port 7174"
        );
    }

    #[test]
    fn header_from_the_capture() {
        // The first 36 bytes of rping.pcap frame 1's REQ private data.
        let mut b = [0u8; 36];
        b[..4].copy_from_slice(&[0x00, 0x40, 0x97, 0x44]);
        b[16..20].copy_from_slice(&[10, 99, 0, 3]);
        b[32..36].copy_from_slice(&[10, 99, 0, 2]);
        let h = IpCmHeader::parse(&b).unwrap();
        assert_eq!(h.src_port, 0x9744);
        assert_eq!(h.src, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 3)));
        assert_eq!(h.dst, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)));
        let mut out = [0xaau8; 36];
        h.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn header_refusals_and_ipv6() {
        assert_eq!(
            IpCmHeader::parse(&[0; 35]),
            Err(IpCmError::Truncated { len: 35 })
        );
        let mut b = [0u8; 36];
        b[1] = 0x50;
        assert_eq!(IpCmHeader::parse(&b), Err(IpCmError::BadIpVersion(5)));
        b[0] = 1;
        assert_eq!(IpCmHeader::parse(&b), Err(IpCmError::BadCmaVersion(1)));
        let h = IpCmHeader {
            src_port: 1,
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
        };
        let v = h.with_user_data(b"hello", 92).unwrap();
        assert_eq!(v.len(), 92);
        assert_eq!(v[1], 0x60);
        assert_eq!(&v[36..41], b"hello");
        assert_eq!(IpCmHeader::parse(&v).unwrap(), h);
        assert_eq!(
            h.with_user_data(&[0; 57], 92),
            Err(IpCmError::UserDataTooLong { len: 57, max: 56 })
        );
        let mixed = IpCmHeader {
            src_port: 1,
            src: "10.0.0.1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
        };
        assert_eq!(mixed.with_user_data(&[], 92), Err(IpCmError::MixedVersions));
    }
}
