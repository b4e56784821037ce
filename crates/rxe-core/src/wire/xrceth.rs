//! XRC Extended Transport Header (IBTA Annex A14, Extended Reliable Connected
//! transport), 4 bytes: the first ETH of every XRC request. XRC target QPs are
//! shared by many receive queues, so each request names the XRC SRQ that is to
//! receive it.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+-----------------------------------------------+
//! |   reserved    |                    XRCSRQ                     |
//! +---------------+-----------------------------------------------+
//! ```

use super::error::{need, Layer, Result};
use super::field::{be24, put24, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

header_view!(
    /// A zero-copy view of an XRCETH at the start of `buffer`.
    Xrceth,
    Layer::Xrceth
);

impl<T: AsRef<[u8]>> Xrceth<T> {
    /// The number of the XRC SRQ that receives this request (24 bits).
    pub fn xrc_srq(&self) -> u32 {
        be24(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Xrceth<T> {
    /// Writes the reserved byte as zero and the low 24 bits of `srqn`.
    pub fn set_xrc_srq(&mut self, srqn: u32) {
        let b = self.buffer.as_mut();
        b[0] = 0;
        put24(b, 1, srqn);
    }
}

/// The XRCETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcethRepr {
    /// 24 bits.
    pub xrc_srq: u32,
}

impl XrcethRepr {
    /// Reads an XRCETH; the reserved byte is ignored.
    pub fn parse<T: AsRef<[u8]>>(h: &Xrceth<T>) -> Result<XrcethRepr> {
        need(Layer::Xrceth, h.b(), HEADER_LEN)?;
        Ok(XrcethRepr {
            xrc_srq: h.xrc_srq(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the reserved byte is written as zero. `h` must hold
    /// `HEADER_LEN` bytes. `xrc_srq` is truncated to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Xrceth<T>) {
        h.set_xrc_srq(self.xrc_srq);
    }
}

impl<T: AsRef<[u8]>> Describe for Xrceth<T> {
    const LAYER: Layer = Layer::Xrceth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("resv8", "resv8", 0, 8, "reserved"),
        FieldSpec::new(
            "XRCSRQ",
            "xrc_srq",
            8,
            24,
            "XRC shared receive queue that receives this request",
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // No capture carries XRC; XRC SRQ number 0x000042.
    const SAMPLE: [u8; 4] = [0x00, 0x00, 0x00, 0x42];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Xrceth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Xrceth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = XrcethRepr::parse(&Xrceth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.xrc_srq, 0x42);
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Xrceth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = Xrceth::new_checked(&SAMPLE[..2]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Xrceth, HEADER_LEN, 2));
        let e = XrcethRepr::parse(&Xrceth::new_unchecked(&SAMPLE[..1])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Xrceth, HEADER_LEN, 1));
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let mut b = SAMPLE;
        b[0] = 0xff;
        let r = XrcethRepr::parse(&Xrceth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.xrc_srq, 0x42);
        let mut out = [0xffu8; HEADER_LEN];
        r.emit(&mut Xrceth::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(xrc_srq in 0u32..1 << 24) {
            let r = XrcethRepr { xrc_srq };
            let mut buf = [0xffu8; HEADER_LEN];
            r.emit(&mut Xrceth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[0], 0);
            prop_assert_eq!(XrcethRepr::parse(&Xrceth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Xrceth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Xrceth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("resv8"), u64::from(bytes[0]));
            prop_assert_eq!(f("xrc_srq"), u64::from(v.xrc_srq()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Xrceth::new_checked(&bytes[..]).and_then(|v| XrcethRepr::parse(&v));
            let _ = XrcethRepr::parse(&Xrceth::new_unchecked(&bytes[..]));
        }
    }
}
