//! End-to-end scenarios of the transport engine over the simulated faulty
//! network (tests/sim): RC, UC and UD/GSI workloads, each over many seeds
//! (`RXE_SIM_SEEDS=n` to run more, `RXE_SIM_SEED=s` to rerun one).

mod sim;

use rxe_core::transport::{
    AccessFlags, Counter, Key, PathMtu, QpState, QpType, SendData, SendOp, SendWr, Sge, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WorkQueue, GSI_QKEY,
};
use rxe_core::wire::Opcode;
use sim::*;

const SEEDS: u64 = 3000;

/// Per-node allocator of virtual addresses for regions.
fn next_va(rng: &mut Rng, k: &mut u64) -> u64 {
    *k += 1;
    (*k << 32) | (rng.below(512) * 8)
}

/// A message length for path MTU `mtu`, at most `3 * mtu`, biased towards
/// the edges (0, 1, MTU-1, MTU, MTU+1, 2 MTU, 3 MTU).
fn msg_len(rng: &mut Rng, mtu: usize) -> usize {
    match rng.below(12) {
        0 => 0,
        1 => rng.usize(1, 8),
        2 => mtu - 1,
        3 => mtu,
        4 => mtu + 1,
        5 => 2 * mtu,
        6 => 3 * mtu,
        7 => rng.usize(1, 64),
        _ => rng.usize(1, 3 * mtu),
    }
}

/// Non-empty pieces of `len` (none for 0), up to `max`.
fn pieces(rng: &mut Rng, len: usize, max: usize) -> Vec<usize> {
    split(rng, len, max)
        .into_iter()
        .filter(|&p| p > 0)
        .collect()
}

/// A gather list of `len` bytes from random places of `src` (registered at
/// `va` with `key`), and the bytes it names; inline now and then.
fn gather(
    rng: &mut Rng,
    src: &[u8],
    va: u64,
    key: Key,
    len: usize,
    inline_ok: bool,
) -> (SendData, Vec<u8>) {
    let mut sges = Vec::new();
    let mut bytes = Vec::new();
    for p in pieces(rng, len, 4) {
        let off = rng.usize(0, src.len() - p);
        sges.push(sge(va + off as u64, p as u32, key));
        bytes.extend_from_slice(&src[off..off + p]);
    }
    if inline_ok && len <= 256 && rng.chance(0.2) {
        return (SendData::Inline(bytes.clone().into()), bytes);
    }
    (SendData::Sges(sges), bytes)
}

/// A scatter list over `slot_len` bytes at `slot_off` of a region at `va`:
/// up to 4 pieces, listed in random order. Returns the SGEs and the region
/// offsets they cover, in list order.
fn scatter_list(
    rng: &mut Rng,
    va: u64,
    key: Key,
    slot_off: usize,
    slot_len: usize,
) -> (Vec<Sge>, Vec<(usize, usize)>) {
    let mut ranges = Vec::new();
    let mut at = slot_off;
    for p in pieces(rng, slot_len, 4) {
        ranges.push((at, p));
        at += p;
    }
    rng.shuffle(&mut ranges);
    let sges = ranges
        .iter()
        .map(|&(o, l)| sge(va + o as u64, l as u32, key))
        .collect();
    (sges, ranges)
}

/// Writes `data` through a scatter list into `mem` (region offsets).
fn scatter(mem: &mut [u8], ranges: &[(usize, usize)], data: &[u8]) {
    let mut at = 0;
    for &(o, l) in ranges {
        if at >= data.len() {
            break;
        }
        let n = l.min(data.len() - at);
        mem[o..o + n].copy_from_slice(&data[at..at + n]);
        at += n;
    }
    assert_eq!(at, data.len(), "scatter list too short (test bug)");
}

