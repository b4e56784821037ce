//! Reading and writing packet captures.
//!
//! [`CaptureReader`] reads classic pcap (microsecond or nanosecond timestamps, either byte
//! order) and pcapng (either byte order, several sections, several interfaces with their own
//! link types and timestamp resolutions) and yields every packet as a [`Frame`]. The format is
//! chosen by the file's magic number, not its name. Blocks that carry no packet (name
//! resolution, interface statistics, decryption secrets, custom blocks) are skipped.
//! [`PcapWriter`] writes classic pcap, which every tool reads.
//!
//! Frames are not decoded here: rxe-core does that.
//!
//! Both are built on the `pcap-file` crate (version 2): it reads the pcap file header and
//! records, and the pcapng block framing, section headers and interface descriptions. These
//! parts are done here instead, because `pcap-file` gets them wrong or cannot do them:
//!
//! * pcap records are read raw and checked here: `pcap-file`'s checked records reject every
//!   record whose original length exceeds the snapshot length, i.e. any capture taken with
//!   `tcpdump -s N`;
//! * pcapng packet blocks (Enhanced, Simple, obsolete Packet) are parsed here: `pcap-file`
//!   takes an Enhanced Packet Block's timestamp count as nanoseconds whatever the interface's
//!   `if_tsresol` says (a default, microsecond, file comes out 1000 times too early), reads
//!   the Packet Block's timestamp as one 64-bit word, returns a Simple Packet Block's padding
//!   as data, and fails a packet over an option it cannot parse; timestamps are scaled here by
//!   `if_tsresol` and `if_tsoffset`, and a packet's interface ID is checked;
//! * `pcap-file` reports the end of the data inside a record as a bare `UnexpectedEof` I/O
//!   error; here it becomes [`CaptureError::TruncatedRecord`] with the frame number and the
//!   file length, and the magic number is checked first to tell an empty file, a file cut
//!   inside the magic, and a file that is no capture apart;
//! * pcap records are written here (the file header by `pcap-file`): its writer can neither
//!   flush nor lend its writer.
//!
//! Limits of `pcap-file` 2 that remain: a record larger than its 8 MB read buffer is reported
//! as truncated; an Interface Description Block with an `if_tzone` option, or with an option
//! it cannot parse (a name that is not UTF-8), is an error. Truncated and corrupted input
//! gives an error, never a panic (tested below on every cut of a file, and on corrupted
//! copies).

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapReader, RawPcapPacket};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::{ENHANCED_PACKET_BLOCK, PACKET_BLOCK, SIMPLE_PACKET_BLOCK};
use pcap_file::pcapng::{PcapNgReader, RawBlock};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

/// The link layer of a capture's frames: the one type rxe-core's frame
/// decoder takes, re-exported so that callers need not name both crates.
pub use rxe_core::wire::frame::LinkType;

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

/// Why a capture could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Opening, reading or writing the file failed.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file has no bytes at all.
    #[error("{}: empty file, not a pcap or pcapng capture", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file does not start with a pcap or pcapng magic number.
    #[error(
        "{}: not a pcap or pcapng capture (starts with {}; pcap starts with a1b2c3d4 or \
         a1b23c4d in either byte order, pcapng with 0a0d0d0a)",
        path.display(), Hex(magic)
    )]
    NotACapture {
        /// The file.
        path: PathBuf,
        /// Its first bytes (up to 4).
        magic: Vec<u8>,
    },
    /// The file ends inside its file header (pcap) or first section header (pcapng).
    #[error("{}: truncated file: it ends inside the file header, after {len} bytes", path.display())]
    TruncatedHeader {
        /// The file.
        path: PathBuf,
        /// The length of the file.
        len: u64,
    },
    /// The file ends in the middle of a record (a pcap packet record or a pcapng block).
    #[error(
        "{}: truncated record: the file ends inside the record after frame {after_frame}, \
         at byte {len}",
        path.display()
    )]
    TruncatedRecord {
        /// The file.
        path: PathBuf,
        /// The number of the last complete frame (0 if none).
        after_frame: u64,
        /// The length of the file.
        len: u64,
    },
    /// A header, record or block holds an impossible value.
    #[error("{}: malformed capture after frame {after_frame}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The number of the last good frame (0 if none).
        after_frame: u64,
        /// What is wrong.
        reason: String,
    },
    /// A frame cannot be written as asked.
    #[error("{}: cannot write frame {frame}: {reason}", path.display())]
    CannotWrite {
        /// The file.
        path: PathBuf,
        /// The number the frame would have had.
        frame: u64,
        /// Why.
        reason: String,
    },
}

