//! Replays the seeds of the CM MAD and C-ABI conversion fuzz targets
//! through their harnesses (`fuzz/harness/cm_mad.rs`,
//! `fuzz/harness/ibverbs_conv.rs`, the code the cargo-fuzz targets run),
//! so that `cargo test` exercises them: the seeds built here (every CM MAD
//! of the golden captures, and a zero MAD, under each of the ten control
//! values; the conversion harness's own seeds), the committed copies in
//! `fuzz/seeds/`, whatever a local fuzz run left in `fuzz/corpus/`, and the
//! regressions in `fuzz/regressions/`.
//!
//! With `RXE_FUZZ_SEED_DIR=dir` the seeds are written to `dir/cm_mad` and
//! `dir/ibverbs_conv` (how `fuzz/seeds/` was made, see docs/security.md).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use rxe_core::wire::{frame, TransportRepr};
use rxe_pcap::CaptureReader;

#[path = "../../fuzz/harness/cm_mad.rs"]
mod cm_mad;
#[path = "../../fuzz/harness/ibverbs_conv.rs"]
mod ibverbs_conv;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    v.sort();
    v
}

/// The committed seeds, a local run's corpus and the regressions of
/// `target`.
fn stored_inputs(target: &str) -> Vec<Vec<u8>> {
    ["seeds", "corpus", "regressions"]
        .iter()
        .flat_map(|d| files_in(&fuzz_dir().join(d).join(target)))
        .map(|f| std::fs::read(f).unwrap())
        .collect()
}

fn write_seeds(target: &str, seeds: &[(String, Vec<u8>)]) {
    if let Some(dir) = std::env::var_os("RXE_FUZZ_SEED_DIR") {
        let dir = PathBuf::from(dir).join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, s) in seeds {
            std::fs::write(dir.join(name), s).unwrap();
        }
    }
}

/// The UD payload of every packet to or from QP1 in the golden captures.
fn captured_mads() -> Vec<(String, Vec<u8>)> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/captures");
    let mut out = Vec::new();
    for f in files_in(&data) {
        let stem = f.file_stem().unwrap().to_string_lossy().to_string();
        let mut r = CaptureReader::open(&f).expect("capture");
        while let Some(fr) = r.next_frame().expect("frame") {
            let Ok(Some(roce)) = frame::decode(fr.link_type, &fr.data) else {
                continue;
            };
            let Ok(p) = TransportRepr::parse(roce.transport) else {
                continue;
            };
            if p.repr.ext.deth.is_some() && p.repr.bth.dest_qp == 1 {
                out.push((format!("{stem}_{}", fr.number), p.payload.to_vec()));
            }
        }
    }
    out
}

#[test]
fn cm_mad_seeds_decode_every_message_and_round_trip() {
    let mads = captured_mads();
    assert!(
        mads.len() >= 5,
        "only {} CM MADs in the captures",
        mads.len()
    );
    let mut seeds = Vec::new();
    for (name, mad) in mads.iter().chain([&("zero".to_string(), vec![0; 256])]) {
        for ctl in 0..10u8 {
            let mut s = vec![ctl];
            s.extend_from_slice(mad);
            seeds.push((format!("{name}_{ctl}"), s));
        }
    }
    write_seeds("cm_mad", &seeds);
    let mut mad_ok = [false; 9];
    let mut message_ok = [false; 9];
    let mut ip_cm = false;
    let stored = stored_inputs("cm_mad");
    for input in seeds.iter().map(|(_, s)| s).chain(&stored) {
        let o = cm_mad::run(input);
        if let Some(id) = o.mad {
            let i = cm_mad::ATTRS.iter().position(|&a| a == id).unwrap();
            mad_ok[i] = true;
        }
        for (m, ok) in message_ok.iter_mut().zip(o.messages) {
            *m |= ok;
        }
        ip_cm |= o.ip_cm;
    }
    // Cut short anywhere (shorter than the header too), and empty: no
    // panic (the fuzzer's first find was the harness's own slicing of an
    // input shorter than the header).
    for (_, s) in seeds.iter().take(20) {
        for cut in [0, 1, 2, 24, 25, 200, 256] {
            cm_mad::run(&s[..cut.min(s.len())]);
        }
    }
    // The seeds reach every decoder with something it accepts (a harness
    // whose inputs were all refused would pass vacuously).
    assert_eq!(mad_ok, [true; 9], "whole MADs decoded, by attribute");
    assert_eq!(message_ok, [true; 9], "data areas decoded, by message");
    assert!(ip_cm, "no IP CM header decoded");
    eprintln!(
        "{} seeds and {} stored inputs replayed",
        seeds.len(),
        stored.len()
    );
}

#[test]
fn ibverbs_conv_seeds_reach_every_conversion() {
    let seeds: Vec<(String, Vec<u8>)> = ibverbs_conv::seeds()
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("seed_{i:03}"), s))
        .collect();
    write_seeds("ibverbs_conv", &seeds);
    let stored = stored_inputs("ibverbs_conv");
    let mut all = ibverbs_conv::Outcome::default();
    for input in seeds.iter().map(|(_, s)| s).chain(&stored) {
        let o = ibverbs_conv::run(input);
        all.send_ok |= o.send_ok;
        all.send_refused |= o.send_refused;
        all.attr_ok |= o.attr_ok;
        all.attr_refused |= o.attr_refused;
        all.wc |= o.wc;
    }
    assert_eq!(
        all,
        ibverbs_conv::Outcome {
            send_ok: true,
            send_refused: true,
            attr_ok: true,
            attr_refused: true,
            wc: true
        }
    );
    // Truncated and empty inputs read as zeros: still no panic.
    for s in &seeds {
        for cut in [0, 1, 5, s.1.len() / 2] {
            ibverbs_conv::run(&s.1[..cut.min(s.1.len())]);
        }
    }
    eprintln!(
        "{} seeds and {} stored inputs replayed",
        seeds.len(),
        stored.len()
    );
}