fn gather_from(mem: &[u8], ranges: &[(usize, usize)], len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for &(o, l) in ranges {
        let n = l.min(len - out.len());
        out.extend_from_slice(&mem[o..o + n]);
        if out.len() == len {
            break;
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

/// The expected receive completion of one message.
#[derive(Debug, Clone)]
struct ExpRecv {
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
}

/// One direction of an RC (or UC) connection: the requester at node `r`
/// posts a random workload to the responder at node `s`, and a model says
/// what must come of it.
struct Flow {
    r: usize,
    qr: u32,
    s: usize,
    qs: u32,
    // Requester side.
    rd_key: Key,
    rd_model: Vec<u8>,
    ar_key: Key,
    ar_model: Vec<u8>,
    // Responder side.
    rb_key: Key,
    rb_model: Vec<u8>,
    wt_key: Key,
    wt_model: Vec<u8>,
    at_key: Key,
    at_model: Vec<u64>,
    at_init: Vec<u64>,
    adds: Vec<u64>,
    // Work.
    wrs: Vec<SendWr>,
    exp_send: Vec<(u64, WcOpcode)>,
    exp_recv: Vec<ExpRecv>,
    kinds: Vec<Kind>,
}

const PAT_RB: u8 = 0xa5;
const PAT_RD: u8 = 0x5a;
const PAT_AR: u8 = 0x77;
const COUNTERS: usize = 4;

impl Flow {
    /// Registers the regions and builds `n` random work requests.
    #[allow(clippy::too_many_arguments)]
    fn new(
        sim: &mut Sim,
        rng: &mut Rng,
        vas: &mut [u64],
        r: usize,
        qr: u32,
        s: usize,
        qs: u32,
        mtu: usize,
        n: usize,
        kinds: &[Kind],
        pd: u32,
    ) -> Flow {
        let max = 3 * mtu;
        let rw = AccessFlags::LOCAL_WRITE;
        // Requester: a source, a READ landing area, atomic results.
        let src = rng.bytes(4 * max);
        let src_va = next_va(rng, &mut vas[r]);
        let src_key = sim.nodes[r].reg(pd, src_va, src.clone(), AccessFlags::empty());
        let rd_model = vec![PAT_RD; n * max];
        let rd_va = next_va(rng, &mut vas[r]);
        let rd_key = sim.nodes[r].reg(pd, rd_va, rd_model.clone(), rw);
        let ar_model = vec![PAT_AR; n * 8];
        let ar_va = next_va(rng, &mut vas[r]);
        let ar_key = sim.nodes[r].reg(pd, ar_va, ar_model.clone(), rw);
        // Responder: receive buffers, a WRITE target, a READ source, counters.
        let rb_model = vec![PAT_RB; n * max];
        let rb_va = next_va(rng, &mut vas[s]);
        let rb_key = sim.nodes[s].reg(pd, rb_va, rb_model.clone(), rw);
        let wt_model = rng.bytes(2 * max + 64);
        let wt_va = next_va(rng, &mut vas[s]);
        let wt_key = sim.nodes[s].reg(pd, wt_va, wt_model.clone(), rw | AccessFlags::REMOTE_WRITE);
        let rs = rng.bytes(2 * max + 64);
        let rs_va = next_va(rng, &mut vas[s]);
        let rs_key = sim.nodes[s].reg(pd, rs_va, rs.clone(), AccessFlags::REMOTE_READ);
        let at_init: Vec<u64> = (0..COUNTERS)
            .map(|_| {
                if rng.chance(0.5) {
                    rng.below(100)
                } else {
                    rng.next_u64()
                }
            })
            .collect();
        let at_bytes: Vec<u8> = at_init.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let at_va = next_va(rng, &mut vas[s]);
        let at_key = sim.nodes[s].reg(pd, at_va, at_bytes, rw | AccessFlags::REMOTE_ATOMIC);

        let mut f = Flow {
            r,
            qr,
            s,
            qs,
            rd_key,
            rd_model,
            ar_key,
            ar_model,
            rb_key,
            rb_model,
            wt_key,
            wt_model,
            at_key,
            at_model: at_init.clone(),
            at_init,
            adds: vec![0; COUNTERS],
            wrs: Vec::new(),
            exp_send: Vec::new(),
            exp_recv: Vec::new(),
            kinds: Vec::new(),
        };
        let mut nrecv = 0usize;
        for i in 0..n {
            let kind = *rng.pick(kinds);
            let wr_id = ((r as u64) << 32) | i as u64;
            let len = msg_len(rng, mtu);
            let imm = rng.next_u32();
            let (op, data) = match kind {
                Kind::Send | Kind::SendImm | Kind::WriteImm => {
                    let (data, bytes) = gather(rng, &src, src_va, src_key, len, true);
                    // A receive for it, scattered over a slot of `max`.
                    let slot = nrecv * max;
                    let (sges, ranges) = scatter_list(rng, rb_va, rb_key, slot, max);
                    let rwr_id = ((s as u64) << 32) | 0x8000_0000 | nrecv as u64;
                    nrecv += 1;
                    sim.nodes[s]
                        .ep
                        .post_recv(qs, recv_wr(rwr_id, sges))
                        .expect("post_recv");
                    let (op, opcode, wimm) = match kind {
                        Kind::Send => (SendOp::Send, WcOpcode::Recv, None),
                        Kind::SendImm => (SendOp::SendWithImm { imm }, WcOpcode::Recv, Some(imm)),
                        _ => {
                            let off = rng.usize(0, f.wt_model.len() - len);
                            f.wt_model[off..off + len].copy_from_slice(&bytes);
                            (
                                SendOp::RdmaWriteWithImm {
                                    remote_addr: wt_va + off as u64,
                                    rkey: wt_key.raw(),
                                    imm,
                                },
                                WcOpcode::RecvRdmaWithImm,
                                Some(imm),
                            )
                        }
                    };
                    if kind != Kind::WriteImm {
                        scatter(&mut f.rb_model, &ranges, &bytes);
                    }
                    f.exp_recv.push(ExpRecv {
                        wr_id: rwr_id,
                        opcode,
                        byte_len: len as u32,
                        imm: wimm,
                    });
                    (op, data)
                }
                Kind::Write => {
                    let (data, bytes) = gather(rng, &src, src_va, src_key, len, true);
                    let off = rng.usize(0, f.wt_model.len() - len);
                    f.wt_model[off..off + len].copy_from_slice(&bytes);
                    (
                        SendOp::RdmaWrite {
                            remote_addr: wt_va + off as u64,
                            rkey: wt_key.raw(),
                        },
                        data,
                    )
                }
                Kind::Read => {
                    let off = rng.usize(0, rs.len() - len);
                    let (sges, ranges) = scatter_list(rng, rd_va, rd_key, i * max, len);
                    scatter(&mut f.rd_model, &ranges, &rs[off..off + len]);
                    (
                        SendOp::RdmaRead {
                            remote_addr: rs_va + off as u64,
                            rkey: rs_key.raw(),
                        },
                        SendData::Sges(sges),
                    )
                }
                Kind::CmpSwap | Kind::FetchAdd => {
                    let c = rng.usize(0, COUNTERS - 1);
                    let old = f.at_model[c];
                    let remote_addr = at_va + 8 * c as u64;
                    let op = if kind == Kind::FetchAdd {
                        let add = if rng.chance(0.8) {
                            rng.range(1, 1000)
                        } else {
                            rng.next_u64()
                        };
                        f.at_model[c] = old.wrapping_add(add);
                        f.adds[c] += 1;
                        SendOp::FetchAdd {
                            remote_addr,
                            rkey: at_key.raw(),
                            add,
                        }
                    } else {
                        let compare = if rng.chance(0.5) { old } else { rng.next_u64() };
                        let swap = rng.next_u64();
                        if old == compare {
                            f.at_model[c] = swap;
                        }
                        SendOp::CmpSwap {
                            remote_addr,
                            rkey: at_key.raw(),
                            compare,
                            swap,
                        }
                    };
                    f.ar_model[i * 8..i * 8 + 8].copy_from_slice(&old.to_ne_bytes());
                    (
                        op,
                        SendData::Sges(vec![sge(ar_va + 8 * i as u64, 8, ar_key)]),
                    )
                }
            };
            let signaled = i + 1 == n || rng.chance(0.85);
            if signaled {
                f.exp_send.push((wr_id, op.wc_opcode()));
            }
            f.kinds.push(kind);
            f.wrs.push(SendWr {
                wr_id,
                op,
                data,
                signaled,
                fence: rng.chance(0.1),
                solicited: rng.chance(0.2),
                ud: None,
            });
        }
        f
    }

    fn post(&self, sim: &mut Sim) {
        for wr in &self.wrs {
            sim.nodes[self.r]
                .ep
                .post_send(self.qr, wr.clone())
                .expect("post_send");
        }
    }

    fn done(&self, sim: &Sim) -> bool {
        sim.nodes[self.r].count_wcs(self.qr, WorkQueue::Send) >= self.exp_send.len()
            && sim.nodes[self.s].count_wcs(self.qs, WorkQueue::Recv) >= self.exp_recv.len()
    }

    /// Exactly once, in order, SUCCESS; memory exactly as modelled.
    fn check(&self, sim: &Sim, ctx: &str) {
        let got = sim.nodes[self.r].wcs_of(self.qr, WorkQueue::Send);
        let got_ids: Vec<(u64, WcStatus, WcOpcode)> =
            got.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
        let want: Vec<(u64, WcStatus, WcOpcode)> = self
            .exp_send
            .iter()
            .map(|&(id, op)| (id, WcStatus::Success, op))
            .collect();
        assert_eq!(
            got_ids, want,
            "{ctx}: send completions of QP {:#x} (kinds {:?})",
            self.qr, self.kinds
        );
        let got = sim.nodes[self.s].wcs_of(self.qs, WorkQueue::Recv);
        assert_eq!(
            got.len(),
            self.exp_recv.len(),
            "{ctx}: receive completions: {got:?}"
        );
        for (w, e) in got.iter().zip(&self.exp_recv) {
            let fields = (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data);
            assert_eq!(
                fields,
                (e.wr_id, WcStatus::Success, e.opcode, e.byte_len, e.imm),
                "{ctx}: receive completion {w:?}"
            );
            assert_eq!(w.qp_num, self.qs);
        }
        let rn = &sim.nodes[self.r];
        let sn = &sim.nodes[self.s];
        assert!(
            sn.bytes(self.rb_key) == &self.rb_model[..],
            "{ctx}: receive buffers differ at {:?}",
            first_diff(sn.bytes(self.rb_key), &self.rb_model)
        );
        assert!(
            sn.bytes(self.wt_key) == &self.wt_model[..],
            "{ctx}: WRITE target differs at {:?}",
            first_diff(sn.bytes(self.wt_key), &self.wt_model)
        );
        assert!(
            rn.bytes(self.rd_key) == &self.rd_model[..],
            "{ctx}: READ results differ at {:?}",
            first_diff(rn.bytes(self.rd_key), &self.rd_model)
        );
        let counters: Vec<u64> = sn
            .bytes(self.at_key)
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            counters, self.at_model,
            "{ctx}: atomic targets (initial {:?}, fetch-adds per counter {:?})",
            self.at_init, self.adds
        );
        assert!(
            rn.bytes(self.ar_key) == &self.ar_model[..],
            "{ctx}: atomic original values differ at {:?}",
            first_diff(rn.bytes(self.ar_key), &self.ar_model)
        );
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<(usize, u8, u8)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i, *x, *y))
}

const ALL_KINDS: [Kind; 7] = [
    Kind::Send,
    Kind::SendImm,
    Kind::Write,
    Kind::WriteImm,
    Kind::Read,
    Kind::CmpSwap,
    Kind::FetchAdd,
];

/// What the RC scenario saw over all seeds, to show that the cases it is
/// meant to exercise were exercised.
#[derive(Debug, Default)]
struct Coverage {
    seeds: u64,
    wrapped: u64,
    dup_atomic: u64,
    dup_read: u64,
    dup_request: u64,
    out_of_seq: u64,
    rcvd_seq_err: u64,
    retries: u64,
    bad_icrc: u64,
    packets: u64,
}

fn rc_seed(seed: u64, cov: &mut Coverage) {
    let mut rng = Rng::new(seed);
    let lossy = !rng.chance(0.1);
    let faults = if lossy {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mtu = *rng.pick(&[
        PathMtu::Mtu256,
        PathMtu::Mtu1024,
        PathMtu::Mtu1024,
        PathMtu::Mtu4096,
    ]);
    let mut o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    o.mtu = mtu;
    o.timeout = rng.range(10, 14) as u8;
    o.max_rd_atomic = rng.range(1, 8) as u8;
    o.max_dest_rd_atomic = o.max_rd_atomic + rng.range(0, 2) as u8;
    let mut sim = Sim::new(seed, 2, faults);
    sim.enable_log();
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let m = mtu.bytes() as usize;
    let mut vas = [0u64; 2];
    let n_ab = rng.usize(1, 40);
    let n_ba = if rng.chance(0.5) { rng.usize(1, 16) } else { 0 };
    let ab = Flow::new(
        &mut sim, &mut rng, &mut vas, 0, qa, 1, qb, m, n_ab, &ALL_KINDS, o.pd,
    );
    let ba = Flow::new(
        &mut sim, &mut rng, &mut vas, 1, qb, 0, qa, m, n_ba, &ALL_KINDS, o.pd,
    );
    let ctx = format!(
        "seed {seed}: mtu {m}, psn {:#x}/{:#x}, timeout {}, rd_atomic {}/{}, {} + {} WRs, faults {faults:?}",
        o.psn_a.value(), o.psn_b.value(), o.timeout, o.max_rd_atomic, o.max_dest_rd_atomic, n_ab, n_ba
    );
    ab.post(&mut sim);
    ba.post(&mut sim);
    sim.run_until(&format!("all completions ({ctx})"), |s| {
        ab.done(s) && ba.done(s)
    });
    sim.run_until_idle();
    ab.check(&sim, &ctx);
    ba.check(&sim, &ctx);
    for (n, q) in [(0, qa), (1, qb)] {
        assert_eq!(
            sim.nodes[n].state(q),
            QpState::Rts,
            "{ctx}: node {n} QP state"
        );
        assert!(
            sim.nodes[n].events.is_empty(),
            "{ctx}: events {:?}",
            sim.nodes[n].events
        );
    }

    // Coverage.
    cov.seeds += 1;
    let mut seen = std::collections::HashSet::new();
    for e in sim.log() {
        let i = e.info;
        if e.fate == Fate::Sent && i.opcode.info().is_some_and(|x| x.operation.is_request()) {
            let start = if i.from == 0 { o.psn_a } else { o.psn_b };
            if i.psn < start.value() {
                cov.wrapped += 1;
            }
        }
        if e.fate == Fate::Delivered && !seen.insert((i.to, i.psn, i.opcode)) {
            match i.opcode {
                Opcode::RC_FETCH_ADD | Opcode::RC_COMPARE_SWAP => cov.dup_atomic += 1,
                Opcode::RC_RDMA_READ_REQUEST => cov.dup_read += 1,
                _ => {}
            }
        }
    }
    for n in &sim.nodes {
        let c = n.ep.counters();
        cov.dup_request += c.get(Counter::DuplicateRequest);
        cov.out_of_seq += c.get(Counter::OutOfSeqRequest);
        cov.rcvd_seq_err += c.get(Counter::RcvdSeqErr);
        cov.retries += c.get(Counter::CompleterRetryErr);
    }
    cov.bad_icrc += sim.net.stats.bad_icrc;
    cov.packets += sim.net.stats.sent;
}

/// RC under loss, reordering, duplication and corruption: every work
/// request completes exactly once, in order, SUCCESS; receives complete in
/// order with the right length and immediate; memory holds exactly the
/// modelled bytes; atomics are applied exactly once.
#[test]
fn rc_exactly_once_in_order_under_faults() {
    let mut cov = Coverage::default();
    for_seeds("rc_exactly_once_in_order_under_faults", SEEDS, |seed| {
        rc_seed(seed, &mut cov)
    });
    eprintln!("coverage: {cov:?}");
    if cov.seeds >= 200 {
        assert!(cov.wrapped > 0, "no run wrapped its PSN: {cov:?}");
        assert!(cov.dup_atomic > 0, "no duplicate atomic: {cov:?}");
        assert!(cov.dup_read > 0, "no duplicate READ: {cov:?}");
        assert!(
            cov.dup_request > 0 && cov.out_of_seq > 0 && cov.rcvd_seq_err > 0,
            "{cov:?}"
        );
        assert!(cov.bad_icrc > 0, "{cov:?}");
    }
}

/// The same seed gives the same packet trace, completions and memory.
#[test]
fn rc_runs_are_deterministic() {
    for seed in [3u64, 17, 99] {
        let run = || {
            let mut cov = Coverage::default();
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rc_trace(seed, &mut cov)));
            r.expect("run")
        };
        let a = run();
        let b = run();
        assert_eq!(a, b, "seed {seed} is not deterministic");
    }
}

