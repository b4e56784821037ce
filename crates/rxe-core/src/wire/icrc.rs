//! Invariant CRC (IBTA 7.8.1; RoCE Annex A16.7 and RoCEv2 Annex A17.3.3).
//!
//! The ICRC is CRC-32 as Ethernet computes it (reflected, initial value all
//! ones, final XOR all ones: what `crc32fast` computes) over every byte that
//! no switch or router may change, with the variant fields replaced by ones:
//!
//! 1. the LRH: for a packet with a GRH (and for all RoCE, which has a GRH or
//!    an IP header but no LRH) 8 bytes of 0xFF, since routers rewrite the LRH;
//!    for a native IB local packet (no GRH) the real LRH with only VL set to
//!    ones, since a local packet never crosses a router (IBTA 7.8.1);
//! 2. the network header with its variant fields set to ones: IPv4 TOS, TTL
//!    and header checksum; IPv6 or GRH traffic class, flow label and hop limit;
//! 3. for RoCEv2, the UDP header with its checksum set to ones;
//! 4. the BTH with byte 4 (FECN, BECN, resv6) set to ones;
//! 5. everything after the BTH: extended headers, payload and pad.
//!
//! The result is stored least-significant byte first.

use super::bth;
use super::error::{Error, ErrorKind, Layer, Result};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// What precedes the BTH, which the ICRC covers after masking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcScope<'a> {
    /// RoCEv2: the IPv4 or IPv6 header (whole, with any IPv4 options) and the
    /// 8-byte UDP header.
    RoceV2 {
        ip_header: &'a [u8],
        udp_header: &'a [u8],
    },
    /// RoCEv1, or native IB with a GRH: the 40-byte GRH.
    Grh { grh: &'a [u8] },
    /// Native IB local packet (LNH = IBA local): the 8-byte LRH, covered
    /// except for VL.
    IbLocal { lrh: &'a [u8] },
}

/// The largest network header we mask on the stack: IPv4 with options
/// (60) or IPv6/GRH (40), plus UDP (8).
const MAX_PREFIX: usize = 60 + 8;

/// Computes the ICRC of `transport`: the bytes from the start of the BTH
/// to the end of the pad (the ICRC itself excluded). Returns `None` if the
/// headers are shorter than their fixed parts (the caller parsed them, so
/// this only guards against misuse).
pub fn compute(scope: &IcrcScope<'_>, transport: &[u8]) -> Option<u32> {
    if transport.len() < bth::HEADER_LEN {
        return None;
    }
    let mut h = crc32fast::Hasher::new();
    match *scope {
        IcrcScope::IbLocal { lrh } => {
            let lrh: &[u8; 8] = lrh.try_into().ok()?;
            let mut masked = *lrh;
            masked[0] |= 0xf0; // VL
            h.update(&masked);
        }
        _ => h.update(&[0xff; 8]),
    }
    let mut prefix = [0u8; MAX_PREFIX];
    let n = mask_prefix(scope, &mut prefix)?;
    h.update(&prefix[..n]);
    let mut bth = [0u8; bth::HEADER_LEN];
    bth.copy_from_slice(&transport[..bth::HEADER_LEN]);
    bth[4] = 0xff;
    h.update(&bth);
    h.update(&transport[bth::HEADER_LEN..]);
    Some(h.finalize())
}

/// Copies the network (and UDP) header into `out` with the variant fields
/// set to ones; returns the number of bytes written.
fn mask_prefix(scope: &IcrcScope<'_>, out: &mut [u8; MAX_PREFIX]) -> Option<usize> {
    match *scope {
        IcrcScope::IbLocal { .. } => Some(0),
        IcrcScope::Grh { grh } => {
            let n = grh.len();
            if n != 40 {
                return None;
            }
            out[..n].copy_from_slice(grh);
            mask_ipv6_like(&mut out[..n]);
            Some(n)
        }
        IcrcScope::RoceV2 {
            ip_header,
            udp_header,
        } => {
            let ip_len = ip_header.len();
            if udp_header.len() != 8 || ip_len < 20 || ip_len + 8 > MAX_PREFIX {
                return None;
            }
            out[..ip_len].copy_from_slice(ip_header);
            match ip_header[0] >> 4 {
                4 => {
                    out[1] = 0xff; // TOS (DSCP + ECN)
                    out[8] = 0xff; // TTL
                    out[10] = 0xff; // header checksum
                    out[11] = 0xff;
                }
                6 if ip_len == 40 => mask_ipv6_like(&mut out[..ip_len]),
                _ => return None,
            }
            out[ip_len..ip_len + 8].copy_from_slice(udp_header);
            out[ip_len + 6] = 0xff; // UDP checksum
            out[ip_len + 7] = 0xff;
            Some(ip_len + 8)
        }
    }
}

/// IPv6 and the GRH share a first word (version, traffic class, flow label)
/// and put the hop limit in byte 7.
fn mask_ipv6_like(h: &mut [u8]) {
    h[0] |= 0x0f;
    h[1] = 0xff;
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff;
}

/// Reads the ICRC carried in the last 4 bytes of `transport_with_icrc`.
pub fn carried(transport_with_icrc: &[u8]) -> Option<u32> {
    let n = transport_with_icrc.len();
    let t = transport_with_icrc.get(n.checked_sub(ICRC_LEN)?..)?;
    Some(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Verifies the ICRC at the end of `transport_with_icrc` (BTH .. ICRC).
pub fn verify(scope: &IcrcScope<'_>, transport_with_icrc: &[u8]) -> Result<()> {
    let n = transport_with_icrc.len();
    let needed = bth::HEADER_LEN + ICRC_LEN;
    if n < needed {
        return Err(Error::truncated(Layer::Icrc, needed, n));
    }
    let carried = carried(transport_with_icrc).unwrap_or(0);
    let computed = compute(scope, &transport_with_icrc[..n - ICRC_LEN]).ok_or(Error::new(
        Layer::Icrc,
        ErrorKind::Malformed("headers too short for the ICRC"),
    ))?;
    if computed == carried {
        Ok(())
    } else {
        Err(Error::new(
            Layer::Icrc,
            ErrorKind::BadIcrc { computed, carried },
        ))
    }
}

/// Computes the ICRC of `transport_with_icrc[..len - 4]` and writes it into
/// the last 4 bytes.
pub fn fill(scope: &IcrcScope<'_>, transport_with_icrc: &mut [u8]) -> Option<u32> {
    let n = transport_with_icrc.len().checked_sub(ICRC_LEN)?;
    let crc = compute(scope, &transport_with_icrc[..n])?;
    transport_with_icrc[n..].copy_from_slice(&crc.to_le_bytes());
    Some(crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 5 of captures/rc_pingpong.pcap without its Ethernet header: an
    /// RC Acknowledge that the kernel's rxe sent over IPv4 (ID 0x5e4d).
    const ACK: &str = "450000305e4d40004011c7a50a6300020a630003c16512b7001c0000\
                       1100ffff000000110063c9c81f0000017b930808";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn kernel_rxe_ack_verifies() {
        let b = hex(ACK);
        let s = IcrcScope::RoceV2 {
            ip_header: &b[..20],
            udp_header: &b[20..28],
        };
        verify(&s, &b[28..]).unwrap();
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let base = hex(ACK);
        let split = |b: &[u8]| (b[..20].to_vec(), b[20..28].to_vec(), b[28..].to_vec());
        let (ip, udp, t) = split(&base);
        let scope = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        let want = compute(&scope, &t[..t.len() - 4]).unwrap();
        for (at, v) in [
            (1usize, 0x02u8),
            (8, 0x01),
            (10, 0x12),
            (11, 0x34),
            (26, 0xab),
            (27, 0xcd),
            (32, 0xc0),
            (32, 0x3f),
        ] {
            let mut b = base.clone();
            b[at] = v;
            let (ip, udp, t) = split(&b);
            let s = IcrcScope::RoceV2 {
                ip_header: &ip,
                udp_header: &udp,
            };
            assert_eq!(compute(&s, &t[..t.len() - 4]), Some(want), "byte {at}");
        }
        // The IPv4 Identification is not masked.
        let mut b = base.clone();
        b[5] ^= 1;
        let (ip, udp, t) = split(&b);
        let s = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        assert_ne!(compute(&s, &t[..t.len() - 4]), Some(want));
    }

    #[test]
    fn fill_then_verify() {
        let ip = [
            0x45u8, 0, 0, 0x30, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ];
        let udp = [0xc0u8, 0, 0x12, 0xb7, 0, 0x1c, 0, 0];
        let scope = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        let mut t = [0u8; 20];
        t[0] = 0x11;
        t[2] = 0xff;
        t[3] = 0xff;
        let crc = fill(&scope, &mut t).unwrap();
        assert_eq!(carried(&t), Some(crc));
        verify(&scope, &t).unwrap();
        t[13] ^= 0x80;
        assert!(matches!(
            verify(&scope, &t).unwrap_err().kind,
            ErrorKind::BadIcrc { .. }
        ));
        assert_eq!(
            verify(&scope, &t[..15]).unwrap_err(),
            Error::truncated(Layer::Icrc, 16, 15)
        );
    }

    #[test]
    fn short_headers_are_refused_not_panicking() {
        let s = IcrcScope::RoceV2 {
            ip_header: &[0x45; 10],
            udp_header: &[0; 8],
        };
        assert_eq!(compute(&s, &[0; 12]), None);
        let s = IcrcScope::Grh { grh: &[0x60; 39] };
        assert_eq!(compute(&s, &[0; 12]), None);
        assert_eq!(
            compute(&IcrcScope::IbLocal { lrh: &[0; 8] }, &[0; 11]),
            None
        );
        assert_eq!(
            compute(&IcrcScope::IbLocal { lrh: &[0; 7] }, &[0; 12]),
            None
        );
    }

    #[test]
    fn ib_local_covers_the_lrh_except_vl() {
        let t = [0u8; 12];
        let lrh = [0x02u8, 0x02, 0x00, 0x01, 0x00, 0x05, 0x00, 0x02];
        let base = compute(&IcrcScope::IbLocal { lrh: &lrh }, &t).unwrap();
        let mut vl = lrh;
        vl[0] = 0x72;
        assert_eq!(compute(&IcrcScope::IbLocal { lrh: &vl }, &t), Some(base));
        let mut dlid = lrh;
        dlid[3] = 0x09;
        assert_ne!(compute(&IcrcScope::IbLocal { lrh: &dlid }, &t), Some(base));
    }
}
