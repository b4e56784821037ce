//! rxe-pcap reads and writes packet captures, with no socket code, so that
//! anything that only reads a capture (the `rxe dissect` command, tests) needs
//! neither mio, socket2 nor nix.
//!
//! [`CaptureReader`] reads classic pcap (microsecond or nanosecond timestamps, either byte
//! order) and pcapng (either byte order, several sections, several interfaces with their own
//! link types and timestamp resolutions) and yields every packet as a [`Frame`]. The format is
//! chosen by the file's magic number, not its name. Blocks that carry no packet (name
//! resolution, interface statistics, decryption secrets, custom blocks) are skipped.
//! [`PcapWriter`] writes classic pcap, which every tool reads; [`PcapngWriter`] writes
//! pcapng with a description of each interface (name, addresses) and nanosecond timestamps.
//!
//! Frames are not decoded here: rxe-core does that.
//!
//! The formats are parsed by the `pcap-parser` crate (rusticata, 0.17): the pcap file header
//! and records, and the pcapng section headers, interface descriptions (with their
//! options) and Enhanced and Simple Packet Blocks. It reads every capture the tests read
//! (the golden kernel-rxe captures, their pcapng and nanosecond conversions) frame for
//! frame as the former `pcap-file` based reader did. What is done here instead, each where
//! `pcap-parser` does not read the file as the format says, is documented where it is
//! done: the I/O and the framing of records and blocks by their lengths (`reader`), and
//! in `pcapng` the obsolete Packet Block, `if_tsoffset` in a big-endian section,
//! timestamps at any `if_tsresol`, an Enhanced Packet Block whose captured length runs
//! past its block, and the snaplen of a Simple Packet Block. The writer writes its 24-byte
//! header and 16-byte records itself (`writer`), and so does the pcapng writer its blocks
//! (`pcapng_writer`).
//!
//! A record or block is held whole in memory, up to 64 MiB. Truncated and corrupted input
//! gives an error, never a panic (tested on every cut of a file, and on corrupted copies).

#![forbid(unsafe_code)]

mod error;
mod pcapng;
mod pcapng_writer;
mod reader;
#[cfg(test)]
mod test_files;
mod writer;

pub use error::CaptureError;
pub use pcapng_writer::{Interface, PcapngWriter};
pub use reader::{CaptureFormat, CaptureReader, Frame};
pub use writer::{PcapWriter, PCAP_SNAPLEN};

/// The link layer of a capture's frames: the one type rxe-core's frame
/// decoder takes, re-exported so that callers need not name both crates.
pub use rxe_core::wire::frame::LinkType;