fn rc_trace(seed: u64, cov: &mut Coverage) -> (u64, u64, Vec<(u64, WorkCompletion)>) {
    // Same as rc_seed, but returns the trace.
    let mut rng = Rng::new(seed);
    let faults = Faults::lossy(&mut rng);
    let o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    let mut sim = Sim::new(seed, 2, faults);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let mut vas = [0u64; 2];
    let ab = Flow::new(
        &mut sim, &mut rng, &mut vas, 0, qa, 1, qb, 1024, 12, &ALL_KINDS, o.pd,
    );
    ab.post(&mut sim);
    sim.run_until("all completions", |s| ab.done(s));
    sim.run_until_idle();
    cov.seeds += 1;
    let wcs = sim
        .nodes
        .iter()
        .flat_map(|n| n.wcs.iter().map(|(t, w)| (t.as_nanos(), *w)))
        .collect();
    (sim.trace.0, sim.now.as_nanos(), wcs)
}

// ---------------------------------------------------------------------------
// UC

/// UC under loss: a message is delivered whole and correct or not at all;
/// the sender's completions are all SUCCESS.
#[test]
fn uc_whole_messages_or_nothing() {
    for_seeds("uc_whole_messages_or_nothing", SEEDS, uc_seed);
}

fn uc_seed(seed: u64) {
    let mut rng = Rng::new(seed);
    let lossy = !rng.chance(0.1);
    let faults = if lossy {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mtu = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024, PathMtu::Mtu4096]);
    let m = mtu.bytes() as usize;
    let max = 3 * m;
    let mut o = ConnOpts::new(QpType::Uc).random_psns(&mut rng);
    o.mtu = mtu;
    let mut sim = Sim::new(seed, 2, faults);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let ctx = format!(
        "seed {seed}: UC mtu {m}, psn {:#x}, faults {faults:?}",
        o.psn_a.value()
    );
    let n = rng.usize(1, 16);
    let lw = AccessFlags::LOCAL_WRITE;
    // Each message has its own source area, starting with its number.
    let mut src = rng.bytes(n * max);
    for i in 0..n {
        src[i * max..i * max + 4].copy_from_slice(&(i as u32).to_le_bytes());
    }
    let src_key = sim.nodes[0].reg(1, 0x1_0000_0000, src.clone(), AccessFlags::empty());
    let rb_key = sim.nodes[1].reg(1, 0x2_0000_0000, vec![0; n * max], lw);
    // Each WRITE has its own area, with a gap.
    let wt_len = n * (max + 64);
    let wt_key = sim.nodes[1].reg(
        1,
        0x3_0000_0000,
        vec![0; wt_len],
        lw | AccessFlags::REMOTE_WRITE,
    );
    let mut lens = Vec::new();
    let mut kinds = Vec::new();
    let mut recv_lists = Vec::new();
    let mut nrecv = 0;
    let mut exp_send = Vec::new();
    for i in 0..n {
        let kind = *rng.pick(&[Kind::Send, Kind::SendImm, Kind::Write, Kind::WriteImm]);
        let mut len = msg_len(&mut rng, m);
        if kind == Kind::Send {
            len = len.max(4);
        }
        let data = SendData::Sges(if len == 0 {
            vec![]
        } else {
            vec![sge(0x1_0000_0000 + (i * max) as u64, len as u32, src_key)]
        });
        let imm = i as u32
            | if kind == Kind::WriteImm {
                0x8000_0000
            } else {
                0
            };
        let wt = 0x3_0000_0000 + (i * (max + 64)) as u64;
        let op = match kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm },
            Kind::Write => SendOp::RdmaWrite {
                remote_addr: wt,
                rkey: wt_key.raw(),
            },
            _ => SendOp::RdmaWriteWithImm {
                remote_addr: wt,
                rkey: wt_key.raw(),
                imm,
            },
        };
        if kind != Kind::Write {
            let (sges, ranges) = scatter_list(&mut rng, 0x2_0000_0000, rb_key, nrecv * max, max);
            sim.nodes[1]
                .ep
                .post_recv(qb, recv_wr(nrecv as u64, sges))
                .expect("post_recv");
            recv_lists.push(ranges);
            nrecv += 1;
        }
        let signaled = i + 1 == n || rng.chance(0.8);
        if signaled {
            exp_send.push(i as u64);
        }
        lens.push(len);
        kinds.push(kind);
        let wr = SendWr {
            signaled,
            ..send_wr(i as u64, op, data)
        };
        sim.nodes[0].ep.post_send(qa, wr).expect("post_send");
    }
    sim.run_until_idle();
    // Sender: all SUCCESS, in order.
    let sent: Vec<(u64, WcStatus)> = sim.nodes[0]
        .wcs_of(qa, WorkQueue::Send)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    let want: Vec<(u64, WcStatus)> = exp_send.iter().map(|&i| (i, WcStatus::Success)).collect();
    assert_eq!(sent, want, "{ctx}: send completions");
    // Receiver: each completion one whole message, in increasing order.
    let recvs = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
    let rb = sim.nodes[1].bytes(rb_key).to_vec();
    let wt = sim.nodes[1].bytes(wt_key).to_vec();
    let mut last: Option<usize> = None;
    let mut delivered = vec![false; n];
    for (j, w) in recvs.iter().enumerate() {
        assert_eq!(w.status, WcStatus::Success, "{ctx}: receive {w:?}");
        assert_eq!(w.wr_id, j as u64, "{ctx}: receives complete in order");
        let k = match w.imm_data {
            Some(imm) => (imm & 0x7fff_ffff) as usize,
            None => {
                let got = gather_from(&rb, &recv_lists[j], 4);
                u32::from_le_bytes(got.try_into().unwrap()) as usize
            }
        };
        assert!(k < n, "{ctx}: receive {w:?} names no message");
        assert!(
            last.is_none_or(|l| k > l),
            "{ctx}: message {k} after {last:?}"
        );
        last = Some(k);
        delivered[k] = true;
        assert_eq!(
            w.byte_len as usize, lens[k],
            "{ctx}: byte_len of message {k} ({:?})",
            kinds[k]
        );
        let expected = &src[k * max..k * max + lens[k]];
        match kinds[k] {
            Kind::Send | Kind::SendImm => {
                assert_eq!(w.opcode, WcOpcode::Recv);
                assert!(
                    gather_from(&rb, &recv_lists[j], lens[k]) == expected,
                    "{ctx}: message {k} content"
                );
                if kinds[k] == Kind::SendImm {
                    assert_eq!(w.imm_data, Some(k as u32));
                }
            }
            Kind::WriteImm => {
                assert_eq!(w.opcode, WcOpcode::RecvRdmaWithImm);
                let at = k * (max + 64);
                assert!(
                    &wt[at..at + lens[k]] == expected,
                    "{ctx}: WRITE {k} content"
                );
            }
            _ => panic!("{ctx}: a receive completion for a plain WRITE ({w:?})"),
        }
    }
    // WRITE areas: each packet's bytes land whole or not at all; nothing
    // outside the areas changes.
    for k in 0..n {
        let at = k * (max + 64);
        let area = &wt[at..at + max + 64];
        if matches!(kinds[k], Kind::Write | Kind::WriteImm) {
            let expected = &src[k * max..k * max + lens[k]];
            for (c, chunk) in area[..lens[k]].chunks(m).enumerate() {
                let e = &expected[c * m..c * m + chunk.len()];
                assert!(
                    chunk == e || chunk.iter().all(|&b| b == 0),
                    "{ctx}: WRITE {k} packet {c} is partial or corrupt"
                );
            }
            assert!(
                area[lens[k]..].iter().all(|&b| b == 0),
                "{ctx}: WRITE {k} wrote past its end"
            );
        } else {
            assert!(
                area.iter().all(|&b| b == 0),
                "{ctx}: area {k} written by a non-WRITE"
            );
        }
    }
    if !lossy {
        let want: Vec<bool> = kinds.iter().map(|k| *k != Kind::Write).collect();
        assert_eq!(
            delivered, want,
            "{ctx}: a clean network delivers every message"
        );
    }
    assert_eq!(sim.nodes[0].state(qa), QpState::Rts);
    assert_eq!(sim.nodes[1].state(qb), QpState::Rts);
}

