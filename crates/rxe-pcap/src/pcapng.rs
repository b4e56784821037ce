//! pcapng, one block at a time: the blocks that carry packets or describe
//! them are parsed by `pcap-parser` (section headers, interface descriptions
//! with their options, Enhanced and Simple Packet Blocks); the other blocks
//! (name resolution, statistics, secrets, custom, unknown) are skipped
//! unparsed. Done here instead, each where `pcap-parser` 0.17 does not read
//! the block as the pcapng specification says:
//!
//! * the obsolete Packet Block (type 2), which `pcap-parser` does not know:
//!   parsed by [`parse_packet_block`];
//! * `if_tsoffset` in a big-endian section: `pcap-parser` always decodes the
//!   option little-endian, so it is read here in the section's byte order
//!   ([`ts_offset`]);
//! * timestamps: `pcap-parser`'s `decode_ts` gives 32-bit seconds and knows no
//!   resolution finer than 10^-19 s or 2^-63 s; [`timestamp`] scales by any
//!   `if_tsresol`;
//! * an Enhanced Packet Block whose captured length runs past its block:
//!   `pcap-parser` asks for more input, which a reader takes for a truncated
//!   file; [`check_enhanced_packet`] reports it as malformed, with the length;
//! * a Simple Packet Block holds min(original length, snaplen) bytes:
//!   `pcap-parser` cuts it at the original length only, the snaplen is applied
//!   here.

use std::time::Duration;

use pcap_parser::pcapng::{
    parse_enhancedpacketblock_be, parse_enhancedpacketblock_le, parse_interfacedescriptionblock_be,
    parse_interfacedescriptionblock_le, parse_sectionheaderblock, parse_simplepacketblock_be,
    parse_simplepacketblock_le,
};
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::{OptionCode, PcapError};

use crate::reader::RecordError;
use crate::LinkType;

/// Block types (pcapng specification, section 10.1).
pub(crate) const SECTION_HEADER: u32 = 0x0a0d_0d0a;
const INTERFACE_DESCRIPTION: u32 = 1;
const PACKET: u32 = 2;
const SIMPLE_PACKET: u32 = 3;
const ENHANCED_PACKET: u32 = 6;
/// The byte-order magic of a section header, as written by the section.
pub(crate) const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// An interface of the current section, as its description block says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interface {
    pub(crate) link_type: LinkType,
    pub(crate) snaplen: u32,
    /// `if_tsresol`: 10^-n s per unit, or 2^-n s with the top bit set.
    pub(crate) tsresol: u8,
    /// `if_tsoffset`: seconds added to every timestamp.
    pub(crate) tsoffset: i64,
}

/// A packet of a pcapng block.
pub(crate) struct NgPacket {
    pub(crate) interface_id: u32,
    /// The timestamp count in the interface's units; `None` for a Simple Packet Block.
    pub(crate) raw_timestamp: Option<u64>,
    pub(crate) orig_len: u32,
    pub(crate) data: Vec<u8>,
}

/// What one block means to the reader.
pub(crate) enum NgBlock {
    /// A section header: its byte order; the interfaces start again.
    Section {
        big_endian: bool,
    },
    Interface(Interface),
    Packet(NgPacket),
    /// Any other block.
    Skipped,
}

/// The name of a block type in error messages.
fn block_name(block_type: u32) -> &'static str {
    match block_type {
        SECTION_HEADER => "Section Header Block",
        INTERFACE_DESCRIPTION => "Interface Description Block",
        PACKET => "Packet Block",
        SIMPLE_PACKET => "Simple Packet Block",
        ENHANCED_PACKET => "Enhanced Packet Block",
        _ => "block",
    }
}

fn malformed(block_type: u32, e: pcap_parser::nom::Err<PcapError<&[u8]>>) -> RecordError {
    let name = block_name(block_type);
    RecordError::Malformed(match e {
        // The whole block is in hand: asking for more means a length inside it is wrong.
        pcap_parser::nom::Err::Incomplete(_) => {
            format!("{name}: a length inside the block runs past its end")
        }
        pcap_parser::nom::Err::Error(e) | pcap_parser::nom::Err::Failure(e) => {
            format!("{name}: {e}")
        }
    })
}

/// Reads a 32-bit word of `bytes` at `at` in the section's byte order.
pub(crate) fn word(bytes: &[u8], at: usize, big_endian: bool) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

