//! [`PcapngWriter`]: frames to a pcapng file, with a description of each
//! interface they were captured on (name, description, addresses).
//!
//! The blocks, as the pcapng specification (IETF draft
//! `draft-ietf-opsawg-pcapng`) lays them out, all in native byte order
//! (readers tell it from the Section Header's byte-order magic), every
//! block and option padded to 32 bits:
//!
//! - Section Header Block (type 0x0A0D0D0A): byte-order magic 0x1A2B3C4D,
//!   version 1.0, section length -1 (not computed), option `shb_userappl`;
//! - Interface Description Block (type 1), one per [`Interface`]: link type,
//!   snapshot length, options `if_name`, `if_description`, one
//!   `if_IPv4addr` (address and netmask) or `if_IPv6addr` (address and
//!   prefix length) per address, and `if_tsresol` 9 (nanoseconds);
//! - Enhanced Packet Block (type 6) per frame: the interface's index, the
//!   64-bit timestamp in nanoseconds, captured and original lengths, the
//!   bytes.

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::CaptureError;
use crate::writer::PCAP_SNAPLEN;
use crate::LinkType;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

const OPT_END: u16 = 0;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_IPV4ADDR: u16 = 4;
const IF_IPV6ADDR: u16 = 5;
const IF_TSRESOL: u16 = 9;
/// `if_tsresol` 9: timestamps count nanoseconds (10^-9 s).
const TSRESOL_NANOS: u8 = 9;

/// One interface of a capture, as its Interface Description Block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub link_type: LinkType,
    /// `if_name` (empty: not written).
    pub name: String,
    /// `if_description` (empty: not written).
    pub description: String,
    /// Its addresses with their prefix lengths.
    pub addresses: Vec<(IpAddr, u8)>,
}

/// Writes frames to a pcapng file: one section, the interfaces added with
/// [`add_interface`](Self::add_interface), Enhanced Packet Blocks with
/// nanosecond timestamps.
///
/// [`create`](Self::create) buffers the file: call [`finish`](Self::finish)
/// (or [`flush`](Self::flush)) to see write errors, which a drop would
/// swallow.
pub struct PcapngWriter<W: Write = BufWriter<File>> {
    writer: W,
    path: PathBuf,
    interfaces: Vec<LinkType>,
    frames: u64,
    /// One block's bytes, reused.
    block: Vec<u8>,
}

impl<W: Write> fmt::Debug for PcapngWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapngWriter")
            .field("path", &self.path)
            .field("interfaces", &self.interfaces)
            .field("frames", &self.frames)
            .finish()
    }
}

