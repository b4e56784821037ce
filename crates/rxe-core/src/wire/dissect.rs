//! Explaining a frame: every layer of a RoCE packet with its fields, the
//! ICRC (and VCRC) verdict, and a one-line summary. `rxe dissect` prints
//! this, and the device prints the same lines in its traces.

use core::fmt::Write as _;

use super::aeth::{credit_count, Aeth, NakCode, Syndrome};
use super::atomic_ack_eth::AtomicAckEth;
use super::atomic_eth::AtomicEth;
use super::bth::Bth;
use super::deth::Deth;
use super::error::{Error, Result};
use super::feth::Feth;
use super::field::{Describe, FieldValue};
use super::frame::{self, LinkType, RoceFrame};
use super::grh::Grh;
use super::icrc::{self, ICRC_LEN};
use super::ieth::Ieth;
use super::immdt::ImmDt;
use super::lrh::Lrh;
use super::netfields::{
    EthernetFields, Ipv4Fields, Ipv6Fields, LinuxSll2Fields, LinuxSllFields, UdpFields, VlanFields,
};
use super::opcode::{ExtHeader, PayloadRule};
use super::packet::{TransportPacket, TransportRepr};
use super::rdeth::Rdeth;
use super::reth::Reth;
use super::vcrc;
use super::xrceth::Xrceth;

/// A RoCE frame taken apart.
#[derive(Debug, Clone)]
pub struct Dissection<'a> {
    /// The whole frame as given.
    pub data: &'a [u8],
    pub frame: RoceFrame<'a>,
    /// The transport packet, or why it does not parse.
    pub packet: Result<TransportPacket<'a>>,
    /// The ICRC verdict (checked even when the transport does not parse).
    pub icrc: Result<()>,
    /// The VCRC verdict, for native InfiniBand.
    pub vcrc: Option<Result<()>>,
}

/// Takes a frame apart. `Ok(None)`: not RoCE. `Err`: RoCE-bound but the
/// outer layers are malformed.
pub fn dissect(link: LinkType, data: &[u8]) -> Result<Option<Dissection<'_>>> {
    let Some(frame) = frame::decode(link, data)? else {
        return Ok(None);
    };
    let packet = TransportRepr::parse(frame.transport);
    let icrc = icrc::verify(&frame.icrc_scope(), frame.transport);
    let vcrc = frame.ib_packet.map(vcrc::check);
    Ok(Some(Dissection {
        data,
        frame,
        packet,
        icrc,
        vcrc,
    }))
}

/// One header of a frame with its fields.
#[derive(Debug, Clone)]
pub struct LayerView<'a> {
    /// The IBTA or IETF name (`BTH`, `RETH`, `IPv4` ...).
    pub name: &'static str,
    /// A stable lower-case key for JSON.
    pub key: &'static str,
    /// Offset of the header in the frame.
    pub offset: usize,
    pub bytes: &'a [u8],
    pub fields: Vec<FieldValue>,
}

impl<'a> Dissection<'a> {
    /// Whether the packet parses and every CRC it carries verifies.
    pub fn is_good(&self) -> bool {
        self.packet.is_ok() && self.icrc.is_ok() && self.vcrc.is_none_or(|v| v.is_ok())
    }

    /// Every problem found, transport first.
    pub fn problems(&self) -> Vec<Error> {
        let mut v = Vec::new();
        if let Err(e) = self.packet {
            v.push(e);
        }
        if let Err(e) = self.icrc {
            v.push(e);
        }
        if let Some(Err(e)) = self.vcrc {
            v.push(e);
        }
        v
    }

    fn offset_of(&self, sub: &[u8]) -> usize {
        (sub.as_ptr() as usize).wrapping_sub(self.data.as_ptr() as usize)
    }

