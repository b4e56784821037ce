//! Shared receive queues end to end over the simulated faulty network
//! (tests/sim): several RC QPs on one node take their receives from one
//! SRQ while two peers send to them through loss, duplication, reordering
//! and corruption. `RXE_SIM_SEEDS=n` runs more seeds, `RXE_SIM_SEED=s` one.

mod sim;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rxe_core::transport::{
    AccessFlags, AsyncEvent, Counter, EndpointError, Key, PathMtu, QpInit, QpState, QpType,
    SendData, SendOp, SrqInit, WcOpcode, WcStatus, WorkCompletion, WorkQueue,
};
use sim::*;

const SEEDS: u64 = 1000;
/// The QPs' protection domain: every region is registered in it.
const QP_PD: u32 = 1;
/// The SRQ's: another one. Receive buffers are checked in the PD of the QP
/// that takes them (libibverbs allows an SRQ and its QPs in different PDs).
const SRQ_PD: u32 = 2;
const RB_VA: u64 = 0x10_0000_0000;
const TGT_VA: u64 = 0x20_0000_0000;
const PAT_RB: u8 = 0xa5;
const PAT_TGT: u8 = 0x3c;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    /// Takes a receive (at its last packet), writes to the target.
    WriteImm,
    /// Takes no receive.
    Write,
}

/// One message a peer sends to the SRQ node.
#[derive(Debug, Clone)]
struct Msg {
    kind: Kind,
    data: Vec<u8>,
    imm: u32,
    /// Where a WRITE lands in the target region (its own slot).
    tgt_off: usize,
}

/// One connection: a QP on the SRQ node (0) and its peer's QP.
#[derive(Debug)]
struct Conn {
    q0: u32,
    peer: usize,
    qp: u32,
    msgs: Vec<Msg>,
}

/// A message length up to `3 * mtu`, biased towards the packet edges.
fn msg_len(rng: &mut Rng, mtu: usize) -> usize {
    match rng.below(8) {
        0 => 0,
        1 => rng.usize(1, 8),
        2 => mtu,
        3 => mtu + 1,
        4 => 3 * mtu,
        _ => rng.usize(1, 3 * mtu),
    }
}

/// A scatter list over the slot `[off, off + len)` of the receive region:
/// up to 3 pieces in random order; returns the SGEs' region ranges too.
fn slot_sges(
    rng: &mut Rng,
    key: Key,
    off: usize,
    len: usize,
) -> (Vec<rxe_core::transport::Sge>, Vec<(usize, usize)>) {
    let k = rng.usize(1, 3);
    let mut cuts: Vec<usize> = (1..k).map(|_| rng.usize(0, len)).collect();
    cuts.push(0);
    cuts.push(len);
    cuts.sort_unstable();
    let mut ranges: Vec<(usize, usize)> = cuts
        .windows(2)
        .filter(|w| w[1] > w[0])
        .map(|w| (off + w[0], w[1] - w[0]))
        .collect();
    rng.shuffle(&mut ranges);
    let sges = ranges
        .iter()
        .map(|&(o, l)| sge(RB_VA + o as u64, l as u32, key))
        .collect();
    (sges, ranges)
}

/// What the SRQ scenario saw over all seeds.
#[derive(Debug, Default)]
struct Coverage {
    seeds: u64,
    rnr_naks: u64,
    dup_requests: u64,
    out_of_seq: u64,
    limit_events: u64,
    /// Seeds in which the QPs' receives interleaved in the SRQ.
    interleaved: u64,
    bad_icrc: u64,
}