/// Formats bytes as lowercase hex.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
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
/// # fn main() -> Result<(), rxe_net::capture::CaptureError> {
/// use rxe_net::capture::CaptureReader;
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
enum RecordError {
    Pcap(PcapError),
    Malformed(String),
}

impl From<PcapError> for RecordError {
    fn from(e: PcapError) -> Self {
        RecordError::Pcap(e)
    }
}

/// A packet block of pcapng, parsed here from its body.
struct NgPacket {
    interface_id: u32,
    /// The timestamp count in the interface's units; `None` for a Simple Packet Block.
    raw_timestamp: Option<u64>,
    orig_len: u32,
    data: Vec<u8>,
}

/// Parses the body of an Enhanced, Simple or (obsolete) Packet Block. Done by hand: with
/// pcap-file the byte order must be named through a crate it does not re-export, its
/// Packet Block reads the timestamp as one 64-bit word (the format has two 32-bit words, high
/// first), and an option it cannot parse, such as a comment that is not UTF-8, would fail
/// the packet. Options are not needed here and are skipped.
fn parse_packet_block(
    type_: u32,
    body: &[u8],
    endianness: Endianness,
) -> Result<NgPacket, RecordError> {
    let word = |i: usize| -> u32 {
        let b = [body[i], body[i + 1], body[i + 2], body[i + 3]];
        match endianness {
            Endianness::Big => u32::from_be_bytes(b),
            Endianness::Little => u32::from_le_bytes(b),
        }
    };
    let name = match type_ {
        ENHANCED_PACKET_BLOCK => "Enhanced Packet Block",
        PACKET_BLOCK => "Packet Block",
        _ => "Simple Packet Block",
    };
    let fixed = if type_ == SIMPLE_PACKET_BLOCK { 4 } else { 20 };
    if body.len() < fixed {
        return Err(RecordError::Malformed(format!(
            "{name} of {} body bytes, less than its {fixed} fixed bytes",
            body.len()
        )));
    }
    if type_ == SIMPLE_PACKET_BLOCK {
        return Ok(NgPacket {
            interface_id: 0,
            raw_timestamp: None,
            orig_len: word(0),
            data: body[4..].to_vec(),
        });
    }
    let interface_id = if type_ == PACKET_BLOCK {
        // 16-bit interface ID, then a 16-bit drop count.
        let b = [body[0], body[1]];
        u32::from(match endianness {
            Endianness::Big => u16::from_be_bytes(b),
            Endianness::Little => u16::from_le_bytes(b),
        })
    } else {
        word(0)
    };
    let raw_timestamp = (u64::from(word(4)) << 32) | u64::from(word(8));
    let captured = word(12);
    let orig_len = word(16);
    let data = usize::try_from(captured)
        .ok()
        .and_then(|len| body.get(fixed..fixed.checked_add(len)?))
        .ok_or_else(|| {
            RecordError::Malformed(format!(
                "{name} captured length {captured} exceeds the block's {} data bytes",
                body.len() - fixed
            ))
        })?;
    Ok(NgPacket {
        interface_id,
        raw_timestamp: Some(raw_timestamp),
        orig_len,
        data: data.to_vec(),
    })
}

