//! The CM MADs rxe emits, decoded by tshark. Two `rxe_cm::CmEndpoint`s
//! connect (REQ, MRA, REP, RTU), disconnect (DREQ, DREP), refuse a second
//! connection (REQ, REJ) and resolve a UD service (SIDR_REQ, SIDR_REP).
//! Every MAD they emit is wrapped in a RoCEv2 UD SEND Only to QP1 with the
//! GSI Q_Key (rxe-core's builders, good ICRC), once over IPv4 and once over
//! IPv6, written to a pcap and read by tshark: no malformed packet, no
//! expert warning, and tshark's MAD header and `infiniband.cm.*` fields are
//! what the endpoints meant.
//!
//! What tshark 4.0 does and does not decode (found by running it):
//! - REQ, REP, RTU, REJ, DREQ and DREP field by field, and the IP CM
//!   private data of a REQ whose ServiceID is an IP CM one.
//! - MRA, SIDR_REQ and SIDR_REP only as a MAD header and "MAD Data
//!   Payload": for those the payload bytes are compared with ours.
//! - The REQ's Primary Flow Label and Packet Rate are misread (it takes the
//!   flow label from two bytes and the rate from the first byte; see
//!   docs/rdma-cm.md), so the flow label here is 0 and the rate checked
//!   only against the bytes rxe-cm's parser reads back.
//! - IPv6 with UDP checksum 0 is an expert error for tshark, so the IPv6
//!   frames carry a UDP checksum (as in tshark_builds.rs).
//!
//! tshark must be on PATH; set `RXE_SKIP_TSHARK=1` to skip where it cannot be
//! installed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rxe_cm::ip_cm::{service_id, IpCmHeader, PortSpace};
use rxe_cm::mad::{self, CmMad, CmMessage, RejectReason, SidrStatus, MAD_LEN};
use rxe_cm::{
    AcceptParams, CmConfig, CmEndpoint, CmEvent, ConnectParams, MadAddr, SidrParams, SidrReply,
};
use rxe_core::transport::Instant;
use rxe_core::wire::build::{emit_roce_v2_ethernet, EthernetAddrs, RoceV2Ip};
use rxe_core::wire::dissect::dissect;
use rxe_core::wire::frame::LinkType;
use rxe_core::wire::{BthRepr, DethRepr, ExtReprs, Opcode, TransportRepr};
use rxe_core::Gid;
use rxe_integration::tshark::{self, bytes, num, Row};

/// Expert severities (epan/proto.h): PI_WARN and above fail the test.
const PI_WARN: u64 = 0x0060_0000;

