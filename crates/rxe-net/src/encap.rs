//! RoCEv2 encapsulation as a UDP socket sees it: the kernel writes and
//! strips the IP and UDP headers, yet the ICRC covers them (RoCEv2 Annex
//! A17.3.3). So on send the ICRC is computed over
//! the headers exactly as the kernel will write them, and on receive the
//! headers are rebuilt from what the socket reports (addresses, ports,
//! length, TTL and TOS) before the ICRC is checked:
//!
//! - IPv4 send: version/IHL 0x45, total length, Identification 0 and DF
//!   (what an unconnected socket with `IP_PMTUDISC_DO` writes), protocol 17;
//!   TOS, TTL and header checksum are masked by the ICRC.
//! - IPv4 receive: the socket never reports the Identification, and senders
//!   fill it in differently (kernel rxe: a running counter), so the ICRC is
//!   checked by solving for it (`icrc::solve_ipv4_id`): 16 of the 32 check
//!   bits remain. DF is assumed set (every RoCEv2 capture we have sets it),
//!   unless the port is told the peer may clear it; IP options are assumed
//!   absent (a socket does not report them either).
//! - IPv6: no unknown covered field; the ICRC is fully checked. The flow
//!   label, traffic class and hop limit are masked.
//!
//! The UDP source port is the socket's (4791); receivers accept any.

use std::net::{IpAddr, SocketAddr};

use rxe_core::transport::{is_ce, RecvMeta};
use rxe_core::wire::icrc::{self, IcrcScope, ICRC_LEN};
use rxe_core::wire::ip_udp::{self, RoceV2Ip};
use rxe_core::wire::{bth, grh};

use crate::counters::NetCounter;
use rxe_core::Gid;

/// The shortest RoCEv2 UDP payload: a BTH and an ICRC.
pub const MIN_PACKET: usize = bth::HEADER_LEN + ICRC_LEN;

/// The TTL an IPv4 header is rebuilt with when the socket did not report
/// it (Linux's default, `net.ipv4.ip_default_ttl`); masked by the ICRC.
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// Why a packet could not be encapsulated or was dropped on receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncapError {
    #[error("{len} bytes: a RoCEv2 packet has at least {MIN_PACKET} (BTH and ICRC)")]
    TooShort { len: usize },
    #[error("{len} bytes do not fit in one IP datagram")]
    TooLong { len: usize },
    #[error("source {src} and destination {dst} are of different IP versions")]
    FamilyMismatch { src: IpAddr, dst: IpAddr },
    #[error("the ICRC does not verify")]
    BadIcrc,
}

impl EncapError {
    /// The counter a received packet dropped for this reason goes to.
    pub fn rx_counter(self) -> NetCounter {
        match self {
            EncapError::TooShort { .. } => NetCounter::RcvdTooShort,
            EncapError::TooLong { .. } => NetCounter::RcvdTruncated,
            EncapError::FamilyMismatch { .. } => NetCounter::RcvdNoAddress,
            EncapError::BadIcrc => NetCounter::RcvdBadIcrc,
        }
    }
}

/// The IP fields that the ICRC masks or that the socket chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFields {
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv4 TOS or IPv6 traffic class.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// IPv4 Identification.
    pub ipv4_id: u16,
    /// IPv4 DF.
    pub dont_fragment: bool,
}

impl Default for HeaderFields {
    /// What an unconnected Linux socket with DF writes by default.
    fn default() -> Self {
        HeaderFields {
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
            ipv4_id: 0,
            dont_fragment: true,
        }
    }
}

/// The IP and UDP headers of one RoCEv2 datagram as they are on the wire
/// (UDP checksum 0 unless `set_udp_checksum` is called).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireHeaders {
    /// Room for an IPv6 header: 40 bytes, as the GRH it stands in for.
    ip: [u8; grh::HEADER_LEN],
    ip_len: usize,
    udp: [u8; 8],
}

