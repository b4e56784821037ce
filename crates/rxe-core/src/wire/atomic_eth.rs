//! Atomic Extended Transport Header (IBTA 9.3.4), 28 bytes: the target and
//! operands of a CmpSwap or FetchAdd request.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------------------+
//! |                   VirtualAddress (63:32)                      |
//! +---------------------------------------------------------------+
//! |                   VirtualAddress (31:0)                       |
//! +---------------------------------------------------------------+
//! |                            R_Key                              |
//! +---------------------------------------------------------------+
//! |                   SwapOrAddData (63:32)                       |
//! +---------------------------------------------------------------+
//! |                   SwapOrAddData (31:0)                        |
//! +---------------------------------------------------------------+
//! |                    CompareData (63:32)                        |
//! +---------------------------------------------------------------+
//! |                    CompareData (31:0)                         |
//! +---------------------------------------------------------------+
//! ```
//! FetchAdd uses SwapOrAddData as the addend and ignores CompareData. The
//! target must be 8-byte aligned; that is the responder's check, since the
//! header itself can carry any address.

use super::error::{need, Layer, Result};
use super::field::{be32, be64, put32, put64, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 28;

header_view!(
    /// A zero-copy view of an AtomicETH at the start of `buffer`.
    AtomicEth,
    Layer::AtomicEth
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Remote virtual address of the 64-bit target.
    pub fn va(&self) -> u64 {
        be64(self.b(), 0)
    }
    pub fn rkey(&self) -> u32 {
        be32(self.b(), 8)
    }
    /// The value to swap in (CmpSwap) or to add (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        be64(self.b(), 12)
    }
    /// The value to compare with (CmpSwap only).
    pub fn compare(&self) -> u64 {
        be64(self.b(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_va(&mut self, va: u64) {
        put64(self.m(), 0, va);
    }
    pub fn set_rkey(&mut self, rkey: u32) {
        put32(self.m(), 8, rkey);
    }
    pub fn set_swap_add(&mut self, v: u64) {
        put64(self.m(), 12, v);
    }
    pub fn set_compare(&mut self, v: u64) {
        put64(self.m(), 20, v);
    }
}

/// The AtomicETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH. Every value is legal on the wire.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<AtomicEthRepr> {
        need(Layer::AtomicEth, h.b(), HEADER_LEN)?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `h` must hold `HEADER_LEN` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

impl<T: AsRef<[u8]>> Describe for AtomicEth<T> {
    const LAYER: Layer = Layer::AtomicEth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "VirtualAddress",
            "va",
            0,
            64,
            "remote virtual address of the 64-bit target",
        ),
        FieldSpec::new("R_Key", "rkey", 64, 32, "remote key of the memory region"),
        FieldSpec::new(
            "SwapOrAddData",
            "swap_add",
            96,
            64,
            "value to swap in (CmpSwap) or to add (FetchAdd)",
        ),
        FieldSpec::new(
            "CompareData",
            "compare",
            160,
            64,
            "value to compare with (CmpSwap only)",
        ),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "va" if raw % 8 != 0 => Some("not 8-byte aligned: the responder must reject it".into()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // The AtomicETH of an RC FetchAdd (add 1) from captures/atomic_bw.pcap.
    const SAMPLE: [u8; 28] = [
        0x00, 0x00, 0x55, 0xbe, 0xc1, 0x4c, 0xe0, 0x00, // va
        0x00, 0x00, 0x0d, 0x48, // rkey
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // add
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // compare
    ];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<AtomicEth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<AtomicEth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = AtomicEthRepr::parse(&AtomicEth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicEthRepr {
                va: 0x55be_c14c_e000,
                rkey: 0xd48,
                swap_add: 1,
                compare: 0,
            }
        );
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut AtomicEth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = AtomicEth::new_checked(&SAMPLE[..27]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::AtomicEth, HEADER_LEN, 27));
        let e = AtomicEthRepr::parse(&AtomicEth::new_unchecked(&SAMPLE[..16])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::AtomicEth, HEADER_LEN, 16));
    }

    #[test]
    fn misaligned_va_is_described() {
        let mut b = SAMPLE;
        b[7] = 0x04;
        let f = <AtomicEth<&[u8]> as Describe>::describe(&b).unwrap();
        assert!(f[0].meaning.as_deref().unwrap().contains("aligned"));
        let f = <AtomicEth<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        assert_eq!(f[0].meaning, None);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            va in any::<u64>(), rkey in any::<u32>(), swap_add in any::<u64>(), compare in any::<u64>()
        ) {
            let r = AtomicEthRepr { va, rkey, swap_add, compare };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut AtomicEth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = AtomicEth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <AtomicEth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("va"), v.va());
            prop_assert_eq!(f("rkey"), u64::from(v.rkey()));
            prop_assert_eq!(f("swap_add"), v.swap_add());
            prop_assert_eq!(f("compare"), v.compare());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = AtomicEth::new_checked(&bytes[..]).and_then(|v| AtomicEthRepr::parse(&v));
            let _ = AtomicEthRepr::parse(&AtomicEth::new_unchecked(&bytes[..]));
        }
    }
}
