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
