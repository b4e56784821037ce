//! The port's window (`transport::port_window`) over the simulator: many
//! RC QPs that each stay inside their own window still overflow a finite
//! receive queue together, and the port's window, engaged by that loss,
//! keeps them inside it; a
//! READ larger than the whole window still goes; a QP that fails gives
//! its share back.

mod sim;

use std::time::Duration;

use rxe_core::transport::{
    AccessFlags, Counter, Key, QpType, SendData, SendOp, WcStatus, WorkQueue,
};
use sim::*;

const PD: u32 = 1;
/// 16 packets at the simulator's MTU of 1024.
const MSG: u32 = 16 * 1024;
/// WRITEs each QP keeps outstanding: 64 PSNs, half its own window.
const DEPTH: u64 = 4;
const WRITES: u64 = 48;
const QPS: usize = 16;
/// The receiver's queue: 1 Gb/s, and room for what arrives in 1.5 ms of
/// it, about 180 packets of 1 KiB (with headers).
const RATE_MBPS: f64 = 1000.0;
const ROOM: Duration = Duration::from_micros(1500);
/// The sender's port window, under that room (ACKs take some of it on
/// their way back, elsewhere; here the room is the data's).
const WINDOW: u32 = 128;

struct Qp {
    qp: u32,
    src: Key,
    src_va: u64,
    tgt: Key,
    tgt_va: u64,
    posted: u64,
}

fn sim_with_receive_queue(seed: u64) -> Sim {
    let faults = Faults {
        bottleneck: Some(Bottleneck {
            to: 1,
            rate_mbps: RATE_MBPS,
            mark_above: Duration::MAX,
            drop_above: ROOM,
        }),
        ..Faults::none()
    };
    let mut sim = Sim::new(seed, 2, faults);
    sim.limits.max_steps = 20_000_000;
    sim
}

fn qps(sim: &mut Sim) -> Vec<Qp> {
    (0..QPS)
        .map(|i| {
            let (qp, _) = connect(sim, 0, 1, &ConnOpts::new(QpType::Rc));
            let src_va = 0x1_0000_0000 * (i as u64 + 1);
            let tgt_va = 0x10_0000_0000 * (i as u64 + 1);
            let data = sim.rng.bytes((MSG as u64 * WRITES) as usize);
            let src = sim.nodes[0].reg(PD, src_va, data, AccessFlags::empty());
            let tgt = sim.nodes[1].reg(
                PD,
                tgt_va,
                vec![0; (MSG as u64 * WRITES) as usize],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            );
            Qp {
                qp,
                src,
                src_va,
                tgt,
                tgt_va,
                posted: 0,
            }
        })
        .collect()
}

fn top_up(sim: &mut Sim, q: &mut Qp) {
    let done = sim.nodes[0].count_wcs(q.qp, WorkQueue::Send) as u64;
    while q.posted < WRITES && q.posted - done < DEPTH {
        let off = q.posted * u64::from(MSG);
        let wr = send_wr(
            q.posted,
            SendOp::RdmaWrite {
                remote_addr: q.tgt_va + off,
                rkey: q.tgt.raw(),
            },
            SendData::Sges(vec![sge(q.src_va + off, MSG, q.src)]),
        );
        sim.nodes[0].ep.post_send(q.qp, wr).expect("post_send");
        q.posted += 1;
    }
}

/// What a run saw: the most PSNs the sender had in flight after any
/// step, the same from the first time it had no more than the window on,
/// and the packets the receive queue had dropped when the first WRITE
/// completed (the first burst's).
struct AfterFirst {
    most_in_flight: u32,
    most_once_inside: u32,
    lost_in_first_burst: u64,
}

