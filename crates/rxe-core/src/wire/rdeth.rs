//! Reliable Datagram Extended Transport Header (IBTA 9.3.1), 4 bytes: the
//! End-to-End context that carries a Reliable Datagram packet. It is the
//! first ETH of every RD packet. rxe does not implement RD (Linux verbs have
//! no RD QP type); the header is here so that dissection is complete.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+-----------------------------------------------+
//! |   reserved    |                    EECnxt                     |
//! +---------------+-----------------------------------------------+
//! ```

use super::error::{need, Layer, Result};
use super::field::{be24, put24, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

header_view!(
    /// A zero-copy view of an RDETH at the start of `buffer`.
    Rdeth,
    Layer::Rdeth
);

impl<T: AsRef<[u8]>> Rdeth<T> {
    /// The End-to-End context number (24 bits).
    pub fn ee_context(&self) -> u32 {
        be24(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rdeth<T> {
    /// Writes the reserved byte as zero and the low 24 bits of `eecn`.
    pub fn set_ee_context(&mut self, eecn: u32) {
        let b = self.buffer.as_mut();
        b[0] = 0;
        put24(b, 1, eecn);
    }
}

/// The RDETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdethRepr {
    /// 24 bits.
    pub ee_context: u32,
}

impl RdethRepr {
    /// Reads an RDETH; the reserved byte is ignored.
    pub fn parse<T: AsRef<[u8]>>(h: &Rdeth<T>) -> Result<RdethRepr> {
        need(Layer::Rdeth, h.b(), HEADER_LEN)?;
        Ok(RdethRepr {
            ee_context: h.ee_context(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the reserved byte is written as zero. `h` must hold
    /// `HEADER_LEN` bytes. `ee_context` is truncated to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Rdeth<T>) {
        h.set_ee_context(self.ee_context);
    }
}

impl<T: AsRef<[u8]>> Describe for Rdeth<T> {
    const LAYER: Layer = Layer::Rdeth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("resv8", "resv8", 0, 8, "reserved"),
        FieldSpec::new(
            "EECnxt",
            "ee_context",
            8,
            24,
            "end-to-end context of this reliable datagram",
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // No capture carries RD; EE context 0x00abcd.
    const SAMPLE: [u8; 4] = [0x00, 0x00, 0xab, 0xcd];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Rdeth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Rdeth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = RdethRepr::parse(&Rdeth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.ee_context, 0xabcd);
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Rdeth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = Rdeth::new_checked(&SAMPLE[..3]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Rdeth, HEADER_LEN, 3));
        let e = RdethRepr::parse(&Rdeth::new_unchecked(&SAMPLE[..0])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Rdeth, HEADER_LEN, 0));
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let mut b = SAMPLE;
        b[0] = 0xa5;
        let r = RdethRepr::parse(&Rdeth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.ee_context, 0xabcd);
        let mut out = [0xffu8; HEADER_LEN];
        r.emit(&mut Rdeth::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(ee_context in 0u32..1 << 24) {
            let r = RdethRepr { ee_context };
            let mut buf = [0xffu8; HEADER_LEN];
            r.emit(&mut Rdeth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[0], 0);
            prop_assert_eq!(RdethRepr::parse(&Rdeth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Rdeth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Rdeth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("resv8"), u64::from(bytes[0]));
            prop_assert_eq!(f("ee_context"), u64::from(v.ee_context()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Rdeth::new_checked(&bytes[..]).and_then(|v| RdethRepr::parse(&v));
            let _ = RdethRepr::parse(&Rdeth::new_unchecked(&bytes[..]));
        }
    }
}
