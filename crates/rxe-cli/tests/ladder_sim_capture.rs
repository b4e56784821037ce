//! Makes `integration/testdata/rxe/rxe_sim_faults.pcap`: rxe's own transport
//! engine (two `Endpoint`s in the simulator of `crates/rxe-core/tests/sim`,
//! used as is) through the faults the golden kernel captures lack — a lost
//! SEND packet (PSN sequence error NAK, go-back-N), SENDs with no receive
//! posted (RNR NAKs, the wait, the retry), a READ, an atomic whose ACK is
//! lost (timeout, duplicate atomic, replayed result) and a WRITE packet
//! corrupted on the way (bad ICRC, dropped, NAK). Every packet that reaches
//! a node is written, as a capture on the receiving side would show it
//! (a lost packet is not in it; the corrupted one is, with its bad ICRC).
//!
//! The run is deterministic (one seed, no random faults, simulated time):
//! the test remakes it, checks that it and the committed file both tell
//! that story, and notes (without failing: engine changes may move
//! timings) when the bytes differ;
//! `RXE_REGEN_LADDER=1 cargo test -p rxe-cli --test ladder_sim_capture`
//! rewrites the file.

#[path = "../../rxe-core/tests/sim/mod.rs"]
#[allow(clippy::all, unused_imports)]
mod sim;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rxe_core::transport::{AccessFlags, PathMtu, Psn, QpType, SendData, SendOp};
use rxe_core::wire::frame::{decode, LinkType};
use rxe_core::wire::{icrc, Opcode};
use rxe_pcap::PcapWriter;
use sim::*;

const PD: u32 = 1;
const SRC_VA: u64 = 0x1_0000_0000;
const RB_VA: u64 = 0x2_0000_0000;
const TGT_VA: u64 = 0x3_0000_0000;
const RD_VA: u64 = 0x4_0000_0000;

pub fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration/testdata/rxe/rxe_sim_faults.pcap")
}

/// The frames as (time, Ethernet frame).
struct Capture {
    frames: Vec<(Duration, Vec<u8>)>,
    corrupted: bool,
}

fn ethernet(ip: &[u8]) -> Vec<u8> {
    // Made-up MACs from the last byte of each IPv4 address, as rxe's tap does.
    let mut f = vec![
        0x02, 0, 0, 0, 0, ip[19], 0x02, 0, 0, 0, 0, ip[15], 0x08, 0x00,
    ];
    f.extend_from_slice(ip);
    f
}

/// Sends everything due, delivers everything due, until nothing is.
fn pump(sim: &mut Sim, cap: &mut Capture) {
    let mut buf = vec![0u8; 8192];
    for _ in 0..100_000 {
        let mut any = false;
        let now = sim.now;
        for i in 0..sim.nodes.len() {
            if sim.nodes[i].ep.poll_timeout().is_some_and(|t| t <= now) {
                sim.nodes[i].ep.handle_timeout(now);
                any = true;
            }
            loop {
                let node = &mut sim.nodes[i];
                let Some(t) = node.ep.poll_transmit(now, &mut node.mem, &mut buf) else {
                    break;
                };
                any = true;
                let tb = buf[..t.len].to_vec();
                sim.send_transport(i, &t.dest, t.src_qpn, &tb);
            }
        }
        sim.collect_all();
        while let Some(mut p) = sim.net.pop_due(sim.now) {
            any = true;
            // The middle packet of the first WRITE is corrupted on the way.
            if !cap.corrupted && p.info.from == 0 && p.info.opcode == Opcode(0x07) {
                cap.corrupted = true;
                let at = p.bytes.len() - 40;
                p.bytes[at] ^= 0x5a;
            }
            let at = Duration::from_nanos(sim.now.as_nanos());
            cap.frames.push((at, ethernet(&p.bytes)));
            let Ok(Some(frame)) = decode(LinkType::RawIp, &p.bytes) else {
                continue;
            };
            if icrc::verify(&frame.icrc_scope(), frame.transport).is_err() {
                continue;
            }
            let meta = recv_meta(frame.ip.expect("IPv4"));
            let node = &mut sim.nodes[p.to];
            node.ep
                .handle(sim.now, &meta, frame.transport, &mut node.mem);
        }
        sim.collect_all();
        if !any {
            return;
        }
    }
    panic!("the simulation does not settle");
}

