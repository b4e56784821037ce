//! Finding the RoCE packet in a captured or received frame: link layer
//! (Ethernet with VLAN tags, Linux cooked SLL/SLL2, raw IP, InfiniBand),
//! network layer, and the encapsulation that carries the BTH:
//!
//! - RoCEv2 (Annex A17): IPv4 or IPv6, UDP destination port 4791, BTH;
//! - RoCEv1 (Annex A16): Ethertype 0x8915, GRH, BTH;
//! - native InfiniBand: LRH, optional GRH, BTH, ICRC, VCRC.
//!
//! IP and UDP parsing goes through etherparse; the IBA headers through this
//! module's siblings. Nothing here allocates.

use core::net::IpAddr;

use etherparse::{Ipv4Header, Ipv6Header, UdpHeader};

use super::error::{need, Error, ErrorKind, Layer, Result};
use super::grh::{Grh, GrhRepr};
use super::icrc::IcrcScope;
use super::lrh::{Lnh, Lrh, LrhRepr};
use super::vcrc;

/// The IANA UDP port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;
/// The Ethertype of RoCEv1.
pub const ETHERTYPE_ROCE_V1: u16 = 0x8915;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// How a frame begins: the LINKTYPE values of pcap and pcapng
/// (<https://www.tcpdump.org/linktypes.html>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II (1): how RoCEv2 and RoCEv1 are captured on a NIC.
    Ethernet,
    /// Raw IP, version from the first nibble (101; also the old DLT_RAW
    /// values 12 and 14 found in some files).
    RawIp,
    /// Raw IPv4 only (228).
    Ipv4,
    /// Raw IPv6 only (229).
    Ipv6,
    /// Linux cooked capture v1 (113): `tcpdump -i any`.
    LinuxSll,
    /// Linux cooked capture v2 (276): `tcpdump -i any` on newer libpcap.
    LinuxSll2,
    /// InfiniBand (247): native IB packets starting with the LRH.
    Infiniband,
    /// Any other link type, by number; never one of the numbers above.
    Other(u32),
}

impl LinkType {
    /// Every link type `decode` understands (all but `Other`).
    pub const DECODED: [LinkType; 7] = [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Infiniband,
    ];

    /// The link type for a LINKTYPE (or DLT) number.
    pub const fn from_number(n: u32) -> LinkType {
        match n {
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::RawIp,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            247 => LinkType::Infiniband,
            n => LinkType::Other(n),
        }
    }

    /// The LINKTYPE number written to a file (raw IP is written as 101).
    pub const fn number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Infiniband => 247,
            LinkType::Other(n) => n,
        }
    }
}

impl From<u32> for LinkType {
    fn from(n: u32) -> LinkType {
        LinkType::from_number(n)
    }
}

impl From<LinkType> for u32 {
    fn from(link: LinkType) -> u32 {
        link.number()
    }
}

/// Which encapsulation carried the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encapsulation {
    RoceV2Ipv4,
    RoceV2Ipv6,
    RoceV1,
    Infiniband,
}

impl Encapsulation {
    pub const fn name(self) -> &'static str {
        match self {
            Encapsulation::RoceV2Ipv4 => "RoCEv2/IPv4",
            Encapsulation::RoceV2Ipv6 => "RoCEv2/IPv6",
            Encapsulation::RoceV1 => "RoCEv1",
            Encapsulation::Infiniband => "InfiniBand",
        }
    }
}

/// The layers of a RoCE frame, each as the bytes it occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    pub encapsulation: Encapsulation,
    /// The Ethernet header including any VLAN tags, or the SLL/SLL2 header.
    pub link: Option<(LinkType, &'a [u8])>,
    /// The IPv4 header (with options) or IPv6 header.
    pub ip: Option<&'a [u8]>,
    pub udp: Option<&'a [u8]>,
    pub lrh: Option<&'a [u8]>,
    pub grh: Option<&'a [u8]>,
    /// From the start of the BTH through the ICRC.
    pub transport: &'a [u8],
    /// For native IB: the whole packet, LRH through VCRC.
    pub ib_packet: Option<&'a [u8]>,
}

