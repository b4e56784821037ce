//! `rxe ladder`: a capture drawn as an RDMA ladder diagram — one lane per
//! endpoint (address and QPN), one arrow per RoCE packet — with the
//! transport's story marked on it (ACK coverage, NAKs and go-back-N, RNR
//! waits, retransmissions, duplicates, READ and atomic responses, CM) and a
//! byte map of every packet. The output is one self-contained HTML file.
//!
//! `packet` takes what the analysis needs from each dissected frame,
//! `analyze` tells the story as a model, `bytemap` explains each frame's
//! bytes, `render` embeds both in the page (`page.html`, `page.css`,
//! `page.js`), which draws them.

pub mod analyze;
pub mod bytemap;
pub mod model;
pub mod packet;
pub mod render;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use rxe_core::wire::dissect::dissect;
use rxe_pcap::CaptureReader;
use serde_json::Value;

#[derive(clap::Args)]
pub struct Args {
    /// The capture file (pcap or pcapng).
    file: PathBuf,
    /// Where to write the page (default: the capture's name with `.html`).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// A capture read and explained: the packets for the analysis and each
/// one's byte map, in capture order.
pub struct Loaded {
    pub pkts: Vec<packet::Pkt>,
    pub maps: Vec<Value>,
    pub schemas: bytemap::Schemas,
    /// Frames in the file that are not RoCE.
    pub other: u64,
}

/// Reads every frame of a capture and keeps the RoCE ones.
pub fn load(path: &std::path::Path) -> Result<Loaded> {
    let mut reader = CaptureReader::open(path)?;
    let mut out = Loaded {
        pkts: Vec::new(),
        maps: Vec::new(),
        schemas: bytemap::Schemas::default(),
        other: 0,
    };
    let mut t0 = None;
    while let Some(frame) = reader.next_frame()? {
        let t0 = *t0.get_or_insert(frame.timestamp);
        let time = frame.timestamp.saturating_sub(t0).as_secs_f64();
        match dissect(frame.link_type, &frame.data) {
            Ok(Some(d)) => {
                out.pkts
                    .push(packet::from_dissection(frame.number, time, &d));
                out.maps.push(bytemap::bytemap(&d, &mut out.schemas));
            }
            Ok(None) => out.other += 1,
            Err(e) => {
                out.pkts
                    .push(packet::malformed(frame.number, time, e.to_string()));
                out.maps.push(Value::Null);
            }
        }
    }
    Ok(out)
}

/// Draws the capture `file` as the page `out`; returns the model the page
/// shows (for a summary line).
pub fn write_page(file: &std::path::Path, out: &std::path::Path) -> Result<model::Model> {
    let loaded = load(file)?;
    let model = analyze::analyze(&loaded.pkts);
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let html = render::page(&name, &model, loaded);
    std::fs::write(out, html).with_context(|| format!("writing {}", out.display()))?;
    Ok(model)
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| args.file.with_extension("html"));
    let model = write_page(&args.file, &out)?;
    println!(
        "{}: {} RoCE packets, {} lanes, {} retransmissions, {} NAKs -> {}",
        args.file.display(),
        model.arrows.len(),
        model.lanes.len(),
        model.summary.retransmissions,
        model.summary.naks.values().sum::<usize>(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}
