//! End-to-end error scenarios over the simulator (tests/sim): a cut link
//! (RETRY_EXC_ERR, then flush), RNR NAKs, every NAK code, P_Key
//! partitions, and directed duplicates and PSN wraparound.
//! `RXE_SIM_SEEDS=n` runs more seeds, `RXE_SIM_SEED=s` one.

mod sim;

use std::time::Duration;

use rxe_core::transport::{
    local_ack_timeout, rnr_timer, AccessFlags, AsyncEvent, AttrMask, Counter, Instant, Key,
    PathMtu, Psn, QpAttr, QpState, QpType, SendData, SendOp, UdDest, WcStatus, WorkQueue,
};
use rxe_core::wire::{AtomicEthRepr, BthRepr, ExtReprs, NakCode, Opcode, Syndrome, TransportRepr};
use sim::*;

const SEEDS: u64 = 3000;
const PD: u32 = 1;
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

fn statuses(sim: &Sim, n: usize, qpn: u32, q: WorkQueue) -> Vec<(u64, WcStatus)> {
    sim.nodes[n]
        .wcs_of(qpn, q)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect()
}

fn sent_by(sim: &Sim, node: usize) -> Vec<LogEntry> {
    sim.log()
        .iter()
        .filter(|e| e.fate == Fate::Sent && e.info.from == node)
        .copied()
        .collect()
}

/// Regions for simple traffic from node 0 to node 1: a source on 0, and on
/// 1 receive buffers and a WRITE/READ/atomic target.
struct Mrs {
    src: Key,
    rb: Key,
    tgt: Key,
}
const SRC_VA: u64 = 0x1_0000_0000;
const RB_VA: u64 = 0x2_0000_0000;
const TGT_VA: u64 = 0x3_0000_0000;
const BUF: usize = 64 * 1024;

fn mrs(sim: &mut Sim) -> Mrs {
    let data = sim.rng.bytes(BUF);
    Mrs {
        src: sim.nodes[0].reg(PD, SRC_VA, data, AccessFlags::empty()),
        rb: sim.nodes[1].reg(PD, RB_VA, vec![0; BUF], LW),
        tgt: sim.nodes[1].reg(
            PD,
            TGT_VA,
            vec![0; BUF],
            LW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ),
    }
}

fn src_data(m: &Mrs, off: usize, len: usize) -> SendData {
    SendData::Sges(if len == 0 {
        vec![]
    } else {
        vec![sge(SRC_VA + off as u64, len as u32, m.src)]
    })
}

fn post_recvs(sim: &mut Sim, qpn: u32, m: &Mrs, n: usize, each: usize) {
    for j in 0..n {
        let r = recv_wr(
            1000 + j as u64,
            vec![sge(RB_VA + (j * each) as u64, each as u32, m.rb)],
        );
        sim.nodes[1].ep.post_recv(qpn, r).expect("post_recv");
    }
}

// ---------------------------------------------------------------------------
// Cut link

/// A permanently cut link: the oldest request completes with RETRY_EXC_ERR
/// after exactly `retry_cnt` retransmissions, each a transport timeout
/// (4.096 µs × 2^timeout) after the last, then everything else flushes.
/// Early retransmission is off: only the transport timer sends.
#[test]
fn cut_link_gives_retry_exc_err_after_exact_retries_then_flush() {
    cut_link(false);
}

/// The same with early retransmission (its default): after the first
/// timeout (a sign of loss) it resends between the timer's rounds, but
/// spends no retry, so RETRY_EXC_ERR comes at the same moment.
#[test]
fn early_retransmission_on_a_cut_link_changes_nothing_of_the_timer() {
    cut_link(true);
}

fn cut_link(adaptive: bool) {
    let name = if adaptive {
        "cut_link_adaptive"
    } else {
        "cut_link"
    };
    for_seeds(name, SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.retry_cnt = rng.range(0, 7) as u8;
        o.timeout = rng.range(8, 16) as u8;
        o.mtu = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024, PathMtu::Mtu4096]);
        let mut sim = Sim::new(
            seed,
            2,
            Faults {
                cut_at: Some(Instant::ZERO),
                ..Faults::none()
            },
        );
        sim.enable_log();
        for n in &mut sim.nodes {
            n.ep.set_adaptive_retransmit(adaptive);
        }
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        post_recvs(&mut sim, qb, &m, 8, 4096);
        let together = rng.usize(0, 3); // more WRs posted with the first
        let later = rng.usize(0, 3); // and after the error
        let mtu = o.mtu.bytes() as usize;
        let ctx = format!(
            "seed {seed}: retry_cnt {}, timeout {}, mtu {mtu}, {together}+{later} more WRs",
            o.retry_cnt, o.timeout
        );
        let mut pkts_per_round = 0;
        for i in 0..=together {
            let len = rng.usize(0, 2 * mtu);
            pkts_per_round += len.div_ceil(mtu).max(1);
            let op = if rng.chance(0.5) {
                SendOp::Send
            } else {
                SendOp::RdmaWrite {
                    remote_addr: TGT_VA,
                    rkey: m.tgt.raw(),
                }
            };
            sim.nodes[0]
                .ep
                .post_send(qa, send_wr(i as u64, op, src_data(&m, 0, len)))
                .unwrap();
        }
        sim.run_until_idle();
        let t_exc = sim.nodes[0]
            .wcs
            .first()
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("{ctx}: no completion"));
        for i in 0..later {
            let wr = send_wr(100 + i as u64, SendOp::Send, src_data(&m, 0, 8));
            sim.nodes[0]
                .ep
                .post_send(qa, wr)
                .expect("post_send in ERR is accepted and flushed");
        }
        sim.run_until_idle();
        let mut want = vec![(0, WcStatus::RetryExcErr)];
        want.extend((1..=together as u64).map(|i| (i, WcStatus::WrFlushErr)));
        want.extend((0..later as u64).map(|i| (100 + i, WcStatus::WrFlushErr)));
        assert_eq!(statuses(&sim, 0, qa, WorkQueue::Send), want, "{ctx}");
        let t = local_ack_timeout(o.timeout).unwrap();
        // The timer backs off (1, 2, then 4 times the nominal interval).
        let intervals: u32 = (0..=u32::from(o.retry_cnt))
            .map(|i| (1u32 << i).min(4))
            .sum();
        let expect = t * intervals;
        let got = Duration::from_nanos(t_exc.as_nanos());
        let tol = Duration::from_micros(1) + t / 1000;
        assert!(
            got.abs_diff(expect) <= tol,
            "{ctx}: RETRY_EXC_ERR at {got:?}, expected {intervals} x {t:?} = {expect:?}"
        );
        let sent = sent_by(&sim, 0);
        let early = sim.nodes[0].ep.counters().get(Counter::AdaptiveRetransmit);
        // An early round resends the oldest packet alone (selective
        // retransmission, on by default): no answer ever comes to say the
        // rest must follow.
        assert_eq!(
            sent.len(),
            (usize::from(o.retry_cnt) + 1) * pkts_per_round + early as usize,
            "{ctx}: packets sent, {early} early rounds: {sent:?}"
        );
        // The first timeout is the first sign of loss: early rounds come
        // only after it, each of the interval the round trip gives, here
        // (no answer ever) the floor, doubled without progress.
        // (Timer rounds start at multiples of the nominal interval, a
        // power of two of ns; early ones an odd number of ms after one.)
        let on_timer = |e: &LogEntry| e.at.as_nanos() % t.as_nanos() as u64 == 0;
        let early_sent = sent.iter().filter(|e| !on_timer(e)).count();
        assert_eq!(
            early_sent, early as usize,
            "{ctx}: early rounds fall between the timer's"
        );
        // With no round trip measured, the interval is 4 ms.
        let room = t > Duration::from_millis(4) && o.retry_cnt > 0;
        assert_eq!(early > 0, adaptive && room, "{ctx}: {early} early rounds");
        // Round r goes out when the r-th (backed-off) timer fires.
        let round_start = |r: u32| t * (0..r).map(|i| (1u32 << i).min(4)).sum::<u32>();
        for (k, e) in sent.iter().filter(|e| on_timer(e)).enumerate() {
            let round = (k / pkts_per_round) as u32;
            assert_eq!(
                e.at.as_nanos(),
                round_start(round).as_nanos() as u64,
                "{ctx}: packet {k} sent at {:?}",
                e.at
            );
        }
        let c = sim.nodes[0].ep.counters();
        assert_eq!(c.get(Counter::RetryExceededErr), 1, "{ctx}");
        assert_eq!(
            c.get(Counter::CompleterRetryErr),
            u64::from(o.retry_cnt),
            "{ctx}"
        );
        assert_eq!(sim.nodes[0].state(qa), QpState::Error);
        assert!(
            sim.nodes[0]
                .events
                .iter()
                .any(|(_, e)| *e == AsyncEvent::QpFatal { qpn: qa }),
            "{ctx}"
        );
        // The other side saw nothing and is still running.
        assert_eq!(sim.nodes[1].state(qb), QpState::Rts);
        assert!(sim.nodes[1].wcs.is_empty());
    });
}