/// Runs until idle, or until `until` if given.
fn run(sim: &mut Sim, cap: &mut Capture, until: Option<Duration>) {
    for _ in 0..100_000 {
        pump(sim, cap);
        let next = sim.next_event();
        let end = until.map(|u| rxe_core::transport::Instant::from_nanos(u.as_nanos() as u64));
        match (next, end) {
            (Some(n), Some(e)) if n > e => {
                sim.now = e;
                return;
            }
            (Some(n), _) => {
                if n > sim.now {
                    sim.now = n;
                }
            }
            (None, Some(e)) => {
                sim.now = e;
                return;
            }
            (None, None) => return,
        }
    }
    panic!("the simulation does not end");
}

fn make() -> Vec<(Duration, Vec<u8>)> {
    let mut sim = Sim::new(8, 2, Faults::none());
    let mut dropped: HashSet<(usize, u32, u8)> = HashSet::new();
    sim.set_filter(move |_, info| {
        // First copy only: the PSN 0x102 SEND packet, and the atomic's ACK.
        let key = (info.from, info.psn, info.opcode.0);
        let lose = (info.from == 0 && info.psn == 0x102 && info.opcode.0 <= 0x05)
            || (info.from == 1 && info.opcode == Opcode(0x12));
        if lose && dropped.insert(key) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    let mut o = ConnOpts::new(QpType::Rc);
    o.mtu = PathMtu::Mtu1024;
    o.psn_a = Psn::new(0x100);
    o.psn_b = Psn::new(0x900);
    o.timeout = 10; // 4.096 us * 2^10 = 4.2 ms
    o.min_rnr_timer = 10; // 0.32 ms (IBTA 9.7.5.2.8, the RNR timer table)
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let src = sim.nodes[0].reg(
        PD,
        SRC_VA,
        (0..16384u32).map(|i| i as u8).collect(),
        AccessFlags::empty(),
    );
    let rd = sim.nodes[0].reg(PD, RD_VA, vec![0; 8192], AccessFlags::LOCAL_WRITE);
    let rb = sim.nodes[1].reg(PD, RB_VA, vec![0; 16384], AccessFlags::LOCAL_WRITE);
    let tgt = sim.nodes[1].reg(
        PD,
        TGT_VA,
        vec![7; 8192],
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
    );
    let mut cap = Capture {
        frames: Vec::new(),
        corrupted: false,
    };
    let recv = |sim: &mut Sim, j: u64, len: u32| {
        let r = recv_wr(j, vec![sge(RB_VA + j * 2048, len, rb)]);
        sim.nodes[1].ep.post_recv(qb, r).expect("post_recv");
    };
    let send = |sim: &mut Sim, id: u64, op: SendOp, data: SendData| {
        sim.nodes[0]
            .ep
            .post_send(qa, send_wr(id, op, data))
            .expect("post_send");
    };
    // 1. Four 2 KiB SENDs (two packets each); PSN 0x102 is lost.
    for j in 0..4 {
        recv(&mut sim, j, 2048);
    }
    for j in 0..4 {
        send(
            &mut sim,
            j,
            SendOp::Send,
            SendData::Sges(vec![sge(SRC_VA, 2048, src)]),
        );
    }
    run(&mut sim, &mut cap, None);
    // 2. Two SENDs with no receive posted: RNR NAK; receives come 1.5 ms later.
    for j in 4..6 {
        send(
            &mut sim,
            j,
            SendOp::Send,
            SendData::Sges(vec![sge(SRC_VA, 512, src)]),
        );
    }
    let later = Duration::from_nanos(sim.now.as_nanos()) + Duration::from_micros(1500);
    run(&mut sim, &mut cap, Some(later));
    for j in 4..6 {
        recv(&mut sim, j, 2048);
    }
    run(&mut sim, &mut cap, None);
    // 3. A 3000-byte READ, then a FETCH_ADD whose ACK is lost.
    let read = SendOp::RdmaRead {
        remote_addr: TGT_VA,
        rkey: tgt.raw(),
    };
    send(
        &mut sim,
        6,
        read,
        SendData::Sges(vec![sge(RD_VA, 3000, rd)]),
    );
    let fa = SendOp::FetchAdd {
        remote_addr: TGT_VA + 4096,
        rkey: tgt.raw(),
        add: 5,
    };
    send(
        &mut sim,
        7,
        fa,
        SendData::Sges(vec![sge(RD_VA + 4096, 8, rd)]),
    );
    run(&mut sim, &mut cap, None);
    // 4. A 3 KiB WRITE whose middle packet is corrupted on the way.
    let write = SendOp::RdmaWrite {
        remote_addr: TGT_VA,
        rkey: tgt.raw(),
    };
    send(
        &mut sim,
        8,
        write,
        SendData::Sges(vec![sge(SRC_VA, 3072, src)]),
    );
    run(&mut sim, &mut cap, None);
    cap.frames
}

fn write_pcap(frames: &[(Duration, Vec<u8>)], path: &Path) {
    let mut w = PcapWriter::create_with_link_type(path, LinkType::Ethernet).expect("create pcap");
    for (t, f) in frames {
        // Simulated time starts at the Unix epoch; start the capture at a
        // fixed, plausible date instead (2026-12-01 00:00 UTC).
        w.write_frame(Duration::from_secs(1_796_083_200) + *t, f)
            .expect("write frame");
    }
    w.finish().expect("finish pcap");
}

/// What the scenario must show: (PSN sequence error NAKs, RNR NAKs, bad
/// ICRCs, READ responses, ATOMIC Acknowledges).
fn story(frames: &[(Duration, Vec<u8>)]) -> (usize, usize, usize, usize, usize) {
    use rxe_core::wire::dissect::dissect;
    use rxe_core::wire::{NakCode, Syndrome};
    let mut s = (0, 0, 0, 0, 0);
    for (_, f) in frames {
        let d = dissect(LinkType::Ethernet, f).unwrap().unwrap();
        if d.icrc.is_err() {
            s.2 += 1;
        }
        let Ok(p) = &d.packet else { continue };
        match p.repr.ext.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Nak(NakCode::PsnSequenceError)) => s.0 += 1,
            Some(Syndrome::RnrNak { .. }) => s.1 += 1,
            _ => {}
        }
        match p.repr.bth.opcode.0 {
            0x0d..=0x10 => s.3 += 1,
            0x12 => s.4 += 1,
            _ => {}
        }
    }
    s
}

