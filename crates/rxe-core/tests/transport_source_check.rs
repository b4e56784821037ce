//! A connected QP accepts packets only from the path it was connected to
//! (IBTA 9.6.1.5; kernel rxe's `check_addr()`): a third node that knows the
//! QPN, the next PSN and the P_Key, and sends good packets from its own
//! address, is dropped and counted, and the real connection carries every
//! message exactly once, over a faulty network too.

mod sim;

use rxe_core::transport::{
    AccessFlags, Counter, Psn, QpType, SendData, SendOp, WcStatus, WorkQueue,
};
use rxe_core::wire::{BthRepr, ExtReprs, Opcode, RethRepr, TransportRepr};
use rxe_core::Gid;
use sim::*;

const SEEDS: u64 = 200;
const MESSAGES: u32 = 8;

/// Transport bytes (with the 4 zero ICRC bytes the engine leaves) of a
/// request to `dest_qp` at `psn`.
fn request(opcode: Opcode, dest_qp: u32, psn: Psn, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
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
    buf
}

/// Node 2 forges, for every PSN the real requester (node 0) will use, a
/// SEND and an RDMA WRITE into node 1's region, before node 0 sends; node
/// 1 must deliver node 0's messages only and leave its memory untouched by
/// node 2.
fn forged_requests_are_dropped(qp_type: QpType, seed: u64, faults: Faults) {
    let mut rng = Rng::new(seed);
    let o = ConnOpts::new(qp_type).random_psns(&mut rng);
    let mut sim = Sim::new(seed, 3, faults);
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let src = sim.nodes[0].reg(
        1,
        0x1000,
        vec![0; 64 * MESSAGES as usize],
        AccessFlags::all(),
    );
    let dst = sim.nodes[1].reg(
        1,
        0x9000,
        vec![0; 64 * MESSAGES as usize],
        AccessFlags::all(),
    );
    for i in 0..MESSAGES {
        sim.nodes[1]
            .ep
            .post_recv(
                qb,
                recv_wr(u64::from(i), vec![sge(0x9000 + 64 * u64::from(i), 64, dst)]),
            )
            .unwrap();
    }
    let victim = sim.nodes[1].av();
    for i in 0..MESSAGES {
        let psn = o.psn_a.add(i);
        let send = if qp_type == QpType::Rc {
            Opcode::RC_SEND_ONLY
        } else {
            Opcode::UC_SEND_ONLY
        };
        sim.send_transport(
            2,
            &victim,
            qa,
            &request(send, qb, psn, ExtReprs::default(), &[0xee; 16]),
        );
        let write = if qp_type == QpType::Rc {
            Opcode::RC_RDMA_WRITE_ONLY
        } else {
            Opcode::UC_RDMA_WRITE_ONLY
        };
        let reth = ExtReprs {
            reth: Some(RethRepr {
                va: 0x9000,
                rkey: dst.raw(),
                dma_len: 16,
            }),
            ..Default::default()
        };
        sim.send_transport(2, &victim, qa, &request(write, qb, psn, reth, &[0xee; 16]));
    }
    sim.run_until_idle();
    assert_eq!(
        sim.nodes[1].count_wcs(qb, WorkQueue::Recv),
        0,
        "seed {seed}: a forged SEND was delivered"
    );
    assert!(
        sim.nodes[1].bytes(dst).iter().all(|&b| b == 0),
        "seed {seed}: a forged WRITE landed"
    );
    let dropped = sim.nodes[1].ep.counters().get(Counter::DropWrongAddress);
    if faults == Faults::none() {
        assert_eq!(
            dropped,
            2 * u64::from(MESSAGES),
            "every forged packet counted"
        );
    } else {
        // Loss, corruption and duplication change how many arrive.
        assert!(
            dropped <= 6 * u64::from(MESSAGES),
            "seed {seed}: {dropped} drops"
        );
    }

    // The real connection: its messages, once each, in order.
    for i in 0..MESSAGES {
        let va = 0x1000 + 64 * u64::from(i);
        let off = 64 * i as usize;
        sim.nodes[0].mem.bytes_mut(src).unwrap()[off..off + 64].fill(i as u8 + 1);
        let wr = send_wr(
            u64::from(i),
            SendOp::Send,
            SendData::Sges(vec![sge(va, 64, src)]),
        );
        sim.nodes[0].ep.post_send(qa, wr).unwrap();
    }
    sim.run_until_idle();
    let wcs = sim.nodes[1].wcs_of(qb, WorkQueue::Recv);
    if qp_type == QpType::Rc {
        assert_eq!(
            wcs.len(),
            MESSAGES as usize,
            "seed {seed}: every message delivered"
        );
    }
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "seed {seed}");
        let i = wc.wr_id as usize;
        let got = &sim.nodes[1].bytes(dst)[64 * i..64 * (i + 1)];
        assert!(
            got.iter().all(|&b| b == i as u8 + 1),
            "seed {seed}: message {i} is node 0's"
        );
    }
}

#[test]
fn rc_accepts_only_its_connected_path() {
    forged_requests_are_dropped(QpType::Rc, 1, Faults::none());
    for_seeds("rc_accepts_only_its_connected_path", SEEDS, |seed| {
        let mut rng = Rng::new(seed ^ 0x5eed);
        forged_requests_are_dropped(QpType::Rc, seed, Faults::lossy(&mut rng));
    });
}

#[test]
fn uc_accepts_only_its_connected_path() {
    forged_requests_are_dropped(QpType::Uc, 1, Faults::none());
}