/// Converts a pcapng timestamp count to time since the epoch, using the interface's
/// `if_tsresol` (default 10^-6 s) and `if_tsoffset` (default 0 s).
fn ng_timestamp(
    interface: &InterfaceDescriptionBlock<'_>,
    raw: u64,
) -> Result<Duration, RecordError> {
    let mut resol = 6u8;
    let mut offset = 0i64;
    for option in &interface.options {
        match *option {
            InterfaceDescriptionOption::IfTsResol(r) => resol = r,
            // The option is a signed 64-bit count of seconds; pcap-file reads it unsigned.
            InterfaceDescriptionOption::IfTsOffset(o) => offset = o as i64,
            _ => {}
        }
    }
    let raw = u128::from(raw);
    let exp = u32::from(resol & 0x7f);
    let (secs, nanos) = if resol & 0x80 == 0 {
        // 10^-exp seconds per unit; 10^38 is the largest power of ten in a u128.
        let per_sec = 10u128
            .checked_pow(exp)
            .filter(|_| exp <= 38)
            .ok_or_else(|| {
                RecordError::Malformed(format!("if_tsresol 10^-{exp} is out of range"))
            })?;
        (raw / per_sec, (raw % per_sec) * 1_000_000_000 / per_sec)
    } else {
        // 2^-exp seconds per unit; exp <= 127 always fits a u128 shift.
        let mask = (1u128 << exp) - 1;
        (raw >> exp, ((raw & mask) * 1_000_000_000) >> exp)
    };
    let secs = u64::try_from(secs).expect("a u64 count divided by >= 1 fits a u64");
    let secs = if offset >= 0 {
        secs.checked_add(offset.unsigned_abs())
    } else {
        secs.checked_sub(offset.unsigned_abs())
    }
    .ok_or_else(|| {
        RecordError::Malformed(format!(
            "timestamp {secs} s with if_tsoffset {offset} s is out of range"
        ))
    })?;
    Ok(Duration::new(secs, nanos as u32))
}

/// The snapshot length written in the file header: frames longer than this are cut.
pub const PCAP_SNAPLEN: u32 = 262_144;

/// Writes frames to a classic pcap file (microsecond timestamps, native byte order,
/// snapshot length [`PCAP_SNAPLEN`]).
///
/// The file header is written by pcap-file; the 16-byte record headers are written here,
/// because pcap-file's writer can neither flush nor lend its writer, and its record writer
/// is generic over a byte-order type it does not re-export.
///
/// [`create`](Self::create) buffers the file: call [`finish`](Self::finish) (or
/// [`flush`](Self::flush)) to see write errors, which a drop would swallow.
///
/// ```no_run
/// # fn main() -> Result<(), rxe_net::capture::CaptureError> {
/// use std::time::{Duration, SystemTime};
/// use rxe_net::capture::PcapWriter;
///
/// let mut writer = PcapWriter::create("out.pcap".as_ref())?;
/// let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
/// writer.write_frame(now, &[0u8; 60])?;
/// writer.finish()?;
/// # Ok(())
/// # }
/// ```
pub struct PcapWriter<W: Write = BufWriter<File>> {
    writer: W,
    path: PathBuf,
    link_type: LinkType,
    frames: u64,
}

