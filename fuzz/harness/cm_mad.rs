//! The CM MAD decoder fuzzing harness, shared by the cargo-fuzz target
//! (`fuzz_targets/cm_mad.rs`) and the plain test that replays the committed
//! seeds (`integration/tests/fuzz_replay.rs`).
//!
//! Input: one control byte, then the MAD's bytes. Control `c`:
//!
//! - `c % 10 == 0`: the bytes as they are (a MAD of any length);
//! - otherwise the bytes, cut or zero-padded to 256, with a valid CM Send
//!   header forced (BaseVersion 1, class 0x07, class version 2, method
//!   Send) and AttributeID the `c % 10`-th of the nine messages, so that
//!   every message's decoder sees arbitrary data behind a header it accepts.
//!
//! Invariants, for whatever the input:
//!
//! - nothing panics: `CmMad::parse`, each message's own `parse` on the
//!   232 data bytes whatever the header says, `mad::describe`, and the IP
//!   CM header's `parse` on the private data;
//! - what decodes re-encodes to bytes that decode to the same value:
//!   `parse(emit(x)) == x`, and emitting that again gives the same bytes;
//! - a MAD that decodes is described as the message it decoded to.

#![forbid(unsafe_code)]

use rxe_cm::ip_cm::IpCmHeader;
use rxe_cm::mad::{
    self, attr, header, CmMad, CmMessage, Drep, DrepRepr, Dreq, DreqRepr, Mra, MraRepr, Rej,
    RejRepr, Rep, RepRepr, Req, ReqRepr, Rtu, RtuRepr, SidrRep, SidrRepRepr, SidrReq, SidrReqRepr,
    DATA_LEN, HEADER_LEN, MAD_LEN,
};

/// The nine messages' AttributeIDs, in the order the control byte picks.
pub const ATTRS: [u16; 9] = [
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
];

/// What one input reached: whether the whole MAD decoded (as which
/// attribute), and which of the nine message decoders accepted the data.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub mad: Option<u16>,
    pub messages: [bool; 9],
    pub ip_cm: bool,
}

/// The input as the MAD to decode (see the module's documentation).
pub fn mad_bytes(data: &[u8]) -> Vec<u8> {
    let Some((&ctl, rest)) = data.split_first() else {
        return Vec::new();
    };
    let pick = usize::from(ctl % 10);
    if pick == 0 {
        return rest.to_vec();
    }
    let mut b = rest.to_vec();
    b.resize(MAD_LEN, 0);
    b[0] = header::BASE_VERSION;
    b[1] = header::MGMT_CLASS_CM;
    b[2] = header::CM_CLASS_VERSION;
    b[3] = header::method::SEND;
    b[16..18].copy_from_slice(&ATTRS[pick - 1].to_be_bytes());
    b
}

/// One input: decode, re-encode, decode again; panics if an invariant
/// breaks.
pub fn run(data: &[u8]) -> Outcome {
    let bytes = mad_bytes(data);
    let mut out = Outcome::default();
    let described = mad::describe(&bytes);
    if bytes.len() >= MAD_LEN {
        assert!(described.is_some(), "a 256-byte MAD is always described");
    }
    if let Ok(m) = CmMad::parse(&bytes) {
        let again = m.to_bytes();
        assert_eq!(CmMad::parse(&again).as_ref(), Ok(&m), "parse(emit(x)) != x");
        assert_eq!(
            CmMad::parse(&again).map(|m| m.to_bytes()),
            Ok(again),
            "emit is not stable"
        );
        let d = described.expect("decoded, so described");
        assert_eq!(d.message, Some(m.message.name()), "described as another");
        out.mad = Some(m.message.attribute_id());
        if let CmMessage::Req(r) = &m.message {
            out.ip_cm |= ip_cm(&r.private_data.0);
        }
        if let CmMessage::SidrReq(r) = &m.message {
            out.ip_cm |= ip_cm(&r.private_data.0);
        }
    }
    // Every message decoder on the data area, whatever the header says.
    let mut data = [0u8; DATA_LEN];
    let after = bytes.get(HEADER_LEN..).unwrap_or_default();
    let n = after.len().min(DATA_LEN);
    data[..n].copy_from_slice(&after[..n]);
    out.messages = messages(&data);
    out
}

/// Decodes `data` as each of the nine messages; each that decodes must
/// survive emit and decode unchanged.
fn messages(data: &[u8; DATA_LEN]) -> [bool; 9] {
    macro_rules! round_trip {
        ($view:ident, $repr:ident) => {{
            match $repr::parse(&$view::new_unchecked(&data[..])) {
                Ok(r) => {
                    let mut b = [0u8; DATA_LEN];
                    r.emit(&mut $view::new_unchecked(&mut b[..]));
                    let back = $repr::parse(&$view::new_unchecked(&b[..]));
                    assert_eq!(
                        back.as_ref(),
                        Ok(&r),
                        "{}: parse(emit(x)) != x",
                        stringify!($repr)
                    );
                    let mut c = [0u8; DATA_LEN];
                    r.emit(&mut $view::new_unchecked(&mut c[..]));
                    assert_eq!(b, c, "{}: emit is not deterministic", stringify!($repr));
                    true
                }
                Err(_) => false,
            }
        }};
    }
    [
        round_trip!(Req, ReqRepr),
        round_trip!(Mra, MraRepr),
        round_trip!(Rej, RejRepr),
        round_trip!(Rep, RepRepr),
        round_trip!(Rtu, RtuRepr),
        round_trip!(Dreq, DreqRepr),
        round_trip!(Drep, DrepRepr),
        round_trip!(SidrReq, SidrReqRepr),
        round_trip!(SidrRep, SidrRepRepr),
    ]
}

/// The IP CM header at the start of a REQ's or SIDR_REQ's private data:
/// what decodes re-encodes to the same header.
fn ip_cm(private_data: &[u8]) -> bool {
    let Ok(h) = IpCmHeader::parse(private_data) else {
        return false;
    };
    let mut b = vec![0u8; private_data.len()];
    h.emit(&mut b).expect("a decoded header encodes");
    assert_eq!(IpCmHeader::parse(&b), Ok(h), "IP CM: parse(emit(x)) != x");
    true
}
