//! FLUSH Extended Transport Header, 4 bytes: what an RDMA FLUSH request makes
//! durable or visible, and over which memory. FLUSH arrived with the Memory
//! Placement Extensions of IBTA 1.5 (Annex A19; the placement types are
//! A19.4.1.1, the selectivity levels A19.4.1.2). The FETH is followed by a
//! RETH that names the memory. Field positions as the Linux rxe driver and
//! rdma-core's uapi use them (facts only).
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------+---+-------+
//! |                     reserved                      |SEL|  PLT  |
//! +---------------------------------------------------+---+-------+
//! ```
//! SEL (selectivity level): 0 flushes the range the RETH names, 1 the whole
//! memory region of the RETH's R_Key. PLT (placement type) is a bit set:
//! bit 0 global visibility, bit 1 persistence.

use super::error::{need, Layer, Result};
use super::field::{be32, put32, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

/// Selectivity level: flush the address range of the RETH.
pub const SEL_MEMORY_RANGE: u8 = 0;
/// Selectivity level: flush the whole memory region of the RETH's R_Key.
pub const SEL_MEMORY_REGION: u8 = 1;
/// Placement type bit: make the data globally visible.
pub const PLT_GLOBAL_VISIBILITY: u8 = 1 << 0;
/// Placement type bit: make the data persistent.
pub const PLT_PERSISTENCE: u8 = 1 << 1;

const SEL_SHIFT: u32 = 4;
const SEL_MASK: u32 = 0x3;
const PLT_MASK: u32 = 0xf;

header_view!(
    /// A zero-copy view of a FETH at the start of `buffer`.
    Feth,
    Layer::Feth
);

impl<T: AsRef<[u8]>> Feth<T> {
    fn word(&self) -> u32 {
        be32(self.b(), 0)
    }

    /// SEL, 2 bits.
    pub fn selectivity_level(&self) -> u8 {
        ((self.word() >> SEL_SHIFT) & SEL_MASK) as u8
    }
    /// PLT, 4 bits.
    pub fn placement_type(&self) -> u8 {
        (self.word() & PLT_MASK) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Writes the whole word: SEL and PLT truncated to their fields, and the
    /// reserved bits zero. The two share a byte, so they are set together.
    pub fn set_fields(&mut self, selectivity_level: u8, placement_type: u8) {
        let w = ((u32::from(selectivity_level) & SEL_MASK) << SEL_SHIFT)
            | (u32::from(placement_type) & PLT_MASK);
        put32(self.buffer.as_mut(), 0, w);
    }
}

/// The FETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// 2 bits; see `SEL_*`.
    pub selectivity_level: u8,
    /// 4 bits, a set of `PLT_*` flags.
    pub placement_type: u8,
}

impl FethRepr {
    /// Reads a FETH; reserved bits are ignored. Reserved SEL values and PLT
    /// bits are passed through: refusing them is the responder's decision
    /// (with a NAK), not a parse failure.
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> Result<FethRepr> {
        need(Layer::Feth, h.buffer.as_ref(), HEADER_LEN)?;
        Ok(FethRepr {
            selectivity_level: h.selectivity_level(),
            placement_type: h.placement_type(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; reserved bits are written as zero. `h` must hold
    /// `HEADER_LEN` bytes. Out-of-range values are truncated to their field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) {
        h.set_fields(self.selectivity_level, self.placement_type);
    }
}

impl<T: AsRef<[u8]>> Describe for Feth<T> {
    const LAYER: Layer = Layer::Feth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("resv26", "resv26", 0, 26, "reserved"),
        FieldSpec::new(
            "SEL",
            "sel",
            26,
            2,
            "selectivity level: which memory to flush",
        ),
        FieldSpec::new(
            "PLT",
            "plt",
            28,
            4,
            "placement type: visibility and/or persistence",
        ),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "sel" => Some(
                match raw as u8 {
                    SEL_MEMORY_RANGE => "memory range (the RETH's address and length)",
                    SEL_MEMORY_REGION => "whole memory region (of the RETH's R_Key)",
                    _ => "reserved",
                }
                .into(),
            ),
            "plt" => {
                let plt = raw as u8;
                let mut parts = Vec::new();
                if plt & PLT_GLOBAL_VISIBILITY != 0 {
                    parts.push("global visibility");
                }
                if plt & PLT_PERSISTENCE != 0 {
                    parts.push("persistence");
                }
                if plt & !(PLT_GLOBAL_VISIBILITY | PLT_PERSISTENCE) != 0 {
                    parts.push("reserved bits set");
                }
                Some(if parts.is_empty() {
                    "none".into()
                } else {
                    parts.join(" and ")
                })
            }
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

    // No capture carries FLUSH (the peer's 6.1 kernel predates it); this is a
    // persistence flush of a whole memory region: SEL 1, PLT 2.
    const SAMPLE: [u8; 4] = [0x00, 0x00, 0x00, 0x12];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Feth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Feth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = FethRepr::parse(&Feth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            FethRepr {
                selectivity_level: SEL_MEMORY_REGION,
                placement_type: PLT_PERSISTENCE,
            }
        );
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Feth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
        let f = <Feth<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        assert_eq!(
            f[1].meaning.as_deref(),
            Some("whole memory region (of the RETH's R_Key)")
        );
        assert_eq!(f[2].meaning.as_deref(), Some("persistence"));
    }

    #[test]
    fn placement_words() {
        let words = |plt: u128| <Feth<&[u8]> as Describe>::meaning("plt", plt).unwrap();
        assert_eq!(words(0), "none");
        assert_eq!(words(3), "global visibility and persistence");
        assert_eq!(words(0x9), "global visibility and reserved bits set");
        let sel = |v: u128| <Feth<&[u8]> as Describe>::meaning("sel", v).unwrap();
        assert_eq!(sel(0), "memory range (the RETH's address and length)");
        assert_eq!(sel(3), "reserved");
    }

    #[test]
    fn truncated() {
        let e = Feth::new_checked(&SAMPLE[..3]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Feth, HEADER_LEN, 3));
        let e = FethRepr::parse(&Feth::new_unchecked(&SAMPLE[..2])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Feth, HEADER_LEN, 2));
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let b = [0xff, 0xff, 0xff, 0xc0 | 0x12];
        let r = FethRepr::parse(&Feth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.selectivity_level, 1);
        assert_eq!(r.placement_type, 2);
        let mut out = [0xffu8; HEADER_LEN];
        r.emit(&mut Feth::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(sel in 0u8..4, plt in 0u8..16) {
            let r = FethRepr { selectivity_level: sel, placement_type: plt };
            let mut buf = [0xffu8; HEADER_LEN];
            r.emit(&mut Feth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(&buf[..3], &[0u8; 3][..]);
            prop_assert_eq!(buf[3] & 0xc0, 0);
            prop_assert_eq!(FethRepr::parse(&Feth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Feth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Feth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("resv26"), u64::from(u32::from_be_bytes(bytes) >> 6));
            prop_assert_eq!(f("sel"), u64::from(v.selectivity_level()));
            prop_assert_eq!(f("plt"), u64::from(v.placement_type()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Feth::new_checked(&bytes[..]).and_then(|v| FethRepr::parse(&v));
            let _ = FethRepr::parse(&Feth::new_unchecked(&bytes[..]));
        }
    }
}
