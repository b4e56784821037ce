//! ACK Extended Transport Header (IBTA 9.3.5), 4 bytes: carried by
//! Acknowledge, ATOMIC Acknowledge and the FIRST, LAST and ONLY RDMA READ
//! response packets. It says whether the responder accepted the request
//! (ACK), asks the requester to wait (RNR NAK) or refuses it (NAK), and
//! carries the responder's Message Sequence Number.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +-+---+---------+-----------------------------------------------+
//! |R|Typ|  Value  |                      MSN                      |
//! +-+---+---------+-----------------------------------------------+
//!  \_____________/
//!      Syndrome
//! ```
//! The syndrome (IBTA 9.7.5.2 gives the encodings): R is reserved and must be
//! 0; Typ 00 is an ACK whose Value is the end-to-end credit count code, 01 an
//! RNR NAK whose Value is the RNR timer code, 11 a NAK whose Value is the NAK
//! code, and 10 is reserved.

use core::fmt;

use super::error::{need, Layer, Result};
use super::field::{be24, put24, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 4;

/// The credit count code that says "no credit count": the responder does not
/// do end-to-end flow control (the code every ACK of kernel rxe carries).
pub const CREDITS_INVALID: u8 = 31;

/// Credits for codes 0..=30: a roughly logarithmic scale from 0 to 32768
/// (after the first few steps, alternately 1.5x and 1.33x the previous).
const CREDIT_TABLE: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// RNR NAK timer codes in microseconds. Code 0 is the longest wait, not the
/// shortest: the table wraps so that 0 means 655.36 ms.
const RNR_TIMER_MICROS: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The number of end-to-end credits an ACK credit count code grants, or
/// `None` for code 31 ("invalid": no flow control) and for codes too wide for
/// the 5-bit field.
pub const fn credit_count(code: u8) -> Option<u32> {
    if (code as usize) < CREDIT_TABLE.len() {
        Some(CREDIT_TABLE[code as usize])
    } else {
        None
    }
}

/// The time an RNR NAK asks the requester to wait before retrying, in
/// microseconds. Only the low 5 bits of `code` are used, as on the wire.
pub const fn rnr_timer_micros(code: u8) -> u64 {
    RNR_TIMER_MICROS[(code & 0x1f) as usize]
}

/// Why a responder refused a request (the Value of a NAK syndrome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// The PSN is ahead of the expected one: a packet was lost.
    PsnSequenceError,
    /// The opcode, length or another header field is not acceptable.
    InvalidRequest,
    /// The R_Key, address, length or access rights do not permit the access.
    RemoteAccessError,
    /// The responder could not complete the operation (a local error there).
    RemoteOperationalError,
    /// Reliable Datagram only: the RD request is invalid.
    InvalidRdRequest,
    /// A code the IBTA reserves (5..=31), kept as received.
    Reserved(u8),
}

impl NakCode {
    /// Decodes the low 5 bits of `code`.
    pub const fn from_raw(code: u8) -> NakCode {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// The 5-bit code.
    pub const fn to_raw(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PsnSequenceError => f.write_str("PSN sequence error"),
            NakCode::InvalidRequest => f.write_str("invalid request"),
            NakCode::RemoteAccessError => f.write_str("remote access error"),
            NakCode::RemoteOperationalError => f.write_str("remote operational error"),
            NakCode::InvalidRdRequest => f.write_str("invalid RD request"),
            NakCode::Reserved(c) => write!(f, "reserved code {c}"),
        }
    }
}

/// The AETH syndrome, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement; `credits` is the 5-bit credit count code
    /// (see [`credit_count`]).
    Ack { credits: u8 },
    /// Receiver Not Ready: retry after the time that the 5-bit `timer` code
    /// names (see [`rnr_timer_micros`]).
    RnrNak { timer: u8 },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with the reserved bit 7 set or the reserved type 10, kept
    /// as received so that it can be reported and re-emitted unchanged.
    Reserved(u8),
}

impl Syndrome {
    /// An ACK that offers no credit count (no end-to-end flow control).
    pub const ACK_CREDITS_INVALID: Syndrome = Syndrome::Ack {
        credits: CREDITS_INVALID,
    };

