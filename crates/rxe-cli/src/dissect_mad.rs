//! The management datagrams inside RoCE packets, for `rxe dissect`: a UD
//! packet to QP1, the general services interface, carries one MAD (IBTA
//! chapter 13, not checked against the text; so do all of `rping.pcap`'s),
//! and the CM's (class 0x07) are explained field by field with rxe-cm's
//! tables. rxe-core knows nothing of MADs (rxe-cm depends on it, not the
//! other way round), so this layer lives here.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::IpAddr;

use rxe_cm::ip_cm::{self, IpCmHeader, PortSpace};
use rxe_cm::mad::{
    self, attr, header::MadHeader, method, CmMad, CmMessage, MadDescription, MessageMraed,
    MessageRejected, MGMT_CLASS_CM,
};
use rxe_core::wire::dissect::Dissection;
use rxe_core::wire::field::FieldValue;
use serde_json::{json, Map, Value};

use super::{field_json, hex};

/// A MAD found in a frame, with what it is.
#[derive(Debug)]
pub(crate) struct FoundMad<'a> {
    /// Offset of the MAD in the frame.
    pub offset: usize,
    pub bytes: &'a [u8],
    pub kind: MadKind,
}

#[derive(Debug)]
pub(crate) enum MadKind {
    /// A CM MAD that parses.
    Cm(Box<CmMad>),
    /// A CM-class MAD this crate reads but does not check (ClassPortInfo
    /// Get and its response).
    CmOther { method: u8, attribute_id: u16 },
    /// A MAD of another class (subnet administration, performance ...).
    OtherClass {
        class: u8,
        method: u8,
        attribute_id: u16,
    },
    /// Bytes on QP1 that are not a well-formed MAD.
    Malformed {
        reason: &'static str,
        message: String,
    },
}

impl FoundMad<'_> {
    pub(crate) fn is_malformed(&self) -> bool {
        matches!(self.kind, MadKind::Malformed { .. })
    }

    /// The problem, as `--check` prints it.
    pub(crate) fn problem(&self) -> Option<String> {
        match &self.kind {
            MadKind::Malformed { message, .. } => Some(format!("MAD: {message}")),
            _ => None,
        }
    }

    fn header_fields(&self) -> Option<Vec<FieldValue>> {
        MadHeader::new_checked(self.bytes.get(..mad::HEADER_LEN)?)
            .ok()?
            .describe()
    }

    /// The tables' explanation (only for a whole 256-byte MAD).
    fn description(&self) -> Option<MadDescription> {
        mad::describe(self.bytes)
    }
}

/// The MAD a frame carries: the payload of a UD packet to QP1 (the GSI).
/// `None` when the frame carries none (or its transport does not parse).
pub(crate) fn find<'a>(d: &Dissection<'a>) -> Option<FoundMad<'a>> {
    let p = d.packet.as_ref().ok()?;
    // Only datagrams (with a DETH) reach QP1.
    if p.repr.ext.deth.is_none() || p.repr.bth.dest_qp != rxe_cm::GSI_QPN {
        return None;
    }
    let offset = (d.frame.transport.as_ptr() as usize)
        .wrapping_sub(d.data.as_ptr() as usize)
        .wrapping_add(p.header_len);
    let bytes = p.payload;
    Some(FoundMad {
        offset,
        bytes,
        kind: classify(bytes),
    })
}

fn classify(bytes: &[u8]) -> MadKind {
    if bytes.len() < mad::HEADER_LEN {
        return MadKind::Malformed {
            reason: "truncated",
            message: format!(
                "{} bytes on QP1, a MAD header needs {}",
                bytes.len(),
                mad::HEADER_LEN
            ),
        };
    }
    let h = MadHeader::new_unchecked(bytes);
    let (class, method, attribute_id) = (h.mgmt_class(), h.method(), h.attribute_id());
    if class != MGMT_CLASS_CM {
        return MadKind::OtherClass {
            class,
            method,
            attribute_id,
        };
    }
    // A UD MAD is exactly 256 bytes (IBTA 13.4.2, not checked against the
    // text); rxe-cm's parser ignores bytes past 256, a dissector must not.
    if bytes.len() != mad::MAD_LEN {
        return MadKind::Malformed {
            reason: "bad_length",
            message: format!("CM MAD of {} bytes, a MAD is {}", bytes.len(), mad::MAD_LEN),
        };
    }
    if attribute_id == attr::CLASS_PORT_INFO && method != method::SEND {
        return MadKind::CmOther {
            method,
            attribute_id,
        };
    }
    match CmMad::parse(bytes) {
        Ok(m) => MadKind::Cm(Box::new(m)),
        Err(e) => MadKind::Malformed {
            reason: e.reason(),
            message: e.to_string(),
        },
    }
}