impl WireHeaders {
    /// The headers of a datagram from `src` to `dst` carrying
    /// `payload_len` bytes of UDP payload.
    pub fn new(
        src: SocketAddr,
        dst: SocketAddr,
        payload_len: usize,
        f: &HeaderFields,
    ) -> Result<WireHeaders, EncapError> {
        let too_long = EncapError::TooLong { len: payload_len };
        let ip = RoceV2Ip {
            dst_port: dst.port(),
            traffic_class: f.traffic_class,
            hop_limit: f.hop_limit,
            flow_label: f.flow_label,
            ipv4_id: f.ipv4_id,
            dont_fragment: f.dont_fragment,
            ..RoceV2Ip::new(src.ip(), dst.ip(), src.port())
        };
        let mut bytes = [0u8; ip_udp::MAX_HEADER_LEN];
        if ip.emit(payload_len, &mut bytes).is_err() {
            // Too long for UDP is reported first, then a family mismatch.
            let fits_udp = payload_len
                .checked_add(8)
                .is_some_and(|n| u16::try_from(n).is_ok());
            return Err(match (src.ip(), dst.ip()) {
                (s, d) if fits_udp && s.is_ipv4() != d.is_ipv4() => {
                    EncapError::FamilyMismatch { src: s, dst: d }
                }
                _ => too_long,
            });
        }
        let ip_len = ip.ip_len();
        let mut headers = WireHeaders {
            ip: [0; grh::HEADER_LEN],
            ip_len,
            udp: [0; 8],
        };
        headers.ip[..ip_len].copy_from_slice(&bytes[..ip_len]);
        headers.udp.copy_from_slice(&bytes[ip_len..ip_len + 8]);
        Ok(headers)
    }

    /// The headers the kernel will write for a datagram sent from an
    /// unconnected RoCE socket (see the module doc).
    pub fn outgoing(
        src: SocketAddr,
        dst: SocketAddr,
        payload_len: usize,
        hop_limit: u8,
        traffic_class: u8,
    ) -> Result<WireHeaders, EncapError> {
        let f = HeaderFields {
            hop_limit,
            traffic_class,
            ..HeaderFields::default()
        };
        WireHeaders::new(src, dst, payload_len, &f)
    }

    /// The same headers for a UDP payload of `payload_len` bytes: the IP
    /// and UDP length fields changed (and the IPv4 header checksum), as
    /// building them again would give, without building them (the WRITE
    /// and the shorter ACK of one GSO message, a stream's last packet).
    pub fn with_payload_len(mut self, payload_len: usize) -> Result<WireHeaders, EncapError> {
        let too_long = EncapError::TooLong { len: payload_len };
        let udp_len = payload_len
            .checked_add(8)
            .and_then(|n| u16::try_from(n).ok())
            .ok_or(too_long)?;
        self.udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        if self.is_ipv4() {
            let total = u16::try_from(usize::from(udp_len) + 20).map_err(|_| too_long)?;
            self.ip[2..4].copy_from_slice(&total.to_be_bytes());
            self.ip[10..12].fill(0);
            let c = ipv4_header_checksum(&self.ip[..20]);
            self.ip[10..12].copy_from_slice(&c.to_be_bytes());
        } else {
            // IPv6 Payload Length: everything after the fixed header.
            self.ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
        }
        Ok(self)
    }

    /// The same headers with IPv4 Identification `id` (IPv6 has none: the
    /// same headers), the header checksum recomputed. Cheaper than
    /// building them again: the data path changes only the ID from packet
    /// to packet of a GSO run, and on receive once the ID is solved.
    pub fn with_ipv4_id(mut self, id: u16) -> WireHeaders {
        if self.is_ipv4() {
            self.ip[4..6].copy_from_slice(&id.to_be_bytes());
            self.ip[10..12].fill(0);
            let c = ipv4_header_checksum(&self.ip[..20]);
            self.ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        self
    }

    /// Whether these headers carry a UDP payload of `payload_len` bytes.
    pub fn carries(&self, payload_len: usize) -> bool {
        usize::from(u16::from_be_bytes([self.udp[4], self.udp[5]])) == payload_len + 8
    }

    /// The IPv4 (20 bytes) or IPv6 (40 bytes) header.
    pub fn ip_header(&self) -> &[u8] {
        &self.ip[..self.ip_len]
    }

    /// The source and destination addresses written in the IP header.
    pub fn addresses(&self) -> (IpAddr, IpAddr) {
        if self.is_ipv4() {
            let at = |i: usize| {
                IpAddr::from([self.ip[i], self.ip[i + 1], self.ip[i + 2], self.ip[i + 3]])
            };
            (at(12), at(16))
        } else {
            let at = |i: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&self.ip[i..i + 16]);
                IpAddr::from(a)
            };
            (at(8), at(24))
        }
    }

    pub fn udp_header(&self) -> &[u8; 8] {
        &self.udp
    }

    pub fn is_ipv4(&self) -> bool {
        self.ip_len == 20
    }

    /// Bytes of IP and UDP header.
    pub fn len(&self) -> usize {
        self.ip_len + 8
    }

    /// Never: there is always an IP and a UDP header.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn icrc_scope(&self) -> IcrcScope<'_> {
        IcrcScope::RoceV2 {
            ip_header: self.ip_header(),
            udp_header: &self.udp,
        }
    }

    /// The 40 bytes a UD receive buffer starts with: for IPv4 20 zero
    /// bytes then the IPv4 header, for IPv6 the IPv6 header (RoCEv2 Annex
    /// A17.4.5.1, unchecked section number).
    pub fn grh_space(&self) -> [u8; grh::HEADER_LEN] {
        let mut g = [0u8; grh::HEADER_LEN];
        if self.is_ipv4() {
            g[20..].copy_from_slice(&self.ip[..20]);
        } else {
            g.copy_from_slice(&self.ip);
        }
        g
    }

    /// Writes the UDP checksum over `payload` (the tap uses it for IPv6,
    /// where the kernel computes one). An all-zero result is sent as 0xFFFF
    /// (RFC 768).
    pub fn set_udp_checksum(&mut self, payload: &[u8]) {
        // None only for a payload longer than UDP allows: then no checksum (0).
        let c = ip_udp::udp_checksum(self.ip_header(), &self.udp, payload).unwrap_or(0);
        self.udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
}

