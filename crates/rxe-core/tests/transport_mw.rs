//! Memory windows and fast registration end to end over the simulated
//! faulty network (tests/sim):
//! a type 2B window bound by a BIND_MW work request on the responder's QP,
//! RDMA WRITE and READ through its R_Key (inside the window, and a byte
//! past it refused), a SEND with Invalidate naming it, a rebind with a new
//! key portion, the new key working and the old one refused with
//! REM_ACCESS_ERR; local operations in send-queue order among sends, with
//! loss, duplication and reordering; a fast-registered region through
//! REG_MR, SEND with Invalidate, REG_MR again and LOCAL_INV (see
//! `fast_reg_seed`). `RXE_SIM_SEEDS=n` runs more seeds,
//! `RXE_SIM_SEED=s` one.

mod sim;

use rxe_core::transport::{
    AccessFlags, Key, MwBind, MwType, PathMtu, QpState, QpType, SendData, SendOp, SendWr, WcOpcode,
    WcStatus, WorkQueue,
};
use sim::*;

const SEEDS: u64 = 300;
const PD: u32 = 1;
const MR_VA: u64 = 0x4000_0000;
const MR_LEN: usize = 16 * 1024;
const SRC_VA: u64 = 0x9000_0000;

fn bind(mw: Key, new_key: u8, mr: Key, addr: u64, length: u64) -> SendOp {
    SendOp::BindMw(MwBind {
        mw_rkey: mw.raw(),
        new_rkey: mw.with_key(new_key).raw(),
        mr_lkey: mr.raw(),
        addr,
        length,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        verb: false,
    })
}

