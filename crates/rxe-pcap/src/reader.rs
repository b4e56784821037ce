//! [`CaptureReader`]: the frames of a pcap or pcapng file, one at a time.
//!
//! The file is read here one record (pcap) or block (pcapng) at a time, framed
//! by its length, and each whole record or block is handed to `pcap-parser`'s
//! parsers. The I/O is not `pcap-parser`'s streaming readers', because those
//! (0.17) read the file header with a single `read` call, so a pipe that
//! returns it in pieces fails; report a failed read without its
//! `io::Error`; and take a length inside a block that runs past the block for
//! a file cut short.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_parser::pcap::{parse_pcap_frame, parse_pcap_frame_be, parse_pcap_header};

use crate::error::CaptureError;
use crate::pcapng::{self, Interface, NgBlock, BYTE_ORDER_MAGIC, SECTION_HEADER};
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

/// The longest record or block read: each is held whole in memory, so a
/// corrupted length beyond this is reported as malformed, not allocated.
const MAX_RECORD: usize = 64 << 20;

/// The file, with the count of bytes read for error messages.
struct Source {
    inner: Box<dyn Read + Send>,
    /// Bytes read so far (the file length once the end is reached).
    pos: u64,
}

impl Source {
    /// Appends up to `len` bytes to `out`, fewer only at the end of the file;
    /// returns how many. Memory grows with the bytes that really come, so a
    /// huge length in a short file costs nothing.
    fn read_into(&mut self, len: usize, out: &mut Vec<u8>) -> io::Result<usize> {
        let n = (&mut self.inner).take(len as u64).read_to_end(out)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Where the reader is in the file, by format.
enum State {
    Pcap {
        big_endian: bool,
        nanos: bool,
        link_type: LinkType,
    },
    PcapNg {
        big_endian: bool,
        /// The interfaces of the current section, in order of description.
        interfaces: Vec<Interface>,
    },
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
    source: Source,
    state: State,
    path: PathBuf,
    /// One record or block, reused.
    buf: Vec<u8>,
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

/// An error while reading one record, before the path and position are added.
pub(crate) enum RecordError {
    Io(io::Error),
    /// The file ends inside the record.
    Truncated,
    Malformed(String),
}

impl From<io::Error> for RecordError {
    fn from(e: io::Error) -> Self {
        RecordError::Io(e)
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
    /// path, or `<stdin>`). The stream need not be buffered: it is read through a buffer.
    pub fn from_reader<R: Read + Send + 'static>(
        reader: R,
        name: impl AsRef<Path>,
    ) -> Result<CaptureReader, CaptureError> {
        let path = name.as_ref().to_path_buf();
        let mut source = Source {
            // Records are read in two small pieces and a body: buffered, that is
            // a copy each instead of a system call each.
            inner: Box::new(BufReader::with_capacity(1 << 16, reader)),
            pos: 0,
        };
        let io_error = |path: &Path, source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut head = Vec::with_capacity(28);
        source
            .read_into(4, &mut head)
            .map_err(|e| io_error(&path, e))?;
        let is_pcapng = head[..] == PCAPNG_MAGIC;
        let is_pcap = PCAP_MAGICS.iter().any(|m| head[..] == m[..]);
        if !is_pcap && !is_pcapng {
            let is_prefix = PCAP_MAGICS
                .iter()
                .chain([&PCAPNG_MAGIC])
                .any(|m| m.starts_with(&head));
            return Err(if head.is_empty() {
                CaptureError::Empty { path }
            } else if is_prefix {
                CaptureError::TruncatedHeader {
                    path,
                    len: head.len() as u64,
                }
            } else {
                CaptureError::NotACapture { path, magic: head }
            });
        }
        let truncated = |source: &Source| CaptureError::TruncatedHeader {
            path: path.clone(),
            len: source.pos,
        };
        let malformed = |reason: String| CaptureError::Malformed {
            path: path.clone(),
            after_frame: 0,
            reason: format!("file header: {reason}"),
        };
        let state = if is_pcap {
            if source
                .read_into(20, &mut head)
                .map_err(|e| io_error(&path, e))?
                < 20
            {
                return Err(truncated(&source));
            }
            let (_, header) = parse_pcap_header(&head).map_err(|e| malformed(e.to_string()))?;
            State::Pcap {
                big_endian: header.is_bigendian(),
                nanos: header.is_nanosecond_precision(),
                // The upper bits of the pcap link-type field hold FCS information (LT_LINKTYPE).
                link_type: LinkType::from_number(header.network.0 as u32 & 0xffff),
            }
        } else {
            // The section header: its length is in the byte order its magic tells.
            let mut state = State::PcapNg {
                big_endian: false,
                interfaces: Vec::new(),
            };
            match read_block(&mut source, &mut head, false) {
                Ok(true) => {}
                Ok(false) | Err(RecordError::Truncated) => return Err(truncated(&source)),
                Err(RecordError::Io(e)) => return Err(io_error(&path, e)),
                Err(RecordError::Malformed(reason)) => return Err(malformed(reason)),
            }
            apply_block(&mut state, SECTION_HEADER, &head).map_err(|e| match e {
                RecordError::Malformed(reason) => malformed(reason),
                _ => truncated(&source),
            })?;
            state
        };
        Ok(CaptureReader {
            source,
            state,
            path,
            buf: head,
            frames: 0,
            done: false,
        })
    }

    /// The container format, from the magic number.
    pub fn format(&self) -> CaptureFormat {
        match self.state {
            State::Pcap { .. } => CaptureFormat::Pcap,
            State::PcapNg { .. } => CaptureFormat::PcapNg,
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
        let result = match self.state {
            State::Pcap { .. } => self.next_pcap(),
            State::PcapNg { .. } => self.next_pcapng(),
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
        let State::Pcap {
            big_endian,
            nanos,
            link_type,
        } = self.state
        else {
            unreachable!("next_pcap on a pcapng reader");
        };
        self.buf.clear();
        match self.source.read_into(16, &mut self.buf)? {
            0 => return Ok(None),
            16 => {}
            _ => return Err(RecordError::Truncated),
        }
        let captured = pcapng::word(&self.buf, 8, big_endian).unwrap_or(0) as usize;
        if captured > MAX_RECORD {
            return Err(RecordError::Malformed(format!(
                "record of {captured} bytes, more than the {MAX_RECORD} read"
            )));
        }
        if self.source.read_into(captured, &mut self.buf)? < captured {
            return Err(RecordError::Truncated);
        }
        let parse = if big_endian {
            parse_pcap_frame_be
        } else {
            parse_pcap_frame
        };
        let (_, record) = parse(&self.buf).map_err(|e| RecordError::Malformed(e.to_string()))?;
        let frac = u64::from(record.ts_usec);
        let nanos = if nanos { frac } else { frac * 1_000 };
        // No check that caplen <= snaplen or <= origlen: Wireshark reads those records
        // (tcpdump -s N writes original lengths above the snapshot length).
        Ok(Some(Frame {
            number: 0,
            link_type,
            timestamp: Duration::from_secs(u64::from(record.ts_sec)) + Duration::from_nanos(nanos),
            data: record.data.to_vec(),
            orig_len: record.origlen,
        }))
    }

    fn next_pcapng(&mut self) -> Result<Option<Frame>, RecordError> {
        loop {
            let State::PcapNg { big_endian, .. } = self.state else {
                unreachable!("next_pcapng on a pcap reader");
            };
            self.buf.clear();
            if !read_block(&mut self.source, &mut self.buf, big_endian)? {
                return Ok(None);
            }
            let block_type = block_type_of(&self.buf, big_endian);
            let Some(packet) = apply_block(&mut self.state, block_type, &self.buf)? else {
                continue;
            };
            let State::PcapNg { interfaces, .. } = &self.state else {
                unreachable!("next_pcapng on a pcap reader");
            };
            let interface = interfaces
                .get(packet.interface_id as usize)
                .ok_or_else(|| {
                    RecordError::Malformed(format!(
                        "packet on interface {} but the section describes {} interface(s)",
                        packet.interface_id,
                        interfaces.len()
                    ))
                })?;
            let mut data = packet.data;
            let timestamp = match packet.raw_timestamp {
                Some(raw) => pcapng::timestamp(interface, raw)?,
                None => {
                    // A Simple Packet Block holds min(original length, snaplen) bytes.
                    if interface.snaplen != 0 {
                        data.truncate(interface.snaplen as usize);
                    }
                    Duration::ZERO
                }
            };
            return Ok(Some(Frame {
                number: 0,
                link_type: interface.link_type,
                timestamp,
                data,
                orig_len: packet.orig_len,
            }));
        }
    }

    fn record_error(&self, e: RecordError) -> CaptureError {
        let path = self.path.clone();
        match e {
            RecordError::Truncated => CaptureError::TruncatedRecord {
                path,
                after_frame: self.frames,
                len: self.source.pos,
            },
            RecordError::Io(source) => CaptureError::Io { path, source },
            RecordError::Malformed(reason) => CaptureError::Malformed {
                path,
                after_frame: self.frames,
                reason,
            },
        }
    }
}

/// The block type at the start of a block, in the section's byte order (a
/// section header's type reads the same in both).
fn block_type_of(block: &[u8], big_endian: bool) -> u32 {
    pcapng::word(block, 0, big_endian).unwrap_or(0)
}

/// Appends the next whole pcapng block to `out`, framed by its length:
/// `Ok(false)` at a clean end of the file. `out` is empty, or holds the
/// first bytes of the block (the file's magic number, for the first block).
fn read_block(
    source: &mut Source,
    out: &mut Vec<u8>,
    big_endian: bool,
) -> Result<bool, RecordError> {
    let have = out.len();
    match source.read_into(8 - have, out)? {
        0 if have == 0 => return Ok(false),
        n if n + have < 8 => return Err(RecordError::Truncated),
        _ => {}
    }
    let raw_type = pcapng::word(out, 0, false).unwrap_or(0);
    let mut big_endian = big_endian;
    if raw_type == SECTION_HEADER {
        // A section header gives its own byte order, after its length.
        if source.read_into(4, out)? < 4 {
            return Err(RecordError::Truncated);
        }
        big_endian = match pcapng::word(out, 8, false) {
            Some(BYTE_ORDER_MAGIC) => false,
            Some(m) if m.swap_bytes() == BYTE_ORDER_MAGIC => true,
            m => {
                return Err(RecordError::Malformed(format!(
                    "section header byte-order magic {:08x} is neither order of 1a2b3c4d",
                    m.unwrap_or(0)
                )))
            }
        };
    }
    let len = pcapng::word(out, 4, big_endian).unwrap_or(0) as usize;
    if !(12..=MAX_RECORD).contains(&len) || len % 4 != 0 || len < out.len() {
        return Err(RecordError::Malformed(format!(
            "block length {len} (a block has 12 to {MAX_RECORD} bytes, a multiple of 4)"
        )));
    }
    let rest = len - out.len();
    if source.read_into(rest, out)? < rest {
        return Err(RecordError::Truncated);
    }
    Ok(true)
}

/// Parses a whole block and updates the section state: returns its packet,
/// if it carries one.
fn apply_block(
    state: &mut State,
    block_type: u32,
    block: &[u8],
) -> Result<Option<pcapng::NgPacket>, RecordError> {
    let State::PcapNg {
        big_endian,
        interfaces,
    } = state
    else {
        unreachable!("a pcapng block in a pcap file");
    };
    let order = if block_type == SECTION_HEADER {
        // Parsed in the byte order it declares, whatever the last section's.
        block_type_order(block)
    } else {
        *big_endian
    };
    match pcapng::parse_block(block_type, block, order)? {
        NgBlock::Section { big_endian: b } => {
            *big_endian = b;
            interfaces.clear();
            Ok(None)
        }
        NgBlock::Interface(i) => {
            interfaces.push(i);
            Ok(None)
        }
        NgBlock::Packet(p) => Ok(Some(p)),
        NgBlock::Skipped => Ok(None),
    }
}

/// The byte order a section header block declares.
fn block_type_order(block: &[u8]) -> bool {
    pcapng::word(block, 8, false) != Some(BYTE_ORDER_MAGIC)
}

impl Iterator for CaptureReader {
    type Item = Result<Frame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame().transpose()
    }
}

impl std::iter::FusedIterator for CaptureReader {}

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
        // tcpdump -s 64: every record's original length exceeds the snapshot length (which
        // pcap-file 2's checked reader, the reader's former base, rejected).
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
    fn pcapng_interface_options_that_pcap_file_refused_are_read() {
        // pcap-file 2, the reader's former base, failed the file over an if_tzone
        // option or an interface name that is not UTF-8; neither matters here.
        for option in [(10u16, &[0u8, 0, 0, 0][..]), (2, &[0xff, 0xfe, b'0'][..])] {
            let mut ng = Ng::new(false);
            ng.idb(1, 0, &[option]).epb(0, 7_000_001, b"x");
            assert_eq!(
                read_ok(&ng.bytes()),
                [frame(1, LinkType::Ethernet, Duration::new(7, 1_000), b"x")],
                "option {}",
                option.0
            );
        }
    }

    #[test]
    fn pcapng_block_lengths_that_cannot_be_are_malformed() {
        // Shorter than a block's 12 framing bytes, not a multiple of 4, and past the limit.
        for len in [8u32, 30, (MAX_RECORD + 4) as u32] {
            let mut bytes = Ng::new(false).bytes();
            bytes.extend_from_slice(&6u32.to_le_bytes());
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&[0; 32]);
            let err = read_all(&bytes).1.unwrap();
            assert!(
                matches!(err, CaptureError::Malformed { after_frame: 0, .. }),
                "{len}: {err:?}"
            );
            assert!(err.to_string().contains("block length"), "{err}");
        }
    }

    /// A reader that hands out one byte per call, as a pipe may.
    struct Trickle(Cursor<Vec<u8>>);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(1);
            self.0.read(&mut buf[..n])
        }
    }

