//! The RDMA CM API over real UDP on loopback (127.0.140.0/24): two
//! devices, each with QP1 and its CM agent, connect with `CmId`s as rping
//! does (resolve, connect, listen, accept), move data over the connected
//! RC QP, disconnect; refusals end in Rejected, a destination without a
//! device in Unreachable; MADs are counted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rxe_integration::verbs_harness::*;
use rxe_verbs::cm::{self, CmId, ConnParam, EventChannel, PortSpace, RdmaCmEvent};
use rxe_verbs::*;

const WAIT: Duration = Duration::from_secs(10);

/// A device whose CM gives up quickly: a 268 ms CM response time, a 4 ms
/// packet lifetime (a 134 ms TimeWait) and 3 retries.
fn cm_node(ip: &str) -> Node {
    let n = Node::new(ip);
    cm::configure(&n.dev, |c| {
        c.cm_response_timeout = 16;
        c.packet_life_time = 10;
        c.max_cm_retries = 3;
    })
    .expect("configure");
    n
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

fn next(ch: &EventChannel) -> RdmaCmEvent {
    ch.get_event_timeout(WAIT).expect("a CM event within 10 s")
}

fn rc_attr(n: &Node) -> QpInitAttr<'_> {
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    }
}

fn wr(wr_id: u64, op: SendOp, sge: Sge) -> SendWr {
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

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// A listener on `ip:port`.
fn listen(n: &Node, at: &str) -> (EventChannel, CmId) {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Tcp).expect("id");
    id.bind_addr(addr(at)).expect("bind");
    id.listen(8).expect("listen");
    assert_eq!(id.device().as_ref(), Some(&n.dev));
    (ch, id)
}

/// A client ID from `src` to `dst`, resolved, with a QP, connect sent.
fn dial(n: &Node, src: &str, dst: &str, private_data: &[u8]) -> (EventChannel, CmId, Qp) {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Tcp).expect("id");
    id.resolve_addr(Some(addr(src)), addr(dst), WAIT)
        .expect("resolve_addr");
    assert!(matches!(next(&ch), RdmaCmEvent::AddrResolved { .. }));
    assert_eq!(id.device().as_ref(), Some(&n.dev));
    id.resolve_route(WAIT).expect("resolve_route");
    assert!(matches!(next(&ch), RdmaCmEvent::RouteResolved { .. }));
    let qp = id.create_qp(&n.pd, &rc_attr(n)).expect("create_qp");
    id.connect(&ConnParam {
        private_data: private_data.to_vec(),
        ..ConnParam::default()
    })
    .expect("connect");
    (ch, id, qp)
}

/// Takes a ConnectRequest, makes the child's QP (one receive posted into
/// `n.mr` at `recv_at`) and accepts with the MR's address and rkey.
fn take_and_accept(n: &Node, ch: &EventChannel, recv_at: usize) -> (CmId, Qp, Vec<u8>) {
    let e = next(ch);
    let RdmaCmEvent::ConnectRequest {
        id, private_data, ..
    } = e
    else {
        panic!("expected a ConnectRequest, got {}", e.name());
    };
    let qp = id.create_qp(&n.pd, &rc_attr(n)).expect("create_qp");
    qp.post_recv(RecvWr {
        wr_id: recv_at as u64,
        sg_list: [n.mr.sge(recv_at, 1024)].into(),
    })
    .expect("post_recv");
    let mut pd = n.mr.addr().to_be_bytes().to_vec();
    pd.extend(n.mr.rkey().to_be_bytes());
    id.accept(&ConnParam {
        private_data: pd,
        ..ConnParam::default()
    })
    .expect("accept");
    (id, qp, private_data)
}

fn established(ch: &EventChannel) -> Vec<u8> {
    match next(ch) {
        RdmaCmEvent::Established { private_data, .. } => private_data,
        e => panic!("expected Established, got {}", e.name()),
    }
}

