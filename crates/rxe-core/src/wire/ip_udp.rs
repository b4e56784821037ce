//! The IPv4 or IPv6 and UDP headers in front of a RoCEv2 packet, built in
//! one place: the frame builder (`build::emit_roce_v2`) writes them in front
//! of the transport, and rxe-net rebuilds the headers the kernel writes or
//! wrote to compute and check the ICRC, which covers them (RoCEv2 Annex
//! A17.3.3). The header checksums are etherparse's.

use core::net::IpAddr;

use etherparse::{IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, UdpHeader};

use super::error::{Error, ErrorKind, Layer, Result};
use super::frame::ROCE_V2_PORT;

/// The longest IP and UDP headers in front of a RoCEv2 packet: IPv6 (40
/// bytes) and UDP (8); IPv4 without options takes 20.
pub const MAX_HEADER_LEN: usize = Ipv6Header::LEN + UdpHeader::LEN;

/// The IP and UDP fields of a RoCEv2 packet that the transport does not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceV2Ip {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// UDP source port: an entropy field for ECMP (kernel rxe: 0xC000 plus a
    /// hash of the QPN); receivers accept any.
    pub src_port: u16,
    /// UDP destination port: 4791 for RoCEv2 (IANA; RoCEv2 Annex A17.2.2).
    pub dst_port: u16,
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv6 flow label (20 bits); ignored for IPv4.
    pub flow_label: u32,
    /// IPv4 Identification; ignored for IPv6. The ICRC covers it (RoCEv2
    /// Annex A17.3.3 masks TOS, TTL and checksum, not the ID), so it must be
    /// the value the kernel writes.
    pub ipv4_id: u16,
    /// IPv4 Don't Fragment; ignored for IPv6.
    pub dont_fragment: bool,
    /// Compute the UDP checksum over IPv6 (`build::emit_roce_v2` only; the
    /// headers alone carry 0). RoCEv2 senders such as kernel rxe send 0,
    /// which RFC 6936 allows only for tunnels and some stacks drop; the ICRC
    /// masks the field, so either choice interoperates.
    pub ipv6_udp_checksum: bool,
}

impl RoceV2Ip {
    /// Defaults as an unconnected Linux UDP socket with DF sends them: TTL
    /// 64, no DSCP, destination port 4791 and (for IPv4) ID 0 with DF set.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16) -> Self {
        RoceV2Ip {
            src,
            dst,
            src_port,
            dst_port: ROCE_V2_PORT,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            ipv4_id: 0,
            dont_fragment: true,
            ipv6_udp_checksum: false,
        }
    }

    /// Bytes of IP and UDP header in front of the BTH.
    pub fn header_len(&self) -> usize {
        self.ip_len() + UdpHeader::LEN
    }

    /// Bytes of IP header: 20 (IPv4 without options) or 40 (IPv6).
    pub fn ip_len(&self) -> usize {
        match self.src {
            IpAddr::V4(_) => Ipv4Header::MIN_LEN,
            IpAddr::V6(_) => Ipv6Header::LEN,
        }
    }

    /// Writes the IP header and the UDP header (checksum 0) of a datagram
    /// whose UDP payload (BTH .. ICRC) is `udp_payload_len` bytes into the
    /// start of `buf`; returns [`header_len`](Self::header_len).
    pub fn emit(&self, udp_payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let hlen = self.header_len();
        if buf.len() < hlen {
            return Err(Error::truncated(Layer::Udp, hlen, buf.len()));
        }
        let udp_len = udp_payload_len
            .checked_add(UdpHeader::LEN)
            .and_then(|n| u16::try_from(n).ok())
            .ok_or(Error::new(
                Layer::Udp,
                ErrorKind::Malformed("packet longer than UDP allows"),
            ))?;
        let ip_len = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = Ipv4Header::new(
                    udp_len,
                    self.hop_limit,
                    IpNumber::UDP,
                    s.octets(),
                    d.octets(),
                )
                .map_err(|_| {
                    Error::new(
                        Layer::Ipv4,
                        ErrorKind::Malformed("packet too long for IPv4"),
                    )
                })?;
                h.identification = self.ipv4_id;
                h.dont_fragment = self.dont_fragment;
                // Both always fit: 6 and 2 bits of one byte.
                h.dscp = etherparse::IpDscp::try_new(self.traffic_class >> 2).unwrap_or_default();
                h.ecn = etherparse::IpEcn::try_new(self.traffic_class & 3).unwrap_or_default();
                h.header_checksum = h.calc_header_checksum();
                let bytes = h.to_bytes();
                buf[..bytes.len()].copy_from_slice(&bytes);
                bytes.len()
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let h = Ipv6Header {
                    traffic_class: self.traffic_class,
                    flow_label: Ipv6FlowLabel::try_new(self.flow_label & 0xf_ffff)
                        .unwrap_or_default(),
                    payload_length: udp_len,
                    next_header: IpNumber::UDP,
                    hop_limit: self.hop_limit,
                    source: s.octets(),
                    destination: d.octets(),
                };
                buf[..Ipv6Header::LEN].copy_from_slice(&h.to_bytes());
                Ipv6Header::LEN
            }
            _ => {
                return Err(Error::new(
                    Layer::Ipv4,
                    ErrorKind::Malformed("source and destination differ in IP version"),
                ))
            }
        };
        let udp = UdpHeader {
            source_port: self.src_port,
            destination_port: self.dst_port,
            length: udp_len,
            checksum: 0,
        };
        buf[ip_len..hlen].copy_from_slice(&udp.to_bytes());
        Ok(hlen)
    }
}

