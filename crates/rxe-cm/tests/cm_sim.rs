//! CM endpoints over the seeded simulated network (`sim/`): connections,
//! disconnections, rejections, timeouts and SIDR under loss, duplication
//! and reordering, over many seeds. The invariant checked everywhere:
//! every connect ends Established on both sides or in an error on both,
//! and once the network is quiet no connection is left on either side
//! (TimeWait included): nothing half open beyond the timeouts.

mod sim;

use core::time::Duration;

use rxe_cm::ip_cm::{service_id, PortSpace};
use rxe_cm::mad::{RejectReason, SidrStatus};
use rxe_cm::timer::response_timeout;
use rxe_cm::{CmCounter, CmEvent, CommId, ConnectParams, SidrParams};
use sim::{Faults, OnRequest, Sim};

const SID: u64 = service_id(PortSpace::Tcp, 7174);

fn lossy() -> Faults {
    Faults {
        loss: 150,
        dup: 100,
        jitter: Duration::from_micros(900),
    }
}

fn connect(s: &mut Sim, from: usize, to: usize) -> CommId {
    let qpn = s.nodes[from].next_qpn;
    s.nodes[from].next_qpn += 1;
    let p = ConnectParams::rc(SID, qpn, 0x1000 + qpn, s.nodes[from].gid, s.nodes[to].gid);
    let now = s.now;
    s.nodes[from].ep.connect(now, p).unwrap()
}

/// The terminal connect outcome of a connection on one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Established,
    Failed,
    Pending,
}

fn outcome(events: &[&CmEvent]) -> Outcome {
    for e in events {
        match e {
            CmEvent::Established { .. } => return Outcome::Established,
            CmEvent::Rejected { .. } | CmEvent::Unreachable { .. } => return Outcome::Failed,
            _ => {}
        }
    }
    Outcome::Pending
}

/// The passive side's ID for the active side's connection `id`, from its
/// ConnectRequest event.
fn passive_id(s: &Sim, passive: usize, active_guid: u64, id: CommId) -> Option<CommId> {
    s.nodes[passive].events.iter().find_map(|(_, e)| match e {
        CmEvent::ConnectRequest { id: pid, req, .. }
            if req.local_comm_id == id.0 && req.local_ca_guid == active_guid =>
        {
            Some(*pid)
        }
        _ => None,
    })
}

fn assert_all_gone(s: &Sim, seed: u64) {
    for (i, n) in s.nodes.iter().enumerate() {
        assert!(
            n.ep.is_empty(),
            "seed {seed}: node {i} still holds {} connection(s)",
            n.ep.len()
        );
        assert_eq!(
            n.ep.poll_timeout(),
            None,
            "seed {seed}: node {i} has a timer left"
        );
    }
}

#[test]
fn connect_and_disconnect_under_faults_many_seeds() {
    let mut established = 0;
    let mut failed = 0;
    for seed in 0..150u64 {
        let mut s = Sim::new(seed, lossy(), 2);
        s.nodes[1].ep.listen(SID).unwrap();
        let ids: Vec<CommId> = (0..4).map(|_| connect(&mut s, 0, 1)).collect();
        // Long enough for every retry of the REQ and the REP.
        s.run_for(Duration::from_millis(400));
        let mut up = Vec::new();
        for &id in &ids {
            let a = outcome(&s.nodes[0].events_of(id));
            let pid = passive_id(&s, 1, 0x1000, id);
            let b = pid.map_or(Outcome::Pending, |p| outcome(&s.nodes[1].events_of(p)));
            match (a, b) {
                (Outcome::Established, Outcome::Established) => {
                    established += 1;
                    up.push((id, pid.unwrap()));
                    // The QP attributes agree across the two sides.
                    let qa = s.nodes[0].ep.qp_attrs(id).unwrap();
                    let qb = s.nodes[1].ep.qp_attrs(pid.unwrap()).unwrap();
                    assert_eq!(
                        (qa.sq_psn, qa.rq_psn),
                        (qb.rq_psn, qb.sq_psn),
                        "seed {seed}"
                    );
                    assert_eq!(qa.path.dgid, qb.path.sgid);
                }
                (Outcome::Failed, Outcome::Failed | Outcome::Pending) => failed += 1,
                other => panic!("seed {seed}: connection {id:?} ended {other:?}"),
            }
        }
        // Disconnect: the first from the active side, the second from the
        // passive side, the rest from both at once.
        let now = s.now;
        for (k, &(a, p)) in up.iter().enumerate() {
            match k {
                0 => s.nodes[0].ep.disconnect(now, a, &[]).unwrap(),
                1 => s.nodes[1].ep.disconnect(now, p, &[]).unwrap(),
                _ => {
                    s.nodes[0].ep.disconnect(now, a, &[]).unwrap();
                    s.nodes[1].ep.disconnect(now, p, &[]).unwrap();
                }
            }
        }
        assert!(s.run_for(Duration::from_secs(2)), "seed {seed}: not quiet");
        for &(a, p) in &up {
            for (node, id) in [(0, a), (1, p)] {
                let ev = s.nodes[node].events_of(id);
                let disc = ev
                    .iter()
                    .filter(|e| matches!(e, CmEvent::Disconnected { .. }))
                    .count();
                let exit = ev
                    .iter()
                    .filter(|e| matches!(e, CmEvent::TimewaitExit { .. }))
                    .count();
                assert_eq!(
                    (disc, exit),
                    (1, 1),
                    "seed {seed}: node {node} {id:?}: {ev:?}"
                );
            }
        }
        assert_all_gone(&s, seed);
    }
    // With 15% loss nearly every attempt gets through in 16 tries.
    assert!(
        established > 550,
        "established {established}, failed {failed}"
    );
}