#[test]
fn connect_move_data_and_disconnect() {
    let srv = cm_node("127.0.140.1");
    let cli = cm_node("127.0.140.2");
    let (lch, _listener) = listen(&srv, "127.0.140.1:7471");
    let (cch, cid, cqp) = dial(&cli, "127.0.140.2:0", "127.0.140.1:7471", b"hello");

    let (sid, _sqp, req_pd) = take_and_accept(&srv, &lch, 0);
    assert!(req_pd.starts_with(b"hello"), "{req_pd:?}");
    assert_eq!(
        sid.remote_addr().map(|a| a.ip()),
        Some(addr("127.0.140.2:1").ip())
    );
    let rep_pd = established(&cch);
    assert!(matches!(next(&lch), RdmaCmEvent::Established { .. }));
    let raddr = u64::from_be_bytes(rep_pd[..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(rep_pd[8..12].try_into().unwrap());

    // SEND, then RDMA WRITE to where the REP's private data said.
    let msg = pattern(1000, 3);
    cli.mr.write(0, &msg).unwrap();
    cqp.post_send(wr(1, SendOp::Send, cli.mr.sge(0, 1000)))
        .unwrap();
    let big = pattern(20000, 9);
    cli.mr.write(4096, &big).unwrap();
    cqp.post_send(wr(
        2,
        SendOp::RdmaWrite {
            remote_addr: raddr + 8192,
            rkey,
        },
        cli.mr.sge(4096, 20000),
    ))
    .unwrap();
    let wcs = cli.wait(2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let rwc = srv.wait(1);
    assert_eq!(rwc[0].status, WcStatus::Success);
    assert_eq!(rwc[0].byte_len, 1000);
    let mut got = vec![0u8; 1000];
    srv.mr.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
    let mut got = vec![0u8; 20000];
    srv.mr.read(8192, &mut got).unwrap();
    assert_eq!(got, big);

    // Disconnect from the client: both sides hear it, then TimeWait ends.
    cid.disconnect().expect("disconnect");
    assert!(matches!(next(&cch), RdmaCmEvent::Disconnected { .. }));
    assert!(matches!(next(&lch), RdmaCmEvent::Disconnected { .. }));
    assert!(matches!(next(&cch), RdmaCmEvent::TimewaitExit { .. }));
    assert!(matches!(next(&lch), RdmaCmEvent::TimewaitExit { .. }));

    // REQ, RTU, DREQ in; REP, DREP out (at least: resends may add).
    assert!(
        srv.dev.counter("cm_rcvd_mads") >= 3,
        "{:?}",
        srv.dev.counters()
    );
    assert!(srv.dev.counter("cm_sent_mads") >= 2);
    assert!(cli.dev.counter("cm_rcvd_mads") >= 2);
    assert!(cli.dev.counter("cm_sent_mads") >= 3);
    assert_eq!(srv.dev.counter("cm_gsi_malformed"), 0);
}

#[test]
fn several_connections_at_once() {
    let srv = cm_node("127.0.140.10");
    let cli = cm_node("127.0.140.11");
    let (lch, _listener) = listen(&srv, "127.0.140.10:7000");
    let dials: Vec<_> = (0..4u8)
        .map(|i| dial(&cli, "127.0.140.11:0", "127.0.140.10:7000", &[i]))
        .collect();
    let mut accepted = Vec::new();
    for slot in 0..4 {
        let (id, qp, pd) = take_and_accept(&srv, &lch, slot * 1024);
        accepted.push((id, qp, pd[0], slot));
    }
    // Each client sees its own Established (one per channel).
    for (ch, _, _) in &dials {
        established(ch);
    }
    for _ in 0..4 {
        assert!(matches!(next(&lch), RdmaCmEvent::Established { .. }));
    }
    // Client i sends 100 bytes of value i over its own QP.
    for (i, (_, _, qp)) in dials.iter().enumerate() {
        let off = 32768 + i * 1024;
        cli.mr.fill(off, 100, 0x40 + i as u8).unwrap();
        qp.post_send(wr(i as u64, SendOp::Send, cli.mr.sge(off, 100)))
            .unwrap();
    }
    cli.wait(4);
    let wcs = srv.wait(4);
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success);
        // The receive's slot is the accepted connection whose REQ carried
        // the client's index: the bytes must be that client's.
        let (_, _, who, _) = accepted
            .iter()
            .find(|a| a.3 as u64 * 1024 == wc.wr_id)
            .expect("a slot");
        let mut got = [0u8; 100];
        srv.mr.read(wc.wr_id as usize, &mut got).unwrap();
        assert_eq!(got, [0x40 + who; 100]);
    }
    for (_, id, _) in &dials {
        id.disconnect().expect("disconnect");
    }
    for (ch, _, _) in &dials {
        assert!(matches!(next(ch), RdmaCmEvent::Disconnected { .. }));
    }
}

#[test]
fn refusals_end_in_rejected() {
    let srv = cm_node("127.0.140.20");
    let cli = cm_node("127.0.140.21");
    // Nobody listens on port 9: the CM answers REJ Invalid Service ID (8).
    cm::start(&srv.dev).expect("QP1 up");
    let (ch, _id, _qp) = dial(&cli, "127.0.140.21:0", "127.0.140.20:9", b"");
    match next(&ch) {
        RdmaCmEvent::Rejected { reason, .. } => assert_eq!(reason, 8),
        e => panic!("expected Rejected, got {}", e.name()),
    }
    assert_eq!(srv.dev.counter("cm_rej_invalid_service_id"), 1);

    // The listener refuses: consumer-defined (28), with its private data.
    let (lch, _listener) = listen(&srv, "127.0.140.20:7001");
    let (ch, _id, _qp) = dial(&cli, "127.0.140.21:0", "127.0.140.20:7001", b"");
    let RdmaCmEvent::ConnectRequest { id, .. } = next(&lch) else {
        panic!("expected a ConnectRequest");
    };
    id.reject(b"busy").expect("reject");
    match next(&ch) {
        RdmaCmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            assert_eq!(reason, 28);
            assert!(private_data.starts_with(b"busy"));
        }
        e => panic!(
            "expected Rejected, got {}: {:?} {:?}",
            e.name(),
            cli.dev.counters(),
            srv.dev.counters()
        ),
    }
}