#[test]
fn the_simulator_makes_the_committed_capture() {
    let frames = make();
    // Two NAKs (the lost SEND packet, the corrupted WRITE packet), RNR NAKs
    // until the receives come, one bad ICRC, three READ responses, one
    // ATOMIC Acknowledge (its first copy was lost).
    let (naks, rnr, bad, read, atomic) = story(&frames);
    assert_eq!((naks, bad, read, atomic), (2, 1, 3, 1), "{frames:?}");
    assert!(rnr >= 2, "{rnr} RNR NAKs");
    let tmp = std::env::temp_dir().join(format!("rxe-ladder-sim-{}.pcap", std::process::id()));
    write_pcap(&frames, &tmp);
    let made = std::fs::read(&tmp).unwrap();
    let _ = std::fs::remove_file(&tmp);
    if std::env::var_os("RXE_REGEN_LADDER").is_some() {
        std::fs::create_dir_all(committed().parent().unwrap()).unwrap();
        std::fs::write(committed(), &made).unwrap();
    }
    let have =
        std::fs::read(committed()).expect("the committed capture (RXE_REGEN_LADDER=1 makes it)");
    let mut f = Vec::new();
    let mut r = rxe_pcap::CaptureReader::open(&committed()).unwrap();
    while let Some(x) = r.next_frame().unwrap() {
        f.push((x.timestamp, x.data));
    }
    assert_eq!(
        story(&f),
        (naks, rnr, bad, read, atomic),
        "the committed capture tells another story"
    );
    // A change to the transport engine may change timings or packet order
    // without changing the story: that is not a failure here (the golden
    // file's own tests pin what they use), but say so.
    if have != made {
        eprintln!(
            "NOTE: {} differs from what the simulator makes now; RXE_REGEN_LADDER=1 rewrites it",
            committed().display()
        );
    }
}
