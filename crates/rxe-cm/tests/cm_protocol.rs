//! The CM's answers MAD by MAD, with the network in the test's hands:
//! duplicates, unknown IDs, stale connections, bad MADs, the exact
//! retransmission times and the QP attributes.

mod sim;

use core::time::Duration;

use rxe_cm::ip_cm::{service_id, PortSpace};
use rxe_cm::mad::{self, CmMad, CmMessage, MessageMraed, MessageRejected, RejectReason, MAD_LEN};
use rxe_cm::timer::{exp_duration, response_timeout};
use rxe_cm::{
    AcceptParams, CmCounter, CmEndpoint, CmError, CmEvent, CmState, CommId, ConnectParams, MadAddr,
};
use rxe_core::transport::Instant;

const SID: u64 = service_id(PortSpace::Tcp, 7174);

struct Pair {
    now: Instant,
    a: CmEndpoint,
    b: CmEndpoint,
}

fn addr_a() -> MadAddr {
    MadAddr::gsi(sim::gid(1))
}
fn addr_b() -> MadAddr {
    MadAddr::gsi(sim::gid(2))
}

impl Pair {
    fn new() -> Pair {
        let mut b = CmEndpoint::new(sim::sim_config(0xbbbb, 0x2000));
        b.listen(SID).unwrap();
        Pair {
            now: Instant::from_nanos(1_000_000),
            a: CmEndpoint::new(sim::sim_config(0xaaaa, 0x1000)),
            b,
        }
    }
    /// What `ep` sent, parsed, with its destination.
    fn sent(ep: &mut CmEndpoint) -> Vec<(MadAddr, CmMad, [u8; MAD_LEN])> {
        std::iter::from_fn(|| ep.poll_transmit())
            .map(|(to, m)| (to, CmMad::parse(&m).unwrap(), m))
            .collect()
    }
    fn one(ep: &mut CmEndpoint) -> (CmMad, [u8; MAD_LEN]) {
        let mut v = Pair::sent(ep);
        assert_eq!(v.len(), 1, "{v:?}");
        let (_, m, b) = v.remove(0);
        (m, b)
    }
    fn events(ep: &mut CmEndpoint) -> Vec<CmEvent> {
        std::iter::from_fn(|| ep.poll_event()).collect()
    }
    fn connect(&mut self) -> CommId {
        let p = ConnectParams::rc(SID, 0x24, 0xec53de, sim::gid(1), sim::gid(2));
        self.a.connect(self.now, p).unwrap()
    }
    /// REQ to B; B's ConnectRequest ID.
    fn req_to_b(&mut self) -> (CommId, CommId, [u8; MAD_LEN]) {
        let a = self.connect();
        let (_, req) = Pair::one(&mut self.a);
        self.b.handle(self.now, addr_a(), &req);
        match &Pair::events(&mut self.b)[..] {
            [CmEvent::ConnectRequest { id, from, .. }] => {
                assert_eq!(*from, addr_a());
                (a, *id, req)
            }
            other => panic!("{other:?}"),
        }
    }
    /// Up to Established on both sides: (a id, b id, REQ, REP, RTU).
    fn establish(&mut self) -> (CommId, CommId, [u8; MAD_LEN], [u8; MAD_LEN], [u8; MAD_LEN]) {
        let (a, b, req) = self.req_to_b();
        self.b
            .accept(self.now, b, AcceptParams::new(0x28, 0x0266e4))
            .unwrap();
        let (_, rep) = Pair::one(&mut self.b);
        self.a.handle(self.now, addr_b(), &rep);
        assert!(matches!(
            Pair::events(&mut self.a)[..],
            [CmEvent::ConnectResponse { .. }]
        ));
        self.a.send_rtu(a, &[]).unwrap();
        let (_, rtu) = Pair::one(&mut self.a);
        self.b.handle(self.now, addr_a(), &rtu);
        assert_eq!(Pair::events(&mut self.a), [CmEvent::Established { id: a }]);
        assert_eq!(Pair::events(&mut self.b), [CmEvent::Established { id: b }]);
        (a, b, req, rep, rtu)
    }
}

