//! Field tables of the CM messages, and the views built from them.
//!
//! Each CM message lists its fields once, in one macro invocation: IBTA
//! name, JSON key, bit offset from the start of the message (the first byte
//! after the 24-byte MAD header, as the IBTA's CM message tables count),
//! width and meaning. From that one list come the table (`FIELDS`, the
//! same [`FieldSpec`] the wire headers use, so `rxe dissect` can print a
//! MAD like any header), the view's getters and its setters. Getters and
//! table therefore cannot disagree. The fields wider than 128 bits (private
//! data, ARI, ClassPortInfo) are listed as [`BlobSpec`]s.
//!
//! The views never panic: `new_checked` checks the length, and on a view
//! made with `new_unchecked` over too short a buffer a getter reads 0 and a
//! setter writes nothing.

use rxe_core::wire::field::{read_bits, FieldSpec, FieldValue};

/// A field too wide for a [`FieldSpec`]: a run of whole bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobSpec {
    /// The IBTA's name (`PrivateData`, `Additional Rejection Information`).
    pub name: &'static str,
    /// A stable snake_case key.
    pub key: &'static str,
    /// Byte offset from the start of the message.
    pub byte_offset: usize,
    /// Length in bytes.
    pub len: usize,
    pub doc: &'static str,
}

/// A CM message that can explain its own bytes: the analogue of the wire
/// headers' `Describe`, with the blobs that end most messages.
pub trait MadDescribe {
    /// The message's name as the IBTA writes it (`REQ`, `SIDR_REP` ...).
    const NAME: &'static str;
    /// Its fixed-width fields in wire order.
    const FIELDS: &'static [FieldSpec];
    /// Its byte runs (private data and the like), in wire order, after the fields.
    const BLOBS: &'static [BlobSpec];

    /// Words for a value where the number says too little.
    fn meaning(_key: &str, _raw: u128) -> Option<String> {
        None
    }

    /// Reads every fixed field from `data` (the message, after the MAD
    /// header); `None` if `data` is shorter than the fields need.
    fn describe(data: &[u8]) -> Option<Vec<FieldValue>> {
        Self::FIELDS
            .iter()
            .map(|spec| {
                let raw = read_bits(data, usize::from(spec.bit_offset), spec.bits)?;
                Some(FieldValue {
                    spec,
                    raw,
                    meaning: Self::meaning(spec.key, raw),
                })
            })
            .collect()
    }
}

/// Writes the low `bits` bits of `value` at `bit_offset` (big-endian bit
/// order). Does nothing if the range leaves the buffer or `bits` is not
/// 1..=128.
pub(crate) fn write_bits(buf: &mut [u8], bit_offset: usize, bits: u8, value: u128) {
    let bits = usize::from(bits);
    if bits == 0 || bits > 128 {
        return;
    }
    let Some(end) = bit_offset.checked_add(bits) else {
        return;
    };
    if end.div_ceil(8) > buf.len() {
        return;
    }
    for (i, bit) in (bit_offset..end).enumerate() {
        let shift = bits - 1 - i;
        let b = ((value >> shift) & 1) as u8;
        let mask = 1u8 << (7 - (bit % 8));
        if b == 1 {
            buf[bit / 8] |= mask;
        } else {
            buf[bit / 8] &= !mask;
        }
    }
}

/// Reads a field, 0 if the buffer is too short (only possible through
/// `new_unchecked`).
pub(crate) fn get(buf: &[u8], bit_offset: u16, bits: u8) -> u128 {
    read_bits(buf, usize::from(bit_offset), bits).unwrap_or(0)
}

/// Writes a field (nothing if the buffer is too short).
pub(crate) fn set(buf: &mut [u8], bit_offset: u16, bits: u8, value: u128) {
    write_bits(buf, usize::from(bit_offset), bits, value);
}

/// Whether `buf` holds a whole message's data area (DATA_LEN bytes after
/// the MAD header); `Truncated` naming `message` if not.
pub(crate) fn require_data(message: &'static str, buf: &[u8]) -> Result<(), crate::mad::MadError> {
    let len = buf.len();
    if len < crate::mad::DATA_LEN {
        return Err(crate::mad::MadError::Truncated {
            message,
            len,
            need: crate::mad::DATA_LEN,
        });
    }
    Ok(())
}

/// Zeroes a message's data area before it is written, so that reserved
/// bits go out as 0.
pub(crate) fn clear_data(buf: &mut [u8]) {
    if let Some(b) = buf.get_mut(..crate::mad::DATA_LEN) {
        b.fill(0);
    }
}

/// A byte run of the buffer, empty if the buffer is too short.
pub(crate) fn blob(buf: &[u8], at: usize, len: usize) -> &[u8] {
    buf.get(at..at.saturating_add(len)).unwrap_or(&[])
}

pub(crate) fn blob_mut(buf: &mut [u8], at: usize, len: usize) -> &mut [u8] {
    buf.get_mut(at..at.saturating_add(len)).unwrap_or(&mut [])
}

