//! Building whole packets: a `TransportRepr` and its payload, wrapped in
//! RoCEv2 (IPv4 or IPv6 and UDP), RoCEv1 (GRH) or native InfiniBand (LRH,
//! optional GRH, VCRC), with the ICRC computed over the final headers.
//!
//! Everything writes into a caller's buffer, so the data path can reuse
//! one buffer per packet slot and never allocate.

use core::net::IpAddr;

use etherparse::{IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, UdpHeader};

use super::error::{Error, ErrorKind, Layer, Result};
use super::frame::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCE_V1, GRH_NEXT_HEADER_IBA, ROCE_V2_PORT,
};
use super::grh::{self, Grh, GrhRepr};
use super::icrc::{self, IcrcScope};
use super::lrh::{self, Lnh, Lrh, LrhRepr};
use super::packet::TransportRepr;
use super::vcrc;

/// The IP and UDP fields of a RoCEv2 packet that the transport does not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceV2Ip {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// UDP source port: an entropy field for ECMP (kernel rxe: 0xC000 plus a
    /// hash of the QPN); receivers accept any.
    pub src_port: u16,
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv6 flow label (20 bits); ignored for IPv4.
    pub flow_label: u32,
    /// Compute the UDP checksum over IPv6. RoCEv2 senders such as kernel rxe
    /// send 0, which RFC 6936 allows only for tunnels and some stacks drop;
    /// the ICRC masks the field, so either choice interoperates.
    pub ipv6_udp_checksum: bool,
}

impl RoceV2Ip {
    /// Defaults as an unconnected Linux UDP socket sends them: TTL 64, no
    /// DSCP, and (for IPv4) ID 0 with DF set.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16) -> Self {
        RoceV2Ip {
            src,
            dst,
            src_port,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            ipv6_udp_checksum: false,
        }
    }

    /// Bytes of IP and UDP header in front of the BTH.
    pub fn header_len(&self) -> usize {
        match self.src {
            IpAddr::V4(_) => Ipv4Header::MIN_LEN + UdpHeader::LEN,
            IpAddr::V6(_) => Ipv6Header::LEN + UdpHeader::LEN,
        }
    }
}

/// An Ethernet II header (no VLAN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetAddrs {
    pub src: [u8; 6],
    pub dst: [u8; 6],
}

pub const ETHERNET_LEN: usize = 14;

fn too_small(layer: Layer, needed: usize, have: usize) -> Error {
    Error::truncated(layer, needed, have)
}

/// Writes an Ethernet header; returns its length.
pub fn emit_ethernet(eth: &EthernetAddrs, ethertype: u16, buf: &mut [u8]) -> Result<usize> {
    if buf.len() < ETHERNET_LEN {
        return Err(too_small(Layer::Ethernet, ETHERNET_LEN, buf.len()));
    }
    buf[..6].copy_from_slice(&eth.dst);
    buf[6..12].copy_from_slice(&eth.src);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
    Ok(ETHERNET_LEN)
}

