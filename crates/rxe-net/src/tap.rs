//! A pcap tap: every packet the port sends or receives, written as the
//! Ethernet frame it was (or would have been) on a wire, with its real IPv4
//! or IPv6 and UDP headers and its ICRC, so that `rxe dissect`, tshark and
//! Wireshark decode it as RoCEv2. The MACs are made up but consistent per
//! IP address (see [`mac_of`]): a UDP socket never sees Ethernet.
//!
//! Two formats: classic pcap, or pcapng (a file named `*.pcapng`, or
//! [`PcapTap::new_pcapng`]), whose Interface Description Block names the
//! device's port and its addresses with their prefix lengths (as the host's
//! interfaces have them), and whose timestamps are in nanoseconds. The port
//! gives the tap its addresses when the capture starts
//! ([`PcapTap::set_addresses`]); the block is written before the first
//! packet, so addresses added later are not in it.

use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rxe_core::wire::build::{ethernet_header, roce_v2_ethertype, EthernetAddrs, ETHERNET_LEN};
use rxe_pcap::{CaptureError, Interface, LinkType, PcapWriter, PcapngWriter};

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

type Out = Box<dyn Write + Send>;

/// Where the frames go.
enum Sink {
    Pcap(PcapWriter<Out>),
    Pcapng {
        writer: PcapngWriter<Out>,
        /// The interface's index once its description block is written.
        interface: Option<u32>,
        describe: Interface,
    },
}

/// Writes frames to a pcap or pcapng file (Ethernet link type).
pub struct PcapTap {
    sink: Sink,
    /// One frame's bytes, reused (no allocation per packet once grown).
    frame: Vec<u8>,
}

impl std::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("PcapTap");
        match &self.sink {
            Sink::Pcap(w) => d.field("pcap", w),
            Sink::Pcapng { writer, .. } => d.field("pcapng", writer),
        };
        d.finish()
    }
}

/// The description of a port with these addresses, for pcapng.
fn interface_of(addrs: &[IpAddr]) -> Interface {
    let list: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    Interface {
        link_type: LinkType::Ethernet,
        name: match addrs.first() {
            Some(a) => format!("rxe:{a}"),
            None => "rxe".into(),
        },
        description: format!(
            "rxe software RoCEv2 port (UDP 4791) on {}",
            if list.is_empty() {
                "no address".to_string()
            } else {
                list.join(", ")
            }
        ),
        addresses: addrs
            .iter()
            .map(|&a| {
                // The prefix the host's interface has for it; a host route
                // when no interface holds it (the capture still says which
                // address).
                let prefix = crate::netif::interface_for_addr(a)
                    .and_then(|i| i.longest_prefix_for(a))
                    .unwrap_or(if a.is_ipv4() { 32 } else { 128 });
                (a, prefix)
            })
            .collect(),
    }
}