/// The checksum of an IPv4 header (RFC 791) whose checksum field is 0.
fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Fills the ICRC at the end of `packet` (BTH .. pad, then 4 bytes for the
/// ICRC) for the headers `h`; returns it.
pub fn seal(h: &WireHeaders, packet: &mut [u8]) -> Result<u32, EncapError> {
    if packet.len() < MIN_PACKET {
        return Err(EncapError::TooShort { len: packet.len() });
    }
    icrc::fill(&h.icrc_scope(), packet).ok_or(EncapError::TooShort { len: packet.len() })
}

/// What the socket told about a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvInfo {
    pub src: SocketAddr,
    /// The local address (the socket's).
    pub dst: SocketAddr,
    pub hop_limit: Option<u8>,
    pub traffic_class: Option<u8>,
}

/// How strictly received packets are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenOptions {
    /// Accept IPv4 packets whose sender may have cleared DF: the ICRC is then
    /// solved for DF too, leaving 15 check bits instead of 16.
    pub ipv4_df_unknown: bool,
}

/// A received packet that passed its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened<'a> {
    /// BTH .. ICRC, for `Endpoint::handle`.
    pub packet: &'a [u8],
    pub meta: RecvMeta,
    /// The headers as rebuilt (IPv4: with the solved Identification).
    pub headers: WireHeaders,
    /// IPv4 only: the sender had DF clear.
    pub ipv4_df_clear: bool,
}

/// Checks a received UDP payload and rebuilds what the engine and the UD
/// GRH space need (see the module doc).
pub fn open<'a>(
    payload: &'a [u8],
    info: &RecvInfo,
    opts: OpenOptions,
) -> Result<Opened<'a>, EncapError> {
    open_after(payload, info, opts, &mut None)
}