#[test]
fn a_req_for_no_listener_gets_rej_invalid_service_id() {
    let mut p = Pair::new();
    let mut p2 = ConnectParams::rc(
        service_id(PortSpace::Tcp, 1),
        0x24,
        1,
        sim::gid(1),
        sim::gid(2),
    );
    p2.private_data = vec![9; 10];
    let a = p.a.connect(p.now, p2).unwrap();
    let (req, bytes) = Pair::one(&mut p.a);
    p.b.handle(p.now, addr_a(), &bytes);
    let (rej, rej_bytes) = Pair::one(&mut p.b);
    assert_eq!(rej.header.transaction_id, req.header.transaction_id);
    let CmMessage::Rej(r) = &rej.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::InvalidServiceId);
    assert_eq!(r.reason.code(), 8);
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id, r.message_rejected),
        (0, a.0, MessageRejected::Req)
    );
    assert!(p.b.is_empty());
    assert_eq!(p.b.counters().get(CmCounter::RejInvalidServiceId), 1);
    p.a.handle(p.now, addr_b(), &rej_bytes);
    assert!(matches!(
        Pair::events(&mut p.a)[..],
        [CmEvent::Rejected {
            reason: RejectReason::InvalidServiceId,
            ..
        }]
    ));
    assert!(p.a.is_empty());
}

/// With `offer_unlistened`, a REQ for a ServiceID nobody listens on goes
/// to the consumer, which may refuse it later, as the endpoint would have.
#[test]
fn an_offered_unlistened_req_is_refused_by_the_consumer() {
    let mut p = Pair::new();
    let mut cfg = sim::sim_config(0xbbbb, 0x2000);
    cfg.offer_unlistened = true;
    p.b = CmEndpoint::new(cfg);
    let sid = service_id(PortSpace::Tcp, 1);
    let a =
        p.a.connect(
            p.now,
            ConnectParams::rc(sid, 0x24, 1, sim::gid(1), sim::gid(2)),
        )
        .unwrap();
    let (_, bytes) = Pair::one(&mut p.a);
    p.b.handle(p.now, addr_a(), &bytes);
    assert!(Pair::sent(&mut p.b).is_empty(), "nothing sent yet");
    let [CmEvent::ConnectRequest { id, req, .. }] = &Pair::events(&mut p.b)[..] else {
        panic!("no ConnectRequest")
    };
    assert_eq!(req.service_id, sid);
    p.b.refuse_unlistened(p.now, *id).unwrap();
    let (rej, rej_bytes) = Pair::one(&mut p.b);
    let CmMessage::Rej(r) = &rej.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::InvalidServiceId);
    assert_eq!(p.b.counters().get(CmCounter::RejInvalidServiceId), 1);
    p.a.handle(p.now, addr_b(), &rej_bytes);
    assert!(matches!(
        Pair::events(&mut p.a)[..],
        [CmEvent::Rejected { id, reason: RejectReason::InvalidServiceId, .. }] if id == a
    ));
}

#[test]
fn duplicate_reqs_are_answered_by_state() {
    let mut p = Pair::new();
    let (_, b, req) = p.req_to_b();
    // While the application decides: an MRA asks for more time (as
    // Linux's rdma_cm, whose MRA waits for a duplicate), once...
    p.b.handle(p.now, addr_a(), &req);
    let (mra, _) = Pair::one(&mut p.b);
    let CmMessage::Mra(m) = &mra.message else {
        panic!()
    };
    // The configured Service Timeout (Linux's 24 by default; 14 here).
    assert_eq!(
        (m.message_mraed, m.service_timeout),
        (MessageMraed::Req, 14)
    );
    assert!(Pair::events(&mut p.b).is_empty());
    assert_eq!(p.b.state(b), Some(CmState::MraReqSent));
    assert_eq!(p.b.counters().get(CmCounter::DupMraSent), 1);
    // ... then the same MRA again.
    p.b.handle(p.now, addr_a(), &req);
    assert_eq!(Pair::one(&mut p.b).0, mra);
    assert!(matches!(
        p.b.send_mra(b, &[]),
        Err(CmError::WrongState { .. })
    ));
    // After the REP: the REP again.
    p.b.accept(p.now, b, AcceptParams::new(0x28, 7)).unwrap();
    let (rep, _) = Pair::one(&mut p.b);
    p.b.handle(p.now, addr_a(), &req);
    assert_eq!(Pair::one(&mut p.b).0, rep);
    assert_eq!(p.b.counters().get(CmCounter::DupReqRepResent), 1);
    assert_eq!(p.b.counters().get(CmCounter::DupMraResent), 1);
    assert_eq!(p.b.counters().get(CmCounter::DropDuplicateReq), 0);
}

