//! [`PcapWriter`]: frames to a classic pcap file.

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::CaptureError;
use crate::LinkType;

/// The snapshot length written in the file header: frames longer than this are cut.
pub const PCAP_SNAPLEN: u32 = 262_144;

/// Writes frames to a classic pcap file (microsecond timestamps, native byte order,
/// snapshot length [`PCAP_SNAPLEN`]).
///
/// The 24-byte file header and the 16-byte record headers are written here: pcap-parser's
/// serializer allocates a vector for each, and the tap writes every packet a device sends
/// or receives.
///
/// [`create`](Self::create) buffers the file: call [`finish`](Self::finish) (or
/// [`flush`](Self::flush)) to see write errors, which a drop would swallow.
///
/// ```no_run
/// # fn main() -> Result<(), rxe_pcap::CaptureError> {
/// use std::time::{Duration, SystemTime};
/// use rxe_pcap::PcapWriter;
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
        // The libpcap file header: magic (microseconds), version 2.4, no time zone
        // correction, no accuracy, snapshot length, link type; in native byte order, which
        // readers tell from the magic.
        let mut header = [0u8; 24];
        header[..4].copy_from_slice(&0xa1b2_c3d4u32.to_ne_bytes());
        header[4..6].copy_from_slice(&2u16.to_ne_bytes());
        header[6..8].copy_from_slice(&4u16.to_ne_bytes());
        header[16..20].copy_from_slice(&PCAP_SNAPLEN.to_ne_bytes());
        header[20..24].copy_from_slice(&link_type.number().to_ne_bytes());
        writer
            .write_all(&header)
            .map_err(|source| CaptureError::Io {
                path: path.clone(),
                source,
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
    use crate::test_files::*;
    use crate::{CaptureReader, Frame};

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
