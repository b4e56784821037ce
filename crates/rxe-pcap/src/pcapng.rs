//! The pcapng packet blocks and timestamps, parsed here rather than by
//! `pcap-file` (see the crate documentation for why).

use std::time::Duration;

use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::{ENHANCED_PACKET_BLOCK, PACKET_BLOCK, SIMPLE_PACKET_BLOCK};
use pcap_file::Endianness;

use crate::reader::RecordError;

/// A packet block of pcapng, parsed here from its body.
pub(crate) struct NgPacket {
    pub(crate) interface_id: u32,
    /// The timestamp count in the interface's units; `None` for a Simple Packet Block.
    pub(crate) raw_timestamp: Option<u64>,
    pub(crate) orig_len: u32,
    pub(crate) data: Vec<u8>,
}

/// Parses the body of an Enhanced, Simple or (obsolete) Packet Block. Done by hand: with
/// pcap-file the byte order must be named through a crate it does not re-export, its
/// Packet Block reads the timestamp as one 64-bit word (the format has two 32-bit words, high
/// first), and an option it cannot parse, such as a comment that is not UTF-8, would fail
/// the packet. Options are not needed here and are skipped.
pub(crate) fn parse_packet_block(
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
pub(crate) fn ng_timestamp(
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