/// A consumer that takes longer to accept than the requester's retries
/// last keeps the connection: the first resent REQ gets an MRA, and the
/// requester waits the MRA's Service Timeout instead of giving up.
#[test]
fn a_slow_accept_is_covered_by_an_mra() {
    let mut p = Pair::new();
    // Linux's MRA setting: 24, about 69 s.
    let mut cfg = sim::sim_config(0xbbbb, 0x2000);
    cfg.mra_service_timeout = 24;
    p.b = CmEndpoint::new(cfg);
    p.b.listen(SID).unwrap();
    let start = p.now;
    let (a, b, _) = p.req_to_b();
    let each = response_timeout(10, 8);
    let t1 = start.saturating_add(each);
    p.a.handle_timeout(t1);
    let (_, resent) = Pair::one(&mut p.a);
    p.b.handle(t1, addr_a(), &resent);
    let (_, mra) = Pair::one(&mut p.b);
    p.a.handle(t1, addr_b(), &mra);
    assert_eq!(p.a.state(a), Some(CmState::MraReqRcvd));
    assert_eq!(Pair::events(&mut p.a), [CmEvent::MraReceived { id: a }]);
    // Twice as long as 15 retries would last: nothing resent, no error.
    let late = start.saturating_add(each * 32);
    p.a.handle_timeout(late);
    assert!(Pair::sent(&mut p.a).is_empty());
    assert!(Pair::events(&mut p.a).is_empty());
    // The accept at last: the connection comes up.
    p.b.accept(late, b, AcceptParams::new(0x28, 7)).unwrap();
    let (_, rep) = Pair::one(&mut p.b);
    p.a.handle(late, addr_b(), &rep);
    assert!(matches!(
        Pair::events(&mut p.a)[..],
        [CmEvent::ConnectResponse { .. }]
    ));
    p.a.send_rtu(a, &[]).unwrap();
    let (_, rtu) = Pair::one(&mut p.a);
    p.b.handle(late, addr_a(), &rtu);
    assert_eq!(Pair::events(&mut p.b), [CmEvent::Established { id: b }]);
}

#[test]
fn duplicate_rep_gets_the_rtu_again_and_duplicate_dreq_the_drep_again() {
    let mut p = Pair::new();
    let (a, b, _, rep, rtu) = p.establish();
    p.a.handle(p.now, addr_b(), &rep);
    assert_eq!(Pair::one(&mut p.a).1, rtu);
    assert_eq!(p.a.counters().get(CmCounter::DupRepRtuResent), 1);
    // A duplicate RTU is dropped.
    p.b.handle(p.now, addr_a(), &rtu);
    assert_eq!(p.b.counters().get(CmCounter::DropDuplicateRtu), 1);

    p.a.disconnect(p.now, a, &[]).unwrap();
    let (dreq, dreq_bytes) = Pair::one(&mut p.a);
    let CmMessage::Dreq(d) = &dreq.message else {
        panic!()
    };
    assert_eq!(d.remote_qpn_eecn, 0x28);
    p.b.handle(p.now, addr_a(), &dreq_bytes);
    let (drep, drep_bytes) = Pair::one(&mut p.b);
    assert_eq!(drep.header.transaction_id, dreq.header.transaction_id);
    assert_eq!(Pair::events(&mut p.b), [CmEvent::Disconnected { id: b }]);
    assert_eq!(p.b.state(b), Some(CmState::TimeWait));
    p.b.handle(p.now, addr_a(), &dreq_bytes);
    assert_eq!(Pair::one(&mut p.b).1, drep_bytes);
    assert_eq!(p.b.counters().get(CmCounter::DupDreqDrepResent), 1);
    p.a.handle(p.now, addr_b(), &drep_bytes);
    assert_eq!(Pair::events(&mut p.a), [CmEvent::Disconnected { id: a }]);
    p.a.handle(p.now, addr_b(), &drep_bytes);
    assert_eq!(p.a.counters().get(CmCounter::DropUnexpectedDrep), 1);
    // TimeWait lasts the Local ACK Timeout.
    let tw = exp_duration(rxe_cm::timer::ack_timeout(6, 8));
    assert_eq!(p.a.poll_timeout(), Some(p.now.saturating_add(tw)));
    p.a.handle_timeout(p.now.saturating_add(tw));
    assert_eq!(Pair::events(&mut p.a), [CmEvent::TimewaitExit { id: a }]);
    assert!(p.a.is_empty());
}