/// Writes IP header, UDP header, transport packet and ICRC into `buf`;
/// returns the bytes written.
pub fn emit_roce_v2(
    ip: &RoceV2Ip,
    t: &TransportRepr,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let tlen = t.buffer_len()?;
    let hlen = ip.header_len();
    let total = hlen + tlen;
    if buf.len() < total {
        return Err(too_small(Layer::Bth, total, buf.len()));
    }
    let udp_len = u16::try_from(UdpHeader::LEN + tlen).map_err(|_| {
        Error::new(
            Layer::Udp,
            ErrorKind::Malformed("packet longer than UDP allows"),
        )
    })?;
    t.emit(&mut buf[hlen..total], payload)?;
    let mut udp = UdpHeader {
        source_port: ip.src_port,
        destination_port: ROCE_V2_PORT,
        length: udp_len,
        checksum: 0,
    };
    let ip_len = match (ip.src, ip.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h =
                Ipv4Header::new(udp_len, ip.hop_limit, IpNumber::UDP, s.octets(), d.octets())
                    .map_err(|_| {
                        Error::new(
                            Layer::Ipv4,
                            ErrorKind::Malformed("packet too long for IPv4"),
                        )
                    })?;
            // Identification 0 with DF: what an unconnected Linux UDP socket
            // sends, and the ICRC covers the ID (DESIGN.md, wire facts).
            h.identification = 0;
            h.dont_fragment = true;
            h.dscp = etherparse::IpDscp::try_new(ip.traffic_class >> 2).unwrap_or_default();
            h.ecn = etherparse::IpEcn::try_new(ip.traffic_class & 3).unwrap_or_default();
            h.header_checksum = h.calc_header_checksum();
            let bytes = h.to_bytes();
            buf[..bytes.len()].copy_from_slice(&bytes);
            bytes.len()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = Ipv6Header {
                traffic_class: ip.traffic_class,
                flow_label: Ipv6FlowLabel::try_new(ip.flow_label & 0xf_ffff).unwrap_or_default(),
                payload_length: udp_len,
                next_header: IpNumber::UDP,
                hop_limit: ip.hop_limit,
                source: s.octets(),
                destination: d.octets(),
            };
            if ip.ipv6_udp_checksum {
                // The ICRC slot must hold its final value before the checksum
                // covers it, so fill it over a provisional header first.
                buf[..Ipv6Header::LEN].copy_from_slice(&h.to_bytes());
                buf[Ipv6Header::LEN..hlen].copy_from_slice(&udp.to_bytes());
                fill_icrc(buf, hlen, total)?;
                udp =
                    UdpHeader::with_ipv6_checksum(ip.src_port, ROCE_V2_PORT, &h, &buf[hlen..total])
                        .map_err(|_| {
                            Error::new(Layer::Udp, ErrorKind::Malformed("UDP checksum"))
                        })?;
            }
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
    buf[ip_len..hlen].copy_from_slice(&udp.to_bytes());
    fill_icrc(buf, hlen, total)?;
    Ok(total)
}

/// Fills the ICRC of the RoCEv2 packet in `buf[..total]` whose transport
/// starts at `hlen`.
fn fill_icrc(buf: &mut [u8], hlen: usize, total: usize) -> Result<()> {
    let (head, transport) = buf[..total].split_at_mut(hlen);
    let udp_at = hlen - UdpHeader::LEN;
    let scope = IcrcScope::RoceV2 {
        ip_header: &head[..udp_at],
        udp_header: &head[udp_at..],
    };
    icrc::fill(&scope, transport)
        .ok_or(Error::new(Layer::Icrc, ErrorKind::Malformed("ICRC scope")))?;
    Ok(())
}

/// Writes a full Ethernet frame around a RoCEv2 packet.
pub fn emit_roce_v2_ethernet(
    eth: &EthernetAddrs,
    ip: &RoceV2Ip,
    t: &TransportRepr,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let ethertype = if ip.src.is_ipv4() {
        ETHERTYPE_IPV4
    } else {
        ETHERTYPE_IPV6
    };
    let n = emit_ethernet(eth, ethertype, buf)?;
    Ok(n + emit_roce_v2(ip, t, payload, &mut buf[n..])?)
}

/// Writes a RoCEv1 frame: Ethernet (Ethertype 0x8915), GRH, transport,
/// ICRC. The GRH payload length and next header are set here.
pub fn emit_roce_v1(
    eth: &EthernetAddrs,
    grh: &GrhRepr,
    t: &TransportRepr,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let tlen = t.buffer_len()?;
    let total = ETHERNET_LEN + grh::HEADER_LEN + tlen;
    if buf.len() < total {
        return Err(too_small(Layer::Grh, total, buf.len()));
    }
    emit_ethernet(eth, ETHERTYPE_ROCE_V1, buf)?;
    let g_at = ETHERNET_LEN;
    let t_at = g_at + grh::HEADER_LEN;
    let mut g = *grh;
    g.next_header = GRH_NEXT_HEADER_IBA;
    g.payload_len = u16::try_from(tlen).map_err(|_| {
        Error::new(
            Layer::Grh,
            ErrorKind::Malformed("packet longer than PayLen allows"),
        )
    })?;
    g.emit(&mut Grh::new_unchecked(&mut buf[g_at..t_at]));
    t.emit(&mut buf[t_at..total], payload)?;
    let (head, transport) = buf[..total].split_at_mut(t_at);
    let scope = IcrcScope::Grh { grh: &head[g_at..] };
    icrc::fill(&scope, transport)
        .ok_or(Error::new(Layer::Icrc, ErrorKind::Malformed("ICRC scope")))?;
    Ok(total)
}

/// Writes a native InfiniBand packet: LRH, GRH if given, transport, ICRC,
/// VCRC. The LRH LNH and PktLen and the GRH PayLen and NxtHdr are set here.
pub fn emit_ib(
    lrh: &LrhRepr,
    grh: Option<&GrhRepr>,
    t: &TransportRepr,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let tlen = t.buffer_len()?;
    let grh_len = if grh.is_some() { grh::HEADER_LEN } else { 0 };
    let t_at = lrh::HEADER_LEN + grh_len;
    let end = t_at + tlen;
    let total = end + vcrc::LEN;
    if buf.len() < total {
        return Err(too_small(Layer::Lrh, total, buf.len()));
    }
    let mut l = *lrh;
    l.lnh = if grh.is_some() {
        Lnh::IbaGlobal
    } else {
        Lnh::IbaLocal
    };
    // IBTA 7.7.8: PktLen is 11 bits of 4-byte words, LRH through ICRC.
    l.pkt_len_words = u16::try_from(end / 4)
        .ok()
        .filter(|w| *w < 1 << 11)
        .ok_or(Error::new(
            Layer::Lrh,
            ErrorKind::Malformed("packet longer than PktLen allows"),
        ))?;
    l.emit(&mut Lrh::new_unchecked(&mut buf[..lrh::HEADER_LEN]));
    if let Some(g) = grh {
        let mut g = *g;
        g.next_header = GRH_NEXT_HEADER_IBA;
        g.payload_len = tlen as u16; // < 8 KiB: bounded by PktLen above
        g.emit(&mut Grh::new_unchecked(&mut buf[lrh::HEADER_LEN..t_at]));
    }
    t.emit(&mut buf[t_at..end], payload)?;
    let (head, transport) = buf[..end].split_at_mut(t_at);
    let scope = match grh {
        Some(_) => IcrcScope::Grh {
            grh: &head[lrh::HEADER_LEN..],
        },
        None => IcrcScope::IbLocal {
            lrh: &head[..lrh::HEADER_LEN],
        },
    };
    icrc::fill(&scope, transport)
        .ok_or(Error::new(Layer::Icrc, ErrorKind::Malformed("ICRC scope")))?;
    let v = vcrc::trailer(&buf[..end]);
    buf[end..total].copy_from_slice(&v);
    Ok(total)
}
