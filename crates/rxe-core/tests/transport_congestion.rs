//! Congestion control end to end over the simulator (tests/sim): ECN CE
//! marks make the receiving QP send CNPs, the sending QP's DCQCN rate
//! drops and recovers, with nothing lost and every byte checked; two flows
//! through a switch port that marks above a queue threshold settle on
//! fair shares. `RXE_CC_PLOT=FILE.svg` writes the two flows' rates over
//! time (docs/congestion.md shows one).

mod sim;

use std::time::Duration;

use rxe_core::transport::{
    AccessFlags, CongestionConfig, Counter, DcqcnParams, Instant, Key, QpType, SendData, SendOp,
    WcStatus, WorkQueue,
};
use sim::*;

const PD: u32 = 1;
const MSG: u32 = 64 * 1024;
/// WRITEs each flow keeps outstanding.
const DEPTH: usize = 4;
const LINE_MBPS: u32 = 4_000;

fn cc() -> CongestionConfig {
    CongestionConfig {
        dcqcn: DcqcnParams {
            max_rate_mbps: LINE_MBPS,
            ..DcqcnParams::default()
        },
        ..CongestionConfig::default()
    }
}

/// One RC flow: WRITEs of `MSG` bytes from node `from` to node `to`, a
/// source region of seeded bytes and a target region per flow.
struct Flow {
    from: usize,
    to: usize,
    qp: u32,
    src: Key,
    src_va: u64,
    tgt: Key,
    tgt_va: u64,
    posted: u64,
    /// Bytes completed, sampled per period.
    done_bytes: u64,
    active: bool,
}

fn flow(sim: &mut Sim, i: usize, from: usize, to: usize) -> Flow {
    let (qp, _) = connect(sim, from, to, &ConnOpts::new(QpType::Rc));
    let src_va = 0x1_0000_0000 * (i as u64 + 1);
    let tgt_va = 0x10_0000_0000 * (i as u64 + 1);
    let data = sim.rng.bytes(MSG as usize);
    let src = sim.nodes[from].reg(PD, src_va, data, AccessFlags::empty());
    let tgt = sim.nodes[to].reg(
        PD,
        tgt_va,
        vec![0; MSG as usize],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    Flow {
        from,
        to,
        qp,
        src,
        src_va,
        tgt,
        tgt_va,
        posted: 0,
        done_bytes: 0,
        active: true,
    }
}

impl Flow {
    /// Keeps `DEPTH` WRITEs outstanding while active.
    fn top_up(&mut self, sim: &mut Sim) {
        let done = sim.nodes[self.from].count_wcs(self.qp, WorkQueue::Send) as u64;
        self.done_bytes = done * u64::from(MSG);
        while self.active && self.posted - done < DEPTH as u64 {
            let wr = send_wr(
                self.posted,
                SendOp::RdmaWrite {
                    remote_addr: self.tgt_va,
                    rkey: self.tgt.raw(),
                },
                SendData::Sges(vec![sge(self.src_va, MSG, self.src)]),
            );
            sim.nodes[self.from]
                .ep
                .post_send(self.qp, wr)
                .expect("post_send");
            self.posted += 1;
        }
    }

    /// Every WRITE completed with success and the target holds the source.
    fn check(&self, sim: &Sim) {
        let wcs = sim.nodes[self.from].wcs_of(self.qp, WorkQueue::Send);
        assert_eq!(wcs.len() as u64, self.posted, "every WRITE completed");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..self.posted).collect::<Vec<_>>(), "in order");
        assert_eq!(
            sim.nodes[self.to].bytes(self.tgt),
            sim.nodes[self.from].bytes(self.src),
            "the target holds the source's bytes"
        );
    }
}

fn sim_with(seed: u64, nodes: usize, faults: Faults, cc: CongestionConfig) -> Sim {
    let mut sim = Sim::new(seed, nodes, faults);
    for n in &mut sim.nodes {
        n.ep.set_congestion(cc);
    }
    sim.limits.max_steps = 20_000_000;
    sim
}

fn counter(sim: &Sim, node: usize, c: Counter) -> u64 {
    sim.nodes[node].ep.counters().get(c)
}

fn no_loss_no_retry(sim: &Sim) {
    let s = sim.net.stats;
    assert_eq!(
        (s.lost_random, s.lost_filter, s.lost_cut, s.bad_icrc),
        (0, 0, 0, 0)
    );
    for i in 0..sim.nodes.len() {
        assert_eq!(counter(sim, i, Counter::CompleterRetryErr), 0, "node {i}");
        assert_eq!(counter(sim, i, Counter::DuplicateRequest), 0, "node {i}");
    }
}

