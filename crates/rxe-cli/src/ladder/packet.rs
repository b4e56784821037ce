//! What the ladder analysis needs to know of one captured frame, taken from
//! its dissection: addresses, the BTH, the AETH/DETH/RETH keys, the CM MAD
//! header of a UD datagram to QP1, and whether it parsed and its ICRC held.
//! Kept apart from `Dissection` so that the analysis can be tested on
//! hand-written packet sequences.

use rxe_core::wire::dissect::Dissection;
use rxe_core::wire::{Opcode, Syndrome};

/// The management class of the Communication Manager (IBTA 13.4.4).
pub const MGMT_CLASS_CM: u8 = 0x07;

/// One captured frame as the analysis sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pkt {
    /// The frame number in the capture (1-based, as `rxe dissect` prints).
    pub frame: u64,
    /// Seconds since the first frame of the capture.
    pub time: f64,
    /// Source and destination address (IP, GID or LID) in text.
    pub src: String,
    pub dst: String,
    /// `None` when even the BTH could not be read.
    pub bth: Option<BthKeys>,
    /// Why the packet is bad (does not parse, ICRC/VCRC fails), if it is.
    pub problem: Option<String>,
}

/// The fields the transport story is told with.
#[derive(Debug, Clone, PartialEq)]
pub struct BthKeys {
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub fecn: bool,
    pub becn: bool,
    /// The AETH: syndrome and MSN.
    pub aeth: Option<(Syndrome, u32)>,
    /// The DETH's source QP (UD).
    pub src_qp: Option<u32>,
    /// The RETH's DMA length (READ requests, the first WRITE packet).
    pub dma_len: Option<u32>,
    pub payload_len: usize,
    /// For a UD datagram to QP1 carrying a MAD: (management class, attribute ID).
    pub mad: Option<(u8, u16)>,
    /// A digest of the transport bytes: identical copies (network
    /// duplicates) have the same one.
    pub digest: u64,
}

impl BthKeys {
    /// A BthKeys with only the BTH set (for tests and for packets whose
    /// extended headers do not parse).
    pub fn bare(opcode: u8, dest_qp: u32, psn: u32) -> BthKeys {
        BthKeys {
            opcode,
            dest_qp,
            psn,
            ack_req: false,
            fecn: false,
            becn: false,
            aeth: None,
            src_qp: None,
            dma_len: None,
            payload_len: 0,
            mad: None,
            digest: u64::from(opcode) << 32 | u64::from(psn),
        }
    }

    pub fn opcode(&self) -> Opcode {
        Opcode(self.opcode)
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The addresses of a frame, in text.
pub fn addresses(d: &Dissection<'_>) -> (String, String) {
    match (d.frame.addresses(), d.frame.lids()) {
        (Some((a, b)), _) => (a.to_string(), b.to_string()),
        (None, Some((a, b))) => (format!("LID {a}"), format!("LID {b}")),
        _ => ("?".into(), "?".into()),
    }
}

/// The analysis view of a dissected frame.
pub fn from_dissection(frame: u64, time: f64, d: &Dissection<'_>) -> Pkt {
    let (src, dst) = addresses(d);
    let t = d.frame.transport;
    let problems = d.problems();
    let problem = if problems.is_empty() {
        None
    } else {
        Some(
            problems
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    };
    let bth = match &d.packet {
        Ok(p) => {
            let r = &p.repr;
            let mad = match (r.ext.deth, p.payload) {
                (Some(_), pl) if r.bth.dest_qp == 1 && pl.len() >= 24 => {
                    Some((pl[1], u16::from_be_bytes([pl[16], pl[17]])))
                }
                _ => None,
            };
            Some(BthKeys {
                opcode: r.bth.opcode.0,
                dest_qp: r.bth.dest_qp,
                psn: r.bth.psn,
                ack_req: r.bth.ack_req,
                fecn: r.bth.fecn,
                becn: r.bth.becn,
                aeth: r.ext.aeth.map(|a| (a.syndrome, a.msn)),
                src_qp: r.ext.deth.map(|x| x.src_qp),
                dma_len: r.ext.reth.map(|x| x.dma_len),
                payload_len: p.payload.len(),
                mad,
                digest: fnv(t),
            })
        }
        // The BTH itself may still be readable when a later header is not.
        Err(_) if t.len() >= 12 => {
            let mut k = BthKeys::bare(
                t[0],
                u32::from_be_bytes([0, t[5], t[6], t[7]]),
                u32::from_be_bytes([0, t[9], t[10], t[11]]),
            );
            k.digest = fnv(t);
            Some(k)
        }
        Err(_) => None,
    };
    Pkt {
        frame,
        time,
        src,
        dst,
        bth,
        problem,
    }
}

/// A frame on its way to being RoCE whose outer layers are malformed.
pub fn malformed(frame: u64, time: f64, reason: String) -> Pkt {
    Pkt {
        frame,
        time,
        src: "?".into(),
        dst: "?".into(),
        bth: None,
        problem: Some(reason),
    }
}