/// Returns whether the refused write was seen as REM_ACCESS_ERR (its NAK
/// arrived).
fn mw_seed(seed: u64) -> bool {
    let mut rng = Rng::new(seed);
    let faults = if rng.chance(0.8) {
        // A duplicated READ request that arrives after the window is
        // invalidated is executed again and fails its R_Key check: the
        // responder answers with a NAK the requester drops, and stays in
        // RTS (recv/duplicate.rs).
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mut sim = Sim::new(seed, 2, faults);
    let mut o = ConnOpts::new(QpType::Rc);
    o.mtu = *rng.pick(&[PathMtu::Mtu256, PathMtu::Mtu1024]);
    let mtu = o.mtu.bytes() as usize;
    let o = o.random_psns(&mut rng);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let ctx = format!("seed {seed}, mtu {mtu}, faults {faults:?}");

    // Node 1: a region with MW_BIND (and no remote right of its own), a
    // window on part of it. Node 0: the source of the writes.
    let mr = sim.nodes[1].reg(
        PD,
        MR_VA,
        vec![0; MR_LEN],
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
    );
    let src_len = 4 * mtu;
    let src: Vec<u8> = (0..src_len)
        .map(|i| (i * 7 + seed as usize) as u8)
        .collect();
    let src_key = sim.nodes[0].reg(PD, SRC_VA, src.clone(), AccessFlags::LOCAL_WRITE);
    let mw = sim.nodes[1]
        .mem
        .windows_mut()
        .alloc(PD, MwType::Type2B)
        .unwrap();
    let win_off = rng.usize(0, 64) * 8;
    let win_len = rng.usize(1, 3 * mtu);
    let win_va = MR_VA + win_off as u64;
    let k1 = mw.key().wrapping_add(rng.usize(1, 255) as u8);
    let rkey1 = mw.with_key(k1);

    // The bind sits between two signaled sends on node 1's queue: the
    // three complete in order.
    let recv_buf = sim.nodes[1].reg(PD, 0x7000_0000, vec![0; 64], AccessFlags::LOCAL_WRITE);
    sim.nodes[0]
        .ep
        .post_recv(qa, recv_wr(1, vec![sge(SRC_VA, 0, src_key)]))
        .unwrap();
    sim.nodes[0]
        .ep
        .post_recv(qa, recv_wr(2, vec![sge(SRC_VA, 0, src_key)]))
        .unwrap();
    sim.nodes[1]
        .ep
        .post_send(qb, send_wr(10, SendOp::Send, SendData::Sges(vec![])))
        .unwrap();
    sim.nodes[1]
        .ep
        .post_send(
            qb,
            send_wr(
                11,
                bind(mw, k1, mr, win_va, win_len as u64),
                SendData::Sges(vec![]),
            ),
        )
        .unwrap();
    sim.nodes[1]
        .ep
        .post_send(qb, send_wr(12, SendOp::Send, SendData::Sges(vec![])))
        .unwrap();
    sim.run_until(&format!("node 1's three completions ({ctx})"), |s| {
        s.nodes[1].count_wcs(qb, WorkQueue::Send) >= 3
    });
    let wcs = sim.nodes[1].wcs_of(qb, WorkQueue::Send);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (10, WcStatus::Success, WcOpcode::Send),
            (11, WcStatus::Success, WcOpcode::BindMw),
            (12, WcStatus::Success, WcOpcode::Send),
        ],
        "{ctx}"
    );
    let _ = recv_buf;

    // WRITE the whole window through its key, READ it back.
    let n = win_len.min(src_len);
    let write = |wr_id, rkey: Key, at: u64, len: usize| {
        send_wr(
            wr_id,
            SendOp::RdmaWrite {
                remote_addr: at,
                rkey: rkey.raw(),
            },
            SendData::Sges(vec![sge(SRC_VA, len as u32, src_key)]),
        )
    };
    let dst = sim.nodes[0].reg(PD, 0xa000_0000, vec![0; n], AccessFlags::LOCAL_WRITE);
    sim.nodes[0]
        .ep
        .post_send(qa, write(20, rkey1, win_va, n))
        .unwrap();
    sim.nodes[0]
        .ep
        .post_send(
            qa,
            send_wr(
                21,
                SendOp::RdmaRead {
                    remote_addr: win_va,
                    rkey: rkey1.raw(),
                },
                SendData::Sges(vec![sge(0xa000_0000, n as u32, dst)]),
            ),
        )
        .unwrap();
    // SEND with Invalidate naming the window; node 1 takes it.
    sim.nodes[1]
        .ep
        .post_recv(qb, recv_wr(30, vec![sge(0x7000_0000, 64, recv_buf)]))
        .unwrap();
    sim.nodes[0]
        .ep
        .post_send(
            qa,
            SendWr {
                // Fenced: a READ response lost before it would make the
                // READ come again after the window is gone (consumers fence
                // a SEND with Invalidate behind their READs for this).
                fence: true,
                ..send_wr(
                    22,
                    SendOp::SendWithInv { rkey: rkey1.raw() },
                    SendData::Sges(vec![]),
                )
            },
        )
        .unwrap();
    sim.run_until(&format!("the invalidation ({ctx})"), |s| {
        s.nodes[0].count_wcs(qa, WorkQueue::Send) >= 3
            && s.nodes[1].count_wcs(qb, WorkQueue::Recv) >= 1
    });
    let a: Vec<_> = sim.nodes[0]
        .wcs_of(qa, WorkQueue::Send)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        a,
        vec![
            (20, WcStatus::Success),
            (21, WcStatus::Success),
            (22, WcStatus::Success)
        ],
        "{ctx}"
    );
    assert_eq!(
        &sim.nodes[1].bytes(mr)[win_off..win_off + n],
        &src[..n],
        "{ctx}"
    );
    assert_eq!(sim.nodes[0].bytes(dst), &src[..n], "{ctx}");
    let r = sim.nodes[1].wcs_of(qb, WorkQueue::Recv)[0];
    assert_eq!(
        (r.status, r.invalidated_rkey),
        (WcStatus::Success, Some(rkey1.raw())),
        "{ctx}"
    );
    assert_eq!(sim.nodes[1].mem.windows().windows_on(mr), 0, "{ctx}");

    // Rebind with another key portion (a free window again), then the new
    // key writes and the old one is refused.
    let k2 = k1.wrapping_add(1);
    let rkey2 = mw.with_key(k2);
    sim.nodes[1]
        .ep
        .post_send(
            qb,
            send_wr(
                13,
                bind(rkey1, k2, mr, MR_VA, MR_LEN as u64),
                SendData::Sges(vec![]),
            ),
        )
        .unwrap();
    sim.run_until(&format!("the rebind ({ctx})"), |s| {
        s.nodes[1].count_wcs(qb, WorkQueue::Send) >= 4
    });
    assert_eq!(
        sim.nodes[1].wcs_of(qb, WorkQueue::Send)[3].status,
        WcStatus::Success,
        "{ctx}"
    );
    sim.nodes[0]
        .ep
        .post_send(qa, write(23, rkey2, MR_VA, 8))
        .unwrap();
    // A write a few bytes past the window or one through the old key,
    // from other source bytes: refused, and nothing lands.
    let past = rng.chance(0.5);
    let (at, rkey) = if past {
        (MR_VA + MR_LEN as u64 - 4, rkey2)
    } else {
        (MR_VA, rkey1)
    };
    let bad = send_wr(
        24,
        SendOp::RdmaWrite {
            remote_addr: at,
            rkey: rkey.raw(),
        },
        SendData::Sges(vec![sge(SRC_VA + 8, 8, src_key)]),
    );
    sim.nodes[0].ep.post_send(qa, bad).unwrap();
    sim.run_until(&format!("the refusal ({ctx})"), |s| {
        s.nodes[0].count_wcs(qa, WorkQueue::Send) >= 5
    });
    let a = sim.nodes[0].wcs_of(qa, WorkQueue::Send);
    // The NAK is sent once and the responder's QP is in ERR after it: if
    // that NAK (or the ACK of 23 with it) is lost, the requester's
    // retries find nobody, and RETRY_EXC_ERR is the right outcome.
    let s23 = a[3].status;
    let s24 = a[4].status;
    assert!(
        matches!(s23, WcStatus::Success | WcStatus::RetryExcErr),
        "{ctx}: 23 {s23:?}"
    );
    assert!(
        matches!(
            (s23, s24),
            (
                WcStatus::Success,
                WcStatus::RemAccessErr | WcStatus::RetryExcErr
            ) | (WcStatus::RetryExcErr, WcStatus::WrFlushErr)
        ),
        "{ctx}: 23 {s23:?}, 24 {s24:?} (past the window: {past})"
    );
    let b = sim.nodes[1].bytes(mr);
    if s23 == WcStatus::Success {
        assert_eq!(b[..8], src[..8], "{ctx}: 23 landed");
    }
    assert_ne!(b[..8], src[8..16], "{ctx}: 24 landed");
    assert_eq!(b[MR_LEN - 4..], [0; 4], "{ctx}: nothing past the window");
    assert_eq!(sim.nodes[0].state(qa), QpState::Error, "{ctx}");
    s24 == WcStatus::RemAccessErr
}

