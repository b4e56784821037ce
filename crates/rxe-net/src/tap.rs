//! A pcap tap: every packet the port sends or receives, written as the
//! Ethernet frame it was (or would have been) on a wire, with its real IPv4
//! or IPv6 and UDP headers and its ICRC, so that `rxe dissect`, tshark and
//! Wireshark decode it as RoCEv2. The MACs are made up but consistent per
//! IP address (see [`mac_of`]): a UDP socket never sees Ethernet.

use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rxe_core::wire::build::{ethernet_header, roce_v2_ethertype, EthernetAddrs, ETHERNET_LEN};
use rxe_pcap::{CaptureError, PcapWriter};

use crate::encap::WireHeaders;

/// A locally administered unicast MAC for `ip`: 02:00:00 and the last three
/// bytes of the address.
pub fn mac_of(ip: IpAddr) -> [u8; 6] {
    let tail = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            [o[1], o[2], o[3]]
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[13], o[14], o[15]]
        }
    };
    [0x02, 0, 0, tail[0], tail[1], tail[2]]
}

/// Writes frames to a pcap file (Ethernet link type).
pub struct PcapTap {
    writer: PcapWriter<Box<dyn Write + Send>>,
    /// One frame's bytes, reused (no allocation per packet once grown).
    frame: Vec<u8>,
}

impl std::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapTap")
            .field("writer", &self.writer)
            .finish()
    }
}

impl PcapTap {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> Result<PcapTap, CaptureError> {
        let file = std::fs::File::create(path).map_err(|source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        PcapTap::new(BufWriter::new(file), path)
    }

    /// Writes to `writer`; `name` names it in errors.
    pub fn new(
        writer: impl Write + Send + 'static,
        name: impl AsRef<Path>,
    ) -> Result<PcapTap, CaptureError> {
        Ok(PcapTap {
            writer: PcapWriter::new(Box::new(writer) as Box<dyn Write + Send>, name)?,
            frame: Vec::with_capacity(ETHERNET_LEN + 48 + 4096 + 128),
        })
    }

    /// Records one packet: `packet` (BTH .. ICRC) behind `headers`. For
    /// IPv6 the UDP checksum is filled in, as the kernel does on the wire.
    pub fn record(&mut self, headers: &WireHeaders, packet: &[u8]) -> Result<(), CaptureError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.record_at(now, headers, packet)
    }

    /// As `record`, with the time since the Unix epoch given.
    pub fn record_at(
        &mut self,
        timestamp: Duration,
        headers: &WireHeaders,
        packet: &[u8],
    ) -> Result<(), CaptureError> {
        let mut h = *headers;
        if !h.is_ipv4() {
            h.set_udp_checksum(packet);
        }
        let (src, dst) = h.addresses();
        let eth = EthernetAddrs {
            src: mac_of(src),
            dst: mac_of(dst),
        };
        self.frame.clear();
        self.frame
            .extend_from_slice(&ethernet_header(&eth, roce_v2_ethertype(src)));
        self.frame.extend_from_slice(h.ip_header());
        self.frame.extend_from_slice(h.udp_header());
        self.frame.extend_from_slice(packet);
        self.writer.write_frame(timestamp, &self.frame)
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.writer.frames()
    }

    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.writer.flush()
    }

    /// Flushes and closes.
    pub fn finish(self) -> Result<(), CaptureError> {
        self.writer.finish().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::{seal, WireHeaders};
    use rxe_core::wire::dissect::dissect;
    use rxe_core::wire::{ExtReprs, Opcode};
    use rxe_pcap::CaptureReader;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

    fn packet(len: usize) -> Vec<u8> {
        let ext = ExtReprs {
            deth: Some(rxe_core::wire::DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x12,
            }),
            ..Default::default()
        };
        crate::test_packets::packet(Opcode::UD_SEND_ONLY, 0x11, 3, false, ext, &vec![0x5a; len])
    }

    #[test]
    fn frames_dissect_with_good_icrc_and_consistent_macs() {
        let path = std::env::temp_dir().join(format!("rxe-tap-unit-{}.pcap", std::process::id()));
        let mut tap = PcapTap::create(&path).unwrap();
        let pairs = [
            (
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            ),
            (IpAddr::V6(Ipv6Addr::LOCALHOST), "fd00::7".parse().unwrap()),
        ];
        for (s, d) in pairs {
            let mut p = packet(33);
            let h = WireHeaders::outgoing(
                SocketAddr::new(s, 4791),
                SocketAddr::new(d, 4791),
                p.len(),
                64,
                0,
            )
            .unwrap();
            seal(&h, &mut p).unwrap();
            tap.record(&h, &p).unwrap();
        }
        assert_eq!(tap.frames(), 2);
        tap.finish().unwrap();
        let frames: Vec<_> = CaptureReader::open(&path)
            .unwrap()
            .map(|f| f.unwrap())
            .collect();
        assert_eq!(frames.len(), 2);
        for (f, (s, d)) in frames.iter().zip(pairs) {
            let d1 = dissect(f.link_type, &f.data).unwrap().expect("RoCE");
            assert!(d1.is_good(), "{:?}", d1.problems());
            assert_eq!(&f.data[..6], &mac_of(d));
            assert_eq!(&f.data[6..12], &mac_of(s));
            assert_eq!(d1.frame.addresses(), Some((s, d)));
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn macs_are_local_unicast() {
        let m = mac_of(IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)));
        assert_eq!(m, [2, 0, 0, 99, 0, 2]);
        assert_eq!(m[0] & 1, 0);
    }
}
