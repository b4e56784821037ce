//! Local Route Header (IBTA 7.7), 8 bytes, first in every native InfiniBand
//! packet. RoCE carries no LRH: the Ethernet and IP headers route instead,
//! and the ICRC stands 8 bytes of 0xFF in its place.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +-------+-------+-------+---+---+-------------------------------+
//! |  VL   | LVer  |  SL   |rsv|LNH|             DLID              |
//! +-------+-------+-------+---+---+---+---------------------------+
//! |  resv5  |       PktLen        |             SLID              |
//! +---------+---------------------+-------------------------------+
//! ```
//! A switch rewrites VL on each hop, so the ICRC masks it (IBTA 7.8.1);
//! a router rewrites the whole LRH, so packets with a GRH mask all of it.

use super::error::{need, Error, Layer, Result};
use super::field::{be16, put16, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 8;

/// The only link version the IBTA defines (IBTA 7.7).
pub const LVER: u8 = 0;

/// VL 15 is the management lane: subnet management packets (QP0) only, not
/// flow controlled (IBTA 7.6).
pub const VL_MANAGEMENT: u8 = 15;

/// The permissive LID: as DLID it addresses whatever port receives the
/// packet (directed-route SMPs); as SLID it is sent by a port that has no
/// LID yet (IBTA ch. 4).
pub const LID_PERMISSIVE: u16 = 0xffff;

/// First multicast LID; 0xC000..=0xFFFE are multicast (IBTA ch. 4).
pub const LID_MULTICAST_START: u16 = 0xc000;

/// Largest PktLen the 11-bit field holds, in 4-byte words.
pub const PKT_LEN_MAX_WORDS: u16 = 0x7ff;

/// Link Next Header: what follows the LRH (IBTA 7.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lnh {
    /// 0: raw packet, neither IBA transport nor IP (raw Ethertype or vendor).
    Raw,
    /// 1: an IPv6 datagram that is not IBA transport (raw IPv6).
    IpNonIba,
    /// 2: IBA local: the BTH follows the LRH.
    IbaLocal,
    /// 3: IBA global: a GRH follows the LRH, then the BTH.
    IbaGlobal,
}

impl Lnh {
    /// Decodes the low two bits; every value is defined, so this cannot fail.
    pub const fn from_bits(bits: u8) -> Lnh {
        match bits & 0x3 {
            0 => Lnh::Raw,
            1 => Lnh::IpNonIba,
            2 => Lnh::IbaLocal,
            _ => Lnh::IbaGlobal,
        }
    }

    pub const fn bits(self) -> u8 {
        match self {
            Lnh::Raw => 0,
            Lnh::IpNonIba => 1,
            Lnh::IbaLocal => 2,
            Lnh::IbaGlobal => 3,
        }
    }

    /// Whether a GRH follows the LRH.
    pub const fn has_grh(self) -> bool {
        matches!(self, Lnh::IbaGlobal)
    }

    /// Whether the packet carries IBA transport (a BTH, and so an ICRC).
    pub const fn is_iba(self) -> bool {
        matches!(self, Lnh::IbaLocal | Lnh::IbaGlobal)
    }

    fn describe(self) -> &'static str {
        match self {
            Lnh::Raw => "raw: no IBA transport, no IP (raw Ethertype or vendor packet)",
            Lnh::IpNonIba => "IP non-IBA transport: an IPv6 header follows",
            Lnh::IbaLocal => "IBA local: BTH follows",
            Lnh::IbaGlobal => "IBA global: GRH follows, then BTH",
        }
    }
}

header_view!(
    /// A zero-copy view of an LRH at the start of `buffer`.
    Lrh,
    Layer::Lrh
);