const FIELDS: &[&str] = &[
    "frame.number",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
    "udp.dstport",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.mad.baseversion",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.classversion",
    "infiniband.mad.method",
    "infiniband.mad.status",
    "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.mad.attributemodifier",
    "infiniband.mad.data",
    // REQ
    "infiniband.cm.req",
    "infiniband.cm.req.serviceid.prefix",
    "infiniband.cm.req.serviceid.protocol",
    "infiniband.cm.req.serviceid.dport",
    "infiniband.cm.req.localcaguid",
    "infiniband.cm.req.localqpn",
    "infiniband.cm.req.responderres",
    "infiniband.cm.req.initdepth",
    "infiniband.cm.req.remoteresptout",
    "infiniband.cm.req.transpsvctype",
    "infiniband.cm.req.startpsn",
    "infiniband.cm.req.localresptout",
    "infiniband.cm.req.retrcount",
    "infiniband.cm.req.pkey",
    "infiniband.cm.req.pppmtu",
    "infiniband.cm.req.rnrretrcount",
    "infiniband.cm.req.maxcmretr",
    "infiniband.cm.req.srq",
    "infiniband.cm.req.prim_locallid",
    "infiniband.cm.req.prim_remotelid",
    "infiniband.cm.req.prim_localgid",
    "infiniband.cm.req.prim_remotegid",
    "infiniband.cm.req.prim_localgid_ipv4",
    "infiniband.cm.req.prim_remotegid_ipv4",
    "infiniband.cm.req.prim_hoplim",
    "infiniband.cm.req.prim_localacktout",
    "infiniband.cm.req.ip_cm.majv",
    "infiniband.cm.req.ip_cm.ipv",
    "infiniband.cm.req.ip_cm.sport",
    "infiniband.cm.req.ip_cm.sip4",
    "infiniband.cm.req.ip_cm.dip4",
    "infiniband.cm.req.ip_cm.sip6",
    "infiniband.cm.req.ip_cm.dip6",
    "infiniband.cm.req.ip_cm.private",
    // REP
    "infiniband.cm.rep",
    "infiniband.cm.rep.remotecommid",
    "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn",
    "infiniband.cm.rep.respres",
    "infiniband.cm.rep.initdepth",
    "infiniband.cm.rep.tgtackdelay",
    "infiniband.cm.rep.rnrretrcount",
    "infiniband.cm.rep.localcaguid",
    "infiniband.cm.rep.private",
    // RTU
    "infiniband.cm.rtu.localcommid",
    "infiniband.cm.rtu.remotecommid",
    // REJ
    "infiniband.cm.rej.localcommid",
    "infiniband.cm.rej.remotecommid",
    "infiniband.cm.rej.msgrej",
    "infiniband.cm.rej.rejinfolen",
    "infiniband.cm.rej.reason",
    "infiniband.cm.rej.private",
    // DREQ (tshark files its Remote QPN/EECN under req)
    "infiniband.cm.dreq.localcommid",
    "infiniband.cm.dreq.remotecommid",
    "infiniband.cm.req.remoteqpneecn",
    // DREP
    "infiniband.cm.drsp.localcommid",
    "infiniband.cm.drsp.remotecommid",
];

/// One MAD as sent: from which side (true: the active one) and its bytes.
struct Sent {
    from_a: bool,
    bytes: [u8; MAD_LEN],
}

/// Everything an endpoint queued, in order.
fn drain(ep: &mut CmEndpoint, from_a: bool, log: &mut Vec<Sent>) -> Vec<[u8; MAD_LEN]> {
    let mut out = Vec::new();
    while let Some((to, bytes)) = ep.poll_transmit() {
        assert_eq!(to.qpn, rxe_cm::GSI_QPN, "CM MADs go to QP1");
        log.push(Sent { from_a, bytes });
        out.push(bytes);
    }
    out
}

fn one(ep: &mut CmEndpoint, from_a: bool, log: &mut Vec<Sent>) -> [u8; MAD_LEN] {
    let v = drain(ep, from_a, log);
    assert_eq!(v.len(), 1, "expected one MAD");
    v[0]
}

fn events(ep: &mut CmEndpoint) -> Vec<CmEvent> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