/// A link cut in the middle of a lossy transfer: a prefix of SUCCESS, one
/// RETRY_EXC_ERR, then WR_FLUSH_ERR for everything after; nothing lost or
/// doubled.
#[test]
fn cut_link_mid_transfer() {
    for_seeds("cut_link_mid_transfer", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut faults = Faults::lossy(&mut rng);
        faults.cut_at = Some(Instant::from_nanos(rng.range(0, 3_000_000)));
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.timeout = 10;
        o.retry_cnt = rng.range(0, 7) as u8;
        let mut sim = Sim::new(seed, 2, faults);
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let rd_key = sim.nodes[0].reg(PD, 0x4_0000_0000, vec![0; 4096], LW);
        let n = rng.usize(1, 30);
        post_recvs(&mut sim, qb, &m, n, 2048);
        for i in 0..n {
            let len = rng.usize(0, 2048);
            let op = match rng.below(3) {
                0 => SendOp::Send,
                1 => SendOp::RdmaWrite {
                    remote_addr: TGT_VA,
                    rkey: m.tgt.raw(),
                },
                _ => SendOp::RdmaRead {
                    remote_addr: TGT_VA,
                    rkey: m.tgt.raw(),
                },
            };
            let data = if matches!(op, SendOp::RdmaRead { .. }) {
                SendData::Sges(if len == 0 {
                    vec![]
                } else {
                    vec![sge(0x4_0000_0000, len as u32, rd_key)]
                })
            } else {
                src_data(&m, 0, len)
            };
            sim.nodes[0]
                .ep
                .post_send(qa, send_wr(i as u64, op, data))
                .unwrap();
        }
        sim.run_until_idle();
        let ctx = format!(
            "seed {seed}: cut at {:?}, retry_cnt {}, {n} WRs, faults {faults:?}",
            faults.cut_at, o.retry_cnt
        );
        let got = statuses(&sim, 0, qa, WorkQueue::Send);
        assert_eq!(got.len(), n, "{ctx}: every WR completes once: {got:?}");
        let ok = got.iter().take_while(|w| w.1 == WcStatus::Success).count();
        for (i, w) in got.iter().enumerate() {
            assert_eq!(w.0, i as u64, "{ctx}: in order");
            let want = if i < ok {
                WcStatus::Success
            } else if i == ok {
                WcStatus::RetryExcErr
            } else {
                WcStatus::WrFlushErr
            };
            assert_eq!(w.1, want, "{ctx}: WR {i}: {got:?}");
        }
        // The receiver got at most what was sent, at least what was acknowledged.
        let recvs = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
        assert!(recvs.iter().all(|w| w.status == WcStatus::Success), "{ctx}");
    });
}

// ---------------------------------------------------------------------------
// RNR

