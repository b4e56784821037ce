//! The CM's management datagrams: the 24-byte common MAD header and the
//! nine CM messages (IBTA Vol 1 chapter 12; LAP and APR, for path
//! migration, are left out) as zero-copy views with field tables and owned
//! `Repr`s with `parse`/`emit`, in the style of `rxe_core::wire`.
//!
//! A CM MAD is always 256 bytes: the header, then 232 bytes of message,
//! each message ending in a fixed-size private data field.

pub(crate) mod field;
pub mod header;
pub(crate) mod meaning;
pub mod private_data;

pub mod drep;
pub mod dreq;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr;

pub use drep::{Drep, DrepRepr};
pub use dreq::{Dreq, DreqRepr};
pub use field::{BlobSpec, MadDescribe};
pub use header::{method, MadHeader, MadHeaderRepr, BASE_VERSION, CM_CLASS_VERSION, MGMT_CLASS_CM};
pub use mra::{MessageMraed, Mra, MraRepr};
pub use private_data::PrivateData;
pub use rej::{MessageRejected, Rej, RejRepr, RejectReason};
pub use rep::{Rep, RepRepr};
pub use req::{PathRepr, Req, ReqRepr};
pub use rtu::{Rtu, RtuRepr};
pub use sidr::{SidrRep, SidrRepRepr, SidrReq, SidrReqRepr, SidrStatus};

use rxe_core::wire::field::{FieldSpec, FieldValue};

/// Every MAD is 256 bytes (IBTA 13.4.2, not checked against the text).
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const HEADER_LEN: usize = 24;
/// The CM message after the header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// CM attribute IDs (IBTA 12.6, not checked against the text).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;
}

/// The name of a CM attribute.
pub fn attribute_name(id: u16) -> Option<&'static str> {
    Some(match id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => return None,
    })
}

/// Why bytes are not a CM MAD, naming the message and field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    #[error("{message}: {len} bytes, {need} needed")]
    Truncated {
        message: &'static str,
        len: usize,
        need: usize,
    },
    #[error("{message} {field}: value {value:#x} not allowed")]
    BadField {
        message: &'static str,
        field: &'static str,
        value: u64,
    },
    #[error("{message}: attribute {attribute_id:#06x} is not a CM message this crate decodes")]
    UnknownAttribute {
        message: &'static str,
        attribute_id: u16,
    },
    #[error("{message}: {len} bytes of private data, the field holds {max}")]
    PrivateDataTooLong {
        message: &'static str,
        len: usize,
        max: usize,
    },
}

impl MadError {
    /// A stable snake_case name of the error's kind, for counters.
    pub fn reason(&self) -> &'static str {
        match self {
            MadError::Truncated { .. } => "truncated",
            MadError::BadField { .. } => "bad_field",
            MadError::UnknownAttribute { .. } => "unknown_attribute",
            MadError::PrivateDataTooLong { .. } => "private_data_too_long",
        }
    }
}

/// One CM message as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    Req(ReqRepr),
    Mra(MraRepr),
    Rej(RejRepr),
    Rep(RepRepr),
    Rtu(RtuRepr),
    Dreq(DreqRepr),
    Drep(DrepRepr),
    SidrReq(SidrReqRepr),
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    pub fn name(&self) -> &'static str {
        attribute_name(self.attribute_id()).unwrap_or("?")
    }
}

/// A whole CM MAD: header and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    pub header: MadHeaderRepr,
    pub message: CmMessage,
}

impl CmMad {
    /// A CM `Send` MAD carrying `message` with `transaction_id`.
    pub fn send(transaction_id: u64, message: CmMessage) -> CmMad {
        CmMad {
            header: MadHeaderRepr::cm_send(message.attribute_id(), transaction_id),
            message,
        }
    }

