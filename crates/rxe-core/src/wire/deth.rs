//! Datagram Extended Transport Header (IBTA 9.3.2), 8 bytes: present in every
//! UD packet (and in RD requests). It names the sending QP, which UD has no
//! connection to tell, and carries the Q_Key that authorizes delivery.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------------------------------------------------------+
//! |                            Q_Key                              |
//! +---------------+-----------------------------------------------+
//! |   reserved    |                    SrcQP                      |
//! +---------------+-----------------------------------------------+
//! ```
//! Q_Keys with the high bit set are "controlled": a work request that names
//! one is sent with the sending QP's own Q_Key instead, and only a privileged
//! consumer can give its QP a controlled Q_Key, so a QP that receives with one
//! hears only from privileged senders. The GSI on QP1 uses 0x80010000.

use super::error::{need, Layer, Result};
use super::field::{be24, be32, put24, put32, Describe, FieldSpec};
use super::view::header_view;

pub const HEADER_LEN: usize = 8;

/// The well-known Q_Key of the general services interface (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Whether a Q_Key is a controlled (privileged) one.
pub const fn is_controlled_qkey(qkey: u32) -> bool {
    qkey & 0x8000_0000 != 0
}

header_view!(
    /// A zero-copy view of a DETH at the start of `buffer`.
    Deth,
    Layer::Deth
);

impl<T: AsRef<[u8]>> Deth<T> {
    pub fn qkey(&self) -> u32 {
        be32(self.b(), 0)
    }
    /// The sender's QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        be24(self.b(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_qkey(&mut self, qkey: u32) {
        put32(self.m(), 0, qkey);
    }
    /// Writes the reserved byte as zero and the low 24 bits of `qpn`.
    pub fn set_src_qp(&mut self, qpn: u32) {
        self.m()[4] = 0;
        put24(self.m(), 5, qpn);
    }
}

/// The DETH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    pub qkey: u32,
    /// 24 bits.
    pub src_qp: u32,
}

impl DethRepr {
    /// Reads a DETH; the reserved byte is ignored. Whether the Q_Key matches
    /// the receiving QP's is the UD receiver's check, not the parser's.
    pub fn parse<T: AsRef<[u8]>>(deth: &Deth<T>) -> Result<DethRepr> {
        need(Layer::Deth, deth.b(), HEADER_LEN)?;
        Ok(DethRepr {
            qkey: deth.qkey(),
            src_qp: deth.src_qp(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the reserved byte is written as zero. `deth` must
    /// hold `HEADER_LEN` bytes. `src_qp` is truncated to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, deth: &mut Deth<T>) {
        deth.set_qkey(self.qkey);
        deth.set_src_qp(self.src_qp);
    }
}

impl<T: AsRef<[u8]>> Describe for Deth<T> {
    const LAYER: Layer = Layer::Deth;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new(
            "Q_Key",
            "qkey",
            0,
            32,
            "queue key that authorizes delivery to the destination QP",
        ),
        FieldSpec::new("resv8", "resv8", 32, 8, "reserved"),
        FieldSpec::new("SrcQP", "src_qp", 40, 24, "source queue pair number"),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "qkey" if raw == u128::from(GSI_QKEY) => {
                Some("the GSI Q_Key (controlled Q_Key, privileged)".into())
            }
            "qkey" if is_controlled_qkey(raw as u32) => {
                Some("controlled Q_Key (privileged)".into())
            }
            "src_qp" if raw == 1 => Some("QP1, the general services interface (GSI)".into()),
            "src_qp" if raw == 0 => Some("QP0, the subnet management interface (SMI)".into()),
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

    // The DETH of a UD SEND Only from captures/ud_pingpong.pcap: the Q_Key
    // 0x11111111 that ibv_ud_pingpong uses, from QP 0x13.
    const SAMPLE: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x13];
    // The DETH of a CM MAD to QP1 from captures/rping.pcap.
    const GSI_SAMPLE: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Deth<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Deth<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = DethRepr::parse(&Deth::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x13,
            }
        );
        let mut buf = [0xffu8; HEADER_LEN];
        r.emit(&mut Deth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SAMPLE);
        let f = <Deth<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        assert_eq!(f[0].meaning, None);
    }

    #[test]
    fn gsi_sample_is_described() {
        let r = DethRepr::parse(&Deth::new_checked(&GSI_SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.qkey, GSI_QKEY);
        assert!(is_controlled_qkey(r.qkey));
        let f = <Deth<&[u8]> as Describe>::describe(&GSI_SAMPLE).unwrap();
        assert_eq!(
            f[0].meaning.as_deref(),
            Some("the GSI Q_Key (controlled Q_Key, privileged)")
        );
        assert_eq!(
            f[2].meaning.as_deref(),
            Some("QP1, the general services interface (GSI)")
        );
        let mut b = GSI_SAMPLE;
        b[3] = 0x05;
        let f = <Deth<&[u8]> as Describe>::describe(&b).unwrap();
        assert_eq!(
            f[0].meaning.as_deref(),
            Some("controlled Q_Key (privileged)")
        );
    }

    #[test]
    fn truncated() {
        let e = Deth::new_checked(&SAMPLE[..7]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Deth, HEADER_LEN, 7));
        let e = DethRepr::parse(&Deth::new_unchecked(&SAMPLE[..4])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Deth, HEADER_LEN, 4));
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let mut b = SAMPLE;
        b[4] = 0xff;
        let r = DethRepr::parse(&Deth::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.src_qp, 0x13);
        let mut out = [0xffu8; HEADER_LEN];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(qkey in any::<u32>(), src_qp in 0u32..1 << 24) {
            let r = DethRepr { qkey, src_qp };
            let mut buf = [0xffu8; HEADER_LEN];
            r.emit(&mut Deth::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[4], 0);
            prop_assert_eq!(DethRepr::parse(&Deth::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Deth::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Deth<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap() as u64
            };
            prop_assert_eq!(f("qkey"), u64::from(v.qkey()));
            prop_assert_eq!(f("resv8"), u64::from(bytes[4]));
            prop_assert_eq!(f("src_qp"), u64::from(v.src_qp()));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = Deth::new_checked(&bytes[..]).and_then(|v| DethRepr::parse(&v));
            let _ = DethRepr::parse(&Deth::new_unchecked(&bytes[..]));
        }
    }
}