    #[test]
    fn short_reads_are_no_truncation() {
        for (bytes, expected) in [sample_pcap(), sample_pcapng(true)] {
            let reader = CaptureReader::from_reader(Trickle(Cursor::new(bytes)), "pipe").unwrap();
            let frames: Vec<Frame> = reader.collect::<Result<_, _>>().unwrap();
            assert_eq!(frames, expected);
        }
    }

    /// A reader that fails after `ok` bytes.
    struct Failing {
        data: Cursor<Vec<u8>>,
        ok: u64,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.data.position() >= self.ok {
                return Err(io::Error::other("disk on fire"));
            }
            let n = buf.len().min((self.ok - self.data.position()) as usize);
            self.data.read(&mut buf[..n])
        }
    }

    #[test]
    fn read_errors_keep_the_os_error() {
        let (bytes, _) = sample_pcapng(false);
        let mut reader = CaptureReader::from_reader(
            Failing {
                data: Cursor::new(bytes),
                ok: 60,
            },
            "disk",
        )
        .unwrap();
        let err = reader.find_map(Result::err).unwrap();
        assert!(matches!(err, CaptureError::Io { .. }), "{err:?}");
        let source = std::error::Error::source(&err).unwrap();
        assert!(source.to_string().contains("disk on fire"), "{source}");
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