#[test]
fn a_req_in_timewait_gets_rej_stale_and_a_new_req_from_a_connected_qp_too() {
    let mut p = Pair::new();
    let (a, b, req, _, _) = p.establish();
    // A new REQ (new communication ID) from the same QP: stale, and the old
    // connection is disconnected.
    let again = ConnectParams::rc(SID, 0x24, 5, sim::gid(1), sim::gid(2));
    let a2 = p.a.connect(p.now, again).unwrap();
    let (_, req2) = Pair::one(&mut p.a);
    p.b.handle(p.now, addr_a(), &req2);
    let out = Pair::sent(&mut p.b);
    assert_eq!(out.len(), 2, "{out:?}");
    let CmMessage::Rej(r) = &out[0].1.message else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.remote_comm_id),
        (RejectReason::StaleConn, a2.0)
    );
    assert!(matches!(out[1].1.message, CmMessage::Dreq(_)));
    assert_eq!(p.b.state(b), Some(CmState::DreqSent));
    // The DREQ reaches A, which answers and enters TimeWait.
    p.a.handle(p.now, addr_b(), &out[1].2);
    let (_, drep) = Pair::one(&mut p.a);
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
    p.b.handle(p.now, addr_a(), &drep);
    assert_eq!(p.b.state(b), Some(CmState::TimeWait));
    // The old REQ again, in TimeWait: REJ Stale Connection.
    p.b.handle(p.now, addr_a(), &req);
    let (rej, _) = Pair::one(&mut p.b);
    let CmMessage::Rej(r) = &rej.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::StaleConn);
    assert_eq!(p.b.counters().get(CmCounter::RejStaleConn), 2);
}

#[test]
fn unknown_ids_are_answered_or_dropped_as_the_ibta_says() {
    let mut p = Pair::new();
    let (a, _b, _, rep, rtu) = p.establish();
    // A REP for a REQ B never sent: REJ Invalid Communication ID.
    let mut other = CmEndpoint::new(sim::sim_config(0xcccc, 0x3000));
    other.handle(p.now, addr_b(), &rep);
    let (rej, _) = Pair::one(&mut other);
    let CmMessage::Rej(r) = &rej.message else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.message_rejected),
        (RejectReason::InvalidCommId, MessageRejected::Rep)
    );
    // A DREQ for no connection: a DREP.
    p.a.disconnect(p.now, a, &[]).unwrap();
    let (_, dreq) = Pair::one(&mut p.a);
    other.handle(p.now, addr_a(), &dreq);
    assert!(matches!(
        Pair::one(&mut other).0.message,
        CmMessage::Drep(_)
    ));
    assert_eq!(other.counters().get(CmCounter::DrepUnknown), 1);
    // An RTU, MRA, DREP or REJ for no connection: dropped and counted.
    other.handle(p.now, addr_a(), &rtu);
    assert!(Pair::sent(&mut other).is_empty());
    assert_eq!(other.counters().get(CmCounter::DropUnknownCommId), 1);
    // Bytes that are no CM MAD: dropped by reason.
    other.handle(p.now, addr_a(), &[0u8; 10]);
    let mut bad = rtu;
    bad[1] = 0x81; // another management class
    other.handle(p.now, addr_a(), &bad);
    let mut lap = rtu;
    lap[17] = 0x19;
    other.handle(p.now, addr_a(), &lap);
    let c = other.counters();
    assert_eq!(
        (
            c.get(CmCounter::DropTruncated),
            c.get(CmCounter::DropBadField),
            c.get(CmCounter::DropUnknownAttribute)
        ),
        (1, 1, 1)
    );
    assert_eq!(c.dropped(), 4);
}