    /// Decodes a syndrome byte. Total: every byte has a meaning, and
    /// `Syndrome::from_raw(b).to_raw() == b` for every `b`.
    pub const fn from_raw(raw: u8) -> Syndrome {
        if raw & 0x80 != 0 {
            return Syndrome::Reserved(raw);
        }
        let value = raw & 0x1f;
        match (raw >> 5) & 0x3 {
            0 => Syndrome::Ack { credits: value },
            1 => Syndrome::RnrNak { timer: value },
            3 => Syndrome::Nak(NakCode::from_raw(value)),
            _ => Syndrome::Reserved(raw),
        }
    }

    /// Encodes the syndrome byte; values wider than 5 bits are truncated.
    /// `Reserved(b)` gives `b` back unchanged.
    pub const fn to_raw(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code.to_raw(),
            Syndrome::Reserved(raw) => raw,
        }
    }

    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }

    /// An RNR NAK or a NAK.
    pub const fn is_nak(self) -> bool {
        matches!(self, Syndrome::RnrNak { .. } | Syndrome::Nak(_))
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            // Mask as `to_raw` does, so the words match the byte on the wire.
            Syndrome::Ack { credits } => match credit_count(credits & 0x1f) {
                Some(n) => write!(f, "ACK, credits: {n}"),
                None => f.write_str("ACK, credits: invalid (no end-to-end flow control)"),
            },
            Syndrome::RnrNak { timer } => {
                // Every table entry is a whole number of 10 us steps.
                let us = rnr_timer_micros(timer);
                write!(
                    f,
                    "RNR NAK, retry after {}.{:02} ms",
                    us / 1000,
                    us % 1000 / 10
                )
            }
            Syndrome::Nak(code) => write!(f, "NAK: {code}"),
            Syndrome::Reserved(raw) => write!(f, "reserved syndrome {raw:#04x}"),
        }
    }
}

