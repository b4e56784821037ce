//! [`CaptureReader`]: the frames of a pcap or pcapng file, one at a time.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapReader, RawPcapPacket};
use pcap_file::pcapng::blocks::{ENHANCED_PACKET_BLOCK, PACKET_BLOCK, SIMPLE_PACKET_BLOCK};
use pcap_file::pcapng::{PcapNgReader, RawBlock};
use pcap_file::{PcapError, TsResolution};

use crate::error::CaptureError;
use crate::pcapng::{ng_timestamp, parse_packet_block};
use crate::LinkType;

/// One packet record of a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The frame number, counting packet records from 1 as Wireshark does.
    pub number: u64,
    /// The link layer of `data` (per interface in pcapng).
    pub link_type: LinkType,
    /// Time since the Unix epoch (zero for a pcapng Simple Packet Block, which has none).
    pub timestamp: Duration,
    /// The bytes captured, starting with the link-layer header.
    pub data: Vec<u8>,
    /// The length of the packet on the wire; larger than `data.len()` if the capture cut it.
    pub orig_len: u32,
}

/// The container format of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap (libpcap, tcpdump).
    Pcap,
    /// pcapng (Wireshark, dumpcap).
    PcapNg,
}

const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xa1, 0xb2, 0xc3, 0xd4], // microseconds, big endian
    [0xd4, 0xc3, 0xb2, 0xa1], // microseconds, little endian
    [0xa1, 0xb2, 0x3c, 0x4d], // nanoseconds, big endian
    [0x4d, 0x3c, 0xb2, 0xa1], // nanoseconds, little endian
];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// The boxed byte source under both readers.
type Source = io::Chain<io::Cursor<Vec<u8>>, Counting>;

/// Counts the bytes read from the underlying reader, for error messages.
struct Counting {
    inner: Box<dyn Read + Send>,
    count: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

enum Inner {
    Pcap {
        reader: PcapReader<Source>,
        header: PcapHeader,
        link_type: LinkType,
    },
    PcapNg(PcapNgReader<Source>),
}

/// Reads the frames of a pcap or pcapng capture, one at a time.
///
/// Use [`next_frame`](Self::next_frame), or iterate: the iterator yields
/// `Result<Frame, CaptureError>` and ends after the first error.
///
/// ```no_run
/// # fn main() -> Result<(), rxe_pcap::CaptureError> {
/// use rxe_pcap::CaptureReader;
///
/// let mut reader = CaptureReader::open("trace.pcap".as_ref())?;
/// while let Some(frame) = reader.next_frame()? {
///     println!("{} {:?} {} bytes", frame.number, frame.link_type, frame.data.len());
/// }
/// # Ok(())
/// # }
/// ```
pub struct CaptureReader {
    inner: Inner,
    path: PathBuf,
    /// Bytes read from the file so far (the file length once the end is reached).
    bytes_read: Arc<AtomicU64>,
    /// Number of the last frame returned.
    frames: u64,
    /// Set after an error or the end: nothing more is read.
    done: bool,
}

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("path", &self.path)
            .field("format", &self.format())
            .field("frames", &self.frames)
            .field("done", &self.done)
            .finish()
    }
}

