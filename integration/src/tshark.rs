//! tshark from tests: whether it is there, a pcap of built frames, and its
//! field output as one map per frame.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One frame's fields, by tshark field name; several occurrences are
/// joined with commas.
pub type Row = HashMap<&'static str, String>;

/// Whether to run: true if tshark runs; false (after saying so) if it does
/// not and RXE_SKIP_TSHARK=1; otherwise a failure that says what to do.
pub fn present() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    if std::env::var("RXE_SKIP_TSHARK").as_deref() == Ok("1") {
        eprintln!("tshark not found on PATH: skipped because RXE_SKIP_TSHARK=1");
        return false;
    }
    panic!(
        "tshark is not on PATH: install it (apt-get install tshark; scripts/setup.sh does) \
         or set RXE_SKIP_TSHARK=1 to skip this test"
    );
}

/// A classic pcap file (Ethernet), one frame a second from 1,700,000,000 s.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = rxe_pcap::PcapWriter::create(path).expect("create pcap");
    for (i, f) in frames.iter().enumerate() {
        let at = std::time::Duration::from_secs(1_700_000_000 + i as u64);
        w.write_frame(at, f).expect("write frame");
    }
    w.finish().expect("finish pcap");
}

/// A pcap path of this process's own in `dir` (a test's
/// `CARGO_TARGET_TMPDIR`).
pub fn pcap_path(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(format!("{name}-{}.pcap", std::process::id()))
}

/// Runs tshark over `path` with `options` (preferences, `-Y` filters ...)
/// and returns the `fields` of every frame.
pub fn fields(path: &Path, options: &[&str], fields: &[&'static str]) -> Vec<Row> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(path).args(options).args([
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark prints UTF-8")
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), fields.len(), "tshark line: {line}");
            fields
                .iter()
                .zip(cols)
                .map(|(f, v)| (*f, v.to_string()))
                .collect()
        })
        .collect()
}

/// The first value of a numeric field: decimal, or hex with 0x; `None` if
/// tshark shows none.
pub fn num(row: &Row, field: &str) -> Option<u64> {
    let v = row[field].split(',').next().unwrap_or("").trim();
    if v.is_empty() {
        return None;
    }
    Some(match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("{field}: bad hex {v}")),
        None => v
            .parse()
            .unwrap_or_else(|_| panic!("{field}: not a number: {v}")),
    })
}

/// The first value of a bytes field, as bytes.
pub fn bytes(row: &Row, field: &str) -> Option<Vec<u8>> {
    let v: String = row[field]
        .split(',')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .collect();
    if v.is_empty() {
        return None;
    }
    Some(
        (0..v.len() / 2 * 2)
            .step_by(2)
            .map(|i| u8::from_str_radix(&v[i..i + 2], 16).expect("hex digits"))
            .collect(),
    )
}

/// A boolean field.
pub fn flag(row: &Row, field: &str) -> bool {
    matches!(
        row[field].split(',').next().unwrap_or(""),
        "1" | "True" | "true"
    )
}
