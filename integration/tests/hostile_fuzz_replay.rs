//! Replays the endpoint fuzzer's seed corpus through the fuzzing harness
//! (`fuzz/harness/endpoint.rs`, the same code the cargo-fuzz target runs),
//! so that `cargo test` exercises it: every RoCE packet of the golden
//! captures, in capture order, aimed at the harness's RC, UC and UD QPs,
//! 32 packets a seed; then any corpus a local fuzz run left in
//! `fuzz/corpus/endpoint` and the regressions in `fuzz/regressions/endpoint`.
//!
//! With `RXE_FUZZ_SEED_DIR=dir` the seeds are also written there (the
//! fuzzer's starting corpus, see docs/security.md).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use rxe_core::wire::frame;
use rxe_pcap::CaptureReader;

#[path = "../../fuzz/harness/endpoint.rs"]
mod endpoint_harness;

use endpoint_harness::{seed_from_packets, Harness};

const PER_SEED: usize = 32;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// The transport bytes (BTH .. ICRC) of every RoCE packet of a capture.
fn transports(path: &Path) -> Vec<Vec<u8>> {
    let mut r = CaptureReader::open(path).expect("capture");
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().expect("frame") {
        if let Ok(Some(roce)) = frame::decode(f.link_type, &f.data) {
            out.push(roce.transport.to_vec());
        }
    }
    out
}

/// The seeds of every golden capture: (name, bytes).
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> = ["captures", "converted"]
        .iter()
        .flat_map(|d| std::fs::read_dir(testdata().join(d)).expect("testdata"))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let stem = f.file_name().unwrap().to_string_lossy().replace('.', "_");
        let pkts = transports(&f);
        for (i, chunk) in pkts.chunks(PER_SEED).enumerate() {
            let seed = seed_from_packets(chunk.iter().map(Vec::as_slice));
            out.push((format!("{stem}_{i:04}"), seed));
        }
    }
    out
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    v.sort();
    v
}

#[test]
fn seed_corpus_replays_through_the_endpoint_harness() {
    let seeds = seeds();
    assert!(seeds.len() > 50, "only {} seeds", seeds.len());
    if let Some(dir) = std::env::var_os("RXE_FUZZ_SEED_DIR") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, s) in &seeds {
            std::fs::write(dir.join(name), s).unwrap();
        }
    }
    let (mut handled, mut sent, mut writes) = (0, 0, 0);
    for (_, s) in &seeds {
        let mut h = Harness::new();
        h.run(s);
        handled += h.handled;
        sent += h.transmitted;
        writes += h.mem.writes;
    }
    // The seeds reach the QPs: packets answered and memory written (a
    // harness that dropped everything would pass the invariants vacuously).
    eprintln!(
        "{} seeds: {handled} packets, {sent} sent, {writes} writes",
        seeds.len()
    );
    assert!(handled >= 4_000, "{handled} packets handled");
    assert!(sent > 300, "{sent} packets transmitted");
    assert!(writes > 200, "{writes} memory writes");

    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut extra = files_in(&fuzz.join("corpus/endpoint"));
    extra.extend(files_in(&fuzz.join("regressions/endpoint")));
    for f in &extra {
        let data = std::fs::read(f).unwrap();
        Harness::new().run(&data);
    }
    eprintln!("{} corpus and regression inputs replayed", extra.len());
}

/// A transport packet for a harness record (the harness rewrites QPN,
/// P_Key and PSN as the control byte says).
fn uc_send(opcode: u8, psn: u32, len: usize) -> Vec<u8> {
    use rxe_core::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};
    let bth = BthRepr {
        opcode: Opcode(opcode),
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0,
        ack_req: false,
        psn,
    };
    let t = TransportRepr::new(bth, ExtReprs::default(), len);
    let mut b = vec![0; t.buffer_len().unwrap()];
    t.emit(&mut b, &vec![7; len]).unwrap();
    b
}

/// Found with the harness: a UC packet that ends a message in progress (a
/// MIDDLE after a gap, a MIDDLE shorter than the MTU) was counted twice in
/// `drop_uc_incomplete`, once for the message and once for itself. The
/// harness's one-packet-one-drop invariant now holds for both.
#[test]
fn uc_message_ended_by_a_bad_packet_counts_one_drop() {
    // Control bits: the UC QP (2), P_Key fixed (0x04), harness PSN (0x08).
    let (uc, pkey, psn) = (0x02, 0x04, 0x08);
    let first = uc_send(0x20, 0, 1024);
    // A MIDDLE far ahead (its own PSN): the FIRST's message is lost.
    let mut h = Harness::new();
    h.step(uc | pkey | psn, &first, 0);
    h.step(uc | pkey, &uc_send(0x21, 0x30, 1024), 0);
    // A MIDDLE at the right PSN but shorter than the MTU.
    let mut h = Harness::new();
    h.step(uc | pkey | psn, &first, 0);
    h.step(uc | pkey | psn, &uc_send(0x21, 0, 100), 0);
}