/// [`open`] for one of many packets: `last` holds the headers built for
/// the packet before (with the `info` they were built for), which serve
/// again when this one came with the same addresses, TTL and TOS (the
/// segments of a GRO datagram, the packets of a stream; another length is
/// patched in), so that the IP and UDP headers are not built again per
/// packet, only the IPv4 ID solved. Start with `None`.
pub fn open_after<'a>(
    payload: &'a [u8],
    info: &RecvInfo,
    opts: OpenOptions,
    last: &mut Option<(RecvInfo, WireHeaders)>,
) -> Result<Opened<'a>, EncapError> {
    if payload.len() < MIN_PACKET {
        return Err(EncapError::TooShort { len: payload.len() });
    }
    let mut f = received_fields(info);
    let mut headers = match *last {
        Some((i, h)) if i == *info && h.carries(payload.len()) => h,
        Some((i, h)) if i == *info => {
            let h = h.with_payload_len(payload.len())?;
            *last = Some((*info, h));
            h
        }
        _ => {
            let h = WireHeaders::new(info.src, info.dst, payload.len(), &f)?;
            *last = Some((*info, h));
            h
        }
    };
    let mut ipv4_df_clear = false;
    if headers.is_ipv4() {
        let ip: &[u8; 20] = headers.ip[..20]
            .try_into()
            .map_err(|_| EncapError::BadIcrc)?;
        let (id, df) = if opts.ipv4_df_unknown {
            let s =
                icrc::solve_ipv4_id_any_df(ip, &headers.udp, payload).ok_or(EncapError::BadIcrc)?;
            (s.id, s.df_as_given)
        } else {
            (
                icrc::solve_ipv4_id(ip, &headers.udp, payload).ok_or(EncapError::BadIcrc)?,
                true,
            )
        };
        ipv4_df_clear = !df;
        headers = if df {
            headers.with_ipv4_id(id)
        } else {
            f.ipv4_id = id;
            f.dont_fragment = df;
            WireHeaders::new(info.src, info.dst, payload.len(), &f)?
        };
    } else {
        icrc::verify(&headers.icrc_scope(), payload).map_err(|_| EncapError::BadIcrc)?;
    }
    let meta = RecvMeta {
        sgid: Gid::from(info.src.ip()),
        dgid: Gid::from(info.dst.ip()),
        grh: headers.grh_space(),
        // The kernel reports the TOS / traffic class of each datagram
        // (IP_RECVTOS / IPV6_RECVTCLASS); GRO coalesces only datagrams
        // with equal ones, so every segment of a batch shares it.
        ce: info.traffic_class.is_some_and(is_ce),
    };
    Ok(Opened {
        packet: payload,
        meta,
        headers,
        ipv4_df_clear,
    })
}

