//! The one place the CM tests read capture files (through `rxe_pcap`).

use std::path::{Path, PathBuf};

use rxe_core::wire::frame;
use rxe_core::wire::TransportRepr;
use rxe_pcap::CaptureReader;

/// A UD packet to or from QP1 in a capture: a MAD and who sent it.
#[derive(Debug, Clone)]
pub struct CapturedMad {
    /// The frame number, counting from 1 as Wireshark does.
    pub frame: u64,
    pub src_qp: u32,
    pub dest_qp: u32,
    pub qkey: u32,
    pub pkey: u16,
    /// The UD payload (one 256-byte MAD).
    pub mad: Vec<u8>,
}

/// `integration/testdata/captures/NAME`.
pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../integration/testdata/captures")
        .join(name)
}

/// Every UD SEND to QP1 in the capture.
pub fn qp1_mads(path: &Path) -> Vec<CapturedMad> {
    let mut reader = CaptureReader::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(f) = reader.next_frame().expect("read frame") {
        let Ok(Some(roce)) = frame::decode(f.link_type, &f.data) else {
            continue;
        };
        let Ok(pkt) = TransportRepr::parse(roce.transport) else {
            continue;
        };
        let Some(deth) = pkt.repr.ext.deth else {
            continue;
        };
        if pkt.repr.bth.dest_qp != 1 {
            continue;
        }
        out.push(CapturedMad {
            frame: f.number,
            src_qp: deth.src_qp,
            dest_qp: pkt.repr.bth.dest_qp,
            qkey: deth.qkey,
            pkey: pkt.repr.bth.pkey,
            mad: pkt.payload.to_vec(),
        });
    }
    out
}
