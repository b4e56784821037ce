//! Field tables: each header lists its fields once (IBTA name, position,
//! width, purpose), and that one table drives `describe`, which reads raw bits
//! from the bytes for `rxe dissect -v` and `--json`. The typed getters of
//! each header are written by hand for speed; a unit test per header checks
//! that they agree with its table.

use super::error::Layer;

/// One field of a header, as the IBTA specification names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// The name the IBTA uses (`OpCode`, `DestQP`, `P_Key` ...).
    pub name: &'static str,
    /// A stable snake_case key for JSON and for `Describe::meaning`.
    pub key: &'static str,
    /// Position of the first (most significant) bit, from the header start.
    pub bit_offset: u16,
    /// Width in bits, 1..=128.
    pub bits: u8,
    /// What the field is for, in a few words.
    pub doc: &'static str,
}

impl FieldSpec {
    pub const fn new(
        name: &'static str,
        key: &'static str,
        bit_offset: u16,
        bits: u8,
        doc: &'static str,
    ) -> Self {
        FieldSpec {
            name,
            key,
            bit_offset,
            bits,
            doc,
        }
    }

    /// Whether the field is reserved (its value carries no meaning).
    pub fn is_reserved(&self) -> bool {
        self.key.starts_with("resv") || self.key.starts_with("reserved")
    }
}

/// A field read from real bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldValue {
    pub spec: &'static FieldSpec,
    /// The raw bits, right-aligned.
    pub raw: u128,
    /// What the value means, in words, where there is more to say than the
    /// number (an opcode name, a syndrome, a GID in text form).
    pub meaning: Option<String>,
}

impl FieldValue {
    /// The raw bits as a string of `0`/`1`, most significant first
    /// (hex for fields wider than 32 bits).
    pub fn bit_string(&self) -> String {
        let bits = usize::from(self.spec.bits);
        if bits > 32 {
            let digits = bits.div_ceil(4);
            format!("0x{:0width$x}", self.raw, width = digits)
        } else {
            format!("{:0width$b}", self.raw, width = bits)
        }
    }
}

/// A header type that can explain its own bytes.
pub trait Describe {
    /// Which header this is.
    const LAYER: Layer;
    /// Its fields in wire order, covering every bit of the header.
    const FIELDS: &'static [FieldSpec];

    /// The header length in bytes, from the field table.
    fn header_len() -> usize {
        Self::FIELDS
            .iter()
            .map(|f| usize::from(f.bits))
            .sum::<usize>()
            / 8
    }

    /// Words for a field value, where the number alone says too little.
    fn meaning(_key: &str, _raw: u128) -> Option<String> {
        None
    }

    /// Reads every field of the header from `bytes` (which must hold at
    /// least `header_len()` bytes; shorter input yields `None`).
    fn describe(bytes: &[u8]) -> Option<Vec<FieldValue>> {
        if bytes.len() < Self::header_len() {
            return None;
        }
        Self::FIELDS
            .iter()
            .map(|spec| {
                let raw = read_bits(bytes, usize::from(spec.bit_offset), spec.bits)?;
                Some(FieldValue {
                    spec,
                    raw,
                    meaning: Self::meaning(spec.key, raw),
                })
            })
            .collect()
    }
}

/// Reads `bits` bits (1..=128) starting at `bit_offset`, network (big-endian)
/// bit order. `None` if the range leaves the buffer.
pub fn read_bits(buf: &[u8], bit_offset: usize, bits: u8) -> Option<u128> {
    let bits = usize::from(bits);
    if bits == 0 || bits > 128 {
        return None;
    }
    let end = bit_offset.checked_add(bits)?;
    if end.div_ceil(8) > buf.len() {
        return None;
    }
    let mut value: u128 = 0;
    for bit in bit_offset..end {
        let byte = buf[bit / 8];
        let b = (byte >> (7 - (bit % 8))) & 1;
        value = (value << 1) | u128::from(b);
    }
    Some(value)
}

/// Checks that a field table is well-formed: fields are contiguous, start at
/// bit 0, and end on a byte boundary. Used by each header's unit tests.
#[cfg(test)]
pub(crate) fn assert_table_contiguous(fields: &[FieldSpec]) {
    let mut next = 0u16;
    for f in fields {
        assert_eq!(
            f.bit_offset, next,
            "field {} starts at the wrong bit",
            f.name
        );
        assert!(f.bits >= 1 && f.bits <= 128, "field {} width", f.name);
        next += u16::from(f.bits);
    }
    assert_eq!(next % 8, 0, "table does not end on a byte boundary");
}

/// Big-endian readers for fixed positions; callers have checked the length.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
/// Writes the low 24 bits of `v`.
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_bits_crosses_bytes() {
        let b = [0b1010_1100, 0b0101_0011];
        assert_eq!(read_bits(&b, 0, 1), Some(1));
        assert_eq!(read_bits(&b, 4, 8), Some(0b1100_0101));
        assert_eq!(read_bits(&b, 0, 16), Some(0xac53));
        assert_eq!(read_bits(&b, 9, 8), None);
        assert_eq!(read_bits(&b, usize::MAX, 8), None);
    }
}
