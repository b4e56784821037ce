//! rxe-pcap reads and writes packet captures, with no socket code, so that
//! anything that only reads a capture (the `rxe dissect` command, tests) needs
//! neither mio, socket2 nor nix.
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

#![forbid(unsafe_code)]

mod error;
mod pcapng;
mod reader;
#[cfg(test)]
mod test_files;
mod writer;

pub use error::CaptureError;
pub use reader::{CaptureFormat, CaptureReader, Frame};
pub use writer::{PcapWriter, PCAP_SNAPLEN};

/// The link layer of a capture's frames: the one type rxe-core's frame
/// decoder takes, re-exported so that callers need not name both crates.
pub use rxe_core::wire::frame::LinkType;