/// A receiver with no receive posted: RNR NAKs, each followed by a resend
/// exactly rnr_timer(min_rnr_timer) later; once a receive is posted the
/// SEND (or WRITE with immediate) succeeds.
#[test]
fn rnr_naks_then_success() {
    for_seeds("rnr_naks_then_success", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let lossy = rng.chance(0.5);
        let faults = if lossy {
            Faults::lossy(&mut rng)
        } else {
            Faults::none()
        };
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.rnr_retry = rng.range(2, 7) as u8;
        o.min_rnr_timer = *rng.pick(&[1u8, 4, 8, 12, 14, 18]);
        let mut sim = Sim::new(seed, 2, faults);
        sim.enable_log();
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let mtu = o.mtu.bytes() as usize;
        let len = rng.usize(0, 3 * mtu);
        let imm = rng.chance(0.3);
        let op = if imm {
            SendOp::RdmaWriteWithImm {
                remote_addr: TGT_VA,
                rkey: m.tgt.raw(),
                imm: 7,
            }
        } else {
            SendOp::Send
        };
        sim.nodes[0]
            .ep
            .post_send(qa, send_wr(1, op, src_data(&m, 0, len)))
            .unwrap();
        let naks = rng.range(1, u64::from(o.rnr_retry).min(3));
        let ctx = format!("seed {seed}: rnr_retry {}, min_rnr_timer {}, len {len}, imm {imm}, {naks} NAKs first, faults {faults:?}", o.rnr_retry, o.min_rnr_timer);
        sim.run_until(&ctx, |s| {
            s.nodes[1].ep.counters().get(Counter::SendRnrErr) >= naks
        });
        post_recvs(&mut sim, qb, &m, 1, 3 * 4096);
        sim.run_until_idle();
        sim.dump();
        // A requester cannot tell an RNR NAK the network duplicated from a
        // new one: if more RNR NAKs reached it than rnr_retry allows, the
        // retries are spent (even if its last resend then got through).
        let rnr_arrived = sim
            .log()
            .iter()
            .filter(|e| {
                e.fate == Fate::Delivered
                    && e.info.to == 0
                    && matches!(e.info.syndrome, Some(Syndrome::RnrNak { .. }))
            })
            .count() as u64;
        let got = statuses(&sim, 0, qa, WorkQueue::Send);
        let spent = o.rnr_retry < 7 && rnr_arrived > u64::from(o.rnr_retry);
        let want = if spent && got == vec![(1, WcStatus::RnrRetryExcErr)] {
            WcStatus::RnrRetryExcErr
        } else {
            WcStatus::Success
        };
        assert_eq!(
            got,
            vec![(1, want)],
            "{ctx}: {rnr_arrived} RNR NAKs arrived"
        );
        let r = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
        if want == WcStatus::RnrRetryExcErr {
            assert!(r.len() <= 1, "{ctx}");
        } else {
            assert_eq!(r.len(), 1, "{ctx}");
            assert_eq!(
                (r[0].status, r[0].byte_len),
                (WcStatus::Success, len as u32),
                "{ctx}"
            );
            let bytes = &sim.nodes[0].bytes(m.src)[..len];
            let landed = if imm {
                &sim.nodes[1].bytes(m.tgt)[..len]
            } else {
                &sim.nodes[1].bytes(m.rb)[..len]
            };
            assert!(bytes == landed, "{ctx}: data");
        }
        let c0 = sim.nodes[0].ep.counters().get(Counter::RcvdRnrErr);
        assert!(c0 >= 1 || lossy, "{ctx}: no RNR NAK reached the requester");
        if !lossy {
            // Every RNR NAK is followed by a resend of its PSN exactly one RNR
            // wait later.
            let wait = rnr_timer(o.min_rnr_timer).as_nanos() as u64;
            let log = sim.log();
            let mut checked = 0;
            for (k, e) in log.iter().enumerate() {
                if e.fate == Fate::Delivered
                    && e.info.to == 0
                    && matches!(e.info.syndrome, Some(Syndrome::RnrNak { .. }))
                {
                    assert_eq!(
                        e.info.syndrome,
                        Some(Syndrome::RnrNak {
                            timer: o.min_rnr_timer
                        }),
                        "{ctx}"
                    );
                    let resend = log[k..]
                        .iter()
                        .find(|x| {
                            x.fate == Fate::Sent && x.info.from == 0 && x.info.psn == e.info.psn
                        })
                        .unwrap_or_else(|| panic!("{ctx}: no resend after RNR NAK"));
                    assert_eq!(
                        resend.at.as_nanos() - e.at.as_nanos(),
                        wait,
                        "{ctx}: RNR wait"
                    );
                    checked += 1;
                }
            }
            assert_eq!(checked as u64, c0, "{ctx}");
        }
    });
}

/// With a finite rnr_retry and never a receive: RNR_RETRY_EXC_ERR after
/// exactly rnr_retry + 1 RNR NAKs, then flush.
#[test]
fn rnr_retry_exceeded() {
    for_seeds("rnr_retry_exceeded", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.rnr_retry = rng.range(0, 6) as u8;
        o.min_rnr_timer = *rng.pick(&[1u8, 6, 12]);
        let mut sim = Sim::new(seed, 2, Faults::none());
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let extra = rng.usize(0, 3);
        for i in 0..=extra {
            sim.nodes[0]
                .ep
                .post_send(
                    qa,
                    send_wr(i as u64, SendOp::Send, src_data(&m, 0, rng.usize(0, 2000))),
                )
                .unwrap();
        }
        sim.run_until_idle();
        let ctx = format!(
            "seed {seed}: rnr_retry {}, timer {}",
            o.rnr_retry, o.min_rnr_timer
        );
        let mut want = vec![(0, WcStatus::RnrRetryExcErr)];
        want.extend((1..=extra as u64).map(|i| (i, WcStatus::WrFlushErr)));
        assert_eq!(statuses(&sim, 0, qa, WorkQueue::Send), want, "{ctx}");
        let n = u64::from(o.rnr_retry) + 1;
        assert_eq!(
            sim.nodes[0].ep.counters().get(Counter::RcvdRnrErr),
            n,
            "{ctx}: RNR NAKs received"
        );
        assert_eq!(
            sim.nodes[1].ep.counters().get(Counter::SendRnrErr),
            n,
            "{ctx}: RNR NAKs sent"
        );
        assert_eq!(
            sim.nodes[0].ep.counters().get(Counter::RetryRnrExceededErr),
            1,
            "{ctx}"
        );
        assert_eq!(sim.nodes[0].state(qa), QpState::Error);
        assert_eq!(
            sim.nodes[1].state(qb),
            QpState::Rts,
            "{ctx}: an RNR condition is not an error at the responder"
        );
        // Time: rnr_retry waits (plus round trips of 10 µs).
        let t = Duration::from_nanos(sim.nodes[0].wcs[0].0.as_nanos());
        let wait = rnr_timer(o.min_rnr_timer) * u32::from(o.rnr_retry);
        let rtt = Duration::from_micros(10) * (u32::from(o.rnr_retry) + 1);
        assert_eq!(t, wait + rtt, "{ctx}: RNR_RETRY_EXC_ERR time");
    });
}

/// rnr_retry 7: without end.
#[test]
fn rnr_retry_7_retries_without_end() {
    let mut sim = Sim::new(1, 2, Faults::none());
    let mut o = ConnOpts::new(QpType::Rc);
    o.rnr_retry = 7;
    o.min_rnr_timer = 1; // 10 µs
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let m = mrs(&mut sim);
    sim.nodes[0]
        .ep
        .post_send(qa, send_wr(1, SendOp::Send, src_data(&m, 0, 100)))
        .unwrap();
    sim.run_for(Duration::from_millis(20));
    assert!(sim.nodes[1].ep.counters().get(Counter::SendRnrErr) >= 500);
    assert!(sim.nodes[0].wcs.is_empty());
    post_recvs(&mut sim, qb, &m, 1, 100);
    sim.run_until_idle();
    assert_eq!(
        statuses(&sim, 0, qa, WorkQueue::Send),
        vec![(1, WcStatus::Success)]
    );
}

