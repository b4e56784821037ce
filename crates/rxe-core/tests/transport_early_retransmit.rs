//! Early retransmission (`send::adaptive_timer`) over the simulator: the
//! two losses the responder never answers a second time (a lost NAK, a
//! resent packet lost again) are repaired within milliseconds instead of
//! one transport timeout, without spending a retry; with it off, only
//! the timer repairs them. `RXE_SIM_SEEDS=n` runs more seeds.

mod sim;

use std::time::Duration;

use rxe_core::transport::{
    local_ack_timeout, AccessFlags, Counter, Instant, Key, PathMtu, QpType, SendData, SendOp,
    WcStatus, WorkQueue,
};
use rxe_core::wire::Opcode;
use sim::*;

const SEEDS: u64 = 200;
const PD: u32 = 1;
const SRC_VA: u64 = 0x1_0000_0000;
const TGT_VA: u64 = 0x3_0000_0000;
const MTU: usize = 256;
/// Packets per WRITE.
const PKTS: usize = 40;
const LEN: usize = PKTS * MTU;
/// WRITEs a pair can carry (its regions hold this many).
const MSGS: usize = 8;

struct Pair {
    sim: Sim,
    qa: u32,
    src: Key,
    tgt: Key,
}

/// Nodes 0 → 1, one RC QP pair at timeout 14 (67 ms, perftest's), early
/// retransmission `adaptive`, and `filter` deciding each packet's fate.
fn pair(
    seed: u64,
    adaptive: bool,
    filter: impl FnMut(Instant, &PacketInfo) -> Verdict + 'static,
) -> Pair {
    let mut rng = Rng::new(seed);
    let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    o.mtu = PathMtu::Mtu256;
    o.timeout = 14;
    let mut sim = Sim::new(seed, 2, Faults::none());
    for n in &mut sim.nodes {
        n.ep.set_adaptive_retransmit(adaptive);
    }
    sim.set_filter(filter);
    let (qa, _qb) = connect(&mut sim, 0, 1, &o);
    let data = sim.rng.bytes(MSGS * LEN);
    let src = sim.nodes[0].reg(PD, SRC_VA, data, AccessFlags::empty());
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let tgt = sim.nodes[1].reg(PD, TGT_VA, vec![0; MSGS * LEN], rights);
    Pair { sim, qa, src, tgt }
}

impl Pair {
    /// WRITEs message `i` (below [`MSGS`]) and runs until it completes; returns how
    /// long that took.
    fn write(&mut self, i: usize) -> Duration {
        let off = (i * LEN) as u64;
        let op = SendOp::RdmaWrite {
            remote_addr: TGT_VA + off,
            rkey: self.tgt.raw(),
        };
        let wr = send_wr(
            i as u64,
            op,
            SendData::Sges(vec![sge(SRC_VA + off, LEN as u32, self.src)]),
        );
        let start = self.sim.now;
        self.sim.nodes[0].ep.post_send(self.qa, wr).unwrap();
        let (qa, want) = (self.qa, i + 1);
        self.sim.run_until("the WRITE completes", |s| {
            s.nodes[0].count_wcs(qa, WorkQueue::Send) == want
        });
        let wcs = self.sim.nodes[0].wcs_of(self.qa, WorkQueue::Send);
        assert_eq!(wcs[i].status, WcStatus::Success);
        let range = i * LEN..(i + 1) * LEN;
        assert_eq!(
            self.sim.nodes[1].bytes(self.tgt)[range.clone()],
            self.sim.nodes[0].bytes(self.src)[range],
            "the WRITE's bytes arrived"
        );
        self.sim.now.saturating_since(start)
    }

    fn counter(&self, node: usize, c: Counter) -> u64 {
        self.sim.nodes[node].ep.counters().get(c)
    }
}

fn nominal() -> Duration {
    local_ack_timeout(14).unwrap()
}

fn is_seq_nak(p: &PacketInfo) -> bool {
    p.opcode == Opcode::RC_ACKNOWLEDGE && p.is_seq_nak()
}

/// The request packets of WRITE `i`, by PSN offset from the first: the
/// filter sees PSNs, so it learns the first one from the first packet.
fn request_index(first: &mut Option<u32>, p: &PacketInfo) -> Option<usize> {
    let is_request = p.to == 1 && p.opcode != Opcode::RC_ACKNOWLEDGE;
    if !is_request {
        return None;
    }
    let f = *first.get_or_insert(p.psn);
    Some((p.psn.wrapping_sub(f) & 0xff_ffff) as usize)
}