/// Runs every QP's WRITEs to the end, keeping `DEPTH` outstanding on each.
fn run_all(sim: &mut Sim, qps: &mut [Qp]) -> AfterFirst {
    let (mut most, mut most_inside, mut inside) = (0, 0, false);
    let mut first = None;
    loop {
        for q in qps.iter_mut() {
            top_up(sim, q);
        }
        let all = qps
            .iter()
            .all(|q| sim.nodes[0].count_wcs(q.qp, WorkQueue::Send) as u64 == WRITES);
        if all {
            break;
        }
        if first.is_none()
            && qps
                .iter()
                .any(|q| sim.nodes[0].count_wcs(q.qp, WorkQueue::Send) > 0)
        {
            first = Some(sim.net.stats.lost_queue);
        }
        // One step at a time (the closure sees the state after each).
        let before: Vec<usize> = qps
            .iter()
            .map(|q| sim.nodes[0].count_wcs(q.qp, WorkQueue::Send))
            .collect();
        sim.run_until("a WRITE completes", |s| {
            let u = s.nodes[0].ep.port_unacked();
            most = most.max(u);
            inside |= u <= WINDOW;
            if inside {
                most_inside = most_inside.max(u);
            }
            qps.iter()
                .zip(&before)
                .any(|(q, b)| s.nodes[0].count_wcs(q.qp, WorkQueue::Send) > *b)
        });
    }
    AfterFirst {
        most_in_flight: most,
        most_once_inside: most_inside,
        lost_in_first_burst: first.unwrap_or(0),
    }
}

fn check(sim: &Sim, qps: &[Qp]) {
    for q in qps {
        let wcs = sim.nodes[0].wcs_of(q.qp, WorkQueue::Send);
        assert_eq!(wcs.len() as u64, WRITES);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(
            sim.nodes[1].bytes(q.tgt),
            sim.nodes[0].bytes(q.src),
            "the target holds the source's bytes"
        );
    }
}

fn counter(sim: &Sim, node: usize, c: Counter) -> u64 {
    sim.nodes[node].ep.counters().get(c)
}

/// 16 QPs with 64 PSNs each in flight overflow the receiver's queue
/// (about 180 packets). Without a port window they keep overflowing it
/// and going back to resend. With one of 128 PSNs, engaged by the first
/// burst's loss, little more is lost after it (a quarter at most), the
/// sender keeps at most 128 PSNs in flight once it is inside the window,
/// and every byte
/// arrives.
#[test]
fn the_port_window_keeps_many_qps_inside_a_finite_receive_queue() {
    let seed = 1;
    let mut sim = sim_with_receive_queue(seed);
    let mut q = qps(&mut sim);
    let a = run_all(&mut sim, &mut q);
    check(&sim, &q);
    let lost = sim.net.stats.lost_queue;
    let lost_after_without = lost - a.lost_in_first_burst;
    assert!(
        a.most_in_flight > WINDOW,
        "without a window: {} in flight",
        a.most_in_flight
    );
    assert!(
        lost > 2 * a.lost_in_first_burst,
        "without a window the losses go on: {lost}"
    );
    assert_eq!(counter(&sim, 0, Counter::PortWindowWaits), 0);

    let mut sim = sim_with_receive_queue(seed);
    sim.nodes[0].ep.set_port_window(Some(WINDOW));
    let mut q = qps(&mut sim);
    let a = run_all(&mut sim, &mut q);
    check(&sim, &q);
    assert!(
        a.lost_in_first_burst > 0,
        "the first burst overflows the queue"
    );
    // What is still lost after it is the first burst's go-back-N
    // resends, which the window lets through (they fill gaps).
    let lost_after = sim.net.stats.lost_queue - a.lost_in_first_burst;
    assert!(
        lost_after * 4 < lost_after_without,
        "after the first burst {lost_after} lost, {lost_after_without} without a window"
    );
    assert!(
        a.most_once_inside <= WINDOW,
        "{} in flight over a window of {WINDOW}",
        a.most_once_inside
    );
    assert!(counter(&sim, 0, Counter::PortWindowWaits) > 0);
    assert_eq!(sim.nodes[0].ep.port_unacked(), 0, "all acknowledged");
}