/// retry_cnt 7 is seven retries, not without end (the engine's documented
/// reading of the IBTA; kernel rxe retries forever). With the timer's
/// backoff they take 1 + 2 + 6 × 4 = 27 nominal intervals: 1.8 s at
/// timeout 14.
#[test]
fn retry_cnt_7_is_finite() {
    let mut sim = Sim::new(
        1,
        2,
        Faults {
            cut_at: Some(Instant::ZERO),
            ..Faults::none()
        },
    );
    let mut o = ConnOpts::new(QpType::Rc);
    o.retry_cnt = 7;
    o.timeout = 14;
    let (qa, _) = connect(&mut sim, 0, 1, &o);
    let m = mrs(&mut sim);
    sim.nodes[0]
        .ep
        .post_send(qa, send_wr(1, SendOp::Send, src_data(&m, 0, 100)))
        .unwrap();
    sim.run_until_idle();
    assert_eq!(
        statuses(&sim, 0, qa, WorkQueue::Send),
        vec![(1, WcStatus::RetryExcErr)]
    );
    assert_eq!(sim.now.as_nanos(), 27 * 67_108_864);
}

// ---------------------------------------------------------------------------
// NAK codes

#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(clippy::enum_variant_names)]
enum Bad {
    BadRkey,
    OtherPd,
    MrNoRemoteWrite,
    MrNoRemoteRead,
    MrNoRemoteAtomic,
    WriteOutOfBounds,
    ReadBeforeStart,
    AtomicOutOfBounds,
    WriteOverflowsVa,
    QpNoRemoteWrite,
    QpNoRemoteRead,
    QpNoRemoteAtomic,
    SendTooLong,
    RecvBadLkey,
}

const BADS: [Bad; 14] = [
    Bad::BadRkey,
    Bad::OtherPd,
    Bad::MrNoRemoteWrite,
    Bad::MrNoRemoteRead,
    Bad::MrNoRemoteAtomic,
    Bad::WriteOutOfBounds,
    Bad::ReadBeforeStart,
    Bad::AtomicOutOfBounds,
    Bad::WriteOverflowsVa,
    Bad::QpNoRemoteWrite,
    Bad::QpNoRemoteRead,
    Bad::QpNoRemoteAtomic,
    Bad::SendTooLong,
    Bad::RecvBadLkey,
];