    fn view<D: Describe>(
        &self,
        name: &'static str,
        key: &'static str,
        bytes: &'a [u8],
    ) -> Option<LayerView<'a>> {
        Some(LayerView {
            name,
            key,
            offset: self.offset_of(bytes),
            bytes,
            fields: D::describe(bytes)?,
        })
    }

    /// Every header of the frame, outermost first, each with its fields.
    /// The payload, ICRC and VCRC are not headers; see `payload()`.
    pub fn layers(&self) -> Vec<LayerView<'a>> {
        let mut out = Vec::new();
        let f = &self.frame;
        if let Some((link, bytes)) = f.link {
            match link {
                LinkType::Ethernet => {
                    out.extend(self.view::<EthernetFields>("Ethernet", "eth", &bytes[..14]));
                    let mut at = 14;
                    while at + 4 <= bytes.len() {
                        out.extend(self.view::<VlanFields>("802.1Q", "vlan", &bytes[at..at + 4]));
                        at += 4;
                    }
                }
                LinkType::LinuxSll => {
                    out.extend(self.view::<LinuxSllFields>("Linux SLL", "sll", bytes))
                }
                LinkType::LinuxSll2 => {
                    out.extend(self.view::<LinuxSll2Fields>("Linux SLL2", "sll2", bytes))
                }
                _ => {}
            }
        }
        if let Some(ip) = f.ip {
            if ip[0] >> 4 == 4 {
                out.extend(self.view::<Ipv4Fields>("IPv4", "ipv4", ip));
            } else {
                out.extend(self.view::<Ipv6Fields>("IPv6", "ipv6", ip));
            }
        }
        if let Some(udp) = f.udp {
            out.extend(self.view::<UdpFields>("UDP", "udp", udp));
        }
        if let Some(lrh) = f.lrh {
            out.extend(self.view::<Lrh<&[u8]>>("LRH", "lrh", lrh));
        }
        if let Some(grh) = f.grh {
            out.extend(self.view::<Grh<&[u8]>>("GRH", "grh", grh));
        }
        let t = f.transport;
        if t.len() >= super::bth::HEADER_LEN {
            out.extend(self.view::<Bth<&[u8]>>("BTH", "bth", &t[..super::bth::HEADER_LEN]));
        }
        if let Ok(p) = &self.packet {
            let mut at = super::bth::HEADER_LEN;
            for &h in p.info.headers.as_slice() {
                let b = &t[at..at + h.len()];
                out.extend(self.ext_view(h, b));
                at += h.len();
            }
        }
        out
    }

    fn ext_view(&self, h: ExtHeader, b: &'a [u8]) -> Option<LayerView<'a>> {
        match h {
            ExtHeader::Rdeth => self.view::<Rdeth<&[u8]>>("RDETH", "rdeth", b),
            ExtHeader::Deth => self.view::<Deth<&[u8]>>("DETH", "deth", b),
            ExtHeader::Xrceth => self.view::<Xrceth<&[u8]>>("XRCETH", "xrceth", b),
            ExtHeader::Reth => self.view::<Reth<&[u8]>>("RETH", "reth", b),
            ExtHeader::AtomicEth => self.view::<AtomicEth<&[u8]>>("AtomicETH", "atomic_eth", b),
            ExtHeader::Aeth => self.view::<Aeth<&[u8]>>("AETH", "aeth", b),
            ExtHeader::AtomicAckEth => {
                self.view::<AtomicAckEth<&[u8]>>("AtomicAckETH", "atomic_ack_eth", b)
            }
            ExtHeader::ImmDt => self.view::<ImmDt<&[u8]>>("ImmDt", "immdt", b),
            ExtHeader::Ieth => self.view::<Ieth<&[u8]>>("IETH", "ieth", b),
            ExtHeader::Feth => self.view::<Feth<&[u8]>>("FETH", "feth", b),
        }
    }

    /// The payload bytes (without pad), when the transport parses.
    pub fn payload(&self) -> Option<&'a [u8]> {
        self.packet.as_ref().ok().map(|p| p.payload)
    }

    /// The ICRC as carried in the packet.
    pub fn carried_icrc(&self) -> Option<u32> {
        if self.frame.transport.len() < ICRC_LEN {
            return None;
        }
        icrc::carried(self.frame.transport)
    }

    /// The ECN field of the IP header (IPv4 TOS or IPv6 traffic class,
    /// low two bits), if the frame has one.
    pub fn ip_ecn(&self) -> Option<u8> {
        let ip = self.frame.ip?;
        match ip.first()? >> 4 {
            4 => Some(ip.get(1)? & 0b11),
            6 => Some((ip.get(1)? >> 4) & 0b11),
            _ => None,
        }
    }

    /// One line: addresses, opcode, QP, PSN, the key fields of the extended
    /// headers, payload length and the CRC verdicts.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        match (self.frame.addresses(), self.frame.lids()) {
            (Some((a, b)), _) => {
                let _ = write!(s, "{a} > {b} ");
            }
            (None, Some((a, b))) => {
                let _ = write!(s, "LID {a} > LID {b} ");
            }
            _ => {}
        }
        if self.frame.encapsulation != frame::Encapsulation::RoceV2Ipv4 {
            let _ = write!(s, "[{}] ", self.frame.encapsulation.name());
        }
        match &self.packet {
            Ok(p) => summarize_packet(&mut s, p),
            Err(e) => {
                let _ = write!(s, "MALFORMED ({e})");
            }
        }
        // A switch on the way was congested (the IP header's ECN field,
        // RFC 3168): the receiver owes the sender a CNP.
        if self.ip_ecn() == Some(0b11) {
            s.push_str(" ip=CE");
        }
        match self.icrc {
            Ok(()) => s.push_str(" icrc=ok"),
            Err(_) => s.push_str(" icrc=BAD"),
        }
        match self.vcrc {
            Some(Ok(())) => s.push_str(" vcrc=ok"),
            Some(Err(_)) => s.push_str(" vcrc=BAD"),
            None => {}
        }
        s
    }
}