/// Told to hold always, the window holds from the first packet: the
/// first burst loses nothing either.
#[test]
fn held_always_the_port_window_loses_nothing_at_all() {
    let mut sim = sim_with_receive_queue(5);
    sim.nodes[0].ep.set_port_window(Some(WINDOW));
    sim.nodes[0].ep.set_port_window_always(true);
    let mut q = qps(&mut sim);
    run_all(&mut sim, &mut q);
    check(&sim, &q);
    assert_eq!(sim.net.stats.lost_queue, 0, "{:?}", sim.net.stats);
    assert_eq!(counter(&sim, 1, Counter::OutOfSeqRequest), 0);
    assert_eq!(counter(&sim, 1, Counter::DuplicateRequest), 0);
}

/// A WRITE of `len` bytes from 0x7000_0000 (`src`) to 0x8000_0000 (`tgt`).
fn write_at_8(id: u64, len: u32, src: Key, tgt: Key) -> rxe_core::transport::SendWr {
    send_wr(
        id,
        SendOp::RdmaWrite {
            remote_addr: 0x8000_0000,
            rkey: tgt.raw(),
        },
        SendData::Sges(vec![sge(0x7000_0000, len, src)]),
    )
}

/// A lossless simulator whose node 0 holds a port window of 16 PSNs
/// always, and two RC QPs from node 0 to node 1.
fn two_qps_behind_a_small_window(seed: u64) -> (Sim, u32, u32) {
    let mut sim = Sim::new(seed, 2, Faults::none());
    sim.nodes[0].ep.set_port_window(Some(16));
    sim.nodes[0].ep.set_port_window_always(true);
    let o = ConnOpts::new(QpType::Rc);
    let (a, _) = connect(&mut sim, 0, 1, &o);
    let (b, _) = connect(&mut sim, 0, 1, &o);
    (sim, a, b)
}

