//! rxe-pcap's `CaptureReader` against the golden captures of kernel Soft-RoCE traffic and what
//! tshark 4.0 recorded about them (testdata/README.md; testdata/regen-tshark.sh remakes the
//! tshark files). No tshark is needed to run these tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rxe_pcap::{CaptureFormat, CaptureReader, Frame, LinkType};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// The captures in testdata/captures, sorted by name.
fn captures() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(testdata().join("captures"))
        .expect("testdata/captures")
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        })
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no captures in testdata/captures");
    paths
}

fn file_name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// Rows of a tab-separated file with a header line, as numbers after the first column.
fn read_tsv(path: &Path, header: &str) -> Vec<Vec<String>> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(header), "{}: header", path.display());
    lines
        .map(|line| line.split('\t').map(str::to_owned).collect())
        .collect()
}

/// frames.tsv: capture name -> (frames, frames tshark decodes as InfiniBand).
fn frame_counts() -> BTreeMap<String, (u64, u64)> {
    read_tsv(
        &testdata().join("frames.tsv"),
        "capture\tframes\tinfiniband",
    )
    .into_iter()
    .map(|row| {
        assert_eq!(row.len(), 3, "frames.tsv row {row:?}");
        (
            row[0].clone(),
            (row[1].parse().unwrap(), row[2].parse().unwrap()),
        )
    })
    .collect()
}

fn read_frames(path: &Path) -> Vec<Frame> {
    CaptureReader::open(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The BTH fields (opcode, destination QP, PSN) of an Ethernet / IPv4 / UDP 4791 frame,
/// decoded by hand here so that this test does not depend on rxe-core.
fn bth_fields(data: &[u8]) -> Option<(u8, u32, u32)> {
    if data.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(data.get(14)? & 0x0f) * 4;
    if *data.get(14 + 9)? != 17 {
        return None;
    }
    let udp = 14 + ihl;
    if data.get(udp + 2..udp + 4)? != 4791u16.to_be_bytes() {
        return None;
    }
    let bth = data.get(udp + 8..udp + 20)?;
    let be24 = |b: &[u8]| u32::from_be_bytes([0, b[0], b[1], b[2]]);
    Some((bth[0], be24(&bth[5..8]), be24(&bth[9..12]) & 0x00ff_ffff))
}

#[test]
fn every_capture_has_tshark_golden_data() {
    let counts = frame_counts();
    let names: Vec<String> = captures().iter().map(|p| file_name(p).to_owned()).collect();
    assert_eq!(
        counts.keys().cloned().collect::<Vec<_>>(),
        names,
        "frames.tsv and testdata/captures list different captures: run regen-tshark.sh"
    );
    for path in captures() {
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let tsv = testdata().join("tshark").join(format!("{stem}.tsv"));
        assert!(tsv.exists(), "{} is missing", tsv.display());
    }
}

#[test]
fn frame_counts_match_tshark() {
    let counts = frame_counts();
    for path in captures() {
        let name = file_name(&path);
        let (expected, _) = counts[name];
        let frames = read_frames(&path);
        assert_eq!(frames.len() as u64, expected, "{name}: frame count");

        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(frame.number, i as u64 + 1, "{name}: numbering");
            // capinfos: every golden capture is Ethernet, snapshot length 262144, no frame cut.
            assert_eq!(
                frame.link_type,
                LinkType::Ethernet,
                "{name} frame {}",
                frame.number
            );
            assert_eq!(
                frame.orig_len as usize,
                frame.data.len(),
                "{name} frame {}",
                frame.number
            );
        }
        // Captured on 2026-11-29, in order.
        assert!(
            frames.windows(2).all(|w| w[0].timestamp <= w[1].timestamp),
            "{name}"
        );
        assert!(
            frames.iter().all(|f| f.timestamp.as_secs() > 1_790_000_000),
            "{name}"
        );
    }
}

/// The frames the reader returns are the ones tshark numbered: their BTH fields agree.
#[test]
fn frame_contents_match_tshark_bth_fields() {
    let counts = frame_counts();
    for path in captures() {
        let name = file_name(&path);
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let rows = read_tsv(
            &testdata().join("tshark").join(format!("{stem}.tsv")),
            "frame\topcode\tdqpn\tpsn",
        );
        assert_eq!(
            rows.len() as u64,
            counts[name].1,
            "{name}: InfiniBand frames"
        );

        let frames = read_frames(&path);
        for row in rows {
            let n: usize = row[0].parse().unwrap();
            let expected: (u8, u32, u32) = (
                row[1].parse().unwrap(),
                row[2].parse().unwrap(),
                row[3].parse().unwrap(),
            );
            let frame = &frames[n - 1];
            assert_eq!(frame.number as usize, n);
            assert_eq!(bth_fields(&frame.data), Some(expected), "{name} frame {n}");
        }
    }
}

/// The same capture rewritten by editcap as pcapng (default microsecond timestamps, with a
/// frame comment) and as nanosecond pcap reads as the same frames.
#[test]
fn converted_captures_read_the_same() {
    let original = read_frames(&testdata().join("captures/rping.pcap"));
    for (file, format) in [
        ("rping.pcapng", CaptureFormat::PcapNg),
        ("rping.nsec.pcap", CaptureFormat::Pcap),
    ] {
        let path = testdata().join("converted").join(file);
        assert_eq!(
            CaptureReader::open(&path).unwrap().format(),
            format,
            "{file}"
        );
        assert_eq!(read_frames(&path), original, "{file}");
    }
}