#[test]
fn simultaneous_disconnect_both_sides_end_in_timewait() {
    let mut unexpected_dreps = 0;
    for seed in 0..100u64 {
        let mut s = Sim::new(
            seed,
            Faults {
                loss: 100,
                dup: 50,
                jitter: Duration::from_micros(200),
            },
            2,
        );
        s.nodes[1].ep.listen(SID).unwrap();
        let a = connect(&mut s, 0, 1);
        s.run_for(Duration::from_millis(400));
        let p = passive_id(&s, 1, 0x1000, a).unwrap();
        assert_eq!(
            outcome(&s.nodes[0].events_of(a)),
            Outcome::Established,
            "seed {seed}"
        );
        let now = s.now;
        s.nodes[0].ep.disconnect(now, a, b"bye").unwrap();
        s.nodes[1].ep.disconnect(now, p, b"bye").unwrap();
        // A second call while disconnecting changes nothing.
        s.nodes[0].ep.disconnect(now, a, &[]).unwrap();
        assert!(s.run_for(Duration::from_secs(2)));
        for (node, id) in [(0, a), (1, p)] {
            let ev = s.nodes[node].events_of(id);
            assert!(
                matches!(ev[ev.len() - 2], CmEvent::Disconnected { .. }),
                "seed {seed}: {ev:?}"
            );
            assert!(matches!(ev[ev.len() - 1], CmEvent::TimewaitExit { .. }));
        }
        unexpected_dreps += s.nodes[0].ep.counters().get(CmCounter::DropUnexpectedDrep)
            + s.nodes[1].ep.counters().get(CmCounter::DropUnexpectedDrep);
        assert_all_gone(&s, seed);
    }
    // Crossing DREQs: each side answers the other's and then drops the DREP to its own.
    assert!(unexpected_dreps > 50, "{unexpected_dreps}");
}

#[test]
fn a_peer_that_never_answers_ends_unreachable_within_the_retries() {
    let mut s = Sim::new(1, Faults::default(), 2);
    s.nodes[1].cut = true;
    let start = s.now;
    let a = connect(&mut s, 0, 1);
    assert!(s.run_for(Duration::from_secs(5)));
    let cfg = s.nodes[0].ep.config().clone();
    let each = response_timeout(cfg.cm_response_timeout, cfg.packet_life_time);
    let (t, ev) = s.nodes[0].events.iter().find(|(_, e)| e.id() == a).unwrap();
    assert_eq!(*ev, CmEvent::Unreachable { id: a });
    // The REQ and 15 resends, each waited for in full.
    assert_eq!(
        t.saturating_since(start),
        each * (u32::from(cfg.max_cm_retries) + 1)
    );
    let c = s.nodes[0].ep.counters();
    assert_eq!(c.get(CmCounter::Retransmits), 15);
    assert_eq!(c.get(CmCounter::Timeouts), 1);
    // REQ x16 and the REJ Timeout.
    assert_eq!(c.get(CmCounter::SentMads), 17);
    assert_all_gone(&s, 1);
}

