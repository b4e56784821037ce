//! Building whole packets: a `TransportRepr` and its payload, wrapped in
//! RoCEv2 (IPv4 or IPv6 and UDP), RoCEv1 (GRH) or native InfiniBand (LRH,
//! optional GRH, VCRC), with the ICRC computed over the final headers.
//!
//! Everything writes into a caller's buffer, so the data path can reuse
//! one buffer per packet slot and never allocate.

use core::net::IpAddr;

use etherparse::UdpHeader;

use super::error::{Error, ErrorKind, Layer, Result};
use super::frame::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCE_V1};
use super::grh::{self, Grh, GrhRepr};
use super::icrc::{self, IcrcScope};
use super::ip_udp::udp_checksum;
/// The IP and UDP fields of a RoCEv2 packet, defined with their builder.
pub use super::ip_udp::RoceV2Ip;
use super::lrh::{self, Lnh, Lrh, LrhRepr};
use super::packet::TransportRepr;
use super::vcrc;

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

/// The Ethernet II header: destination MAC, source MAC, Ethertype.
pub fn ethernet_header(eth: &EthernetAddrs, ethertype: u16) -> [u8; ETHERNET_LEN] {
    let mut h = [0u8; ETHERNET_LEN];
    h[..6].copy_from_slice(&eth.dst);
    h[6..12].copy_from_slice(&eth.src);
    h[12..14].copy_from_slice(&ethertype.to_be_bytes());
    h
}

/// The Ethertype in front of a RoCEv2 packet over IPv4 or IPv6.
pub fn roce_v2_ethertype(ip: IpAddr) -> u16 {
    if ip.is_ipv4() {
        ETHERTYPE_IPV4
    } else {
        ETHERTYPE_IPV6
    }
}