/// Every NAK code end to end: good requests succeed, the bad one completes
/// with REM_ACCESS_ERR / REM_INV_REQ_ERR / REM_OP_ERR, everything after it
/// flushes, both QPs end in ERR and the responder's receives flush.
#[test]
fn nak_codes_end_to_end() {
    for_seeds("nak_codes_end_to_end", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let bad = BADS[(seed % BADS.len() as u64) as usize];
        let lossy = rng.chance(0.5);
        let faults = if lossy {
            Faults::lossy(&mut rng)
        } else {
            Faults::none()
        };
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.mtu = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024]);
        let mtu = o.mtu.bytes() as usize;
        let mut sim = Sim::new(seed, 2, faults);
        sim.enable_log();
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let rd_key = sim.nodes[0].reg(PD, 0x4_0000_0000, vec![0; BUF], LW);
        // Regions on node 1 that lack something.
        let other_pd = sim.nodes[1].reg(PD + 1, 0x5_0000_0000, vec![0; 4096], AccessFlags::all());
        let ro = sim.nodes[1].reg(
            PD,
            0x6_0000_0000,
            vec![0; 4096],
            LW | AccessFlags::REMOTE_READ,
        );
        let wo = sim.nodes[1].reg(
            PD,
            0x7_0000_0000,
            vec![0; 4096],
            LW | AccessFlags::REMOTE_WRITE,
        );
        let top = sim.nodes[1].reg(PD, u64::MAX - 4096, vec![0; 4096], AccessFlags::all());
        // The QP-level cases: the responder QP does not enable the operation.
        let qp_off = match bad {
            Bad::QpNoRemoteWrite => Some(AccessFlags::REMOTE_WRITE),
            Bad::QpNoRemoteRead => Some(AccessFlags::REMOTE_READ),
            Bad::QpNoRemoteAtomic => Some(AccessFlags::REMOTE_ATOMIC),
            _ => None,
        };
        if let Some(off) = qp_off {
            let a = QpAttr {
                qp_state: Some(QpState::Rts),
                access_flags: Some(AccessFlags::from_bits_truncate(
                    AccessFlags::all().bits() & !off.bits(),
                )),
                ..Default::default()
            };
            sim.nodes[1]
                .ep
                .modify_qp(qb, &a, AttrMask::STATE | AttrMask::ACCESS_FLAGS)
                .expect("RTS->RTS");
        }
        // Good requests first: SENDs, WRITEs (unless the QP refuses them),
        // and zero-length WRITEs with a bad R_Key, which need none (C9-88).
        let before = rng.usize(0, 3);
        let after = rng.usize(0, 3);
        let writes_ok = bad != Bad::QpNoRemoteWrite;
        let goods: Vec<u8> = (0..before)
            .map(|_| if writes_ok { rng.below(3) as u8 } else { 0 })
            .collect();
        let good_sends = goods.iter().filter(|&&g| g == 0).count();
        let nrecv = good_sends + 4;
        let recv_len = 4 * mtu;
        post_recvs(&mut sim, qb, &m, good_sends, recv_len);
        if bad == Bad::RecvBadLkey {
            // A receive whose buffer names no region, next in line.
            let r = recv_wr(
                1000 + good_sends as u64,
                vec![sge(RB_VA, recv_len as u32, Key::new(0x00de_ad00))],
            );
            sim.nodes[1].ep.post_recv(qb, r).expect("post_recv");
        } else {
            let r = recv_wr(
                1000 + good_sends as u64,
                vec![sge(
                    RB_VA + (good_sends * recv_len) as u64,
                    recv_len as u32,
                    m.rb,
                )],
            );
            sim.nodes[1].ep.post_recv(qb, r).expect("post_recv");
        }
        for j in good_sends + 1..nrecv {
            let r = recv_wr(
                1000 + j as u64,
                vec![sge(RB_VA + (j * recv_len) as u64, recv_len as u32, m.rb)],
            );
            sim.nodes[1].ep.post_recv(qb, r).expect("post_recv");
        }
        let ctx = format!(
            "seed {seed}: {bad:?}, goods {goods:?}, {after} after, mtu {mtu}, lossy {lossy}"
        );
        let mut id = 0u64;
        let mut post = |sim: &mut Sim, op: SendOp, data: SendData| {
            sim.nodes[0]
                .ep
                .post_send(qa, send_wr(id, op, data))
                .unwrap_or_else(|e| panic!("{ctx}: post: {e}"));
            id += 1;
        };
        for &g in &goods {
            let len = rng.usize(1, 2 * mtu);
            match g {
                0 => post(&mut sim, SendOp::Send, src_data(&m, 0, len)),
                1 => post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: TGT_VA + 64,
                        rkey: m.tgt.raw(),
                    },
                    src_data(&m, 0, len),
                ),
                _ => post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: 0xdead,
                        rkey: 0xbad,
                    },
                    src_data(&m, 0, 0),
                ),
            }
        }
        let fa = |remote_addr, rkey: Key| SendOp::FetchAdd {
            remote_addr,
            rkey: rkey.raw(),
            add: 1,
        };
        let res = || SendData::Sges(vec![sge(0x4_0000_0000, 8, rd_key)]);
        let read_into = |len: usize| SendData::Sges(vec![sge(0x4_0000_0000, len as u32, rd_key)]);
        let len = rng.usize(1, 2 * mtu);
        let mut recv_status = None;
        let want = match bad {
            Bad::BadRkey => {
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: TGT_VA,
                        rkey: m.tgt.raw() ^ 0x100,
                    },
                    src_data(&m, 0, len),
                );
                WcStatus::RemAccessErr
            }
            Bad::OtherPd => {
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: 0x5_0000_0000,
                        rkey: other_pd.raw(),
                    },
                    src_data(&m, 0, len),
                );
                WcStatus::RemAccessErr
            }
            Bad::MrNoRemoteWrite => {
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: 0x6_0000_0000,
                        rkey: ro.raw(),
                    },
                    src_data(&m, 0, len),
                );
                WcStatus::RemAccessErr
            }
            Bad::MrNoRemoteRead => {
                post(
                    &mut sim,
                    SendOp::RdmaRead {
                        remote_addr: 0x7_0000_0000,
                        rkey: wo.raw(),
                    },
                    read_into(len),
                );
                WcStatus::RemAccessErr
            }
            Bad::MrNoRemoteAtomic => {
                post(&mut sim, fa(0x7_0000_0000, wo), res());
                WcStatus::RemAccessErr
            }
            Bad::WriteOutOfBounds => {
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: TGT_VA + (BUF - len + 1) as u64,
                        rkey: m.tgt.raw(),
                    },
                    src_data(&m, 0, len),
                );
                WcStatus::RemAccessErr
            }
            Bad::ReadBeforeStart => {
                post(
                    &mut sim,
                    SendOp::RdmaRead {
                        remote_addr: TGT_VA - 1,
                        rkey: m.tgt.raw(),
                    },
                    read_into(len),
                );
                WcStatus::RemAccessErr
            }
            Bad::AtomicOutOfBounds => {
                post(&mut sim, fa(TGT_VA + BUF as u64, m.tgt), res());
                WcStatus::RemAccessErr
            }
            Bad::WriteOverflowsVa => {
                // va + len wraps past 2^64: checked arithmetic must refuse it.
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: u64::MAX - 7,
                        rkey: top.raw(),
                    },
                    src_data(&m, 0, len.max(16)),
                );
                WcStatus::RemAccessErr
            }
            Bad::QpNoRemoteWrite => {
                post(
                    &mut sim,
                    SendOp::RdmaWrite {
                        remote_addr: TGT_VA,
                        rkey: m.tgt.raw(),
                    },
                    src_data(&m, 0, len),
                );
                WcStatus::RemInvReqErr
            }
            Bad::QpNoRemoteRead => {
                post(
                    &mut sim,
                    SendOp::RdmaRead {
                        remote_addr: TGT_VA,
                        rkey: m.tgt.raw(),
                    },
                    read_into(len),
                );
                WcStatus::RemInvReqErr
            }
            Bad::QpNoRemoteAtomic => {
                post(&mut sim, fa(TGT_VA, m.tgt), res());
                WcStatus::RemInvReqErr
            }
            Bad::SendTooLong => {
                recv_status = Some(WcStatus::LocLenErr);
                post(&mut sim, SendOp::Send, src_data(&m, 0, recv_len + 1));
                WcStatus::RemInvReqErr
            }
            Bad::RecvBadLkey => {
                recv_status = Some(WcStatus::LocProtErr);
                post(&mut sim, SendOp::Send, src_data(&m, 0, len));
                WcStatus::RemOpErr
            }
        };
        for _ in 0..after {
            post(&mut sim, SendOp::Send, src_data(&m, 0, 16));
        }
        sim.run_until_idle();
        sim.dump();
        let got = statuses(&sim, 0, qa, WorkQueue::Send);
        // The responder sends its NAK once and goes to ERR, where it drops
        // everything: if the network loses that NAK, the requester can only
        // time out (RETRY_EXC_ERR), as on any fabric.
        let naks = |fate: Fate| {
            sim.log()
                .iter()
                .filter(|e| {
                    e.fate == fate
                        && e.info.from == 1
                        && matches!(e.info.syndrome, Some(Syndrome::Nak(c)) if c != NakCode::PsnSequenceError)
                })
                .count()
        };
        assert!(naks(Fate::Sent) >= 1, "{ctx}: the responder sent no NAK");
        // Then the ACKs of good requests just before it may be lost with it
        // (only the NAK would have acknowledged them): the first request
        // not acknowledged takes the RETRY_EXC_ERR.
        let (fail_at, want) = if naks(Fate::Delivered) == 0 {
            let ok = got.iter().take_while(|w| w.1 == WcStatus::Success).count();
            (ok.min(before), WcStatus::RetryExcErr)
        } else {
            (before, want)
        };
        let mut exp: Vec<(u64, WcStatus)> = (0..fail_at as u64)
            .map(|i| (i, WcStatus::Success))
            .collect();
        exp.push((fail_at as u64, want));
        exp.extend((fail_at as u64 + 1..before as u64 + 1).map(|i| (i, WcStatus::WrFlushErr)));
        exp.extend(
            (before as u64 + 1..=(before + after) as u64).map(|i| (i, WcStatus::WrFlushErr)),
        );
        assert_eq!(got, exp, "{ctx}");
        assert_eq!(sim.nodes[0].state(qa), QpState::Error, "{ctx}");
        assert_eq!(
            sim.nodes[1].state(qb),
            QpState::Error,
            "{ctx}: the responder goes to ERR after a NAK"
        );
        let recvs = statuses(&sim, 1, qb, WorkQueue::Recv);
        let mut exp_r: Vec<(u64, WcStatus)> = (0..good_sends as u64)
            .map(|j| (1000 + j, WcStatus::Success))
            .collect();
        let mut next = 1000 + good_sends as u64;
        if let Some(s) = recv_status {
            exp_r.push((next, s));
            next += 1;
        }
        exp_r.extend((next..1000 + nrecv as u64).map(|i| (i, WcStatus::WrFlushErr)));
        assert_eq!(recvs, exp_r, "{ctx}: receives");
        // No byte of a refused access landed.
        assert!(sim.nodes[1].bytes(ro).iter().all(|&b| b == 0), "{ctx}");
        assert!(
            sim.nodes[1].bytes(other_pd).iter().all(|&b| b == 0),
            "{ctx}"
        );
        assert!(sim.nodes[1].bytes(top).iter().all(|&b| b == 0), "{ctx}");
        if bad == Bad::WriteOutOfBounds {
            assert!(
                sim.nodes[1].bytes(m.tgt)[BUF - len + 1..]
                    .iter()
                    .all(|&b| b == 0),
                "{ctx}: out-of-bounds WRITE landed"
            );
        }
        if matches!(
            bad,
            Bad::MrNoRemoteAtomic | Bad::QpNoRemoteAtomic | Bad::AtomicOutOfBounds
        ) {
            assert!(
                sim.nodes[1].bytes(wo).iter().all(|&b| b == 0)
                    && sim.nodes[1].bytes(m.tgt)[..8] == [0; 8],
                "{ctx}: a refused atomic executed"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// Injected requests: what a well-behaved requester never sends

fn inject(sim: &mut Sim, dest_qp: u32, psn: Psn, opcode: Opcode, ext: ExtReprs, payload: &[u8]) {
    let bth = BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn: psn.value(),
    };
    let t = TransportRepr::new(bth, ext, payload.len());
    let mut buf = vec![0; t.buffer_len().unwrap()];
    t.emit(&mut buf, payload).unwrap();
    let dest = sim.nodes[1].av();
    sim.send_transport(0, &dest, 0x999, &buf);
}

/// A misaligned atomic, and a MIDDLE packet where a message must start:
/// NAK Invalid Request with the packet's PSN, and the responder goes to
/// ERR; the atomic is not executed.
#[test]
fn invalid_requests_are_nakked() {
    for_seeds("invalid_requests_are_nakked", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        let mut sim = Sim::new(seed, 2, Faults::none());
        sim.enable_log();
        let (_qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        post_recvs(&mut sim, qb, &m, 2, 4096);
        let case = seed % 3;
        let epsn = o.psn_a;
        match case {
            0 => {
                let va = TGT_VA + 8 * rng.below(100) + rng.range(1, 7);
                let ext = ExtReprs {
                    atomic_eth: Some(AtomicEthRepr {
                        va,
                        rkey: m.tgt.raw(),
                        swap_add: 5,
                        compare: 0,
                    }),
                    ..Default::default()
                };
                inject(&mut sim, qb, epsn, Opcode::RC_FETCH_ADD, ext, &[]);
            }
            1 => inject(
                &mut sim,
                qb,
                epsn,
                Opcode::RC_SEND_MIDDLE,
                ExtReprs::default(),
                &vec![1; o.mtu.bytes() as usize],
            ),
            _ => inject(
                &mut sim,
                qb,
                epsn,
                Opcode::RC_SEND_LAST,
                ExtReprs::default(),
                &[1; 8],
            ),
        }
        sim.run_until_idle();
        let ctx = format!("seed {seed}: case {case}, ePSN {:#x}", epsn.value());
        let naks: Vec<_> = sim
            .log()
            .iter()
            .filter(|e| e.fate == Fate::Sent && e.info.from == 1)
            .map(|e| (e.info.psn, e.info.syndrome))
            .collect();
        assert_eq!(
            naks,
            vec![(epsn.value(), Some(Syndrome::Nak(NakCode::InvalidRequest)))],
            "{ctx}"
        );
        assert_eq!(sim.nodes[1].state(qb), QpState::Error, "{ctx}");
        assert!(
            sim.nodes[1].bytes(m.tgt).iter().all(|&b| b == 0),
            "{ctx}: executed"
        );
        let r = statuses(&sim, 1, qb, WorkQueue::Recv);
        assert_eq!(
            r,
            vec![(1000, WcStatus::WrFlushErr), (1001, WcStatus::WrFlushErr)],
            "{ctx}"
        );
    });
}

// ---------------------------------------------------------------------------
// P_Key

/// P_Keys (IBTA 10.9.3): full + limited members of a partition talk, two
/// limited members do not, other partitions do not; a refused packet is
/// counted; QP1 accepts any P_Key of the port's table.
#[test]
fn pkey_partitions() {
    let table = vec![0xffff, 0x8001, 0x0001, 0x8002];
    // (pkey index at a, at b, do they talk)
    for (ia, ib, talk) in [
        (1u16, 2u16, true),
        (2, 1, true),
        (1, 1, true),
        (2, 2, false),
        (1, 3, false),
        (0, 1, false),
    ] {
        let mut sim = Sim::new(u64::from(ia * 10 + ib), 2, Faults::none());
        for n in &mut sim.nodes {
            n.ep.set_pkey_table(table.clone());
        }
        let mut o = ConnOpts::new(QpType::Rc);
        o.pkey_index_a = ia;
        o.pkey_index_b = ib;
        o.retry_cnt = 1;
        o.timeout = 8;
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        post_recvs(&mut sim, qb, &m, 1, 64);
        sim.nodes[0]
            .ep
            .post_send(qa, send_wr(1, SendOp::Send, src_data(&m, 0, 32)))
            .unwrap();
        sim.run_until_idle();
        let ctx = format!("{:#06x} -> {:#06x}", table[ia as usize], table[ib as usize]);
        let want = if talk {
            WcStatus::Success
        } else {
            WcStatus::RetryExcErr
        };
        assert_eq!(
            statuses(&sim, 0, qa, WorkQueue::Send),
            vec![(1, want)],
            "{ctx}"
        );
        let drops = sim.nodes[1].ep.counters().get(Counter::DropPkeyMismatch);
        assert_eq!(drops, if talk { 0 } else { 2 }, "{ctx}: drop_pkey_mismatch");
        assert_eq!(
            statuses(&sim, 1, qb, WorkQueue::Recv).len(),
            usize::from(talk),
            "{ctx}"
        );
    }
    // UD: the same rule; QP1 takes any P_Key of its table and reports its index.
    let mut sim = Sim::new(5, 2, Faults::none());
    for n in &mut sim.nodes {
        n.ep.set_pkey_table(table.clone());
    }
    let rb = sim.nodes[1].reg(PD, RB_VA, vec![0; 8192], LW);
    let ud_rx = create_ud(&mut sim, 1, QpType::Ud, PD, 0x1234, 2); // limited 0x0001
    let gsi_rx = create_ud(
        &mut sim,
        1,
        QpType::Gsi,
        PD,
        rxe_core::transport::GSI_QKEY,
        0,
    );
    for (j, q) in [ud_rx, ud_rx, gsi_rx].into_iter().enumerate() {
        sim.nodes[1]
            .ep
            .post_recv(
                q,
                recv_wr(j as u64, vec![sge(RB_VA + 2048 * j as u64, 2048, rb)]),
            )
            .unwrap();
    }
    let tx_full = create_ud(&mut sim, 0, QpType::Ud, PD, 0x1234, 1); // 0x8001
    let tx_lim = create_ud(&mut sim, 0, QpType::Ud, PD, 0x1234, 2); // 0x0001
    let tx_gsi = {
        // QP1 of node 0 with P_Key index 3 (0x8002).
        create_ud(
            &mut sim,
            0,
            QpType::Gsi,
            PD,
            rxe_core::transport::GSI_QKEY,
            3,
        )
    };
    let dest = |q, k| UdDest {
        av: sim.nodes[1].av(),
        remote_qpn: q,
        remote_qkey: k,
    };
    let (d_ud, d_gsi) = (
        dest(ud_rx, 0x1234),
        dest(gsi_rx, rxe_core::transport::GSI_QKEY),
    );
    sim.nodes[0]
        .ep
        .post_send(
            tx_lim,
            ud_wr(1, d_ud, None, SendData::Inline(vec![1; 16].into())),
        )
        .unwrap();
    sim.nodes[0]
        .ep
        .post_send(
            tx_full,
            ud_wr(2, d_ud, None, SendData::Inline(vec![2; 16].into())),
        )
        .unwrap();
    sim.nodes[0]
        .ep
        .post_send(
            tx_gsi,
            ud_wr(3, d_gsi, None, SendData::Inline(vec![3; 16].into())),
        )
        .unwrap();
    sim.run_until_idle();
    assert_eq!(
        sim.nodes[1].ep.counters().get(Counter::DropPkeyMismatch),
        1,
        "limited to limited"
    );
    let r = sim.nodes[1].wcs_of(ud_rx, WorkQueue::Recv);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].src_qp, r[0].pkey_index), (tx_full, 2));
    let g = sim.nodes[1].wcs_of(gsi_rx, WorkQueue::Recv);
    assert_eq!(g.len(), 1, "QP1 accepts a P_Key of its table");
    assert_eq!((g[0].src_qp, g[0].pkey_index), (1, 3));
}