impl CaptureReader {
    /// Opens a capture file and reads its file header.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let file = File::open(path).map_err(|source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        CaptureReader::from_reader(file, path)
    }

    /// Reads a capture from any byte stream; `name` is used in error messages (e.g. the
    /// path, or `<stdin>`). The stream is read in large blocks; it need not be buffered.
    pub fn from_reader<R: Read + Send + 'static>(
        reader: R,
        name: impl AsRef<Path>,
    ) -> Result<CaptureReader, CaptureError> {
        let path = name.as_ref().to_path_buf();
        let bytes_read = Arc::new(AtomicU64::new(0));
        let mut counting = Counting {
            inner: Box::new(reader),
            count: bytes_read.clone(),
        };

        let mut magic = Vec::with_capacity(4);
        (&mut counting)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(|source| CaptureError::Io {
                path: path.clone(),
                source,
            })?;
        let is_pcapng = magic[..] == PCAPNG_MAGIC;
        let is_pcap = PCAP_MAGICS.iter().any(|m| magic[..] == m[..]);
        if !is_pcap && !is_pcapng {
            let is_prefix = PCAP_MAGICS
                .iter()
                .chain([&PCAPNG_MAGIC])
                .any(|m| m.starts_with(&magic));
            return Err(if magic.is_empty() {
                CaptureError::Empty { path }
            } else if is_prefix {
                CaptureError::TruncatedHeader {
                    path,
                    len: magic.len() as u64,
                }
            } else {
                CaptureError::NotACapture { path, magic }
            });
        }
        let source: Source = io::Cursor::new(magic).chain(counting);

        let header_error = |e: PcapError| match e {
            PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                CaptureError::TruncatedHeader {
                    path: path.clone(),
                    len: bytes_read.load(Ordering::Relaxed),
                }
            }
            PcapError::IoError(source) => CaptureError::Io {
                path: path.clone(),
                source,
            },
            e => CaptureError::Malformed {
                path: path.clone(),
                after_frame: 0,
                reason: format!("file header: {e}"),
            },
        };
        let inner = if is_pcapng {
            Inner::PcapNg(PcapNgReader::new(source).map_err(header_error)?)
        } else {
            let reader = PcapReader::new(source).map_err(header_error)?;
            let header = reader.header();
            // The upper bits of the pcap link-type field hold FCS information (LT_LINKTYPE).
            let link_type = LinkType::from_number(u32::from(header.datalink) & 0xffff);
            Inner::Pcap {
                reader,
                header,
                link_type,
            }
        };
        Ok(CaptureReader {
            inner,
            path,
            bytes_read,
            frames: 0,
            done: false,
        })
    }

    /// The container format, from the magic number.
    pub fn format(&self) -> CaptureFormat {
        match self.inner {
            Inner::Pcap { .. } => CaptureFormat::Pcap,
            Inner::PcapNg(_) => CaptureFormat::PcapNg,
        }
    }

    /// The name used in error messages: the path given to [`open`](Self::open).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next frame, `Ok(None)` at the end of the capture. After an error, returns
    /// `Ok(None)`.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, CaptureError> {
        if self.done {
            return Ok(None);
        }
        let result = match self.inner {
            Inner::Pcap { .. } => self.next_pcap(),
            Inner::PcapNg(_) => self.next_pcapng(),
        };
        match result {
            Ok(Some(mut frame)) => {
                self.frames += 1;
                frame.number = self.frames;
                Ok(Some(frame))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(self.record_error(e))
            }
        }
    }

    fn next_pcap(&mut self) -> Result<Option<Frame>, RecordError> {
        let Inner::Pcap {
            reader,
            header,
            link_type,
        } = &mut self.inner
        else {
            unreachable!("next_pcap on a pcapng reader");
        };
        // Raw records: pcap-file's checked records refuse orig_len > snaplen (tcpdump -s).
        let raw: RawPcapPacket<'_> = match reader.next_raw_packet() {
            None => return Ok(None),
            Some(r) => r?,
        };
        let frac = u64::from(raw.ts_frac);
        let nanos = match header.ts_resolution {
            TsResolution::MicroSecond => frac * 1_000,
            TsResolution::NanoSecond => frac,
        };
        // No check that incl_len <= snaplen or <= orig_len: Wireshark reads those records.
        Ok(Some(Frame {
            number: 0,
            link_type: *link_type,
            timestamp: Duration::from_secs(u64::from(raw.ts_sec)) + Duration::from_nanos(nanos),
            data: raw.data.into_owned(),
            orig_len: raw.orig_len,
        }))
    }

    fn next_pcapng(&mut self) -> Result<Option<Frame>, RecordError> {
        let Inner::PcapNg(reader) = &mut self.inner else {
            unreachable!("next_pcapng on a pcap reader");
        };
        loop {
            // A packet block belongs to the section already read, so its byte order is known
            // before the block is (a new section header changes it, but is no packet).
            let endianness = reader.section().endianness;
            let raw: RawBlock<'_> = match reader.next_raw_block() {
                None => return Ok(None),
                Some(r) => r?,
            };
            let packet = match raw.type_ {
                ENHANCED_PACKET_BLOCK | SIMPLE_PACKET_BLOCK | PACKET_BLOCK => {
                    parse_packet_block(raw.type_, &raw.body, endianness)?
                }
                // Section and interface blocks are tracked by the reader; others skipped.
                _ => continue,
            };

            let interface = reader
                .interfaces()
                .get(packet.interface_id as usize)
                .ok_or_else(|| {
                    RecordError::Malformed(format!(
                        "packet on interface {} but the section describes {} interface(s)",
                        packet.interface_id,
                        reader.interfaces().len()
                    ))
                })?;
            let link_type = LinkType::from_number(u32::from(interface.linktype));
            let mut data = packet.data;
            let timestamp = match packet.raw_timestamp {
                Some(raw) => ng_timestamp(interface, raw)?,
                None => {
                    // The block holds min(original length, snaplen) bytes, then padding.
                    let mut len = data.len().min(packet.orig_len as usize);
                    if interface.snaplen != 0 {
                        len = len.min(interface.snaplen as usize);
                    }
                    data.truncate(len);
                    Duration::ZERO
                }
            };
            return Ok(Some(Frame {
                number: 0,
                link_type,
                timestamp,
                data,
                orig_len: packet.orig_len,
            }));
        }
    }

    fn record_error(&self, e: RecordError) -> CaptureError {
        let path = self.path.clone();
        match e {
            RecordError::Pcap(PcapError::IoError(e))
                if e.kind() == io::ErrorKind::UnexpectedEof =>
            {
                CaptureError::TruncatedRecord {
                    path,
                    after_frame: self.frames,
                    len: self.bytes_read.load(Ordering::Relaxed),
                }
            }
            RecordError::Pcap(PcapError::IoError(source)) => CaptureError::Io { path, source },
            RecordError::Pcap(e) => CaptureError::Malformed {
                path,
                after_frame: self.frames,
                reason: e.to_string(),
            },
            RecordError::Malformed(reason) => CaptureError::Malformed {
                path,
                after_frame: self.frames,
                reason,
            },
        }
    }
}

