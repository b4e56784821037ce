//! Selective retransmission (`recv::reorder`, the requester's probe) over
//! the simulator: a responder that holds the packets after a gap and a
//! requester that resends only the NAK'd packet first cut what a loss
//! costs from the rest of the window to one packet; each half alone still
//! works with a go-back-N peer (the requester learns it after one probe,
//! the responder answers resent packets as duplicates), and nothing is
//! executed twice or out of order on a network that also duplicates,
//! reorders and corrupts. `RXE_SIM_SEEDS=n` runs more seeds.

mod sim;

use rxe_core::transport::{
    AccessFlags, Counter, Key, PathMtu, QpType, SendData, SendOp, WcStatus, WorkQueue,
};
use sim::*;

const PD: u32 = 1;
const SRC_VA: u64 = 0x1_0000_0000;
const TGT_VA: u64 = 0x3_0000_0000;
const MTU: usize = 256;
/// Packets per message.
const PKTS: usize = 40;
const LEN: usize = PKTS * MTU;
/// Messages a pair can carry (its regions hold this many).
const MSGS: usize = 8;

struct Pair {
    sim: Sim,
    qa: u32,
    qb: u32,
    src: Key,
    tgt: Key,
}

/// Nodes 0 → 1, one RC QP pair; selective retransmission on the
/// requester's side `a` and the responder's side `b`; `faults` and
/// `filter` decide each packet's fate.
fn pair(
    seed: u64,
    a: bool,
    b: bool,
    faults: Faults,
    filter: impl FnMut(rxe_core::transport::Instant, &PacketInfo) -> Verdict + 'static,
) -> Pair {
    let mut rng = Rng::new(seed);
    let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    o.mtu = PathMtu::Mtu256;
    let mut sim = Sim::new(seed, 2, faults);
    sim.nodes[0].ep.set_selective_retransmit(a);
    sim.nodes[1].ep.set_selective_retransmit(b);
    sim.enable_log();
    sim.set_filter(filter);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let data = sim.rng.bytes(MSGS * LEN);
    let src = sim.nodes[0].reg(PD, SRC_VA, data, AccessFlags::empty());
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let tgt = sim.nodes[1].reg(PD, TGT_VA, vec![0; MSGS * LEN], rights);
    Pair {
        sim,
        qa,
        qb,
        src,
        tgt,
    }
}

impl Pair {
    /// Posts message `i` (below [`MSGS`]): a WRITE, or a SEND into a
    /// receive posted for it.
    fn post(&mut self, i: usize, send: bool) {
        let off = (i * LEN) as u64;
        let op = if send {
            let r = recv_wr(
                1000 + i as u64,
                vec![sge(TGT_VA + off, LEN as u32, self.tgt)],
            );
            self.sim.nodes[1].ep.post_recv(self.qb, r).unwrap();
            SendOp::Send
        } else {
            SendOp::RdmaWrite {
                remote_addr: TGT_VA + off,
                rkey: self.tgt.raw(),
            }
        };
        let data = SendData::Sges(vec![sge(SRC_VA + off, LEN as u32, self.src)]);
        self.sim.nodes[0]
            .ep
            .post_send(self.qa, send_wr(i as u64, op, data))
            .unwrap();
    }