/// The UDP checksum (RFC 768; the IPv6 pseudo-header of RFC 8200 section
/// 8.1) of a datagram, from its IPv4 (20 bytes) or IPv6 (40 bytes) header,
/// its UDP header (the checksum field is not read) and its payload. A sum
/// of zero comes out as 0xFFFF, as RFC 768 sends it. `None` if `ip_header`
/// is neither length or the payload is longer than a UDP length allows.
pub fn udp_checksum(ip_header: &[u8], udp_header: &[u8; 8], payload: &[u8]) -> Option<u16> {
    let udp = UdpHeader::from_bytes(*udp_header);
    match ip_header.len() {
        Ipv4Header::MIN_LEN => {
            let src = ip_header[12..16].try_into().ok()?;
            let dst = ip_header[16..20].try_into().ok()?;
            udp.calc_checksum_ipv4_raw(src, dst, payload).ok()
        }
        Ipv6Header::LEN => {
            let src = ip_header[8..24].try_into().ok()?;
            let dst = ip_header[24..40].try_into().ok()?;
            udp.calc_checksum_ipv6_raw(src, dst, payload).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    /// An independent RFC 1071 sum, to check etherparse's results against.
    pub(crate) fn ones_complement_sum(parts: &[&[u8]]) -> u16 {
        let mut sum: u64 = 0;
        for p in parts {
            for w in p.chunks(2) {
                sum += u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
            }
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    fn v4() -> RoceV2Ip {
        RoceV2Ip::new(
            IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 99, 0, 3)),
            0xc165,
        )
    }

    #[test]
    fn ipv4_headers_of_a_kernel_rxe_ack() {
        // Frame 5 of captures/rc_pingpong.pcap: an ACK with ID 0x5e4d, DF.
        let ip = RoceV2Ip {
            ipv4_id: 0x5e4d,
            ..v4()
        };
        let mut buf = [0u8; 28];
        assert_eq!(ip.emit(20, &mut buf), Ok(28));
        assert_eq!(
            buf[..],
            crate::wire::icrc::tests::hex(crate::wire::icrc::tests::ACK)[..28]
        );
        let clear = RoceV2Ip {
            dont_fragment: false,
            traffic_class: 0xb9,
            ..ip
        };
        clear.emit(20, &mut buf).unwrap();
        assert_eq!((buf[1], buf[6]), (0xb9, 0));
        assert_eq!(ones_complement_sum(&[&buf[..20]]), 0xffff);
    }

    #[test]
    fn ipv6_headers() {
        let ip = RoceV2Ip {
            traffic_class: 0x20,
            flow_label: 0xfff_abcde,
            hop_limit: 5,
            dst_port: 1000,
            ..RoceV2Ip::new(
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                "fd00::2".parse().unwrap(),
                4791,
            )
        };
        assert_eq!((ip.ip_len(), ip.header_len()), (40, MAX_HEADER_LEN));
        let mut buf = [0u8; 48];
        assert_eq!(ip.emit(100, &mut buf), Ok(48));
        assert_eq!(&buf[..8], &[0x62, 0x0a, 0xbc, 0xde, 0, 108, 17, 5]);
        assert_eq!(&buf[40..], &[0x12, 0xb7, 0x03, 0xe8, 0, 108, 0, 0]);
    }

    #[test]
    fn refusals() {
        let mut buf = [0u8; 48];
        assert!(v4().emit(65_507, &mut buf).is_ok());
        assert!(v4().emit(65_508, &mut buf).is_err());
        assert!(v4().emit(usize::MAX, &mut buf).is_err());
        assert!(v4().emit(20, &mut buf[..27]).is_err());
        let mixed = RoceV2Ip {
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..v4()
        };
        assert!(mixed.emit(20, &mut buf).is_err());
    }

    #[test]
    fn udp_checksums_sum_to_all_ones() {
        let payload = [1u8, 2, 3, 4, 5];
        let mut buf = [0u8; 48];
        let n = v4().emit(payload.len(), &mut buf).unwrap();
        let udp: [u8; 8] = buf[20..28].try_into().unwrap();
        let c = udp_checksum(&buf[..20], &udp, &payload).unwrap();
        let mut with = udp;
        with[6..8].copy_from_slice(&c.to_be_bytes());
        let pseudo = [10, 99, 0, 2, 10, 99, 0, 3, 0, 17, 0, 13];
        assert_eq!(ones_complement_sum(&[&pseudo, &with, &payload]), 0xffff);
        assert_eq!(n, 28);

        let ip6 = RoceV2Ip::new("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 1000);
        ip6.emit(payload.len(), &mut buf).unwrap();
        let udp: [u8; 8] = buf[40..48].try_into().unwrap();
        let c = udp_checksum(&buf[..40], &udp, &payload).unwrap();
        let mut with = udp;
        with[6..8].copy_from_slice(&c.to_be_bytes());
        let mut pseudo = buf[8..40].to_vec();
        pseudo.extend_from_slice(&[0, 0, 0, 13, 0, 0, 0, 17]);
        assert_eq!(ones_complement_sum(&[&pseudo, &with, &payload]), 0xffff);

        assert_eq!(udp_checksum(&buf[..30], &udp, &payload), None);
    }
}