fn service_words(sid: u64) -> String {
    match ip_cm::parse_service_id(sid) {
        Some((ps, port)) => {
            let name = match ps {
                PortSpace::Tcp => "RDMA_PS_TCP".to_string(),
                PortSpace::Udp => "RDMA_PS_UDP".to_string(),
                PortSpace::Ib => "RDMA_PS_IB".to_string(),
                PortSpace::Other(c) => format!("port space {c:#06x}"),
            };
            format!("svc={sid:#018x} ({name} port {port})")
        }
        None => format!("svc={sid:#018x}"),
    }
}

/// The IP CM addressing header, where the ServiceID says there is one.
fn ip_cm_header(sid: u64, private_data: &[u8]) -> Option<Result<IpCmHeader, String>> {
    ip_cm::parse_service_id(sid)?;
    Some(IpCmHeader::parse(private_data).map_err(|e| e.to_string()))
}

fn ip_words(h: &IpCmHeader) -> String {
    match h.src {
        IpAddr::V6(a) => format!("from [{a}]:{} to {}", h.src_port, h.dst),
        IpAddr::V4(a) => format!("from {a}:{} to {}", h.src_port, h.dst),
    }
}

/// A few words on the MAD, appended to the frame's summary line.
pub(crate) fn summary(m: &FoundMad<'_>) -> String {
    let mut s = String::new();
    match &m.kind {
        MadKind::Cm(cm) => summarize_cm(&mut s, cm),
        MadKind::CmOther {
            method,
            attribute_id,
        } => {
            let _ = write!(
                s,
                "CM {} {}",
                mad::attribute_name(*attribute_id).unwrap_or("attribute"),
                mad::header::method_name(*method).unwrap_or("method")
            );
        }
        MadKind::OtherClass {
            class,
            method,
            attribute_id,
        } => {
            let _ = write!(
                s,
                "MAD class={class:#04x} method={method:#04x} attr={attribute_id:#06x}"
            );
        }
        MadKind::Malformed { message, .. } => {
            let _ = write!(s, "MAD MALFORMED ({message})");
        }
    }
    s
}

fn summarize_cm(s: &mut String, cm: &CmMad) {
    let _ = write!(s, "CM {}", cm.message.name());
    match &cm.message {
        CmMessage::Req(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} {} qpn={:#x} psn={:#x}",
                r.local_comm_id,
                service_words(r.service_id),
                r.local_qpn,
                r.starting_psn
            );
            if let Some(Ok(h)) = ip_cm_header(r.service_id, r.private_data.as_bytes()) {
                let _ = write!(s, " {}", ip_words(&h));
            }
        }
        CmMessage::Rep(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x} qpn={:#x} psn={:#x}",
                r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
            );
        }
        CmMessage::Rtu(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x}",
                r.local_comm_id, r.remote_comm_id
            );
        }
        CmMessage::Dreq(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x} remote_qpn={:#x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn_eecn
            );
        }
        CmMessage::Drep(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x}",
                r.local_comm_id, r.remote_comm_id
            );
        }
        CmMessage::Rej(r) => {
            let code = r.reason.code();
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x} of={} reason={code}",
                r.local_comm_id,
                r.remote_comm_id,
                match r.message_rejected {
                    MessageRejected::Req => "REQ",
                    MessageRejected::Rep => "REP",
                    MessageRejected::Other => "none",
                }
            );
            if let Some(n) = r.reason.name() {
                let _ = write!(s, " ({n})");
            }
        }
        CmMessage::Mra(r) => {
            let _ = write!(
                s,
                " comm_id={:#010x} remote={:#010x} of={} service_timeout={}",
                r.local_comm_id,
                r.remote_comm_id,
                match r.message_mraed {
                    MessageMraed::Req => "REQ",
                    MessageMraed::Rep => "REP",
                    MessageMraed::Lap => "LAP",
                },
                r.service_timeout
            );
        }
        CmMessage::SidrReq(r) => {
            let _ = write!(
                s,
                " req_id={:#010x} {}",
                r.request_id,
                service_words(r.service_id)
            );
            if let Some(Ok(h)) = ip_cm_header(r.service_id, r.private_data.as_bytes()) {
                let _ = write!(s, " {}", ip_words(&h));
            }
        }
        CmMessage::SidrRep(r) => {
            let _ = write!(
                s,
                " req_id={:#010x} status={:?} qpn={:#x} qkey={:#x} {}",
                r.request_id,
                r.status,
                r.qpn,
                r.qkey,
                service_words(r.service_id)
            );
        }
    }
}

