//! Bounded soak runs, `#[ignore]`d (they take minutes): `scripts/soak.sh`
//! runs them in release mode.
//!
//! - `soak_traffic`: 100 RC QP pairs between two devices (127.0.0.160 and
//!   127.0.0.161) through a seeded lossy relay (127.0.0.162 and
//!   127.0.0.163, `rxe_integration::lossy_relay`: loss and duplication),
//!   each QP cycling SEND, RDMA WRITE, RDMA READ and an atomic
//!   (fetch-and-add and compare-and-swap in turn), every byte and every
//!   atomic result checked, for `RXE_SOAK_SECS` seconds (default 600). The
//!   process's RSS is sampled every 10 s; after the warm-up (the first
//!   third of the run, at most 60 s) it may not grow more than
//!   `TRAFFIC_RSS_GROWTH_MAX` (16 MiB) above the warm-up sample.
//! - `soak_create_destroy`: `RXE_SOAK_CYCLES` (default 100 000) cycles of
//!   creating and destroying a PD, an MR, a CQ and an RC QP on one device
//!   (127.0.0.164); RSS sampled every 10 000 cycles, the same bound after
//!   the first 10 000, within `CYCLE_RSS_GROWTH_MAX` (2 MiB).
//!
//! Each prints one `soak:` line per sample and a summary line, which the
//! script and docs/security.md quote.

#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rxe_core::Gid;
use rxe_integration::lossy_relay::{Faults, LossyRelay};
use rxe_integration::verbs_harness::{all_access, connect, Node};
use rxe_verbs::{
    Cq, Mr, QpCap, QpInitAttr, QpType, RecvWr, SendData, SendOp, SendWr, WcStatus, WorkCompletion,
};

/// How much the RSS may grow after the warm-up before the traffic soak
/// fails: the regions and queues are allocated before it, so what grows
/// later is a leak (socket buffers and allocator slack stay well below).
const TRAFFIC_RSS_GROWTH_MAX: u64 = 16 << 20;
/// The same for the create/destroy cycles: 90 000 cycles after the
/// warm-up, so a leak of 24 bytes a cycle crosses it.
const CYCLE_RSS_GROWTH_MAX: u64 = 2 << 20;
const LANES: usize = 100;
/// Each lane's part of both regions: data at 0, the WRITE/READ area at
/// 4096, the atomic word at 8192.
const SLOT: usize = 16384;
const DATA: usize = 0;
const RDMA: usize = 4096;
const WORD: usize = 8192;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's resident set size, from /proc/self/status.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// xorshift64: the workload's sizes and operands, from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let s = seed.to_le_bytes();
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ s[i % 8].wrapping_add((i / 8) as u8))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Send,
    Write,
    Read,
    Atomic,
}

/// One QP pair and where it is in its cycle.
struct Lane {
    qa: rxe_verbs::Qp,
    qb: rxe_verbs::Qp,
    step: Step,
    /// Completions the step still waits for.
    pending: u8,
    len: usize,
    seed: u64,
    /// The value of the lane's atomic word at B.
    word: u64,
    /// The operand of the atomic in flight: (is compare-and-swap, value).
    op: (bool, u64),
    iter: u64,
}

struct Traffic {
    a: Node,
    b: Node,
    amr: Mr,
    bmr: Mr,
    lanes: Vec<Lane>,
    rng: Rng,
    ops: u64,
    bytes: u64,
}

