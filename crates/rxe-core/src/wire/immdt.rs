//! Immediate Data Extended Transport Header (IBTA 9.3.7), 4 bytes: the
//! immediate value of a SEND or RDMA WRITE "with Immediate", which the
//! responder places in the receive completion.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------------------+
//! |                        Immediate Data                         |
//! +---------------------------------------------------------------+
//! ```
//! The four bytes are opaque to the transport: they are the application's.
//! `imm` reads them big-endian; verbs hand them over unchanged (`imm_data` is
//! a `__be32` in libibverbs), so `imm.to_be_bytes()` are the bytes the peer
//! application wrote.

use super::error::{need, Layer, Result};
use super::field::{be32, put32, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

header_view!(
    /// A zero-copy view of an ImmDt at the start of `buffer`.
    ImmDt,
    Layer::ImmDt
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, read big-endian.
    pub fn imm(&self) -> u32 {
        be32(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    pub fn set_imm(&mut self, imm: u32) {
        put32(self.buffer.as_mut(), 0, imm);
    }
}

/// The ImmDt as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImmDtRepr {
    /// The four bytes as a big-endian u32.
    pub imm: u32,
}

impl ImmDtRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &ImmDt<T>) -> Result<ImmDtRepr> {
        need(Layer::ImmDt, h.b(), HEADER_LEN)?;
        Ok(ImmDtRepr { imm: h.imm() })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `h` must hold `HEADER_LEN` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDt<T>) {
        h.set_imm(self.imm);
    }
}

impl<T: AsRef<[u8]>> Describe for ImmDt<T> {
    const LAYER: Layer = Layer::ImmDt;
    const FIELDS: &'static [FieldSpec] = &[FieldSpec::new(
        "ImmDt",
        "imm",
        0,
        32,
        "immediate data for the receive completion",
    )];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // No capture carries immediate data; this is the value `ibv_post_send`
    // would send for imm_data = htonl(0x12345678).
    const SAMPLE: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<ImmDt<&[u8]> as Describe>::FIELDS);
        assert_eq!(<ImmDt<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = ImmDtRepr::parse(&ImmDt::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.imm, 0x1234_5678);
        assert_eq!(r.imm.to_be_bytes(), SAMPLE);
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut ImmDt::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = ImmDt::new_checked(&SAMPLE[..2]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::ImmDt, HEADER_LEN, 2));
        let e = ImmDtRepr::parse(&ImmDt::new_unchecked(&SAMPLE[..3])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::ImmDt, HEADER_LEN, 3));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(imm in any::<u32>()) {
            let r = ImmDtRepr { imm };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut ImmDt::new_unchecked(&mut buf[..]));
            prop_assert_eq!(ImmDtRepr::parse(&ImmDt::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = ImmDt::new_unchecked(&bytes[..]);
            let s = &<ImmDt<&[u8]> as Describe>::FIELDS[0];
            let raw = read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64;
            prop_assert_eq!(raw, u64::from(v.imm()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = ImmDt::new_checked(&bytes[..]).and_then(|v| ImmDtRepr::parse(&v));
            let _ = ImmDtRepr::parse(&ImmDt::new_unchecked(&bytes[..]));
        }
    }
}