/// Parses one whole block (`block` holds it all, from its type to its
/// trailing length) of a section in byte order `big_endian`.
pub(crate) fn parse_block(
    block_type: u32,
    block: &[u8],
    big_endian: bool,
) -> Result<NgBlock, RecordError> {
    let err = |e| malformed(block_type, e);
    match block_type {
        SECTION_HEADER => {
            let (_, shb) = parse_sectionheaderblock(block).map_err(err)?;
            Ok(NgBlock::Section {
                big_endian: shb.big_endian(),
            })
        }
        INTERFACE_DESCRIPTION => {
            let parse = if big_endian {
                parse_interfacedescriptionblock_be
            } else {
                parse_interfacedescriptionblock_le
            };
            let (_, idb) = parse(block).map_err(err)?;
            Ok(NgBlock::Interface(Interface {
                // The 16-bit LinkType field, widened by pcap-parser.
                link_type: LinkType::from_number(idb.linktype.0 as u32 & 0xffff),
                snaplen: idb.snaplen,
                tsresol: idb.if_tsresol,
                tsoffset: ts_offset(&idb.options, big_endian),
            }))
        }
        ENHANCED_PACKET => {
            check_enhanced_packet(block, big_endian)?;
            let parse = if big_endian {
                parse_enhancedpacketblock_be
            } else {
                parse_enhancedpacketblock_le
            };
            let (_, epb) = parse(block).map_err(err)?;
            Ok(NgBlock::Packet(NgPacket {
                interface_id: epb.if_id,
                raw_timestamp: Some((u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low)),
                orig_len: epb.origlen,
                data: epb.packet_data().to_vec(),
            }))
        }
        SIMPLE_PACKET => {
            let parse = if big_endian {
                parse_simplepacketblock_be
            } else {
                parse_simplepacketblock_le
            };
            let (_, spb) = parse(block).map_err(err)?;
            // The snaplen of interface 0 is applied by the reader.
            Ok(NgBlock::Packet(NgPacket {
                interface_id: 0,
                raw_timestamp: None,
                orig_len: spb.origlen,
                data: spb.packet_data().to_vec(),
            }))
        }
        PACKET => parse_packet_block(block, big_endian).map(NgBlock::Packet),
        _ => Ok(NgBlock::Skipped),
    }
}

/// `if_tsoffset` (option 14, a signed 64-bit count of seconds) in the
/// section's byte order; 0 when absent.
fn ts_offset(options: &[pcap_parser::PcapNGOption<'_>], big_endian: bool) -> i64 {
    options
        .iter()
        .filter(|o| o.code == OptionCode::IfTsoffset)
        .find_map(|o| <[u8; 8]>::try_from(o.value().get(..8)?).ok())
        .map_or(0, |b| {
            if big_endian {
                i64::from_be_bytes(b)
            } else {
                i64::from_le_bytes(b)
            }
        })
}

/// Checks that an Enhanced Packet Block's captured length fits the block:
/// 28 bytes of header fields and the trailing length surround the data.
fn check_enhanced_packet(block: &[u8], big_endian: bool) -> Result<(), RecordError> {
    let fixed = 32;
    let room = block.len().checked_sub(fixed);
    let captured = word(block, 20, big_endian);
    match (room, captured) {
        (Some(room), Some(captured)) if captured as usize > room => Err(RecordError::Malformed(
            format!("Enhanced Packet Block captured length {captured} exceeds the block's {room} data bytes"),
        )),
        // Too short for its fields: pcap-parser says so.
        _ => Ok(()),
    }
}

/// Parses an obsolete Packet Block (type 2; pcapng specification, appendix
/// A), which pcap-parser 0.17 does not know: a 16-bit interface ID and a
/// 16-bit drop count, the timestamp as two 32-bit words (high first), the
/// captured and original lengths, the data; options are skipped.
pub(crate) fn parse_packet_block(block: &[u8], big_endian: bool) -> Result<NgPacket, RecordError> {
    let name = block_name(PACKET);
    let fixed = 32;
    let w = |at| word(block, at, big_endian);
    let (Some(first), Some(high), Some(low), Some(captured), Some(orig_len)) =
        (w(8), w(12), w(16), w(20), w(24))
    else {
        return Err(RecordError::Malformed(format!(
            "{name} of {} bytes, less than its {fixed} fixed bytes",
            block.len()
        )));
    };
    let interface_id = if big_endian {
        first >> 16
    } else {
        first & 0xffff
    };
    let room = block.len().saturating_sub(fixed);
    let data = usize::try_from(captured)
        .ok()
        .and_then(|len| block.get(28..28usize.checked_add(len)?))
        .filter(|d| d.len() <= room)
        .ok_or_else(|| {
            RecordError::Malformed(format!(
                "{name} captured length {captured} exceeds the block's {room} data bytes"
            ))
        })?;
    Ok(NgPacket {
        interface_id,
        raw_timestamp: Some((u64::from(high) << 32) | u64::from(low)),
        orig_len,
        data: data.to_vec(),
    })
}

/// Converts a pcapng timestamp count to time since the epoch, using the
/// interface's `if_tsresol` (default 10^-6 s) and `if_tsoffset` (default 0 s).
pub(crate) fn timestamp(interface: &Interface, raw: u64) -> Result<Duration, RecordError> {
    let resol = interface.tsresol;
    let offset = interface.tsoffset;
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
