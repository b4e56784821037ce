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
/// GRH next header for IBA transport (IBTA 8.3.1).
pub const GRH_NEXT_HEADER_IBA: u8 = 0x1b;

/// How the frame begins (pcap LINKTYPE_* values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    Ethernet,
    /// Raw IP, version from the first nibble.
    RawIp,
    Ipv4,
    Ipv6,
    LinuxSll,
    LinuxSll2,
    /// An InfiniBand packet starting with the LRH.
    Infiniband,
}

impl LinkType {
    /// Maps a pcap LINKTYPE number.
    pub const fn from_pcap(linktype: u32) -> Option<LinkType> {
        match linktype {
            1 => Some(LinkType::Ethernet),
            12 | 14 | 101 => Some(LinkType::RawIp),
            228 => Some(LinkType::Ipv4),
            229 => Some(LinkType::Ipv6),
            113 => Some(LinkType::LinuxSll),
            276 => Some(LinkType::LinuxSll2),
            247 => Some(LinkType::Infiniband),
            _ => None,
        }
    }

    pub const fn pcap_number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Infiniband => 247,
        }
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
        Some((IpAddr::from(g.sgid), IpAddr::from(g.dgid)))
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
    if grh.next_header != GRH_NEXT_HEADER_IBA {
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
            if grh.next_header != GRH_NEXT_HEADER_IBA {
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