#[test]
fn a_peer_that_dies_after_the_req_leaves_the_passive_side_unreachable() {
    for seed in 0..20 {
        let mut s = Sim::new(seed, Faults::default(), 2);
        s.nodes[1].ep.listen(SID).unwrap();
        s.nodes[1].on_request = OnRequest::Ignore;
        let a = connect(&mut s, 0, 1);
        s.run_for(Duration::from_millis(1));
        let p = passive_id(&s, 1, 0x1000, a).unwrap();
        s.nodes[0].cut = true;
        let now = s.now;
        s.nodes[1]
            .ep
            .accept(now, p, rxe_cm::AcceptParams::new(0x99, 5))
            .unwrap();
        assert!(s.run_for(Duration::from_secs(5)));
        let ev = s.nodes[1].events_of(p);
        assert!(matches!(ev[1], CmEvent::Unreachable { .. }), "{ev:?}");
        assert!(matches!(ev[2], CmEvent::TimewaitExit { .. }), "{ev:?}");
        assert_eq!(s.nodes[1].ep.counters().get(CmCounter::Retransmits), 15);
        assert!(s.nodes[1].ep.is_empty());
    }
}

#[test]
fn a_peer_that_dies_while_connected_disconnects_on_the_dreq_timeout() {
    let mut s = Sim::new(3, Faults::default(), 2);
    s.nodes[1].ep.listen(SID).unwrap();
    let a = connect(&mut s, 0, 1);
    s.run_for(Duration::from_millis(50));
    assert_eq!(outcome(&s.nodes[0].events_of(a)), Outcome::Established);
    s.nodes[1].cut = true;
    let start = s.now;
    s.nodes[0].ep.disconnect(start, a, &[]).unwrap();
    s.run_for(Duration::from_secs(5));
    let cfg = s.nodes[0].ep.config().clone();
    let each = response_timeout(cfg.cm_response_timeout, cfg.packet_life_time);
    let (t, _) = s.nodes[0]
        .events
        .iter()
        .find(|(_, e)| matches!(e, CmEvent::Disconnected { id } if *id == a))
        .unwrap();
    assert_eq!(t.saturating_since(start), each * 16);
    assert!(s.nodes[0].ep.is_empty());
}