/// What the kernel reported of a received datagram's headers (IPv4: ID
/// 0 and DF, until `open_after` solves them).
fn received_fields(info: &RecvInfo) -> HeaderFields {
    HeaderFields {
        hop_limit: info.hop_limit.unwrap_or(DEFAULT_HOP_LIMIT),
        traffic_class: info.traffic_class.unwrap_or(0),
        ..HeaderFields::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rxe_core::wire::build::{emit_roce_v2, RoceV2Ip};
    use rxe_core::wire::{ExtReprs, Opcode, TransportRepr};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn sa(ip: IpAddr, port: u16) -> SocketAddr {
        SocketAddr::new(ip, port)
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn send_only(payload: &[u8]) -> Vec<u8> {
        let ext = ExtReprs::default();
        crate::test_packets::packet(Opcode::RC_SEND_ONLY, 0x15, 77, true, ext, payload)
    }

    /// The one's complement sum of `parts` (etherparse's): a header or
    /// datagram with a right checksum sums to 0xFFFF.
    fn sum(parts: &[&[u8]]) -> u16 {
        let mut s = etherparse::checksum::Sum16BitWords::new();
        for p in parts {
            s = s.add_slice(p);
        }
        !s.ones_complement()
    }

    fn ipv4_checksum_ok(h: &[u8]) -> bool {
        sum(&[h]) == 0xffff
    }

    /// A packet sealed for `src` -> `dst` with IPv4 ID `id`.
    fn sealed(src: SocketAddr, dst: SocketAddr, payload: &[u8], id: u16) -> Vec<u8> {
        let mut p = send_only(payload);
        let h = WireHeaders::outgoing(src, dst, p.len(), 64, 0)
            .unwrap()
            .with_ipv4_id(id);
        seal(&h, &mut p).unwrap();
        p
    }

    #[test]
    fn headers_built_for_one_packet_serve_the_next_only_when_they_fit_it() {
        let (a, b, c) = (v4(127, 0, 0, 1), v4(127, 0, 0, 2), v4(127, 0, 0, 3));
        let info = |src: IpAddr| RecvInfo {
            src: sa(src, 49152),
            dst: sa(b, 4791),
            hop_limit: Some(64),
            traffic_class: Some(0),
        };
        let opts = OpenOptions::default();
        let mut last = None;
        // The same addresses and length, other IDs (a GRO datagram's
        // segments), then another length, another source, and a bad ICRC.
        let packets = [
            (a, sealed(sa(a, 49152), sa(b, 4791), b"segment 1", 7)),
            (a, sealed(sa(a, 49152), sa(b, 4791), b"segment 2", 8)),
            (
                a,
                sealed(sa(a, 49152), sa(b, 4791), b"a longer last one", 9),
            ),
            (c, sealed(sa(c, 49152), sa(b, 4791), b"another source", 9)),
        ];
        for (src, p) in &packets {
            let alone = open(p, &info(*src), opts).expect("opens alone");
            let after = open_after(p, &info(*src), opts, &mut last).expect("opens after another");
            assert_eq!(after, alone);
            let (i, h) = last.expect("headers kept");
            assert_eq!(i, info(*src));
            assert!(h.carries(p.len()));
        }
        let mut bad = packets[3].1.clone();
        let at = bad.len() - 6;
        bad[at] ^= 1;
        assert_eq!(
            open_after(&bad, &info(c), opts, &mut last),
            Err(EncapError::BadIcrc)
        );
        // A packet from `a` after headers kept for `c`: said to come from
        // `c` it fails, as alone; from `a`, its headers are built again.
        let p = &packets[0].1;
        assert_eq!(open(p, &info(c), opts), Err(EncapError::BadIcrc));
        assert_eq!(
            open_after(p, &info(c), opts, &mut last),
            Err(EncapError::BadIcrc)
        );
        assert!(open_after(p, &info(a), opts, &mut last).is_ok());
    }

    #[test]
    fn sealed_ipv4_matches_the_wire_builder_and_opens() {
        let (a, b) = (v4(127, 0, 0, 1), v4(127, 0, 0, 2));
        let mut p = send_only(b"hello, rdma");
        let h = WireHeaders::outgoing(sa(a, 4791), sa(b, 4791), p.len(), 64, 0).unwrap();
        assert!(ipv4_checksum_ok(h.ip_header()));
        let crc = seal(&h, &mut p).unwrap();
        // rxe-core's frame builder writes the same headers (ID 0, DF, TTL 64).
        let ip = RoceV2Ip::new(a, b, 4791);
        let mut frame = vec![0; 28 + p.len()];
        let bth = rxe_core::wire::TransportRepr::parse(&p).unwrap().repr;
        emit_roce_v2(&ip, &bth, b"hello, rdma", &mut frame).unwrap();
        assert_eq!(&frame[..20], h.ip_header());
        assert_eq!(&frame[20..28], h.udp_header());
        assert_eq!(&frame[28..], &p[..]);
        assert_eq!(icrc::carried(&p), Some(crc));

        let info = RecvInfo {
            src: sa(a, 4791),
            dst: sa(b, 4791),
            hop_limit: Some(61),
            traffic_class: Some(0x02),
        };
        let o = open(&p, &info, OpenOptions::default()).unwrap();
        assert_eq!(o.packet, &p[..]);
        assert_eq!(o.meta.sgid, Gid::from(a));
        assert_eq!(o.meta.dgid, Gid::from(b));
        assert_eq!(&o.meta.grh[..20], &[0; 20]);
        let g = &o.meta.grh[20..];
        assert_eq!(&g[4..6], &[0, 0], "solved ID 0");
        assert_eq!(g[8], 61);
        assert_eq!(g[1], 0x02);
        assert!(ipv4_checksum_ok(g));
        assert!(!o.ipv4_df_clear);
    }

    /// Frame 5 of the golden captures/rc_pingpong.pcap without Ethernet: an
    /// ACK that kernel rxe sent with IPv4 ID 0x5e4d, from UDP port 0xc165.
    fn kernel_ack() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../integration/testdata/captures/rc_pingpong.pcap"
        );
        let frame = rxe_pcap::CaptureReader::open(path.as_ref())
            .unwrap()
            .nth(4)
            .unwrap()
            .unwrap();
        frame.data[14..].to_vec()
    }

    #[test]
    fn kernel_rxe_packet_opens_and_its_header_is_rebuilt_exactly() {
        let b = kernel_ack();
        assert_eq!(&b[4..6], &[0x5e, 0x4d], "the ACK of frame 5");
        let info = RecvInfo {
            src: sa(v4(10, 99, 0, 2), 0xc165),
            dst: sa(v4(10, 99, 0, 3), 4791),
            hop_limit: Some(64),
            traffic_class: Some(0),
        };
        let o = open(&b[28..], &info, OpenOptions::default()).unwrap();
        assert_eq!(o.headers.ip_header(), &b[..20]);
        assert_eq!(&o.meta.grh[20..], &b[..20]);
        // Corrupt one payload bit: dropped as bad ICRC.
        let mut c = b.clone();
        c[40] ^= 0x10;
        assert_eq!(
            open(&c[28..], &info, OpenOptions::default()),
            Err(EncapError::BadIcrc)
        );
        // Another source port is another UDP header: the ICRC covers it.
        let other = RecvInfo {
            src: sa(v4(10, 99, 0, 2), 0xc166),
            ..info
        };
        assert_eq!(
            open(&b[28..], &other, OpenOptions::default()),
            Err(EncapError::BadIcrc)
        );
    }

    #[test]
    fn with_ipv4_id_equals_building_with_it() {
        let (a, b) = (sa(v4(10, 0, 0, 1), 4791), sa(v4(10, 0, 0, 2), 4791));
        for id in [0u16, 1, 2, 63, 0x5e4d, 0xffff] {
            for (ttl, tos) in [(64, 0), (1, 0xfe), (255, 0x28)] {
                let f = HeaderFields {
                    hop_limit: ttl,
                    traffic_class: tos,
                    ipv4_id: id,
                    ..HeaderFields::default()
                };
                let built = WireHeaders::new(a, b, 4128, &f).unwrap();
                let patched = WireHeaders::outgoing(a, b, 4128, ttl, tos)
                    .unwrap()
                    .with_ipv4_id(id);
                assert_eq!(patched, built, "ID {id}");
                assert!(ipv4_checksum_ok(patched.ip_header()));
            }
        }
        let a6 = sa(IpAddr::V6(Ipv6Addr::LOCALHOST), 4791);
        let h = WireHeaders::outgoing(a6, a6, 100, 64, 0).unwrap();
        assert_eq!(h.with_ipv4_id(7), h);
    }

    #[test]
    fn df_clear_senders_need_the_option() {
        let (a, b) = (v4(127, 0, 0, 1), v4(127, 0, 0, 2));
        let mut p = send_only(&[1, 2, 3, 4]);
        let f = HeaderFields {
            dont_fragment: false,
            ipv4_id: 0x4242,
            ..HeaderFields::default()
        };
        let h = WireHeaders::new(sa(a, 4791), sa(b, 4791), p.len(), &f).unwrap();
        seal(&h, &mut p).unwrap();
        let info = RecvInfo {
            src: sa(a, 4791),
            dst: sa(b, 4791),
            hop_limit: None,
            traffic_class: None,
        };
        assert_eq!(
            open(&p, &info, OpenOptions::default()),
            Err(EncapError::BadIcrc)
        );
        let o = open(
            &p,
            &info,
            OpenOptions {
                ipv4_df_unknown: true,
            },
        )
        .unwrap();
        assert!(o.ipv4_df_clear);
        assert_eq!(o.headers, h);
    }

    #[test]
    fn ipv6_is_fully_checked() {
        let a = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let b: IpAddr = "fd00::2".parse().unwrap();
        let mut p = send_only(&[9; 100]);
        let h = WireHeaders::outgoing(sa(a, 4791), sa(b, 4791), p.len(), 5, 0x20).unwrap();
        seal(&h, &mut p).unwrap();
        // The builder in rxe-core agrees (checksum 0 there, masked anyway).
        let mut ip = RoceV2Ip::new(a, b, 4791);
        ip.hop_limit = 5;
        ip.traffic_class = 0x20;
        let mut frame = vec![0; 48 + p.len()];
        let t = TransportRepr::parse(&p).unwrap().repr;
        emit_roce_v2(&ip, &t, &[9; 100], &mut frame).unwrap();
        assert_eq!(&frame[..40], h.ip_header());
        assert_eq!(&frame[48..], &p[..]);
        let info = RecvInfo {
            src: sa(a, 4791),
            dst: sa(b, 4791),
            hop_limit: Some(5),
            traffic_class: Some(0x20),
        };
        let o = open(&p, &info, OpenOptions::default()).unwrap();
        assert_eq!(&o.meta.grh[..], h.ip_header());
        assert!(!o.meta.ce);
        // Masked: another hop limit and traffic class still verify; ECN
        // bits 11 (a switch's CE mark) tell the engine.
        let masked = RecvInfo {
            hop_limit: None,
            traffic_class: Some(0x20 | 3),
            ..info
        };
        assert!(open(&p, &masked, OpenOptions::default()).unwrap().meta.ce);
        let ect = RecvInfo {
            traffic_class: Some(0x20 | 2),
            ..info
        };
        assert!(!open(&p, &ect, OpenOptions::default()).unwrap().meta.ce);
        let mut c = p.clone();
        c[20] ^= 1;
        assert_eq!(
            open(&c, &info, OpenOptions::default()),
            Err(EncapError::BadIcrc)
        );
    }

    #[test]
    fn udp_checksums_are_right() {
        // A known IPv4/UDP datagram checksum: verify by summing with it.
        let (a, b) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2));
        let payload = [1u8, 2, 3, 4, 5];
        let mut h = WireHeaders::outgoing(sa(a, 1000), sa(b, 4791), payload.len(), 64, 0).unwrap();
        h.set_udp_checksum(&payload);
        let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 13];
        assert_eq!(sum(&[&pseudo, &h.udp, &payload]), 0xffff);
        let a6: IpAddr = "fd00::1".parse().unwrap();
        let b6: IpAddr = "fd00::2".parse().unwrap();
        let mut h =
            WireHeaders::outgoing(sa(a6, 1000), sa(b6, 4791), payload.len(), 64, 0).unwrap();
        h.set_udp_checksum(&payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&h.ip[8..40]);
        pseudo.extend_from_slice(&[0, 0, 0, 13, 0, 0, 0, 17]);
        assert_eq!(sum(&[&pseudo, &h.udp, &payload]), 0xffff);
    }

    #[test]
    fn refusals() {
        let a = sa(v4(127, 0, 0, 1), 4791);
        let b6 = sa(IpAddr::V6(Ipv6Addr::LOCALHOST), 4791);
        assert!(matches!(
            WireHeaders::outgoing(a, b6, 20, 64, 0),
            Err(EncapError::FamilyMismatch { .. })
        ));
        assert_eq!(
            WireHeaders::outgoing(a, a, 65_508, 64, 0),
            Err(EncapError::TooLong { len: 65_508 })
        );
        assert!(WireHeaders::outgoing(a, a, 65_507, 64, 0).is_ok());
        let h = WireHeaders::outgoing(a, a, 10, 64, 0).unwrap();
        assert_eq!(
            seal(&h, &mut [0; 15]),
            Err(EncapError::TooShort { len: 15 })
        );
        let info = RecvInfo {
            src: a,
            dst: b6,
            hop_limit: None,
            traffic_class: None,
        };
        assert!(matches!(
            open(&[0; 20], &info, OpenOptions::default()),
            Err(EncapError::FamilyMismatch { .. })
        ));
        assert_eq!(
            open(&[0; 15], &info, OpenOptions::default()),
            Err(EncapError::TooShort { len: 15 })
        );
    }

    proptest! {
        /// Patching the length gives what building for it gives, for both
        /// families and every field, and refuses what building refuses.
        #[test]
        fn with_payload_len_equals_building_for_it(
            v6 in any::<bool>(),
            from in 0usize..70_000,
            to in 0usize..70_000,
            ttl in any::<u8>(),
            tos in any::<u8>(),
            flow_label in 0u32..0x10_0000,
            ipv4_id in any::<u16>(),
            dont_fragment in any::<bool>(),
        ) {
            let (s, d) = if v6 {
                (IpAddr::V6(Ipv6Addr::LOCALHOST), IpAddr::V6("fd99::2".parse().unwrap()))
            } else {
                (v4(10, 99, 0, 1), v4(10, 99, 0, 2))
            };
            let (s, d) = (sa(s, 49152), sa(d, 4791));
            let f = HeaderFields { hop_limit: ttl, traffic_class: tos, flow_label, ipv4_id, dont_fragment };
            if let Ok(h) = WireHeaders::new(s, d, from, &f) {
                let built = WireHeaders::new(s, d, to, &f);
                prop_assert_eq!(h.with_payload_len(to).ok(), built.ok());
                if let Ok(p) = h.with_payload_len(to) {
                    prop_assert!(p.carries(to));
                    prop_assert!(v6 || ipv4_checksum_ok(p.ip_header()));
                }
            }
        }

        #[test]
        fn open_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), v6 in any::<bool>()) {
            let (s, d) = if v6 {
                (IpAddr::V6(Ipv6Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST))
            } else {
                (v4(127, 0, 0, 1), v4(127, 0, 0, 2))
            };
            let info = RecvInfo { src: sa(s, 1), dst: sa(d, 4791), hop_limit: None, traffic_class: None };
            let r = open(&bytes, &info, OpenOptions { ipv4_df_unknown: true });
            if bytes.len() < MIN_PACKET {
                prop_assert!(r.is_err());
            }
        }
    }
}