impl PcapTap {
    /// Creates (or truncates) `path`: pcapng if its name ends in
    /// `.pcapng`, classic pcap otherwise.
    pub fn create(path: &Path) -> Result<PcapTap, CaptureError> {
        let file = std::fs::File::create(path).map_err(|source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let pcapng = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"));
        if pcapng {
            PcapTap::new_pcapng(BufWriter::new(file), path)
        } else {
            PcapTap::new(BufWriter::new(file), path)
        }
    }

    /// Writes classic pcap to `writer`; `name` names it in errors.
    pub fn new(
        writer: impl Write + Send + 'static,
        name: impl AsRef<Path>,
    ) -> Result<PcapTap, CaptureError> {
        Ok(PcapTap {
            sink: Sink::Pcap(PcapWriter::new(Box::new(writer) as Out, name)?),
            frame: Vec::with_capacity(ETHERNET_LEN + 48 + 4096 + 128),
        })
    }

    /// Writes pcapng to `writer`; `name` names it in errors.
    pub fn new_pcapng(
        writer: impl Write + Send + 'static,
        name: impl AsRef<Path>,
    ) -> Result<PcapTap, CaptureError> {
        Ok(PcapTap {
            sink: Sink::Pcapng {
                writer: PcapngWriter::new(Box::new(writer) as Out, name)?,
                interface: None,
                describe: interface_of(&[]),
            },
            frame: Vec::with_capacity(ETHERNET_LEN + 48 + 4096 + 128),
        })
    }

    /// The port's addresses, for the pcapng interface description (classic
    /// pcap has no place for them). Taken only before the first packet.
    pub fn set_addresses(&mut self, addrs: &[IpAddr]) {
        if let Sink::Pcapng {
            interface: None,
            describe,
            ..
        } = &mut self.sink
        {
            *describe = interface_of(addrs);
        }
    }

    fn write(&mut self, timestamp: Duration) -> Result<(), CaptureError> {
        match &mut self.sink {
            Sink::Pcap(w) => w.write_frame(timestamp, &self.frame),
            Sink::Pcapng {
                writer,
                interface,
                describe,
            } => {
                let i = match interface {
                    Some(i) => *i,
                    None => *interface.insert(writer.add_interface(describe)?),
                };
                writer.write_frame(i, timestamp, &self.frame)
            }
        }
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
        self.write(timestamp)?;
        // Each record goes to the file at once: the drop-in library's
        // device lives in a C program, which may exit() (or crash) without
        // anything of ours running, and a capture must still end with its
        // last packet, not inside it. A capture costs one write per packet.
        self.flush()
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        match &self.sink {
            Sink::Pcap(w) => w.frames(),
            Sink::Pcapng { writer, .. } => writer.frames(),
        }
    }

    pub fn flush(&mut self) -> Result<(), CaptureError> {
        match &mut self.sink {
            Sink::Pcap(w) => w.flush(),
            Sink::Pcapng { writer, .. } => writer.flush(),
        }
    }

    /// Flushes and closes. A pcapng capture without packets still
    /// describes its interface.
    pub fn finish(self) -> Result<(), CaptureError> {
        match self.sink {
            Sink::Pcap(w) => w.finish().map(drop),
            Sink::Pcapng {
                mut writer,
                interface,
                describe,
            } => {
                if interface.is_none() {
                    writer.add_interface(&describe)?;
                }
                writer.finish().map(drop)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::{seal, WireHeaders};
    use rxe_core::wire::dissect::dissect;
    use rxe_core::wire::{ExtReprs, Opcode};
    use rxe_pcap::{CaptureFormat, CaptureReader};
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
        for ext in ["pcap", "pcapng"] {
            let path =
                std::env::temp_dir().join(format!("rxe-tap-unit-{}.{ext}", std::process::id()));
            let mut tap = PcapTap::create(&path).unwrap();
            let lo4 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
            tap.set_addresses(&[lo4, IpAddr::V6(Ipv6Addr::LOCALHOST)]);
            let pairs = [
                (lo4, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
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
            let reader = CaptureReader::open(&path).unwrap();
            let want = if ext == "pcap" {
                CaptureFormat::Pcap
            } else {
                CaptureFormat::PcapNg
            };
            assert_eq!(reader.format(), want);
            let frames: Vec<_> = reader.map(|f| f.unwrap()).collect();
            assert_eq!(frames.len(), 2);
            for (f, (s, d)) in frames.iter().zip(pairs) {
                let d1 = dissect(f.link_type, &f.data).unwrap().expect("RoCE");
                assert!(d1.is_good(), "{:?}", d1.problems());
                assert_eq!(&f.data[..6], &mac_of(d));
                assert_eq!(&f.data[6..12], &mac_of(s));
                assert_eq!(d1.frame.addresses(), Some((s, d)));
            }
            if ext == "pcapng" {
                // The interface description holds 127.0.0.1 with lo's /8.
                let bytes = std::fs::read(&path).unwrap();
                assert!(bytes.windows(8).any(|w| w == [127, 0, 0, 1, 255, 0, 0, 0]));
                assert!(bytes.windows(13).any(|w| w == b"rxe:127.0.0.1"));
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn a_pcapng_capture_without_packets_still_describes_its_port() {
        let mut tap = PcapTap::new_pcapng(Vec::new(), "mem").unwrap();
        tap.set_addresses(&["10.99.0.2".parse().unwrap()]);
        tap.finish().unwrap();
    }

    #[test]
    fn macs_are_local_unicast() {
        let m = mac_of(IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)));
        assert_eq!(m, [2, 0, 0, 99, 0, 2]);
        assert_eq!(m[0] & 1, 0);
    }
}