fn write_fields(out: &mut impl Write, fields: &[FieldValue]) -> io::Result<()> {
    for f in fields {
        let words = match &f.meaning {
            Some(m) => m.clone(),
            None => f.spec.doc.to_string(),
        };
        writeln!(
            out,
            "      {:<34} {:>3} bits  {:<34} = {:<14} {}",
            f.spec.name,
            f.spec.bits,
            f.bit_string(),
            f.raw,
            words
        )?;
    }
    Ok(())
}

/// A byte run in a few words: its non-zero prefix in hex (the CM does not
/// carry how many bytes the consumer meant; the rest is zero padding).
fn blob_words(b: &[u8]) -> String {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    if end == 0 {
        return "all zero".to_string();
    }
    let shown = &b[..end.min(32)];
    format!(
        "{} bytes, then zeros: {}{}",
        end,
        hex(shown),
        if end > shown.len() { " ..." } else { "" }
    )
}

/// The `-v` tree of a MAD: its header, the message's fields, then its
/// byte runs, with the IP CM header of a REQ or SIDR_REQ decoded.
pub(crate) fn write_tree(out: &mut impl Write, m: &FoundMad<'_>) -> io::Result<()> {
    if let Some(h) = m.header_fields() {
        writeln!(
            out,
            "    MAD header @{}, {} bytes: {}",
            m.offset,
            mad::HEADER_LEN,
            hex(&m.bytes[..mad::HEADER_LEN])
        )?;
        write_fields(out, &h)?;
    }
    if let MadKind::Malformed { message, .. } = &m.kind {
        writeln!(out, "    MAD problem: {message}")?;
    }
    let Some(desc) = m.description() else {
        return Ok(());
    };
    let Some(name) = desc.message else {
        return Ok(());
    };
    let data_at = m.offset + mad::HEADER_LEN;
    writeln!(out, "    CM {name} @{data_at}, {} bytes", mad::DATA_LEN)?;
    write_fields(out, &desc.fields)?;
    let sid = desc
        .fields
        .iter()
        .find(|f| f.spec.key == "service_id")
        .map(|f| f.raw as u64);
    for (spec, bytes) in &desc.blobs {
        writeln!(
            out,
            "    {} @{}, {} bytes: {}",
            spec.name,
            data_at + spec.byte_offset,
            spec.len,
            blob_words(bytes)
        )?;
        let is_req = matches!(name, "REQ" | "SIDR_REQ");
        if spec.key == "private_data" && is_req {
            if let Some(sid) = sid {
                write_ip_cm(out, sid, bytes)?;
            }
        }
    }
    Ok(())
}

