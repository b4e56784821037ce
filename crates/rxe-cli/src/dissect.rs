//! `rxe dissect`: read a capture and explain every RoCE packet in it, and
//! the management datagram in each UD packet to QP1 (`dissect_mad.rs`).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use rxe_core::wire::dissect::{dissect, Dissection, LayerView};
use rxe_pcap::CaptureReader;
use serde_json::{json, Map, Value};

// The MAD layer sits beside this file; main.rs lists only `dissect`.
#[path = "dissect_mad.rs"]
mod mad;

#[derive(clap::Args)]
pub struct Args {
    /// The capture file (pcap or pcapng).
    file: PathBuf,
    /// Show every header field by field: IBTA name, raw bits, meaning.
    #[arg(short, long, conflicts_with = "json")]
    verbose: bool,
    /// One JSON object per RoCE packet per line.
    #[arg(long)]
    json: bool,
    /// Only check: exit 1 if any RoCE packet is malformed, has a bad ICRC/VCRC,
    /// or carries a CM MAD (class 0x07, on QP1) that does not parse.
    #[arg(long)]
    check: bool,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let mut reader = CaptureReader::open(&args.file)?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let (mut roce, mut bad) = (0u64, 0u64);
    // Capture errors already name the file.
    while let Some(frame) = reader.next_frame()? {
        let n = frame.number;
        let d = match dissect(frame.link_type, &frame.data) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                roce += 1;
                bad += 1;
                if args.check {
                    writeln!(out, "frame {n}: {e}")?;
                } else if args.json {
                    writeln!(
                        out,
                        "{}",
                        json!({"frame": n, "error": e.to_string(), "reason": e.reason()})
                    )?;
                } else {
                    writeln!(out, "{n:>6} MALFORMED ({e})")?;
                }
                continue;
            }
        };
        roce += 1;
        let found = mad::find(&d);
        if !d.is_good() || found.as_ref().is_some_and(|m| m.is_malformed()) {
            bad += 1;
        }
        if args.check {
            for e in d.problems() {
                writeln!(out, "frame {n}: {e}")?;
            }
            if let Some(p) = found.as_ref().and_then(|m| m.problem()) {
                writeln!(out, "frame {n}: {p}")?;
            }
        } else if args.json {
            writeln!(out, "{}", to_json(n, &d, found.as_ref()))?;
        } else {
            match &found {
                Some(m) => writeln!(out, "{n:>6} {} | {}", d.summary(), mad::summary(m))?,
                None => writeln!(out, "{n:>6} {}", d.summary())?,
            }
            if args.verbose {
                write_tree(&mut out, &d, found.as_ref())?;
            }
        }
    }
    if args.check {
        writeln!(out, "{roce} RoCE packets, {bad} bad")?;
    }
    out.flush()?;
    Ok(if args.check && bad > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `-v` tree: each header, then each field with its bits and meaning.
fn write_tree(
    out: &mut impl Write,
    d: &Dissection<'_>,
    found: Option<&mad::FoundMad<'_>>,
) -> io::Result<()> {
    for l in d.layers() {
        write_layer(out, &l)?;
    }
    if let Ok(p) = &d.packet {
        let at = d.frame.transport.as_ptr() as usize - d.data.as_ptr() as usize + p.header_len;
        let shown = &p.payload[..p.payload.len().min(16)];
        if p.info.operation == rxe_core::wire::Operation::Cnp {
            // RoCEv2 Annex A17.9.3: the CNP's body is reserved.
            writeln!(
                out,
                "    reserved @{at}, {} bytes: {} (CNP: sent as zero, ignored on receive; \
                 QP {:#x} lowers its sending rate, DCQCN)",
                p.payload.len(),
                hex(shown),
                p.repr.bth.dest_qp
            )?;
        } else {
            writeln!(
                out,
                "    payload @{at}, {} bytes + {} pad: {}{}",
                p.payload.len(),
                p.repr.bth.pad_count,
                hex(shown),
                if p.payload.len() > shown.len() {
                    " ..."
                } else {
                    ""
                }
            )?;
        }
    }
    if let Some(m) = found {
        mad::write_tree(out, m)?;
    }
    let t = d.frame.transport;
    if let Some(carried) = d.carried_icrc() {
        let at = t.as_ptr() as usize - d.data.as_ptr() as usize + t.len() - 4;
        let verdict = match d.icrc {
            Ok(()) => "verified".to_string(),
            Err(e) => format!("BAD: {e}"),
        };
        writeln!(
            out,
            "    ICRC @{at}, 4 bytes {}: {carried:#010x} (CRC-32 over the invariant fields, least-significant byte first): {verdict}",
            hex(&t[t.len() - 4..])
        )?;
    }
    if let (Some(ib), Some(res)) = (d.frame.ib_packet, d.vcrc) {
        let v = &ib[ib.len() - 2..];
        let verdict = match res {
            Ok(()) => "verified".to_string(),
            Err(e) => format!("BAD: {e}"),
        };
        writeln!(
            out,
            "    VCRC: {} (CRC-16 over LRH through ICRC): {verdict}",
            hex(v)
        )?;
    }
    for e in d.problems() {
        writeln!(out, "    problem: {e}")?;
    }
    if let Some(p) = found.and_then(|m| m.problem()) {
        writeln!(out, "    problem: {p}")?;
    }
    Ok(())
}

fn write_layer(out: &mut impl Write, l: &LayerView<'_>) -> io::Result<()> {
    writeln!(
        out,
        "    {} @{}, {} bytes: {}",
        l.name,
        l.offset,
        l.bytes.len(),
        hex(l.bytes)
    )?;
    for f in &l.fields {
        let words = match &f.meaning {
            Some(m) => m.clone(),
            None => f.spec.doc.to_string(),
        };
        writeln!(
            out,
            "      {:<18} {:>3} bits  {:<34} = {:<14} {}",
            f.spec.name,
            f.spec.bits,
            f.bit_string(),
            f.raw,
            words
        )?;
    }
    Ok(())
}

pub(crate) fn field_json(raw: u128) -> Value {
    match u64::try_from(raw) {
        Ok(v) => Value::from(v),
        Err(_) => Value::from(format!("{raw:#x}")),
    }
}

/// One JSON object: the key numbers at the top, then every header.
fn to_json(frame: u64, d: &Dissection<'_>, found: Option<&mad::FoundMad<'_>>) -> Value {
    let mut headers = Map::new();
    for l in d.layers() {
        let mut fields = Map::new();
        for f in &l.fields {
            fields.insert(f.spec.key.to_string(), field_json(f.raw));
            if let Some(m) = &f.meaning {
                fields.insert(format!("{}_text", f.spec.key), Value::from(m.clone()));
            }
        }
        let mut key = l.key.to_string();
        let mut i = 2;
        while headers.contains_key(&key) {
            key = format!("{}{i}", l.key);
            i += 1;
        }
        headers.insert(key, Value::Object(fields));
    }
    let mut o = Map::new();
    o.insert("frame".into(), frame.into());
    o.insert("encapsulation".into(), d.frame.encapsulation.name().into());
    if let Some((s, t)) = d.frame.addresses() {
        o.insert("src".into(), s.to_string().into());
        o.insert("dst".into(), t.to_string().into());
    }
    let t = d.frame.transport;
    if t.len() >= 12 {
        o.insert("opcode".into(), t[0].into());
        o.insert(
            "opcode_name".into(),
            rxe_core::wire::Opcode(t[0]).to_string().into(),
        );
        o.insert(
            "dqpn".into(),
            (u32::from_be_bytes([0, t[5], t[6], t[7]])).into(),
        );
        o.insert(
            "psn".into(),
            (u32::from_be_bytes([0, t[9], t[10], t[11]])).into(),
        );
    }
    if let Ok(p) = &d.packet {
        o.insert("payload_len".into(), p.payload.len().into());
    }
    o.insert(
        "icrc".into(),
        if d.icrc.is_ok() { "ok" } else { "bad" }.into(),
    );
    if let Some(c) = d.carried_icrc() {
        o.insert("icrc_value".into(), c.into());
    }
    if let Some(v) = d.vcrc {
        o.insert("vcrc".into(), if v.is_ok() { "ok" } else { "bad" }.into());
    }
    let mut problems: Vec<Value> = d
        .problems()
        .iter()
        .map(|e| json!({"reason": e.reason(), "layer": e.layer.name(), "message": e.to_string()}))
        .collect();
    if let Some(m) = found {
        let v = mad::to_json(m);
        if let Some(e) = v.get("error") {
            problems.push(json!({"reason": e["reason"], "layer": "MAD", "message": e["message"]}));
        }
        o.insert("mad".into(), v);
    }
    if !problems.is_empty() {
        o.insert("errors".into(), Value::Array(problems));
    }
    o.insert("headers".into(), Value::Object(headers));
    Value::Object(o)
}