#[test]
fn a_dreq_naming_another_qp_is_dropped() {
    let mut p = Pair::new();
    let (a, b, _, _, _) = p.establish();
    p.a.disconnect(p.now, a, &[]).unwrap();
    let (mut dreq, _) = Pair::one(&mut p.a);
    if let CmMessage::Dreq(d) = &mut dreq.message {
        d.remote_qpn_eecn = 0x29;
    }
    p.b.handle(p.now, addr_a(), &dreq.to_bytes());
    assert!(Pair::sent(&mut p.b).is_empty());
    assert_eq!(p.b.counters().get(CmCounter::DropDreqWrongQpn), 1);
    assert_eq!(p.b.state(b), Some(CmState::Established));
}

#[test]
fn the_req_is_resent_on_the_response_timeout_then_rejected_with_timeout() {
    let mut p = Pair::new();
    let start = p.now;
    let a = p.connect();
    let (_, req) = Pair::one(&mut p.a);
    let each = response_timeout(10, 8);
    assert_eq!(each, Duration::from_nanos((4096 << 10) + 2 * (4096 << 8)));
    for k in 1..=15u32 {
        let due = start.saturating_add(each * k);
        assert_eq!(p.a.poll_timeout(), Some(due));
        p.a.handle_timeout(Instant::from_nanos(due.as_nanos() - 1));
        assert!(Pair::sent(&mut p.a).is_empty(), "resent early");
        p.a.handle_timeout(due);
        assert_eq!(Pair::one(&mut p.a).1, req, "try {k}");
    }
    let end = start.saturating_add(each * 16);
    p.a.handle_timeout(end);
    let (rej, _) = Pair::one(&mut p.a);
    let CmMessage::Rej(r) = &rej.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::Timeout);
    assert_eq!(&r.ari[..8], &0xaaaau64.to_be_bytes());
    assert_eq!(Pair::events(&mut p.a), [CmEvent::Unreachable { id: a }]);
    assert!(p.a.is_empty());
}

#[test]
fn a_timeout_rej_finds_the_passive_connection_by_guid() {
    let mut p = Pair::new();
    let (_, b, _) = p.req_to_b();
    for _ in 0..16 {
        let t = p.a.poll_timeout().unwrap();
        p.a.handle_timeout(t);
        p.now = t;
    }
    let out = Pair::sent(&mut p.a);
    let (_, _, rej) = out.last().unwrap();
    p.b.handle(p.now, addr_a(), rej);
    assert!(
        matches!(Pair::events(&mut p.b)[..], [CmEvent::Rejected { id, reason: RejectReason::Timeout, .. }] if id == b)
    );
    assert!(p.b.is_empty());
}

#[test]
fn consumer_calls_in_the_wrong_state_are_refused() {
    let mut p = Pair::new();
    let (a, b, _) = p.req_to_b();
    assert!(matches!(
        p.a.send_rtu(a, &[]),
        Err(CmError::WrongState {
            state: CmState::ReqSent,
            ..
        })
    ));
    assert!(matches!(
        p.a.disconnect(p.now, a, &[]),
        Err(CmError::WrongState { .. })
    ));
    assert!(matches!(p.a.qp_attrs(a), Err(CmError::WrongState { .. })));
    assert!(matches!(
        p.b.accept(
            p.now,
            b,
            AcceptParams {
                private_data: vec![0; 197],
                ..AcceptParams::new(1, 1)
            }
        ),
        Err(CmError::Mad(mad::MadError::PrivateDataTooLong { .. }))
    ));
    assert_eq!(
        p.b.accept(p.now, CommId(77), AcceptParams::new(1, 1)),
        Err(CmError::NoSuchId(CommId(77)))
    );
    assert_eq!(p.b.listen(SID), Err(CmError::AlreadyListening(SID)));
    let mut bad = ConnectParams::rc(SID, 1, 1, sim::gid(1), sim::gid(2));
    bad.path_mtu = 6;
    assert_eq!(p.a.connect(p.now, bad.clone()), Err(CmError::BadMtu(6)));
    bad.path_mtu = 3;
    bad.private_data = vec![0; 93];
    assert!(matches!(p.a.connect(p.now, bad), Err(CmError::Mad(_))));
}