header_view!(
    /// A zero-copy view of an AETH at the start of `buffer`.
    Aeth,
    Layer::Aeth
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The syndrome byte as it is on the wire.
    pub fn syndrome_raw(&self) -> u8 {
        self.b()[0]
    }
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_raw(self.syndrome_raw())
    }
    /// Message Sequence Number: the count of messages the responder has
    /// completed, modulo 2^24.
    pub fn msn(&self) -> u32 {
        be24(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_syndrome(&mut self, syndrome: Syndrome) {
        self.m()[0] = syndrome.to_raw();
    }
    /// Writes the low 24 bits of `msn`.
    pub fn set_msn(&mut self, msn: u32) {
        put24(self.m(), 1, msn);
    }
}

/// The AETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    /// 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH. A reserved syndrome is not an error here: it parses as
    /// `Syndrome::Reserved` and the completer decides what to do with it.
    pub fn parse<T: AsRef<[u8]>>(aeth: &Aeth<T>) -> Result<AethRepr> {
        need(Layer::Aeth, aeth.b(), HEADER_LEN)?;
        Ok(AethRepr {
            syndrome: aeth.syndrome(),
            msn: aeth.msn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header. `aeth` must hold `HEADER_LEN` bytes. Out-of-range
    /// values are truncated to their field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, aeth: &mut Aeth<T>) {
        aeth.set_syndrome(self.syndrome);
        aeth.set_msn(self.msn);
    }
}

impl<T: AsRef<[u8]>> Describe for Aeth<T> {
    const LAYER: Layer = Layer::Aeth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "Syndrome",
            "syndrome",
            0,
            8,
            "ACK, RNR NAK or NAK, with credits, timer or NAK code",
        ),
        FieldSpec::new(
            "MSN",
            "msn",
            8,
            24,
            "message sequence number: messages completed by the responder",
        ),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "syndrome" => Some(Syndrome::from_raw(raw as u8).to_string()),
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

    // The AETH of an RC Acknowledge from captures/rc_pingpong.pcap.
    const SAMPLE: [u8; 4] = [0x1f, 0x00, 0x00, 0x01];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Aeth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Aeth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = AethRepr::parse(&Aeth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.syndrome, Syndrome::ACK_CREDITS_INVALID);
        assert_eq!(r.msn, 1);
        let f = <Aeth<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        assert_eq!(
            f[0].meaning.as_deref(),
            Some("ACK, credits: invalid (no end-to-end flow control)")
        );
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Aeth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
    }

    #[test]
    fn truncated() {
        let e = Aeth::new_checked(&SAMPLE[..3]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Aeth, HEADER_LEN, 3));
        let e = AethRepr::parse(&Aeth::new_unchecked(&[][..])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Aeth, HEADER_LEN, 0));
    }

    #[test]
    fn syndromes_decode_and_read_as_words() {
        let cases: &[(u8, Syndrome, &str)] = &[
            (0x00, Syndrome::Ack { credits: 0 }, "ACK, credits: 0"),
            (0x07, Syndrome::Ack { credits: 7 }, "ACK, credits: 12"),
            (0x1e, Syndrome::Ack { credits: 30 }, "ACK, credits: 32768"),
            (
                0x20,
                Syndrome::RnrNak { timer: 0 },
                "RNR NAK, retry after 655.36 ms",
            ),
            (
                0x21,
                Syndrome::RnrNak { timer: 1 },
                "RNR NAK, retry after 0.01 ms",
            ),
            (
                0x2c,
                Syndrome::RnrNak { timer: 12 },
                "RNR NAK, retry after 0.64 ms",
            ),
            (
                0x3f,
                Syndrome::RnrNak { timer: 31 },
                "RNR NAK, retry after 491.52 ms",
            ),
            (
                0x60,
                Syndrome::Nak(NakCode::PsnSequenceError),
                "NAK: PSN sequence error",
            ),
            (
                0x61,
                Syndrome::Nak(NakCode::InvalidRequest),
                "NAK: invalid request",
            ),
            (
                0x62,
                Syndrome::Nak(NakCode::RemoteAccessError),
                "NAK: remote access error",
            ),
            (
                0x63,
                Syndrome::Nak(NakCode::RemoteOperationalError),
                "NAK: remote operational error",
            ),
            (
                0x64,
                Syndrome::Nak(NakCode::InvalidRdRequest),
                "NAK: invalid RD request",
            ),
            (
                0x65,
                Syndrome::Nak(NakCode::Reserved(5)),
                "NAK: reserved code 5",
            ),
            (0x40, Syndrome::Reserved(0x40), "reserved syndrome 0x40"),
            (0x9f, Syndrome::Reserved(0x9f), "reserved syndrome 0x9f"),
        ];
        for &(raw, syn, words) in cases {
            assert_eq!(Syndrome::from_raw(raw), syn, "{raw:#x}");
            assert_eq!(syn.to_raw(), raw);
            assert_eq!(syn.to_string(), words);
        }
    }

    #[test]
    fn syndrome_round_trips_every_byte() {
        for raw in 0..=u8::MAX {
            assert_eq!(Syndrome::from_raw(raw).to_raw(), raw);
        }
        for code in 0..32u8 {
            assert_eq!(NakCode::from_raw(code).to_raw(), code);
        }
    }

    #[test]
    fn reserved_syndrome_survives_parse_and_emit() {
        // Bit 7 is reserved; the parser does not hide a peer that sets it.
        let b = [0x9f, 0x12, 0x34, 0x56];
        let r = AethRepr::parse(&Aeth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.syndrome, Syndrome::Reserved(0x9f));
        assert!(!r.syndrome.is_ack() && !r.syndrome.is_nak());
        assert_eq!(r.msn, 0x123456);
        let mut out = [0u8; HEADER_LEN];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn tables() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(CREDITS_INVALID), None);
        assert_eq!(credit_count(200), None);
        for c in 1..31u8 {
            assert!(credit_count(c) > credit_count(c - 1));
        }
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(14), 1_280);
        assert_eq!(rnr_timer_micros(25), 61_440);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(rnr_timer_micros(0x20 | 12), rnr_timer_micros(12));
        for c in 2..32u8 {
            assert!(rnr_timer_micros(c) > rnr_timer_micros(c - 1));
        }
        assert!(rnr_timer_micros(0) > rnr_timer_micros(31));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(syn in any::<u8>(), msn in 0u32..1 << 24) {
            let r = AethRepr { syndrome: Syndrome::from_raw(syn), msn };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Aeth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[0], syn);
            prop_assert_eq!(AethRepr::parse(&Aeth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Aeth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Aeth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("syndrome"), u64::from(v.syndrome().to_raw()));
            prop_assert_eq!(f("syndrome"), u64::from(v.syndrome_raw()));
            prop_assert_eq!(f("msn"), u64::from(v.msn()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Aeth::new_checked(&bytes[..]).and_then(|v| AethRepr::parse(&v));
            let _ = AethRepr::parse(&Aeth::new_unchecked(&bytes[..]));
        }
    }
}
