//! Global Route Header (IBTA 8.3), 40 bytes, laid out as an IPv6 header.
//! Native InfiniBand carries it after the LRH when LNH = 3 (routed or
//! multicast packets); RoCEv1 carries it after Ethernet. RoCEv2 carries no
//! GRH: the IP header takes its place (for IPv6 RoCEv2, the IPv6 header in
//! the 40 bytes of GRH space of a UD receive buffer reads as a GRH here).
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +-------+---------------+---------------------------------------+
//! | IPVer |    TClass     |               FlowLabel               |
//! +-------+---------------+-------+---------------+---------------+
//! |            PayLen             |    NxtHdr     |    HopLmt     |
//! +-------------------------------+---------------+---------------+
//! |                      SGID (16 bytes)                          |
//! +---------------------------------------------------------------+
//! |                      DGID (16 bytes)                          |
//! +---------------------------------------------------------------+
//! ```
//! Routers may change TClass, FlowLabel and HopLmt, so the ICRC masks them
//! (IBTA 7.8.1). The GRH has no reserved bits.

use std::net::Ipv6Addr;

use super::error::{need, Error, Layer, Result};
use super::field::{be16, be32, put16, put32, Describe, FieldSpec};
use super::gid::Gid;
use super::view::header_view;

pub const HEADER_LEN: usize = 40;

/// IPVer: the GRH uses the IPv6 layout and version number (IBTA 8.3).
pub const IP_VER: u8 = 6;

/// NxtHdr of a packet whose GRH is followed by IBA transport (the BTH)
/// (IBTA 8.4.1, C8-7).
pub const NXT_HDR_IBA: u8 = 0x1b;

/// Largest flow label (20 bits).
pub const FLOW_LABEL_MAX: u32 = 0xf_ffff;

header_view!(
    /// A zero-copy view of a GRH at the start of `buffer`.
    Grh,
    Layer::Grh
);

impl<T: AsRef<[u8]>> Grh<T> {
    pub fn ip_ver(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        (be16(self.b(), 0) >> 4) as u8
    }
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & FLOW_LABEL_MAX
    }
    /// Bytes after the GRH through the ICRC; the VCRC is not counted
    /// (IBTA 8.3).
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), 4)
    }
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    pub fn sgid(&self) -> Gid {
        gid_at(self.b(), 8)
    }
    pub fn dgid(&self) -> Gid {
        gid_at(self.b(), 24)
    }
}

fn gid_at(b: &[u8], at: usize) -> Gid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    Gid::from_bytes(g)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Grh<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Writes the first word: IPVer (given), TClass, FlowLabel.
    pub fn set_ver_tclass_flow(&mut self, ip_ver: u8, traffic_class: u8, flow_label: u32) {
        let w = (u32::from(ip_ver & 0x0f) << 28)
            | (u32::from(traffic_class) << 20)
            | (flow_label & FLOW_LABEL_MAX);
        put32(self.m(), 0, w);
    }
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.m(), 4, len);
    }
    pub fn set_next_header(&mut self, nxt: u8) {
        self.m()[6] = nxt;
    }
    pub fn set_hop_limit(&mut self, hops: u8) {
        self.m()[7] = hops;
    }
    pub fn set_sgid(&mut self, gid: &Gid) {
        self.m()[8..24].copy_from_slice(gid.as_bytes());
    }
    pub fn set_dgid(&mut self, gid: &Gid) {
        self.m()[24..40].copy_from_slice(gid.as_bytes());
    }
}

/// The GRH as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    /// Bytes after the GRH through the ICRC.
    pub payload_len: u16,
    /// `NXT_HDR_IBA` for IBA transport.
    pub next_header: u8,
    pub hop_limit: u8,
    pub sgid: Gid,
    pub dgid: Gid,
}

impl GrhRepr {
    /// Reads a GRH. An IPVer other than 6 is rejected (IBTA 8.3). NxtHdr is
    /// returned as is: whether it must be `NXT_HDR_IBA` depends on what the
    /// LRH's LNH said, which the packet layer knows.
    pub fn parse<T: AsRef<[u8]>>(grh: &Grh<T>) -> Result<GrhRepr> {
        need(Layer::Grh, grh.b(), HEADER_LEN)?;
        if grh.ip_ver() != IP_VER {
            return Err(Error::bad_field(
                Layer::Grh,
                "IPVer",
                u64::from(grh.ip_ver()),
            ));
        }
        Ok(GrhRepr {
            traffic_class: grh.traffic_class(),
            flow_label: grh.flow_label(),
            payload_len: grh.payload_len(),
            next_header: grh.next_header(),
            hop_limit: grh.hop_limit(),
            sgid: grh.sgid(),
            dgid: grh.dgid(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn sgid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.sgid)
    }
    pub fn dgid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dgid)
    }