fn summarize_packet(s: &mut String, p: &TransportPacket<'_>) {
    let r = &p.repr;
    let b = &r.bth;
    let _ = write!(s, "{} qp={:#x} psn={}", b.opcode, b.dest_qp, b.psn);
    if b.ack_req {
        s.push_str(" ackreq");
    }
    if b.solicited {
        s.push_str(" se");
    }
    // MigReq (IBTA 9.2, 17.2.8): the sender's QP is MIGRATED, no
    // alternate path armed; a MigReq packet on an armed QP's alternate
    // path moves it there.
    if b.mig_req {
        s.push_str(" migreq");
    }
    if b.fecn || b.becn {
        let _ = write!(
            s,
            " ecn={}{}",
            if b.fecn { "F" } else { "" },
            if b.becn { "B" } else { "" }
        );
    }
    if b.pkey != 0xffff {
        let _ = write!(s, " pkey={:#06x}", b.pkey);
    }
    let e = &r.ext;
    if let Some(x) = e.rdeth {
        let _ = write!(s, " eec={:#x}", x.ee_context);
    }
    if let Some(x) = e.deth {
        let _ = write!(s, " qkey={:#x} src_qp={:#x}", x.qkey, x.src_qp);
    }
    if let Some(x) = e.xrceth {
        let _ = write!(s, " xrc_srq={:#x}", x.xrc_srq);
    }
    if let Some(x) = e.feth {
        let _ = write!(s, " sel={} plt={}", x.selectivity_level, x.placement_type);
    }
    if let Some(x) = e.reth {
        let _ = write!(
            s,
            " va={:#x} rkey={:#x} dma_len={}",
            x.va, x.rkey, x.dma_len
        );
    }
    if let Some(x) = e.atomic_eth {
        let _ = write!(
            s,
            " va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
            x.va, x.rkey, x.swap_add, x.compare
        );
    }
    if let Some(x) = e.aeth {
        s.push(' ');
        s.push_str(&syndrome_words(x.syndrome));
        let _ = write!(s, " msn={}", x.msn);
    }
    if let Some(x) = e.atomic_ack_eth {
        let _ = write!(s, " orig={:#x}", x.orig_data);
    }
    if let Some(x) = e.immdt {
        let _ = write!(s, " imm={:#010x}", x.imm);
    }
    if let Some(x) = e.ieth {
        let _ = write!(s, " inv_rkey={:#x}", x.rkey);
    }
    if p.info.payload != PayloadRule::None {
        let _ = write!(s, " len={}", r.payload_len);
    }
}

