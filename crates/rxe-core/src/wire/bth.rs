//! Base Transport Header (IBTA 9.2), 12 bytes, present in every packet.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+-+-+---+-------+-------------------------------+
//! |    OpCode     |S|M|Pad| TVer  |            P_Key              |
//! +-+-+-----------+-+-+---+-------+-------------------------------+
//! |F|B|  resv6    |                  DestQP                       |
//! +-+-------------+-----------------------------------------------+
//! |A|   resv7     |                   PSN                         |
//! +-+-------------+-----------------------------------------------+
//! ```
//! F and B are FECN and BECN (IBTA 9.2; RoCEv2 Annex A17.9 uses FECN for ECN
//! marking); they and resv6 form the byte the ICRC masks.

use super::error::{need, Error, Layer, Result};
use super::field::{be16, be24, put16, put24, Describe, FieldSpec};
use super::opcode::{Opcode, BTH_LEN};
use super::view::header_view;

pub const HEADER_LEN: usize = BTH_LEN;

/// The only transport header version the IBTA defines (IBTA 9.2.4).
pub const TVER: u8 = 0;

header_view!(
    /// A zero-copy view of a BTH at the start of `buffer`.
    Bth,
    Layer::Bth
);

impl<T: AsRef<[u8]>> Bth<T> {
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }
    /// Solicited Event: the responder should raise a completion event.
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    /// MigReq: path migration state (IBTA 17.2.8).
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }
    /// Pad count: bytes (0..=3) added to make the payload a whole word.
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0f
    }
    pub fn pkey(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }
    pub fn dest_qp(&self) -> u32 {
        be24(self.b(), 5)
    }
    /// AckReq: the requester asks the responder to acknowledge this packet.
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }
    pub fn psn(&self) -> u32 {
        be24(self.b(), 9)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_opcode(&mut self, op: Opcode) {
        self.m()[0] = op.0;
    }
    /// Writes byte 1: SE, M, pad count and TVer together.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.m()[1] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count & 0x3) << 4)
            | (tver & 0x0f);
    }
    pub fn set_pkey(&mut self, pkey: u16) {
        put16(self.m(), 2, pkey);
    }
    /// Writes byte 4: FECN, BECN, and zero for the reserved bits.
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.m()[4] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    pub fn set_dest_qp(&mut self, qpn: u32) {
        put24(self.m(), 5, qpn);
    }
    /// Writes byte 8 (AckReq, reserved bits zero) and the PSN.
    pub fn set_ack_req_psn(&mut self, ack_req: bool, psn: u32) {
        self.m()[8] = u8::from(ack_req) << 7;
        put24(self.m(), 9, psn);
    }
}

/// The BTH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub mig_req: bool,
    pub pad_count: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

