//! Automatic path migration (IBTA 17.2.8) in the simulator: two nodes with
//! two addresses each, an RC or UC connection on the first pair with an
//! alternate path on the second. Cutting the primary path mid-transfer
//! moves the connection to the alternate path without losing or
//! repeating a message, on a faulty network too; the rules around it
//! (REARM, migration on request, what an unarmed QP or a QP whose
//! alternate source address is gone does) are checked one by one.

mod sim;

use std::cell::Cell;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::rc::Rc;
use std::time::Duration;

use rxe_core::transport::{
    AccessFlags, AltPath, AsyncEvent, AttrMask, Counter, Key, MigState, QpAttr, QpState, QpType,
    SendData, SendOp, WcStatus, WorkQueue,
};
use sim::*;

const SEEDS: u64 = 60;
const MESSAGES: u32 = 24;
const MSG_LEN: usize = 3000;
const SRC_VA: u64 = 0x10_0000;
const DST_VA: u64 = 0x80_0000;

/// The second address of node `n` (the first is 127.0.0.`n+1`).
fn second_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, n as u8 + 1)
}

/// Sim with nodes 0 and 1, each on two addresses, connected on the first.
fn two_path_pair(seed: u64, qp_type: QpType, faults: Faults) -> (Sim, ConnOpts, u32, u32) {
    let mut rng = Rng::new(seed);
    let mut o = ConnOpts::new(qp_type).random_psns(&mut rng);
    // 4 ms timer, 3 retries: the primary is given up after about 60 ms.
    o.timeout = 10;
    o.retry_cnt = 3;
    let mut sim = Sim::new(seed, 2, faults);
    sim.add_address(0, second_ip(0));
    sim.add_address(1, second_ip(1));
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    (sim, o, qa, qb)
}

/// RTS→RTS loading the alternate path (the peer's second address, from
/// this node's second address) with `state`.
fn load_alt(sim: &mut Sim, n: usize, qpn: u32, peer: usize, state: MigState) {
    let mut av = sim.nodes[peer].av_at(1);
    av.sgid_index = 1;
    let a = QpAttr {
        alt_path: Some(AltPath {
            av,
            pkey_index: 0,
            port_num: 1,
            timeout: 10,
        }),
        path_mig_state: Some(state),
        ..Default::default()
    };
    sim.nodes[n]
        .ep
        .modify_qp(qpn, &a, AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE)
        .expect("load the alternate path");
}

fn set_mig_state(sim: &mut Sim, n: usize, qpn: u32, state: MigState) -> Result<(), String> {
    let a = QpAttr {
        path_mig_state: Some(state),
        ..Default::default()
    };
    sim.nodes[n]
        .ep
        .modify_qp(qpn, &a, AttrMask::PATH_MIG_STATE)
        .map_err(|e| e.to_string())
}

/// Whether a packet is between the two nodes' first addresses.
fn on_primary(src: Ipv4Addr, dst: Ipv4Addr) -> bool {
    src.octets()[2] == 0 && dst.octets()[2] == 0
}

/// Registers the source and destination of `MESSAGES` messages of
/// `MSG_LEN` bytes (each with its own bytes) and posts every receive on
/// node 1. Returns the source and destination keys.
fn prepare_transfer(sim: &mut Sim, qb: u32) -> (Key, Key) {
    let total = MSG_LEN * MESSAGES as usize;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 251) as u8).collect();
    let src = sim.nodes[0].reg(1, SRC_VA, data, AccessFlags::all());
    let dst = sim.nodes[1].reg(1, DST_VA, vec![0; total], AccessFlags::all());
    for i in 0..MESSAGES {
        let off = u64::from(i) * MSG_LEN as u64;
        let wr = recv_wr(u64::from(i), vec![sge(DST_VA + off, MSG_LEN as u32, dst)]);
        sim.nodes[1].ep.post_recv(qb, wr).unwrap();
    }
    (src, dst)
}