impl<T: AsRef<[u8]>> Lrh<T> {
    /// Virtual lane; switches may change it hop by hop.
    pub fn vl(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn lver(&self) -> u8 {
        self.b()[0] & 0x0f
    }
    /// Service level: end-to-end priority class, mapped to a VL per link.
    pub fn sl(&self) -> u8 {
        self.b()[1] >> 4
    }
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.b()[1])
    }
    pub fn dlid(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// Packet length in 4-byte words, LRH through ICRC (through the last
    /// payload word for raw packets, which have no ICRC); the VCRC is not
    /// counted (IBTA 7.7).
    pub fn pkt_len_words(&self) -> u16 {
        be16(self.b(), 4) & PKT_LEN_MAX_WORDS
    }
    pub fn slid(&self) -> u16 {
        be16(self.b(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lrh<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Writes byte 0: VL and LVer.
    pub fn set_vl_lver(&mut self, vl: u8, lver: u8) {
        self.m()[0] = ((vl & 0x0f) << 4) | (lver & 0x0f);
    }
    /// Writes byte 1: SL, zero for the reserved bits, LNH.
    pub fn set_sl_lnh(&mut self, sl: u8, lnh: Lnh) {
        self.m()[1] = ((sl & 0x0f) << 4) | lnh.bits();
    }
    pub fn set_dlid(&mut self, dlid: u16) {
        put16(self.m(), 2, dlid);
    }
    /// Writes bytes 4-5: zero for the reserved bits, then PktLen.
    pub fn set_pkt_len_words(&mut self, words: u16) {
        put16(self.m(), 4, words & PKT_LEN_MAX_WORDS);
    }
    pub fn set_slid(&mut self, slid: u16) {
        put16(self.m(), 6, slid);
    }
}

/// The LRH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LrhRepr {
    /// 4 bits.
    pub vl: u8,
    /// 4 bits; always 0 after `parse`.
    pub lver: u8,
    /// 4 bits.
    pub sl: u8,
    pub lnh: Lnh,
    pub dlid: u16,
    /// 11 bits: words from the first LRH byte through the ICRC.
    pub pkt_len_words: u16,
    pub slid: u16,
}

impl LrhRepr {
    /// Reads an LRH. Reserved bits are ignored (IBTA 7.7). An LVer other
    /// than 0 is rejected: a port drops packets whose link version it does
    /// not support (IBTA 7.7).
    pub fn parse<T: AsRef<[u8]>>(lrh: &Lrh<T>) -> Result<LrhRepr> {
        need(Layer::Lrh, lrh.b(), HEADER_LEN)?;
        if lrh.lver() != LVER {
            return Err(Error::bad_field(Layer::Lrh, "LVer", u64::from(lrh.lver())));
        }
        Ok(LrhRepr {
            vl: lrh.vl(),
            lver: lrh.lver(),
            sl: lrh.sl(),
            lnh: lrh.lnh(),
            dlid: lrh.dlid(),
            pkt_len_words: lrh.pkt_len_words(),
            slid: lrh.slid(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// The packet length PktLen declares, in bytes, LRH through ICRC
    /// (the VCRC's 2 bytes follow and are not counted).
    pub const fn pkt_len_bytes(&self) -> usize {
        (self.pkt_len_words as usize) * 4
    }

    /// Writes the header; reserved bits are written as zero. `buf` must hold
    /// `HEADER_LEN` bytes. Out-of-range values are truncated to their field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, lrh: &mut Lrh<T>) {
        lrh.set_vl_lver(self.vl, self.lver);
        lrh.set_sl_lnh(self.sl, self.lnh);
        lrh.set_dlid(self.dlid);
        lrh.set_pkt_len_words(self.pkt_len_words);
        lrh.set_slid(self.slid);
    }
}

fn lid_meaning(raw: u128, source: bool) -> String {
    let lid = raw as u16;
    match lid {
        0 => "LID 0, reserved (no valid port has it)".into(),
        LID_PERMISSIVE if source => "permissive LID: sender has no LID assigned yet".into(),
        LID_PERMISSIVE => "permissive LID: accepted by whichever port receives it".into(),
        LID_MULTICAST_START..=0xfffe if source => {
            format!("multicast LID {lid:#06x}, not valid as a source")
        }
        LID_MULTICAST_START..=0xfffe => format!("multicast LID {lid:#06x}"),
        _ => format!("unicast LID {lid}"),
    }
}

impl<T: AsRef<[u8]>> Describe for Lrh<T> {
    const LAYER: Layer = Layer::Lrh;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("VL", "vl", 0, 4, "virtual lane on this link"),
        FieldSpec::new("LVer", "lver", 4, 4, "link version, always 0"),
        FieldSpec::new("SL", "sl", 8, 4, "service level (priority class)"),
        FieldSpec::new("resv2", "resv2", 12, 2, "reserved"),
        FieldSpec::new("LNH", "lnh", 14, 2, "link next header"),
        FieldSpec::new("DLID", "dlid", 16, 16, "destination local identifier"),
        FieldSpec::new("resv5", "resv5", 32, 5, "reserved"),
        FieldSpec::new(
            "PktLen",
            "pkt_len",
            37,
            11,
            "packet length in words, LRH through ICRC",
        ),
        FieldSpec::new("SLID", "slid", 48, 16, "source local identifier"),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "vl" if raw == u128::from(VL_MANAGEMENT) => {
                Some("VL15, the management lane: subnet management only, no flow control".into())
            }
            "vl" => Some(format!("data VL{raw}")),
            "lver" if raw == 0 => Some("link version 0, the only one defined".into()),
            "lver" => Some(format!("unsupported link version {raw}: drop")),
            "lnh" => Some(Lnh::from_bits(raw as u8).describe().into()),
            "dlid" => Some(lid_meaning(raw, false)),
            "slid" => Some(lid_meaning(raw, true)),
            "pkt_len" => Some(format!(
                "{raw} words = {} bytes, LRH through ICRC (VCRC not counted)",
                raw * 4
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // A local (LNH = 2) packet on VL0, SL0, from LID 1 to LID 2: an RC SEND
    // Only with 40 bytes of payload, 8 + 12 + 40 + 4 (ICRC) = 64 bytes = 16
    // words.
    const SAMPLE: [u8; 8] = [0x00, 0x02, 0x00, 0x02, 0x00, 0x10, 0x00, 0x01];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Lrh<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Lrh<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = LrhRepr::parse(&Lrh::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            LrhRepr {
                vl: 0,
                lver: 0,
                sl: 0,
                lnh: Lnh::IbaLocal,
                dlid: 2,
                pkt_len_words: 16,
                slid: 1,
            }
        );
        assert_eq!(r.pkt_len_bytes(), 64);
        assert!(r.lnh.is_iba() && !r.lnh.has_grh());
    }

    #[test]
    fn management_smp_sample() {
        // A directed-route SMP: VL15, SL0, LNH local, permissive DLID and
        // SLID; LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 = 288 bytes = 72
        // words.
        let b = [0xf0, 0x02, 0xff, 0xff, 0x00, 0x48, 0xff, 0xff];
        let r = LrhRepr::parse(&Lrh::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.vl, VL_MANAGEMENT);
        assert_eq!(r.dlid, LID_PERMISSIVE);
        assert_eq!(r.pkt_len_words, 72);
        let d = <Lrh<&[u8]> as Describe>::describe(&b).unwrap();
        assert!(d[0].meaning.as_deref().unwrap().contains("management"));
        assert!(d[5].meaning.as_deref().unwrap().contains("permissive"));
    }

    #[test]
    fn truncated_and_bad_lver() {
        let e = Lrh::new_checked(&SAMPLE[..7]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Lrh, 8, 7));
        let e = LrhRepr::parse(&Lrh::new_unchecked(&SAMPLE[..3])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Lrh, 8, 3));
        let mut b = SAMPLE;
        b[0] = 0x01;
        let e = LrhRepr::parse(&Lrh::new_unchecked(&b[..])).unwrap_err();
        assert_eq!(e, Error::bad_field(Layer::Lrh, "LVer", 1));
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let mut b = SAMPLE;
        b[1] |= 0x0c;
        b[4] |= 0xf8;
        let r = LrhRepr::parse(&Lrh::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.lnh, Lnh::IbaLocal);
        assert_eq!(r.pkt_len_words, 16);
        let mut out = [0xffu8; HEADER_LEN];
        r.emit(&mut Lrh::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    #[test]
    fn lnh_bits_round_trip() {
        for bits in 0..4 {
            assert_eq!(Lnh::from_bits(bits).bits(), bits);
        }
    }

    fn arb_repr() -> impl Strategy<Value = LrhRepr> {
        (
            0u8..16,
            0u8..16,
            0u8..4,
            any::<u16>(),
            0u16..=PKT_LEN_MAX_WORDS,
            any::<u16>(),
        )
            .prop_map(|(vl, sl, lnh, dlid, len, slid)| LrhRepr {
                vl,
                lver: LVER,
                sl,
                lnh: Lnh::from_bits(lnh),
                dlid,
                pkt_len_words: len,
                slid,
            })
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(r in arb_repr()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Lrh::new_unchecked(&mut buf[..]));
            prop_assert_eq!(LrhRepr::parse(&Lrh::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = LrhRepr::parse(&Lrh::new_unchecked(&bytes[..]));
            let _ = <Lrh<&[u8]> as Describe>::describe(&bytes);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Lrh::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Lrh<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("vl"), u64::from(v.vl()));
            prop_assert_eq!(f("lver"), u64::from(v.lver()));
            prop_assert_eq!(f("sl"), u64::from(v.sl()));
            prop_assert_eq!(f("lnh"), u64::from(v.lnh().bits()));
            prop_assert_eq!(f("dlid"), u64::from(v.dlid()));
            prop_assert_eq!(f("pkt_len"), u64::from(v.pkt_len_words()));
            prop_assert_eq!(f("slid"), u64::from(v.slid()));
        }
    }
}