// ---------------------------------------------------------------------------
// Directed duplicates and PSN wraparound

/// The ATOMIC Acknowledge is lost: the requester resends the atomic, the
/// responder answers from its saved result and does not execute it twice.
#[test]
fn lost_atomic_ack_is_answered_from_the_saved_result() {
    for_seeds("lost_atomic_ack", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.timeout = 8;
        let mut sim = Sim::new(seed, 2, Faults::none());
        sim.enable_log();
        let lose = rng.range(1, 3); // lose the first `lose` atomic ACKs
        let mut seen = 0;
        sim.set_filter(move |_, p| {
            if p.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE && seen < lose {
                seen += 1;
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        });
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let res = sim.nodes[0].reg(PD, 0x4_0000_0000, vec![0; 16], LW);
        let init = rng.next_u64();
        sim.nodes[1].mem.bytes_mut(m.tgt).unwrap()[..8].copy_from_slice(&init.to_ne_bytes());
        let add = rng.range(1, 1 << 40);
        let cas = rng.chance(0.5);
        let op = if cas {
            SendOp::CmpSwap {
                remote_addr: TGT_VA,
                rkey: m.tgt.raw(),
                compare: init,
                swap: add,
            }
        } else {
            SendOp::FetchAdd {
                remote_addr: TGT_VA,
                rkey: m.tgt.raw(),
                add,
            }
        };
        sim.nodes[0]
            .ep
            .post_send(
                qa,
                send_wr(1, op, SendData::Sges(vec![sge(0x4_0000_0000, 8, res)])),
            )
            .unwrap();
        sim.run_until_idle();
        let ctx = format!("seed {seed}: cas {cas}, {lose} ACKs lost");
        assert_eq!(
            statuses(&sim, 0, qa, WorkQueue::Send),
            vec![(1, WcStatus::Success)],
            "{ctx}"
        );
        let now = u64::from_ne_bytes(sim.nodes[1].bytes(m.tgt)[..8].try_into().unwrap());
        assert_eq!(
            now,
            if cas { add } else { init.wrapping_add(add) },
            "{ctx}: applied once"
        );
        let orig = u64::from_ne_bytes(sim.nodes[0].bytes(res)[..8].try_into().unwrap());
        assert_eq!(orig, init, "{ctx}: original value");
        let reqs = sim
            .log()
            .iter()
            .filter(|e| e.fate == Fate::Delivered && e.info.to == 1)
            .count() as u64;
        assert_eq!(reqs, lose + 1, "{ctx}: the atomic was resent each time");
        assert_eq!(
            sim.nodes[1].ep.counters().get(Counter::DuplicateRequest),
            lose,
            "{ctx}"
        );
        assert_eq!(sim.nodes[1].state(qb), QpState::Rts);
    });
}