/// The conversation: every MAD both endpoints emit, in order.
fn conversation(a_ip: IpAddr, b_ip: IpAddr) -> Vec<Sent> {
    let mut log = Vec::new();
    let now = Instant::from_nanos(1_000_000);
    let mut a = CmEndpoint::new(CmConfig {
        tid_high: 0x0000_0002,
        first_comm_id: 0x12f2_77cf,
        ..CmConfig::new(0x5054_00ff_fe99_0003)
    });
    let mut b = CmEndpoint::new(CmConfig {
        first_comm_id: 0xcfc4_f2c8,
        ..CmConfig::new(0x5054_00ff_fe99_0002)
    });
    let (a_addr, b_addr) = (MadAddr::gsi(Gid::from(a_ip)), MadAddr::gsi(Gid::from(b_ip)));
    let sid = service_id(PortSpace::Tcp, 7174);
    b.listen(sid).unwrap();

    // REQ with the IP CM header and 5 bytes of user data.
    let ip_cm = IpCmHeader {
        src_port: 38724,
        src: a_ip,
        dst: b_ip,
    };
    let mut p = ConnectParams::rc(sid, 0x24, 0xec53de, Gid::from(a_ip), Gid::from(b_ip));
    p.private_data = ip_cm
        .with_user_data(b"hello", mad::req::PRIVATE_DATA_LEN)
        .unwrap();
    let a_id = a.connect(now, p).unwrap();
    let req = one(&mut a, true, &mut log);
    b.handle(now, a_addr, &req);
    let b_id = match &events(&mut b)[..] {
        [CmEvent::ConnectRequest { id, .. }] => *id,
        other => panic!("{other:?}"),
    };
    // MRA (more time), then REP, RTU.
    b.send_mra(b_id, &[]).unwrap();
    let mra = one(&mut b, false, &mut log);
    a.handle(now, b_addr, &mra);
    assert!(matches!(events(&mut a)[..], [CmEvent::MraReceived { .. }]));
    b.accept(now, b_id, AcceptParams::new(0x28, 0x0266e4))
        .unwrap();
    let rep = one(&mut b, false, &mut log);
    a.handle(now, b_addr, &rep);
    assert!(matches!(
        events(&mut a)[..],
        [CmEvent::ConnectResponse { .. }]
    ));
    a.send_rtu(a_id, &[]).unwrap();
    let rtu = one(&mut a, true, &mut log);
    assert!(matches!(events(&mut a)[..], [CmEvent::Established { .. }]));
    b.handle(now, a_addr, &rtu);
    assert!(matches!(events(&mut b)[..], [CmEvent::Established { .. }]));
    // DREQ, DREP.
    a.disconnect(now, a_id, &[]).unwrap();
    let dreq = one(&mut a, true, &mut log);
    b.handle(now, a_addr, &dreq);
    assert!(matches!(events(&mut b)[..], [CmEvent::Disconnected { .. }]));
    let drep = one(&mut b, false, &mut log);
    a.handle(now, b_addr, &drep);
    let ev = events(&mut a);
    assert!(matches!(ev[..], [CmEvent::Disconnected { .. }]), "{ev:?}");

    // A second REQ, refused with a REJ (consumer reject, private data).
    let mut p = ConnectParams::rc(sid, 0x26, 0x1234, Gid::from(a_ip), Gid::from(b_ip));
    p.private_data = ip_cm
        .with_user_data(&[], mad::req::PRIVATE_DATA_LEN)
        .unwrap();
    a.connect(now, p).unwrap();
    let req2 = one(&mut a, true, &mut log);
    b.handle(now, a_addr, &req2);
    let b_id2 = match &events(&mut b)[..] {
        [CmEvent::ConnectRequest { id, .. }] => *id,
        other => panic!("{other:?}"),
    };
    b.reject(now, b_id2, RejectReason::from_code(28), b"busy")
        .unwrap();
    let rej = one(&mut b, false, &mut log);
    a.handle(now, b_addr, &rej);
    assert!(matches!(events(&mut a)[..], [CmEvent::Rejected { .. }]));

    // SIDR for a UD service.
    let usid = service_id(PortSpace::Udp, 7175);
    b.listen(usid).unwrap();
    let s_id = a
        .sidr_request(
            now,
            SidrParams {
                to: b_addr,
                service_id: usid,
                pkey: 0xffff,
                private_data: ip_cm
                    .with_user_data(&[], mad::sidr::REQ_PRIVATE_DATA_LEN)
                    .unwrap(),
            },
        )
        .unwrap();
    let sreq = one(&mut a, true, &mut log);
    b.handle(now, a_addr, &sreq);
    let sb = match &events(&mut b)[..] {
        [CmEvent::SidrRequest { id, .. }] => *id,
        other => panic!("{other:?}"),
    };
    b.sidr_reply(
        now,
        sb,
        SidrReply {
            status: SidrStatus::Success,
            qpn: 0x31,
            qkey: 0x1111_1111,
            private_data: vec![7],
        },
    )
    .unwrap();
    let srep = one(&mut b, false, &mut log);
    a.handle(now, b_addr, &srep);
    match &events(&mut a)[..] {
        [CmEvent::SidrResponse { id, .. }] => assert_eq!(*id, s_id),
        other => panic!("{other:?}"),
    }
    assert!(drain(&mut a, true, &mut log).is_empty());
    assert!(drain(&mut b, false, &mut log).is_empty());
    log
}