#[test]
fn rejections_reach_the_active_side_under_faults() {
    for seed in 0..60u64 {
        let mut s = Sim::new(seed, lossy(), 3);
        // Node 1 refuses; node 2 listens on nothing.
        s.nodes[1].ep.listen(SID).unwrap();
        s.nodes[1].on_request = OnRequest::Reject;
        let to1 = connect(&mut s, 0, 1);
        let to2 = connect(&mut s, 0, 2);
        s.run_for(Duration::from_millis(400));
        for (id, want) in [
            (to1, RejectReason::ConsumerDefined),
            (to2, RejectReason::InvalidServiceId),
        ] {
            let ev = s.nodes[0].events_of(id);
            match ev.first() {
                Some(CmEvent::Rejected { reason, rej, .. }) => {
                    assert_eq!(*reason, want, "seed {seed}");
                    if want == RejectReason::ConsumerDefined {
                        assert_eq!(&rej.private_data.as_bytes()[..9], b"no thanks");
                    }
                }
                // Every REJ lost (each one answers a REQ that got through).
                Some(CmEvent::Unreachable { .. }) => {}
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        assert!(s.nodes[2].ep.counters().get(CmCounter::RejInvalidServiceId) >= 1);
        assert!(s.run_for(Duration::from_secs(2)));
        assert_all_gone(&s, seed);
    }
}

#[test]
fn an_mra_buys_the_passive_side_time() {
    for seed in 0..30u64 {
        let mut s = Sim::new(
            seed,
            Faults {
                loss: 50,
                dup: 50,
                jitter: Duration::from_micros(300),
            },
            2,
        );
        s.nodes[0].ep = rxe_cm::CmEndpoint::new(rxe_cm::CmConfig {
            max_cm_retries: 2,
            ..sim::sim_config(0x1000, 0x100)
        });
        s.nodes[1].ep.listen(SID).unwrap();
        // Three tries of 6.2 ms are 18.6 ms; the application takes 40 ms,
        // within the MRA's 67 ms service timeout.
        s.nodes[1].on_request = OnRequest::MraThenAccept(Duration::from_millis(40));
        let a = connect(&mut s, 0, 1);
        s.run_for(Duration::from_millis(500));
        let ev = s.nodes[0].events_of(a);
        let mra = ev.iter().any(|e| matches!(e, CmEvent::MraReceived { .. }));
        if mra {
            assert_eq!(outcome(&ev), Outcome::Established, "seed {seed}: {ev:?}");
        }
        if seed < 5 {
            assert!(mra, "seed {seed}: no MRA got through: {ev:?}");
        }
    }
    // Without the MRA the same wait fails.
    let mut s = Sim::new(0, Faults::default(), 2);
    s.nodes[0].ep = rxe_cm::CmEndpoint::new(rxe_cm::CmConfig {
        max_cm_retries: 2,
        ..sim::sim_config(0x1000, 0x100)
    });
    s.nodes[1].ep.listen(SID).unwrap();
    s.nodes[1].on_request = OnRequest::Ignore;
    let a = connect(&mut s, 0, 1);
    s.run_for(Duration::from_millis(500));
    assert_eq!(outcome(&s.nodes[0].events_of(a)), Outcome::Failed);
}

#[test]
fn several_endpoints_connect_to_each_other() {
    for seed in 0..30u64 {
        let mut s = Sim::new(seed, lossy(), 4);
        for n in &mut s.nodes {
            n.ep.listen(SID).unwrap();
        }
        let mut all = Vec::new();
        for from in 0..4 {
            for to in 0..4 {
                if from != to {
                    all.push((from, to, connect(&mut s, from, to)));
                }
            }
        }
        s.run_for(Duration::from_millis(400));
        for &(from, to, id) in &all {
            let pid = passive_id(&s, to, 0x1000 + from as u64, id);
            let a = outcome(&s.nodes[from].events_of(id));
            let b = pid.map_or(Outcome::Pending, |p| outcome(&s.nodes[to].events_of(p)));
            assert!(
                matches!(
                    (a, b),
                    (Outcome::Established, Outcome::Established)
                        | (Outcome::Failed, Outcome::Failed | Outcome::Pending)
                ),
                "seed {seed}: {from}->{to}: {a:?} {b:?}"
            );
            if a == Outcome::Established {
                let now = s.now;
                s.nodes[from].ep.disconnect(now, id, &[]).unwrap();
            }
        }
        assert!(s.run_for(Duration::from_secs(2)));
        assert_all_gone(&s, seed);
    }
}

#[test]
fn sidr_resolves_a_ud_service_under_faults() {
    let usid = service_id(PortSpace::Udp, 7174);
    let mut answered = 0;
    for seed in 0..80u64 {
        let mut s = Sim::new(seed, lossy(), 3);
        s.nodes[1].ep.listen(usid).unwrap();
        let now = s.now;
        let to1 = SidrParams {
            to: s.nodes[1].addr(),
            service_id: usid,
            pkey: 0xffff,
            private_data: vec![1, 2, 3],
        };
        let to2 = SidrParams {
            to: s.nodes[2].addr(),
            service_id: usid,
            pkey: 0xffff,
            private_data: vec![],
        };
        let a = s.nodes[0].ep.sidr_request(now, to1).unwrap();
        let b = s.nodes[0].ep.sidr_request(now, to2).unwrap();
        assert!(s.run_for(Duration::from_secs(2)));
        match s.nodes[0].events_of(a)[..] {
            [CmEvent::SidrResponse { rep, .. }] => {
                answered += 1;
                assert_eq!(rep.status, SidrStatus::Success);
                assert_eq!(rep.qpn, s.nodes[1].next_qpn);
                assert_eq!(rep.qkey, 0x1111_1111);
                assert_eq!(rep.service_id, usid);
                assert_eq!(rep.private_data.as_bytes()[0], 7);
            }
            [CmEvent::Unreachable { .. }] => {}
            ref other => panic!("seed {seed}: {other:?}"),
        }
        // The passive side's application saw the request exactly once.
        let reqs = s.nodes[1]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, CmEvent::SidrRequest { .. }))
            .count();
        assert!(reqs <= 1);
        match s.nodes[0].events_of(b)[..] {
            [CmEvent::SidrResponse { rep, .. }] => {
                assert_eq!(rep.status, SidrStatus::ServiceIdNotSupported)
            }
            [CmEvent::Unreachable { .. }] => {}
            ref other => panic!("seed {seed}: {other:?}"),
        }
        assert_all_gone(&s, seed);
    }
    assert!(answered > 75, "{answered}");
}
