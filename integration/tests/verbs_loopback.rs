//! Two software RoCE devices in one process, over real UDP on loopback
//! (each on its own 127.0.x.y address): every verb, object life cycles and
//! refusals, PD isolation, P_Key and Q_Key refusals, events.
//!
//! Every test uses its own addresses, so that they run in parallel.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rxe_integration::verbs_harness::*;
use rxe_verbs::*;

fn send_wr(wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id,
        op,
        data: SendData::Sges(sges),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

fn recv_wr(wr_id: u64, sges: Vec<Sge>) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: sges.into(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn ok(wcs: &[WorkCompletion]) {
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
}

#[test]
fn rc_every_operation_between_two_devices() {
    let a = Node::new("127.0.10.1");
    let b = Node::new("127.0.10.2");
    let (qa, qb) = pair(&a, &b, QpType::Rc);

    // SEND of 64 KiB - 1 (64 packets at MTU 1024) from two SGEs.
    let msg = pattern(65535, 7);
    a.mr.write(0, &msg).unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 65536)])).unwrap();
    qa.post_send(send_wr(
        2,
        SendOp::Send,
        vec![a.mr.sge(0, 30000), a.mr.sge(30000, 35535)],
    ))
    .unwrap();
    let wa = a.wait(1);
    let wb = b.wait(1);
    ok(&wa);
    ok(&wb);
    assert_eq!(wa[0].opcode, WcOpcode::Send);
    assert_eq!(
        (wb[0].opcode, wb[0].byte_len, wb[0].wr_id),
        (WcOpcode::Recv, 65535, 1)
    );
    let mut got = vec![0u8; msg.len()];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, msg);

    // SEND with immediate, inline.
    qb.post_recv(recv_wr(3, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(SendWr {
        data: SendData::Inline(b"inline hello"[..].into()),
        ..send_wr(4, SendOp::SendWithImm { imm: 0xdead_beef }, vec![])
    })
    .unwrap();
    ok(&a.wait(1));
    let wb = b.wait(1);
    ok(&wb);
    assert_eq!(wb[0].imm_data, Some(0xdead_beef));
    assert_eq!(wb[0].byte_len, 12);
    let mut got = [0u8; 12];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"inline hello");

    // RDMA WRITE: no receive consumed, no completion at B.
    let w = pattern(5000, 9);
    a.mr.write(0, &w).unwrap();
    qa.post_send(send_wr(
        5,
        SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 1000,
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(0, 5000)],
    ))
    .unwrap();
    let wa = a.wait(1);
    ok(&wa);
    assert_eq!(wa[0].opcode, WcOpcode::RdmaWrite);
    let mut got = vec![0u8; 5000];
    b.mr.read(1000, &mut got).unwrap();
    assert_eq!(got, w);

    // RDMA WRITE with immediate: consumes a receive, carries the imm.
    qb.post_recv(recv_wr(6, vec![])).unwrap();
    qa.post_send(send_wr(
        7,
        SendOp::RdmaWriteWithImm {
            remote_addr: b.mr.addr() + 8192,
            rkey: b.mr.rkey(),
            imm: 42,
        },
        vec![a.mr.sge(0, 100)],
    ))
    .unwrap();
    ok(&a.wait(1));
    let wb = b.wait(1);
    ok(&wb);
    assert_eq!(
        (wb[0].opcode, wb[0].imm_data, wb[0].byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(42), 100)
    );

    // RDMA READ of 3000 bytes into A at offset 20000.
    let r = pattern(3000, 77);
    b.mr.write(40000, &r).unwrap();
    qa.post_send(send_wr(
        8,
        SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 40000,
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(20000, 3000)],
    ))
    .unwrap();
    let wa = a.wait(1);
    ok(&wa);
    assert_eq!(wa[0].opcode, WcOpcode::RdmaRead);
    let mut got = vec![0u8; 3000];
    a.mr.read(20000, &mut got).unwrap();
    assert_eq!(got, r);

    // Atomics on B's word at offset 48 (aligned), original value to A.
    b.mr.write(48, &100u64.to_ne_bytes()).unwrap();
    qa.post_send(send_wr(
        9,
        SendOp::FetchAdd {
            remote_addr: b.mr.addr() + 48,
            rkey: b.mr.rkey(),
            add: 5,
        },
        vec![a.mr.sge(64, 8)],
    ))
    .unwrap();
    let wa = a.wait(1);
    ok(&wa);
    assert_eq!(wa[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(a.mr.load_u64(64).unwrap(), 100);
    assert_eq!(b.mr.load_u64(48).unwrap(), 105);
    qa.post_send(send_wr(
        10,
        SendOp::CmpSwap {
            remote_addr: b.mr.addr() + 48,
            rkey: b.mr.rkey(),
            compare: 105,
            swap: 7,
        },
        vec![a.mr.sge(72, 8)],
    ))
    .unwrap();
    ok(&a.wait(1));
    assert_eq!(a.mr.load_u64(72).unwrap(), 105);
    assert_eq!(b.mr.load_u64(48).unwrap(), 7);
    // A failed compare leaves the value and returns it.
    qa.post_send(send_wr(
        11,
        SendOp::CmpSwap {
            remote_addr: b.mr.addr() + 48,
            rkey: b.mr.rkey(),
            compare: 1,
            swap: 2,
        },
        vec![a.mr.sge(80, 8)],
    ))
    .unwrap();
    ok(&a.wait(1));
    assert_eq!(a.mr.load_u64(80).unwrap(), 7);
    assert_eq!(b.mr.load_u64(48).unwrap(), 7);

    // Unsignaled sends complete silently; the next signaled one reports.
    qb.post_recv(recv_wr(12, vec![b.mr.sge(0, 16)])).unwrap();
    qb.post_recv(recv_wr(13, vec![b.mr.sge(16, 16)])).unwrap();
    qa.post_send(SendWr {
        signaled: false,
        ..send_wr(14, SendOp::Send, vec![a.mr.sge(0, 16)])
    })
    .unwrap();
    qa.post_send(send_wr(15, SendOp::Send, vec![a.mr.sge(0, 16)]))
        .unwrap();
    let wa = a.wait(1);
    assert_eq!(wa[0].wr_id, 15);
    ok(&b.wait(2));
    assert!(a.dev.counter("sent_pkts") > 70);
    assert!(b.dev.counter("rcvd_pkts") > 70);
    assert_eq!(b.dev.counter("net_drop_bad_icrc"), 0);
}

/// An ordinary region (`reg_mr`) cannot be invalidated by a peer (kernel
/// rxe allows it only for fast-registered regions): the receive completes
/// with REM_INV_REQ_ERR, the sender gets NAK Invalid Request
/// (REM_INV_REQ_ERR), and the region keeps working.
#[test]
fn send_with_invalidate_of_an_ordinary_region_is_refused() {
    let a = Node::new("127.0.11.1");
    let b = Node::new("127.0.11.2");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let target = b.pd.reg_mr_zeroed(4096, all_access()).unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(send_wr(
        2,
        SendOp::SendWithInv {
            rkey: target.rkey(),
        },
        vec![a.mr.sge(0, 8)],
    ))
    .unwrap();
    let wa = a.wait(1);
    assert_eq!((wa[0].wr_id, wa[0].status), (2, WcStatus::RemInvReqErr));
    let wb = b.wait(1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].invalidated_rkey),
        (1, WcStatus::RemInvReqErr, None)
    );
    assert!(!target.is_invalidated());
}