fn srq_seed(seed: u64, cov: &mut Coverage) {
    let mut rng = Rng::new(seed);
    let faults = if rng.chance(0.9) {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mtu_v = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024, PathMtu::Mtu4096]);
    let mtu = mtu_v.bytes() as usize;
    let mut o = ConnOpts::new(QpType::Rc);
    o.mtu = mtu_v;
    o.timeout = rng.range(10, 14) as u8;
    o.rnr_retry = 7; // without end: the SRQ is refilled eventually
    o.min_rnr_timer = *rng.pick(&[1u8, 4, 8, 12]);
    o.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut sim = Sim::new(seed, 3, faults);
    let slot = 3 * mtu;

    // The SRQ and the QPs on node 0 that share it; QP i talks to peer
    // 1 + i % 2, so both peers are used and peer 1 may have two QPs.
    let nqps = rng.usize(2, 4);
    let srqn = sim.nodes[0]
        .ep
        .create_srq(SrqInit {
            max_wr: 4096,
            max_sge: 3,
            ..SrqInit::new(SRQ_PD)
        })
        .expect("create_srq");
    let mut conns = Vec::new();
    for i in 0..nqps {
        let peer = 1 + i % 2;
        let q0 = sim.nodes[0]
            .ep
            .create_qp(QpInit {
                srq: Some(srqn),
                ..QpInit::new(QpType::Rc, QP_PD)
            })
            .expect("create_qp with SRQ");
        let qp = sim.nodes[peer]
            .ep
            .create_qp(QpInit::new(QpType::Rc, QP_PD))
            .expect("create_qp");
        let (pa, pb) = (random_psn(&mut rng), random_psn(&mut rng));
        bring_up(&mut sim, 0, q0, peer, qp, &o, pa, pb, 0);
        bring_up(&mut sim, peer, qp, 0, q0, &o, pb, pa, 0);
        conns.push(Conn {
            q0,
            peer,
            qp,
            msgs: Vec::new(),
        });
    }

    // The workload: every message has its own slot in the WRITE target.
    let mut tgt_slots = 0usize;
    for (ci, c) in conns.iter_mut().enumerate() {
        for k in 0..rng.usize(1, 24) {
            // At least one message takes a receive, so the SRQ runs dry.
            let kind = if ci == 0 && k == 0 {
                Kind::Send
            } else {
                *rng.pick(&[
                    Kind::Send,
                    Kind::Send,
                    Kind::SendImm,
                    Kind::WriteImm,
                    Kind::Write,
                ])
            };
            let len = msg_len(&mut rng, mtu);
            c.msgs.push(Msg {
                kind,
                data: rng.bytes(len),
                imm: rng.next_u32(),
                tgt_off: tgt_slots * slot,
            });
            tgt_slots += 1;
        }
    }
    let consuming: usize = conns
        .iter()
        .flat_map(|c| &c.msgs)
        .filter(|m| m.kind != Kind::Write)
        .count();
    // Receives: one per consuming message plus a few spare ones that stay
    // queued; fewer than needed at first, so that the SRQ runs dry.
    let spare = rng.usize(0, 3);
    let total_recvs = consuming + spare;
    let initial = rng.usize(0, consuming.saturating_sub(1));
    let rb_key = sim.nodes[0].reg(
        QP_PD,
        RB_VA,
        vec![PAT_RB; total_recvs * slot],
        AccessFlags::LOCAL_WRITE,
    );
    let tgt_key = sim.nodes[0].reg(
        QP_PD,
        TGT_VA,
        vec![PAT_TGT; tgt_slots.max(1) * slot],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    // Each peer QP's sources: one region per QP holding its messages back
    // to back.
    for (ci, c) in conns.iter().enumerate() {
        let src: Vec<u8> = c.msgs.iter().flat_map(|m| m.data.clone()).collect();
        let va = 0x30_0000_0000 + ((ci as u64) << 32);
        let key = sim.nodes[c.peer].reg(QP_PD, va, src, AccessFlags::empty());
        let mut at = 0u64;
        for (k, m) in c.msgs.iter().enumerate() {
            let len = m.data.len();
            let data = if len > 0 && len <= 64 && rng.chance(0.3) {
                SendData::Inline(m.data.clone().into())
            } else if len == 0 {
                SendData::Sges(vec![])
            } else {
                SendData::Sges(vec![sge(va + at, len as u32, key)])
            };
            at += len as u64;
            let remote_addr = TGT_VA + m.tgt_off as u64;
            let op = match m.kind {
                Kind::Send => SendOp::Send,
                Kind::SendImm => SendOp::SendWithImm { imm: m.imm },
                Kind::WriteImm => SendOp::RdmaWriteWithImm {
                    remote_addr,
                    rkey: tgt_key.raw(),
                    imm: m.imm,
                },
                Kind::Write => SendOp::RdmaWrite {
                    remote_addr,
                    rkey: tgt_key.raw(),
                },
            };
            sim.nodes[c.peer]
                .ep
                .post_send(c.qp, send_wr(k as u64, op, data))
                .expect("post_send");
        }
    }

    // The SRQ limit, armed at a random level when there is one to reach.
    let limit = if initial > 0 && rng.chance(0.7) {
        rng.usize(1, initial) as u32
    } else {
        0
    };
    let mut ranges_of: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut post = |sim: &mut Sim, rng: &mut Rng, n: usize| {
        for _ in 0..n {
            let j = ranges_of.len();
            let (sges, ranges) = slot_sges(rng, rb_key, j * slot, slot);
            ranges_of.push(ranges);
            sim.nodes[0]
                .ep
                .post_srq_recv(srqn, recv_wr(j as u64, sges))
                .expect("post_srq_recv");
        }
    };
    post(&mut sim, &mut rng, initial);
    if limit > 0 {
        sim.nodes[0]
            .ep
            .modify_srq(srqn, None, Some(limit))
            .expect("arm the limit");
    }
    let ctx = format!(
        "seed {seed}: mtu {mtu}, {nqps} QPs, {consuming} receiving messages, \
         {initial} receives at first, limit {limit}, min_rnr_timer {}, faults {faults:?}",
        o.min_rnr_timer
    );

    // The SRQ runs dry: some QP answers RNR NAK.
    sim.run_until(&format!("a first RNR NAK ({ctx})"), |s| {
        s.nodes[0].ep.counters().get(Counter::SendRnrErr) > 0
    });
    assert_eq!(
        sim.nodes[0].ep.query_srq(srqn).unwrap().queued,
        0,
        "{ctx}: RNR NAK with receives queued"
    );
    // Refill in batches at random times, then let everything finish.
    let mut posted = initial;
    while posted < total_recvs {
        sim.run_for(Duration::from_micros(rng.range(0, 3000)));
        let n = rng.usize(1, 6).min(total_recvs - posted);
        post(&mut sim, &mut rng, n);
        posted += n;
    }
    sim.run_until(&format!("all completions ({ctx})"), |s| {
        s.nodes[0].wcs.len() >= consuming
            && conns
                .iter()
                .all(|c| s.nodes[c.peer].count_wcs(c.qp, WorkQueue::Send) >= c.msgs.len())
    });
    sim.run_until_idle();
    sim.dump();

    // Senders: every request completed once, in order, SUCCESS.
    for c in &conns {
        let got: Vec<(u64, WcStatus)> = sim.nodes[c.peer]
            .wcs_of(c.qp, WorkQueue::Send)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect();
        let want: Vec<(u64, WcStatus)> = (0..c.msgs.len() as u64)
            .map(|k| (k, WcStatus::Success))
            .collect();
        assert_eq!(got, want, "{ctx}: send completions of peer QP {:#x}", c.qp);
    }

    // Receiver: each SRQ receive used at most once, every consuming message
    // delivered exactly once, per QP in order, with the QP's number.
    let wcs: Vec<WorkCompletion> = sim.nodes[0].wcs.iter().map(|(_, w)| *w).collect();
    assert_eq!(wcs.len(), consuming, "{ctx}: receive completions {wcs:?}");
    let mut used = HashSet::new();
    for w in &wcs {
        assert_eq!(
            (w.status, w.queue),
            (WcStatus::Success, WorkQueue::Recv),
            "{ctx}: {w:?}"
        );
        assert!(
            used.insert(w.wr_id),
            "{ctx}: receive {} used twice",
            w.wr_id
        );
        assert!((w.wr_id as usize) < posted, "{ctx}: unknown receive {w:?}");
    }
    let mut rb_model = vec![PAT_RB; total_recvs * slot];
    let mut tgt_model = vec![PAT_TGT; tgt_slots.max(1) * slot];
    for c in &conns {
        let got: Vec<&WorkCompletion> = wcs.iter().filter(|w| w.qp_num == c.q0).collect();
        let want: Vec<&Msg> = c.msgs.iter().filter(|m| m.kind != Kind::Write).collect();
        assert_eq!(
            got.len(),
            want.len(),
            "{ctx}: QP {:#x} received {got:?}",
            c.q0
        );
        for (w, m) in got.iter().zip(&want) {
            let (opcode, imm) = match m.kind {
                Kind::Send => (WcOpcode::Recv, None),
                Kind::SendImm => (WcOpcode::Recv, Some(m.imm)),
                _ => (WcOpcode::RecvRdmaWithImm, Some(m.imm)),
            };
            assert_eq!(
                (w.opcode, w.byte_len, w.imm_data),
                (opcode, m.data.len() as u32, imm),
                "{ctx}: QP {:#x}: {w:?} for a {:?} of {} bytes",
                c.q0,
                m.kind,
                m.data.len()
            );
            if m.kind != Kind::WriteImm {
                // Into the receive's scatter list, in list order.
                let mut at = 0;
                for &(off, l) in &ranges_of[w.wr_id as usize] {
                    let n = l.min(m.data.len() - at);
                    rb_model[off..off + n].copy_from_slice(&m.data[at..at + n]);
                    at += n;
                }
            }
        }
        for m in c
            .msgs
            .iter()
            .filter(|m| matches!(m.kind, Kind::Write | Kind::WriteImm))
        {
            tgt_model[m.tgt_off..m.tgt_off + m.data.len()].copy_from_slice(&m.data);
        }
    }
    assert!(
        sim.nodes[0].bytes(rb_key) == &rb_model[..],
        "{ctx}: receive buffers differ from the model"
    );
    assert!(
        sim.nodes[0].bytes(tgt_key) == &tgt_model[..],
        "{ctx}: WRITE target differs from the model"
    );
    let attr = sim.nodes[0].ep.query_srq(srqn).unwrap();
    assert_eq!(attr.queued as usize, spare, "{ctx}: spare receives left");

    // The limit: raised at most once; certainly once if the queue ended
    // below it (the last take then left it below).
    let limit_events = sim.nodes[0]
        .events
        .iter()
        .filter(|(_, e)| *e == AsyncEvent::SrqLimitReached { srqn })
        .count();
    if limit == 0 {
        assert_eq!(limit_events, 0, "{ctx}: limit event while not armed");
    } else if spare < limit as usize {
        assert_eq!(limit_events, 1, "{ctx}: limit event");
        assert_eq!(attr.srq_limit, 0, "{ctx}: limit not disarmed");
    } else {
        assert!(limit_events <= 1, "{ctx}: limit event twice");
    }
    let others: Vec<_> = sim
        .nodes
        .iter()
        .flat_map(|n| &n.events)
        .filter(|(_, e)| !matches!(e, AsyncEvent::SrqLimitReached { .. }))
        .collect();
    assert!(others.is_empty(), "{ctx}: events {others:?}");
    for c in &conns {
        assert_eq!(sim.nodes[0].state(c.q0), QpState::Rts, "{ctx}");
        assert_eq!(sim.nodes[c.peer].state(c.qp), QpState::Rts, "{ctx}");
    }

    // One QP goes to ERR: Last WQE Reached once, and the SRQ keeps the
    // spare receives for the others (no flush completions).
    let victim = conns[rng.usize(0, nqps - 1)].q0;
    to_error(&mut sim, 0, victim);
    sim.run_until_idle();
    // A send posted in ERR is flushed (another flush of the QP) without a
    // second Last WQE Reached.
    sim.nodes[0]
        .ep
        .post_send(
            victim,
            send_wr(77, SendOp::Send, SendData::Inline(vec![].into())),
        )
        .expect("post_send in ERR");
    sim.run_until_idle();
    let flushed: Vec<(u64, WcStatus, WorkQueue)> = sim.nodes[0]
        .wcs
        .iter()
        .skip(consuming)
        .map(|(_, w)| (w.wr_id, w.status, w.queue))
        .collect();
    assert_eq!(
        flushed,
        [(77, WcStatus::WrFlushErr, WorkQueue::Send)],
        "{ctx}"
    );
    let last: Vec<_> = sim.nodes[0]
        .events
        .iter()
        .filter(|(_, e)| matches!(e, AsyncEvent::LastWqeReached { .. }))
        .map(|(_, e)| *e)
        .collect();
    assert_eq!(last, [AsyncEvent::LastWqeReached { qpn: victim }], "{ctx}");
    assert_eq!(
        sim.nodes[0].ep.query_srq(srqn).unwrap().queued as usize,
        spare,
        "{ctx}"
    );
    assert_eq!(
        sim.nodes[0].ep.destroy_srq(srqn),
        Err(EndpointError::SrqInUse { srqn, qps: nqps }),
        "{ctx}"
    );
    for c in &conns {
        sim.nodes[0].ep.destroy_qp(c.q0).expect("destroy_qp");
    }
    sim.nodes[0].ep.destroy_srq(srqn).expect("destroy_srq");

    // Coverage.
    cov.seeds += 1;
    let c0 = sim.nodes[0].ep.counters();
    cov.rnr_naks += c0.get(Counter::SendRnrErr);
    cov.dup_requests += c0.get(Counter::DuplicateRequest);
    cov.out_of_seq += c0.get(Counter::OutOfSeqRequest);
    cov.limit_events += limit_events as u64;
    cov.bad_icrc += sim.net.stats.bad_icrc;
    // Interleaved: the receives in posting order did not go to the QPs in
    // one block each.
    let mut by_wr: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.qp_num)).collect();
    by_wr.sort_unstable();
    let mut runs = HashMap::new();
    let mut prev = None;
    for (_, q) in by_wr {
        if prev != Some(q) {
            *runs.entry(q).or_insert(0) += 1;
        }
        prev = Some(q);
    }
    if runs.values().any(|&r| r > 1) {
        cov.interleaved += 1;
    }
}

/// Two to four RC QPs on one node share one SRQ and receive from two
/// peers under loss, duplication, reordering and corruption: every message
/// that consumes a receive is delivered exactly once, in order per QP, into
/// a distinct SRQ receive, with the data and completions as modelled; the
/// SRQ running dry gives RNR NAKs and the transfer recovers once receives
/// are posted; the limit event fires at most once; a QP moved to ERR raises
/// Last WQE Reached once and leaves the SRQ's receives alone.
#[test]
fn srq_shared_by_rc_qps_under_faults() {
    let mut cov = Coverage::default();
    for_seeds("srq_shared_by_rc_qps_under_faults", SEEDS, |seed| {
        srq_seed(seed, &mut cov)
    });
    eprintln!("coverage: {cov:?}");
    if cov.seeds >= 200 {
        assert!(cov.rnr_naks >= cov.seeds, "{cov:?}");
        assert!(cov.dup_requests > 0 && cov.out_of_seq > 0, "{cov:?}");
        assert!(cov.limit_events > 0, "{cov:?}");
        assert!(cov.interleaved > cov.seeds / 4, "{cov:?}");
        assert!(cov.bad_icrc > 0, "{cov:?}");
    }
}