#[test]
fn type2b_window_bind_access_invalidate_rebind_under_faults() {
    let mut naked = 0u64;
    let mut runs = 0u64;
    for_seeds(
        "type2b_window_bind_access_invalidate_rebind",
        SEEDS,
        |seed| {
            runs += 1;
            naked += u64::from(mw_seed(seed));
        },
    );
    // Most NAKs arrive: the refusal is seen as REM_ACCESS_ERR.
    assert!(
        naked * 10 >= runs * 8,
        "{naked} of {runs} seeds saw the NAK"
    );
}

#[test]
fn refused_local_operations_complete_with_their_status() {
    let mut sim = Sim::new(1, 2, Faults::none());
    let o = ConnOpts::new(QpType::Rc);
    let (qa, _qb) = connect(&mut sim, 0, 1, &o);
    // No MW_BIND on the region: MW_BIND_ERR, and the QP goes to ERR,
    // flushing what follows.
    let mr = sim.nodes[0].reg(PD, MR_VA, vec![0; 64], AccessFlags::LOCAL_WRITE);
    let mw = sim.nodes[0]
        .mem
        .windows_mut()
        .alloc(PD, MwType::Type2A)
        .unwrap();
    let ep = &mut sim.nodes[0].ep;
    ep.post_send(
        qa,
        send_wr(1, bind(mw, 1, mr, MR_VA, 8), SendData::Sges(vec![])),
    )
    .unwrap();
    ep.post_send(qa, send_wr(2, SendOp::Send, SendData::Sges(vec![])))
        .unwrap();
    sim.run_until("both completions", |s| {
        s.nodes[0].count_wcs(qa, WorkQueue::Send) >= 2
    });
    let a: Vec<_> = sim.nodes[0]
        .wcs_of(qa, WorkQueue::Send)
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(
        a,
        vec![
            (1, WcStatus::MwBindErr, WcOpcode::BindMw),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(sim.nodes[0].mem.windows().windows_on(mr), 0);

    // LOCAL_INV of an ordinary region: LOC_QP_OP_ERR.
    let (qc, _qd) = connect(&mut sim, 0, 1, &o);
    sim.nodes[0]
        .ep
        .post_send(
            qc,
            send_wr(
                3,
                SendOp::LocalInv { key: mr.raw() },
                SendData::Sges(vec![]),
            ),
        )
        .unwrap();
    sim.run_until("the local invalidation", |s| {
        s.nodes[0].count_wcs(qc, WorkQueue::Send) >= 1
    });
    let w = sim.nodes[0].wcs_of(qc, WorkQueue::Send)[0];
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::LocQpOpErr, WcOpcode::LocalInv)
    );
    assert_eq!(sim.nodes[0].state(qc), QpState::Error);
}