#[test]
fn uc_send_and_write() {
    let a = Node::new("127.0.12.1");
    let b = Node::new("127.0.12.2");
    let (qa, qb) = pair(&a, &b, QpType::Uc);
    let msg = pattern(4000, 3);
    a.mr.write(0, &msg).unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 4096)])).unwrap();
    qa.post_send(send_wr(2, SendOp::Send, vec![a.mr.sge(0, 4000)]))
        .unwrap();
    ok(&a.wait(1));
    let wb = b.wait(1);
    ok(&wb);
    assert_eq!(wb[0].byte_len, 4000);
    qa.post_send(send_wr(
        3,
        SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 10000,
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(0, 4000)],
    ))
    .unwrap();
    ok(&a.wait(1));
    // UC has no ACK: wait for the data itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut got = vec![0u8; 4000];
        b.mr.read(10000, &mut got).unwrap();
        if got == msg {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "UC WRITE never landed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn ud_send_grh_and_reply_through_an_ah_from_the_completion() {
    let a = Node::new("127.0.13.1");
    let b = Node::new("127.0.13.2");
    let qa = a.qp(QpType::Ud);
    let qb = b.qp(QpType::Ud);
    ud_up(&qa, 0x1111_1111, 0);
    ud_up(&qb, 0x1111_1111, 0);
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: b.gid(),
            sgid_index: 0,
            hop_limit: 64,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    let msg = pattern(1000, 5);
    a.mr.write(0, &msg).unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 1040)])).unwrap();
    qa.post_send(SendWr {
        ud: Some(ah.ud_dest(qb.qp_num(), 0x1111_1111)),
        ..send_wr(2, SendOp::Send, vec![a.mr.sge(0, 1000)])
    })
    .unwrap();
    ok(&a.wait(1));
    let wb = b.wait(1);
    ok(&wb);
    assert!(wb[0].grh);
    assert_eq!((wb[0].byte_len, wb[0].src_qp), (1040, qa.qp_num()));
    let mut grh = [0u8; 40];
    b.mr.read(0, &mut grh).unwrap();
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45, "an IPv4 header follows 20 zero bytes");
    assert_eq!(&grh[32..36], &[127, 0, 13, 1], "source address");
    assert_eq!(&grh[36..40], &[127, 0, 13, 2], "destination address");
    let mut got = vec![0u8; 1000];
    b.mr.read(40, &mut got).unwrap();
    assert_eq!(got, msg);

    // B answers through an AH made from the completion; one AH serves two
    // UD QPs of A's peer.
    let back = b.pd.create_ah_from_wc(1, &wb[0], &grh).unwrap();
    assert_eq!(back.address_vector().dgid, a.gid());
    qa.post_recv(recv_wr(3, vec![a.mr.sge(2000, 1040)]))
        .unwrap();
    b.mr.write(5000, b"pong").unwrap();
    qb.post_send(SendWr {
        ud: Some(back.ud_dest(qa.qp_num(), 0x1111_1111)),
        ..send_wr(4, SendOp::Send, vec![b.mr.sge(5000, 4)])
    })
    .unwrap();
    ok(&b.wait(1));
    let wa = a.wait(1);
    ok(&wa);
    assert_eq!(wa[0].src_qp, qb.qp_num());
    let qb2 = b.qp(QpType::Ud);
    ud_up(&qb2, 0x1111_1111, 0);
    qa.post_recv(recv_wr(5, vec![a.mr.sge(3000, 1040)]))
        .unwrap();
    qb2.post_send(SendWr {
        ud: Some(back.ud_dest(qa.qp_num(), 0x1111_1111)),
        ..send_wr(6, SendOp::Send, vec![b.mr.sge(5000, 4)])
    })
    .unwrap();
    ok(&b.wait(1));
    let wa = a.wait(1);
    assert_eq!(wa[0].src_qp, qb2.qp_num());

    // A message larger than the MTU is refused at post time.
    let e = qa
        .post_send(SendWr {
            ud: Some(ah.ud_dest(qb.qp_num(), 0x1111_1111)),
            ..send_wr(7, SendOp::Send, vec![a.mr.sge(0, 5000)])
        })
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::Post(PostError::MessageTooLarge { .. })),
        "{e}"
    );
}