fn write_ip_cm(out: &mut impl Write, sid: u64, pd: &[u8]) -> io::Result<()> {
    match ip_cm_header(sid, pd) {
        None => Ok(()),
        Some(Err(e)) => writeln!(out, "      IP CM header: {e}"),
        Some(Ok(h)) => {
            // Offsets in the private data: version byte, IP version in the
            // high nibble, source port, then two 16-byte addresses.
            writeln!(
                out,
                "      IP CM header (36 bytes, from the ServiceID {sid:#018x}):"
            )?;
            writeln!(
                out,
                "        {:<24} {:#04x}  (major {} minor {})",
                "CM version",
                pd[0],
                pd[0] >> 4,
                pd[0] & 0xf
            )?;
            writeln!(out, "        {:<24} {}", "IP version", pd[1] >> 4)?;
            writeln!(out, "        {:<24} {}", "source port", h.src_port)?;
            writeln!(out, "        {:<24} {}", "source address", h.src)?;
            writeln!(out, "        {:<24} {}", "destination address", h.dst)?;
            writeln!(
                out,
                "        {:<24} {}",
                "consumer private data",
                blob_words(&pd[ip_cm::HEADER_LEN..])
            )
        }
    }
}

fn fields_json(fields: &[FieldValue]) -> Map<String, Value> {
    let mut o = Map::new();
    for f in fields {
        o.insert(f.spec.key.to_string(), field_json(f.raw));
        if let Some(m) = &f.meaning {
            o.insert(format!("{}_text", f.spec.key), Value::from(m.clone()));
        }
    }
    o
}

