//! The common MAD header (IBTA 13.4.3, not checked against the text): the
//! first 24 bytes of every 256-byte management datagram.
//!
//! ```text
//!  0               1               2               3
//! +---------------+---------------+---------------+-+-------------+
//! |  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//! +---------------+---------------+---------------+-+-------------+
//! |            Status             |         ClassSpecific         |
//! +-------------------------------+-------------------------------+
//! |                       TransactionID (64)                      |
//! +-------------------------------+-------------------------------+
//! |          AttributeID          |           Reserved            |
//! +-------------------------------+-------------------------------+
//! |                      AttributeModifier                        |
//! +---------------------------------------------------------------+
//! ```

use rxe_core::wire::field::{read_bits, FieldSpec, FieldValue};

use super::field::{get, set};
use super::{MadError, HEADER_LEN};

/// BaseVersion of every MAD the IBTA defines so far.
pub const BASE_VERSION: u8 = 1;
/// The Communication Management class (IBTA 13.4.4, not checked against the text).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version of IBTA 1.2 and later, which Linux sends and accepts.
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (IBTA 13.4.5, not checked against the text). The CM sends
/// its messages with `SEND`; `GET`/`GET_RESP` serve ClassPortInfo.
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const SEND: u8 = 0x03;
    pub const TRAP: u8 = 0x05;
    pub const REPORT: u8 = 0x06;
    pub const TRAP_REPRESS: u8 = 0x07;
    pub const GET_RESP: u8 = 0x81;
    pub const REPORT_RESP: u8 = 0x86;
}

/// Words for a method (with the R bit as bit 7).
pub fn method_name(m: u8) -> Option<&'static str> {
    Some(match m {
        method::GET => "Get",
        method::SET => "Set",
        method::SEND => "Send",
        method::TRAP => "Trap",
        method::REPORT => "Report",
        method::TRAP_REPRESS => "TrapRepress",
        method::GET_RESP => "GetResp",
        method::REPORT_RESP => "ReportResp",
        _ => return None,
    })
}

/// A zero-copy view of the MAD header at the start of `buffer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadHeader<T: AsRef<[u8]>> {
    buffer: T,
}

/// The header's fields, IBTA names, bit offsets from the start of the MAD.
pub const FIELDS: &[FieldSpec] = &[
    FieldSpec::new("BaseVersion", "base_version", 0, 8, "MAD format version, 1"),
    FieldSpec::new(
        "MgmtClass",
        "mgmt_class",
        8,
        8,
        "management class; 0x07 is the CM",
    ),
    FieldSpec::new(
        "ClassVersion",
        "class_version",
        16,
        8,
        "version of the class; the CM's is 2",
    ),
    FieldSpec::new("R", "response", 24, 1, "1 in a response method"),
    FieldSpec::new(
        "Method",
        "method",
        25,
        7,
        "operation; Send (0x03) for CM messages",
    ),
    FieldSpec::new(
        "Status",
        "status",
        32,
        16,
        "result of the operation, 0 in requests",
    ),
    FieldSpec::new(
        "ClassSpecific",
        "class_specific",
        48,
        16,
        "reserved for the class; 0 in CM",
    ),
    FieldSpec::new(
        "TransactionID",
        "transaction_id",
        64,
        64,
        "matches a response to its request",
    ),
    FieldSpec::new(
        "AttributeID",
        "attribute_id",
        128,
        16,
        "which CM message this is",
    ),
    FieldSpec::new("Reserved", "reserved", 144, 16, "reserved"),
    FieldSpec::new(
        "AttributeModifier",
        "attribute_modifier",
        160,
        32,
        "attribute parameter; 0 in CM messages",
    ),
];