#[test]
fn no_device_at_the_destination_ends_unreachable() {
    let cli = cm_node("127.0.140.30");
    let t0 = Instant::now();
    let (ch, _id, _qp) = dial(&cli, "127.0.140.30:0", "127.0.140.250:7002", b"");
    match next(&ch) {
        RdmaCmEvent::Unreachable { .. } => {}
        e => panic!("expected Unreachable, got {}", e.name()),
    }
    // 4 tries of 268 ms + 8 ms each.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(cli.dev.counter("cm_retransmits") >= 3);
    assert_eq!(cli.dev.counter("cm_timeouts"), 1);
    // An address of no device cannot be a source.
    let id = CmId::new(&ch, PortSpace::Tcp).unwrap();
    assert!(matches!(
        id.resolve_addr(Some(addr("127.0.140.251:0")), addr("127.0.140.30:1"), WAIT),
        Err(cm::CmApiError::NoDevice(_))
    ));
}

#[test]
fn qp1_counts_mads_of_other_classes() {
    let srv = cm_node("127.0.140.40");
    let cli = Node::new("127.0.140.41");
    // Start the server's CM (QP1) with a listener.
    let (_lch, _listener) = listen(&srv, "127.0.140.40:7003");
    // A UD QP whose Q_Key is QP1's sends a 256-byte MAD of class 0x04
    // (not the CM's 0x07) to QPN 1.
    let qp = cli.qp(QpType::Ud);
    ud_up(&qp, 0x8001_0000, 0);
    let mut mad = [0u8; 256];
    mad[0] = 1; // base version
    mad[1] = 0x04; // management class: performance
    mad[2] = 2; // class version
    mad[3] = 1; // method Get
    cli.mr.write(0, &mad).unwrap();
    let before = srv.dev.counter("cm_rcvd_mads");
    qp.post_send(SendWr {
        ud: Some(UdDest {
            av: AddressVector {
                dgid: srv.gid(),
                hop_limit: 64,
                ..AddressVector::default()
            },
            remote_qpn: 1,
            remote_qkey: 0x8001_0000,
        }),
        ..wr(1, SendOp::Send, cli.mr.sge(0, 256))
    })
    .unwrap();
    cli.wait(1);
    let deadline = Instant::now() + WAIT;
    while srv.dev.counter("cm_rcvd_mads") == before {
        assert!(Instant::now() < deadline, "{:?}", srv.dev.counters());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        srv.dev.counter("cm_drop_bad_field"),
        1,
        "{:?}",
        srv.dev.counters()
    );
}

/// `RDMA_OPTION_ID_ACK_TIMEOUT` (perftest sets it on both sides): the
/// QP's Local ACK Timeout is the ID's, not what the REQ and REP settle.
#[test]
fn the_ack_timeout_option_sets_the_qps_timeout() {
    let srv = cm_node("127.0.140.30");
    let cli = cm_node("127.0.140.31");
    let (lch, _listener) = listen(&srv, "127.0.140.30:7010");
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Tcp).expect("id");
    id.set_ack_timeout(21);
    id.resolve_addr(
        Some(addr("127.0.140.31:0")),
        addr("127.0.140.30:7010"),
        WAIT,
    )
    .expect("resolve_addr");
    assert!(matches!(next(&ch), RdmaCmEvent::AddrResolved { .. }));
    id.resolve_route(WAIT).expect("resolve_route");
    assert!(matches!(next(&ch), RdmaCmEvent::RouteResolved { .. }));
    let qp = id.create_qp(&cli.pd, &rc_attr(&cli)).expect("create_qp");
    id.connect(&ConnParam::default()).expect("connect");
    let RdmaCmEvent::ConnectRequest { id: child, .. } = next(&lch) else {
        panic!("expected a ConnectRequest");
    };
    child.set_ack_timeout(9);
    let sqp = child.create_qp(&srv.pd, &rc_attr(&srv)).expect("create_qp");
    child.accept(&ConnParam::default()).expect("accept");
    assert!(matches!(next(&ch), RdmaCmEvent::Established { .. }));
    assert!(matches!(next(&lch), RdmaCmEvent::Established { .. }));
    assert_eq!(qp.query().expect("query").attr.timeout, Some(21));
    assert_eq!(sqp.query().expect("query").attr.timeout, Some(9));
    // rdma_init_qp_attr's answer says the same.
    assert_eq!(id.qp_attrs().expect("attrs").timeout, 21);
    assert_eq!(child.qp_attrs().expect("attrs").timeout, 9);
}