    /// Writes the header with IPVer 6. `buf` must hold `HEADER_LEN` bytes.
    /// A flow label wider than 20 bits is truncated.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, grh: &mut Grh<T>) {
        grh.set_ver_tclass_flow(IP_VER, self.traffic_class, self.flow_label);
        grh.set_payload_len(self.payload_len);
        grh.set_next_header(self.next_header);
        grh.set_hop_limit(self.hop_limit);
        grh.set_sgid(&self.sgid);
        grh.set_dgid(&self.dgid);
    }
}

/// A GID in IPv6 text form, with what kind of GID it is.
fn gid_meaning(raw: u128) -> String {
    let gid = Gid::from_bytes(raw.to_be_bytes());
    let addr = Ipv6Addr::from(gid);
    let seg = addr.segments();
    if gid.is_ipv4_mapped() {
        // RoCEv2 names an IPv4 address by its IPv4-mapped IPv6 address.
        return format!("{addr} (RoCEv2 GID of IPv4 address {})", gid.to_ip());
    }
    if seg[0] == 0xfe80 && seg[1..4] == [0; 3] {
        // The default GID prefix: subnet-local, interface ID = port GUID.
        return format!("{addr} (link-local GID, default prefix)");
    }
    if seg[0] >> 8 == 0xff {
        return format!("{addr} (multicast GID)");
    }
    addr.to_string()
}

