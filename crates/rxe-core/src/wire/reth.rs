//! RDMA Extended Transport Header (IBTA 9.3.3), 16 bytes: the remote buffer of
//! RDMA WRITE (in its FIRST or ONLY packet), RDMA READ request, ATOMIC WRITE
//! and FLUSH.
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
//! |                          DMALength                            |
//! +---------------------------------------------------------------+
//! ```
//! DMALength is the length of the whole message, not of this packet.

use super::error::{need, Layer, Result};
use super::field::{be32, be64, put32, put64, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 16;

header_view!(
    /// A zero-copy view of a RETH at the start of `buffer`.
    Reth,
    Layer::Reth
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Remote virtual address of the first byte of the message.
    pub fn va(&self) -> u64 {
        be64(self.b(), 0)
    }
    /// R_Key that authorizes access to the remote buffer.
    pub fn rkey(&self) -> u32 {
        be32(self.b(), 8)
    }
    /// Length in bytes of the whole RDMA operation.
    pub fn dma_len(&self) -> u32 {
        be32(self.b(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_va(&mut self, va: u64) {
        put64(self.m(), 0, va);
    }
    pub fn set_rkey(&mut self, rkey: u32) {
        put32(self.m(), 8, rkey);
    }
    pub fn set_dma_len(&mut self, len: u32) {
        put32(self.m(), 12, len);
    }
}

/// The RETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH. Every value is legal on the wire: whether the address
    /// range fits the memory region is the responder's check, not the parser's.
    pub fn parse<T: AsRef<[u8]>>(reth: &Reth<T>) -> Result<RethRepr> {
        need(Layer::Reth, reth.b(), HEADER_LEN)?;
        Ok(RethRepr {
            va: reth.va(),
            rkey: reth.rkey(),
            dma_len: reth.dma_len(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `reth` must hold `HEADER_LEN` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, reth: &mut Reth<T>) {
        reth.set_va(self.va);
        reth.set_rkey(self.rkey);
        reth.set_dma_len(self.dma_len);
    }
}

impl<T: AsRef<[u8]>> Describe for Reth<T> {
    const LAYER: Layer = Layer::Reth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "VirtualAddress",
            "va",
            0,
            64,
            "remote virtual address of the message",
        ),
        FieldSpec::new("R_Key", "rkey", 64, 32, "remote key of the memory region"),
        FieldSpec::new(
            "DMALength",
            "dma_len",
            96,
            32,
            "bytes in the whole RDMA operation",
        ),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            // A zero-length RDMA touches no memory, so its R_Key and address
            // need not be valid: worth saying when reading a dump.
            "dma_len" if raw == 0 => Some("0 bytes (no memory is accessed)".into()),
            "dma_len" => Some(format!("{raw} bytes")),
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

    // The RETH of an RC RDMA WRITE First from captures/write_bw.pcap.
    const SAMPLE: [u8; 16] = [
        0x00, 0x00, 0x56, 0x50, 0x7e, 0x97, 0xe0, 0x00, 0x00, 0x00, 0x0a, 0x07, 0x00, 0x00, 0x10,
        0x00,
    ];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Reth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Reth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = RethRepr::parse(&Reth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x5650_7e97_e000,
                rkey: 0xa07,
                dma_len: 4096,
            }
        );
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Reth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = Reth::new_checked(&SAMPLE[..15]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Reth, HEADER_LEN, 15));
        let e = RethRepr::parse(&Reth::new_unchecked(&SAMPLE[..3])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Reth, HEADER_LEN, 3));
    }

    #[test]
    fn describe_sample() {
        let f = <Reth<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        assert_eq!(f[2].meaning.as_deref(), Some("4096 bytes"));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) {
            let r = RethRepr { va, rkey, dma_len };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Reth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(RethRepr::parse(&Reth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Reth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Reth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("va"), v.va());
            prop_assert_eq!(f("rkey"), u64::from(v.rkey()));
            prop_assert_eq!(f("dma_len"), u64::from(v.dma_len()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Reth::new_checked(&bytes[..]).and_then(|v| RethRepr::parse(&v));
            let _ = RethRepr::parse(&Reth::new_unchecked(&bytes[..]));
        }
    }
}