#[test]
fn a_req_with_a_bad_mtu_or_transport_is_rejected() {
    let mut p = Pair::new();
    p.connect();
    let (mut req, _) = Pair::one(&mut p.a);
    let CmMessage::Req(r) = &mut req.message else {
        panic!()
    };
    r.path_mtu = 7;
    p.b.handle(p.now, addr_a(), &req.to_bytes());
    let CmMessage::Rej(j) = &Pair::one(&mut p.b).0.message else {
        panic!()
    };
    assert_eq!(j.reason, RejectReason::InvalidMtu);
    let CmMessage::Req(r) = &mut req.message else {
        panic!()
    };
    r.path_mtu = 3;
    r.transport_service_type = 2; // RD
    r.local_comm_id += 1;
    p.b.handle(p.now, addr_a(), &req.to_bytes());
    let CmMessage::Rej(j) = &Pair::one(&mut p.b).0.message else {
        panic!()
    };
    assert_eq!(j.reason, RejectReason::InvalidTransportType);
    assert_eq!(p.b.counters().get(CmCounter::RejInvalidReq), 2);
}

/// The attributes `rdma_init_qp_attr` would give each side of an RC
/// connection, from the REQ and REP.
#[test]
fn qp_attributes_come_from_the_req_and_rep() {
    let mut p = Pair::new();
    let (a, b, _, _, _) = p.establish();
    let qa = p.a.qp_attrs(a).unwrap();
    let qb = p.b.qp_attrs(b).unwrap();
    // Each message's Starting PSN is what its sender receives first, and
    // the peer sends from: in the golden capture of two kernels the active
    // side's first SEND has the REP's PSN (0x0266e4), the passive side's
    // first READ the REQ's (0xec53de).
    assert_eq!(
        (qa.dest_qpn, qa.rq_psn, qa.sq_psn),
        (0x28, 0xec53de, 0x0266e4)
    );
    assert_eq!(
        (qb.dest_qpn, qb.rq_psn, qb.sq_psn),
        (0x24, 0x0266e4, 0xec53de)
    );
    for q in [qa, qb] {
        assert_eq!(q.qp_type, rxe_cm::ConnQpType::Rc);
        assert_eq!(q.path_mtu, 3);
        assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (1, 1));
        assert_eq!((q.retry_cnt, q.rnr_retry, q.min_rnr_timer), (7, 7, 0));
        assert_eq!(q.pkey, 0xffff);
        assert!(q.remote_write && q.remote_read && q.remote_atomic);
        assert_eq!(q.path.hop_limit, 64);
    }
    assert_eq!((qa.path.sgid, qa.path.dgid), (sim::gid(1), sim::gid(2)));
    assert_eq!((qb.path.sgid, qb.path.dgid), (sim::gid(2), sim::gid(1)));
    // REQ Local ACK Timeout: ack_timeout(CA ACK delay 6, PLT 8) = 9; the
    // active side recomputes with the REP's Target ACK Delay (6).
    assert_eq!((qa.timeout, qb.timeout), (9, 9));
}

#[test]
fn asymmetric_rdma_resources_cross_over() {
    let mut p = Pair::new();
    let mut c = ConnectParams::rc(SID, 0x30, 1, sim::gid(1), sim::gid(2));
    c.responder_resources = 4;
    c.initiator_depth = 2;
    c.rnr_retry_count = 3;
    c.retry_count = 5;
    let a = p.a.connect(p.now, c).unwrap();
    let (_, req) = Pair::one(&mut p.a);
    p.b.handle(p.now, addr_a(), &req);
    let b = Pair::events(&mut p.b)[0].id();
    // The passive side gives at most what was asked: 2 reads in, 4 out.
    let acc = AcceptParams {
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 6,
        ..AcceptParams::new(0x40, 2)
    };
    p.b.accept(p.now, b, acc).unwrap();
    let (_, rep) = Pair::one(&mut p.b);
    p.a.handle(p.now, addr_b(), &rep);
    let qa = p.a.qp_attrs(a).unwrap();
    let qb = p.b.qp_attrs(b).unwrap();
    assert_eq!((qa.max_rd_atomic, qa.max_dest_rd_atomic), (2, 4));
    assert_eq!((qb.max_rd_atomic, qb.max_dest_rd_atomic), (4, 2));
    // RNR retry: each side uses the count the other sent.
    assert_eq!((qa.rnr_retry, qb.rnr_retry), (6, 3));
    assert_eq!((qa.retry_cnt, qb.retry_cnt), (5, 5));
}