    /// Posts messages `0..MSGS` (SENDs where `send(i)`), runs until all
    /// complete, and checks every completion and byte: each SEND's
    /// receive completes once, in order, with its length.
    fn run(&mut self, send: impl Fn(usize) -> bool, ctx: &str) {
        for i in 0..MSGS {
            self.post(i, send(i));
        }
        let qa = self.qa;
        self.sim.run_until("every message completes", |s| {
            s.nodes[0].count_wcs(qa, WorkQueue::Send) == MSGS
        });
        let wcs = self.sim.nodes[0].wcs_of(qa, WorkQueue::Send);
        let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
        let want: Vec<(u64, WcStatus)> = (0..MSGS as u64).map(|i| (i, WcStatus::Success)).collect();
        assert_eq!(got, want, "{ctx}: send completions");
        assert_eq!(
            self.sim.nodes[1].bytes(self.tgt),
            self.sim.nodes[0].bytes(self.src),
            "{ctx}: every byte arrived"
        );
        self.sim.run_until_idle();
        let recvs: Vec<(u64, WcStatus, u32)> = self.sim.nodes[1]
            .wcs_of(self.qb, WorkQueue::Recv)
            .iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect();
        let want: Vec<(u64, WcStatus, u32)> = (0..MSGS)
            .filter(|&i| send(i))
            .map(|i| (1000 + i as u64, WcStatus::Success, LEN as u32))
            .collect();
        assert_eq!(recvs, want, "{ctx}: each SEND received once, in order");
    }

    fn counter(&self, node: usize, c: Counter) -> u64 {
        self.sim.nodes[node].ep.counters().get(c)
    }

    /// Request packets node 0 sent.
    fn requests_sent(&self) -> usize {
        self.sim
            .log()
            .iter()
            .filter(|e| e.fate == Fate::Sent && e.info.from == 0)
            .count()
    }

    fn seq_naks(&self) -> Vec<u32> {
        self.sim.sent_seq_naks()
    }
}

/// Drops each packet (requests and answers) with probability `p`.
fn random_loss(
    seed: u64,
    p: f64,
) -> impl FnMut(rxe_core::transport::Instant, &PacketInfo) -> Verdict {
    let mut rng = Rng::new(seed ^ 0x5e1e);
    move |_, _| {
        if rng.chance(p) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }
}

#[test]
fn random_loss_resends_far_less_with_selective_retransmission() {
    let (mut selective, mut go_back_n) = (0usize, 0usize);
    let useful = MSGS * PKTS;
    for_seeds("selective_random_loss", 20, |seed| {
        for on in [true, false] {
            let mut p = pair(seed, on, on, Faults::none(), random_loss(seed, 0.02));
            p.run(|i| i % 2 == 1, &format!("seed {seed}, selective {on}"));
            let extra = p.requests_sent() - useful;
            *if on { &mut selective } else { &mut go_back_n } += extra;
            if !on {
                assert_eq!(p.counter(1, Counter::OooHeld), 0);
                assert_eq!(p.counter(0, Counter::SelectiveRetransmit), 0);
            }
        }
    });
    println!(
        "2 % loss, {MSGS} messages of {PKTS} packets × 20 seeds: {selective} packets resent \
         selectively, {go_back_n} go-back-N"
    );
    assert!(
        selective * 3 < go_back_n,
        "resent: {selective} selective, {go_back_n} go-back-N"
    );
}

/// Two packets of one window lost: the responder NAKs the first gap, holds
/// everything after it, and once the first is resent executes up to the
/// second gap and NAKs that at once (the packets past it came long ago):
/// two packets resent in all.
#[test]
fn a_second_gap_in_the_held_packets_is_nakd_when_the_first_is_filled() {
    for_seeds("selective_two_gaps", 50, |seed| {
        let mut rng = Rng::new(seed);
        let k1 = rng.usize(0, PKTS - 3) as u32;
        let k2 = rng.usize(k1 as usize + 1, PKTS - 2) as u32;
        let mut first: Option<u32> = None;
        let mut dropped = [false; 2];
        let mut p = pair(seed, true, true, Faults::none(), move |_, i| {
            if i.from != 0 {
                return Verdict::Pass;
            }
            let f = *first.get_or_insert(i.psn);
            let k = i.psn.wrapping_sub(f) & 0xff_ffff;
            for (j, kj) in [k1, k2].into_iter().enumerate() {
                if k == kj && !dropped[j] {
                    dropped[j] = true;
                    return Verdict::Drop;
                }
            }
            Verdict::Pass
        });
        let ctx = format!("seed {seed}: packets {k1} and {k2} lost");
        p.post(0, false);
        let qa = p.qa;
        p.sim.run_until("the WRITE completes", |s| {
            s.nodes[0].count_wcs(qa, WorkQueue::Send) == 1
        });
        p.sim.run_until_idle();
        let start = p
            .sim
            .log()
            .iter()
            .find(|e| e.info.from == 0)
            .unwrap()
            .info
            .psn;
        let at = |k: u32| (start + k) & 0xff_ffff;
        assert_eq!(p.seq_naks(), vec![at(k1), at(k2)], "{ctx}: NAKs");
        assert_eq!(p.requests_sent(), PKTS + 2, "{ctx}: packets sent");
        let range = 0..LEN;
        assert_eq!(
            p.sim.nodes[1].bytes(p.tgt)[range.clone()],
            p.sim.nodes[0].bytes(p.src)[range],
            "{ctx}"
        );
        assert_eq!(p.counter(0, Counter::SelectiveRetransmit), 2, "{ctx}");
        assert_eq!(
            p.counter(1, Counter::OooReplayed),
            (PKTS - 2 - k1 as usize) as u64,
            "{ctx}: everything after the first gap but the second lost packet, replayed"
        );
    });
}

