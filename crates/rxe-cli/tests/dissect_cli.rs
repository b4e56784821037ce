//! `rxe dissect` as a user runs it: output forms, exit codes, bad files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn captures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration/testdata/captures")
}

fn rxe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rxe"))
        .args(args)
        .output()
        .unwrap()
}

fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rxe-cli-test-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

fn cap(name: &str) -> String {
    captures().join(name).to_string_lossy().into_owned()
}

#[test]
fn one_line_per_roce_packet() {
    let o = rxe(&["dissect", &cap("rc_pingpong.pcap")]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 534);
    assert!(
        lines[0].contains("RC SEND First") && lines[0].contains("psn=6539717"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("icrc=ok"));
    assert!(
        lines[4].contains("RC Acknowledge") && lines[4].contains("ACK msn=1"),
        "{}",
        lines[4]
    );
}

#[test]
fn verbose_explains_fields() {
    let o = rxe(&["dissect", "-v", &cap("ud_pingpong.pcap")]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    for needle in [
        "BTH @42",
        "DETH @54",
        "Q_Key",
        "SrcQP",
        "OpCode",
        "UD SEND Only",
        "ICRC @",
        "verified",
        "10.99.0.",
    ] {
        assert!(out.contains(needle), "missing {needle:?}");
    }
}

#[test]
fn json_has_the_required_keys() {
    let o = rxe(&["dissect", "--json", &cap("atomic_bw.pcap")]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let mut n = 0u64;
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        n += 1;
        assert_eq!(v["frame"], n);
        for k in ["opcode", "dqpn", "psn"] {
            assert!(v[k].is_u64(), "{k} in {line}");
        }
        assert_eq!(v["icrc"], "ok");
        assert!(v["headers"]["bth"]["psn"].is_u64());
        let op = v["opcode"].as_u64().unwrap();
        match op {
            0x14 => assert!(v["headers"]["atomic_eth"]["rkey"].is_u64()),
            0x12 => assert!(
                v["headers"]["atomic_ack_eth"].is_object() && v["headers"]["aeth"].is_object()
            ),
            _ => panic!("unexpected opcode {op}"),
        }
    }
    assert_eq!(n, 200);
}

#[test]
fn check_passes_good_and_names_bad_packets() {
    let good = cap("write_lat.pcap");
    let o = rxe(&["dissect", "--check", &good]);
    assert_eq!(o.status.code(), Some(0));

    // Corrupt one payload byte of frame 3.
    let mut bytes = std::fs::read(&good).unwrap();
    let mut off = 24;
    for _ in 0..2 {
        let incl = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    bytes[off + 16 + 60] ^= 0x40;
    let bad = tmp("bad.pcap", &bytes);
    let o = rxe(&["dissect", "--check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("frame 3: ICRC: mismatch"), "{out}");
    assert!(out.contains("1 bad"), "{out}");
}

#[test]
fn files_that_are_not_captures_fail_cleanly() {
    let not = tmp(
        "not.pcap",
        b"this is not a capture file at all, not even close",
    );
    let empty = tmp("empty.pcap", b"");
    let whole = std::fs::read(cap("rping.pcap")).unwrap();
    let cut = tmp("cut.pcap", &whole[..whole.len() - 7]);
    for (p, what) in [(&not, "not a"), (&empty, "empty"), (&cut, "truncated")] {
        let o = rxe(&["dissect", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{what}");
        let err = String::from_utf8(o.stderr).unwrap().to_lowercase();
        assert!(err.contains(what), "{what}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = rxe(&["dissect", "/nonexistent/x.pcap"]);
    assert_eq!(o.status.code(), Some(2));
}

// ---- CM MADs (UD SEND Only to QP1) ----
//
// The expected values below were read once from `tshark -V -r rping.pcap`
// (TShark 4.0.17) for frames 1 (REQ), 2 (REP), 3 (RTU), 124 (DREQ) and
// 125 (DREP). Two REQ fields are checked against the bytes instead: tshark
// 4.0 prints Primary Flow Label 0x0026d and Primary Packet Rate 0x26, but
// the message word at byte 88 is `26 d4 20 00`, which the IBTA layout reads
// as a 20-bit flow label 0x26d42, 6 reserved bits and a rate of 0 (see
// docs/rdma-cm.md).

fn rping_frame(n: u64) -> Vec<u8> {
    let mut r = rxe_pcap::CaptureReader::open(&captures().join("rping.pcap")).unwrap();
    while let Some(f) = r.next_frame().unwrap() {
        if f.number == n {
            return f.data.to_vec();
        }
    }
    panic!("no frame {n}");
}

fn json_lines(args: &[&str]) -> Vec<serde_json::Value> {
    let o = rxe(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn cm_summary_lines_match_tshark() {
    let o = rxe(&["dissect", &cap("rping.pcap")]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let line = |n: u64| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("no line for frame {n}"))
            .to_string()
    };
    let want = [
        (
            1,
            "| CM REQ comm_id=0x12f277cf svc=0x0000000001061c06 (RDMA_PS_TCP port 7174) \
             qpn=0x24 psn=0xec53de from 10.99.0.3:38724 to 10.99.0.2",
        ),
        (
            2,
            "| CM REP comm_id=0xcfc4f2c8 remote=0x12f277cf qpn=0x28 psn=0x266e4",
        ),
        (3, "| CM RTU comm_id=0x12f277cf remote=0xcfc4f2c8"),
        (
            124,
            "| CM DREQ comm_id=0x12f277cf remote=0xcfc4f2c8 remote_qpn=0x28",
        ),
        (125, "| CM DREP comm_id=0xcfc4f2c8 remote=0x12f277cf"),
    ];
    for (n, tail) in want {
        let l = line(n);
        assert!(l.ends_with(tail), "frame {n}: {l}");
        assert!(l.contains("UD SEND Only qp=0x1 ") && l.contains("qkey=0x80010000"));
    }
    // Only those five frames carry a MAD.
    assert_eq!(out.lines().filter(|l| l.contains("| CM ")).count(), 5);
}

#[test]
fn cm_json_fields_match_tshark() {
    let v = json_lines(&["dissect", "--json", &cap("rping.pcap")]);
    let mad = |n: u64| v[(n - 1) as usize]["mad"].clone();
    for (n, attr, name) in [
        (1, 0x10, "REQ"),
        (2, 0x13, "REP"),
        (3, 0x14, "RTU"),
        (124, 0x15, "DREQ"),
        (125, 0x16, "DREP"),
    ] {
        let m = mad(n);
        let h = &m["header"];
        // tshark: Base Version 0x01, Management Class 0x07, Class Version
        // 0x02, Method Send() (0x03), Status 0, Transaction ID
        // 0x00000002cf77f212 in all five.
        assert_eq!(h["base_version"], 1, "{n}");
        assert_eq!(h["mgmt_class"], 7);
        assert_eq!(h["class_version"], 2);
        assert_eq!(h["method"], 3);
        assert_eq!(h["status"], 0);
        assert_eq!(h["transaction_id"], 0x0000_0002_cf77_f212u64);
        assert_eq!(h["attribute_id"], attr);
        assert_eq!(m["message"], name);
        assert_eq!(m["offset"], 62);
        assert_eq!(m["len"], 256);
        assert!(m.get("error").is_none());
    }
    for n in [4u64, 5, 123] {
        assert!(v[(n - 1) as usize].get("mad").is_none(), "frame {n}");
    }
    let f = |n: u64, k: &str| mad(n)["fields"][k].clone();
    // Frame 1, CM ConnectRequest.
    for (k, want) in [
        ("local_comm_id", 0x12f2_77cfu64),
        ("service_id", 0x0000_0000_0106_1c06),
        ("local_ca_guid", 0x5054_00ff_fe99_0003),
        ("local_qkey", 0),
        ("local_qpn", 0x24),
        ("responder_resources", 1),
        ("local_eecn", 0),
        ("initiator_depth", 1),
        ("remote_eecn", 0),
        ("remote_cm_response_timeout", 0x14),
        ("transport_service_type", 0),
        ("end_to_end_flow_control", 0),
        ("starting_psn", 0xec53de),
        ("local_cm_response_timeout", 0x14),
        ("retry_count", 7),
        ("pkey", 0xffff),
        ("path_mtu", 3),
        ("rdc_exists", 0),
        ("rnr_retry_count", 7),
        ("max_cm_retries", 0xf),
        ("srq", 0),
        ("extended_transport_type", 0),
        ("primary_local_lid", 65535),
        ("primary_remote_lid", 65535),
        ("primary_traffic_class", 0),
        ("primary_hop_limit", 0x40),
        ("primary_sl", 0),
        ("primary_subnet_local", 0),
        ("primary_local_ack_timeout", 0x13),
        ("alternate_local_lid", 0),
        ("alternate_remote_lid", 0),
        ("alternate_flow_label", 0),
        ("alternate_packet_rate", 0),
        // Not tshark's 0x26d and 0x26: the bytes (checked below).
        ("primary_flow_label", 0x26d42),
        ("primary_packet_rate", 0),
    ] {
        assert_eq!(f(1, k), want, "REQ {k}");
    }
    assert_eq!(f(1, "primary_local_gid_text"), "::ffff:10.99.0.3");
    assert_eq!(f(1, "primary_remote_gid_text"), "::ffff:10.99.0.2");
    assert_eq!(f(1, "path_mtu_text"), "1024 bytes");
    assert_eq!(f(1, "service_id_text"), "IP CM RDMA_PS_TCP port 7174");
    // tshark's IP CM Private Data: version 0.0, IP version 4, source port
    // 0x9744, 10.99.0.3 to 10.99.0.2.
    let ip = &mad(1)["ip_cm"];
    assert_eq!(ip["version"], 0);
    assert_eq!(ip["ip_version"], 4);
    assert_eq!(ip["src_port"], 0x9744);
    assert_eq!(ip["src"], "10.99.0.3");
    assert_eq!(ip["dst"], "10.99.0.2");
    // The flow label and rate from the bytes: message byte 88 (MAD byte
    // 112, frame byte 62 + 112).
    let b = rping_frame(1);
    assert_eq!(&b[62 + 24 + 88..62 + 24 + 92], &[0x26, 0xd4, 0x20, 0x00]);
    let word = u32::from_be_bytes(b[174..178].try_into().unwrap());
    assert_eq!(word >> 12, 0x26d42);
    assert_eq!(word & 0x3f, 0);
    // Frame 2, CM ConnectReply.
    for (k, want) in [
        ("local_comm_id", 0xcfc4_f2c8u64),
        ("remote_comm_id", 0x12f2_77cf),
        ("local_qkey", 0),
        ("local_qpn", 0x28),
        ("local_eecn", 0),
        ("starting_psn", 0x0266e4),
        ("responder_resources", 1),
        ("initiator_depth", 1),
        ("target_ack_delay", 0x0f),
        ("failover_accepted", 0),
        ("end_to_end_flow_control", 0),
        ("rnr_retry_count", 7),
        ("srq", 0),
        ("local_ca_guid", 0x5054_00ff_fe99_0002),
    ] {
        assert_eq!(f(2, k), want, "REP {k}");
    }
    // Frames 3 (RTU), 124 (DREQ), 125 (DREP).
    assert_eq!(f(3, "local_comm_id"), 0x12f2_77cfu64);
    assert_eq!(f(3, "remote_comm_id"), 0xcfc4_f2c8u64);
    assert_eq!(f(124, "local_comm_id"), 0x12f2_77cfu64);
    assert_eq!(f(124, "remote_comm_id"), 0xcfc4_f2c8u64);
    assert_eq!(f(124, "remote_qpn_eecn"), 0x28);
    assert_eq!(f(125, "local_comm_id"), 0xcfc4_f2c8u64);
    assert_eq!(f(125, "remote_comm_id"), 0x12f2_77cfu64);
    // tshark shows every PrivateData but the REQ's as zeros.
    for n in [2u64, 3, 124, 125] {
        let pd = mad(n)["private_data"].as_str().unwrap().to_string();
        assert!(pd.chars().all(|c| c == '0') && !pd.is_empty(), "{n}");
    }
}

#[test]
fn cm_verbose_explains_header_fields_and_private_data() {
    let o = rxe(&["dissect", "-v", &cap("rping.pcap")]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let frame1: String = out
        .split("\n     2 ")
        .next()
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    for needle in [
        "MAD header @62, 24 bytes: 01 07 02 03",
        "CM REQ @86, 232 bytes",
        "PrivateData @226, 92 bytes",
        "IP CM header (36 bytes",
        "source port              38724",
        "source address           10.99.0.3",
        "destination address      10.99.0.2",
        "consumer private data    all zero",
    ] {
        assert!(frame1.contains(needle), "missing {needle:?}");
    }
    // Every field of the header and of the REQ, each with its bits.
    let field = |name: &str| {
        frame1
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} line"))
            .to_string()
    };
    assert!(field("MgmtClass").contains("Communication Management"));
    assert!(field("TransactionID").contains("0x00000002cf77f212"));
    assert!(field("ServiceID").contains("IP CM RDMA_PS_TCP port 7174"));
    let fl = field("Primary Flow Label");
    assert!(
        fl.contains("20 bits") && fl.contains("00100110110101000010") && fl.contains("159042"),
        "{fl}"
    );
    assert!(field("Path Packet Payload MTU").contains("1024 bytes"));
    assert!(field("Primary Local Port GID").contains("::ffff:10.99.0.3"));
    assert!(field("Alternate Local ACK Timeout").contains("5 bits"));
    assert!(out.contains("CM DREP @86, 232 bytes"));
}

/// A UD SEND Only to QP1 carrying `mad`, with a good ICRC.
fn qp1_frame(mad: &[u8]) -> Vec<u8> {
    use rxe_core::wire::build::{emit_roce_v2_ethernet, EthernetAddrs, RoceV2Ip};
    use rxe_core::wire::{BthRepr, DethRepr, ExtReprs, Opcode, TransportRepr};
    let bth = BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 1,
        ack_req: false,
        psn: 9,
    };
    let ext = ExtReprs {
        deth: Some(DethRepr {
            qkey: 0x8001_0000,
            src_qp: 1,
        }),
        ..ExtReprs::default()
    };
    let t = TransportRepr::new(bth, ext, mad.len());
    let eth = EthernetAddrs {
        src: [2, 0, 0, 0, 0, 1],
        dst: [2, 0, 0, 0, 0, 2],
    };
    let ip = RoceV2Ip::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        0xc001,
    );
    let mut buf = vec![0u8; 2048];
    let n = emit_roce_v2_ethernet(&eth, &ip, &t, mad, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn write_pcap(name: &str, frames: &[Vec<u8>]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rxe-cli-test-{}-{name}", std::process::id()));
    let mut w = rxe_pcap::PcapWriter::create(&p).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_frame(std::time::Duration::from_secs(1 + i as u64), f)
            .unwrap();
    }
    w.finish().unwrap();
    p
}

#[test]
fn check_flags_a_cm_mad_that_does_not_parse() {
    let good = rping_frame(3); // the RTU
    let rtu = &good[62..62 + 256];
    // Frame 1: the RTU as is. Frame 2: its attribute ID made 0x0033.
    // Frame 3: cut to 200 bytes. Frame 4: a class other than the CM (SA,
    // 0x03), which is not ours to judge. Frame 5: 10 bytes.
    let mut unknown = rtu.to_vec();
    unknown[16..18].copy_from_slice(&0x0033u16.to_be_bytes());
    let mut sa = rtu.to_vec();
    sa[1] = 0x03;
    let frames = vec![
        qp1_frame(rtu),
        qp1_frame(&unknown),
        qp1_frame(&rtu[..200]),
        qp1_frame(&sa),
        qp1_frame(&rtu[..10]),
    ];
    let p = write_pcap("mads.pcap", &frames);
    let path = p.to_str().unwrap();
    let o = rxe(&["dissect", "--check", path]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(!out.contains("ICRC"), "{out}");
    assert!(
        !out.contains("frame 1:") && !out.contains("frame 4:"),
        "{out}"
    );
    assert!(
        out.contains("frame 2: MAD: MAD header: attribute 0x0033"),
        "{out}"
    );
    assert!(
        out.contains("frame 3: MAD: CM MAD of 200 bytes, a MAD is 256"),
        "{out}"
    );
    assert!(out.contains("frame 5: MAD: 10 bytes on QP1"), "{out}");
    assert!(out.contains("5 RoCE packets, 3 bad"), "{out}");

    let o = rxe(&["dissect", path]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("| CM RTU comm_id=0x12f277cf remote=0xcfc4f2c8"));
    assert!(lines[1].contains("| MAD MALFORMED (MAD header: attribute 0x0033"));
    assert!(lines[3].ends_with("| MAD class=0x03 method=0x03 attr=0x0014"));

    let v = json_lines(&["dissect", "--json", path]);
    assert!(v[0].get("errors").is_none());
    assert_eq!(v[1]["mad"]["error"]["reason"], "unknown_attribute");
    assert_eq!(v[1]["errors"][0]["layer"], "MAD");
    assert_eq!(v[2]["mad"]["error"]["reason"], "bad_length");
    assert!(v[3]["mad"].get("error").is_none());
    let _ = std::fs::remove_file(&p);
}