/// Declares a CM message view: the struct, its field and blob tables, its
/// getters and setters, and its `MadDescribe` impl.
macro_rules! cm_message {
    (
        $(#[$vdoc:meta])*
        $view:ident, name: $msg_name:literal,
        fields: [ $(
            $get:ident / $set:ident : $ty:ty = ($name:literal, $key:literal, $off:expr, $bits:expr, $doc:literal)
        ),* $(,)? ],
        blobs: [ $(
            $bget:ident / $bset:ident = ($bname:literal, $bkey:literal, $boff:expr, $blen:expr, $bdoc:literal)
        ),* $(,)? ] $(,)?
    ) => {
        $(#[$vdoc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// A view without a length check (getters of a short buffer read 0).
            pub fn new_unchecked(buffer: T) -> Self {
                $view { buffer }
            }

            /// A view over `buffer`, which must hold a whole message
            /// ([`DATA_LEN`](crate::mad::DATA_LEN) bytes).
            pub fn new_checked(buffer: T) -> Result<Self, $crate::mad::MadError> {
                $crate::mad::field::require_data($msg_name, buffer.as_ref())?;
                Ok($view { buffer })
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                #[doc = $doc]
                pub fn $get(&self) -> $ty {
                    let raw = $crate::mad::field::get(self.buffer.as_ref(), $off, $bits);
                    <$ty>::try_from(raw).unwrap_or_default()
                }
            )*

            $(
                #[doc = $bdoc]
                pub fn $bget(&self) -> &[u8] {
                    $crate::mad::field::blob(self.buffer.as_ref(), $boff, $blen)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = $doc]
                pub fn $set(&mut self, value: $ty) {
                    $crate::mad::field::set(self.buffer.as_mut(), $off, $bits, u128::from(value));
                }
            )*

            $(
                #[doc = $bdoc]
                pub fn $bset(&mut self) -> &mut [u8] {
                    $crate::mad::field::blob_mut(self.buffer.as_mut(), $boff, $blen)
                }
            )*
        }

        impl<T: AsRef<[u8]>> $crate::mad::field::MadDescribe for $view<T> {
            const NAME: &'static str = $msg_name;
            const FIELDS: &'static [rxe_core::wire::field::FieldSpec] = &[
                $( rxe_core::wire::field::FieldSpec::new($name, $key, $off, $bits, $doc), )*
            ];
            const BLOBS: &'static [$crate::mad::field::BlobSpec] = &[
                $( $crate::mad::field::BlobSpec { name: $bname, key: $bkey, byte_offset: $boff, len: $blen, doc: $bdoc }, )*
            ];

            fn meaning(key: &str, raw: u128) -> Option<String> {
                $crate::mad::meaning::meaning(key, raw)
            }
        }
    };
}
pub(crate) use cm_message;

/// Checks a message's tables: fields contiguous from bit 0, then blobs
/// contiguous, together covering the whole message. Used by each message's
/// unit test.
#[cfg(test)]
pub(crate) fn assert_layout<M: MadDescribe>() {
    let mut next = 0usize;
    for f in M::FIELDS {
        assert_eq!(
            usize::from(f.bit_offset),
            next,
            "{} {} starts at the wrong bit",
            M::NAME,
            f.name
        );
        next += usize::from(f.bits);
    }
    assert_eq!(next % 8, 0, "{}: fields do not end on a byte", M::NAME);
    let mut byte = next / 8;
    for b in M::BLOBS {
        assert_eq!(
            b.byte_offset,
            byte,
            "{} {} starts at the wrong byte",
            M::NAME,
            b.name
        );
        byte += b.len;
    }
    assert_eq!(
        byte,
        crate::mad::DATA_LEN,
        "{} does not cover the message",
        M::NAME
    );
}

/// Checks that every getter agrees with the table: sets each field in
/// turn to its all-ones value in a zero buffer and reads it back through
/// the table, with no other bit changed.
#[cfg(test)]
pub(crate) fn assert_fields_isolated<M: MadDescribe>() {
    for f in M::FIELDS {
        let mut buf = [0u8; crate::mad::DATA_LEN];
        let ones = if f.bits == 128 {
            u128::MAX
        } else {
            (1u128 << f.bits) - 1
        };
        write_bits(&mut buf, usize::from(f.bit_offset), f.bits, ones);
        let values = M::describe(&buf).expect("whole message");
        for v in values {
            let want = if v.spec.key == f.key { ones } else { 0 };
            assert_eq!(
                v.raw,
                want,
                "{}: writing {} changed {}",
                M::NAME,
                f.name,
                v.spec.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_bits_round_trips_and_stays_in_range() {
        let mut b = [0u8; 3];
        write_bits(&mut b, 4, 12, 0xabc);
        assert_eq!(b, [0x0a, 0xbc, 0x00]);
        assert_eq!(read_bits(&b, 4, 12), Some(0xabc));
        write_bits(&mut b, 20, 8, 0xff); // leaves the buffer: nothing written
        assert_eq!(b, [0x0a, 0xbc, 0x00]);
        write_bits(&mut b, 0, 0, 1);
        write_bits(&mut b, usize::MAX, 8, 1);
        assert_eq!(b, [0x0a, 0xbc, 0x00]);
    }
}