/// READ responses lost in the middle: the requester asks again from the
/// first byte it lacks (PSN and RETH address of that packet) and the data
/// arrives whole.
#[test]
fn lost_read_response_is_rerequested_from_the_right_offset() {
    for_seeds("lost_read_response", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        o.mtu = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024]);
        o.timeout = 8;
        let mtu = o.mtu.bytes() as usize;
        let pkts = rng.usize(2, 6);
        let len = (pkts - 1) * mtu + rng.usize(1, mtu);
        let lost = rng.usize(0, pkts - 1) as u32; // index of the response packet lost once
        let start = o.psn_a;
        let mut sim = Sim::new(seed, 2, Faults::none());
        sim.enable_log();
        let mut done = false;
        sim.set_filter(move |_, p| {
            let is_resp = p.opcode.0 >= 0x0d && p.opcode.0 <= 0x10;
            if is_resp && !done && p.psn == start.add(lost).value() {
                done = true;
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        });
        let (qa, _qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        let data = sim.rng.bytes(len);
        sim.nodes[1].mem.bytes_mut(m.tgt).unwrap()[100..100 + len].copy_from_slice(&data);
        let dst = sim.nodes[0].reg(PD, 0x4_0000_0000, vec![0; len], LW);
        let op = SendOp::RdmaRead {
            remote_addr: TGT_VA + 100,
            rkey: m.tgt.raw(),
        };
        sim.nodes[0]
            .ep
            .post_send(
                qa,
                send_wr(
                    1,
                    op,
                    SendData::Sges(vec![sge(0x4_0000_0000, len as u32, dst)]),
                ),
            )
            .unwrap();
        sim.run_until_idle();
        sim.dump();
        let ctx = format!(
            "seed {seed}: READ of {len} in {pkts} packets, response {lost} lost once, psn {:#x}",
            start.value()
        );
        assert_eq!(
            statuses(&sim, 0, qa, WorkQueue::Send),
            vec![(1, WcStatus::Success)],
            "{ctx}"
        );
        assert!(sim.nodes[0].bytes(dst) == &data[..], "{ctx}: data");
        let reqs: Vec<(u32, (u64, u32))> = sim
            .log()
            .iter()
            .filter(|e| e.fate == Fate::Sent && e.info.opcode == Opcode::RC_RDMA_READ_REQUEST)
            .map(|e| (e.info.psn, e.info.reth.unwrap()))
            .collect();
        let off = lost as usize * mtu;
        assert_eq!(
            reqs,
            vec![
                (start.value(), (TGT_VA + 100, len as u32)),
                (
                    start.add(lost).value(),
                    (TGT_VA + 100 + off as u64, (len - off) as u32)
                ),
            ],
            "{ctx}: READ requests"
        );
    });
}