impl<'a> RoceFrame<'a> {
    /// What the ICRC covers before the BTH.
    pub fn icrc_scope(&self) -> IcrcScope<'a> {
        match (self.ip, self.udp, self.grh, self.lrh) {
            (Some(ip_header), Some(udp_header), _, _) => IcrcScope::RoceV2 {
                ip_header,
                udp_header,
            },
            (_, _, Some(grh), _) => IcrcScope::Grh { grh },
            (_, _, _, Some(lrh)) => IcrcScope::IbLocal { lrh },
            // Unreachable by construction (decode sets one of the above);
            // an empty LRH makes the ICRC check fail rather than pass.
            _ => IcrcScope::IbLocal { lrh: &[] },
        }
    }

    /// Source and destination addresses: IP for RoCEv2, GIDs for RoCEv1 and
    /// IB with a GRH.
    pub fn addresses(&self) -> Option<(IpAddr, IpAddr)> {
        if let Some(ip) = self.ip {
            return match ip[0] >> 4 {
                4 => Some((
                    IpAddr::from([ip[12], ip[13], ip[14], ip[15]]),
                    IpAddr::from([ip[16], ip[17], ip[18], ip[19]]),
                )),
                _ => {
                    let mut s = [0u8; 16];
                    let mut d = [0u8; 16];
                    s.copy_from_slice(&ip[8..24]);
                    d.copy_from_slice(&ip[24..40]);
                    Some((IpAddr::from(s), IpAddr::from(d)))
                }
            };
        }
        let g = GrhRepr::parse(&Grh::new_unchecked(self.grh?)).ok()?;
        Some((IpAddr::V6(g.sgid.into()), IpAddr::V6(g.dgid.into())))
    }

    /// Source and destination LIDs of a native IB packet.
    pub fn lids(&self) -> Option<(u16, u16)> {
        let l = LrhRepr::parse(&Lrh::new_unchecked(self.lrh?)).ok()?;
        Some((l.slid, l.dlid))
    }
}

/// Finds the RoCE packet in `frame`. `Ok(None)` means the frame carries no
/// RoCE (another protocol, or a UDP port other than 4791); an error means
/// it was on its way to being RoCE and is malformed.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Option<RoceFrame<'_>>> {
    let mut out = RoceFrame {
        encapsulation: Encapsulation::RoceV2Ipv4,
        link: None,
        ip: None,
        udp: None,
        lrh: None,
        grh: None,
        transport: &[],
        ib_packet: None,
    };
    let (ethertype, rest) = match link {
        LinkType::Other(_) => return Ok(None),
        LinkType::Infiniband => return decode_ib(frame, out).map(Some),
        LinkType::RawIp => match frame.first().map(|b| b >> 4) {
            Some(4) => (ETHERTYPE_IPV4, frame),
            Some(6) => (ETHERTYPE_IPV6, frame),
            _ => return Ok(None),
        },
        LinkType::Ipv4 => (ETHERTYPE_IPV4, frame),
        LinkType::Ipv6 => (ETHERTYPE_IPV6, frame),
        LinkType::Ethernet => {
            let (ethertype, hlen) = ethernet(frame)?;
            out.link = Some((link, &frame[..hlen]));
            (ethertype, &frame[hlen..])
        }
        LinkType::LinuxSll => {
            // 16 bytes: packet type, ARPHRD, address length, 8 address bytes, protocol.
            need(Layer::LinuxSll, frame, 16)?;
            out.link = Some((link, &frame[..16]));
            (u16::from_be_bytes([frame[14], frame[15]]), &frame[16..])
        }
        LinkType::LinuxSll2 => {
            // 20 bytes, protocol first.
            need(Layer::LinuxSll2, frame, 20)?;
            out.link = Some((link, &frame[..20]));
            (u16::from_be_bytes([frame[0], frame[1]]), &frame[20..])
        }
    };
    match ethertype {
        ETHERTYPE_IPV4 => decode_ipv4(rest, out),
        ETHERTYPE_IPV6 => decode_ipv6(rest, out),
        ETHERTYPE_ROCE_V1 => decode_roce_v1(rest, out).map(Some),
        _ => Ok(None),
    }
}