mod arbitrary {
    use super::*;
    use proptest::prelude::*;

    /// One of the connection's real MADs with its fields scrambled: the
    /// communication IDs drawn from the live ones, 0 and random values, the
    /// rest of the message random.
    fn scrambled(kinds: Vec<[u8; MAD_LEN]>) -> impl Strategy<Value = Vec<u8>> {
        (
            0..kinds.len(),
            proptest::collection::vec(any::<u8>(), 232),
            0u8..4,
            0u8..4,
            any::<u32>(),
            any::<bool>(),
        )
            .prop_map(move |(k, rest, pick_l, pick_r, r, keep_rest)| {
                let mut m = kinds[k].to_vec();
                if !keep_rest {
                    m[24..].copy_from_slice(&rest);
                }
                let id = |p: u8| match p {
                    0 => 0u32,
                    1 => 0x1000,
                    2 => 0x2000,
                    _ => r,
                };
                m[24..28].copy_from_slice(&id(pick_l).to_be_bytes());
                m[28..32].copy_from_slice(&id(pick_r).to_be_bytes());
                m
            })
    }

    fn kinds() -> Vec<[u8; MAD_LEN]> {
        let mut p = Pair::new();
        let (a, _, req, rep, rtu) = p.establish();
        p.a.disconnect(p.now, a, &[]).unwrap();
        let (_, dreq) = Pair::one(&mut p.a);
        let attrs = [0x11u16, 0x12, 0x16, 0x17, 0x18];
        let mut v = vec![req, rep, rtu, dreq];
        for at in attrs {
            let mut m = rtu;
            m[16..18].copy_from_slice(&at.to_be_bytes());
            v.push(m);
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Whatever arrives, in whatever order, the endpoints neither panic
        /// nor leave a connection behind once their timers have run out.
        #[test]
        fn arbitrary_mads_never_panic_and_nothing_is_left(
            mads in proptest::collection::vec((scrambled(kinds()), any::<bool>(), 0u64..20_000_000), 1..40)
        ) {
            let mut p = Pair::new();
            p.establish();
            // The REP reached A, the REQ and RTU B.
            let mut fed = (1u64, 2u64);
            for (m, to_a, dt) in &mads {
                p.now = p.now.saturating_add(Duration::from_nanos(*dt));
                if *to_a {
                    p.a.handle(p.now, addr_b(), m);
                    fed.0 += 1;
                } else {
                    p.b.handle(p.now, addr_a(), m);
                    fed.1 += 1;
                }
                p.a.handle_timeout(p.now);
                p.b.handle_timeout(p.now);
                while p.a.poll_event().is_some() || p.b.poll_event().is_some() {}
                // What they send is dropped: the test is the network.
                Pair::sent(&mut p.a);
                Pair::sent(&mut p.b);
            }
            prop_assert_eq!(p.a.counters().get(CmCounter::RcvdMads), fed.0);
            prop_assert_eq!(p.b.counters().get(CmCounter::RcvdMads), fed.1);
            // Disconnect what is up and refuse what waits on its consumer
            // (no timer runs there), then run the clocks out.
            for (ep, ids) in [(&mut p.a, 0x1000..0x1010u32), (&mut p.b, 0x2000..0x2010u32)] {
                for id in ids {
                    let _ = ep.disconnect(p.now, CommId(id), &[]);
                    let _ = ep.reject(p.now, CommId(id), RejectReason::ConsumerDefined, &[]);
                }
            }
            for _ in 0..200 {
                let next = [p.a.poll_timeout(), p.b.poll_timeout()].into_iter().flatten().min();
                let Some(t) = next else { break };
                p.now = t;
                p.a.handle_timeout(t);
                p.b.handle_timeout(t);
                Pair::sent(&mut p.a);
                Pair::sent(&mut p.b);
                while p.a.poll_event().is_some() || p.b.poll_event().is_some() {}
            }
            prop_assert_eq!(p.a.poll_timeout(), None);
            prop_assert_eq!(p.b.poll_timeout(), None);
            prop_assert!(p.a.is_empty(), "A holds {}", p.a.len());
            prop_assert!(p.b.is_empty(), "B holds {}", p.b.len());
        }
    }
}

/// A request the consumer has no room for is forgotten unanswered; its
/// resend is a new request.
#[test]
fn a_forgotten_request_comes_back_as_new_on_its_resend() {
    let mut p = Pair::new();
    let (_, b, req) = p.req_to_b();
    p.b.forget_request(b).unwrap();
    assert!(Pair::sent(&mut p.b).is_empty(), "no REJ, no MRA");
    assert!(p.b.is_empty());
    assert_eq!(p.b.counters().get(CmCounter::DropBacklogFull), 1);
    assert!(matches!(p.b.forget_request(b), Err(CmError::NoSuchId(_))));
    p.b.handle(p.now, addr_a(), &req);
    assert!(matches!(
        Pair::events(&mut p.b)[..],
        [CmEvent::ConnectRequest { .. }]
    ));
}

#[test]
fn a_lost_dreq_hurried_before_exit_is_resent_soon_and_reaches_the_peer() {
    let mut p = Pair::new();
    let (a, b, _, _, _) = p.establish();
    assert_eq!(p.a.unanswered_dreqs(), 0);
    p.a.disconnect(p.now, a, &[]).unwrap();
    let (_, lost) = Pair::one(&mut p.a);
    assert_eq!(p.a.unanswered_dreqs(), 1);
    let normal = p.a.poll_timeout().unwrap();
    // The consumer is leaving: resends four times as often from now on.
    let every = normal.saturating_since(p.now) / 4;
    p.a.hurry_dreqs(p.now, every);
    let first = p.now.saturating_add(every);
    assert!(first < normal);
    assert_eq!(p.a.poll_timeout(), Some(first));
    // Nothing before the hurried time, then the same DREQ again.
    p.a.handle_timeout(Instant::from_nanos(first.as_nanos() - 1));
    assert!(Pair::sent(&mut p.a).is_empty());
    p.a.handle_timeout(first);
    let (_, again) = Pair::one(&mut p.a);
    assert_eq!(again, lost);
    assert_eq!(p.a.counters().get(CmCounter::Retransmits), 1);
    assert_eq!(p.a.poll_timeout(), Some(first.saturating_add(every)));
    // Hurrying again does not put a sooner resend off.
    p.a.hurry_dreqs(first.saturating_add(every / 2), every);
    assert_eq!(p.a.poll_timeout(), Some(first.saturating_add(every)));
    // The resent DREQ reaches B, whose DREP ends it at A.
    p.b.handle(first, addr_a(), &again);
    assert_eq!(Pair::events(&mut p.b), [CmEvent::Disconnected { id: b }]);
    let (_, drep) = Pair::one(&mut p.b);
    p.a.handle(first, addr_b(), &drep);
    assert_eq!(Pair::events(&mut p.a), [CmEvent::Disconnected { id: a }]);
    assert_eq!(p.a.unanswered_dreqs(), 0);
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
}

#[test]
fn a_hurried_dreq_that_is_never_answered_still_runs_out_of_retries() {
    let mut p = Pair::new();
    let (a, _, _, _, _) = p.establish();
    p.a.disconnect(p.now, a, &[]).unwrap();
    let _ = Pair::sent(&mut p.a);
    let every = Duration::from_millis(20);
    p.a.hurry_dreqs(p.now, every);
    let retries = u64::from(p.a.config().max_cm_retries);
    let mut now = p.now;
    for _ in 0..retries {
        now = now.saturating_add(every);
        p.a.handle_timeout(now);
        assert_eq!(Pair::sent(&mut p.a).len(), 1);
    }
    assert_eq!(p.a.counters().get(CmCounter::Retransmits), retries);
    now = now.saturating_add(every);
    p.a.handle_timeout(now);
    assert!(Pair::sent(&mut p.a).is_empty());
    assert_eq!(Pair::events(&mut p.a), [CmEvent::Disconnected { id: a }]);
    assert_eq!(p.a.unanswered_dreqs(), 0);
}