#[test]
fn wrong_qkey_is_dropped_and_counted() {
    let a = Node::new("127.0.14.1");
    let b = Node::new("127.0.14.2");
    let qa = a.qp(QpType::Ud);
    let qb = b.qp(QpType::Ud);
    ud_up(&qa, 0x1111_1111, 0);
    ud_up(&qb, 0x2222_2222, 0);
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: b.gid(),
            port_num: 1,
            hop_limit: 64,
            ..Default::default()
        })
        .unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 1040)])).unwrap();
    qa.post_send(SendWr {
        ud: Some(ah.ud_dest(qb.qp_num(), 0x1111_1111)),
        ..send_wr(2, SendOp::Send, vec![a.mr.sge(0, 10)])
    })
    .unwrap();
    ok(&a.wait(1));
    assert_quiet(&b.cq, Duration::from_millis(200));
    assert_eq!(b.dev.counter("drop_qkey_mismatch"), 1);
    // The right Q_Key gets through to the same receive.
    qa.post_send(SendWr {
        ud: Some(ah.ud_dest(qb.qp_num(), 0x2222_2222)),
        ..send_wr(3, SendOp::Send, vec![a.mr.sge(0, 10)])
    })
    .unwrap();
    ok(&a.wait(1));
    assert_eq!(b.wait(1)[0].wr_id, 1);
}