/// Writes an Ethernet header; returns its length.
pub fn emit_ethernet(eth: &EthernetAddrs, ethertype: u16, buf: &mut [u8]) -> Result<usize> {
    let have = buf.len();
    let dst = buf
        .get_mut(..ETHERNET_LEN)
        .ok_or(too_small(Layer::Ethernet, ETHERNET_LEN, have))?;
    dst.copy_from_slice(&ethernet_header(eth, ethertype));
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
    ip.emit(tlen, &mut buf[..hlen])?;
    t.emit(&mut buf[hlen..total], payload)?;
    // The ICRC masks the UDP checksum, so it can be computed first and the
    // checksum (which covers the ICRC) last.
    fill_icrc(buf, hlen, total)?;
    if ip.ipv6_udp_checksum && ip.src.is_ipv6() {
        let (head, transport) = buf[..total].split_at_mut(hlen);
        let (ip_header, udp) = head.split_at_mut(hlen - UdpHeader::LEN);
        let udp: &mut [u8; 8] = udp
            .try_into()
            .map_err(|_| Error::new(Layer::Udp, ErrorKind::Malformed("UDP checksum")))?;
        let c = udp_checksum(ip_header, udp, transport)
            .ok_or(Error::new(Layer::Udp, ErrorKind::Malformed("UDP checksum")))?;
        udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
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
    let n = emit_ethernet(eth, roce_v2_ethertype(ip.src), buf)?;
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
    g.next_header = grh::NXT_HDR_IBA;
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
        g.next_header = grh::NXT_HDR_IBA;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::dissect::{dissect, Dissection};
    use crate::wire::frame::{Encapsulation, LinkType};
    use crate::wire::opcode::{self, Opcode, OpcodeInfo};
    use crate::wire::packet::tests::{arb_packet, sample_packet};
    use crate::wire::{bth, ErrorKind};
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    /// The encapsulations the builders produce.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Encap {
        /// Ethernet, IPv4, UDP.
        V4,
        /// IPv4, UDP, no link header (LinkType::RawIp).
        V4Raw,
        /// Ethernet, IPv6, UDP with checksum 0.
        V6,
        /// Ethernet, IPv6, UDP with a computed checksum.
        V6Csum,
        /// Ethernet, GRH.
        V1,
        /// LRH, no GRH.
        IbLocal,
        /// LRH, GRH.
        IbGlobal,
    }

    pub(crate) const ENCAPS: [Encap; 7] = [
        Encap::V4,
        Encap::V4Raw,
        Encap::V6,
        Encap::V6Csum,
        Encap::V1,
        Encap::IbLocal,
        Encap::IbGlobal,
    ];

    /// A built frame and where its layers are.
    #[derive(Debug, Clone)]
    pub(crate) struct Built {
        pub encap: Encap,
        pub link: LinkType,
        pub bytes: Vec<u8>,
        /// Offset of the IP header or GRH (RoCE), or of the GRH (IB global).
        pub net: Option<usize>,
        /// Offset of the UDP header.
        pub udp: Option<usize>,
        /// Offset of the BTH.
        pub bth: usize,
        /// End of the ICRC.
        pub end: usize,
    }

    pub(crate) const ETH: EthernetAddrs = EthernetAddrs {
        src: [0x02, 0, 0, 0, 0, 0x01],
        dst: [0x02, 0, 0, 0, 0, 0x02],
    };
    pub(crate) const V4_SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    pub(crate) const V4_DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    pub(crate) const V6_SRC: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
    pub(crate) const V6_DST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
    pub(crate) const SRC_PORT: u16 = 0xc123;

    pub(crate) fn v4_ip() -> RoceV2Ip {
        RoceV2Ip::new(V4_SRC.into(), V4_DST.into(), SRC_PORT)
    }

    pub(crate) fn v6_ip(checksum: bool) -> RoceV2Ip {
        let mut ip = RoceV2Ip::new(V6_SRC.into(), V6_DST.into(), SRC_PORT);
        ip.traffic_class = 0x68;
        ip.flow_label = 0xa_bcde;
        ip.hop_limit = 17;
        ip.ipv6_udp_checksum = checksum;
        ip
    }

    pub(crate) fn sample_grh() -> GrhRepr {
        GrhRepr {
            traffic_class: 0x20,
            flow_label: 0x1_2345,
            payload_len: 0,    // set by the builder
            next_header: 0x99, // set by the builder
            hop_limit: 5,
            sgid: V6_SRC.into(),
            dgid: V6_DST.into(),
        }
    }

    pub(crate) fn sample_lrh() -> LrhRepr {
        LrhRepr {
            vl: 3,
            lver: 0,
            sl: 5,
            lnh: Lnh::Raw, // set by the builder
            dlid: 0x0002,
            pkt_len_words: 0, // set by the builder
            slid: 0x0001,
        }
    }

    /// Builds `t` and `payload` in `encap`.
    pub(crate) fn build(encap: Encap, t: &TransportRepr, payload: &[u8]) -> Built {
        let mut buf = vec![0u8; t.buffer_len().unwrap() + 128];
        let (link, n, net, udp, bth) = match encap {
            Encap::V4 => {
                let n = emit_roce_v2_ethernet(&ETH, &v4_ip(), t, payload, &mut buf).unwrap();
                (LinkType::Ethernet, n, Some(14), Some(34), 42)
            }
            Encap::V4Raw => {
                let n = emit_roce_v2(&v4_ip(), t, payload, &mut buf).unwrap();
                (LinkType::RawIp, n, Some(0), Some(20), 28)
            }
            Encap::V6 | Encap::V6Csum => {
                let ip = v6_ip(encap == Encap::V6Csum);
                let n = emit_roce_v2_ethernet(&ETH, &ip, t, payload, &mut buf).unwrap();
                (LinkType::Ethernet, n, Some(14), Some(54), 62)
            }
            Encap::V1 => {
                let n = emit_roce_v1(&ETH, &sample_grh(), t, payload, &mut buf).unwrap();
                (LinkType::Ethernet, n, Some(14), None, 54)
            }
            Encap::IbLocal => {
                let n = emit_ib(&sample_lrh(), None, t, payload, &mut buf).unwrap();
                (LinkType::Infiniband, n, None, None, 8)
            }
            Encap::IbGlobal => {
                let n = emit_ib(&sample_lrh(), Some(&sample_grh()), t, payload, &mut buf).unwrap();
                (LinkType::Infiniband, n, Some(8), None, 48)
            }
        };
        buf.truncate(n);
        let end = match encap {
            Encap::IbLocal | Encap::IbGlobal => n - vcrc::LEN,
            _ => n,
        };
        assert_eq!(end - bth, t.buffer_len().unwrap());
        Built {
            encap,
            link,
            bytes: buf,
            net,
            udp,
            bth,
            end,
        }
    }

    pub(crate) fn is_ib(e: Encap) -> bool {
        matches!(e, Encap::IbLocal | Encap::IbGlobal)
    }

    /// `(byte offset, bit mask)` of every bit the ICRC masks outside the
    /// LRH, in frame offsets.
    pub(crate) fn masked_bits(b: &Built) -> Vec<(usize, u8)> {
        let mut v = vec![(b.bth + 4, 0xff)];
        match b.encap {
            Encap::V4 | Encap::V4Raw => {
                let ip = b.net.unwrap();
                v.extend([
                    (ip + 1, 0xff),
                    (ip + 8, 0xff),
                    (ip + 10, 0xff),
                    (ip + 11, 0xff),
                ]);
            }
            Encap::V6 | Encap::V6Csum | Encap::V1 | Encap::IbGlobal => {
                let ip = b.net.unwrap();
                v.extend([
                    (ip, 0x0f),
                    (ip + 1, 0xff),
                    (ip + 2, 0xff),
                    (ip + 3, 0xff),
                    (ip + 7, 0xff),
                ]);
            }
            Encap::IbLocal => {}
        }
        if let Some(u) = b.udp {
            v.extend([(u + 6, 0xff), (u + 7, 0xff)]);
        }
        v
    }

    fn ones_complement_sum(chunks: &[&[u8]]) -> u16 {
        let mut s: u32 = 0;
        for c in chunks {
            for w in c.chunks(2) {
                let hi = u32::from(w[0]) << 8;
                let lo = w.get(1).map_or(0, |&x| u32::from(x));
                s += hi | lo;
            }
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// The outer-header facts every built packet must satisfy.
    fn check_outer(b: &Built, tlen: usize) {
        let f = &b.bytes;
        if let Some(u) = b.udp {
            assert_eq!(be16(f, u), SRC_PORT, "UDP source port");
            assert_eq!(be16(f, u + 2), 4791, "UDP destination port");
            assert_eq!(usize::from(be16(f, u + 4)), 8 + tlen, "UDP length");
        }
        match b.encap {
            Encap::V4 | Encap::V4Raw => {
                if b.encap == Encap::V4 {
                    assert_eq!(&f[..6], &ETH.dst);
                    assert_eq!(&f[6..12], &ETH.src);
                    assert_eq!(be16(f, 12), 0x0800);
                }
                let ip = &f[b.net.unwrap()..b.udp.unwrap()];
                assert_eq!(ip[0], 0x45);
                assert_eq!(ones_complement_sum(&[ip]), 0xffff, "IPv4 header checksum");
                assert_eq!(be16(ip, 2) as usize, 20 + 8 + tlen, "total length");
                assert_eq!(be16(ip, 4), 0, "IPv4 ID must be 0");
                assert_eq!(be16(ip, 6), 0x4000, "DF set, MF clear, offset 0");
                assert_eq!(ip[8], 64, "TTL");
                assert_eq!(ip[9], 17, "protocol UDP");
                assert_eq!(&ip[12..16], &V4_SRC.octets());
                assert_eq!(&ip[16..20], &V4_DST.octets());
                assert_eq!(be16(f, b.udp.unwrap() + 6), 0, "UDP checksum 0 on IPv4");
            }
            Encap::V6 | Encap::V6Csum => {
                assert_eq!(be16(f, 12), 0x86dd);
                let ip = &f[14..54];
                let want = v6_ip(false);
                assert_eq!(ip[0] >> 4, 6);
                let w0 = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
                assert_eq!((w0 >> 20) as u8, want.traffic_class);
                assert_eq!(w0 & 0xf_ffff, want.flow_label);
                assert_eq!(be16(ip, 4) as usize, 8 + tlen, "payload length");
                assert_eq!(ip[6], 17);
                assert_eq!(ip[7], want.hop_limit);
                assert_eq!(&ip[8..24], &V6_SRC.octets());
                assert_eq!(&ip[24..40], &V6_DST.octets());
                let csum = be16(f, 60);
                if b.encap == Encap::V6 {
                    assert_eq!(csum, 0, "kernel rxe sends UDP checksum 0");
                } else {
                    assert_ne!(csum, 0);
                    let len = ((8 + tlen) as u32).to_be_bytes();
                    let pseudo_tail = [0, 0, 0, 17];
                    let sum = ones_complement_sum(&[&ip[8..40], &len, &pseudo_tail, &f[54..]]);
                    assert_eq!(sum, 0xffff, "UDP checksum over IPv6");
                }
            }
            Encap::V1 => {
                assert_eq!(be16(f, 12), 0x8915);
                let g = &f[14..54];
                assert_eq!(g[0] >> 4, 6);
                assert_eq!(be16(g, 4) as usize, tlen, "GRH PayLen");
                assert_eq!(g[6], 0x1b, "GRH NxtHdr");
            }
            Encap::IbLocal | Encap::IbGlobal => {
                let global = b.encap == Encap::IbGlobal;
                assert_eq!(f[1] & 3, if global { 3 } else { 2 }, "LNH");
                assert_eq!(usize::from(be16(f, 4) & 0x7ff) * 4, b.end, "PktLen");
                assert_eq!(f.len(), b.end + 2);
                if global {
                    assert_eq!(be16(f, 12) as usize, tlen, "GRH PayLen");
                    assert_eq!(f[14], 0x1b, "GRH NxtHdr");
                }
            }
        }
    }

    fn good(b: &Built) -> Dissection<'_> {
        let d = dissect(b.link, &b.bytes)
            .unwrap_or_else(|e| panic!("{:?}: {e}", b.encap))
            .unwrap_or_else(|| panic!("{:?}: not RoCE", b.encap));
        assert!(d.is_good(), "{:?}: {:?}", b.encap, d.problems());
        d
    }

    fn encapsulation_of(e: Encap) -> Encapsulation {
        match e {
            Encap::V4 | Encap::V4Raw => Encapsulation::RoceV2Ipv4,
            Encap::V6 | Encap::V6Csum => Encapsulation::RoceV2Ipv6,
            Encap::V1 => Encapsulation::RoceV1,
            Encap::IbLocal | Encap::IbGlobal => Encapsulation::Infiniband,
        }
    }

    /// The verdict on a frame that should be rejected.
    fn assert_bad(link: LinkType, bytes: &[u8], what: &dyn Fn() -> String) {
        match dissect(link, bytes) {
            Err(_) | Ok(None) => {}
            Ok(Some(d)) => assert!(!d.is_good(), "{} stays good", what()),
        }
    }

    fn lengths(info: &OpcodeInfo) -> Vec<usize> {
        use crate::wire::packet::tests::legal_len;
        let mut v: Vec<usize> = [0, 1, 2, 3, 4, 5, 257]
            .iter()
            .map(|&n| legal_len(info, n))
            .collect();
        v.dedup();
        v
    }

    #[test]
    fn every_opcode_in_every_encapsulation_dissects_good() {
        for info in opcode::all() {
            for len in lengths(info) {
                let (t, p) = sample_packet(info, len);
                let tlen = t.buffer_len().unwrap();
                for e in ENCAPS {
                    let b = build(e, &t, &p);
                    check_outer(&b, tlen);
                    let d = good(&b);
                    let pkt = d.packet.as_ref().unwrap();
                    assert_eq!(pkt.repr, t, "{:?} {:#04x}", e, info.opcode);
                    assert_eq!(pkt.payload, &p[..]);
                    assert_eq!(d.payload(), Some(&p[..]));
                    assert_eq!(d.frame.encapsulation, encapsulation_of(e));
                    assert_eq!(d.frame.transport, &b.bytes[b.bth..b.end]);
                    assert_eq!(d.vcrc.is_some(), is_ib(e));
                    let s = d.summary();
                    assert!(s.contains("icrc=ok"), "{s}");
                    assert!(s.contains(&format!("psn={}", t.bth.psn)), "{s}");
                    assert!(!d.layers().is_empty());
                }
            }
        }
    }

    #[test]
    fn single_byte_changes_break_the_icrc() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 5);
            for e in ENCAPS {
                let b = build(e, &t, &p);
                // BTH (except the masked byte 4), extended headers, payload,
                // pad and ICRC.
                for at in (b.bth..b.end).filter(|&i| i != b.bth + 4) {
                    for x in [0x01u8, 0x80, 0xff] {
                        let mut f = b.bytes.clone();
                        f[at] ^= x;
                        let d = dissect(b.link, &f).unwrap().unwrap();
                        assert!(
                            !d.is_good(),
                            "{e:?} {:#04x}: byte {} ^ {x:#x} stays good",
                            info.opcode,
                            at - b.bth
                        );
                        assert!(
                            d.icrc.is_err() || d.packet.is_err(),
                            "{e:?} {:#04x}: byte {}",
                            info.opcode,
                            at - b.bth
                        );
                        if is_ib(e) {
                            assert!(matches!(d.vcrc, Some(Err(_))));
                        }
                    }
                }
                // Unmasked bits of the IP/UDP header or GRH.
                let masked = masked_bits(&b);
                let (from, to) = match e {
                    Encap::IbLocal | Encap::IbGlobal => (0, b.bth),
                    _ => (b.net.unwrap(), b.bth),
                };
                for at in from..to {
                    let m = masked.iter().find(|(i, _)| *i == at).map_or(0, |(_, m)| *m);
                    if m == 0xff || (b.encap == Encap::IbGlobal && at < 8) {
                        continue;
                    }
                    let mut f = b.bytes.clone();
                    f[at] ^= !m;
                    assert_bad(b.link, &f, &|| {
                        format!("{e:?} {:#04x}: header byte {at}", info.opcode)
                    });
                }
            }
        }
    }

    #[test]
    fn masked_fields_keep_the_icrc_good() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 3);
            for e in ENCAPS {
                let b = build(e, &t, &p);
                let mut all = b.bytes.clone();
                for (at, m) in masked_bits(&b) {
                    for v in [0x00u8, 0x5a, 0xff] {
                        let mut f = b.bytes.clone();
                        f[at] = (f[at] & !m) | (v & m);
                        all[at] = (all[at] & !m) | (!b.bytes[at] & m);
                        let d = dissect(b.link, &f).unwrap().unwrap();
                        assert!(d.icrc.is_ok(), "{e:?} {:#04x}: byte {at}", info.opcode);
                        let mut r = d.packet.unwrap().repr;
                        assert_eq!(r.bth.fecn, f[b.bth + 4] & 0x80 != 0);
                        assert_eq!(r.bth.becn, f[b.bth + 4] & 0x40 != 0);
                        r.bth.fecn = t.bth.fecn;
                        r.bth.becn = t.bth.becn;
                        assert_eq!(r, t);
                        if is_ib(e) {
                            // The VCRC covers everything.
                            assert_eq!(d.vcrc.unwrap().is_ok(), f == b.bytes);
                        } else {
                            assert!(d.is_good());
                        }
                    }
                }
                // All masked fields changed at once.
                let d = dissect(b.link, &all).unwrap().unwrap();
                assert!(d.icrc.is_ok(), "{e:?} {:#04x}: all masked", info.opcode);
                assert!(d.packet.is_ok());
            }
        }
    }

    #[test]
    fn lrh_is_masked_behind_a_grh_but_not_without() {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 8);
        let g = build(Encap::IbGlobal, &t, &p);
        let l = build(Encap::IbLocal, &t, &p);
        // VL (byte 0 high nibble), SL (byte 1 high nibble), DLID, SLID.
        for (at, x) in [
            (0usize, 0x70u8),
            (1, 0x30),
            (2, 1),
            (3, 0x80),
            (6, 4),
            (7, 1),
        ] {
            let mut f = g.bytes.clone();
            f[at] ^= x;
            let d = dissect(LinkType::Infiniband, &f).unwrap().unwrap();
            assert!(d.icrc.is_ok(), "global: LRH byte {at}");
            assert!(matches!(d.vcrc, Some(Err(_))), "global: LRH byte {at}");

            let mut f = l.bytes.clone();
            f[at] ^= x;
            let d = dissect(LinkType::Infiniband, &f).unwrap().unwrap();
            assert_eq!(d.icrc.is_ok(), at == 0, "local: LRH byte {at}");
            assert!(matches!(d.vcrc, Some(Err(_))), "local: LRH byte {at}");
        }
    }

    #[test]
    fn every_byte_of_an_ib_packet_is_under_the_vcrc() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 6);
            for e in [Encap::IbLocal, Encap::IbGlobal] {
                let b = build(e, &t, &p);
                for at in 0..b.bytes.len() {
                    for x in [0x01u8, 0x10, 0xff] {
                        let mut f = b.bytes.clone();
                        f[at] ^= x;
                        match dissect(LinkType::Infiniband, &f) {
                            Err(_) => {}
                            Ok(None) => panic!("IB is always RoCE-bound"),
                            Ok(Some(d)) => assert!(
                                matches!(d.vcrc, Some(Err(_))),
                                "{e:?} {:#04x}: byte {at} ^ {x:#x} keeps the VCRC",
                                info.opcode
                            ),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn builders_refuse_small_buffers_without_panicking() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 9);
            for e in ENCAPS {
                let total = build(e, &t, &p).bytes.len();
                for n in 0..total {
                    let mut buf = vec![0u8; n];
                    let r = match e {
                        Encap::V4 => emit_roce_v2_ethernet(&ETH, &v4_ip(), &t, &p, &mut buf),
                        Encap::V4Raw => emit_roce_v2(&v4_ip(), &t, &p, &mut buf),
                        Encap::V6 | Encap::V6Csum => emit_roce_v2_ethernet(
                            &ETH,
                            &v6_ip(e == Encap::V6Csum),
                            &t,
                            &p,
                            &mut buf,
                        ),
                        Encap::V1 => emit_roce_v1(&ETH, &sample_grh(), &t, &p, &mut buf),
                        Encap::IbLocal => emit_ib(&sample_lrh(), None, &t, &p, &mut buf),
                        Encap::IbGlobal => {
                            emit_ib(&sample_lrh(), Some(&sample_grh()), &t, &p, &mut buf)
                        }
                    };
                    let err = r.expect_err("buffer too small");
                    assert!(
                        matches!(err.kind, ErrorKind::Truncated { .. }),
                        "{e:?} {n}: {err}"
                    );
                }
            }
        }
    }

    #[test]
    fn builders_refuse_bad_input() {
        let info = Opcode::RC_SEND_ONLY.info().unwrap();
        let (t, p) = sample_packet(info, 4);
        let mut buf = [0u8; 256];
        // Mixed IP versions.
        let ip = RoceV2Ip::new(V4_SRC.into(), V6_DST.into(), 1);
        assert!(emit_roce_v2(&ip, &t, &p, &mut buf).is_err());
        let ip = RoceV2Ip::new(V6_SRC.into(), V4_DST.into(), 1);
        assert!(emit_roce_v2(&ip, &t, &p, &mut buf).is_err());
        // An invalid transport packet is refused by every builder.
        let mut bad = t;
        bad.bth.psn = 1 << 24;
        assert!(emit_roce_v2(&v4_ip(), &bad, &p, &mut buf).is_err());
        assert!(emit_roce_v1(&ETH, &sample_grh(), &bad, &p, &mut buf).is_err());
        assert!(emit_ib(&sample_lrh(), None, &bad, &p, &mut buf).is_err());
        // Too long for native IB (PktLen is 11 bits of words).
        let big = vec![0u8; 8192];
        let (t, _) = sample_packet(info, big.len());
        let mut buf = vec![0u8; 9000];
        let e = emit_ib(&sample_lrh(), None, &t, &big, &mut buf).unwrap_err();
        assert_eq!(e.layer, Layer::Lrh);
        // Too long for UDP.
        let big = vec![0u8; 70_000];
        let (t, _) = sample_packet(info, big.len());
        let mut buf = vec![0u8; 70_200];
        let e = emit_roce_v2(&v4_ip(), &t, &big, &mut buf).unwrap_err();
        assert_eq!(e.layer, Layer::Udp);
        let e = emit_roce_v1(&ETH, &sample_grh(), &t, &big, &mut buf).unwrap_err();
        assert_eq!(e.layer, Layer::Grh);
    }

    #[test]
    fn ipv4_header_fields_follow_roce_v2_ip() {
        let (t, p) = sample_packet(Opcode::RC_ACKNOWLEDGE.info().unwrap(), 0);
        let mut ip = v4_ip();
        ip.traffic_class = 0xb9; // DSCP 46, ECN 1
        ip.hop_limit = 3;
        let mut buf = [0u8; 128];
        let n = emit_roce_v2(&ip, &t, &p, &mut buf).unwrap();
        assert_eq!(buf[1], 0xb9);
        assert_eq!(buf[8], 3);
        assert_eq!(ones_complement_sum(&[&buf[..20]]), 0xffff);
        let d = dissect(LinkType::Ipv4, &buf[..n]).unwrap().unwrap();
        assert!(d.is_good());
    }

    proptest! {
        #[test]
        fn arbitrary_packets_round_trip_in_every_encapsulation(
            (t, p) in arb_packet(),
            e in proptest::sample::select(ENCAPS.to_vec()),
        ) {
            let b = build(e, &t, &p);
            check_outer(&b, t.buffer_len().unwrap());
            let d = good(&b);
            prop_assert_eq!(d.packet.as_ref().unwrap().repr, t);
            prop_assert_eq!(d.payload(), Some(&p[..]));
            prop_assert_eq!(b.bytes[b.bth..b.end].len() % 4, 0);
        }
    }

    #[test]
    fn header_len_matches_emitted_bytes() {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 0);
        for ip in [v4_ip(), v6_ip(false)] {
            let mut buf = [0u8; 128];
            let n = emit_roce_v2(&ip, &t, &p, &mut buf).unwrap();
            assert_eq!(n, ip.header_len() + t.buffer_len().unwrap());
            assert_eq!(buf[ip.header_len()], t.bth.opcode.0);
            assert_eq!(ip.header_len() + bth::HEADER_LEN + 4, n);
        }
    }
}