/// Ethernet II with up to two VLAN tags; returns the inner Ethertype and
/// the header length.
fn ethernet(frame: &[u8]) -> Result<(u16, usize)> {
    need(Layer::Ethernet, frame, 14)?;
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    for _ in 0..2 {
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            break;
        }
        at += 4;
        need(Layer::Ethernet, frame, at + 2)?;
        ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    }
    Ok((ethertype, at + 2))
}

fn etherparse_err(layer: Layer, what: &'static str) -> Error {
    Error::new(layer, ErrorKind::Malformed(what))
}

fn decode_ipv4<'a>(buf: &'a [u8], mut out: RoceFrame<'a>) -> Result<Option<RoceFrame<'a>>> {
    let (ip, _) = Ipv4Header::from_slice(buf).map_err(|e| match e {
        etherparse::err::ipv4::HeaderSliceError::Len(l) => {
            Error::truncated(Layer::Ipv4, l.required_len, l.len)
        }
        etherparse::err::ipv4::HeaderSliceError::Content(_) => {
            etherparse_err(Layer::Ipv4, "bad IPv4 header")
        }
    })?;
    if ip.protocol != etherparse::IpNumber::UDP {
        return Ok(None);
    }
    let hlen = ip.header_len();
    let total = usize::from(ip.total_len);
    if total < hlen {
        return Err(Error::new(
            Layer::Ipv4,
            ErrorKind::LengthMismatch {
                field: "Total Length",
                declared: total,
                actual: hlen,
            },
        ));
    }
    // Ethernet may pad short frames; the IP total length bounds the packet.
    need(Layer::Ipv4, buf, total)?;
    let Some(udp) = udp_to_roce(&buf[hlen..total])? else {
        return Ok(None);
    };
    if ip.more_fragments || ip.fragment_offset.value() != 0 {
        // RoCEv2 is sent with DF; a fragment cannot be checked or delivered.
        return Err(etherparse_err(Layer::Ipv4, "IP fragment"));
    }
    out.encapsulation = Encapsulation::RoceV2Ipv4;
    out.ip = Some(&buf[..hlen]);
    out.udp = Some(&udp[..8]);
    out.transport = &udp[8..];
    Ok(Some(out))
}

fn decode_ipv6<'a>(buf: &'a [u8], mut out: RoceFrame<'a>) -> Result<Option<RoceFrame<'a>>> {
    let (ip, _) = Ipv6Header::from_slice(buf).map_err(|e| match e {
        etherparse::err::ipv6::HeaderSliceError::Len(l) => {
            Error::truncated(Layer::Ipv6, l.required_len, l.len)
        }
        etherparse::err::ipv6::HeaderSliceError::Content(_) => {
            etherparse_err(Layer::Ipv6, "bad IPv6 header")
        }
    })?;
    // RoCEv2 puts UDP right after the IPv6 header; extension headers are not
    // used by any RoCE sender.
    if ip.next_header != etherparse::IpNumber::UDP {
        return Ok(None);
    }
    let total = Ipv6Header::LEN + usize::from(ip.payload_length);
    need(Layer::Ipv6, buf, total)?;
    let Some(udp) = udp_to_roce(&buf[Ipv6Header::LEN..total])? else {
        return Ok(None);
    };
    out.encapsulation = Encapsulation::RoceV2Ipv6;
    out.ip = Some(&buf[..Ipv6Header::LEN]);
    out.udp = Some(&udp[..8]);
    out.transport = &udp[8..];
    Ok(Some(out))
}

/// The UDP datagram (header included, bounded by the UDP length) if it goes
/// to the RoCEv2 port. Any source port is accepted: it is an entropy field.
fn udp_to_roce(buf: &[u8]) -> Result<Option<&[u8]>> {
    let (udp, _) = UdpHeader::from_slice(buf)
        .map_err(|l| Error::truncated(Layer::Udp, l.required_len, l.len))?;
    if udp.destination_port != ROCE_V2_PORT {
        return Ok(None);
    }
    let len = usize::from(udp.length);
    if len < 8 {
        return Err(Error::new(
            Layer::Udp,
            ErrorKind::LengthMismatch {
                field: "Length",
                declared: len,
                actual: 8,
            },
        ));
    }
    need(Layer::Udp, buf, len)?;
    Ok(Some(&buf[..len]))
}