/// A requester that resends selectively, against a go-back-N responder
/// (kernel rxe's kind): the first probe whose answer it can read (an ACK
/// of only the resent packet) makes the QP resend the rest and stop
/// probing. (An answer lost, or overtaken by an early retransmission, can
/// cost one or two more.)
#[test]
fn against_a_go_back_n_responder_the_requester_stops_probing() {
    let (mut probed, mut total) = (0, 0);
    for_seeds("selective_vs_go_back_n_responder", 20, |seed| {
        let mut p = pair(seed, true, false, Faults::none(), random_loss(seed, 0.02));
        let ctx = format!("seed {seed}");
        p.run(|i| i % 3 == 0, &ctx);
        assert_eq!(p.counter(1, Counter::OooHeld), 0, "{ctx}");
        let probes = p.counter(0, Counter::SelectiveRetransmit);
        let naks = p.counter(0, Counter::RcvdSeqErr);
        assert!(probes <= 3, "{ctx}: {probes} probes for {naks} NAKs");
        probed += u64::from(probes > 0);
        total += probes;
    });
    assert!(probed > 5, "only {probed} of 20 seeds probed at all");
    // One probe per QP, a tenth more for answers lost or overtaken.
    assert!(
        total * 10 <= probed * 11 + 30,
        "{total} probes in {probed} seeds"
    );
}

/// A go-back-N requester against a responder that holds: what it resends
/// after the gap was executed from the held copies already, and is
/// answered as duplicates, never executed twice.
#[test]
fn a_go_back_n_requester_gets_its_resent_packets_answered_as_duplicates() {
    let mut held = 0;
    for_seeds("go_back_n_vs_holding_responder", 20, |seed| {
        let mut p = pair(seed, false, true, Faults::none(), random_loss(seed, 0.02));
        let ctx = format!("seed {seed}");
        p.run(|i| i % 2 == 0, &ctx);
        assert_eq!(p.counter(0, Counter::SelectiveRetransmit), 0, "{ctx}");
        let h = p.counter(1, Counter::OooHeld);
        if p.counter(1, Counter::OooReplayed) > 0 {
            assert!(p.counter(1, Counter::DuplicateRequest) > 0, "{ctx}");
        }
        held += h;
    });
    assert!(held > 100, "only {held} packets held over 20 seeds");
}

/// Loss, duplication, reordering and corruption at once, SENDs and
/// WRITEs: every message arrives whole, each SEND is received exactly
/// once and in order, with selective retransmission on both sides, on
/// either side alone, and off.
#[test]
fn a_bad_network_delivers_every_message_once_in_order() {
    for_seeds("selective_bad_network", 30, |seed| {
        let mut rng = Rng::new(seed ^ 0xbad);
        let faults = Faults::lossy(&mut rng);
        for (a, b) in [(true, true), (true, false), (false, true), (false, false)] {
            let mut p = pair(seed, a, b, faults, |_, _| Verdict::Pass);
            p.run(
                |i| i % 2 == 0,
                &format!("seed {seed}, {faults:?}, selective {a}/{b}"),
            );
        }
    });
}