impl<T: AsRef<[u8]>> MadHeader<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        MadHeader { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, MadError> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(MadError::Truncated {
                message: "MAD header",
                len,
                need: HEADER_LEN,
            });
        }
        Ok(MadHeader { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn base_version(&self) -> u8 {
        get(self.b(), 0, 8) as u8
    }
    pub fn mgmt_class(&self) -> u8 {
        get(self.b(), 8, 8) as u8
    }
    pub fn class_version(&self) -> u8 {
        get(self.b(), 16, 8) as u8
    }
    /// The whole method byte, R bit included (`GET_RESP` is 0x81).
    pub fn method(&self) -> u8 {
        get(self.b(), 24, 8) as u8
    }
    pub fn status(&self) -> u16 {
        get(self.b(), 32, 16) as u16
    }
    pub fn class_specific(&self) -> u16 {
        get(self.b(), 48, 16) as u16
    }
    pub fn transaction_id(&self) -> u64 {
        get(self.b(), 64, 64) as u64
    }
    pub fn attribute_id(&self) -> u16 {
        get(self.b(), 128, 16) as u16
    }
    pub fn attribute_modifier(&self) -> u32 {
        get(self.b(), 160, 32) as u32
    }

    /// Every field with its value, for `rxe dissect`.
    pub fn describe(&self) -> Option<Vec<FieldValue>> {
        FIELDS
            .iter()
            .map(|spec| {
                let raw = read_bits(self.b(), usize::from(spec.bit_offset), spec.bits)?;
                Some(FieldValue {
                    spec,
                    raw,
                    meaning: super::meaning::meaning(spec.key, raw),
                })
            })
            .collect()
    }
}

/// The MAD header as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// The method byte, R bit included.
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub attribute_modifier: u32,
}

impl MadHeaderRepr {
    /// A CM `Send` header for `attribute_id` (status, class specific and
    /// modifier 0, as the CM messages use them).
    pub const fn cm_send(attribute_id: u16, transaction_id: u64) -> Self {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Reads the header. Only the length can fail here: which versions and
    /// classes a receiver accepts is its choice ([`super::CmMad::parse`]
    /// checks them for the CM).
    pub fn parse<T: AsRef<[u8]>>(h: &MadHeader<T>) -> Result<Self, MadError> {
        let len = h.b().len();
        if len < HEADER_LEN {
            return Err(MadError::Truncated {
                message: "MAD header",
                len,
                need: HEADER_LEN,
            });
        }
        Ok(MadHeaderRepr {
            base_version: h.base_version(),
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            method: h.method(),
            status: h.status(),
            class_specific: h.class_specific(),
            transaction_id: h.transaction_id(),
            attribute_id: h.attribute_id(),
            attribute_modifier: h.attribute_modifier(),
        })
    }

    /// Writes the header into the first 24 bytes of `buf` (reserved bits
    /// zero); a shorter buffer is left as it is.
    pub fn emit(&self, buf: &mut [u8]) {
        let Some(b) = buf.get_mut(..HEADER_LEN) else {
            return;
        };
        b.fill(0);
        set(b, 0, 8, self.base_version.into());
        set(b, 8, 8, self.mgmt_class.into());
        set(b, 16, 8, self.class_version.into());
        set(b, 24, 8, self.method.into());
        set(b, 32, 16, self.status.into());
        set(b, 48, 16, self.class_specific.into());
        set(b, 64, 64, self.transaction_id.into());
        set(b, 128, 16, self.attribute_id.into());
        set(b, 160, 32, self.attribute_modifier.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_contiguous_and_24_bytes() {
        let mut next = 0;
        for f in FIELDS {
            assert_eq!(f.bit_offset, next, "{}", f.name);
            next += u16::from(f.bits);
        }
        assert_eq!(usize::from(next), HEADER_LEN * 8);
    }

    #[test]
    fn getters_agree_with_table() {
        let r = MadHeaderRepr {
            base_version: 1,
            mgmt_class: 7,
            class_version: 2,
            method: 0x81,
            status: 0x1234,
            class_specific: 0x5678,
            transaction_id: 0x0102_0304_0506_0708,
            attribute_id: 0x0013,
            attribute_modifier: 0xdead_beef,
        };
        let mut b = [0u8; HEADER_LEN];
        r.emit(&mut b);
        let h = MadHeader::new_checked(&b[..]).unwrap();
        let d = h.describe().unwrap();
        let by_key = |k: &str| d.iter().find(|v| v.spec.key == k).unwrap().raw;
        assert_eq!(by_key("method") | (by_key("response") << 7), 0x81);
        assert_eq!(by_key("transaction_id"), 0x0102_0304_0506_0708);
        assert_eq!(by_key("attribute_modifier"), 0xdead_beef);
        assert_eq!(MadHeaderRepr::parse(&h).unwrap(), r);
        assert!(MadHeader::new_checked(&b[..23]).is_err());
    }
}