/// A READ whose response is four times the whole window still goes (the
/// window only holds new packets while it is full), and a WRITE on
/// another QP waits for it, then completes.
#[test]
fn a_read_larger_than_the_window_goes_and_others_wait_for_it() {
    let (mut sim, reader, writer) = two_qps_behind_a_small_window(3);
    let len = 64 * 1024u32;
    let remote = sim.rng.bytes(len as usize);
    let far = sim.nodes[1].reg(PD, 0x5000_0000, remote, AccessFlags::REMOTE_READ);
    let sink = sim.nodes[0].reg(
        PD,
        0x6000_0000,
        vec![0; len as usize],
        AccessFlags::LOCAL_WRITE,
    );
    let src = sim.nodes[0].reg(PD, 0x7000_0000, vec![7; 4096], AccessFlags::empty());
    let tgt = sim.nodes[1].reg(
        PD,
        0x8000_0000,
        vec![0; 4096],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let read = send_wr(
        1,
        SendOp::RdmaRead {
            remote_addr: 0x5000_0000,
            rkey: far.raw(),
        },
        SendData::Sges(vec![sge(0x6000_0000, len, sink)]),
    );
    sim.nodes[0].ep.post_send(reader, read).expect("post READ");
    let write = write_at_8(2, 4096, src, tgt);
    sim.nodes[0]
        .ep
        .post_send(writer, write)
        .expect("post WRITE");
    sim.settle_now();
    assert_eq!(sim.nodes[0].ep.port_unacked(), 64, "the READ's 64 PSNs");
    assert_eq!(
        counter(&sim, 0, Counter::PortWindowWaits),
        1,
        "the WRITE waits"
    );
    sim.run_until("both complete", |s| {
        s.nodes[0].count_wcs(reader, WorkQueue::Send) == 1
            && s.nodes[0].count_wcs(writer, WorkQueue::Send) == 1
    });
    let r = &sim.nodes[0].wcs_of(reader, WorkQueue::Send)[0];
    let w = &sim.nodes[0].wcs_of(writer, WorkQueue::Send)[0];
    assert_eq!((r.status, w.status), (WcStatus::Success, WcStatus::Success));
    assert_eq!(sim.nodes[0].bytes(sink), sim.nodes[1].bytes(far));
    assert_eq!(sim.nodes[1].bytes(tgt), &[7; 4096][..]);
}

/// A QP moved to ERR with PSNs in flight gives its share back at once, so
/// the QPs waiting behind it send.
#[test]
fn a_failed_qp_gives_its_share_back() {
    let (mut sim, doomed, waiting) = two_qps_behind_a_small_window(4);
    let src = sim.nodes[0].reg(PD, 0x7000_0000, vec![7; 32 * 1024], AccessFlags::empty());
    let tgt = sim.nodes[1].reg(
        PD,
        0x8000_0000,
        vec![0; 32 * 1024],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let write = |id, len| write_at_8(id, len, src, tgt);
    // Lost on the way: nothing acknowledges the doomed QP's 16 PSNs.
    sim.set_filter(|_, p| {
        if p.from == 0 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    sim.nodes[0]
        .ep
        .post_send(doomed, write(1, 16 * 1024))
        .expect("post");
    sim.settle_now();
    sim.nodes[0]
        .ep
        .post_send(waiting, write(2, 1024))
        .expect("post");
    sim.settle_now();
    assert_eq!(sim.nodes[0].ep.port_unacked(), 16);
    assert_eq!(counter(&sim, 0, Counter::PortWindowWaits), 1);
    sim.set_filter(|_, _| Verdict::Pass);
    to_error(&mut sim, 0, doomed);
    assert_eq!(
        sim.nodes[0].ep.port_unacked(),
        0,
        "the ERR QP counts nothing"
    );
    sim.run_until("the waiting WRITE completes", |s| {
        s.nodes[0].count_wcs(waiting, WorkQueue::Send) == 1
    });
    let w = &sim.nodes[0].wcs_of(waiting, WorkQueue::Send)[0];
    assert_eq!(w.status, WcStatus::Success);
}

/// Each destination has its own window: a peer that acknowledges nothing
/// (hostile, or dead) fills only its own, and a QP to another peer sends
/// and completes at once while that peer's other QP waits.
#[test]
fn a_peer_that_never_acknowledges_holds_only_its_own_window() {
    let mut sim = Sim::new(6, 3, Faults::none());
    sim.nodes[0].ep.set_port_window(Some(16));
    sim.nodes[0].ep.set_port_window_always(true);
    let o = ConnOpts::new(QpType::Rc);
    let (silent_a, _) = connect(&mut sim, 0, 1, &o);
    let (silent_b, _) = connect(&mut sim, 0, 1, &o);
    let (other, _) = connect(&mut sim, 0, 2, &o);
    let src = sim.nodes[0].reg(PD, 0x7000_0000, vec![5; 16 * 1024], AccessFlags::empty());
    let tgt1 = sim.nodes[1].reg(
        PD,
        0x8000_0000,
        vec![0; 16 * 1024],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let tgt2 = sim.nodes[2].reg(
        PD,
        0x8000_0000,
        vec![0; 4096],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let write = |id, len, tgt| write_at_8(id, len, src, tgt);
    // Node 1 answers nothing: what node 0 sends it is lost.
    sim.set_filter(|_, p| {
        if p.from == 0 && p.to == 1 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    sim.nodes[0]
        .ep
        .post_send(silent_a, write(1, 16 * 1024, tgt1))
        .expect("post");
    sim.settle_now();
    sim.nodes[0]
        .ep
        .post_send(silent_b, write(2, 1024, tgt1))
        .expect("post");
    sim.nodes[0]
        .ep
        .post_send(other, write(3, 4096, tgt2))
        .expect("post");
    sim.run_until("the WRITE to the other peer completes", |s| {
        s.nodes[0].count_wcs(other, WorkQueue::Send) == 1
    });
    let w = &sim.nodes[0].wcs_of(other, WorkQueue::Send)[0];
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(sim.nodes[2].bytes(tgt2), &[5; 4096][..]);
    assert_eq!(
        counter(&sim, 0, Counter::PortWindowWaits),
        1,
        "only the silent peer's second QP waits"
    );
    assert_eq!(sim.nodes[0].count_wcs(silent_b, WorkQueue::Send), 0);
}
