//! Property tests of the whole MAD codec: arbitrary bytes never panic;
//! emit after parse gives back every non-reserved bit, and parsing that
//! again gives the same values.

use proptest::prelude::*;

use super::*;

/// 256 random bytes with a valid CM Send header for one of the nine messages.
fn cm_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        0x0010u16..=0x0018,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), MAD_LEN),
    )
        .prop_map(|(attr, tid, mut b)| {
            MadHeaderRepr::cm_send(attr, tid).emit(&mut b);
            // Keep the two-bit message codes of MRA and REJ off their reserved value 3.
            if attr == attr::MRA || attr == attr::REJ {
                b[HEADER_LEN + 8] &= 0x7f;
            }
            b
        })
}

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::parse(&bytes);
        let _ = describe(&bytes);
    }

    #[test]
    fn parse_never_panics_on_cm_headers(attr in 0x000fu16..0x001b, mut bytes in proptest::collection::vec(any::<u8>(), 256)) {
        MadHeaderRepr::cm_send(attr, 1).emit(&mut bytes);
        let _ = CmMad::parse(&bytes);
        let _ = describe(&bytes);
    }

    #[test]
    fn emit_after_parse_round_trips(bytes in cm_bytes()) {
        let mad = CmMad::parse(&bytes).expect("a valid CM MAD");
        let out = mad.to_bytes();
        prop_assert_eq!(CmMad::parse(&out), Ok(mad));
        // Every non-reserved field of the table reads the same from both.
        let a = describe(&bytes).unwrap();
        let b = describe(&out).unwrap();
        for (x, y) in a.header.iter().zip(&b.header).chain(a.fields.iter().zip(&b.fields)) {
            if !x.spec.is_reserved() {
                prop_assert_eq!(x.raw, y.raw, "field {}", x.spec.name);
            } else {
                prop_assert_eq!(y.raw, 0, "reserved {} not written as 0", x.spec.name);
            }
        }
        for (x, y) in a.blobs.iter().zip(&b.blobs) {
            prop_assert_eq!(&x.1, &y.1, "blob {}", x.0.name);
        }
    }
}

#[test]
fn header_checks_name_the_field() {
    let mut b = [0u8; MAD_LEN];
    MadHeaderRepr::cm_send(attr::RTU, 7).emit(&mut b);
    assert!(CmMad::parse(&b).is_ok());
    let field_of = |b: &[u8]| match CmMad::parse(b) {
        Err(MadError::BadField { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let mut x = b;
    x[0] = 2;
    assert_eq!(field_of(&x), "BaseVersion");
    let mut x = b;
    x[1] = 0x81;
    assert_eq!(field_of(&x), "MgmtClass");
    let mut x = b;
    x[2] = 1;
    assert_eq!(field_of(&x), "ClassVersion");
    let mut x = b;
    x[3] = method::GET_RESP;
    assert_eq!(field_of(&x), "Method");
    let mut x = b;
    x[17] = 0x19; // LAP
    assert_eq!(
        CmMad::parse(&x),
        Err(MadError::UnknownAttribute {
            message: "MAD header",
            attribute_id: 0x19
        })
    );
    assert_eq!(
        CmMad::parse(&b[..255]),
        Err(MadError::Truncated {
            message: "MAD",
            len: 255,
            need: 256
        })
    );
}

#[test]
fn private_data_lengths_are_the_ibtas() {
    let lens: Vec<(u16, usize)> = (0x10..=0x18)
        .map(|a| {
            let (_, blobs) = fields_of(a).unwrap();
            (
                a,
                blobs.iter().find(|b| b.key == "private_data").unwrap().len,
            )
        })
        .collect();
    assert_eq!(
        lens,
        [
            (0x10, 92),
            (0x11, 222),
            (0x12, 148),
            (0x13, 196),
            (0x14, 224),
            (0x15, 220),
            (0x16, 224),
            (0x17, 216),
            (0x18, 136)
        ]
    );
}