/// One lost packet in the middle of a stream: the responder NAKs the gap
/// once (PSN sequence error with its expected PSN), stays silent for the
/// rest, and the requester goes back; PSNs wrap through 2^24. Go-back-N
/// resends everything from the gap; with selective retransmission the
/// responder held the rest and only the lost packet is sent again.
#[test]
fn sequence_error_nak_once_and_psn_wraparound() {
    sequence_error_nak_once(false);
    sequence_error_nak_once(true);
}

fn sequence_error_nak_once(selective: bool) {
    for_seeds("sequence_error_nak_once", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let mut o = ConnOpts::new(QpType::Rc);
        o.psn_a = Psn::new(0xff_ffff - rng.below(6) as u32);
        o.mtu = PathMtu::Mtu256;
        let n = rng.usize(3, 10); // packets of one SEND
        let lost = rng.usize(0, n - 2) as u32; // not the last one
        let start = o.psn_a;
        let mut sim = Sim::new(seed, 2, Faults::none());
        for n in &mut sim.nodes {
            n.ep.set_selective_retransmit(selective);
        }
        sim.enable_log();
        let mut done = false;
        sim.set_filter(move |_, p| {
            if p.from == 0 && !done && p.psn == start.add(lost).value() {
                done = true;
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        });
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        post_recvs(&mut sim, qb, &m, 1, 4096);
        let len = (n - 1) * 256 + 100;
        sim.nodes[0]
            .ep
            .post_send(qa, send_wr(1, SendOp::Send, src_data(&m, 0, len)))
            .unwrap();
        sim.run_until_idle();
        let ctx = format!(
            "seed {seed}: {n} packets from psn {:#x}, packet {lost} lost, selective {selective}",
            start.value()
        );
        assert_eq!(
            statuses(&sim, 0, qa, WorkQueue::Send),
            vec![(1, WcStatus::Success)],
            "{ctx}"
        );
        let r = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
        assert_eq!((r.len(), r[0].byte_len), (1, len as u32), "{ctx}");
        assert!(
            sim.nodes[1].bytes(m.rb)[..len] == sim.nodes[0].bytes(m.src)[..len],
            "{ctx}: data"
        );
        let naks = sim.sent_seq_naks();
        assert_eq!(
            naks,
            vec![start.add(lost).value()],
            "{ctx}: one NAK naming the missing PSN"
        );
        let c1 = sim.nodes[1].ep.counters();
        assert_eq!(
            c1.get(Counter::OutOfSeqRequest),
            u64::from(n as u32 - 1 - lost),
            "{ctx}"
        );
        assert_eq!(
            sim.nodes[0].ep.counters().get(Counter::RcvdSeqErr),
            1,
            "{ctx}"
        );
        // The resend starts at the missing PSN.
        let sent: Vec<u32> = sim
            .log()
            .iter()
            .filter(|e| e.fate == Fate::Sent && e.info.from == 0)
            .map(|e| e.info.psn)
            .collect();
        let resent = if selective {
            lost..lost + 1
        } else {
            lost..n as u32
        };
        let expect: Vec<u32> = (0..n as u32)
            .chain(resent)
            .map(|k| start.add(k).value())
            .collect();
        assert_eq!(sent, expect, "{ctx}: packets sent");
        let held = u64::from(n as u32 - 1 - lost);
        let c0 = sim.nodes[0].ep.counters();
        assert_eq!(
            c0.get(Counter::SelectiveRetransmit),
            u64::from(selective),
            "{ctx}"
        );
        let (held, replayed) = if selective { (held, held) } else { (0, 0) };
        assert_eq!(c1.get(Counter::OooHeld), held, "{ctx}");
        assert_eq!(c1.get(Counter::OooReplayed), replayed, "{ctx}");
        assert_eq!(c1.get(Counter::OooDiscarded), 0, "{ctx}");
    });
}

/// A packet duplicated by the network is delivered once.
#[test]
fn duplicated_packets_are_executed_once() {
    for_seeds("duplicated_packets", SEEDS, |seed| {
        let mut rng = Rng::new(seed);
        let o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
        let mut sim = Sim::new(seed, 2, Faults::none());
        let copies = rng.range(2, 3) as u8;
        sim.set_filter(move |_, p| {
            if p.from == 0 {
                Verdict::Copies(copies)
            } else {
                Verdict::Pass
            }
        });
        let (qa, qb) = connect(&mut sim, 0, 1, &o);
        let m = mrs(&mut sim);
        post_recvs(&mut sim, qb, &m, 4, 4096);
        let n = rng.usize(1, 4);
        let mut pkts = 0;
        for i in 0..n {
            let len = rng.usize(0, 3000);
            pkts += len.div_ceil(1024).max(1) as u64;
            sim.nodes[0]
                .ep
                .post_send(qa, send_wr(i as u64, SendOp::Send, src_data(&m, 0, len)))
                .unwrap();
        }
        sim.run_until_idle();
        let ctx = format!("seed {seed}: {n} SENDs x{copies}");
        assert_eq!(sim.nodes[1].wcs_of(qb, WorkQueue::Recv).len(), n, "{ctx}");
        assert!(
            sim.nodes[1].ep.counters().get(Counter::DuplicateRequest)
                >= pkts * u64::from(copies - 1),
            "{ctx}"
        );
        assert!(
            statuses(&sim, 0, qa, WorkQueue::Send)
                .iter()
                .take(n)
                .all(|w| w.1 == WcStatus::Success),
            "{ctx}"
        );
    });
}