#[test]
fn pkey_mismatch_is_dropped_and_counted() {
    let a = Node::new("127.0.15.1");
    let b = Node::new("127.0.15.2");
    // B's only partition is 0x0001 (full member); A sends with 0xffff.
    b.dev.set_pkey_table(1, vec![0x8001]).unwrap();
    assert_eq!(b.dev.query_pkey(1, 0).unwrap(), 0x8001);
    assert_eq!(b.dev.find_pkey(1, 0x8001), Some(0));
    let qa = a.qp(QpType::Rc);
    let qb = b.qp(QpType::Rc);
    connect(&qa, qb.qp_num(), b.gid(), 1, 2);
    connect(&qb, qa.qp_num(), a.gid(), 2, 1);
    // retry_cnt 7 (seven retries, backing off) at timeout 14 (67 ms):
    // 27 intervals, about 1.8 s.
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(send_wr(2, SendOp::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    let wa = a.wait(1);
    assert_eq!(wa[0].status, WcStatus::RetryExcErr);
    assert!(b.dev.counter("drop_pkey_mismatch") >= 1);
    assert!(b.cq.poll(4).unwrap().is_empty());
}

#[test]
fn pd_isolation_locally_and_remotely() {
    let a = Node::new("127.0.16.1");
    let b = Node::new("127.0.16.2");
    let (qa, _qb) = pair(&a, &b, QpType::Rc);
    // Locally: an SGE with the L_Key of another PD's region.
    let other_pd = a.dev.alloc_pd().unwrap();
    let foreign = other_pd.reg_mr_zeroed(4096, all_access()).unwrap();
    qa.post_send(send_wr(1, SendOp::Send, vec![foreign.sge(0, 8)]))
        .unwrap();
    let wa = a.wait(1);
    assert_eq!(wa[0].status, WcStatus::LocProtErr);
    // The QP is in ERR now; bring up a fresh pair for the remote check.
    let (qa, _qb2) = pair(&a, &b, QpType::Rc);
    let b_other_pd = b.dev.alloc_pd().unwrap();
    let b_foreign = b_other_pd.reg_mr_zeroed(4096, all_access()).unwrap();
    qa.post_send(send_wr(
        2,
        SendOp::RdmaWrite {
            remote_addr: b_foreign.addr(),
            rkey: b_foreign.rkey(),
        },
        vec![a.mr.sge(0, 8)],
    ))
    .unwrap();
    let wa = a.wait(1);
    assert_eq!((wa[0].wr_id, wa[0].status), (2, WcStatus::RemAccessErr));
    assert_eq!(
        b_foreign.to_vec().unwrap(),
        vec![0u8; 4096],
        "nothing was written"
    );
}

#[test]
fn mr_bounds_rights_and_stale_keys() {
    let a = Node::new("127.0.17.1");
    let b = Node::new("127.0.17.2");
    let check = |op: SendOp| {
        let (qa, _qb) = pair(&a, &b, QpType::Rc);
        qa.post_send(send_wr(1, op, vec![a.mr.sge(0, 16)])).unwrap();
        let wa = a.wait(1);
        assert_eq!(wa[0].status, WcStatus::RemAccessErr, "{op:?}");
        // The responder's QP went to ERR and flushed nothing (no receives).
    };
    // One byte past the end.
    check(SendOp::RdmaWrite {
        remote_addr: b.mr.addr() + 65536 - 15,
        rkey: b.mr.rkey(),
    });
    // Address wrap-around.
    check(SendOp::RdmaWrite {
        remote_addr: u64::MAX - 4,
        rkey: b.mr.rkey(),
    });
    // A region without REMOTE_READ.
    let wo =
        b.pd.reg_mr_zeroed(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
    check(SendOp::RdmaRead {
        remote_addr: wo.addr(),
        rkey: wo.rkey(),
    });
    // A stale key: deregister, register again in the same slot.
    let old = b.pd.reg_mr_zeroed(4096, all_access()).unwrap();
    let (old_key, old_addr) = (old.rkey(), old.addr());
    old.dereg().unwrap();
    let new = b.pd.reg_mr_zeroed(4096, all_access()).unwrap();
    assert_eq!(new.rkey() >> 8, old_key >> 8, "same slot");
    assert_ne!(new.rkey(), old_key, "new key portion");
    check(SendOp::RdmaWrite {
        remote_addr: old_addr,
        rkey: old_key,
    });
    // Registration rules.
    let e =
        b.pd.reg_mr_zeroed(16, AccessFlags::REMOTE_WRITE)
            .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidArgument(_)), "{e}");
}

#[test]
fn object_life_cycles_and_refused_deallocations() {
    let a = Node::new("127.0.18.1");
    let pd = a.dev.alloc_pd().unwrap();
    let cq = a.dev.create_cq(16).unwrap();
    let mr = pd.reg_mr(vec![1, 2, 3], AccessFlags::LOCAL_WRITE).unwrap();
    let srq = pd.create_srq(&SrqInitAttr::default()).unwrap();
    let ah = pd
        .create_ah(&AhAttr {
            dgid: a.gid(),
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: Some(&srq),
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let busy = |r: Result<()>, kind: ObjectKind| match r {
        Err(VerbsError::Busy { kind: k, .. }) => assert_eq!(k, kind),
        other => panic!("expected Busy({kind}), got {other:?}"),
    };
    busy(pd.dealloc(), ObjectKind::Pd);
    busy(cq.destroy(), ObjectKind::Cq);
    busy(srq.destroy(), ObjectKind::Srq);
    // A QP with an SRQ takes no receives of its own.
    let e = qp.post_recv(recv_wr(1, vec![])).unwrap_err();
    assert!(matches!(e, VerbsError::Post(PostError::QpHasSrq)), "{e}");
    qp.destroy().unwrap();
    assert!(matches!(
        qp.destroy(),
        Err(VerbsError::Destroyed(ObjectKind::Qp))
    ));
    cq.destroy().unwrap();
    srq.destroy().unwrap();
    busy(pd.dealloc(), ObjectKind::Pd);
    ah.destroy().unwrap();
    busy(pd.dealloc(), ObjectKind::Pd);
    assert_eq!(mr.dereg().unwrap(), vec![1, 2, 3]);
    assert!(matches!(
        mr.read(0, &mut [0]),
        Err(VerbsError::Destroyed(ObjectKind::Mr))
    ));
    pd.dealloc().unwrap();
    assert!(matches!(
        pd.alloc_check(),
        Err(VerbsError::Destroyed(ObjectKind::Pd))
    ));
    // Objects of a removed device fail with DeviceRemoved.
    let dev = a.dev.clone();
    let pd2 = dev.alloc_pd().unwrap();
    dev.remove().unwrap();
    assert!(matches!(pd2.dealloc(), Err(VerbsError::DeviceRemoved(_))));
    assert!(matches!(
        dev.query_port(1),
        Err(VerbsError::DeviceRemoved(_))
    ));
}

trait AllocCheck {
    fn alloc_check(&self) -> Result<()>;
}
impl AllocCheck for Pd {
    /// Any call on a deallocated PD fails.
    fn alloc_check(&self) -> Result<()> {
        self.reg_mr_zeroed(8, AccessFlags::LOCAL_WRITE).map(|_| ())
    }
}

#[test]
fn bad_verbs_calls_get_typed_errors() {
    let a = Node::new("127.0.19.1");
    assert!(matches!(
        a.dev.create_cq(0),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        a.dev.query_port(2),
        Err(VerbsError::NoSuchPort(2))
    ));
    assert!(matches!(
        a.dev.query_gid(1, 5),
        Err(VerbsError::NoSuchGid(5))
    ));
    assert!(matches!(
        a.dev.query_pkey(1, 3),
        Err(VerbsError::NoSuchPkey(3))
    ));
    assert!(matches!(
        a.dev.set_pkey_table(1, vec![0x8000]),
        Err(VerbsError::InvalidArgument(_))
    ));
    let e =
        a.pd.create_ah(&AhAttr {
            dgid: a.gid(),
            sgid_index: 9,
            port_num: 1,
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, VerbsError::NoSuchGid(9)));
    let qp = a.qp(QpType::Rc);
    // RESET -> RTR skips INIT.
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, VerbsError::Modify(_)), "{e}");
    // Posting a send in RESET.
    let e = qp.post_send(send_wr(1, SendOp::Send, vec![])).unwrap_err();
    assert!(matches!(e, VerbsError::Post(PostError::BadState)), "{e}");
    // A device on an address that is not this host's.
    let e = Device::add(DeviceConfig::on_address("192.0.2.1".parse().unwrap())).unwrap_err();
    assert!(matches!(e, VerbsError::AddressNotLocal(_)), "{e}");
    // The same address twice: the port is busy.
    let e = Device::add(DeviceConfig::on_address("127.0.19.1".parse().unwrap())).unwrap_err();
    assert!(matches!(e, VerbsError::PortBusy { .. }), "{e}");
    // A CQ of another device.
    let b = Node::new("127.0.19.2");
    let e =
        a.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &b.cq,
            recv_cq: &a.cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap_err();
    assert!(matches!(e, VerbsError::WrongDevice(ObjectKind::Cq)), "{e}");
}

#[test]
fn srq_shared_by_two_qps_with_its_limit_event() {
    let a = Node::new("127.0.20.1");
    let b = Node::new("127.0.20.2");
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    b.dev
        .register_event_handler(move |e| ev.lock().unwrap().push(*e));
    let srq =
        b.pd.create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    for i in 0..8 {
        srq.post_recv(recv_wr(100 + i, vec![b.mr.sge(i as usize * 1024, 1024)]))
            .unwrap();
    }
    srq.modify(None, Some(4)).unwrap();
    let mk = || {
        b.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &b.cq,
            recv_cq: &b.cq,
            srq: Some(&srq),
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap()
    };
    let (qb1, qb2) = (mk(), mk());
    let (qa1, qa2) = (a.qp(QpType::Rc), a.qp(QpType::Rc));
    connect(&qa1, qb1.qp_num(), b.gid(), 1, 2);
    connect(&qb1, qa1.qp_num(), a.gid(), 2, 1);
    connect(&qa2, qb2.qp_num(), b.gid(), 3, 4);
    connect(&qb2, qa2.qp_num(), a.gid(), 4, 3);
    for i in 0..5u64 {
        let q = if i % 2 == 0 { &qa1 } else { &qa2 };
        a.mr.write(0, &[i as u8; 100]).unwrap();
        q.post_send(send_wr(i, SendOp::Send, vec![a.mr.sge(0, 100)]))
            .unwrap();
        ok(&a.wait(1));
    }
    let wb = b.wait(5);
    ok(&wb);
    let mut ids: Vec<u64> = wb.iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(
        ids,
        vec![100, 101, 102, 103, 104],
        "taken in order from the SRQ"
    );
    assert!(wb.iter().any(|w| w.qp_num == qb1.qp_num()));
    assert!(wb.iter().any(|w| w.qp_num == qb2.qp_num()));
    std::thread::sleep(Duration::from_millis(100));
    let evs = events.lock().unwrap().clone();
    let limit = evs
        .iter()
        .filter(|e| matches!(e, AsyncEvent::SrqLimitReached { srq: s } if *s == srq.srq_num()))
        .count();
    assert_eq!(limit, 1, "{evs:?}");
    assert_eq!(srq.query().unwrap().srq_limit, 0, "disarmed after firing");
    // A QP of the SRQ that goes to ERR reports its last WQE.
    qb1.modify(&QpAttr {
        qp_state: Some(QpState::Error),
        ..Default::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let evs = events.lock().unwrap().clone();
    assert!(
        evs.contains(&AsyncEvent::QpLastWqeReached {
            qp_num: qb1.qp_num()
        }),
        "{evs:?}"
    );
}

#[test]
fn events_qp_fatal_comm_est_and_cq_overrun() {
    let a = Node::new("127.0.21.1");
    let b = Node::new("127.0.21.2");
    let ea = Arc::new(Mutex::new(Vec::new()));
    let eb = Arc::new(Mutex::new(Vec::new()));
    let (x, y) = (ea.clone(), eb.clone());
    a.dev
        .register_event_handler(move |e| x.lock().unwrap().push(*e));
    b.dev
        .register_event_handler(move |e| y.lock().unwrap().push(*e));

    // COMM_EST: B's QP in RTR gets its first packet.
    let qa = a.qp(QpType::Rc);
    let qb = b.qp(QpType::Rc);
    connect(&qa, qb.qp_num(), b.gid(), 1, 2);
    // B stops in RTR: INIT, then RTR with one READ in flight and RNR timer 1.
    let ready = ReadyParams::Rc {
        sq_psn: Psn::new(2),
        remote: RemoteQp {
            qpn: qa.qp_num(),
            psn: Psn::new(1),
            av: AddressVector {
                dgid: a.gid(),
                hop_limit: 64,
                ..Default::default()
            },
            path_mtu: PathMtu::Mtu1024,
        },
        rc: RcParams {
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
            ..PINGPONG_RC
        },
    };
    connect::to_init(&qb, &InitParams::connected(all_access()).with_port(1)).unwrap();
    connect::to_rtr(&qb, &ready).unwrap();
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(send_wr(2, SendOp::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    ok(&a.wait(1));
    ok(&b.wait(1));

    // QP_FATAL on both sides: a WRITE to a bad R_Key.
    qa.post_send(send_wr(
        3,
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 0xdead_0000,
        },
        vec![a.mr.sge(0, 8)],
    ))
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::RemAccessErr);
    std::thread::sleep(Duration::from_millis(100));
    let (va, vb) = (ea.lock().unwrap().clone(), eb.lock().unwrap().clone());
    assert!(
        vb.contains(&AsyncEvent::CommEst {
            qp_num: qb.qp_num()
        }),
        "{vb:?}"
    );
    assert!(
        va.contains(&AsyncEvent::QpFatal {
            qp_num: qa.qp_num()
        }),
        "{va:?}"
    );
    assert!(
        vb.contains(&AsyncEvent::QpFatal {
            qp_num: qb.qp_num()
        }),
        "{vb:?}"
    );

    // CQ overrun: a CQ of 2 entries gets 4 completions.
    let small = a.dev.create_cq(2).unwrap();
    let q =
        a.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Uc,
            send_cq: &small,
            recv_cq: &small,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: true,
        })
        .unwrap();
    let peer = b.qp(QpType::Uc);
    connect(&q, peer.qp_num(), b.gid(), 5, 6);
    connect(&peer, q.qp_num(), a.gid(), 6, 5);
    for i in 0..4 {
        q.post_send(send_wr(
            i,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 8)],
        ))
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(small.poll(8).unwrap().len(), 2);
    assert!(matches!(small.poll(8), Err(VerbsError::CqOverrun)));
    assert_eq!(small.lost(), 2);
    let va = ea.lock().unwrap().clone();
    assert_eq!(
        va.iter()
            .filter(|e| matches!(e, AsyncEvent::CqErr { cq } if *cq == small.id()))
            .count(),
        1,
        "{va:?}"
    );
}