fn wr(wr_id: u64, op: SendOp, sge: rxe_verbs::Sge) -> SendWr {
    SendWr {
        wr_id,
        op,
        data: SendData::Sges(vec![sge]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

impl Traffic {
    fn post_recv(&self, i: usize) {
        let wr = RecvWr {
            wr_id: i as u64,
            sg_list: [self.bmr.sge(i * SLOT + DATA, 4096)].into(),
        };
        self.lanes[i].qb.post_recv(wr).expect("post_recv");
    }

    /// Posts lane `i`'s current step.
    fn start(&mut self, i: usize) {
        let (a_base, b_base) = (i * SLOT, i * SLOT);
        let b_addr = self.bmr.addr() + b_base as u64;
        let rkey = self.bmr.rkey();
        let r = self.rng.next();
        let l = &mut self.lanes[i];
        let id = i as u64;
        match l.step {
            Step::Send => {
                // 1 byte to four packets of the 1024-byte MTU.
                l.len = 1 + (r % 4096) as usize;
                l.seed = r;
                self.amr
                    .write(a_base + DATA, &pattern(l.len, l.seed))
                    .unwrap();
                l.pending = 2;
                let sge = self.amr.sge(a_base + DATA, l.len as u32);
                l.qa.post_send(wr(id, SendOp::Send, sge)).expect("send");
            }
            Step::Write => {
                l.len = 1 + (r % 4096) as usize;
                l.seed = r.rotate_left(17);
                self.amr
                    .write(a_base + DATA, &pattern(l.len, l.seed))
                    .unwrap();
                l.pending = 1;
                let sge = self.amr.sge(a_base + DATA, l.len as u32);
                let op = SendOp::RdmaWrite {
                    remote_addr: b_addr + RDMA as u64,
                    rkey,
                };
                l.qa.post_send(wr(id, op, sge)).expect("write");
            }
            Step::Read => {
                // Overwrite the landing area first, so a READ that wrote
                // nothing cannot pass.
                self.amr.write(a_base + RDMA, &vec![0xee; l.len]).unwrap();
                l.pending = 1;
                let sge = self.amr.sge(a_base + RDMA, l.len as u32);
                let op = SendOp::RdmaRead {
                    remote_addr: b_addr + RDMA as u64,
                    rkey,
                };
                l.qa.post_send(wr(id, op, sge)).expect("read");
            }
            Step::Atomic => {
                self.amr.write(a_base + WORD, &[0xee; 8]).unwrap();
                l.pending = 1;
                let sge = self.amr.sge(a_base + WORD, 8);
                let remote_addr = b_addr + WORD as u64;
                let op = if l.iter % 2 == 0 {
                    l.op = (false, r);
                    SendOp::FetchAdd {
                        remote_addr,
                        add: r,
                        rkey,
                    }
                } else {
                    l.op = (true, r);
                    SendOp::CmpSwap {
                        remote_addr,
                        compare: l.word,
                        swap: r,
                        rkey,
                    }
                };
                l.qa.post_send(wr(id, op, sge)).expect("atomic");
            }
        }
    }

    /// A completion of lane `wc.wr_id` (`at_b`: a receive at B).
    fn complete(&mut self, wc: &WorkCompletion, at_b: bool) {
        let i = wc.wr_id as usize;
        assert_eq!(wc.status, WcStatus::Success, "lane {i}: {wc:?}");
        let base = i * SLOT;
        let l = &mut self.lanes[i];
        let mut got = vec![0u8; l.len];
        match (l.step, at_b) {
            (Step::Send, true) => {
                assert_eq!(wc.byte_len as usize, l.len, "lane {i}: SEND length");
                self.bmr.read(base + DATA, &mut got).unwrap();
                assert!(got == pattern(l.len, l.seed), "lane {i}: SEND data");
                self.bytes += l.len as u64;
                // The next SEND's receive (the one after it needs the
                // buffer checked first, as here).
                let wr = RecvWr {
                    wr_id: i as u64,
                    sg_list: [self.bmr.sge(base + DATA, 4096)].into(),
                };
                l.qb.post_recv(wr).expect("post_recv");
            }
            (Step::Send, false) => {}
            (Step::Write, false) => {
                self.bmr.read(base + RDMA, &mut got).unwrap();
                assert!(got == pattern(l.len, l.seed), "lane {i}: WRITE data");
                self.bytes += l.len as u64;
            }
            (Step::Read, false) => {
                self.amr.read(base + RDMA, &mut got).unwrap();
                assert!(got == pattern(l.len, l.seed), "lane {i}: READ data");
                self.bytes += l.len as u64;
            }
            (Step::Atomic, false) => {
                let mut old = [0u8; 8];
                self.amr.read(base + WORD, &mut old).unwrap();
                assert_eq!(u64::from_ne_bytes(old), l.word, "lane {i}: atomic result");
                l.word = match l.op {
                    (false, add) => l.word.wrapping_add(add),
                    (true, swap) => swap,
                };
                let mut now = [0u8; 8];
                self.bmr.read(base + WORD, &mut now).unwrap();
                assert_eq!(u64::from_ne_bytes(now), l.word, "lane {i}: atomic target");
            }
            (step, b) => panic!("lane {i}: completion at_b={b} in step {step:?}: {wc:?}"),
        }
        l.pending -= 1;
        if l.pending > 0 {
            return;
        }
        self.ops += 1;
        l.step = match l.step {
            Step::Send => Step::Write,
            Step::Write => Step::Read,
            Step::Read => Step::Atomic,
            Step::Atomic => {
                l.iter += 1;
                Step::Send
            }
        };
        self.start(i);
    }
}

/// Polls `cq` into `out`; true if anything came.
fn poll(cq: &Cq, out: &mut Vec<WorkCompletion>) -> bool {
    out.clear();
    cq.poll_into(64, out).expect("poll") > 0
}

struct RssWatch {
    bound: u64,
    start: Instant,
    warmup: Duration,
    baseline: Option<u64>,
    peak: u64,
    samples: Vec<(u64, u64)>,
}

impl RssWatch {
    fn new(warmup: Duration, bound: u64) -> RssWatch {
        RssWatch {
            bound,
            start: Instant::now(),
            warmup,
            baseline: None,
            peak: 0,
            samples: Vec::new(),
        }
    }

    /// Records a sample; fails if it is more than the bound above the
    /// warm-up sample.
    fn sample(&mut self, what: &str) {
        let t = self.start.elapsed();
        let r = rss();
        self.samples.push((t.as_secs(), r));
        if self.baseline.is_none() && t >= self.warmup {
            self.baseline = Some(r);
        }
        if let Some(b) = self.baseline {
            self.peak = self.peak.max(r);
            assert!(
                r <= b + self.bound,
                "RSS grew from {b} to {r} bytes after the warm-up ({what})"
            );
        }
        println!("soak: t={:>4}s rss={:>6} KiB {what}", t.as_secs(), r / 1024);
    }
}

#[test]
#[ignore = "minutes long: scripts/soak.sh runs it"]
fn soak_traffic() {
    let secs = env_u64("RXE_SOAK_SECS", 600);
    let loss = env_f64("RXE_SOAK_LOSS", 0.01);
    let dup = env_f64("RXE_SOAK_DUP", 0.002);
    let seed = env_u64("RXE_SOAK_SEED", 1);
    let (ia, ib, ra, rb) = (
        ip("127.0.0.160"),
        ip("127.0.0.161"),
        ip("127.0.0.162"),
        ip("127.0.0.163"),
    );
    let relay = LossyRelay::start(
        ia,
        ib,
        ra,
        rb,
        Faults {
            loss,
            duplicate: dup,
            seed,
        },
    )
    .expect("relay");
    let a = Node::new("127.0.0.160");
    let b = Node::new("127.0.0.161");
    let amr = a.pd.reg_mr_zeroed(LANES * SLOT, all_access()).unwrap();
    let bmr = b.pd.reg_mr_zeroed(LANES * SLOT, all_access()).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = |n: &Node| {
        n.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &n.cq,
            recv_cq: &n.cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .expect("qp")
    };
    let mut lanes = Vec::new();
    for i in 0..LANES {
        let (qa, qb) = (qp(&a), qp(&b));
        let (pa, pb) = (0x1000 + i as u32 * 7, 0x80_0000 + i as u32 * 13);
        // Each side is connected to the relay's address that faces it.
        connect(&qa, qb.qp_num(), Gid::from(ra), pa, pb);
        connect(&qb, qa.qp_num(), Gid::from(rb), pb, pa);
        lanes.push(Lane {
            qa,
            qb,
            step: Step::Send,
            pending: 0,
            len: 0,
            seed: 0,
            word: 0,
            op: (false, 0),
            iter: 0,
        });
    }
    let mut t = Traffic {
        a,
        b,
        amr,
        bmr,
        lanes,
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        ops: 0,
        bytes: 0,
    };
    for i in 0..LANES {
        t.post_recv(i);
        t.start(i);
    }
    let run = Duration::from_secs(secs);
    let mut watch = RssWatch::new(
        (run / 3).min(Duration::from_secs(60)),
        TRAFFIC_RSS_GROWTH_MAX,
    );
    let mut next_sample = Instant::now();
    let mut last_progress = (Instant::now(), 0u64);
    let mut wcs = Vec::with_capacity(64);
    let deadline = Instant::now() + run;
    while Instant::now() < deadline {
        let mut any = false;
        if poll(&t.a.cq, &mut wcs) {
            any = true;
            for wc in wcs.clone() {
                t.complete(&wc, false);
            }
        }
        if poll(&t.b.cq, &mut wcs) {
            any = true;
            for wc in wcs.clone() {
                t.complete(&wc, true);
            }
        }
        if !any {
            std::thread::sleep(Duration::from_micros(50));
        }
        if t.ops != last_progress.1 {
            last_progress = (Instant::now(), t.ops);
        }
        assert!(
            last_progress.0.elapsed() < Duration::from_secs(30),
            "no operation completed for 30 s (ops {})",
            t.ops
        );
        if Instant::now() >= next_sample {
            let s = &relay.stats;
            use std::sync::atomic::Ordering::Relaxed;
            let what = format!(
                "ops={} bytes={} relay: forwarded={} dropped={} duplicated={} bad_icrc={}",
                t.ops,
                t.bytes,
                s.forwarded.load(Relaxed),
                s.dropped.load(Relaxed),
                s.duplicated.load(Relaxed),
                s.bad_icrc.load(Relaxed)
            );
            watch.sample(&what);
            next_sample += Duration::from_secs(10);
        }
    }
    watch.sample("end");
    use std::sync::atomic::Ordering::Relaxed;
    let dropped = relay.stats.dropped.load(Relaxed);
    assert!(dropped > 0 || loss == 0.0, "the relay dropped nothing");
    assert_eq!(
        relay.stats.bad_icrc.load(Relaxed),
        0,
        "bad ICRC at the relay"
    );
    let retries = t.a.dev.counter("completer_retry_err") + t.b.dev.counter("completer_retry_err");
    let base = watch.baseline.unwrap_or(0);
    println!(
        "soak: traffic {secs} s, {LANES} QPs, loss {loss} dup {dup} seed {seed}: {} ops, {} bytes \
         checked, {dropped} packets dropped, {retries} retransmits; RSS after warm-up {} KiB, \
         peak {} KiB (bound +{} KiB)",
        t.ops,
        t.bytes,
        base / 1024,
        watch.peak / 1024,
        TRAFFIC_RSS_GROWTH_MAX / 1024
    );
    assert!(t.ops >= LANES as u64, "only {} operations", t.ops);
}

#[test]
#[ignore = "minutes long: scripts/soak.sh runs it"]
fn soak_create_destroy() {
    let cycles = env_u64("RXE_SOAK_CYCLES", 100_000);
    let node = Node::new("127.0.0.164");
    let mut watch = RssWatch::new(Duration::ZERO, CYCLE_RSS_GROWTH_MAX);
    let started = Instant::now();
    // The warm-up is the first 10 000 cycles (or a tenth of a short run).
    let warm = (cycles / 10).clamp(1, 10_000);
    for c in 0..cycles {
        let pd = node.dev.alloc_pd().expect("pd");
        let mr = pd.reg_mr_zeroed(4096, all_access()).expect("mr");
        let cq = node.dev.create_cq(16).expect("cq");
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .expect("qp");
        qp.destroy().expect("destroy qp");
        mr.dereg().expect("dereg");
        cq.destroy().expect("destroy cq");
        pd.dealloc().expect("dealloc");
        let done = c + 1;
        if done == warm {
            watch.warmup = watch.start.elapsed();
        }
        if done % warm == 0 {
            watch.sample(&format!("cycles={done}"));
        }
    }
    let el = started.elapsed();
    println!(
        "soak: create/destroy {cycles} cycles of PD+MR+CQ+QP in {:.1} s ({:.1} us each); RSS \
         after warm-up {} KiB, peak {} KiB (bound +{} KiB)",
        el.as_secs_f64(),
        el.as_secs_f64() * 1e6 / cycles.max(1) as f64,
        watch.baseline.unwrap_or(0) / 1024,
        watch.peak / 1024,
        CYCLE_RSS_GROWTH_MAX / 1024
    );
}