impl<W: Write> fmt::Debug for PcapWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapWriter")
            .field("path", &self.path)
            .field("link_type", &self.link_type)
            .field("frames", &self.frames)
            .finish()
    }
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) a pcap file for Ethernet frames.
    pub fn create(path: &Path) -> Result<Self, CaptureError> {
        PcapWriter::create_with_link_type(path, LinkType::Ethernet)
    }

    /// Creates (or truncates) a pcap file for frames of the given link type.
    pub fn create_with_link_type(path: &Path, link_type: LinkType) -> Result<Self, CaptureError> {
        let file = File::create(path).map_err(|source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        PcapWriter::with_link_type(BufWriter::new(file), link_type, path)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the pcap file header for Ethernet frames to `writer`; `name` is used in error
    /// messages.
    pub fn new(writer: W, name: impl AsRef<Path>) -> Result<Self, CaptureError> {
        PcapWriter::with_link_type(writer, LinkType::Ethernet, name)
    }

    /// Writes the pcap file header for frames of the given link type to `writer`; `name` is
    /// used in error messages.
    pub fn with_link_type(
        mut writer: W,
        link_type: LinkType,
        name: impl AsRef<Path>,
    ) -> Result<Self, CaptureError> {
        let path = name.as_ref().to_path_buf();
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: PCAP_SNAPLEN,
            datalink: DataLink::from(link_type.number()),
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::native(),
        };
        header.write_to(&mut writer).map_err(|e| match e {
            PcapError::IoError(source) => CaptureError::Io {
                path: path.clone(),
                source,
            },
            e => CaptureError::CannotWrite {
                path: path.clone(),
                frame: 0,
                reason: format!("file header: {e}"),
            },
        })?;
        Ok(PcapWriter {
            writer,
            path,
            link_type,
            frames: 0,
        })
    }

    /// The link type in the file header.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// Number of frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Appends one frame. `timestamp` is the time since the Unix epoch; it is stored to the
    /// microsecond (truncated) and must be before 2106 (pcap's 32-bit seconds). A frame longer
    /// than [`PCAP_SNAPLEN`] is cut to it; its original length is kept in the record.
    pub fn write_frame(&mut self, timestamp: Duration, data: &[u8]) -> Result<(), CaptureError> {
        let frame = self.frames + 1;
        let cannot = |reason: String| CaptureError::CannotWrite {
            path: self.path.clone(),
            frame,
            reason,
        };
        let ts_sec = u32::try_from(timestamp.as_secs()).map_err(|_| {
            cannot(format!(
                "timestamp {} s is past pcap's 32-bit seconds",
                timestamp.as_secs()
            ))
        })?;
        let orig_len = u32::try_from(data.len()).map_err(|_| {
            cannot(format!(
                "{} bytes do not fit pcap's 32-bit length",
                data.len()
            ))
        })?;
        let incl_len = orig_len.min(PCAP_SNAPLEN);

        let mut record = [0u8; 16];
        for (i, word) in [ts_sec, timestamp.subsec_micros(), incl_len, orig_len]
            .into_iter()
            .enumerate()
        {
            record[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
        }
        let io_error = |source| CaptureError::Io {
            path: self.path.clone(),
            source,
        };
        self.writer.write_all(&record).map_err(io_error)?;
        self.writer
            .write_all(&data[..incl_len as usize])
            .map_err(io_error)?;
        self.frames = frame;
        Ok(())
    }

    /// Flushes buffered frames to the underlying writer.
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
    use std::io::Cursor;
    use std::sync::atomic::AtomicUsize;

    /// A file in the temp directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: &[u8]) -> TempFile {
            let file = TempFile::path(name);
            std::fs::write(&file.0, bytes).unwrap();
            file
        }

        fn path(name: &str) -> TempFile {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let unique = format!(
                "rxe-net-capture-{}-{}-{name}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            TempFile(std::env::temp_dir().join(unique))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn read_all(bytes: &[u8]) -> (Vec<Frame>, Option<CaptureError>) {
        let mut frames = Vec::new();
        let mut reader = match CaptureReader::from_reader(Cursor::new(bytes.to_vec()), "mem") {
            Ok(r) => r,
            Err(e) => return (frames, Some(e)),
        };
        loop {
            match reader.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => return (frames, None),
                Err(e) => {
                    // Fused after an error.
                    assert!(reader.next_frame().unwrap().is_none());
                    assert!(reader.next().is_none());
                    return (frames, Some(e));
                }
            }
        }
    }

    fn read_ok(bytes: &[u8]) -> Vec<Frame> {
        match read_all(bytes) {
            (frames, None) => frames,
            (_, Some(e)) => panic!("unexpected error: {e}"),
        }
    }

    fn put32(out: &mut Vec<u8>, big: bool, v: u32) {
        out.extend_from_slice(&if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }

    fn put16(out: &mut Vec<u8>, big: bool, v: u16) {
        out.extend_from_slice(&if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }

    /// A classic pcap file: records are (seconds, fraction, captured bytes, original length).
    fn pcap_file(
        big: bool,
        nanos: bool,
        linktype: u32,
        snaplen: u32,
        records: &[(u32, u32, &[u8], u32)],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        put32(&mut out, big, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
        put16(&mut out, big, 2);
        put16(&mut out, big, 4);
        put32(&mut out, big, 0);
        put32(&mut out, big, 0);
        put32(&mut out, big, snaplen);
        put32(&mut out, big, linktype);
        for &(sec, frac, data, orig) in records {
            put32(&mut out, big, sec);
            put32(&mut out, big, frac);
            put32(&mut out, big, data.len() as u32);
            put32(&mut out, big, orig);
            out.extend_from_slice(data);
        }
        out
    }

    /// Builds pcapng files block by block.
    struct Ng {
        big: bool,
        out: Vec<u8>,
    }

    impl Ng {
        fn new(big: bool) -> Ng {
            let mut ng = Ng {
                big,
                out: Vec::new(),
            };
            ng.shb();
            ng
        }

        fn block(&mut self, type_: u32, body: &[u8]) -> &mut Ng {
            let pad = (4 - body.len() % 4) % 4;
            let len = (12 + body.len() + pad) as u32;
            put32(&mut self.out, self.big, type_);
            put32(&mut self.out, self.big, len);
            self.out.extend_from_slice(body);
            self.out.extend(std::iter::repeat_n(0, pad));
            put32(&mut self.out, self.big, len);
            self
        }

        /// A section header; switches to byte order `big` for this section.
        fn shb_with(&mut self, big: bool) -> &mut Ng {
            self.big = big;
            let mut body = Vec::new();
            put32(&mut body, big, 0x1a2b_3c4d);
            put16(&mut body, big, 1);
            put16(&mut body, big, 0);
            body.extend_from_slice(&[0xff; 8]); // section length -1
            self.block(0x0a0d_0d0a, &body)
        }

        fn shb(&mut self) -> &mut Ng {
            self.shb_with(self.big)
        }

        fn options(&self, body: &mut Vec<u8>, options: &[(u16, &[u8])]) {
            if options.is_empty() {
                return;
            }
            for &(code, value) in options {
                put16(body, self.big, code);
                put16(body, self.big, value.len() as u16);
                body.extend_from_slice(value);
                body.extend(std::iter::repeat_n(0, (4 - value.len() % 4) % 4));
            }
            body.extend_from_slice(&[0; 4]);
        }

        fn idb(&mut self, linktype: u16, snaplen: u32, options: &[(u16, &[u8])]) -> &mut Ng {
            let mut body = Vec::new();
            put16(&mut body, self.big, linktype);
            put16(&mut body, self.big, 0);
            put32(&mut body, self.big, snaplen);
            self.options(&mut body, options);
            self.block(1, &body)
        }

        fn epb_with(
            &mut self,
            interface: u32,
            ts: u64,
            data: &[u8],
            orig: u32,
            options: &[(u16, &[u8])],
        ) -> &mut Ng {
            let mut body = Vec::new();
            put32(&mut body, self.big, interface);
            put32(&mut body, self.big, (ts >> 32) as u32);
            put32(&mut body, self.big, ts as u32);
            put32(&mut body, self.big, data.len() as u32);
            put32(&mut body, self.big, orig);
            body.extend_from_slice(data);
            body.extend(std::iter::repeat_n(0, (4 - data.len() % 4) % 4));
            self.options(&mut body, options);
            self.block(6, &body)
        }

        fn epb(&mut self, interface: u32, ts: u64, data: &[u8]) -> &mut Ng {
            self.epb_with(interface, ts, data, data.len() as u32, &[])
        }

        fn spb(&mut self, data: &[u8], orig: u32) -> &mut Ng {
            let mut body = Vec::new();
            put32(&mut body, self.big, orig);
            body.extend_from_slice(data);
            self.block(3, &body)
        }

        fn pb(&mut self, interface: u16, ts: u64, data: &[u8]) -> &mut Ng {
            let mut body = Vec::new();
            put16(&mut body, self.big, interface);
            put16(&mut body, self.big, 0);
            put32(&mut body, self.big, (ts >> 32) as u32);
            put32(&mut body, self.big, ts as u32);
            put32(&mut body, self.big, data.len() as u32);
            put32(&mut body, self.big, data.len() as u32);
            body.extend_from_slice(data);
            self.block(2, &body)
        }

        fn bytes(&self) -> Vec<u8> {
            self.out.clone()
        }
    }

    fn frame(number: u64, link_type: LinkType, timestamp: Duration, data: &[u8]) -> Frame {
        Frame {
            number,
            link_type,
            timestamp,
            data: data.to_vec(),
            orig_len: data.len() as u32,
        }
    }

    /// A pcapng file of two sections, the second in the other byte order, with four
    /// interfaces of three timestamp resolutions, and every kind of block between packets.
    fn sample_pcapng(big: bool) -> (Vec<u8>, Vec<Frame>) {
        let mut ng = Ng::new(big);
        ng.idb(1, 0, &[(2, b"eth0")]) // Ethernet, default if_tsresol: microseconds
            .block(4, &[0, 0, 0, 0]) // Name Resolution Block, empty
            .idb(101, 65535, &[(9, &[9])]) // raw IP, nanoseconds
            .epb(0, 1_700_000_000_123_456, b"ethernet frame")
            .block(5, &[0; 12]) // Interface Statistics Block
            .epb(1, 1_700_000_001_000_000_007, b"ip")
            .block(0x0000_0bad, b"custom\0\0") // custom block
            .block(0x8000_0001, b"") // a local block type
            .spb(b"simple!", 7) // interface 0, padded to 8 bytes
            .pb(1, 1_700_000_002_500_000_000, b"old packet block")
            .epb_with(0, 3_000_000, b"cut", 1500, &[(1, &[0xff, 0xfe])]); // non-UTF-8 comment
                                                                          // if_tsoffset of 100 s, in the second section's byte order.
        let tsoffset = if big {
            100u64.to_le_bytes()
        } else {
            100u64.to_be_bytes()
        };
        ng.shb_with(!big)
            .idb(247, 0, &[(9, &[0x80 | 10]), (14, &tsoffset)]) // 2^-10 s units
            .idb(228, 0, &[])
            .epb(1, 5_000_000, b"ipv4")
            .epb(0, 3 * 1024 + 512, b"ib");
        let bytes = ng.bytes();
        let s = Duration::from_secs;
        let mut cut = frame(11, LinkType::Ethernet, Duration::from_secs(3), b"cut");
        cut.orig_len = 1500;
        let expected = vec![
            frame(
                1,
                LinkType::Ethernet,
                s(1_700_000_000) + Duration::from_micros(123_456),
                b"ethernet frame",
            ),
            frame(
                2,
                LinkType::RawIp,
                s(1_700_000_001) + Duration::from_nanos(7),
                b"ip",
            ),
            frame(3, LinkType::Ethernet, Duration::ZERO, b"simple!"),
            frame(
                4,
                LinkType::RawIp,
                s(1_700_000_002) + Duration::from_millis(500),
                b"old packet block",
            ),
            Frame { number: 5, ..cut },
            frame(6, LinkType::Ipv4, s(5), b"ipv4"),
            // 3.5 s at 2^-10 s units, plus the 100 s offset.
            frame(
                7,
                LinkType::Infiniband,
                s(103) + Duration::from_millis(500),
                b"ib",
            ),
        ];
        (bytes, expected)
    }

    fn sample_pcap() -> (Vec<u8>, Vec<Frame>) {
        let bytes = pcap_file(
            false,
            false,
            1,
            262_144,
            &[
                (1_700_000_000, 1, b"first", 5),
                (1_700_000_000, 999_999, b"", 0),
                (1_700_000_001, 0, &[0xab; 100], 100),
            ],
        );
        let s = Duration::from_secs;
        let expected = vec![
            frame(
                1,
                LinkType::Ethernet,
                s(1_700_000_000) + Duration::from_micros(1),
                b"first",
            ),
            frame(
                2,
                LinkType::Ethernet,
                s(1_700_000_000) + Duration::from_micros(999_999),
                b"",
            ),
            frame(3, LinkType::Ethernet, s(1_700_000_001), &[0xab; 100]),
        ];
        (bytes, expected)
    }

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

    #[test]
    fn writer_round_trip_in_memory() {
        let frames = [
            frame(
                1,
                LinkType::Ethernet,
                Duration::new(1_700_000_000, 123_000),
                &[1; 60],
            ),
            frame(
                2,
                LinkType::Ethernet,
                Duration::new(1_700_000_000, 999_999_000),
                &[],
            ),
            frame(
                3,
                LinkType::Ethernet,
                Duration::new(4_294_967_295, 0),
                &[2; 1514],
            ),
        ];
        let mut writer = PcapWriter::new(Vec::new(), "mem").unwrap();
        assert_eq!(writer.link_type(), LinkType::Ethernet);
        for f in &frames {
            writer.write_frame(f.timestamp, &f.data).unwrap();
        }
        assert_eq!(writer.frames(), 3);
        let bytes = writer.finish().unwrap();
        assert_eq!(bytes.len(), 24 + 3 * 16 + 60 + 1514);
        assert_eq!(read_ok(&bytes), frames);
    }

    #[test]
    fn writer_round_trip_file_every_link_type() {
        let mut links = LinkType::DECODED.to_vec();
        links.push(LinkType::Other(147));
        for link in links {
            let file = TempFile::path("written.pcap");
            let mut writer = PcapWriter::create_with_link_type(&file.0, link).unwrap();
            writer.write_frame(Duration::from_secs(10), b"one").unwrap();
            writer
                .write_frame(Duration::from_millis(10_500), b"two")
                .unwrap();
            writer.finish().unwrap();
            let frames: Vec<Frame> = CaptureReader::open(&file.0)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                frames,
                [
                    frame(1, link, Duration::from_secs(10), b"one"),
                    frame(2, link, Duration::from_millis(10_500), b"two"),
                ]
            );
        }
        let file = TempFile::path("default.pcap");
        let writer = PcapWriter::create(&file.0).unwrap();
        assert_eq!(writer.link_type(), LinkType::Ethernet);
        writer.finish().unwrap();
        assert_eq!(CaptureReader::open(&file.0).unwrap().count(), 0);
    }

    #[test]
    fn writer_keeps_microseconds_and_cuts_at_snaplen() {
        let big = vec![7u8; PCAP_SNAPLEN as usize + 10];
        let mut writer = PcapWriter::new(Vec::new(), "mem").unwrap();
        writer.write_frame(Duration::new(5, 1_999), &big).unwrap();
        let frames = read_ok(&writer.finish().unwrap());
        assert_eq!(frames[0].timestamp, Duration::new(5, 1_000));
        assert_eq!(frames[0].data.len(), PCAP_SNAPLEN as usize);
        assert_eq!(frames[0].orig_len, PCAP_SNAPLEN + 10);
    }

    #[test]
    fn writer_rejects_timestamps_past_2106() {
        let mut writer = PcapWriter::new(Vec::new(), "mem").unwrap();
        let err = writer
            .write_frame(Duration::from_secs(1 << 32), b"late")
            .unwrap_err();
        assert!(
            matches!(err, CaptureError::CannotWrite { frame: 1, .. }),
            "{err:?}"
        );
        assert_eq!(writer.frames(), 0);
        assert_eq!(writer.finish().unwrap().len(), 24);
    }

    #[test]
    fn writer_reports_io_errors_with_the_path() {
        let dir = TempFile::path("no-such-dir");
        let err = PcapWriter::create(&dir.0.join("x.pcap")).unwrap_err();
        assert!(matches!(err, CaptureError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("no-such-dir"), "{err}");
    }
}