#[test]
fn cq_notification_blocking_and_async() {
    let a = Node::new("127.0.22.1");
    let b = Node::new("127.0.22.2");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    // Blocking: arm, post, wait.
    b.cq.req_notify(NotifyKind::NextCompletion).unwrap();
    assert!(matches!(
        b.cq.wait(Some(Duration::from_millis(50))),
        Err(VerbsError::Timeout)
    ));
    qb.post_recv(recv_wr(1, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(send_wr(2, SendOp::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    b.cq.wait(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(b.cq.poll(4).unwrap().len(), 1);
    a.wait(1);
    // Solicited only: an unsolicited SEND does not wake, a solicited one does.
    b.cq.req_notify(NotifyKind::SolicitedOnly).unwrap();
    qb.post_recv(recv_wr(3, vec![b.mr.sge(0, 64)])).unwrap();
    qb.post_recv(recv_wr(4, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(send_wr(5, SendOp::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    a.wait(1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(matches!(
        b.cq.wait(Some(Duration::from_millis(50))),
        Err(VerbsError::Timeout)
    ));
    qa.post_send(SendWr {
        solicited: true,
        ..send_wr(6, SendOp::Send, vec![a.mr.sge(0, 8)])
    })
    .unwrap();
    b.cq.wait(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(b.cq.poll(4).unwrap().len(), 2);
    a.wait(1);
    // Async: a future that completes when the CQ is notified.
    b.cq.req_notify(NotifyKind::NextCompletion).unwrap();
    qb.post_recv(recv_wr(7, vec![b.mr.sge(0, 64)])).unwrap();
    let cq = b.cq.clone();
    let waiter = std::thread::spawn(move || block_on(cq.notified()));
    std::thread::sleep(Duration::from_millis(20));
    qa.post_send(send_wr(8, SendOp::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(b.cq.poll(4).unwrap()[0].wr_id, 7);
}

/// A minimal executor: polls a future on this thread, parking between
/// wake-ups.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_secs(10));
    }
}

#[test]
fn clients_hear_of_devices_with_backfill_and_keep_their_data() {
    #[derive(Default)]
    struct Recorder {
        log: Mutex<Vec<String>>,
        id: Mutex<Option<ClientId>>,
    }
    impl Client for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        fn add(&self, d: &Device) {
            // Only the devices of this test: others run in parallel.
            if !d.name().starts_with("clienttest") {
                return;
            }
            self.log.lock().unwrap().push(format!("add {}", d.name()));
            if let Some(id) = *self.id.lock().unwrap() {
                d.set_client_data(id, Box::new(format!("data of {}", d.name())));
            }
        }
        fn remove(&self, d: &Device, data: Option<ClientData>) {
            if !d.name().starts_with("clienttest") {
                return;
            }
            let data = data
                .and_then(|b| b.downcast::<String>().ok())
                .map(|s| *s)
                .unwrap_or_default();
            self.log
                .lock()
                .unwrap()
                .push(format!("remove {} [{data}]", d.name()));
        }
    }
    let mk = |name: &str, ip: &str| {
        Device::add(DeviceConfig {
            name: Some(name.into()),
            ..DeviceConfig::on_address(ip.parse().unwrap())
        })
        .unwrap()
    };
    let d1 = mk("clienttest1", "127.0.23.1");
    let rec = Arc::new(Recorder::default());
    // The id is known only after registration: set it, then re-add data
    // for the backfilled device by hand (as a kernel client would store it
    // in its add callback).
    let reg = register_client(rec.clone());
    *rec.id.lock().unwrap() = Some(reg.id());
    d1.set_client_data(reg.id(), Box::new("data of clienttest1".to_string()));
    assert!(d1.with_client_data(reg.id(), |d| d.is_some()));
    let d2 = mk("clienttest2", "127.0.23.2");
    assert!(rxe_verbs::device_by_name("clienttest2").is_some());
    d2.remove().unwrap();
    assert!(rxe_verbs::device_by_name("clienttest2").is_none());
    reg.unregister();
    let d3 = mk("clienttest3", "127.0.23.3");
    d1.remove().unwrap();
    d3.remove().unwrap();
    let log = rec.log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec![
            "add clienttest1",
            "add clienttest2",
            "remove clienttest2 [data of clienttest2]",
            "remove clienttest1 [data of clienttest1]",
        ]
    );
}

#[test]
fn queries_report_the_port_and_its_tables() {
    let a = Node::new("127.0.24.1");
    let attr = a.dev.query_device().unwrap();
    assert_eq!(attr.phys_port_cnt, 1);
    assert_eq!(attr.atomic_cap, AtomicCap::Hca);
    assert!(attr.max_qp_rd_atom >= 1);
    let p = a.dev.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.netdev, "lo");
    assert_eq!(p.active_mtu, PathMtu::Mtu4096, "loopback's 65536-byte MTU");
    let gids = a.dev.gid_table(1).unwrap();
    assert_eq!(gids.len(), 1);
    assert_eq!(
        gids[0].gid,
        Gid::from("127.0.24.1".parse::<std::net::IpAddr>().unwrap())
    );
    assert_eq!(a.dev.find_gid(&gids[0].gid), Some((1, 0)));
    assert_eq!(a.dev.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(a.dev.find_pkey(1, 0xffff), Some(0));
    assert_eq!(a.dev.find_pkey(1, 0x1234), None);
    let other = Node::new("127.0.24.2");
    // Each device starts its QP numbers somewhere else (a 2^-23 chance of
    // the same start).
    assert_ne!(a.qp(QpType::Rc).qp_num(), other.qp(QpType::Rc).qp_num());
    assert_ne!(
        a.dev.query_device().unwrap().node_guid,
        other.dev.query_device().unwrap().node_guid
    );
}

#[test]
fn sq_drain_raises_sq_drained_then_resumes() {
    let a = Node::new("127.0.25.1");
    let b = Node::new("127.0.25.2");
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    a.dev
        .register_event_handler(move |ev| e.lock().unwrap().push(*ev));
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    for i in 0..4 {
        qb.post_recv(recv_wr(i, vec![b.mr.sge(i as usize * 4096, 4096)]))
            .unwrap();
    }
    // A 4000-byte SEND in flight, then RTS -> SQD with the notification.
    qa.post_send(send_wr(1, SendOp::Send, vec![a.mr.sge(0, 4000)]))
        .unwrap();
    qa.modify(&QpAttr {
        qp_state: Some(QpState::Sqd),
        en_sqd_async_notify: Some(true),
        ..Default::default()
    })
    .unwrap();
    ok(&a.wait(1));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !events.lock().unwrap().contains(&AsyncEvent::SqDrained {
        qp_num: qa.qp_num(),
    }) {
        assert!(std::time::Instant::now() < deadline, "no SQ_DRAINED");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(qa.query().unwrap().state, QpState::Sqd);
    // A send posted in SQD waits; back to RTS it goes out.
    qa.post_send(send_wr(2, SendOp::Send, vec![a.mr.sge(0, 16)]))
        .unwrap();
    assert_quiet(&a.cq, Duration::from_millis(100));
    qa.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        cur_qp_state: Some(QpState::Sqd),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(a.wait(1)[0].wr_id, 2);
    ok(&b.wait(2));
}

#[test]
fn inline_data_larger_than_the_cap_is_refused_at_post_time() {
    let a = Node::new("127.0.143.1");
    let b = Node::new("127.0.143.2");
    let (qa, _qb) = pair(&a, &b, QpType::Rc);
    let max = qa.query().unwrap().cap.max_inline_data;
    let inline = |wr_id, len| SendWr {
        data: SendData::Inline(vec![7; len].into()),
        ..send_wr(wr_id, SendOp::Send, vec![])
    };
    let e = qa.post_send(inline(1, max as usize + 1)).unwrap_err();
    assert!(
        matches!(e, VerbsError::Post(PostError::InlineTooLarge { given, max: m })
            if given == max as usize + 1 && m == max),
        "{e}"
    );
    // In a list, the refused request is named and the ones before it posted.
    let (i, e) = qa
        .post_send_list(vec![inline(2, 8), inline(3, max as usize + 1)])
        .unwrap_err();
    assert_eq!(i, 1);
    assert!(
        matches!(e, VerbsError::Post(PostError::InlineTooLarge { .. })),
        "{e}"
    );
}

#[test]
fn ud_multicast_reaches_every_attached_qp_on_every_device() {
    let a = Node::new("127.0.27.1");
    let b = Node::new("127.0.27.2");
    let c = Node::new("127.0.27.3");
    let qa = a.qp(QpType::Ud);
    let (qb1, qb2, qc) = (b.qp(QpType::Ud), b.qp(QpType::Ud), c.qp(QpType::Ud));
    for q in [&qa, &qb1, &qb2, &qc] {
        ud_up(q, 0x1111_1111, 0);
    }
    let mgid = Gid::from("239.27.0.1".parse::<std::net::IpAddr>().unwrap());
    for q in [&qb1, &qb2, &qc] {
        q.attach_mcast(mgid).unwrap();
    }
    // Only UD QPs, only multicast GIDs.
    let rc = b.qp(QpType::Rc);
    assert!(rc.attach_mcast(mgid).is_err());
    assert!(qb1.attach_mcast(b.gid()).is_err());
    assert_eq!(b.dev.query_device().unwrap().max_mcast_qp_attach, 56);

    qb1.post_recv(recv_wr(1, vec![b.mr.sge(0, 1040)])).unwrap();
    qb2.post_recv(recv_wr(2, vec![b.mr.sge(2000, 1040)]))
        .unwrap();
    qc.post_recv(recv_wr(3, vec![c.mr.sge(0, 1040)])).unwrap();
    let to_group =
        a.pd.create_ah(&AhAttr {
            dgid: mgid,
            hop_limit: 1,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    let msg = pattern(700, 9);
    a.mr.write(0, &msg).unwrap();
    let send = |wr_id| SendWr {
        ud: Some(to_group.ud_dest(rxe_core::transport::MULTICAST_QPN, 0x1111_1111)),
        ..send_wr(wr_id, SendOp::Send, vec![a.mr.sge(0, 700)])
    };
    qa.post_send(send(10)).unwrap();
    ok(&a.wait(1));
    let mut wb = b.wait(2);
    ok(&wb);
    wb.sort_by_key(|w| w.wr_id);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.qp_num, w.src_qp, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (1, qb1.qp_num(), qa.qp_num(), 740),
            (2, qb2.qp_num(), qa.qp_num(), 740)
        ]
    );
    let wc = c.wait(1);
    ok(&wc);
    assert_eq!((wc[0].qp_num, wc[0].byte_len), (qc.qp_num(), 740));
    for (node, at) in [(&b, 0), (&b, 2000), (&c, 0)] {
        let mut grh = [0u8; 40];
        node.mr.read(at, &mut grh).unwrap();
        assert_eq!(&grh[32..36], &[127, 0, 27, 1], "source address");
        assert_eq!(
            &grh[36..40],
            &[239, 27, 0, 1],
            "the group is the destination"
        );
        let mut got = vec![0u8; 700];
        node.mr.read(at + 40, &mut got).unwrap();
        assert_eq!(got, msg);
    }
    assert_eq!(b.dev.counter("rcvd_mcast_copies"), 2);

    // Destroy is refused while attached (EBUSY, as the kernel's).
    assert!(matches!(qb2.destroy(), Err(VerbsError::Busy { .. })));
    // B's QPs leave (B leaves the group on the host); C still hears it.
    qb1.detach_mcast(mgid).unwrap();
    qb2.detach_mcast(mgid).unwrap();
    assert!(qb2.detach_mcast(mgid).is_err(), "detached twice");
    qb1.post_recv(recv_wr(4, vec![b.mr.sge(0, 1040)])).unwrap();
    qc.post_recv(recv_wr(5, vec![c.mr.sge(0, 1040)])).unwrap();
    qa.post_send(send(11)).unwrap();
    ok(&a.wait(1));
    assert_eq!(c.wait(1)[0].wr_id, 5);
    assert_quiet(&b.cq, Duration::from_millis(200));
    qb2.destroy().unwrap();
    qc.detach_mcast(mgid).unwrap();
}
