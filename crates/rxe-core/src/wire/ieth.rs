//! Invalidate Extended Transport Header (IBTA 9.3.8), 4 bytes: the R_Key that
//! a SEND with Invalidate (LAST or ONLY packet) asks the responder to
//! invalidate once the message completes.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------------------+
//! |                            R_Key                              |
//! +---------------------------------------------------------------+
//! ```

use super::error::{need, Layer, Result};
use super::field::{be32, put32, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

header_view!(
    /// A zero-copy view of an IETH at the start of `buffer`.
    Ieth,
    Layer::Ieth
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        be32(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    pub fn set_rkey(&mut self, rkey: u32) {
        put32(self.buffer.as_mut(), 0, rkey);
    }
}

/// The IETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IethRepr {
    pub rkey: u32,
}

impl IethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Ieth<T>) -> Result<IethRepr> {
        need(Layer::Ieth, h.b(), HEADER_LEN)?;
        Ok(IethRepr { rkey: h.rkey() })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `h` must hold `HEADER_LEN` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ieth<T>) {
        h.set_rkey(self.rkey);
    }
}

impl<T: AsRef<[u8]>> Describe for Ieth<T> {
    const LAYER: Layer = Layer::Ieth;
    const FIELDS: &'static [FieldSpec] = &[FieldSpec::new(
        "R_Key",
        "rkey",
        0,
        32,
        "remote key to invalidate",
    )];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // No capture carries an IETH; this invalidates R_Key 0x00000a07 (the
    // R_Key of captures/write_bw.pcap).
    const SAMPLE: [u8; 4] = [0x00, 0x00, 0x0a, 0x07];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Ieth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Ieth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = IethRepr::parse(&Ieth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.rkey, 0xa07);
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Ieth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = Ieth::new_checked(&SAMPLE[..1]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Ieth, HEADER_LEN, 1));
        let e = IethRepr::parse(&Ieth::new_unchecked(&SAMPLE[..3])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Ieth, HEADER_LEN, 3));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(rkey in any::<u32>()) {
            let r = IethRepr { rkey };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Ieth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(IethRepr::parse(&Ieth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Ieth::new_unchecked(&bytes[..]);
            let s = &<Ieth<&[u8]> as Describe>::FIELDS[0];
            let raw = read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64;
            prop_assert_eq!(raw, u64::from(v.rkey()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Ieth::new_checked(&bytes[..]).and_then(|v| IethRepr::parse(&v));
            let _ = IethRepr::parse(&Ieth::new_unchecked(&bytes[..]));
        }
    }
}