/// WRITE 0 loses one packet (its NAK arrives: the first sign of loss);
/// WRITE 1 loses one packet and the NAK for it. The responder sends no
/// second NAK (IBTA 9.7.5.1.1), so only a retransmission of the
/// requester's own repairs it.
fn lost_nak(seed: u64, adaptive: bool) -> (Pair, Duration) {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let lose0 = rng.usize(1, PKTS - 2);
    let lose1 = PKTS + rng.usize(1, PKTS - 2);
    let (mut first, mut dropped, mut naks) = (None, [false; 2], 0);
    let mut p = pair(seed, adaptive, move |_, p| {
        if is_seq_nak(p) {
            naks += 1;
            return if naks == 2 {
                Verdict::Drop
            } else {
                Verdict::Pass
            };
        }
        match request_index(&mut first, p) {
            Some(k) if k == lose0 && !dropped[0] => {
                dropped[0] = true;
                Verdict::Drop
            }
            Some(k) if k == lose1 && !dropped[1] => {
                dropped[1] = true;
                Verdict::Drop
            }
            _ => Verdict::Pass,
        }
    });
    p.write(0);
    let took = p.write(1);
    (p, took)
}

#[test]
fn a_lost_nak_is_repaired_early_without_spending_a_retry() {
    for_seeds("lost_nak_early", SEEDS, |seed| {
        let (p, took) = lost_nak(seed, true);
        assert!(
            took < Duration::from_millis(10),
            "seed {seed}: WRITE 1 took {took:?}"
        );
        assert!(
            p.counter(0, Counter::AdaptiveRetransmit) >= 1,
            "seed {seed}"
        );
        // The one NAK that arrived is the one retry spent; no timeout.
        assert_eq!(p.counter(0, Counter::RcvdSeqErr), 1, "seed {seed}");
        assert_eq!(p.counter(0, Counter::CompleterRetryErr), 1, "seed {seed}");
    });
}

#[test]
fn without_early_retransmission_a_lost_nak_waits_for_the_timer() {
    for_seeds("lost_nak_timer", SEEDS, |seed| {
        let (p, took) = lost_nak(seed, false);
        assert!(took >= nominal(), "seed {seed}: WRITE 1 took {took:?}");
        assert_eq!(p.counter(0, Counter::AdaptiveRetransmit), 0, "seed {seed}");
        // The NAK and the timeout.
        assert_eq!(p.counter(0, Counter::CompleterRetryErr), 2, "seed {seed}");
    });
}

/// One packet of a WRITE is lost, and so is its retransmission after the
/// NAK: the responder, having NAK'd, stays silent.
#[test]
fn a_resent_packet_lost_again_is_repaired_early() {
    for_seeds("lost_twice", SEEDS, |seed| {
        for adaptive in [true, false] {
            let mut rng = Rng::new(seed ^ 0x7a11);
            let lose = rng.usize(1, PKTS - 2);
            let (mut first, mut dropped) = (None, 0);
            let mut p = pair(seed, adaptive, move |_, p| {
                match request_index(&mut first, p) {
                    Some(k) if k == lose && dropped < 2 => {
                        dropped += 1;
                        Verdict::Drop
                    }
                    _ => Verdict::Pass,
                }
            });
            let took = p.write(0);
            let early = p.counter(0, Counter::AdaptiveRetransmit);
            if adaptive {
                assert!(took < Duration::from_millis(10), "seed {seed}: {took:?}");
                assert!(early >= 1, "seed {seed}");
            } else {
                assert!(took >= nominal(), "seed {seed}: {took:?}");
                assert_eq!(early, 0, "seed {seed}");
            }
        }
    });
}

/// Random loss both ways: over the seeds, early retransmission spends
/// less simulated time than the timer alone, and every byte arrives.
#[test]
fn random_loss_costs_less_time_with_early_retransmission() {
    let (mut with, mut without) = (Duration::ZERO, Duration::ZERO);
    for_seeds("random_loss_early", 20, |seed| {
        for adaptive in [true, false] {
            let mut rng = Rng::new(seed ^ 0x1055);
            let mut p = pair(seed, adaptive, move |_, _| {
                if rng.chance(0.02) {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                }
            });
            let took: Duration = (0..MSGS).map(|i| p.write(i)).sum();
            *if adaptive { &mut with } else { &mut without } += took;
        }
    });
    println!("2 % loss, {MSGS} WRITEs × 20 seeds: {with:?} with early retransmission, {without:?} timer only");
    assert!(
        with * 2 < without,
        "with early retransmission {with:?}, timer only {without:?}"
    );
}
