//! Why a capture could not be read or written.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