/// An AETH syndrome in a few words, for the summary line.
pub fn syndrome_words(syn: Syndrome) -> String {
    match syn {
        Syndrome::Ack { credits: 31 } => "ACK".to_string(),
        Syndrome::Ack { credits } => match credit_count(credits) {
            Some(n) => format!("ACK credits={n}"),
            None => format!("ACK credit-code={credits}"),
        },
        Syndrome::RnrNak { timer } => format!("RNR-NAK timer={timer}"),
        Syndrome::Nak(code) => match code {
            NakCode::PsnSequenceError => "NAK(PSN sequence error)".into(),
            NakCode::InvalidRequest => "NAK(invalid request)".into(),
            NakCode::RemoteAccessError => "NAK(remote access error)".into(),
            NakCode::RemoteOperationalError => "NAK(remote operational error)".into(),
            NakCode::InvalidRdRequest => "NAK(invalid RD request)".into(),
            NakCode::Reserved(c) => format!("NAK(reserved code {c})"),
        },
        Syndrome::Reserved(raw) => format!("reserved syndrome {raw:#04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::AethRepr;
    use crate::wire::build::tests::{build, Encap, ENCAPS};
    use crate::wire::frame::tests::{on_every_link, ALL_LINKS};
    use crate::wire::opcode::{self, Opcode};
    use crate::wire::packet::tests::{arb_packet, sample_packet};
    use crate::wire::ErrorKind;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn outer_names(e: Encap) -> &'static [&'static str] {
        match e {
            Encap::V4 => &["Ethernet", "IPv4", "UDP"],
            Encap::V4Raw => &["IPv4", "UDP"],
            Encap::V6 | Encap::V6Csum => &["Ethernet", "IPv6", "UDP"],
            Encap::V1 => &["Ethernet", "GRH"],
            Encap::IbLocal => &["LRH"],
            Encap::IbGlobal => &["LRH", "GRH"],
        }
    }

    #[test]
    fn layers_name_every_header_in_order() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 7);
            for e in ENCAPS {
                let b = build(e, &t, &p);
                let d = dissect(b.link, &b.bytes).unwrap().unwrap();
                let layers = d.layers();
                let names: Vec<&str> = layers.iter().map(|l| l.name).collect();
                let mut want: Vec<&str> = outer_names(e).to_vec();
                want.push("BTH");
                want.extend(info.headers.as_slice().iter().map(|h| h.layer().name()));
                assert_eq!(names, want, "{e:?} {:#04x}", info.opcode);
                // Contiguous from the start of the frame to the payload.
                let mut at = 0;
                for l in &layers {
                    assert_eq!(l.offset, at, "{e:?} {}", l.name);
                    assert_eq!(&b.bytes[l.offset..l.offset + l.bytes.len()], l.bytes);
                    assert!(!l.fields.is_empty());
                    at += l.bytes.len();
                }
                assert_eq!(at, b.bth + info.header_len());
                let bth = layers.iter().find(|l| l.key == "bth").unwrap();
                assert_eq!(bth.fields[0].raw, u128::from(info.opcode));
                assert_eq!(
                    d.carried_icrc(),
                    crate::wire::icrc::carried(&b.bytes[..b.end])
                );
                assert!(d.problems().is_empty());
            }
        }
    }

    #[test]
    fn summary_lines() {
        let ack = Opcode::RC_ACKNOWLEDGE.info().unwrap();
        let (t, p) = sample_packet(ack, 0);
        let b = build(Encap::V4, &t, &p);
        let d = dissect(b.link, &b.bytes).unwrap().unwrap();
        assert_eq!(
            d.summary(),
            "10.0.0.1 > 10.0.0.2 RC Acknowledge qp=0x1234 psn=43981 ackreq \
             migreq ACK credits=6 msn=258 icrc=ok"
        );
        let b = build(Encap::IbLocal, &t, &p);
        let d = dissect(b.link, &b.bytes).unwrap().unwrap();
        assert_eq!(
            d.summary(),
            "LID 1 > LID 2 [InfiniBand] RC Acknowledge qp=0x1234 psn=43981 ackreq \
             migreq ACK credits=6 msn=258 icrc=ok vcrc=ok"
        );
        let ud = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        let (mut t, p) = sample_packet(ud, 3);
        t.bth.fecn = true;
        t.bth.pkey = 0x8001;
        let b = build(Encap::V6, &t, &p);
        let d = dissect(b.link, &b.bytes).unwrap().unwrap();
        assert_eq!(
            d.summary(),
            "fd00::1 > fd00::2 [RoCEv2/IPv6] UD SEND Only with Immediate qp=0x1234 psn=43981 \
             ackreq migreq ecn=F pkey=0x8001 qkey=0x11112222 src_qp=0xa0b imm=0x12345678 len=3 icrc=ok"
        );
        // Every syndrome kind has words.
        for (syn, words) in [
            (Syndrome::Ack { credits: 31 }, "ACK"),
            (Syndrome::RnrNak { timer: 14 }, "RNR-NAK timer=14"),
            (
                Syndrome::Nak(NakCode::PsnSequenceError),
                "NAK(PSN sequence error)",
            ),
            (
                Syndrome::Nak(NakCode::RemoteAccessError),
                "NAK(remote access error)",
            ),
            (Syndrome::Nak(NakCode::Reserved(9)), "NAK(reserved code 9)"),
            (Syndrome::Reserved(0x40), "reserved syndrome 0x40"),
        ] {
            let (mut t, p) = sample_packet(ack, 0);
            t.ext.aeth = Some(AethRepr {
                syndrome: syn,
                msn: 7,
            });
            let b = build(Encap::V4, &t, &p);
            let d = dissect(b.link, &b.bytes).unwrap().unwrap();
            assert!(
                d.summary().contains(&format!(" {words} msn=7 ")),
                "{}",
                d.summary()
            );
        }
    }

    #[test]
    fn bad_packets_say_so() {
        let (t, p) = sample_packet(Opcode::RC_RDMA_WRITE_ONLY.info().unwrap(), 16);
        let b = build(Encap::V4, &t, &p);
        // A payload byte: parses, ICRC bad.
        let mut f = b.bytes.clone();
        f[b.end - 6] ^= 1;
        let d = dissect(b.link, &f).unwrap().unwrap();
        assert!(!d.is_good());
        assert!(d.packet.is_ok());
        assert!(d.summary().ends_with("len=16 icrc=BAD"), "{}", d.summary());
        assert_eq!(d.problems().len(), 1);
        assert!(matches!(d.problems()[0].kind, ErrorKind::BadIcrc { .. }));
        // TVer: does not parse, and the ICRC is bad too.
        let mut f = b.bytes.clone();
        f[b.bth + 1] |= 1;
        let d = dissect(b.link, &f).unwrap().unwrap();
        assert!(
            d.summary().contains("MALFORMED (BTH: field TVer"),
            "{}",
            d.summary()
        );
        assert!(d.summary().ends_with("icrc=BAD"));
        assert_eq!(d.problems().len(), 2);
        assert_eq!(d.payload(), None);
        // Without a parse, only the BTH is described.
        assert_eq!(d.layers().last().unwrap().name, "BTH");
        // IB: a bad VCRC alone.
        let b = build(Encap::IbLocal, &t, &p);
        let mut f = b.bytes.clone();
        let n = f.len();
        f[n - 1] ^= 0x10;
        let d = dissect(b.link, &f).unwrap().unwrap();
        assert!(d.icrc.is_ok() && d.packet.is_ok());
        assert!(!d.is_good());
        assert!(d.summary().ends_with("icrc=ok vcrc=BAD"));
        // Transports too short to hold a BTH, or even an ICRC.
        let b4 = build(Encap::V4Raw, &t, &p);
        for tlen in [2u16, 6] {
            let mut g = b4.bytes[..usize::from(28 + tlen)].to_vec();
            g[2..4].copy_from_slice(&(28 + tlen).to_be_bytes());
            g[24..26].copy_from_slice(&(8 + tlen).to_be_bytes());
            let d = dissect(LinkType::RawIp, &g).unwrap().unwrap();
            assert_eq!(d.carried_icrc().is_some(), tlen >= 4);
            assert!(!d.is_good());
            assert!(d.summary().contains("MALFORMED (BTH: truncated"));
            assert_eq!(d.layers().last().unwrap().name, "UDP");
        }
    }

    #[test]
    fn not_roce_is_none() {
        assert!(dissect(LinkType::Ethernet, &[0; 60]).unwrap().is_none());
        assert!(dissect(LinkType::Other(42), &[0; 60]).unwrap().is_none());
        assert!(dissect(LinkType::Ethernet, &[0; 10]).is_err());
    }

    fn exercise(d: &Dissection<'_>) {
        let _ = d.is_good();
        let _ = d.problems();
        let _ = d.payload();
        let _ = d.carried_icrc();
        assert!(!d.summary().is_empty());
        for l in d.layers() {
            assert!(l.offset + l.bytes.len() <= d.data.len());
            for f in &l.fields {
                let _ = f.bit_string();
            }
        }
    }

    proptest! {
        #[test]
        fn dissect_never_panics_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..200)) {
            for link in ALL_LINKS {
                if let Ok(Some(d)) = dissect(link, &bytes) {
                    exercise(&d);
                }
            }
        }

        #[test]
        fn dissect_never_panics_on_mutated_packets(
            (t, p) in arb_packet(),
            e in proptest::sample::select(ENCAPS.to_vec()),
            which in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            x in 1u8..=255,
            cut in any::<prop::sample::Index>(),
        ) {
            let b = build(e, &t, &p);
            let links = on_every_link(&b);
            let (link, mut f) = links[which.index(links.len())].clone();
            let d = dissect(link, &f).unwrap().unwrap();
            prop_assert!(d.is_good());
            prop_assert_eq!(d.packet.as_ref().unwrap().repr, t);
            exercise(&d);
            let i = at.index(f.len());
            f[i] ^= x;
            if let Ok(Some(d)) = dissect(link, &f) {
                exercise(&d);
            }
            let n = cut.index(f.len() + 1);
            if let Ok(Some(d)) = dissect(link, &f[..n]) {
                exercise(&d);
            }
        }
    }
}