/// The MAD in a UD SEND Only from QP1 to QP1 with the GSI Q_Key.
fn frame(s: &Sent, psn: u32, a_ip: IpAddr, b_ip: IpAddr) -> Vec<u8> {
    let bth = BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: rxe_cm::GSI_QPN,
        ack_req: true,
        psn,
    };
    let ext = ExtReprs {
        deth: Some(DethRepr {
            qkey: rxe_cm::GSI_QKEY,
            src_qp: rxe_cm::GSI_QPN,
        }),
        ..ExtReprs::default()
    };
    let t = TransportRepr::new(bth, ext, MAD_LEN);
    let (src, dst) = if s.from_a { (a_ip, b_ip) } else { (b_ip, a_ip) };
    let eth = EthernetAddrs {
        src: [0x02, 0, 0, 0, 0, if s.from_a { 1 } else { 2 }],
        dst: [0x02, 0, 0, 0, 0, if s.from_a { 2 } else { 1 }],
    };
    let mut ip = RoceV2Ip::new(src, dst, 0xc001);
    ip.ipv6_udp_checksum = src.is_ipv6();
    let mut buf = vec![0u8; 2048];
    let n = emit_roce_v2_ethernet(&eth, &ip, &t, &s.bytes, &mut buf).unwrap();
    buf.truncate(n);
    // rxe's own dissector agrees: a good ICRC, the MAD as the payload.
    let d = dissect(LinkType::Ethernet, &buf).unwrap().unwrap();
    assert!(d.is_good(), "{:?}", d.problems());
    assert_eq!(d.payload(), Some(&s.bytes[..]));
    buf
}

fn tshark_fields(path: &Path) -> Vec<Row> {
    tshark::fields(path, &["-o", "udp.check_checksum:TRUE"], FIELDS)
}

fn pcap_path(name: &str) -> PathBuf {
    tshark::pcap_path(env!("CARGO_TARGET_TMPDIR"), name)
}