impl Iterator for CaptureReader {
    type Item = Result<Frame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame().transpose()
    }
}

impl std::iter::FusedIterator for CaptureReader {}

/// An error while reading one record, before the path and position are added.
pub(crate) enum RecordError {
    Pcap(PcapError),
    Malformed(String),
}

impl From<PcapError> for RecordError {
    fn from(e: PcapError) -> Self {
        RecordError::Pcap(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;
    use std::io::Cursor;

    #[test]
    fn link_type_numbers() {
        let known = [
            (1, LinkType::Ethernet),
            (101, LinkType::RawIp),
            (228, LinkType::Ipv4),
            (229, LinkType::Ipv6),
            (113, LinkType::LinuxSll),
            (276, LinkType::LinuxSll2),
            (247, LinkType::Infiniband),
        ];
        for (n, link) in known {
            assert_eq!(LinkType::from_number(n), link);
            assert_eq!(link.number(), n);
            assert_eq!(u32::from(link), n);
            assert_eq!(LinkType::from(n), link);
        }
        assert_eq!(LinkType::from_number(12), LinkType::RawIp);
        assert_eq!(LinkType::from_number(14), LinkType::RawIp);
        assert_eq!(LinkType::from_number(0), LinkType::Other(0));
        for n in (0..70_000).filter(|n| ![12, 14].contains(n)) {
            assert_eq!(LinkType::from_number(n).number(), n);
        }
    }

    #[test]
    fn reads_little_endian_microsecond_pcap() {
        let (bytes, expected) = sample_pcap();
        let reader = CaptureReader::from_reader(Cursor::new(bytes.clone()), "mem").unwrap();
        assert_eq!(reader.format(), CaptureFormat::Pcap);
        assert_eq!(read_ok(&bytes), expected);
    }

    #[test]
    fn reads_big_endian_nanosecond_pcap() {
        // Link type with FCS bits set above the low 16 bits (LT_FCS_LENGTH), raw IPv4.
        let bytes = pcap_file(
            true,
            true,
            0x1000_0000 | 228,
            65535,
            &[(7, 999_999_999, b"x", 1)],
        );
        let frames = read_ok(&bytes);
        assert_eq!(
            frames,
            [frame(
                1,
                LinkType::Ipv4,
                Duration::new(7, 999_999_999),
                b"x"
            )]
        );
    }

    #[test]
    fn reads_pcap_cut_by_snaplen() {
        // tcpdump -s 64: every record's original length exceeds the snapshot length, which
        // pcap-file's checked reader rejects.
        let data = [0x11; 64];
        let bytes = pcap_file(
            false,
            false,
            1,
            64,
            &[(1, 2, &data, 1500), (3, 4, &data, 9000)],
        );
        let frames = read_ok(&bytes);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, data);
        assert_eq!(frames[0].orig_len, 1500);
        assert_eq!(frames[1].orig_len, 9000);
    }

    #[test]
    fn reads_pcapng_both_byte_orders() {
        for big in [false, true] {
            let (bytes, expected) = sample_pcapng(big);
            let reader = CaptureReader::from_reader(Cursor::new(bytes.clone()), "mem").unwrap();
            assert_eq!(reader.format(), CaptureFormat::PcapNg);
            assert_eq!(read_ok(&bytes), expected, "big endian: {big}");
        }
    }

    #[test]
    fn pcapng_packet_on_undescribed_interface_is_an_error() {
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]).epb(0, 0, b"ok").epb(3, 0, b"bad");
        let (frames, err) = read_all(&ng.bytes());
        assert_eq!(frames.len(), 1);
        let err = err.unwrap();
        assert!(
            matches!(err, CaptureError::Malformed { after_frame: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("interface 3"), "{err}");

        // No interface at all.
        let mut ng = Ng::new(true);
        ng.spb(b"x", 1);
        assert!(matches!(
            read_all(&ng.bytes()).1,
            Some(CaptureError::Malformed { after_frame: 0, .. })
        ));
    }

    #[test]
    fn pcapng_captured_length_beyond_block_is_an_error() {
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]).epb(0, 0, b"abcd");
        let mut bytes = ng.bytes();
        // The captured length of the EPB is at offset 20 of its body.
        let epb = bytes.len() - (12 + 20 + 4);
        bytes[epb + 8 + 12..epb + 8 + 16].copy_from_slice(&100u32.to_le_bytes());
        let err = read_all(&bytes).1.unwrap();
        assert!(matches!(err, CaptureError::Malformed { .. }), "{err:?}");
        assert!(err.to_string().contains("captured length 100"), "{err}");
    }

    #[test]
    fn pcapng_interface_with_tzone_is_an_error_not_a_panic() {
        // A limit of pcap-file 2 (see the module documentation): if_tzone is rejected.
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[(10, &[0, 0, 0, 0])]).epb(0, 0, b"x");
        let err = read_all(&ng.bytes()).1.unwrap();
        assert!(matches!(err, CaptureError::Malformed { .. }), "{err:?}");
    }

    #[test]
    fn empty_file() {
        let file = TempFile::new("empty.pcap", b"");
        let err = CaptureReader::open(&file.0).unwrap_err();
        assert!(matches!(err, CaptureError::Empty { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("empty.pcap") && msg.contains("empty file"),
            "{msg}"
        );
    }

    #[test]
    fn not_a_capture() {
        for bytes in [&b"hello, world"[..], b"\x7fELF\x02\x01", b"xy"] {
            let file = TempFile::new("text.pcap", bytes);
            let err = CaptureReader::open(&file.0).unwrap_err();
            assert!(matches!(err, CaptureError::NotACapture { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(
                msg.contains("text.pcap") && msg.contains("not a pcap or pcapng"),
                "{msg}"
            );
        }
        // The pcapng block type with a byte-order magic that is neither order.
        let mut bytes = Ng::new(false).bytes();
        bytes[8..12].copy_from_slice(b"oops");
        let err = read_all(&bytes).1.unwrap();
        assert!(matches!(err, CaptureError::Malformed { .. }), "{err:?}");
    }

    #[test]
    fn missing_file_is_an_io_error_with_the_path() {
        let missing = TempFile::path("missing.pcap");
        let err = CaptureReader::open(&missing.0).unwrap_err();
        assert!(matches!(err, CaptureError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("missing.pcap"), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn truncated_header() {
        let (pcap, _) = sample_pcap();
        let (pcapng, _) = sample_pcapng(false);
        for (bytes, cut) in [
            (&pcap, 2),
            (&pcap, 4),
            (&pcap, 23),
            (&pcapng, 3),
            (&pcapng, 20),
        ] {
            let file = TempFile::new("short.pcap", &bytes[..cut]);
            let err = CaptureReader::open(&file.0).unwrap_err();
            assert!(
                matches!(err, CaptureError::TruncatedHeader { len, .. } if len == cut as u64),
                "cut {cut}: {err:?}"
            );
            assert!(err.to_string().contains("truncated file"), "{err}");
        }
    }

    #[test]
    fn truncated_record() {
        let (pcap, _) = sample_pcap();
        // Inside the second record's header (24 + 16 + 5 = 45 bytes is the first record).
        let file = TempFile::new("cut.pcap", &pcap[..50]);
        let mut reader = CaptureReader::open(&file.0).unwrap();
        assert_eq!(reader.next_frame().unwrap().unwrap().number, 1);
        let err = reader.next_frame().unwrap_err();
        assert!(
            matches!(
                err,
                CaptureError::TruncatedRecord {
                    after_frame: 1,
                    len: 50,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("cut.pcap") && msg.contains("truncated record"),
            "{msg}"
        );
        assert!(reader.next_frame().unwrap().is_none());

        // Inside the third record's data.
        let (frames, err) = read_all(&pcap[..pcap.len() - 1]);
        assert_eq!(frames.len(), 2);
        assert!(matches!(
            err,
            Some(CaptureError::TruncatedRecord { after_frame: 2, .. })
        ));
    }

    /// Every prefix of a capture reads as the frames it holds completely, then either ends
    /// cleanly (cut at a record boundary) or gives a truncation error; never a panic.
    #[test]
    fn every_cut_is_a_clean_end_or_a_truncation_error() {
        let samples = [sample_pcap(), sample_pcapng(false), sample_pcapng(true)];
        for (bytes, expected) in &samples {
            let mut clean_ends = 0;
            for cut in 0..bytes.len() {
                let (frames, err) = read_all(&bytes[..cut]);
                assert_eq!(frames[..], expected[..frames.len()], "cut {cut}");
                match err {
                    None => clean_ends += 1,
                    Some(CaptureError::Empty { .. }) => assert_eq!(cut, 0),
                    Some(CaptureError::TruncatedHeader { len, .. }) => {
                        assert_eq!(len, cut as u64);
                        assert!(frames.is_empty());
                    }
                    Some(CaptureError::TruncatedRecord {
                        after_frame, len, ..
                    }) => {
                        assert_eq!(after_frame, frames.len() as u64, "cut {cut}");
                        assert_eq!(len, cut as u64, "cut {cut}");
                    }
                    Some(e) => panic!("cut {cut}: {e:?}"),
                }
            }
            assert!(clean_ends > 2, "{clean_ends}");
            assert_eq!(read_ok(bytes), *expected);
        }
    }

    /// Corrupted captures give frames or errors, never a panic or an endless loop.
    #[test]
    fn corrupted_input_never_panics() {
        let samples = [
            sample_pcap().0,
            sample_pcapng(false).0,
            sample_pcapng(true).0,
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for bytes in &samples {
            for _ in 0..2000 {
                let mut bytes = bytes.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() % bytes.len() as u64) as usize;
                    bytes[i] = next() as u8;
                }
                let (frames, _) = read_all(&bytes);
                assert!(frames.len() <= 16);
            }
        }
    }
}