#[test]
fn ce_marks_lower_the_rate_which_recovers_without_loss() {
    let mut sim = sim_with(7, 2, Faults::none(), cc());
    let mut f = flow(&mut sim, 0, 0, 1);
    // 5 ms of marks on 10% of packets, then a clean network until the
    // rate is back at line rate (DCQCN's additive and hyper increase take
    // a while: bounded by 2 s of simulated time).
    sim.net.faults.ce_mark = 0.1;
    let mut lowest = f64::from(LINE_MBPS);
    for _ in 0..500 {
        f.top_up(&mut sim);
        sim.run_for(Duration::from_micros(10));
        if let Some(r) = sim.nodes[0].ep.qp_rate_mbps(f.qp, sim.now) {
            lowest = lowest.min(r);
        }
    }
    sim.net.faults.ce_mark = 0.0;
    let limited_at_end_of_marks = sim.nodes[0].ep.qp_rate_mbps(f.qp, sim.now).is_some();
    let marks_end = sim.now;
    while sim.nodes[0].ep.qp_rate_mbps(f.qp, sim.now).is_some()
        && sim.now.saturating_since(marks_end) < Duration::from_secs(2)
    {
        f.top_up(&mut sim);
        sim.run_for(Duration::from_micros(100));
    }
    eprintln!(
        "recovered to line rate {:?} after the marks stopped",
        sim.now.saturating_since(marks_end)
    );
    f.active = false;
    sim.run_until("the last WRITEs complete", |s| {
        s.nodes[0].count_wcs(f.qp, WorkQueue::Send) as u64 == f.posted
    });
    eprintln!(
        "marks {} cnps {} handled {} reductions {} lowest {lowest:.0} Mb/s",
        sim.net.stats.ce_marked,
        counter(&sim, 1, Counter::NpCnpSent),
        counter(&sim, 0, Counter::RpCnpHandled),
        counter(&sim, 0, Counter::RpRateReductions)
    );
    assert!(sim.net.stats.ce_marked > 0);
    assert!(counter(&sim, 1, Counter::NpEcnMarkedPackets) > 0);
    assert!(counter(&sim, 1, Counter::NpCnpSent) > 0);
    assert!(counter(&sim, 0, Counter::RpCnpHandled) > 0);
    assert!(counter(&sim, 0, Counter::RpRateReductions) > 0);
    assert!(limited_at_end_of_marks, "the QP was paced while marked");
    assert!(
        lowest < f64::from(LINE_MBPS) / 2.0,
        "the rate went down: lowest {lowest} Mb/s"
    );
    assert_eq!(
        sim.nodes[0].ep.qp_rate_mbps(f.qp, sim.now),
        None,
        "back at line rate after the marks stopped"
    );
    no_loss_no_retry(&sim);
    f.check(&sim);
}

/// The same traffic with congestion control on and off: without marks
/// the runs are identical, packet for packet (no pacing, no CNP).
#[test]
fn without_marks_nothing_is_paced() {
    let run = |cc: CongestionConfig| {
        let mut sim = sim_with(11, 2, Faults::none(), cc);
        let mut f = flow(&mut sim, 0, 0, 1);
        for _ in 0..50 {
            f.top_up(&mut sim);
            sim.run_for(Duration::from_micros(100));
            assert_eq!(sim.nodes[0].ep.qp_rate_mbps(f.qp, sim.now), None);
        }
        f.active = false;
        sim.run_until_idle();
        f.check(&sim);
        for c in [
            Counter::NpCnpSent,
            Counter::RpCnpHandled,
            Counter::RpRateReductions,
        ] {
            assert_eq!(counter(&sim, 0, c) + counter(&sim, 1, c), 0, "{c}");
        }
        (sim.trace, sim.now, f.posted)
    };
    let on = run(cc());
    let off = run(CongestionConfig::off());
    assert!(on.2 > 20);
    assert_eq!(on, off);
}

/// Rates sampled every `SAMPLE`: (time in ms, [flow 0 Mb/s, flow 1 Mb/s]).
type Samples = Vec<(f64, [f64; 2])>;
const SAMPLE: Duration = Duration::from_millis(1);

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * q)
}

