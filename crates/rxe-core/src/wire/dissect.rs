//! Explaining a frame: every layer of a RoCE packet with its fields, the
//! ICRC (and VCRC) verdict, and a one-line summary. `rxe dissect` prints
//! this, and the device prints the same lines in its traces.

use core::fmt::Write as _;

use super::aeth::{Aeth, NakCode, Syndrome};
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
use super::opcode::ExtHeader;
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
    let _ = write!(s, " len={}", r.payload_len);
}

/// An AETH syndrome in a few words, for the summary line.
pub fn syndrome_words(syn: Syndrome) -> String {
    match syn {
        Syndrome::Ack { credits: 31 } => "ACK".to_string(),
        Syndrome::Ack { credits } => format!("ACK credits={credits}"),
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