/// Where the link, not the hosts, is the limit (a 100 Mb/s switch port in
/// front of the responder), 2 % loss: go-back-N spends the link on
/// packets the responder then discards; selective retransmission on one
/// packet per loss, and the same messages take far less time.
#[test]
fn over_a_slow_link_selective_retransmission_takes_far_less_time() {
    use std::time::Duration;
    let faults = Faults {
        bottleneck: Some(Bottleneck {
            to: 1,
            rate_mbps: 100.0,
            // No congestion marks: only the loss differs.
            mark_above: Duration::from_secs(10),
            drop_above: Duration::MAX,
        }),
        ..Faults::none()
    };
    let (mut selective, mut go_back_n) = (Duration::ZERO, Duration::ZERO);
    for_seeds("selective_slow_link", 20, |seed| {
        for on in [true, false] {
            let mut p = pair(seed, on, on, faults, random_loss(seed, 0.02));
            let start = p.sim.now;
            p.run(|i| i % 2 == 1, &format!("seed {seed}, selective {on}"));
            *if on { &mut selective } else { &mut go_back_n } += p.sim.now.saturating_since(start);
        }
    });
    println!(
        "100 Mb/s link, 2 % loss, {MSGS} messages of {PKTS} packets × 20 seeds: {selective:?} \
         selective, {go_back_n:?} go-back-N"
    );
    assert!(
        selective * 3 < go_back_n * 2,
        "selective {selective:?}, go-back-N {go_back_n:?}"
    );
}

/// A READ among WRITEs, on a lossy link: a READ request after a gap is
/// not held (its response must come from executing it in order), so the
/// replay stops before it, the gap there is NAK'd, and the requester
/// resends it; the READ returns what the WRITE before it wrote, and the
/// WRITE after it lands whole.
#[test]
fn a_read_behind_a_gap_is_resent_and_answered_in_order() {
    const SINK_VA: u64 = 0x5_0000_0000;
    for_seeds("selective_read_behind_gap", 40, |seed| {
        let mut p = pair(seed, true, true, Faults::none(), random_loss(seed, 0.03));
        let sink = p.sim.nodes[0].reg(PD, SINK_VA, vec![0; LEN], AccessFlags::LOCAL_WRITE);
        let ctx = format!("seed {seed}");
        p.post(0, false);
        let read = send_wr(
            50,
            SendOp::RdmaRead {
                remote_addr: TGT_VA,
                rkey: p.tgt.raw(),
            },
            SendData::Sges(vec![sge(SINK_VA, LEN as u32, sink)]),
        );
        p.sim.nodes[0].ep.post_send(p.qa, read).unwrap();
        p.post(1, false);
        let qa = p.qa;
        p.sim.run_until("all three complete", |s| {
            s.nodes[0].count_wcs(qa, WorkQueue::Send) == 3
        });
        let got: Vec<(u64, WcStatus)> = p.sim.nodes[0]
            .wcs_of(qa, WorkQueue::Send)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, WcStatus::Success),
                (50, WcStatus::Success),
                (1, WcStatus::Success)
            ],
            "{ctx}"
        );
        assert_eq!(
            p.sim.nodes[0].bytes(sink),
            &p.sim.nodes[0].bytes(p.src)[..LEN],
            "{ctx}: the READ saw the WRITE before it"
        );
        assert_eq!(
            p.sim.nodes[1].bytes(p.tgt)[..2 * LEN],
            p.sim.nodes[0].bytes(p.src)[..2 * LEN],
            "{ctx}: both WRITEs"
        );
    });
}