/// Checks one frame: tshark's view of the MAD against what rxe-cm meant.
fn check_row(s: &Sent, row: &Row, fail: &mut dyn FnMut(String)) {
    let m = CmMad::parse(&s.bytes).expect("rxe-cm reads its own MAD");
    macro_rules! same {
        ($field:expr, $want:expr) => {{
            let got = num(row, $field);
            let want: u64 = u64::from($want);
            if got != Some(want) {
                fail(format!("{}: tshark {:?}, rxe {want:#x}", $field, got));
            }
        }};
    }
    macro_rules! same_text {
        ($field:expr, $want:expr) => {{
            let got = row[$field].as_str();
            let want: String = $want;
            if got != want {
                fail(format!("{}: tshark {got:?}, rxe {want:?}", $field));
            }
        }};
    }
    if !row["_ws.malformed"].is_empty() {
        fail(format!("malformed: {}", row["_ws.malformed"]));
    }
    let sev = &row["_ws.expert.severity"];
    if !sev.is_empty() {
        let msgs: Vec<&str> = row["_ws.expert.message"].split(',').collect();
        for (i, x) in sev.split(',').enumerate() {
            if x.parse::<u64>().unwrap() >= PI_WARN {
                fail(format!(
                    "expert severity {x}: {}",
                    msgs.get(i).copied().unwrap_or("?")
                ));
            }
        }
    }
    same!("udp.dstport", 4791u16);
    same!("infiniband.bth.opcode", Opcode::UD_SEND_ONLY.0);
    same!("infiniband.bth.destqp", rxe_cm::GSI_QPN);
    same!("infiniband.deth.q_key", rxe_cm::GSI_QKEY);
    same!("infiniband.deth.srcqp", rxe_cm::GSI_QPN);
    let h = &m.header;
    same!("infiniband.mad.baseversion", h.base_version);
    same!("infiniband.mad.mgmtclass", h.mgmt_class);
    same!("infiniband.mad.classversion", h.class_version);
    same!("infiniband.mad.method", h.method);
    same!("infiniband.mad.status", h.status);
    same!("infiniband.mad.transactionid", h.transaction_id);
    same!("infiniband.mad.attributeid", m.message.attribute_id());
    same!("infiniband.mad.attributemodifier", h.attribute_modifier);
    if bytes(row, "infiniband.mad.data").as_deref() != Some(&s.bytes[mad::HEADER_LEN..]) {
        fail("MAD Data Payload differs from the bytes sent".into());
    }
    match &m.message {
        CmMessage::Req(r) => {
            same!("infiniband.cm.req", r.local_comm_id);
            // tshark splits an IP CM ServiceID: 5-byte prefix, protocol, port.
            let sid = r.service_id.to_be_bytes();
            if bytes(row, "infiniband.cm.req.serviceid.prefix").as_deref() != Some(&sid[..5]) {
                fail(format!("ServiceID prefix differs: {:#x}", r.service_id));
            }
            same!("infiniband.cm.req.serviceid.protocol", sid[5]);
            same!(
                "infiniband.cm.req.serviceid.dport",
                u16::from_be_bytes([sid[6], sid[7]])
            );
            same!("infiniband.cm.req.localcaguid", r.local_ca_guid);
            same!("infiniband.cm.req.localqpn", r.local_qpn);
            same!("infiniband.cm.req.responderres", r.responder_resources);
            same!("infiniband.cm.req.initdepth", r.initiator_depth);
            same!(
                "infiniband.cm.req.remoteresptout",
                r.remote_cm_response_timeout
            );
            same!("infiniband.cm.req.transpsvctype", r.transport_service_type);
            same!("infiniband.cm.req.startpsn", r.starting_psn);
            same!(
                "infiniband.cm.req.localresptout",
                r.local_cm_response_timeout
            );
            same!("infiniband.cm.req.retrcount", r.retry_count);
            same!("infiniband.cm.req.pkey", r.pkey);
            same!("infiniband.cm.req.pppmtu", r.path_mtu);
            same!("infiniband.cm.req.rnrretrcount", r.rnr_retry_count);
            same!("infiniband.cm.req.maxcmretr", r.max_cm_retries);
            same!("infiniband.cm.req.srq", u8::from(r.srq));
            let p = &r.primary_path;
            same!("infiniband.cm.req.prim_locallid", p.local_lid);
            same!("infiniband.cm.req.prim_remotelid", p.remote_lid);
            same!("infiniband.cm.req.prim_hoplim", p.hop_limit);
            same!("infiniband.cm.req.prim_localacktout", p.local_ack_timeout);
            let (l, rm) = (Ipv6Addr::from(p.local_gid), Ipv6Addr::from(p.remote_gid));
            match (l.to_ipv4_mapped(), rm.to_ipv4_mapped()) {
                (Some(l4), Some(r4)) => {
                    same_text!("infiniband.cm.req.prim_localgid_ipv4", l4.to_string());
                    same_text!("infiniband.cm.req.prim_remotegid_ipv4", r4.to_string());
                }
                _ => {
                    same_text!("infiniband.cm.req.prim_localgid", l.to_string());
                    same_text!("infiniband.cm.req.prim_remotegid", rm.to_string());
                }
            }
            let ip = IpCmHeader::parse(r.private_data.as_bytes()).unwrap();
            same!("infiniband.cm.req.ip_cm.majv", 0u8);
            same!(
                "infiniband.cm.req.ip_cm.ipv",
                if ip.src.is_ipv4() { 4u8 } else { 6 }
            );
            same!("infiniband.cm.req.ip_cm.sport", ip.src_port);
            let (sf, df) = if ip.src.is_ipv4() {
                (
                    "infiniband.cm.req.ip_cm.sip4",
                    "infiniband.cm.req.ip_cm.dip4",
                )
            } else {
                (
                    "infiniband.cm.req.ip_cm.sip6",
                    "infiniband.cm.req.ip_cm.dip6",
                )
            };
            same_text!(sf, ip.src.to_string());
            same_text!(df, ip.dst.to_string());
            let user = bytes(row, "infiniband.cm.req.ip_cm.private").unwrap_or_default();
            if user[..] != r.private_data.as_bytes()[36..] {
                fail("IP CM consumer private data differs".into());
            }
        }
        CmMessage::Rep(r) => {
            same!("infiniband.cm.rep", r.local_comm_id);
            same!("infiniband.cm.rep.remotecommid", r.remote_comm_id);
            same!("infiniband.cm.rep.localqpn", r.local_qpn);
            same!("infiniband.cm.rep.startpsn", r.starting_psn);
            same!("infiniband.cm.rep.respres", r.responder_resources);
            same!("infiniband.cm.rep.initdepth", r.initiator_depth);
            same!("infiniband.cm.rep.tgtackdelay", r.target_ack_delay);
            same!("infiniband.cm.rep.rnrretrcount", r.rnr_retry_count);
            same!("infiniband.cm.rep.localcaguid", r.local_ca_guid);
            if bytes(row, "infiniband.cm.rep.private").as_deref() != Some(r.private_data.as_bytes())
            {
                fail("REP private data differs".into());
            }
        }
        CmMessage::Rtu(r) => {
            same!("infiniband.cm.rtu.localcommid", r.local_comm_id);
            same!("infiniband.cm.rtu.remotecommid", r.remote_comm_id);
        }
        CmMessage::Rej(r) => {
            same!("infiniband.cm.rej.localcommid", r.local_comm_id);
            same!("infiniband.cm.rej.remotecommid", r.remote_comm_id);
            same!("infiniband.cm.rej.msgrej", r.message_rejected as u8);
            same!("infiniband.cm.rej.rejinfolen", r.reject_info_length);
            same!("infiniband.cm.rej.reason", r.reason.code());
            if bytes(row, "infiniband.cm.rej.private").as_deref() != Some(r.private_data.as_bytes())
            {
                fail("REJ private data differs".into());
            }
        }
        CmMessage::Dreq(r) => {
            same!("infiniband.cm.dreq.localcommid", r.local_comm_id);
            same!("infiniband.cm.dreq.remotecommid", r.remote_comm_id);
            same!("infiniband.cm.req.remoteqpneecn", r.remote_qpn_eecn);
        }
        CmMessage::Drep(r) => {
            same!("infiniband.cm.drsp.localcommid", r.local_comm_id);
            same!("infiniband.cm.drsp.remotecommid", r.remote_comm_id);
        }
        // tshark 4.0 has no dissector for these three: the MAD header and
        // payload bytes above are all it shows.
        CmMessage::Mra(_) | CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => {}
    }
}