/// The "mad" object of `--json`.
pub(crate) fn to_json(m: &FoundMad<'_>) -> Value {
    let mut o = Map::new();
    o.insert("offset".into(), m.offset.into());
    o.insert("len".into(), m.bytes.len().into());
    if let Some(h) = m.header_fields() {
        o.insert("header".into(), Value::Object(fields_json(&h)));
    }
    o.insert("summary".into(), summary(m).into());
    if let MadKind::Malformed { reason, message } = &m.kind {
        o.insert(
            "error".into(),
            json!({"reason": reason, "message": message}),
        );
    }
    if let Some(desc) = m.description() {
        if let Some(name) = desc.message {
            o.insert("message".into(), name.into());
            o.insert("fields".into(), Value::Object(fields_json(&desc.fields)));
            let sid = desc
                .fields
                .iter()
                .find(|f| f.spec.key == "service_id")
                .map(|f| f.raw as u64);
            for (spec, bytes) in &desc.blobs {
                o.insert(
                    spec.key.to_string(),
                    bytes
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                        .into(),
                );
                if spec.key == "private_data" && matches!(name, "REQ" | "SIDR_REQ") {
                    match sid.and_then(|s| ip_cm_header(s, bytes)) {
                        Some(Ok(h)) => {
                            o.insert(
                                "ip_cm".into(),
                                json!({
                                    "version": bytes[0],
                                    "ip_version": bytes[1] >> 4,
                                    "src_port": h.src_port,
                                    "src": h.src.to_string(),
                                    "dst": h.dst.to_string(),
                                }),
                            );
                        }
                        Some(Err(e)) => {
                            o.insert("ip_cm_error".into(), e.into());
                        }
                        None => {}
                    }
                }
            }
        }
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_cm::ip_cm::{service_id, IpCmHeader, PortSpace};
    use rxe_cm::mad::{DreqRepr, MraRepr, PrivateData, RejRepr, RejectReason, SidrReqRepr};
    use rxe_cm::{CmConfig, CmEndpoint, ConnectParams};
    use rxe_core::transport::Instant;
    use std::net::Ipv6Addr;

    fn samples() -> Vec<[u8; mad::MAD_LEN]> {
        let ip = IpCmHeader {
            src_port: 4000,
            src: "::1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        let sid = service_id(PortSpace::Tcp, 7174);
        // The REQ as the endpoint builds it.
        let gid = rxe_core::Gid::from(Ipv6Addr::LOCALHOST);
        let mut p = ConnectParams::rc(sid, 0x24, 0x123, gid, gid);
        p.private_data = ip.with_user_data(b"x", mad::req::PRIVATE_DATA_LEN).unwrap();
        let mut ep = CmEndpoint::new(CmConfig::new(1));
        ep.connect(Instant::from_nanos(1), p).unwrap();
        let (_, req) = ep.poll_transmit().unwrap();
        let sidr = SidrReqRepr {
            request_id: 9,
            pkey: 0xffff,
            service_id: service_id(PortSpace::Udp, 1),
            private_data: PrivateData::from_slice(
                "SIDR_REQ",
                &ip.with_user_data(&[], mad::sidr::REQ_PRIVATE_DATA_LEN)
                    .unwrap(),
            )
            .unwrap(),
        };
        let rej = RejRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: MessageRejected::Rep,
            reject_info_length: 0,
            reason: RejectReason::StaleConn,
            ari: [0; 72],
            private_data: PrivateData::default(),
        };
        let mra = MraRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: MessageMraed::Req,
            service_timeout: 24,
            private_data: PrivateData::default(),
        };
        let dreq = DreqRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn_eecn: 0x28,
            private_data: PrivateData::default(),
        };
        let mut v = vec![req];
        v.extend(
            [
                CmMessage::SidrReq(sidr),
                CmMessage::Rej(rej),
                CmMessage::Mra(mra),
                CmMessage::Dreq(dreq),
            ]
            .into_iter()
            .map(|m| CmMad::send(0x42, m).to_bytes()),
        );
        v
    }

    fn found(bytes: &[u8]) -> FoundMad<'_> {
        FoundMad {
            offset: 62,
            bytes,
            kind: classify(bytes),
        }
    }

    /// Everything `rxe dissect` does with a MAD, into a sink.
    fn exercise(bytes: &[u8]) -> String {
        let m = found(bytes);
        let mut out = Vec::new();
        write_tree(&mut out, &m).unwrap();
        let _ = to_json(&m);
        let _ = m.problem();
        summary(&m)
    }

    #[test]
    fn summaries_of_built_mads() {
        let s = samples();
        assert_eq!(
            exercise(&s[0]),
            "CM REQ comm_id=0x00000001 svc=0x0000000001061c06 (RDMA_PS_TCP port 7174) \
             qpn=0x24 psn=0x123 from [::1]:4000 to ::1"
        );
        assert_eq!(
            exercise(&s[1]),
            "CM SIDR_REQ req_id=0x00000009 svc=0x0000000001110001 (RDMA_PS_UDP port 1) \
             from [::1]:4000 to ::1"
        );
        assert_eq!(
            exercise(&s[2]),
            "CM REJ comm_id=0x00000001 remote=0x00000002 of=REP reason=10 (StaleConn)"
        );
        assert_eq!(
            exercise(&s[3]),
            "CM MRA comm_id=0x00000001 remote=0x00000002 of=REQ service_timeout=24"
        );
        let m = found(&s[1]);
        let mut out = Vec::new();
        write_tree(&mut out, &m).unwrap();
        let tree = String::from_utf8(out).unwrap();
        assert!(tree.contains("source address           ::1"), "{tree}");
        assert!(tree.contains("IP version               6"), "{tree}");
        let j = to_json(&m);
        assert_eq!(j["ip_cm"]["ip_version"], 6);
        assert_eq!(j["fields"]["request_id"], 9);
        assert!(!m.is_malformed());
    }

    #[test]
    fn cut_or_flipped_mads_never_panic_and_bad_cm_ones_are_malformed() {
        for s in samples() {
            for n in 0..=s.len() {
                let text = exercise(&s[..n]);
                if n < s.len() {
                    assert!(found(&s[..n]).is_malformed(), "{n}: {text}");
                }
            }
            let mut long = s.to_vec();
            long.push(0);
            assert!(found(&long).is_malformed());
            for at in 0..s.len() {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = s;
                    b[at] ^= x;
                    exercise(&b);
                }
            }
        }
        // Another class is not judged; a CM attribute nobody decodes is bad.
        let mut b = samples()[4];
        b[1] = 0x04;
        assert!(!found(&b).is_malformed());
        b[1] = MGMT_CLASS_CM;
        b[16..18].copy_from_slice(&attr::LAP.to_be_bytes());
        assert_eq!(
            found(&b).problem().as_deref(),
            Some("MAD: MAD header: attribute 0x0019 is not a CM message this crate decodes")
        );
    }
}