/// Fast registration over the faulty network: a region allocated for it
/// is registered by a REG_MR work request, written through its key,
/// invalidated by the peer's SEND with Invalidate (the WRITE after it is
/// refused), registered again with the next key portion, written again,
/// invalidated by LOCAL_INV; the refused REG_MRs complete with
/// LOC_QP_OP_ERR.
fn fast_reg_seed(seed: u64) {
    use rxe_core::transport::RegMr;
    let mut rng = Rng::new(seed);
    let faults = if rng.chance(0.8) {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mut sim = Sim::new(seed, 2, faults);
    let o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let ctx = format!("seed {seed}, faults {faults:?}");
    let cap = 4096;
    let fr = sim.nodes[1].mem.alloc_fast(PD, cap).unwrap();
    let src: Vec<u8> = (0..64).map(|i| i as u8 ^ seed as u8).collect();
    let src_key = sim.nodes[0].reg(PD, SRC_VA, src.clone(), AccessFlags::LOCAL_WRITE);
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let reg = |key: Key, new: Key, iova: u64, length: u64| {
        SendOp::RegMr(RegMr {
            key: key.raw(),
            new_key: new.raw(),
            iova,
            length,
            access: rw,
        })
    };
    let write = |wr_id, rkey: Key, at: u64| {
        send_wr(
            wr_id,
            SendOp::RdmaWrite {
                remote_addr: at,
                rkey: rkey.raw(),
            },
            SendData::Sges(vec![sge(SRC_VA, 64, src_key)]),
        )
    };
    let post_b = |sim: &mut Sim, wr_id, op| {
        sim.nodes[1]
            .ep
            .post_send(qb, send_wr(wr_id, op, SendData::Sges(vec![])))
            .unwrap()
    };
    let wait_b = |sim: &mut Sim, n: usize| {
        sim.run_until(&format!("{n} completions on node 1 ({ctx})"), |s| {
            s.nodes[1].count_wcs(qb, WorkQueue::Send) >= n
        });
        *sim.nodes[1].wcs_of(qb, WorkQueue::Send).last().unwrap()
    };
    let wait_a = |sim: &mut Sim, n: usize| {
        sim.run_until(&format!("{n} completions on node 0 ({ctx})"), |s| {
            s.nodes[0].count_wcs(qa, WorkQueue::Send) >= n
        });
        *sim.nodes[0].wcs_of(qa, WorkQueue::Send).last().unwrap()
    };
    // A REG_MR longer than the allocation is refused, on a QP of its own
    // (the refusal ends the QP).
    let (_qc, qd) = connect(&mut sim, 0, 1, &o);
    sim.nodes[1]
        .ep
        .post_send(
            qd,
            send_wr(
                1,
                reg(fr, fr.inc(), 0, cap as u64 + 1),
                SendData::Sges(vec![]),
            ),
        )
        .unwrap();
    sim.run_until("the refused REG_MR", |s| {
        s.nodes[1].count_wcs(qd, WorkQueue::Send) >= 1
    });
    let w = sim.nodes[1].wcs_of(qd, WorkQueue::Send)[0];
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::LocQpOpErr, WcOpcode::RegMr),
        "{ctx}"
    );

    let iova = 0x5000_0000 + rng.below(1 << 20) * 8;
    let k1 = fr.with_key(fr.key().wrapping_add(rng.usize(1, 255) as u8));
    post_b(&mut sim, 2, reg(fr, k1, iova, 2048));
    let w = wait_b(&mut sim, 1);
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::Success, WcOpcode::RegMr),
        "{ctx}"
    );
    sim.nodes[0]
        .ep
        .post_send(qa, write(3, k1, iova + 100))
        .unwrap();
    assert_eq!(wait_a(&mut sim, 1).status, WcStatus::Success, "{ctx}");
    assert_eq!(sim.nodes[1].bytes(k1)[100..164], src[..], "{ctx}");
    // Registered: a second REG_MR is refused until an invalidation (the
    // rule, asked of the memory directly: posted, it would end the QP).
    let again = RegMr {
        key: k1.raw(),
        new_key: k1.inc().raw(),
        iova,
        length: 8,
        access: rw,
    };
    use rxe_core::transport::{MemError, MemoryAccess, QpRef};
    assert!(matches!(
        sim.nodes[1].mem.reg_mr(&again, QpRef { pd: PD, qpn: qb }),
        Err(MemError::FastReg(_))
    ));

    // The peer invalidates it with its SEND; a REG_MR with the next key
    // portion registers it again, over the whole allocation.
    sim.nodes[1].ep.post_recv(qb, recv_wr(4, vec![])).unwrap();
    sim.nodes[0]
        .ep
        .post_send(
            qa,
            send_wr(
                5,
                SendOp::SendWithInv { rkey: k1.raw() },
                SendData::Sges(vec![]),
            ),
        )
        .unwrap();
    assert_eq!(wait_a(&mut sim, 2).status, WcStatus::Success, "{ctx}");
    sim.run_until("the invalidating receive", |s| {
        s.nodes[1].count_wcs(qb, WorkQueue::Recv) >= 1
    });
    let r = sim.nodes[1].wcs_of(qb, WorkQueue::Recv)[0];
    assert_eq!(r.invalidated_rkey, Some(k1.raw()), "{ctx}");
    let k2 = k1.inc();
    post_b(&mut sim, 6, reg(k1, k2, iova, 4096));
    assert_eq!(wait_b(&mut sim, 2).status, WcStatus::Success, "{ctx}");
    sim.nodes[0]
        .ep
        .post_send(qa, write(7, k2, iova + 4032))
        .unwrap();
    assert_eq!(wait_a(&mut sim, 3).status, WcStatus::Success, "{ctx}");
    assert_eq!(sim.nodes[1].bytes(k2)[4032..], src[..], "{ctx}");
    post_b(&mut sim, 8, SendOp::LocalInv { key: k2.raw() });
    let w = wait_b(&mut sim, 3);
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::Success, WcOpcode::LocalInv),
        "{ctx}"
    );
    sim.nodes[0].ep.post_send(qa, write(9, k2, iova)).unwrap();
    let w = wait_a(&mut sim, 4);
    assert!(
        matches!(w.status, WcStatus::RemAccessErr | WcStatus::RetryExcErr),
        "{ctx}: {w:?}"
    );
    assert_eq!(sim.nodes[1].bytes(k2)[..64], [0; 64], "{ctx}");
}