/// A UD `RDMA_PS_UDP` ID bound to `ip` with its QP made by the CM.
fn ud_id(n: &Node, ip: &str) -> (EventChannel, CmId, Qp) {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Udp).unwrap();
    id.bind_addr(addr(&format!("{ip}:0"))).unwrap();
    let qp = id
        .create_qp(
            &n.pd,
            &QpInitAttr {
                qp_type: QpType::Ud,
                ..rc_attr(n)
            },
        )
        .unwrap();
    (ch, id, qp)
}

#[test]
fn multicast_join_send_and_leave() {
    let rx = cm_node("127.0.140.50");
    let tx = cm_node("127.0.140.51");
    let group: std::net::IpAddr = "239.140.0.50".parse().unwrap();
    let (rch, rid, rqp) = ud_id(&rx, "127.0.140.50");
    let (tch, tid, tqp) = ud_id(&tx, "127.0.140.51");
    // Refusals first: not a group; leaving what was never joined; an
    // unbound ID.
    assert!(matches!(
        rid.join_multicast("10.1.2.3".parse().unwrap(), false),
        Err(cm::CmApiError::NotMulticast(_))
    ));
    assert!(matches!(
        rid.leave_multicast(group),
        Err(cm::CmApiError::NotJoined(_))
    ));
    let unbound = CmId::new(&EventChannel::new(), PortSpace::Udp).unwrap();
    assert!(matches!(
        unbound.join_multicast(group, false),
        Err(cm::CmApiError::NotReady(_))
    ));

    rid.join_multicast(group, false).unwrap();
    assert!(matches!(
        rid.join_multicast(group, false),
        Err(cm::CmApiError::AlreadyJoined(_))
    ));
    let RdmaCmEvent::MulticastJoin { av, ud, .. } = next(&rch) else {
        panic!("no MulticastJoin")
    };
    assert_eq!(av.dgid, Gid::from(group));
    assert_eq!((ud.qp_num, ud.qkey), (0xff_ffff, cm::RDMA_UDP_QKEY));
    // A send-only join attaches nothing: the sender's QP hears nothing.
    tid.join_multicast(group, true).unwrap();
    let RdmaCmEvent::MulticastJoin { av, ud, .. } = next(&tch) else {
        panic!("no MulticastJoin")
    };
    let ah = tx
        .pd
        .create_ah(&AhAttr {
            dgid: av.dgid,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    rqp.post_recv(RecvWr {
        wr_id: 7,
        sg_list: [rx.mr.sge(0, 1040)].into(),
    })
    .unwrap();
    tx.mr.write(0, b"to the group").unwrap();
    tqp.post_send(SendWr {
        ud: Some(ah.ud_dest(ud.qp_num, ud.qkey)),
        ..wr(8, SendOp::Send, tx.mr.sge(0, 12))
    })
    .unwrap();
    let got = rx.wait(1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (7, WcStatus::Success, 52)
    );
    let mut data = [0u8; 12];
    rx.mr.read(40, &mut data).unwrap();
    assert_eq!(&data, b"to the group");
    assert_eq!(tx.wait(1)[0].wr_id, 8);
    assert_eq!(tx.dev.counter("drop_mcast_no_group"), 0);

    // Leaving detaches the QP, so it can be destroyed; destroying the ID
    // leaves what is still joined.
    assert!(rqp.destroy().is_err(), "attached QPs cannot be destroyed");
    rid.leave_multicast(group).unwrap();
    assert!(rid.multicast_groups().is_empty());
    rqp.destroy().unwrap();
    tid.destroy().unwrap();
    assert!(tid.multicast_groups().is_empty());
    // rdma_destroy_qp before the leave: the QP is detached for its
    // destroy; the leave that follows still succeeds.
    let (_ch2, id2, qp2) = ud_id(&rx, "127.0.140.50");
    id2.join_multicast(group, false).unwrap();
    assert!(qp2.destroy().is_err());
    let q = id2.detach_qp().expect("the ID's QP");
    q.destroy().unwrap();
    id2.leave_multicast(group).unwrap();
    let _ = (rid, tqp);
}

/// `listen(2)`: two ConnectRequests wait in the channel; the third and
/// fourth REQ get no answer (counted) until the application takes the
/// first two, and then their resends come in and connect.
#[test]
fn a_full_backlog_leaves_requests_for_their_resend() {
    let srv = cm_node("127.0.140.60");
    let cli = cm_node("127.0.140.61");
    let lch = EventChannel::new();
    let listener = CmId::new(&lch, PortSpace::Tcp).unwrap();
    listener.bind_addr(addr("127.0.140.60:7003")).unwrap();
    listener.listen(2).unwrap();
    let dials: Vec<_> = (0..4u8)
        .map(|i| dial(&cli, "127.0.140.61:0", "127.0.140.60:7003", &[i]))
        .collect();
    // Until the backlog refused both others (the agent's own pace).
    let deadline = Instant::now() + WAIT;
    while srv.dev.counter("cm_drop_backlog_full") < 2 {
        assert!(Instant::now() < deadline, "the backlog never filled");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The children's Established events come on the listener's channel
    // too, between the requests.
    let (mut seen, mut kept, mut up) = (Vec::new(), Vec::new(), 0);
    while kept.len() < 4 || up < 4 {
        match next(&lch) {
            RdmaCmEvent::ConnectRequest {
                id, private_data, ..
            } => {
                let qp = id.create_qp(&srv.pd, &rc_attr(&srv)).unwrap();
                id.accept(&ConnParam::default()).unwrap();
                seen.push(private_data[0]);
                kept.push((id, qp));
            }
            RdmaCmEvent::Established { .. } => up += 1,
            e => panic!("unexpected {}", e.name()),
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [0, 1, 2, 3],
        "every client got in, the last two on a resend"
    );
    for (ch, _, _) in &dials {
        established(ch);
    }
    let _ = (listener, kept);
}

/// What the drop-in library does at a program's exit (`cm::leave`):
/// DREQ every connection still up, wait for each DREP, and resend an
/// unanswered DREQ every 50 ms meanwhile, where the CM's own timer (the
/// default timings: 4.3 s of CM response time plus two packet lifetimes)
/// would resend it only after the process had gone.
#[test]
fn leaving_disconnects_waits_for_the_drep_and_resends_an_unanswered_dreq_soon() {
    let srv = Node::new("127.0.140.70");
    let cli = Node::new("127.0.140.71");
    let (lch, _listener) = listen(&srv, "127.0.140.70:7004");
    let connect = || {
        let (cch, cid, _cqp) = dial(&cli, "127.0.140.71:0", "127.0.140.70:7004", b"");
        let (sid, _sqp, _) = take_and_accept(&srv, &lch, 0);
        established(&cch);
        assert!(matches!(next(&lch), RdmaCmEvent::Established { .. }));
        (cch, cid, sid)
    };
    assert_eq!(cm::leave(&cli.dev, WAIT), 0, "nothing to end");

    // Disconnected before: the wait ends with the DREP, nothing resent.
    let (cch, cid, _sid) = connect();
    cid.disconnect().expect("disconnect");
    assert_eq!(cm::leave(&cli.dev, WAIT), 0);
    assert!(matches!(next(&cch), RdmaCmEvent::Disconnected { .. }));
    assert!(matches!(next(&lch), RdmaCmEvent::Disconnected { .. }));
    assert_eq!(cli.dev.counter("cm_retransmits"), 0);

    // Left up: leaving sends the DREQ, and the peer hears it.
    let (cch, _cid, _sid) = connect();
    assert_eq!(cm::leave(&cli.dev, WAIT), 0);
    assert!(matches!(next(&lch), RdmaCmEvent::Disconnected { .. }));
    assert!(matches!(next(&cch), RdmaCmEvent::Disconnected { .. }));
    assert_eq!(cli.dev.counter("cm_retransmits"), 0);

    // Unanswered (the peer's device is gone): resent within the wait.
    let (_cch, cid, _sid) = connect();
    srv.dev.remove().expect("remove the server's device");
    cid.disconnect().expect("disconnect");
    assert_eq!(cm::leave(&cli.dev, Duration::from_millis(400)), 1);
    let resent = cli.dev.counter("cm_retransmits");
    assert!((3..=8).contains(&resent), "{resent} resends in 400 ms");
}