    /// Reads a CM MAD. Refused: fewer than 256 bytes, BaseVersion not 1,
    /// a class other than the CM, a class version other than 2 (Linux's CM
    /// drops those too), a method other than Send, an attribute that is not
    /// one of the nine messages, a reserved message code. Bytes past 256
    /// (the UD payload is exactly one MAD) are ignored.
    pub fn parse(bytes: &[u8]) -> Result<CmMad, MadError> {
        if bytes.len() < MAD_LEN {
            return Err(MadError::Truncated {
                message: "MAD",
                len: bytes.len(),
                need: MAD_LEN,
            });
        }
        let header = MadHeaderRepr::parse(&MadHeader::new_checked(&bytes[..HEADER_LEN])?)?;
        let bad = |field: &'static str, value: u64| MadError::BadField {
            message: "MAD header",
            field,
            value,
        };
        if header.base_version != BASE_VERSION {
            return Err(bad("BaseVersion", header.base_version.into()));
        }
        if header.mgmt_class != MGMT_CLASS_CM {
            return Err(bad("MgmtClass", header.mgmt_class.into()));
        }
        if header.class_version != CM_CLASS_VERSION {
            return Err(bad("ClassVersion", header.class_version.into()));
        }
        if header.method != method::SEND {
            return Err(bad("Method", header.method.into()));
        }
        let data = &bytes[HEADER_LEN..MAD_LEN];
        let message = match header.attribute_id {
            attr::REQ => CmMessage::Req(ReqRepr::parse(&Req::new_checked(data)?)?),
            attr::MRA => CmMessage::Mra(MraRepr::parse(&Mra::new_checked(data)?)?),
            attr::REJ => CmMessage::Rej(RejRepr::parse(&Rej::new_checked(data)?)?),
            attr::REP => CmMessage::Rep(RepRepr::parse(&Rep::new_checked(data)?)?),
            attr::RTU => CmMessage::Rtu(RtuRepr::parse(&Rtu::new_checked(data)?)?),
            attr::DREQ => CmMessage::Dreq(DreqRepr::parse(&Dreq::new_checked(data)?)?),
            attr::DREP => CmMessage::Drep(DrepRepr::parse(&Drep::new_checked(data)?)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(&SidrReq::new_checked(data)?)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(&SidrRep::new_checked(data)?)?),
            other => {
                return Err(MadError::UnknownAttribute {
                    message: "MAD header",
                    attribute_id: other,
                })
            }
        };
        Ok(CmMad { header, message })
    }

    /// Writes the MAD (256 bytes; the header's AttributeID is written as
    /// the message's, whatever `header` says).
    pub fn emit(&self, out: &mut [u8; MAD_LEN]) {
        let mut h = self.header;
        h.attribute_id = self.message.attribute_id();
        h.emit(&mut out[..HEADER_LEN]);
        let data = &mut out[HEADER_LEN..];
        match &self.message {
            CmMessage::Req(m) => m.emit(&mut Req::new_unchecked(data)),
            CmMessage::Mra(m) => m.emit(&mut Mra::new_unchecked(data)),
            CmMessage::Rej(m) => m.emit(&mut Rej::new_unchecked(data)),
            CmMessage::Rep(m) => m.emit(&mut Rep::new_unchecked(data)),
            CmMessage::Rtu(m) => m.emit(&mut Rtu::new_unchecked(data)),
            CmMessage::Dreq(m) => m.emit(&mut Dreq::new_unchecked(data)),
            CmMessage::Drep(m) => m.emit(&mut Drep::new_unchecked(data)),
            CmMessage::SidrReq(m) => m.emit(&mut SidrReq::new_unchecked(data)),
            CmMessage::SidrRep(m) => m.emit(&mut SidrRep::new_unchecked(data)),
        }
    }

    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut b);
        b
    }
}

/// The explanation of a CM MAD's bytes, for `rxe dissect`: the header's
/// fields, then the message's fields and byte runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadDescription {
    pub header: Vec<FieldValue>,
    /// The message's name, `None` for an attribute this crate does not decode.
    pub message: Option<&'static str>,
    pub fields: Vec<FieldValue>,
    /// (spec, bytes) of each byte run.
    pub blobs: Vec<(&'static BlobSpec, Vec<u8>)>,
}

/// A message's name, fields and byte runs, as `describe` gives them.
type Explained = (
    Option<&'static str>,
    Vec<FieldValue>,
    Vec<(&'static BlobSpec, Vec<u8>)>,
);

fn describe_as<M: MadDescribe>(data: &[u8]) -> Explained {
    let fields = M::describe(data).unwrap_or_default();
    let blobs = M::BLOBS
        .iter()
        .map(|b| (b, field::blob(data, b.byte_offset, b.len).to_vec()))
        .collect();
    (Some(M::NAME), fields, blobs)
}

/// Explains the bytes of a MAD by the tables, without validating it
/// (`None` if it is shorter than 256 bytes).
pub fn describe(bytes: &[u8]) -> Option<MadDescription> {
    if bytes.len() < MAD_LEN {
        return None;
    }
    let header = MadHeader::new_checked(&bytes[..HEADER_LEN])
        .ok()?
        .describe()?;
    let data = &bytes[HEADER_LEN..MAD_LEN];
    let id = MadHeader::new_unchecked(bytes).attribute_id();
    let (message, fields, blobs) = match id {
        attr::REQ => describe_as::<Req<&[u8]>>(data),
        attr::MRA => describe_as::<Mra<&[u8]>>(data),
        attr::REJ => describe_as::<Rej<&[u8]>>(data),
        attr::REP => describe_as::<Rep<&[u8]>>(data),
        attr::RTU => describe_as::<Rtu<&[u8]>>(data),
        attr::DREQ => describe_as::<Dreq<&[u8]>>(data),
        attr::DREP => describe_as::<Drep<&[u8]>>(data),
        attr::SIDR_REQ => describe_as::<SidrReq<&[u8]>>(data),
        attr::SIDR_REP => describe_as::<SidrRep<&[u8]>>(data),
        _ => (None, Vec::new(), Vec::new()),
    };
    Some(MadDescription {
        header,
        message,
        fields,
        blobs,
    })
}

/// The field table of a message by attribute ID.
pub fn fields_of(attribute_id: u16) -> Option<(&'static [FieldSpec], &'static [BlobSpec])> {
    fn t<M: MadDescribe>() -> Option<(&'static [FieldSpec], &'static [BlobSpec])> {
        Some((M::FIELDS, M::BLOBS))
    }
    match attribute_id {
        attr::REQ => t::<Req<&[u8]>>(),
        attr::MRA => t::<Mra<&[u8]>>(),
        attr::REJ => t::<Rej<&[u8]>>(),
        attr::REP => t::<Rep<&[u8]>>(),
        attr::RTU => t::<Rtu<&[u8]>>(),
        attr::DREQ => t::<Dreq<&[u8]>>(),
        attr::DREP => t::<Drep<&[u8]>>(),
        attr::SIDR_REQ => t::<SidrReq<&[u8]>>(),
        attr::SIDR_REP => t::<SidrRep<&[u8]>>(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