fn decode_roce_v1<'a>(buf: &'a [u8], mut out: RoceFrame<'a>) -> Result<RoceFrame<'a>> {
    let grh = GrhRepr::parse(&Grh::new_checked(buf)?)?;
    if grh.next_header != super::grh::NXT_HDR_IBA {
        return Err(Error::bad_field(
            Layer::Grh,
            "NxtHdr",
            u64::from(grh.next_header),
        ));
    }
    let end = super::grh::HEADER_LEN + usize::from(grh.payload_len);
    need(Layer::Grh, buf, end)?;
    out.encapsulation = Encapsulation::RoceV1;
    out.grh = Some(&buf[..super::grh::HEADER_LEN]);
    out.transport = &buf[super::grh::HEADER_LEN..end];
    Ok(out)
}

fn decode_ib<'a>(buf: &'a [u8], mut out: RoceFrame<'a>) -> Result<RoceFrame<'a>> {
    let lrh = LrhRepr::parse(&Lrh::new_checked(buf)?)?;
    // PktLen counts 4-byte words from the LRH through the ICRC (IBTA 7.7.8).
    let end = usize::from(lrh.pkt_len_words) * 4;
    need(Layer::Lrh, buf, end + vcrc::LEN)?;
    let mut at = super::lrh::HEADER_LEN;
    match lrh.lnh {
        Lnh::IbaLocal => {}
        Lnh::IbaGlobal => {
            let grh = GrhRepr::parse(&Grh::new_checked(&buf[at..])?)?;
            if grh.next_header != super::grh::NXT_HDR_IBA {
                return Err(Error::bad_field(
                    Layer::Grh,
                    "NxtHdr",
                    u64::from(grh.next_header),
                ));
            }
            out.grh = Some(&buf[at..at + super::grh::HEADER_LEN]);
            at += super::grh::HEADER_LEN;
        }
        other => return Err(Error::bad_field(Layer::Lrh, "LNH", other as u64)),
    }
    if end < at {
        return Err(Error::new(
            Layer::Lrh,
            ErrorKind::LengthMismatch {
                field: "PktLen",
                declared: end,
                actual: at,
            },
        ));
    }
    out.encapsulation = Encapsulation::Infiniband;
    out.lrh = Some(&buf[..super::lrh::HEADER_LEN]);
    out.transport = &buf[at..end];
    out.ib_packet = Some(&buf[..end + vcrc::LEN]);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::build::tests::{build, Built, Encap, ENCAPS, V4_DST, V4_SRC, V6_DST, V6_SRC};
    use crate::wire::opcode::Opcode;
    use crate::wire::packet::tests::{arb_packet, sample_packet};
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// The decoded link types plus one that is not.
    pub(crate) const ALL_LINKS: [LinkType; 8] = {
        let d = LinkType::DECODED;
        [
            d[0],
            d[1],
            d[2],
            d[3],
            d[4],
            d[5],
            d[6],
            LinkType::Other(105),
        ]
    };

    fn ethertype_of(b: &Built) -> u16 {
        u16::from_be_bytes([b.bytes[12], b.bytes[13]])
    }

    /// The network-layer bytes (IP packet, or GRH onwards for RoCEv1).
    fn after_ethernet(b: &Built) -> &[u8] {
        match b.encap {
            Encap::V4Raw => &b.bytes,
            _ => &b.bytes[14..],
        }
    }

    /// `b` as it would appear on every link type that can carry it.
    pub(crate) fn on_every_link(b: &Built) -> Vec<(LinkType, Vec<u8>)> {
        if matches!(b.encap, Encap::IbLocal | Encap::IbGlobal) {
            return vec![(LinkType::Infiniband, b.bytes.clone())];
        }
        let ethertype = match b.encap {
            Encap::V4Raw => ETHERTYPE_IPV4,
            _ => ethertype_of(b),
        };
        let net = after_ethernet(b);
        let mut out = Vec::new();
        let mut eth = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        eth.extend(ethertype.to_be_bytes());
        eth.extend(net);
        out.push((LinkType::Ethernet, eth.clone()));
        // One 802.1Q tag, then 802.1ad + 802.1Q.
        let mut vlan = eth.clone();
        vlan.splice(12..12, [0x81, 0x00, 0x20, 0x05]);
        out.push((LinkType::Ethernet, vlan.clone()));
        let mut qinq = vlan;
        qinq.splice(12..12, [0x88, 0xa8, 0x00, 0x64]);
        out.push((LinkType::Ethernet, qinq));
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
        sll.extend(ethertype.to_be_bytes());
        sll.extend(net);
        out.push((LinkType::LinuxSll, sll));
        let mut sll2 = ethertype.to_be_bytes().to_vec();
        sll2.extend([0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
        sll2.truncate(20);
        sll2.extend(net);
        out.push((LinkType::LinuxSll2, sll2));
        match ethertype {
            ETHERTYPE_IPV4 => {
                out.push((LinkType::RawIp, net.to_vec()));
                out.push((LinkType::Ipv4, net.to_vec()));
            }
            ETHERTYPE_IPV6 => {
                out.push((LinkType::RawIp, net.to_vec()));
                out.push((LinkType::Ipv6, net.to_vec()));
            }
            _ => {}
        }
        out
    }

    fn send_only(encap: Encap) -> Built {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 10);
        build(encap, &t, &p)
    }

    fn transport_of(b: &Built) -> &[u8] {
        &b.bytes[b.bth..b.end]
    }

    #[test]
    fn every_link_type_finds_the_transport() {
        for e in ENCAPS {
            let b = send_only(e);
            for (link, f) in on_every_link(&b) {
                let r = decode(link, &f).unwrap().unwrap();
                assert_eq!(r.transport, transport_of(&b), "{e:?} on {link:?}");
                let want_link = matches!(
                    link,
                    LinkType::Ethernet | LinkType::LinuxSll | LinkType::LinuxSll2
                );
                assert_eq!(r.link.is_some(), want_link);
                if let Some((l, h)) = r.link {
                    assert_eq!(l, link);
                    assert_eq!(f.len() - h.len(), after_ethernet(&b).len());
                }
                let v4 = (IpAddr::from(V4_SRC), IpAddr::from(V4_DST));
                let v6 = (IpAddr::from(V6_SRC), IpAddr::from(V6_DST));
                match e {
                    Encap::V4 | Encap::V4Raw => {
                        assert_eq!(r.encapsulation, Encapsulation::RoceV2Ipv4);
                        assert_eq!(r.addresses(), Some(v4));
                        assert_eq!(r.ip.unwrap().len(), 20);
                        assert_eq!(r.udp.unwrap().len(), 8);
                    }
                    Encap::V6 | Encap::V6Csum => {
                        assert_eq!(r.encapsulation, Encapsulation::RoceV2Ipv6);
                        assert_eq!(r.addresses(), Some(v6));
                        assert_eq!(r.ip.unwrap().len(), 40);
                    }
                    Encap::V1 => {
                        assert_eq!(r.encapsulation, Encapsulation::RoceV1);
                        assert_eq!(r.addresses(), Some(v6));
                        assert_eq!(r.grh.unwrap().len(), 40);
                    }
                    Encap::IbLocal => {
                        assert_eq!(r.encapsulation, Encapsulation::Infiniband);
                        assert_eq!(r.addresses(), None);
                        assert_eq!(r.lids(), Some((1, 2)));
                        assert_eq!(r.ib_packet, Some(&f[..]));
                    }
                    Encap::IbGlobal => {
                        assert_eq!(r.addresses(), Some(v6));
                        assert_eq!(r.lids(), Some((1, 2)));
                        assert!(r.grh.is_some());
                    }
                }
                crate::wire::icrc::verify(&r.icrc_scope(), r.transport).unwrap();
            }
        }
    }

    #[test]
    fn pcap_link_numbers_round_trip() {
        for l in ALL_LINKS {
            assert_eq!(LinkType::from_number(l.number()), l);
        }
        assert_eq!(LinkType::from_number(12), LinkType::RawIp);
        assert_eq!(LinkType::from_number(14), LinkType::RawIp);
        assert_eq!(LinkType::from_number(105), LinkType::Other(105));
        // A link type we do not decode is never RoCE.
        let b = send_only(Encap::V4);
        assert_eq!(decode(LinkType::Other(105), &b.bytes), Ok(None));
    }

    #[test]
    fn ethernet_padding_is_not_transport() {
        let (t, p) = sample_packet(Opcode::RC_ACKNOWLEDGE.info().unwrap(), 0);
        for e in [Encap::V4, Encap::V6, Encap::V1] {
            let mut b = build(e, &t, &p);
            let want = transport_of(&b).to_vec();
            b.bytes.extend([0u8; 18]);
            let r = decode(LinkType::Ethernet, &b.bytes).unwrap().unwrap();
            assert_eq!(r.transport, &want[..], "{e:?}");
        }
    }

    #[test]
    fn other_protocols_are_not_roce() {
        let b = send_only(Encap::V4);
        // Another UDP destination port.
        let mut f = b.bytes.clone();
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(decode(LinkType::Ethernet, &f), Ok(None));
        // But any source port.
        let mut f = b.bytes.clone();
        f[34..36].copy_from_slice(&4791u16.to_be_bytes());
        assert!(decode(LinkType::Ethernet, &f).unwrap().is_some());
        // TCP.
        let mut f = b.bytes.clone();
        f[23] = 6;
        assert_eq!(decode(LinkType::Ethernet, &f), Ok(None));
        // ARP.
        let mut f = b.bytes.clone();
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(decode(LinkType::Ethernet, &f), Ok(None));
        // Raw IP that is neither 4 nor 6, and an empty frame.
        assert_eq!(decode(LinkType::RawIp, &[0x50; 40]), Ok(None));
        assert_eq!(decode(LinkType::RawIp, &[]), Ok(None));
        // IPv6 carrying TCP.
        let b6 = send_only(Encap::V6);
        let mut f = b6.bytes.clone();
        f[20] = 6;
        assert_eq!(decode(LinkType::Ethernet, &f), Ok(None));
    }

    #[test]
    fn truncated_link_headers() {
        let b = send_only(Encap::V4);
        for n in 0..14 {
            assert_eq!(
                decode(LinkType::Ethernet, &b.bytes[..n]),
                Err(Error::truncated(Layer::Ethernet, 14, n))
            );
        }
        // A VLAN tag with nothing after it.
        let mut f = b.bytes[..14].to_vec();
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f.extend([0, 5]);
        assert_eq!(
            decode(LinkType::Ethernet, &f),
            Err(Error::truncated(Layer::Ethernet, 18, 16))
        );
        assert_eq!(
            decode(LinkType::LinuxSll, &[0; 15]),
            Err(Error::truncated(Layer::LinuxSll, 16, 15))
        );
        assert_eq!(
            decode(LinkType::LinuxSll2, &[0; 19]),
            Err(Error::truncated(Layer::LinuxSll2, 20, 19))
        );
    }

    #[test]
    fn truncated_ip_and_udp() {
        let b = send_only(Encap::V4Raw);
        for n in 1..20 {
            let e = decode(LinkType::RawIp, &b.bytes[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Ipv4, "{n}");
        }
        // Header complete, the rest missing: the total length overruns.
        for n in [20, 27, 28, 40, b.bytes.len() - 1] {
            let e = decode(LinkType::RawIp, &b.bytes[..n]).unwrap_err();
            assert_eq!(e, Error::truncated(Layer::Ipv4, b.bytes.len(), n), "{n}");
        }
        let b6 = send_only(Encap::V6);
        let ip6 = &b6.bytes[14..];
        for n in [1, 39] {
            assert_eq!(
                decode(LinkType::Ipv6, &ip6[..n]).unwrap_err().layer,
                Layer::Ipv6
            );
        }
        for n in [40, 47, 48, ip6.len() - 1] {
            assert_eq!(
                decode(LinkType::Ipv6, &ip6[..n]),
                Err(Error::truncated(Layer::Ipv6, ip6.len(), n))
            );
        }
    }

    fn fix_ipv4_checksum(ip: &mut [u8]) {
        ip[10] = 0;
        ip[11] = 0;
        let s = crate::wire::ip_udp::tests::ones_complement_sum(&[&ip[..20]]);
        ip[10..12].copy_from_slice(&(!s).to_be_bytes());
    }

    #[test]
    fn bad_ip_and_udp_lengths() {
        let b = send_only(Encap::V4Raw);
        // Total length shorter than the header.
        let mut f = b.bytes.clone();
        f[2..4].copy_from_slice(&10u16.to_be_bytes());
        fix_ipv4_checksum(&mut f);
        assert_eq!(decode(LinkType::RawIp, &f).unwrap_err().layer, Layer::Ipv4);
        // UDP length below 8.
        let mut f = b.bytes.clone();
        f[24..26].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(
            decode(LinkType::RawIp, &f),
            Err(Error::new(
                Layer::Udp,
                ErrorKind::LengthMismatch {
                    field: "Length",
                    declared: 7,
                    actual: 8
                }
            ))
        );
        // UDP length beyond the IP packet.
        let mut f = b.bytes.clone();
        let udp_len = u16::from_be_bytes([f[24], f[25]]);
        f[24..26].copy_from_slice(&(udp_len + 4).to_be_bytes());
        assert_eq!(
            decode(LinkType::RawIp, &f),
            Err(Error::truncated(
                Layer::Udp,
                usize::from(udp_len) + 4,
                usize::from(udp_len)
            ))
        );
        // A UDP length shorter than the IP packet bounds the transport.
        let mut f = b.bytes.clone();
        f[24..26].copy_from_slice(&(udp_len - 4).to_be_bytes());
        let r = decode(LinkType::RawIp, &f).unwrap().unwrap();
        assert_eq!(r.transport.len(), usize::from(udp_len) - 12);
    }

    #[test]
    fn ipv4_fragments_are_refused() {
        let b = send_only(Encap::V4Raw);
        for (flags_off, what) in [(0x2000u16, "MF"), (0x4001, "offset"), (0x0010, "offset")] {
            let mut f = b.bytes.clone();
            f[6..8].copy_from_slice(&flags_off.to_be_bytes());
            fix_ipv4_checksum(&mut f);
            assert_eq!(
                decode(LinkType::RawIp, &f),
                Err(Error::new(Layer::Ipv4, ErrorKind::Malformed("IP fragment"))),
                "{what}"
            );
        }
    }

    #[test]
    fn ipv4_options_are_skipped() {
        let b = send_only(Encap::V4Raw);
        let mut f = b.bytes[..20].to_vec();
        f[0] = 0x46; // IHL 6
        f.extend([1, 1, 1, 0]); // NOP NOP NOP EOL
        f.extend(&b.bytes[20..]);
        let total = u16::try_from(f.len()).unwrap();
        f[2..4].copy_from_slice(&total.to_be_bytes());
        fix_ipv4_checksum(&mut f[..24]);
        let r = decode(LinkType::RawIp, &f).unwrap().unwrap();
        assert_eq!(r.ip.unwrap().len(), 24);
        assert_eq!(r.transport, transport_of(&b));
        // The ICRC covers the options, so the old one no longer matches.
        assert!(crate::wire::icrc::verify(&r.icrc_scope(), r.transport).is_err());
    }

    #[test]
    fn roce_v1_grh_errors() {
        let b = send_only(Encap::V1);
        let mut f = b.bytes.clone();
        f[14 + 6] = 0x11;
        assert_eq!(
            decode(LinkType::Ethernet, &f),
            Err(Error::bad_field(Layer::Grh, "NxtHdr", 0x11))
        );
        let mut f = b.bytes.clone();
        f[14] = 0x40;
        assert_eq!(
            decode(LinkType::Ethernet, &f),
            Err(Error::bad_field(Layer::Grh, "IPVer", 4))
        );
        let n = b.bytes.len();
        assert_eq!(
            decode(LinkType::Ethernet, &b.bytes[..n - 1]),
            Err(Error::truncated(Layer::Grh, n - 14, n - 15))
        );
        assert_eq!(
            decode(LinkType::Ethernet, &b.bytes[..30]),
            Err(Error::truncated(
                Layer::Grh,
                crate::wire::grh::HEADER_LEN,
                16
            ))
        );
    }

    #[test]
    fn infiniband_lrh_errors() {
        let b = send_only(Encap::IbLocal);
        for lnh in [0u8, 1] {
            let mut f = b.bytes.clone();
            f[1] = (f[1] & !3) | lnh;
            assert_eq!(
                decode(LinkType::Infiniband, &f),
                Err(Error::bad_field(Layer::Lrh, "LNH", u64::from(lnh)))
            );
        }
        let mut f = b.bytes.clone();
        f[0] |= 1;
        assert_eq!(
            decode(LinkType::Infiniband, &f),
            Err(Error::bad_field(Layer::Lrh, "LVer", 1))
        );
        // PktLen longer than the bytes.
        let n = b.bytes.len();
        assert_eq!(
            decode(LinkType::Infiniband, &b.bytes[..n - 1]),
            Err(Error::truncated(Layer::Lrh, n, n - 1))
        );
        // PktLen shorter than the LRH.
        let mut f = b.bytes.clone();
        f[4..6].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(
            decode(LinkType::Infiniband, &f),
            Err(Error::new(
                Layer::Lrh,
                ErrorKind::LengthMismatch {
                    field: "PktLen",
                    declared: 4,
                    actual: 8
                }
            ))
        );
        for n in 0..8 {
            assert_eq!(
                decode(LinkType::Infiniband, &b.bytes[..n]),
                Err(Error::truncated(Layer::Lrh, 8, n))
            );
        }
        let g = send_only(Encap::IbGlobal);
        let mut f = g.bytes.clone();
        f[8 + 6] = 0x3b;
        assert_eq!(
            decode(LinkType::Infiniband, &f),
            Err(Error::bad_field(Layer::Grh, "NxtHdr", 0x3b))
        );
        // PktLen that ends inside the GRH.
        let mut f = g.bytes.clone();
        f[4..6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(
            decode(LinkType::Infiniband, &f).unwrap_err().kind,
            ErrorKind::LengthMismatch {
                field: "PktLen",
                declared: 16,
                actual: 48
            }
        );
    }

    /// Everything a caller may do with a decoded frame.
    fn exercise(r: &RoceFrame<'_>, input: &[u8]) {
        let inside = |s: &[u8]| {
            let a = input.as_ptr() as usize;
            let p = s.as_ptr() as usize;
            s.is_empty() || (p >= a && p + s.len() <= a + input.len())
        };
        assert!(inside(r.transport));
        for s in [r.ip, r.udp, r.lrh, r.grh, r.ib_packet]
            .into_iter()
            .flatten()
        {
            assert!(inside(s));
        }
        let _ = r.addresses();
        let _ = r.lids();
        let _ = crate::wire::icrc::verify(&r.icrc_scope(), r.transport);
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..200)) {
            for link in ALL_LINKS {
                if let Ok(Some(r)) = decode(link, &bytes) {
                    exercise(&r, &bytes);
                }
            }
        }

        #[test]
        fn decode_never_panics_on_mutated_frames(
            (t, p) in arb_packet(),
            e in proptest::sample::select(ENCAPS.to_vec()),
            which in any::<prop::sample::Index>(),
            edits in vec((any::<prop::sample::Index>(), 1u8..=255), 1..3),
            cut in any::<prop::sample::Index>(),
        ) {
            let b = build(e, &t, &p);
            let links = on_every_link(&b);
            let (link, mut f) = links[which.index(links.len())].clone();
            let r = decode(link, &f).unwrap().unwrap();
            prop_assert_eq!(r.transport, transport_of(&b));
            for (at, x) in edits {
                let i = at.index(f.len());
                f[i] ^= x;
            }
            if let Ok(Some(r)) = decode(link, &f) {
                exercise(&r, &f);
            }
            let n = cut.index(f.len() + 1);
            if let Ok(Some(r)) = decode(link, &f[..n]) {
                exercise(&r, &f[..n]);
            }
            // Every other link type over the same bytes.
            for other in ALL_LINKS {
                if let Ok(Some(r)) = decode(other, &f) {
                    exercise(&r, &f);
                }
            }
        }
    }
}
