//! Atomic Acknowledge Extended Transport Header (IBTA 9.3.6), 8 bytes: the
//! value the target held before a CmpSwap or FetchAdd. It follows the AETH in
//! an ATOMIC Acknowledge packet.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------------------+
//! |                 OrigRemoteData (63:32)                        |
//! +---------------------------------------------------------------+
//! |                 OrigRemoteData (31:0)                         |
//! +---------------------------------------------------------------+
//! ```

use super::error::{need, Layer, Result};
use super::field::{be64, put64, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 8;

header_view!(
    /// A zero-copy view of an AtomicAckETH at the start of `buffer`.
    AtomicAckEth,
    Layer::AtomicAckEth
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The target's value before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        be64(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    pub fn set_orig_data(&mut self, v: u64) {
        put64(self.buffer.as_mut(), 0, v);
    }
}

/// The AtomicAckETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    pub orig_data: u64,
}

impl AtomicAckEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> Result<AtomicAckEthRepr> {
        need(Layer::AtomicAckEth, h.b(), HEADER_LEN)?;
        Ok(AtomicAckEthRepr {
            orig_data: h.orig_data(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `h` must hold `HEADER_LEN` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig_data(self.orig_data);
    }
}

impl<T: AsRef<[u8]>> Describe for AtomicAckEth<T> {
    const LAYER: Layer = Layer::AtomicAckEth;
    const FIELDS: &'static [FieldSpec] = &[FieldSpec::new(
        "OrigRemoteData",
        "orig_data",
        0,
        64,
        "the target's value before the atomic operation",
    )];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::error::Error;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // The AtomicAckETH of an RC ATOMIC Acknowledge from captures/atomic_bw.pcap
    // (perftest leaves the target buffer uninitialised, hence the noise).
    const SAMPLE: [u8; 8] = [0xa1, 0xbd, 0xd1, 0x13, 0xd6, 0x3d, 0xde, 0x29];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<AtomicAckEth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<AtomicAckEth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.orig_data, 0xa1bd_d113_d63d_de29);
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut AtomicAckEth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = AtomicAckEth::new_checked(&SAMPLE[..7]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::AtomicAckEth, HEADER_LEN, 7));
        let e = AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(&SAMPLE[..4])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::AtomicAckEth, HEADER_LEN, 4));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(orig_data in any::<u64>()) {
            let r = AtomicAckEthRepr { orig_data };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut AtomicAckEth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = AtomicAckEth::new_unchecked(&bytes[..]);
            let s = &<AtomicAckEth<&[u8]> as Describe>::FIELDS[0];
            let raw = read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64;
            prop_assert_eq!(raw, v.orig_data());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = AtomicAckEth::new_checked(&bytes[..]).and_then(|v| AtomicAckEthRepr::parse(&v));
            let _ = AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(&bytes[..]));
        }
    }
}