/// UD takes datagrams from anyone with the Q_Key: the path check is for
/// connected QPs only.
#[test]
fn ud_accepts_any_source() {
    let mut sim = Sim::new(7, 3, Faults::none());
    let ud = create_ud(&mut sim, 1, QpType::Ud, 1, 0x1111_1111, 0);
    let dst = sim.nodes[1].reg(1, 0x9000, vec![0; 4096], AccessFlags::all());
    sim.nodes[1]
        .ep
        .post_recv(ud, recv_wr(1, vec![sge(0x9000, 4096, dst)]))
        .unwrap();
    let sender = create_ud(&mut sim, 2, QpType::Ud, 1, 0x1111_1111, 0);
    let src = sim.nodes[2].reg(1, 0x1000, vec![0x42; 64], AccessFlags::all());
    let dest = rxe_core::transport::UdDest {
        av: sim.nodes[1].av(),
        remote_qpn: ud,
        remote_qkey: 0x1111_1111,
    };
    let wr = ud_wr(2, dest, None, SendData::Sges(vec![sge(0x1000, 64, src)]));
    sim.nodes[2].ep.post_send(sender, wr).unwrap();
    sim.run_until_idle();
    assert_eq!(sim.nodes[1].count_wcs(ud, WorkQueue::Recv), 1);
    assert_eq!(sim.nodes[1].ep.counters().get(Counter::DropWrongAddress), 0);
}

/// The destination end of the path: a packet that reaches the port but
/// names a GID other than the QP's source GID (the entry of its
/// `sgid_index`) is dropped too, and so is every packet once that GID is
/// gone from the table (its address was removed from the host).
#[test]
fn the_destination_must_be_the_qps_source_gid() {
    let o = ConnOpts::new(QpType::Rc);
    let mut sim = Sim::new(3, 2, Faults::none());
    let (qa, qb) = connect(&mut sim, 0, 1, &o);
    let dst = sim.nodes[1].reg(1, 0x9000, vec![0; 4096], AccessFlags::all());
    for i in 0..2 {
        sim.nodes[1]
            .ep
            .post_recv(qb, recv_wr(i, vec![sge(0x9000, 64, dst)]))
            .unwrap();
    }
    // Node 1's port now has another address at index 0.
    let other = Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 99));
    sim.nodes[1].ep.set_gid_table(vec![Some(other)]);
    let victim = sim.nodes[1].av();
    let send = request(
        Opcode::RC_SEND_ONLY,
        qb,
        o.psn_a,
        ExtReprs::default(),
        &[1; 8],
    );
    sim.send_transport(0, &victim, qa, &send);
    sim.run_until_idle();
    assert_eq!(sim.nodes[1].count_wcs(qb, WorkQueue::Recv), 0);
    assert_eq!(sim.nodes[1].ep.counters().get(Counter::DropWrongAddress), 1);
    // The address comes back: the same packet is accepted.
    let gid = sim.nodes[1].gid();
    sim.nodes[1].ep.set_gid_table(vec![Some(gid)]);
    sim.send_transport(0, &victim, qa, &send);
    sim.run_until_idle();
    assert_eq!(sim.nodes[1].count_wcs(qb, WorkQueue::Recv), 1);
    assert_eq!(sim.nodes[1].ep.counters().get(Counter::DropWrongAddress), 1);
}

/// The same rule with IPv6 GIDs, straight into an endpoint: only the
/// connected peer's address, to the QP's own address, is accepted.
#[test]
fn ipv6_paths_are_checked_too() {
    use rxe_core::transport::{
        AddressVector, Endpoint, Instant, PathMtu, QpAttr, QpCaps, QpInit, QpState, RecvMeta,
        VecMemory,
    };
    let v6 = |s: &str| Gid::from(s.parse::<std::net::Ipv6Addr>().unwrap());
    let (me, peer, spoofer) = (v6("fd98::1"), v6("fd98::2"), v6("fd98::3"));
    let mut ep = Endpoint::new(QpCaps::default());
    ep.set_gid_table(vec![Some(v6("fd98::9")), Some(me)]);
    let mut mem = VecMemory::new();
    let key = mem
        .register_bytes(1, 0x9000, vec![0; 64], AccessFlags::all())
        .unwrap();
    let qpn = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: Some(AccessFlags::all()),
        ..Default::default()
    };
    ep.modify_qp(qpn, &init, init.mask()).unwrap();
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        av: Some(AddressVector {
            dgid: peer,
            sgid_index: 1,
            hop_limit: 64,
            ..Default::default()
        }),
        path_mtu: Some(PathMtu::Mtu1024),
        dest_qpn: Some(0x42),
        rq_psn: Some(Psn::new(5)),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    ep.modify_qp(qpn, &rtr, rtr.mask()).unwrap();
    ep.post_recv(qpn, recv_wr(1, vec![sge(0x9000, 64, key)]))
        .unwrap();
    let send = request(
        Opcode::RC_SEND_ONLY,
        qpn,
        Psn::new(5),
        ExtReprs::default(),
        &[7; 8],
    );
    let now = Instant::ZERO;
    let wrong = |c: &Endpoint| c.counters().get(Counter::DropWrongAddress);
    ep.handle(now, &RecvMeta::between(spoofer, me), &send, &mut mem);
    assert_eq!(wrong(&ep), 1, "from a third address");
    ep.handle(
        now,
        &RecvMeta::between(peer, v6("fd98::9")),
        &send,
        &mut mem,
    );
    assert_eq!(wrong(&ep), 2, "to the port's other GID");
    assert!(ep.poll_completion().is_none(), "nothing delivered");
    ep.handle(now, &RecvMeta::between(peer, me), &send, &mut mem);
    assert_eq!(wrong(&ep), 2);
    let wc = ep.poll_completion().expect("the real peer's SEND");
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 8));
    assert_eq!(&mem.bytes(key).unwrap()[..8], &[7; 8]);
}