impl<T: AsRef<[u8]>> Describe for Grh<T> {
    const LAYER: Layer = Layer::Grh;
    const FIELDS: &'static [FieldSpec] = &[
        FieldSpec::new("IPVer", "ip_ver", 0, 4, "header version, always 6"),
        FieldSpec::new("TClass", "traffic_class", 4, 8, "traffic class"),
        FieldSpec::new("FlowLabel", "flow_label", 12, 20, "flow label"),
        FieldSpec::new(
            "PayLen",
            "payload_len",
            32,
            16,
            "bytes after the GRH through the ICRC",
        ),
        FieldSpec::new("NxtHdr", "next_header", 48, 8, "header after the GRH"),
        FieldSpec::new("HopLmt", "hop_limit", 56, 8, "routers left to cross"),
        FieldSpec::new("SGID", "sgid", 64, 128, "source global identifier"),
        FieldSpec::new("DGID", "dgid", 192, 128, "destination global identifier"),
    ];

    fn meaning(key: &str, raw: u128) -> Option<String> {
        match key {
            "ip_ver" if raw == u128::from(IP_VER) => Some("6, the only version defined".into()),
            "ip_ver" => Some(format!("unsupported version {raw}: drop")),
            "flow_label" if raw == 0 => Some("no flow label".into()),
            "payload_len" => Some(format!(
                "{raw} bytes after the GRH through the ICRC (VCRC not counted)"
            )),
            "next_header" if raw == u128::from(NXT_HDR_IBA) => {
                Some("IBA transport (BTH follows)".into())
            }
            "next_header" => Some(format!("{raw:#04x}, not IBA transport")),
            "sgid" | "dgid" => Some(gid_meaning(raw)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::field::{assert_table_contiguous, read_bits};
    use proptest::prelude::*;

    // IPVer 6, TClass 0x2a, FlowLabel 0x12345, PayLen 28 (BTH 12 + DETH 8 +
    // 4 bytes of payload + ICRC 4), NxtHdr 0x1B, HopLmt 64, SGID
    // ::ffff:192.168.1.10, DGID fe80::0002:c903:0001:2345.
    const SAMPLE: [u8; 40] = [
        0x62, 0xa1, 0x23, 0x45, 0x00, 0x1c, 0x1b, 0x40, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 10, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x01, 0x23, 0x45,
    ];

    #[test]
    fn table_is_contiguous_and_sized() {
        assert_table_contiguous(<Grh<&[u8]> as Describe>::FIELDS);
        assert_eq!(<Grh<&[u8]> as Describe>::header_len(), HEADER_LEN);
    }

    #[test]
    fn parse_sample() {
        let r = GrhRepr::parse(&Grh::new_checked(&SAMPLE[..]).unwrap()).unwrap();
        assert_eq!(r.traffic_class, 0x2a);
        assert_eq!(r.flow_label, 0x12345);
        assert_eq!(r.payload_len, 28);
        assert_eq!(r.next_header, NXT_HDR_IBA);
        assert_eq!(r.hop_limit, 64);
        assert_eq!(r.sgid_addr().to_string(), "::ffff:192.168.1.10");
        assert_eq!(r.dgid_addr().to_string(), "fe80::2:c903:1:2345");
        let mut out = [0u8; HEADER_LEN];
        r.emit(&mut Grh::new_unchecked(&mut out[..]));
        assert_eq!(out, SAMPLE);
    }

    #[test]
    fn describe_sample() {
        let d = <Grh<&[u8]> as Describe>::describe(&SAMPLE).unwrap();
        let m = |k: &str| {
            d.iter()
                .find(|v| v.spec.key == k)
                .and_then(|v| v.meaning.clone())
                .unwrap_or_default()
        };
        assert_eq!(m("next_header"), "IBA transport (BTH follows)");
        assert_eq!(
            m("sgid"),
            "::ffff:192.168.1.10 (RoCEv2 GID of IPv4 address 192.168.1.10)"
        );
        assert!(m("dgid").starts_with("fe80::2:c903:1:2345 (link-local"));
        assert_eq!(d[6].bit_string(), "0x00000000000000000000ffffc0a8010a");
    }

    #[test]
    fn truncated_and_bad_ipver() {
        let e = Grh::new_checked(&SAMPLE[..39]).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Grh, 40, 39));
        let e = GrhRepr::parse(&Grh::new_unchecked(&SAMPLE[..8])).unwrap_err();
        assert_eq!(e, Error::truncated(Layer::Grh, 40, 8));
        let mut b = SAMPLE;
        b[0] = 0x42;
        let e = GrhRepr::parse(&Grh::new_unchecked(&b[..])).unwrap_err();
        assert_eq!(e, Error::bad_field(Layer::Grh, "IPVer", 4));
    }

    #[test]
    fn emit_writes_ipver_6_and_truncates_flow_label() {
        let r = GrhRepr {
            traffic_class: 0xff,
            flow_label: 0xfff_ffff,
            payload_len: 0,
            next_header: NXT_HDR_IBA,
            hop_limit: 0,
            sgid: Gid::ZERO,
            dgid: Gid::ZERO,
        };
        let mut out = [0xaau8; HEADER_LEN];
        r.emit(&mut Grh::new_unchecked(&mut out[..]));
        assert_eq!(&out[..4], &[0x6f, 0xff, 0xff, 0xff]);
        let back = GrhRepr::parse(&Grh::new_unchecked(&out[..])).unwrap();
        assert_eq!(back.flow_label, FLOW_LABEL_MAX);
    }

    fn arb_repr() -> impl Strategy<Value = GrhRepr> {
        (
            any::<u8>(),
            0u32..=FLOW_LABEL_MAX,
            any::<u16>(),
            any::<[u8; 2]>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
        )
            .prop_map(|(tc, fl, len, nh, sgid, dgid)| GrhRepr {
                traffic_class: tc,
                flow_label: fl,
                payload_len: len,
                next_header: nh[0],
                hop_limit: nh[1],
                sgid: sgid.into(),
                dgid: dgid.into(),
            })
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(r in arb_repr()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Grh::new_unchecked(&mut buf[..]));
            prop_assert_eq!(GrhRepr::parse(&Grh::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            let _ = GrhRepr::parse(&Grh::new_unchecked(&bytes[..]));
            let _ = <Grh<&[u8]> as Describe>::describe(&bytes);
        }

        #[test]
        fn getters_agree_with_table(bytes in any::<[u8; HEADER_LEN]>()) {
            let v = Grh::new_unchecked(&bytes[..]);
            let f = |k: &str| {
                let s = <Grh<&[u8]> as Describe>::FIELDS.iter().find(|s| s.key == k).unwrap();
                read_bits(&bytes, usize::from(s.bit_offset), s.bits).unwrap()
            };
            prop_assert_eq!(f("ip_ver"), u128::from(v.ip_ver()));
            prop_assert_eq!(f("traffic_class"), u128::from(v.traffic_class()));
            prop_assert_eq!(f("flow_label"), u128::from(v.flow_label()));
            prop_assert_eq!(f("payload_len"), u128::from(v.payload_len()));
            prop_assert_eq!(f("next_header"), u128::from(v.next_header()));
            prop_assert_eq!(f("hop_limit"), u128::from(v.hop_limit()));
            prop_assert_eq!(f("sgid"), u128::from_be_bytes(*v.sgid().as_bytes()));
            prop_assert_eq!(f("dgid"), u128::from_be_bytes(*v.dgid().as_bytes()));
        }
    }
}