/// Posts messages `range` from node 0 (RC: alternately SEND and WRITE
/// WITH IMMEDIATE).
fn post_sends(sim: &mut Sim, qp_type: QpType, qa: u32, keys: (Key, Key), range: Range<u32>) {
    let (src, dst) = keys;
    for i in range {
        let off = u64::from(i) * MSG_LEN as u64;
        let op = if qp_type == QpType::Rc && i % 2 == 1 {
            SendOp::RdmaWriteWithImm {
                remote_addr: DST_VA + off,
                rkey: dst.raw(),
                imm: i,
            }
        } else {
            SendOp::Send
        };
        let wr = send_wr(
            u64::from(i),
            op,
            SendData::Sges(vec![sge(SRC_VA + off, MSG_LEN as u32, src)]),
        );
        sim.nodes[0].ep.post_send(qa, wr).unwrap();
    }
}

/// Cuts the primary path in both directions once `cut` is set; counts
/// what leaves on the alternate path and checks its MigReq.
fn install_cut(sim: &mut Sim) -> (Rc<Cell<bool>>, Rc<Cell<u32>>) {
    let cut = Rc::new(Cell::new(false));
    let on_alt = Rc::new(Cell::new(0u32));
    let (c, n) = (cut.clone(), on_alt.clone());
    sim.set_filter(move |_, info| {
        if on_primary(info.src_ip, info.dst_ip) {
            return if c.get() {
                Verdict::Drop
            } else {
                Verdict::Pass
            };
        }
        // Every packet on the alternate path is sent after a migration,
        // by a QP in MIGRATED: MigReq set (IBTA 17.2.8).
        assert!(
            info.mig_req,
            "a packet on the alternate path without MigReq: {info:?}"
        );
        n.set(n.get() + 1);
        Verdict::Pass
    });
    (cut, on_alt)
}