#[test]
fn two_flows_through_a_marking_bottleneck_converge_to_fair_shares() {
    const BOTTLENECK_MBPS: f64 = 1_000.0;
    let faults = Faults {
        bottleneck: Some(Bottleneck {
            to: 2,
            rate_mbps: BOTTLENECK_MBPS,
            mark_above: Duration::from_micros(20),
            drop_above: Duration::MAX,
        }),
        ..Faults::none()
    };
    let mut sim = sim_with(3, 3, faults, cc());
    sim.enable_log();
    let mut flows = [flow(&mut sim, 0, 0, 2), flow(&mut sim, 1, 1, 2)];
    flows[1].active = false;
    let mut samples: Samples = Vec::new();
    let mut seen = 0;
    let total_ms = 300;
    for ms in 0..total_ms {
        // Flow 1 joins at 50 ms, when flow 0 has the link to itself.
        if ms == 50 {
            flows[1].active = true;
        }
        for _ in 0..10 {
            for f in flows.iter_mut() {
                f.top_up(&mut sim);
            }
            sim.run_for(SAMPLE / 10);
        }
        // Each flow's rate: the payload the receiver got from it.
        let mut bytes = [0usize; 2];
        for e in &sim.log()[seen..] {
            if e.fate == Fate::Delivered && e.info.to == 2 && e.info.from < 2 {
                bytes[e.info.from] += e.info.payload_len;
            }
        }
        seen = sim.log().len();
        let rates = bytes.map(|b| b as f64 * 8.0 / SAMPLE.as_secs_f64() / 1e6);
        samples.push((sim.elapsed().as_secs_f64() * 1e3, rates));
    }
    for f in flows.iter_mut() {
        f.active = false;
    }
    sim.run_until("the last WRITEs complete", |s| {
        flows
            .iter()
            .all(|f| s.nodes[f.from].count_wcs(f.qp, WorkQueue::Send) as u64 == f.posted)
    });
    if let Some(path) = std::env::var_os("RXE_CC_PLOT") {
        std::fs::write(&path, svg(&samples, BOTTLENECK_MBPS)).expect("write the plot");
    }
    // The last 100 ms: both flows share the link, fairly, and fill it.
    let tail: Vec<_> = samples[samples.len() - 100..].to_vec();
    let mean = |i: usize| tail.iter().map(|(_, r)| r[i]).sum::<f64>() / tail.len() as f64;
    let (a, b) = (mean(0), mean(1));
    let fairness = jain(&[a, b]);
    eprintln!(
        "fair shares: flow 0 {a:.0} Mb/s, flow 1 {b:.0} Mb/s, Jain {fairness:.3}, \
         link {:.0}% used, max queue {:?}, CE marks {}",
        (a + b) / BOTTLENECK_MBPS * 100.0,
        sim.net.stats.max_queue_delay,
        sim.net.stats.ce_marked
    );
    assert!(fairness > 0.95, "Jain's index {fairness}: {a} vs {b} Mb/s");
    assert!(a + b > 0.8 * BOTTLENECK_MBPS, "the link is used: {a} + {b}");
    // Both senders were told and reacted; the receiver sent the CNPs.
    assert!(counter(&sim, 2, Counter::NpCnpSent) > 0);
    for f in &flows {
        assert!(counter(&sim, f.from, Counter::RpRateReductions) > 0);
    }
    // The queue stayed bounded: DCQCN, not the window, held it.
    assert!(sim.net.stats.max_queue_delay < Duration::from_millis(5));
    no_loss_no_retry(&sim);
    for f in &flows {
        f.check(&sim);
    }
}

/// A small SVG line chart of the two flows' rates.
fn svg(samples: &Samples, link_mbps: f64) -> String {
    let (w, h, left, bottom) = (720.0, 360.0, 60.0, 40.0);
    let t_max = samples.last().map_or(1.0, |s| s.0);
    let y_max = link_mbps * 1.5;
    let x = |t: f64| left + t / t_max * (w - left - 20.0);
    let y = |r: f64| h - bottom - r.min(y_max) / y_max * (h - bottom - 20.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for i in 0..=3 {
        let r = y_max * f64::from(i) / 3.0;
        let (x2, yy, tx, ty) = (w - 20.0, y(r), left - 4.0, y(r) + 4.0);
        out += &format!(
            "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{r:.0}</text>\n"
        );
    }
    let (x2, yh) = (w - 20.0, y(link_mbps / 2.0));
    out += &format!(
        "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{yh:.1}\" y2=\"{yh:.1}\" stroke=\"#999\" \
         stroke-dasharray=\"4 3\"/>\n"
    );
    for (i, color) in [(0, "#1f77b4"), (1, "#d62728")] {
        let pts: Vec<String> = samples
            .iter()
            .map(|(t, r)| format!("{:.1},{:.1}", x(*t), y(r[i])))
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">flow {i}</text>\n",
            w - 80.0,
            20.0 + 16.0 * i as f64
        );
    }
    out += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (ms)</text>\n\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">\
         Mb/s (dashed: half the {link_mbps:.0} Mb/s link)</text>\n",
        (w + left) / 2.0,
        h - 8.0,
        h / 2.0,
        h / 2.0
    );
    for i in 0..=5 {
        let t = t_max * f64::from(i) / 5.0;
        out += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{t:.0}</text>\n",
            x(t),
            h - bottom + 16.0
        );
    }
    out + "</svg>\n"
}

#[test]
fn a_cnp_for_a_ud_qp_or_an_unknown_qpn_is_ignored() {
    let mut sim = sim_with(5, 2, Faults::none(), cc());
    let ud = create_ud(&mut sim, 0, QpType::Ud, PD, 0x1111, 0);
    let av = sim.nodes[0].av();
    for qpn in [ud, 0x4242] {
        let bth = rxe_core::wire::BthRepr {
            opcode: rxe_core::wire::Opcode::CNP,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: qpn,
            ack_req: false,
            psn: 0,
        };
        let t = rxe_core::wire::TransportRepr::new(bth, Default::default(), 16);
        let mut buf = vec![0; t.buffer_len().unwrap()];
        t.emit(&mut buf, &[0; 16]).unwrap();
        sim.send_transport(1, &av, 0x99, &buf);
    }
    sim.run_until_idle();
    assert_eq!(counter(&sim, 0, Counter::RpCnpIgnored), 2);
    assert_eq!(counter(&sim, 0, Counter::RpCnpHandled), 0);
    let _ = Instant::ZERO;
}