impl BthRepr {
    /// Reads a BTH. Reserved bits are ignored, as IBTA 9.2 asks of receivers
    /// (and the ICRC mask covers byte 4 anyway). A TVer other than 0 is
    /// rejected: IBTA 9.6.1.1 drops packets whose TVer the receiver does not support.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        need(Layer::Bth, bth.b(), HEADER_LEN)?;
        if bth.tver() != TVER {
            return Err(Error::bad_field(Layer::Bth, "TVer", u64::from(bth.tver())));
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; reserved bits are written as zero. `buf` must hold
    /// `HEADER_LEN` bytes. Out-of-range values are truncated to their field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        bth.set_flags(self.solicited, self.mig_req, self.pad_count, TVER);
        bth.set_pkey(self.pkey);
        bth.set_ecn(self.fecn, self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req_psn(self.ack_req, self.psn);
    }
}

impl<T: AsRef<[u8]>> Describe for Bth<T> {
    const LAYER: Layer = Layer::Bth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "OpCode",
            "opcode",
            0,
            8,
            "transport and operation of this packet",
        ),
        FieldSpec::new("SE", "se", 8, 1, "Solicited Event: wake a waiting receiver"),
        FieldSpec::new(
            "M",
            "m",
            9,
            1,
            "MigReq: 1 while the sender is MIGRATED; on an armed alternate path, migrate",
        ),
        FieldSpec::new(
            "PadCnt",
            "pad_count",
            10,
            2,
            "bytes of pad after the payload",
        ),
        FieldSpec::new("TVer", "tver", 12, 4, "transport header version, always 0"),
        FieldSpec::new("P_Key", "pkey", 16, 16, "partition key"),
        FieldSpec::new("FECN", "fecn", 32, 1, "forward congestion notification"),
        FieldSpec::new("BECN", "becn", 33, 1, "backward congestion notification"),
        FieldSpec::new("resv6", "resv6", 34, 6, "reserved (masked in the ICRC)"),
        FieldSpec::new("DestQP", "dest_qp", 40, 24, "destination queue pair number"),
        FieldSpec::new("A", "ack_req", 64, 1, "AckReq: acknowledge this packet"),
        FieldSpec::new("resv7", "resv7", 65, 7, "reserved"),
        FieldSpec::new("PSN", "psn", 72, 24, "packet sequence number"),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "opcode" => Some(Opcode(raw as u8).to_string()),
            "pkey" => {
                let full = raw & 0x8000 != 0;
                Some(format!(
                    "partition {:#06x}, {} member",
                    raw & 0x7fff,
                    if full { "full" } else { "limited" }
                ))
            }
            "dest_qp" if raw == 1 => Some("QP1, the general services interface (GSI)".into()),
            "dest_qp" if raw == 0 => Some("QP0, the subnet management interface (SMI)".into()),
            "se" | "m" | "fecn" | "becn" | "ack_req" => {
                Some(if raw == 1 { "set" } else { "clear" }.into())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // The BTH of frame 1 of captures/rc_pingpong.pcap: an RC SEND First.
    const SAMPLE: [u8; 12] = [
        0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x15, 0x00, 0x63, 0xc9, 0xc5,
    ];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Bth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Bth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = BthRepr::parse(&Bth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::RC_SEND_FIRST);
        assert_eq!(r.pkey, 0xffff);
        assert_eq!(r.dest_qp, 0x15);
        assert_eq!(r.psn, 0x63c9c5);
        assert!(!r.ack_req);
    }

    #[test]
    fn truncated_and_bad_tver() {
        let e = Bth::new_checked(&SAMPLE[..11]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Bth, 12, 11));
        let mut b = SAMPLE;
        b[1] = 0x01;
        let e = BthRepr::parse(&Bth::new_unchecked(&b[..])).unwrap_err();
        assert_eq!(e, Error::bad_field(Layer::Bth, "TVer", 1));
    }

    #[test]
    fn reserved_bits_are_ignored() {
        let mut b = SAMPLE;
        b[4] |= 0x3f;
        b[8] |= 0x7f;
        let r = BthRepr::parse(&Bth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.dest_qp, 0x15);
        assert!(!r.ack_req && !r.fecn);
    }

    fn arb_repr() -> impl Strategy<Value = BthRepr> {
        (
            any::<u8>(),
            any::<[bool; 5]>(),
            0u8..4,
            any::<u16>(),
            0u32..1 << 24,
            0u32..1 << 24,
        )
            .prop_map(|(op, f, pad, pkey, qp, psn)| BthRepr {
                opcode: Opcode(op),
                solicited: f[0],
                mig_req: f[1],
                pad_count: pad,
                pkey,
                fecn: f[2],
                becn: f[3],
                dest_qp: qp,
                ack_req: f[4],
                psn,
            })
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(r in arb_repr()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Bth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(BthRepr::parse(&Bth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Bth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Bth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("opcode"), u64::from(v.opcode().0));
            prop_assert_eq!(f("pad_count"), u64::from(v.pad_count()));
            prop_assert_eq!(f("tver"), u64::from(v.tver()));
            prop_assert_eq!(f("pkey"), u64::from(v.pkey()));
            prop_assert_eq!(f("dest_qp"), u64::from(v.dest_qp()));
            prop_assert_eq!(f("psn"), u64::from(v.psn()));
            prop_assert_eq!(f("ack_req") == 1, v.ack_req());
            prop_assert_eq!(f("se") == 1, v.solicited());
            prop_assert_eq!(f("fecn") == 1, v.fecn());
            prop_assert_eq!(f("becn") == 1, v.becn());
            prop_assert_eq!(f("m") == 1, v.mig_req());
        }
    }
}
