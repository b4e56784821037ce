//! The packet engine against every golden capture of kernel Soft-RoCE
//! traffic: every RoCE packet parses, its ICRC verifies, and its opcode,
//! dest QP and PSN equal what tshark 4.0 recorded (testdata/tshark/*.tsv).
//! Then single-byte corruption: any change to a covered byte is caught,
//! any change to a masked field is not.

use std::fs;
use std::path::{Path, PathBuf};

use rxe_core::wire::dissect::dissect;
use rxe_core::wire::frame::LinkType;
use rxe_pcap::CaptureReader;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

fn captures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(testdata().join("captures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 12,
        "expected the 12 golden captures, found {}",
        v.len()
    );
    v
}

/// (frame number, link type, bytes) of every frame.
fn frames(path: &Path) -> Vec<(u64, LinkType, Vec<u8>)> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        out.push((f.number, f.link_type, f.data));
    }
    out
}

/// tshark's (frame, opcode, dqpn, psn) rows for a capture.
fn tshark_rows(path: &Path) -> Vec<[u64; 4]> {
    let stem = path.file_stem().unwrap().to_str().unwrap();
    let text = fs::read_to_string(testdata().join("tshark").join(format!("{stem}.tsv"))).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("frame\topcode\tdqpn\tpsn"));
    lines
        .map(|l| {
            let v: Vec<u64> = l.split('\t').map(|x| x.parse().unwrap()).collect();
            [v[0], v[1], v[2], v[3]]
        })
        .collect()
}

#[test]
fn every_packet_parses_verifies_and_matches_tshark() {
    let mut total = 0;
    for path in captures() {
        let mut ours = Vec::new();
        for (n, link, data) in frames(&path) {
            let d = dissect(link, &data)
                .unwrap_or_else(|e| panic!("{}: frame {n}: {e}", path.display()))
                .unwrap_or_else(|| panic!("{}: frame {n} not found to be RoCE", path.display()));
            assert!(
                d.is_good(),
                "{}: frame {n}: {:?}",
                path.display(),
                d.problems()
            );
            let p = d.packet.unwrap();
            let b = p.repr.bth;
            ours.push([
                n,
                u64::from(b.opcode.0),
                u64::from(b.dest_qp),
                u64::from(b.psn),
            ]);
        }
        let theirs = tshark_rows(&path);
        assert_eq!(ours.len(), theirs.len(), "{}", path.display());
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(o, t, "{}: (frame, opcode, dqpn, psn)", path.display());
        }
        total += ours.len();
    }
    assert_eq!(total, 4144, "RoCE packets across the golden captures");
}

/// The first frame of each distinct opcode in each capture.
fn samples() -> Vec<(String, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for path in captures() {
        let mut seen = std::collections::BTreeSet::new();
        for (n, link, data) in frames(&path) {
            assert_eq!(link, LinkType::Ethernet);
            let op = data[42];
            if seen.insert(op) {
                out.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    n,
                    data,
                ));
            }
        }
    }
    out
}

fn verdict_good(data: &[u8]) -> bool {
    match dissect(LinkType::Ethernet, data) {
        Ok(Some(d)) => d.is_good(),
        _ => false,
    }
}

#[test]
fn any_changed_covered_byte_makes_the_verdict_bad() {
    let samples = samples();
    assert!(samples.len() >= 15, "opcode samples: {}", samples.len());
    for (file, n, data) in samples {
        assert!(verdict_good(&data));
        // Ethernet 14 + IPv4 20 + UDP 8: the BTH starts at 42 in these captures.
        for at in 42..data.len() {
            if at == 42 + 4 {
                continue; // BTH byte 4 (FECN, BECN, resv6) is masked
            }
            for x in [0x01u8, 0x80, 0xff] {
                let mut d = data.clone();
                d[at] ^= x;
                assert!(
                    !verdict_good(&d),
                    "{file} frame {n}: byte {at} ^ {x:#x} went unnoticed"
                );
            }
        }
        // Covered IP fields: the Identification and the addresses.
        for at in [18usize, 19, 26, 29, 30, 33] {
            let mut d = data.clone();
            d[at] ^= 0x10;
            assert!(!verdict_good(&d), "{file} frame {n}: IP byte {at}");
        }
    }
}

#[test]
fn masked_fields_leave_the_icrc_good() {
    for (file, n, data) in samples() {
        // IPv4 TOS (15), TTL (22), header checksum (24, 25); UDP checksum
        // (40, 41); BTH byte 4 (46).
        for at in [15usize, 22, 24, 25, 40, 41, 46] {
            for v in [0x00u8, 0x5a, 0xff] {
                let mut d = data.clone();
                d[at] = v;
                assert!(
                    verdict_good(&d),
                    "{file} frame {n}: masked byte {at} = {v:#x} broke the verdict"
                );
            }
        }
    }
}