#[test]
fn fast_registration_register_write_invalidate_reregister_under_faults() {
    for_seeds("fast_registration", 200, fast_reg_seed);
}

/// IBTA 1.5 ATOMIC WRITE and FLUSH over the faulty network (duplicates
/// included): a stream of ATOMIC WRITEs to words of a region, WRITEs and
/// FLUSHes (range and whole region) in between; every request completes
/// in order, each word holds the last value written to it, a duplicate is
/// never executed again (a later WRITE over a word is not undone by a
/// replayed ATOMIC WRITE); then a FLUSH asking for persistence, which the
/// region does not grant, is refused with REM_ACCESS_ERR.
fn atomic_write_flush_seed(seed: u64) {
    use rxe_core::wire::feth::{
        PLT_GLOBAL_VISIBILITY, PLT_PERSISTENCE, SEL_MEMORY_RANGE, SEL_MEMORY_REGION,
    };
    let mut rng = Rng::new(seed);
    let faults = if rng.chance(0.8) {
        Faults::lossy(&mut rng)
    } else {
        Faults::none()
    };
    let mut sim = Sim::new(seed, 2, faults);
    let o = ConnOpts::new(QpType::Rc).random_psns(&mut rng);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let _ = qb;
    let ctx = format!("seed {seed}, faults {faults:?}");
    let words = 16usize;
    let tgt = sim.nodes[1].reg(
        PD,
        MR_VA,
        vec![0; words * 8],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_GLOBAL,
    );
    let n = rng.usize(4, 40);
    let src: Vec<u8> = (0..n * 8).map(|_| rng.below(256) as u8).collect();
    let src_key = sim.nodes[0].reg(PD, SRC_VA, src.clone(), AccessFlags::LOCAL_WRITE);
    let mut want = vec![0u8; words * 8];
    let mut kinds = Vec::new();
    for i in 0..n {
        let w = rng.usize(0, words - 1);
        let at = MR_VA + 8 * w as u64;
        let bytes = &src[i * 8..i * 8 + 8];
        let (op, data, opcode) = match rng.below(4) {
            0 => (
                SendOp::RdmaWrite {
                    remote_addr: at,
                    rkey: tgt.raw(),
                },
                SendData::Sges(vec![sge(SRC_VA + 8 * i as u64, 8, src_key)]),
                WcOpcode::RdmaWrite,
            ),
            1 => (
                SendOp::Flush {
                    remote_addr: at,
                    rkey: tgt.raw(),
                    len: 8,
                    placement: PLT_GLOBAL_VISIBILITY,
                    selectivity: *rng.pick(&[SEL_MEMORY_RANGE, SEL_MEMORY_REGION]),
                },
                SendData::Sges(vec![]),
                WcOpcode::Flush,
            ),
            2 => (
                SendOp::AtomicWrite {
                    remote_addr: at,
                    rkey: tgt.raw(),
                },
                SendData::Inline(bytes[..].into()),
                WcOpcode::AtomicWrite,
            ),
            _ => (
                SendOp::AtomicWrite {
                    remote_addr: at,
                    rkey: tgt.raw(),
                },
                SendData::Sges(vec![sge(SRC_VA + 8 * i as u64, 8, src_key)]),
                WcOpcode::AtomicWrite,
            ),
        };
        if opcode != WcOpcode::Flush {
            want[w * 8..w * 8 + 8].copy_from_slice(bytes);
        }
        kinds.push(opcode);
        sim.nodes[0]
            .ep
            .post_send(qa, send_wr(i as u64, op, data))
            .unwrap();
    }
    sim.run_until(&format!("{n} completions ({ctx})"), |s| {
        s.nodes[0].count_wcs(qa, WorkQueue::Send) >= n
    });
    let got: Vec<_> = sim.nodes[0]
        .wcs_of(qa, WorkQueue::Send)
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    let expect: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (i as u64, WcStatus::Success, *k))
        .collect();
    assert_eq!(got, expect, "{ctx}");
    // Let every duplicate arrive before looking at memory.
    sim.run_until_idle();
    assert_eq!(sim.nodes[1].bytes(tgt), &want[..], "{ctx}");
    let persist = send_wr(
        99,
        SendOp::Flush {
            remote_addr: MR_VA,
            rkey: tgt.raw(),
            len: 8,
            placement: PLT_PERSISTENCE,
            selectivity: SEL_MEMORY_RANGE,
        },
        SendData::Sges(vec![]),
    );
    sim.nodes[0].ep.post_send(qa, persist).unwrap();
    sim.run_until(&format!("the refused FLUSH ({ctx})"), |s| {
        s.nodes[0].count_wcs(qa, WorkQueue::Send) > n
    });
    let w = *sim.nodes[0].wcs_of(qa, WorkQueue::Send).last().unwrap();
    assert!(
        matches!(w.status, WcStatus::RemAccessErr | WcStatus::RetryExcErr),
        "{ctx}: {w:?}"
    );
}