impl PcapngWriter<BufWriter<File>> {
    /// Creates (or truncates) a pcapng file and writes its Section Header.
    pub fn create(path: &Path) -> Result<Self, CaptureError> {
        let file = File::create(path).map_err(|source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        PcapngWriter::new(BufWriter::new(file), path)
    }
}

/// Appends one option (code, length, value padded to 32 bits).
fn option(b: &mut Vec<u8>, code: u16, value: &[u8]) {
    // Options are at most 65 535 bytes; longer values are cut (only a name
    // or description could be that long).
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    b.extend_from_slice(&code.to_ne_bytes());
    b.extend_from_slice(&(value.len() as u16).to_ne_bytes());
    b.extend_from_slice(value);
    b.resize(b.len().next_multiple_of(4), 0);
}

/// Starts a block of `kind` in `b` (its total length filled by `end`).
fn begin(b: &mut Vec<u8>, kind: u32) {
    b.clear();
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
}

/// Ends the block: options end, total length at both ends.
fn end(b: &mut Vec<u8>, with_options: bool) {
    if with_options {
        option(b, OPT_END, &[]);
    }
    let total = (b.len() + 4) as u32;
    b[4..8].copy_from_slice(&total.to_ne_bytes());
    b.extend_from_slice(&total.to_ne_bytes());
}

fn netmask_v4(prefix: u8) -> [u8; 4] {
    let m = u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0);
    m.to_be_bytes()
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the Section Header Block to `writer`; `name` is used in error
    /// messages.
    pub fn new(writer: W, name: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let mut w = PcapngWriter {
            writer,
            path: name.as_ref().to_path_buf(),
            interfaces: Vec::new(),
            frames: 0,
            block: Vec::with_capacity(4096 + 64),
        };
        let mut b = std::mem::take(&mut w.block);
        begin(&mut b, SHB);
        b.extend_from_slice(&BYTE_ORDER_MAGIC.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&(-1i64).to_ne_bytes());
        option(&mut b, SHB_USERAPPL, b"rxe (software RoCEv2 NIC)");
        end(&mut b, true);
        w.put(&b)?;
        w.block = b;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        self.writer
            .write_all(bytes)
            .map_err(|source| CaptureError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes an Interface Description Block; returns the interface's index
    /// for [`write_frame`](Self::write_frame).
    pub fn add_interface(&mut self, i: &Interface) -> Result<u32, CaptureError> {
        let index =
            u32::try_from(self.interfaces.len()).map_err(|_| CaptureError::CannotWrite {
                path: self.path.clone(),
                frame: self.frames + 1,
                reason: "too many interfaces".into(),
            })?;
        let mut b = std::mem::take(&mut self.block);
        begin(&mut b, IDB);
        let link = u16::try_from(i.link_type.number()).unwrap_or(u16::MAX);
        b.extend_from_slice(&link.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&PCAP_SNAPLEN.to_ne_bytes());
        if !i.name.is_empty() {
            option(&mut b, IF_NAME, i.name.as_bytes());
        }
        if !i.description.is_empty() {
            option(&mut b, IF_DESCRIPTION, i.description.as_bytes());
        }
        for &(addr, prefix) in &i.addresses {
            match addr {
                IpAddr::V4(v4) => {
                    let mut v = [0u8; 8];
                    v[..4].copy_from_slice(&v4.octets());
                    v[4..].copy_from_slice(&netmask_v4(prefix));
                    option(&mut b, IF_IPV4ADDR, &v);
                }
                IpAddr::V6(v6) => {
                    let mut v = [0u8; 17];
                    v[..16].copy_from_slice(&v6.octets());
                    v[16] = prefix.min(128);
                    option(&mut b, IF_IPV6ADDR, &v);
                }
            }
        }
        option(&mut b, IF_TSRESOL, &[TSRESOL_NANOS]);
        end(&mut b, true);
        let r = self.put(&b);
        self.block = b;
        r?;
        self.interfaces.push(i.link_type);
        Ok(index)
    }

    /// The link types of the interfaces added so far, by index.
    pub fn interfaces(&self) -> &[LinkType] {
        &self.interfaces
    }

    /// Number of frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Appends one frame captured on interface `interface` at `timestamp`
    /// (since the Unix epoch, kept to the nanosecond). A frame longer than
    /// [`PCAP_SNAPLEN`] is cut to it; its original length is kept.
    pub fn write_frame(
        &mut self,
        interface: u32,
        timestamp: Duration,
        data: &[u8],
    ) -> Result<(), CaptureError> {
        let frame = self.frames + 1;
        let cannot = |reason: String| CaptureError::CannotWrite {
            path: self.path.clone(),
            frame,
            reason,
        };
        if usize::try_from(interface).map_or(true, |i| i >= self.interfaces.len()) {
            return Err(cannot(format!("no interface {interface} was described")));
        }
        let ts = u64::try_from(timestamp.as_nanos())
            .map_err(|_| cannot("timestamp past 64-bit nanoseconds".into()))?;
        let orig_len = u32::try_from(data.len())
            .map_err(|_| cannot(format!("{} bytes do not fit a 32-bit length", data.len())))?;
        let incl = orig_len.min(PCAP_SNAPLEN);
        let mut b = std::mem::take(&mut self.block);
        begin(&mut b, EPB);
        b.extend_from_slice(&interface.to_ne_bytes());
        b.extend_from_slice(&((ts >> 32) as u32).to_ne_bytes());
        b.extend_from_slice(&(ts as u32).to_ne_bytes());
        b.extend_from_slice(&incl.to_ne_bytes());
        b.extend_from_slice(&orig_len.to_ne_bytes());
        b.extend_from_slice(&data[..incl as usize]);
        b.resize(b.len().next_multiple_of(4), 0);
        end(&mut b, false);
        let r = self.put(&b);
        self.block = b;
        r?;
        self.frames = frame;
        Ok(())
    }

    /// Flushes buffered blocks to the underlying writer.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.writer.flush().map_err(|source| CaptureError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, CaptureError> {
        self.flush()?;
        Ok(self.writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;
    use crate::CaptureFormat;
    use crate::CaptureReader;

    fn lo() -> Interface {
        Interface {
            link_type: LinkType::Ethernet,
            name: "rxe0".into(),
            description: "rxe on 127.0.0.1".into(),
            addresses: vec![
                ("127.0.0.1".parse().unwrap(), 8),
                ("::1".parse().unwrap(), 128),
            ],
        }
    }

    #[test]
    fn round_trip_with_two_interfaces_and_nanoseconds() {
        let mut w = PcapngWriter::new(Vec::new(), "mem").unwrap();
        let a = w.add_interface(&lo()).unwrap();
        let raw = Interface {
            link_type: LinkType::RawIp,
            name: String::new(),
            description: String::new(),
            addresses: Vec::new(),
        };
        let b = w.add_interface(&raw).unwrap();
        assert_eq!((a, b), (0, 1));
        let t = Duration::new(1_700_000_000, 123_456_789);
        w.write_frame(a, t, &[1; 61]).unwrap();
        w.write_frame(b, t + Duration::from_nanos(1), b"ip")
            .unwrap();
        w.write_frame(a, Duration::ZERO, &[]).unwrap();
        assert_eq!(w.frames(), 3);
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(
            read_ok(&bytes),
            [
                frame(1, LinkType::Ethernet, t, &[1; 61]),
                frame(2, LinkType::RawIp, t + Duration::from_nanos(1), b"ip"),
                frame(3, LinkType::Ethernet, Duration::ZERO, &[]),
            ]
        );
    }

    #[test]
    fn the_file_is_pcapng_and_names_the_addresses() {
        let file = TempFile::path("written.pcapng");
        let mut w = PcapngWriter::create(&file.0).unwrap();
        w.add_interface(&lo()).unwrap();
        w.write_frame(0, Duration::from_secs(3), b"x").unwrap();
        w.finish().unwrap();
        let r = CaptureReader::open(&file.0).unwrap();
        assert_eq!(r.format(), CaptureFormat::PcapNg);
        let bytes = std::fs::read(&file.0).unwrap();
        // if_IPv4addr: 127.0.0.1 and 255.0.0.0, right after its option header.
        let v4 = [127, 0, 0, 1, 255, 0, 0, 0];
        let at = bytes.windows(8).position(|w| w == v4).expect("if_IPv4addr");
        assert_eq!(&bytes[at - 4..at - 2], &IF_IPV4ADDR.to_ne_bytes());
        let mut v6 = [0u8; 17];
        v6[15] = 1;
        v6[16] = 128;
        assert!(bytes.windows(17).any(|w| w == v6), "if_IPv6addr");
        assert!(bytes.windows(4).any(|w| w == b"rxe0"));
    }

    #[test]
    fn frames_need_a_described_interface_and_are_cut_at_snaplen() {
        let mut w = PcapngWriter::new(Vec::new(), "mem").unwrap();
        let err = w.write_frame(0, Duration::ZERO, b"x").unwrap_err();
        assert!(
            matches!(err, CaptureError::CannotWrite { frame: 1, .. }),
            "{err:?}"
        );
        w.add_interface(&lo()).unwrap();
        let big = vec![7u8; PCAP_SNAPLEN as usize + 3];
        w.write_frame(0, Duration::from_secs(1), &big).unwrap();
        let frames = read_ok(&w.finish().unwrap());
        assert_eq!(frames[0].data.len(), PCAP_SNAPLEN as usize);
        assert_eq!(frames[0].orig_len, PCAP_SNAPLEN + 3);
    }

    #[test]
    fn netmasks() {
        assert_eq!(netmask_v4(8), [255, 0, 0, 0]);
        assert_eq!(netmask_v4(0), [0, 0, 0, 0]);
        assert_eq!(netmask_v4(32), [255; 4]);
        assert_eq!(netmask_v4(99), [255; 4]);
        assert_eq!(netmask_v4(20), [255, 255, 240, 0]);
    }
}