// ---------------------------------------------------------------------------
// UD and GSI

/// UD and GSI under loss: delivered datagrams are exact, with the GRH and
/// the source QP right; a wrong Q_Key is dropped and counted; a Q_Key with
/// the high bit set in the work request means the QP's own.
#[test]
fn ud_and_gsi_datagrams() {
    for_seeds("ud_and_gsi_datagrams", SEEDS, ud_seed);
}

fn ud_seed(seed: u64) {
    let mut rng = Rng::new(seed);
    let lossy = !rng.chance(0.1);
    let faults = if lossy {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let gsi = rng.chance(0.3);
    let (ty, qkey) = if gsi {
        (QpType::Gsi, GSI_QKEY)
    } else {
        (QpType::Ud, rng.next_u32() & 0x7fff_ffff)
    };
    let mut sim = Sim::new(seed, 3, faults);
    sim.enable_log();
    let ctx = format!("seed {seed}: {ty} qkey {qkey:#x}, faults {faults:?}");
    // Node 1 receives; nodes 0 and 2 send.
    let rq = create_ud(&mut sim, 1, ty, 1, qkey, 0);
    let senders = [
        (0usize, create_ud(&mut sim, 0, ty, 1, qkey, 0)),
        (2usize, create_ud(&mut sim, 2, ty, 1, qkey, 0)),
    ];
    let max = 1024 + rng.usize(0, 1) * 3072; // up to the port MTU (4096)
    let n_per = rng.usize(1, 12);
    let slot = 40 + max;
    let nrecv = 2 * n_per;
    let rb_key = sim.nodes[1].reg(
        1,
        0x1_0000_0000,
        vec![0xee; nrecv * slot],
        AccessFlags::LOCAL_WRITE,
    );
    let mut recv_lists = Vec::new();
    for j in 0..nrecv {
        let (sges, ranges) = scatter_list(&mut rng, 0x1_0000_0000, rb_key, j * slot, slot);
        sim.nodes[1]
            .ep
            .post_recv(rq, recv_wr(j as u64, sges))
            .expect("post_recv");
        recv_lists.push(ranges);
    }
    // Messages: (sender index, len, imm, good qkey, bytes).
    let mut msgs = Vec::new();
    for (si, &(node, qpn)) in senders.iter().enumerate() {
        let src_key = sim.nodes[node].reg(
            1,
            0x2_0000_0000,
            rng.bytes(n_per * max),
            AccessFlags::empty(),
        );
        for i in 0..n_per {
            let id = msgs.len() as u32;
            let len = rng.usize(4, max);
            let mut bytes = sim.nodes[node].bytes(src_key)[i * max..i * max + len].to_vec();
            bytes[..4].copy_from_slice(&id.to_le_bytes());
            let wrong = rng.chance(0.15);
            let remote_qkey = if wrong {
                // High bit clear: a set one would mean "the QP's own".
                (qkey ^ (1 + rng.below(0x7fff_fffe) as u32)) & 0x7fff_ffff
            } else if !gsi && rng.chance(0.3) {
                0x8000_0000 | rng.next_u32() // "use the QP's own"
            } else {
                qkey
            };
            let imm = rng.chance(0.5).then(|| rng.next_u32());
            let data = if len <= 256 && rng.chance(0.3) {
                SendData::Inline(bytes.clone().into())
            } else {
                sim.nodes[node].mem.bytes_mut(src_key).unwrap()[i * max..i * max + 4]
                    .copy_from_slice(&id.to_le_bytes());
                SendData::Sges(vec![sge(
                    0x2_0000_0000 + (i * max) as u64,
                    len as u32,
                    src_key,
                )])
            };
            let dest = UdDest {
                av: sim.nodes[1].av(),
                remote_qpn: rq,
                remote_qkey,
            };
            sim.nodes[node]
                .ep
                .post_send(qpn, ud_wr(id as u64, dest, imm, data))
                .expect("post_send");
            msgs.push((si, len, imm, !wrong, bytes));
        }
    }
    sim.run_until_idle();
    for &(node, qpn) in &senders {
        let wcs = sim.nodes[node].wcs_of(qpn, WorkQueue::Send);
        assert_eq!(wcs.len(), n_per, "{ctx}: send completions");
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "{ctx}: {wcs:?}"
        );
    }
    let recvs = sim.nodes[1].wcs_of(rq, WorkQueue::Recv);
    let rb = sim.nodes[1].bytes(rb_key).to_vec();
    let mut seen = vec![0u32; msgs.len()];
    for (j, w) in recvs.iter().enumerate() {
        assert_eq!(
            (w.status, w.wr_id, w.opcode),
            (WcStatus::Success, j as u64, WcOpcode::Recv),
            "{ctx}: {w:?}"
        );
        assert!(w.grh, "{ctx}: UD receive without GRH flag");
        let head = gather_from(&rb, &recv_lists[j], 44);
        let id = u32::from_le_bytes(head[40..44].try_into().unwrap()) as usize;
        assert!(id < msgs.len(), "{ctx}: unknown datagram {w:?}");
        seen[id] += 1;
        let (si, len, imm, good, ref bytes) = msgs[id];
        assert!(
            good,
            "{ctx}: datagram {id} with a wrong Q_Key was delivered"
        );
        let (snode, sqpn) = senders[si];
        assert_eq!(w.byte_len as usize, 40 + len, "{ctx}: byte_len of {id}");
        assert_eq!(w.src_qp, sqpn, "{ctx}: src_qp of {id}");
        assert_eq!(w.imm_data, imm, "{ctx}: imm of {id}");
        let all = gather_from(&rb, &recv_lists[j], 40 + len);
        assert_eq!(
            &all[..20],
            &[0u8; 20],
            "{ctx}: GRH space starts with 20 zero bytes"
        );
        let ip = &all[20..40];
        assert!(
            ip[0] == 0x45 && ip[9] == 17 && ipv4_checksum_ok(ip),
            "{ctx}: GRH holds the IPv4 header: {ip:02x?}"
        );
        assert_eq!(
            &ip[12..16],
            &sim.nodes[snode].ip.octets(),
            "{ctx}: source address in the GRH"
        );
        assert_eq!(&ip[16..20], &sim.nodes[1].ip.octets());
        assert!(all[40..] == bytes[..], "{ctx}: payload of {id}");
    }
    // UD has no duplicate detection: a datagram the network duplicated may
    // arrive twice, but never more often than intact copies reached the QP.
    for (id, &count) in seen.iter().enumerate() {
        let snode = senders[msgs[id].0].0;
        let copies = sim
            .log()
            .iter()
            .filter(|e| {
                e.fate == Fate::Delivered
                    && e.info.to == 1
                    && e.info.from == snode
                    && e.info.tag == Some(id as u32)
            })
            .count() as u32;
        assert!(
            count <= copies,
            "{ctx}: datagram {id} received {count} times, {copies} copies arrived"
        );
        if !lossy && msgs[id].3 {
            assert_eq!(count, 1, "{ctx}: datagram {id} on a clean network");
        }
    }
    // Every wrong Q_Key that reached the QP intact was counted.
    let wrong_arrived = sim
        .log()
        .iter()
        .filter(|e| {
            e.fate == Fate::Delivered && e.info.to == 1 && e.info.qkey.is_some_and(|k| k != qkey)
        })
        .count() as u64;
    let c = sim.nodes[1].ep.counters();
    assert_eq!(
        c.get(Counter::DropQkeyMismatch),
        wrong_arrived,
        "{ctx}: drop_qkey_mismatch"
    );
    if !lossy {
        let good = msgs.iter().filter(|m| m.3).count();
        assert_eq!(
            recvs.len(),
            good,
            "{ctx}: a clean network delivers every good datagram"
        );
    }
}