fn run(name: &str, a_ip: IpAddr, b_ip: IpAddr) {
    let sent = conversation(a_ip, b_ip);
    let kinds: Vec<&str> = sent
        .iter()
        .map(|s| CmMad::parse(&s.bytes).unwrap().message.name())
        .collect();
    assert_eq!(
        kinds,
        ["REQ", "MRA", "REP", "RTU", "DREQ", "DREP", "REQ", "REJ", "SIDR_REQ", "SIDR_REP"]
    );
    let frames: Vec<Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(i, s)| frame(s, 100 + i as u32, a_ip, b_ip))
        .collect();
    let path = pcap_path(name);
    tshark::write_pcap(&path, &frames);
    let rows = tshark_fields(&path);
    assert_eq!(rows.len(), sent.len(), "tshark saw a different frame count");
    let mut failures = Vec::new();
    for ((s, row), kind) in sent.iter().zip(&rows).zip(&kinds) {
        let frame = row["frame.number"].clone();
        check_row(s, row, &mut |what| {
            failures.push(format!("{name} frame {frame} ({kind}): {what}"))
        });
    }
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tshark_decodes_the_cm_mads_rxe_emits_over_ipv4() {
    if !tshark::present() {
        return;
    }
    run(
        "tshark-cm-v4",
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
    );
}

#[test]
fn tshark_decodes_the_cm_mads_rxe_emits_over_ipv6() {
    if !tshark::present() {
        return;
    }
    // Only loopback addresses, even in a file: both ends are ::1.
    run(
        "tshark-cm-v6",
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    );
}