#[test]
fn atomic_write_and_flush_in_order_exactly_once_under_faults() {
    for_seeds("atomic_write_and_flush", 300, atomic_write_flush_seed);
}

#[test]
fn atomic_write_and_flush_post_time_checks() {
    use rxe_core::transport::PostError;
    let mut sim = Sim::new(1, 2, Faults::none());
    let (qa, _) = connect(&mut sim, 0, 1, &ConnOpts::new(QpType::Rc));
    let (ua, _) = connect(&mut sim, 0, 1, &ConnOpts::new(QpType::Uc));
    let aw = |addr| SendOp::AtomicWrite {
        remote_addr: addr,
        rkey: 1,
    };
    let fl = |placement, selectivity| SendOp::Flush {
        remote_addr: 0,
        rkey: 1,
        len: 8,
        placement,
        selectivity,
    };
    let ep = &mut sim.nodes[0].ep;
    let post =
        |ep: &mut rxe_core::transport::Endpoint, q, op, data| ep.post_send(q, send_wr(1, op, data));
    let eight = || SendData::Inline(vec![0; 8].into());
    assert_eq!(post(ep, qa, aw(4), eight()), Err(PostError::BadAtomic));
    assert_eq!(
        post(ep, qa, aw(8), SendData::Inline(vec![0; 7].into())),
        Err(PostError::BadAtomic)
    );
    assert_eq!(post(ep, ua, aw(8), eight()), Err(PostError::OpNotSupported));
    assert_eq!(
        post(ep, ua, fl(1, 0), SendData::Sges(vec![])),
        Err(PostError::OpNotSupported)
    );
    assert_eq!(
        post(ep, qa, fl(0, 0), SendData::Sges(vec![])),
        Err(PostError::BadFlush)
    );
    assert_eq!(
        post(ep, qa, fl(4, 0), SendData::Sges(vec![])),
        Err(PostError::BadFlush)
    );
    assert_eq!(
        post(ep, qa, fl(1, 2), SendData::Sges(vec![])),
        Err(PostError::BadFlush)
    );
    assert_eq!(post(ep, qa, fl(1, 0), eight()), Err(PostError::BadFlush));
    assert_eq!(post(ep, qa, fl(3, 1), SendData::Sges(vec![])), Ok(()));
    assert_eq!(post(ep, qa, aw(8), eight()), Ok(()));
}