fn migrates_when_the_primary_is_cut(qp_type: QpType, seed: u64, faults: Faults) {
    let (mut sim, _o, qa, qb) = two_path_pair(seed, qp_type, faults);
    load_alt(&mut sim, 0, qa, 1, MigState::Armed);
    load_alt(&mut sim, 1, qb, 0, MigState::Armed);
    let (cut, on_alt) = install_cut(&mut sim);
    let keys = prepare_transfer(&mut sim, qb);
    let (src, dst) = keys;
    // The first half, then the cut while it is in flight, then the rest.
    let half = MESSAGES / 2;
    post_sends(&mut sim, qp_type, qa, keys, 0..half);
    sim.run_until("the first message", |s| {
        s.nodes[1].count_wcs(qb, WorkQueue::Recv) >= 1
    });
    cut.set(true);
    if qp_type == QpType::Uc {
        // UC has no retries to spend: its program moves it (migration on
        // request), and the peer follows the first packet it sees.
        sim.run_until_idle();
        set_mig_state(&mut sim, 0, qa, MigState::Migrated).unwrap();
    }
    post_sends(&mut sim, qp_type, qa, keys, half..MESSAGES);
    sim.run_until_idle();
    sim.dump();

    let sends = sim.nodes[0].wcs_of(qa, WorkQueue::Send);
    assert_eq!(
        sends.len(),
        MESSAGES as usize,
        "seed {seed}: every send completes"
    );
    assert!(
        sends.iter().all(|w| w.status == WcStatus::Success),
        "seed {seed}: {sends:?}"
    );
    let recvs = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
    if qp_type == QpType::Rc {
        // Every message exactly once, in order, every byte in place.
        let ids: Vec<u64> = recvs.iter().map(|w| w.wr_id).collect();
        assert_eq!(
            ids,
            (0..u64::from(MESSAGES)).collect::<Vec<_>>(),
            "seed {seed}"
        );
        assert!(recvs.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(
            sim.nodes[1].bytes(dst),
            sim.nodes[0].bytes(src),
            "seed {seed}: the data differs"
        );
        assert_eq!(sim.nodes[0].ep.counters().get(Counter::PathMigrated), 1);
        assert_eq!(sim.nodes[0].ep.counters().get(Counter::RetryExceededErr), 0);
    } else {
        // UC loses what the cut dropped; the second half, sent after the
        // migration, arrives whole by the alternate path.
        assert!(recvs.iter().all(|w| w.status == WcStatus::Success));
        let second = MSG_LEN * half as usize..;
        assert_eq!(
            sim.nodes[1].bytes(dst)[second.clone()],
            sim.nodes[0].bytes(src)[second]
        );
    }
    assert!(
        on_alt.get() > 0,
        "seed {seed}: nothing went by the alternate path"
    );
    // Both ends are on the alternate path now, MIGRATED, with no
    // alternate left; the requester raised PATH_MIG on its own (RC), the
    // responder followed its peer.
    for (n, q, peer) in [(0, qa, 1), (1, qb, 0)] {
        let c = sim.nodes[n].ep.query_qp(q).unwrap();
        assert_eq!(c.state(), QpState::Rts, "seed {seed}: node {n}");
        assert_eq!(c.mig_state(), MigState::Migrated);
        assert_eq!(c.attrs().av.unwrap().dgid, sim.nodes[peer].av_at(1).dgid);
        assert_eq!(c.attrs().av.unwrap().sgid_index, 1);
        assert_eq!(c.attrs().alt_path, None);
    }
    let migrated = |n: usize, q: u32| {
        sim.nodes[n]
            .events
            .iter()
            .filter(|(_, e)| *e == AsyncEvent::PathMigrated { qpn: q })
            .count()
    };
    assert_eq!(migrated(1, qb), 1, "seed {seed}");
    assert_eq!(
        sim.nodes[1].ep.counters().get(Counter::PathMigratedByPeer),
        1
    );
    let by_request = qp_type == QpType::Uc;
    assert_eq!(migrated(0, qa), usize::from(!by_request), "seed {seed}");
}

#[test]
fn rc_migrates_when_the_primary_path_is_cut() {
    for_seeds("rc_migrates_when_the_primary_path_is_cut", SEEDS, |seed| {
        migrates_when_the_primary_is_cut(QpType::Rc, seed, Faults::none());
    });
}

#[test]
fn rc_migrates_when_the_primary_path_is_cut_on_a_lossy_network() {
    for_seeds(
        "rc_migrates_when_the_primary_path_is_cut_on_a_lossy_network",
        SEEDS,
        |seed| {
            let mut rng = Rng::new(seed ^ 0xa9);
            let mut faults = Faults::lossy(&mut rng);
            // Few enough losses that 3 retries on the alternate path hold.
            faults.drop = faults.drop.min(0.03);
            faults.corrupt = faults.corrupt.min(0.01);
            migrates_when_the_primary_is_cut(QpType::Rc, seed, faults);
        },
    );
}

#[test]
fn uc_migrates_on_request_and_its_peer_follows() {
    for_seeds("uc_migrates_on_request_and_its_peer_follows", 20, |seed| {
        migrates_when_the_primary_is_cut(QpType::Uc, seed, Faults::none());
    });
}

/// REARM waits for the peer: each end arms when a packet with MigReq 0
/// arrives on the primary path; until then the QP sends MigReq 0 (and 1
/// while MIGRATED).
#[test]
fn rearm_arms_once_the_peer_has_rearmed() {
    let (mut sim, _o, qa, qb) = two_path_pair(7, QpType::Rc, Faults::none());
    sim.enable_log();
    let state = |sim: &Sim, n: usize, q: u32| sim.nodes[n].ep.query_qp(q).unwrap().mig_state();
    load_alt(&mut sim, 0, qa, 1, MigState::Rearm);
    assert_eq!(state(&sim, 0, qa), MigState::Rearm);
    // Node 1 is still MIGRATED: its packets carry MigReq 1 and node 0
    // stays in REARM.
    let src = sim.nodes[1].reg(1, 0x1000, vec![5; 64], AccessFlags::all());
    let dst = sim.nodes[0].reg(1, 0x2000, vec![0; 64], AccessFlags::all());
    let write = |sim: &mut Sim, from: usize, q: u32, id: u64| {
        let (s, d) = if from == 1 { (src, dst) } else { (dst, src) };
        let (sva, dva) = if from == 1 {
            (0x1000, 0x2000)
        } else {
            (0x2000, 0x1000)
        };
        let wr = send_wr(
            id,
            SendOp::RdmaWrite {
                remote_addr: dva,
                rkey: d.raw(),
            },
            SendData::Sges(vec![sge(sva, 64, s)]),
        );
        sim.nodes[from].ep.post_send(q, wr).unwrap();
        sim.run_until_idle();
    };
    write(&mut sim, 1, qb, 1);
    assert_eq!(state(&sim, 0, qa), MigState::Rearm);
    assert!(sim
        .log()
        .iter()
        .filter(|e| e.info.from == 1)
        .all(|e| e.info.mig_req));
    assert!(sim
        .log()
        .iter()
        .filter(|e| e.info.from == 0)
        .all(|e| !e.info.mig_req));
    // Node 1 rearms; its next packet (MigReq 0) arms node 0, and node 0's
    // answer arms node 1.
    load_alt(&mut sim, 1, qb, 0, MigState::Rearm);
    write(&mut sim, 1, qb, 2);
    assert_eq!(state(&sim, 0, qa), MigState::Armed);
    assert_eq!(state(&sim, 1, qb), MigState::Armed);
    // Software cannot go back from ARMED to REARM, nor migrate from REARM.
    assert!(set_mig_state(&mut sim, 0, qa, MigState::Rearm).is_err());
    let (mut sim2, _, qa2, _) = two_path_pair(8, QpType::Rc, Faults::none());
    load_alt(&mut sim2, 0, qa2, 1, MigState::Rearm);
    assert!(set_mig_state(&mut sim2, 0, qa2, MigState::Migrated).is_err());
    // REARM or ARMED with no alternate path is refused.
    let (mut sim3, _, qa3, _) = two_path_pair(9, QpType::Rc, Faults::none());
    assert!(set_mig_state(&mut sim3, 0, qa3, MigState::Armed).is_err());
    assert!(set_mig_state(&mut sim3, 0, qa3, MigState::Rearm).is_err());
}

/// A QP that is not armed does not take its alternate path: a cut ends it
/// with RETRY_EXC_ERR, and a MigReq packet that arrives by the alternate
/// path is dropped as from a stranger.
#[test]
fn an_unarmed_qp_fails_and_ignores_its_alternate_path() {
    let (mut sim, _o, qa, qb) = two_path_pair(11, QpType::Rc, Faults::none());
    // Node 1 has the alternate loaded but only REARM; node 0 forces its
    // own traffic over there by migrating on request.
    load_alt(&mut sim, 0, qa, 1, MigState::Armed);
    load_alt(&mut sim, 1, qb, 0, MigState::Rearm);
    set_mig_state(&mut sim, 0, qa, MigState::Migrated).unwrap();
    let src = sim.nodes[0].reg(1, 0x1000, vec![5; 64], AccessFlags::all());
    let dst = sim.nodes[1].reg(1, 0x2000, vec![0; 64], AccessFlags::all());
    let wr = send_wr(
        1,
        SendOp::RdmaWrite {
            remote_addr: 0x2000,
            rkey: dst.raw(),
        },
        SendData::Sges(vec![sge(0x1000, 64, src)]),
    );
    sim.nodes[0].ep.post_send(qa, wr).unwrap();
    sim.run_until_idle();
    let wcs = sim.nodes[0].wcs_of(qa, WorkQueue::Send);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert!(sim.nodes[1].bytes(dst).iter().all(|&b| b == 0));
    assert!(sim.nodes[1].ep.counters().get(Counter::DropWrongAddress) >= 4);
    assert_eq!(
        sim.nodes[1].ep.counters().get(Counter::PathMigratedByPeer),
        0
    );
}

/// The alternate path's source address leaves the port: at the moment
/// the requester would migrate it raises PATH_MIG_ERR and fails.
#[test]
fn a_gone_alternate_source_gives_path_mig_err() {
    let (mut sim, _o, qa, qb) = two_path_pair(13, QpType::Rc, Faults::none());
    load_alt(&mut sim, 0, qa, 1, MigState::Armed);
    load_alt(&mut sim, 1, qb, 0, MigState::Armed);
    let gid0 = sim.nodes[0].gid();
    sim.nodes[0].ep.set_gid_table(vec![Some(gid0), None]);
    let (cut, _) = install_cut(&mut sim);
    cut.set(true);
    let src = sim.nodes[0].reg(1, 0x1000, vec![5; 64], AccessFlags::all());
    let wr = send_wr(1, SendOp::Send, SendData::Sges(vec![sge(0x1000, 64, src)]));
    sim.nodes[0].ep.post_send(qa, wr).unwrap();
    sim.run_until_idle();
    let wcs = sim.nodes[0].wcs_of(qa, WorkQueue::Send);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert!(sim.nodes[0]
        .events
        .iter()
        .any(|(_, e)| *e == AsyncEvent::PathMigError { qpn: qa }));
    assert_eq!(sim.nodes[0].ep.counters().get(Counter::PathMigErr), 1);
    assert_eq!(sim.nodes[0].ep.counters().get(Counter::PathMigrated), 0);
}

/// Migration on request moves the requester at once (no event: its
/// program asked), its first packet on the alternate path moves the peer
/// (PATH_MIG there), and the old primary is dead to both afterwards.
#[test]
fn migration_on_request_moves_both_ends() {
    let (mut sim, _o, qa, qb) = two_path_pair(17, QpType::Rc, Faults::none());
    load_alt(&mut sim, 0, qa, 1, MigState::Armed);
    load_alt(&mut sim, 1, qb, 0, MigState::Armed);
    set_mig_state(&mut sim, 0, qa, MigState::Migrated).unwrap();
    let (_cut, on_alt) = install_cut(&mut sim);
    let keys = prepare_transfer(&mut sim, qb);
    let (src, dst) = keys;
    post_sends(&mut sim, QpType::Rc, qa, keys, 0..MESSAGES);
    sim.run_until_idle();
    assert!(on_alt.get() as usize >= MESSAGES as usize);
    assert_eq!(sim.nodes[1].bytes(dst), sim.nodes[0].bytes(src));
    assert!(sim.nodes[0].events.is_empty(), "{:?}", sim.nodes[0].events);
    assert_eq!(
        sim.nodes[1]
            .events
            .iter()
            .map(|(_, e)| *e)
            .collect::<Vec<_>>(),
        [AsyncEvent::PathMigrated { qpn: qb }]
    );
    assert_eq!(sim.nodes[0].ep.counters().get(Counter::PathMigrated), 0);
    assert!(
        sim.elapsed() < Duration::from_millis(50),
        "no retry was needed"
    );
}

/// A MigReq packet on the armed alternate path moves the QP only if it
/// passes the checks a packet of that path must pass: one with another
/// P_Key is dropped and the QP stays where it is.
#[test]
fn a_migreq_packet_with_a_bad_pkey_moves_nothing() {
    use rxe_core::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};
    let (mut sim, o, qa, qb) = two_path_pair(19, QpType::Rc, Faults::none());
    load_alt(&mut sim, 0, qa, 1, MigState::Armed);
    load_alt(&mut sim, 1, qb, 0, MigState::Armed);
    let bytes = |pkey: u16| {
        let bth = BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: qb,
            ack_req: true,
            psn: o.psn_a.value(),
        };
        let t = TransportRepr::new(bth, ExtReprs::default(), 16);
        let mut buf = vec![0; t.buffer_len().unwrap()];
        t.emit(&mut buf, &[7; 16]).unwrap();
        buf
    };
    let mut alt = sim.nodes[1].av_at(1);
    alt.sgid_index = 1;
    sim.send_transport(0, &alt, qa, &bytes(0x1234));
    sim.run_until_idle();
    let c = sim.nodes[1].ep.counters();
    assert_eq!(c.get(Counter::DropPkeyMismatch), 1);
    assert_eq!(c.get(Counter::PathMigratedByPeer), 0);
    assert_eq!(
        sim.nodes[1].ep.query_qp(qb).unwrap().mig_state(),
        MigState::Armed
    );
    // The same packet with the QP's P_Key moves it.
    sim.send_transport(0, &alt, qa, &bytes(0xffff));
    sim.run_until_idle();
    assert_eq!(
        sim.nodes[1].ep.counters().get(Counter::PathMigratedByPeer),
        1
    );
    assert_eq!(
        sim.nodes[1].ep.query_qp(qb).unwrap().mig_state(),
        MigState::Migrated
    );
}
