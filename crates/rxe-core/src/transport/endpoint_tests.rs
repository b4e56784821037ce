//! Endpoint tests: packets in through `handle`, out through
//! `poll_transmit`, with the refusals counted by reason.

use super::*;
use crate::transport::memory::Key;
use crate::transport::multicast::McastError;
use crate::transport::qp::{AccessFlags, AddressVector, PathMtu};
use crate::transport::vec_memory::VecMemory;
use crate::transport::wr::{SendData, SendOp, Sge, WcOpcode, WcStatus, WorkQueue};
use crate::transport::{test_packet, Psn};
use crate::wire::Gid;
use crate::wire::{AethRepr, BthRepr, DethRepr, ExtReprs, NakCode, Opcode, Syndrome};

/// An endpoint with one RC QP in RTR (expecting PSN 100) and one UD QP
/// in RTR.
fn setup() -> (Endpoint, u32, u32) {
    let mut ep = Endpoint::new(QpCaps::default());
    let (rc, ud) = setup_on(&mut ep, None);
    (ep, rc, ud)
}

/// Creates an RC QP (in RTR, expecting PSN 100, Q_Key-less) and a UD QP
/// (in RTR, Q_Key 0x1111) on `ep`, both attached to `srq` if given.
fn setup_on(ep: &mut Endpoint, srq: Option<u32>) -> (u32, u32) {
    let rc = ep
        .create_qp(QpInit {
            srq,
            ..QpInit::new(QpType::Rc, 1)
        })
        .unwrap();
    let ud = ep
        .create_qp(QpInit {
            srq,
            ..QpInit::new(QpType::Ud, 1)
        })
        .unwrap();
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: Some(AccessFlags::empty()),
        qkey: Some(0x1111),
        ..Default::default()
    };
    ep.modify_qp(
        rc,
        &QpAttr { qkey: None, ..init },
        init.mask().without(crate::transport::Attr::Qkey),
    )
    .unwrap();
    ep.modify_qp(
        ud,
        &QpAttr {
            access_flags: None,
            ..init
        },
        init.mask().without(crate::transport::Attr::AccessFlags),
    )
    .unwrap();
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        av: Some(AddressVector::default()),
        path_mtu: Some(PathMtu::Mtu1024),
        dest_qpn: Some(0x22),
        rq_psn: Some(Psn::new(100)),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    ep.modify_qp(rc, &rtr, rtr.mask()).unwrap();
    let ud_rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        ..Default::default()
    };
    ep.modify_qp(ud, &ud_rtr, ud_rtr.mask()).unwrap();
    (rc, ud)
}

fn ack_to(qpn: u32, pkey: u16) -> Vec<u8> {
    let bth = BthRepr {
        pkey,
        ..test_packet::bth(Opcode::RC_ACKNOWLEDGE, qpn, 5)
    };
    let ext = ExtReprs {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 0,
        }),
        ..Default::default()
    };
    test_packet::emit(bth, ext, &[])
}

#[test]
fn qp_numbering_can_start_anywhere_and_wraps_past_the_special_ones() {
    let mut ep = Endpoint::new(QpCaps::default());
    ep.set_next_qpn(0xff_ffff - FIRST_QPN);
    let a = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
    let b = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
    assert_eq!((a, b), (0xff_ffff, FIRST_QPN));
    ep.set_next_qpn(0x1234);
    assert_eq!(ep.create_qp(QpInit::new(QpType::Ud, 1)).unwrap(), 0x1245);
}

#[test]
fn refused_packets_are_counted_by_reason() {
    let (mut ep, rc, ud) = setup();
    let mut mem = VecMemory::new();
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    let now = Instant::ZERO;
    // Malformed: the wire error's own counter.
    ep.handle(now, &meta, &[0u8; 7], &mut mem);
    assert_eq!(ep.counters().get(Counter::DropTruncated), 1);
    // No such QP.
    ep.handle(now, &meta, &ack_to(0x999, 0xffff), &mut mem);
    assert_eq!(ep.counters().get(Counter::DropUnknownQp), 1);
    // An RC opcode to a UD QP.
    ep.handle(now, &meta, &ack_to(ud, 0xffff), &mut mem);
    assert_eq!(ep.counters().get(Counter::DropWrongTransport), 1);
    // Another partition (0x0001, not the QP's 0x7fff).
    ep.handle(now, &meta, &ack_to(rc, 0x8001), &mut mem);
    assert_eq!(ep.counters().get(Counter::DropPkeyMismatch), 1);
    assert_eq!(ep.counters().get(Counter::RcvdPkts), 4);
    // After a move to RESET nothing is received.
    let reset = QpAttr {
        qp_state: Some(QpState::Reset),
        ..Default::default()
    };
    ep.modify_qp(rc, &reset, reset.mask()).unwrap();
    ep.handle(now, &meta, &ack_to(rc, 0xffff), &mut mem);
    assert_eq!(ep.counters().get(Counter::DropQpState), 1);
}

#[test]
fn limited_members_never_talk() {
    let (mut ep, rc, _) = setup();
    ep.set_pkey_table(vec![0x7fff]);
    let mut mem = VecMemory::new();
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    ep.handle(Instant::ZERO, &meta, &ack_to(rc, 0x7fff), &mut mem);
    assert_eq!(ep.counters().get(Counter::DropPkeyMismatch), 1);
}

#[test]
fn qpns_skip_the_special_ones_and_gsi_is_qp1() {
    let mut ep = Endpoint::new(QpCaps::default());
    let a = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
    assert!(a > 1);
    assert_eq!(ep.create_qp(QpInit::new(QpType::Gsi, 1)), Ok(GSI_QPN));
    assert_eq!(
        ep.create_qp(QpInit::new(QpType::Gsi, 1)),
        Err(EndpointError::GsiExists)
    );
    ep.destroy_qp(a).unwrap();
    assert_eq!(ep.destroy_qp(a), Err(EndpointError::NoSuchQp(a)));
}

/// A request packet to `qpn`.
fn request(qpn: u32, opcode: Opcode, psn: u32, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
    let bth = BthRepr {
        ack_req: true,
        ..test_packet::bth(opcode, qpn, psn)
    };
    test_packet::emit(bth, ext, payload)
}

fn rc_send(
    ep: &mut Endpoint,
    mem: &mut VecMemory,
    qpn: u32,
    psn: u32,
    opcode: Opcode,
    data: &[u8],
) {
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    let pkt = request(qpn, opcode, psn, ExtReprs::default(), data);
    ep.handle(Instant::ZERO, &meta, &pkt, mem);
}

fn ud_send(ep: &mut Endpoint, mem: &mut VecMemory, qpn: u32, data: &[u8]) {
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    let ext = ExtReprs {
        deth: Some(DethRepr {
            qkey: 0x1111,
            src_qp: 0x77,
        }),
        ..Default::default()
    };
    let pkt = request(qpn, Opcode::UD_SEND_ONLY, 0, ext, data);
    ep.handle(Instant::ZERO, &meta, &pkt, mem);
}

/// A receive of `len` bytes at `va` (a region registered by the test).
fn rwr(wr_id: u64, key: Key, va: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: [Sge {
            addr: va,
            length: len,
            lkey: key.raw(),
        }]
        .into(),
    }
}

/// An endpoint whose RC and UD QPs (`setup_on`) share one SRQ that holds
/// `n` receives (wr_id 0, 1, ...) of `len` bytes, all into one LOCAL_WRITE
/// region at 0x1000 in the QPs' PD; returns it with its memory, the SRQ
/// number and the two QPNs.
fn srq_with_recvs(n: u64, len: u32) -> (Endpoint, VecMemory, u32, u32, u32) {
    let mut ep = Endpoint::new(QpCaps::default());
    let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
    let (rc, ud) = setup_on(&mut ep, Some(srqn));
    let mut mem = VecMemory::new();
    let k = mem
        .register_bytes(1, 0x1000, vec![0; len as usize], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..n {
        ep.post_srq_recv(srqn, rwr(i, k, 0x1000, len)).unwrap();
    }
    (ep, mem, srqn, rc, ud)
}

/// The first packet of a SEND to `qpn` (at its expected PSN, 100): the
/// receive it takes stays taken while the message is in progress.
fn start_send(ep: &mut Endpoint, mem: &mut VecMemory, qpn: u32) {
    rc_send(ep, mem, qpn, 100, Opcode::RC_SEND_FIRST, &[1; 1024]);
}

fn completions(ep: &mut Endpoint) -> Vec<WorkCompletion> {
    std::iter::from_fn(|| ep.poll_completion()).collect()
}

fn events(ep: &mut Endpoint) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

/// Every ACK/NAK syndrome the endpoint has to send, in order.
fn acks(ep: &mut Endpoint, mem: &mut VecMemory) -> Vec<(u32, Syndrome)> {
    let mut buf = [0u8; 4096 + 64];
    let mut v = Vec::new();
    while let Some(t) = ep.poll_transmit(Instant::ZERO, mem, &mut buf) {
        let p = TransportRepr::parse(&buf[..t.len]).unwrap();
        if let Some(a) = p.repr.ext.aeth {
            v.push((p.repr.bth.psn, a.syndrome));
        }
    }
    v
}

fn to_state(ep: &mut Endpoint, qpn: u32, state: QpState) {
    let a = QpAttr {
        qp_state: Some(state),
        ..Default::default()
    };
    ep.modify_qp(qpn, &a, AttrMask::STATE).unwrap();
}

#[test]
fn srq_numbers_query_modify_and_destroy() {
    let mut ep = Endpoint::new(QpCaps::default());
    assert_eq!(ep.query_srq(1), Err(EndpointError::NoSuchSrq(1)));
    let a = ep.create_srq(SrqInit::new(1)).unwrap();
    let b = ep.create_srq(SrqInit::new(2)).unwrap();
    assert_eq!((a, b), (1, 2));
    // Refused creations spend no number.
    let bad = SrqInit {
        max_wr: 2,
        srq_limit: 3,
        ..SrqInit::new(1)
    };
    assert_eq!(
        ep.create_srq(bad),
        Err(EndpointError::SrqLimitTooLarge {
            srq_limit: 3,
            max_wr: 2
        })
    );
    assert_eq!(
        ep.query_srq(a),
        Ok(SrqAttr {
            max_wr: 128,
            max_sge: 4,
            srq_limit: 0,
            queued: 0
        })
    );
    let mut mem = VecMemory::new();
    let k = mem
        .register_bytes(1, 0x1000, vec![0; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    ep.post_srq_recv(a, rwr(1, k, 0x1000, 64)).unwrap();
    ep.post_srq_recv(a, rwr(2, k, 0x1000, 64)).unwrap();
    assert_eq!(
        ep.post_srq_recv(9, rwr(3, k, 0x1000, 64)),
        Err(PostError::NoSuchSrq(9))
    );
    assert_eq!(
        ep.modify_srq(a, Some(1), None),
        Err(EndpointError::SrqResize)
    );
    assert_eq!(
        ep.modify_srq(a, None, Some(129)),
        Err(EndpointError::SrqLimitTooLarge {
            srq_limit: 129,
            max_wr: 128
        })
    );
    assert_eq!(
        ep.modify_srq(9, None, Some(1)),
        Err(EndpointError::NoSuchSrq(9))
    );
    ep.modify_srq(a, Some(2), Some(1)).unwrap();
    assert_eq!(
        ep.query_srq(a),
        Ok(SrqAttr {
            max_wr: 2,
            max_sge: 4,
            srq_limit: 1,
            queued: 2
        })
    );
    assert_eq!(
        ep.post_srq_recv(a, rwr(3, k, 0x1000, 64)),
        Err(PostError::QueueFull { depth: 2 })
    );
    ep.destroy_srq(b).unwrap();
    assert_eq!(ep.destroy_srq(b), Err(EndpointError::NoSuchSrq(b)));
    // Numbers are not reused (while alive or soon after).
    assert_eq!(ep.create_srq(SrqInit::new(1)), Ok(3));
}

#[test]
fn srq_qp_creation_checks_and_destroy_refused_while_attached() {
    let mut ep = Endpoint::new(QpCaps::default());
    let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
    let with = |t| QpInit {
        srq: Some(srqn),
        ..QpInit::new(t, 1)
    };
    assert_eq!(
        ep.create_qp(QpInit {
            srq: Some(77),
            ..QpInit::new(QpType::Rc, 1)
        }),
        Err(EndpointError::NoSuchSrq(77))
    );
    assert_eq!(
        ep.create_qp(with(QpType::Gsi)),
        Err(EndpointError::SrqNotSupported(QpType::Gsi))
    );
    // A refused GSI creation did not take QPN 1.
    assert_eq!(ep.create_qp(QpInit::new(QpType::Gsi, 1)), Ok(GSI_QPN));
    let rc = ep.create_qp(with(QpType::Rc)).unwrap();
    let uc = ep.create_qp(with(QpType::Uc)).unwrap();
    let ud = ep.create_qp(with(QpType::Ud)).unwrap();
    assert_eq!(
        ep.destroy_srq(srqn),
        Err(EndpointError::SrqInUse { srqn, qps: 3 })
    );
    ep.destroy_qp(rc).unwrap();
    ep.destroy_qp(uc).unwrap();
    assert_eq!(
        ep.destroy_srq(srqn),
        Err(EndpointError::SrqInUse { srqn, qps: 1 })
    );
    // A QP moved to RESET stays attached.
    to_state(&mut ep, ud, QpState::Reset);
    assert!(ep.destroy_srq(srqn).is_err());
    ep.destroy_qp(ud).unwrap();
    ep.destroy_srq(srqn).unwrap();
    assert_eq!(ep.query_srq(srqn), Err(EndpointError::NoSuchSrq(srqn)));
}

#[test]
fn post_recv_on_an_srq_qp_is_refused() {
    let mut ep = Endpoint::new(QpCaps::default());
    let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
    let (rc, ud) = setup_on(&mut ep, Some(srqn));
    for q in [rc, ud] {
        let wr = RecvWr {
            wr_id: 1,
            sg_list: Default::default(),
        };
        assert_eq!(ep.post_recv(q, wr), Err(PostError::QpHasSrq));
    }
    // Even in RESET, and nothing was queued anywhere.
    to_state(&mut ep, rc, QpState::Reset);
    let wr = RecvWr {
        wr_id: 1,
        sg_list: Default::default(),
    };
    assert_eq!(ep.post_recv(rc, wr), Err(PostError::QpHasSrq));
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
    assert!(completions(&mut ep).is_empty());
}

#[test]
fn ud_and_rc_qps_share_one_srq_in_posting_order() {
    let mut ep = Endpoint::new(QpCaps::default());
    let srqn = ep.create_srq(SrqInit::new(7)).unwrap();
    let (rc, ud) = setup_on(&mut ep, Some(srqn));
    let mut mem = VecMemory::new();
    // The QPs' PD (1), not the SRQ's (7): receive buffers are checked in
    // the PD of the QP that takes them.
    let k = mem
        .register_bytes(1, 0x1000, vec![0; 4 * 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..4u64 {
        ep.post_srq_recv(srqn, rwr(10 + i, k, 0x1000 + 256 * i, 256))
            .unwrap();
    }
    rc_send(&mut ep, &mut mem, rc, 100, Opcode::RC_SEND_ONLY, b"rc-0");
    ud_send(&mut ep, &mut mem, ud, b"ud-0");
    ud_send(&mut ep, &mut mem, ud, b"ud-1");
    rc_send(&mut ep, &mut mem, rc, 101, Opcode::RC_SEND_ONLY, b"rc-1");
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status, w.queue, w.byte_len, w.src_qp))
        .collect();
    let ok = WcStatus::Success;
    let rq = WorkQueue::Recv;
    assert_eq!(
        got,
        [
            (10, rc, ok, rq, 4, 0),
            (11, ud, ok, rq, 44, 0x77),
            (12, ud, ok, rq, 44, 0x77),
            (13, rc, ok, rq, 4, 0),
        ]
    );
    let b = mem.bytes(k).unwrap();
    assert_eq!(&b[..4], b"rc-0");
    assert_eq!(&b[256 + 40..256 + 44], b"ud-0");
    assert_eq!(&b[512 + 40..512 + 44], b"ud-1");
    assert_eq!(&b[768..772], b"rc-1");
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
    // Dry: RNR NAK for RC, drop for UD; then a post lets the resend in.
    rc_send(&mut ep, &mut mem, rc, 102, Opcode::RC_SEND_ONLY, b"late");
    ud_send(&mut ep, &mut mem, ud, b"lost");
    assert_eq!(ep.counters().get(Counter::DropNoRecv), 1);
    assert_eq!(ep.counters().get(Counter::SendRnrErr), 1);
    let a = acks(&mut ep, &mut mem);
    assert_eq!(a.last(), Some(&(102, Syndrome::RnrNak { timer: 12 })));
    ep.post_srq_recv(srqn, rwr(20, k, 0x1000, 256)).unwrap();
    rc_send(&mut ep, &mut mem, rc, 102, Opcode::RC_SEND_ONLY, b"late");
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status))
        .collect();
    assert_eq!(got, [(20, rc, WcStatus::Success)]);
}

#[test]
fn srq_limit_event_fires_once_and_disarms() {
    let (mut ep, mut mem, srqn, rc, ud) = srq_with_recvs(6, 256);
    ep.modify_srq(srqn, None, Some(4)).unwrap();
    ud_send(&mut ep, &mut mem, ud, b"a"); // 5 left
    ud_send(&mut ep, &mut mem, ud, b"b"); // 4 left
    assert_eq!(events(&mut ep), []);
    assert_eq!(ep.query_srq(srqn).unwrap().srq_limit, 4);
    // The QP that takes the WQE crossing the limit raises it: here RC.
    rc_send(&mut ep, &mut mem, rc, 100, Opcode::RC_SEND_ONLY, b"c"); // 3 left
    assert_eq!(
        events(&mut ep),
        [
            AsyncEvent::CommEstablished { qpn: rc },
            AsyncEvent::SrqLimitReached { srqn }
        ]
    );
    assert_eq!(ep.query_srq(srqn).unwrap().srq_limit, 0, "disarmed");
    ud_send(&mut ep, &mut mem, ud, b"d");
    ud_send(&mut ep, &mut mem, ud, b"e");
    assert_eq!(events(&mut ep), [], "fires once");
    // Armed again: fires again.
    ep.modify_srq(srqn, None, Some(2)).unwrap();
    ud_send(&mut ep, &mut mem, ud, b"f"); // 0 left
    assert_eq!(events(&mut ep), [AsyncEvent::SrqLimitReached { srqn }]);
    assert_eq!(completions(&mut ep).len(), 6);
}

#[test]
fn qp_error_flushes_only_its_taken_wqe_and_raises_last_wqe_reached_once() {
    let (mut ep, mut mem, srqn, rc, ud) = srq_with_recvs(3, 4096);
    // The RC QP takes WQE 0 for a message still in progress.
    start_send(&mut ep, &mut mem, rc);
    events(&mut ep);
    to_state(&mut ep, rc, QpState::Error);
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status, w.opcode, w.queue))
        .collect();
    assert_eq!(
        got,
        [(0, rc, WcStatus::WrFlushErr, WcOpcode::Recv, WorkQueue::Recv)]
    );
    assert_eq!(events(&mut ep), [AsyncEvent::LastWqeReached { qpn: rc }]);
    // The SRQ kept its WQEs; the other QP goes on using them.
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 2);
    ud_send(&mut ep, &mut mem, ud, b"x");
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status))
        .collect();
    assert_eq!(got, [(1, ud, WcStatus::Success)]);
    // A send posted in ERR is flushed; no second Last WQE Reached.
    let swr = SendWr {
        wr_id: 50,
        op: crate::transport::SendOp::Send,
        data: crate::transport::SendData::Inline(vec![].into()),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    };
    ep.post_send(rc, swr).unwrap();
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.status, w.queue))
        .collect();
    assert_eq!(got, [(50, WcStatus::WrFlushErr, WorkQueue::Send)]);
    assert_eq!(events(&mut ep), []);
    // Packets to the QP in ERR take nothing from the SRQ.
    rc_send(&mut ep, &mut mem, rc, 101, Opcode::RC_SEND_ONLY, b"y");
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
    // After RESET and a new trip to ERR, it is raised again.
    to_state(&mut ep, rc, QpState::Reset);
    to_state(&mut ep, rc, QpState::Error);
    assert_eq!(events(&mut ep), [AsyncEvent::LastWqeReached { qpn: rc }]);
    assert!(completions(&mut ep).is_empty());
    // A fatal error (QP_FATAL) raises it too.
    ud_send(&mut ep, &mut mem, ud, &[0; 4090]); // too long for 4096 - 40
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status))
        .collect();
    assert_eq!(got, [(2, ud, WcStatus::LocLenErr)]);
    assert_eq!(
        events(&mut ep),
        [
            AsyncEvent::QpFatal { qpn: ud },
            AsyncEvent::LastWqeReached { qpn: ud }
        ]
    );
}

#[test]
fn reset_or_destroy_mid_message_gives_the_wqe_back_to_the_srq() {
    let (mut ep, mut mem, srqn, rc, ud) = srq_with_recvs(2, 4096);
    start_send(&mut ep, &mut mem, rc);
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
    to_state(&mut ep, rc, QpState::Reset);
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 2);
    assert!(completions(&mut ep).is_empty());
    // The WQE given back is the first one taken next.
    ud_send(&mut ep, &mut mem, ud, b"x");
    assert_eq!(completions(&mut ep)[0].wr_id, 0);
    // Destroyed mid-message: the same.
    let (rc2, _) = setup_on(&mut ep, Some(srqn));
    start_send(&mut ep, &mut mem, rc2);
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
    ep.destroy_qp(rc2).unwrap();
    assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
    assert!(completions(&mut ep).is_empty());
}

#[test]
fn pkey_matching_rule() {
    assert!(pkeys_match(0xffff, 0xffff));
    assert!(pkeys_match(0xffff, 0x7fff)); // full with limited
    assert!(!pkeys_match(0x7fff, 0x7fff)); // two limited members
    assert!(!pkeys_match(0xffff, 0x8001)); // other partition
    assert!(!pkeys_match(0x8000, 0x8000)); // the invalid P_Key
}

/// A UD SEND to the permissive QPN for group `mgid`, Q_Key `qkey`.
fn mcast_send(ep: &mut Endpoint, mem: &mut VecMemory, mgid: Gid, qkey: u32, data: &[u8]) {
    let meta = RecvMeta::between(Gid::ZERO, mgid);
    let ext = ExtReprs {
        deth: Some(DethRepr { qkey, src_qp: 0x77 }),
        ..Default::default()
    };
    let pkt = request(MULTICAST_QPN, Opcode::UD_SEND_ONLY, 0, ext, data);
    ep.handle(Instant::ZERO, &meta, &pkt, mem);
}

fn mapped_v4(a: [u8; 4]) -> Gid {
    Gid::from(std::net::Ipv4Addr::from(a))
}

#[test]
fn a_multicast_packet_reaches_every_attached_ud_qp_once_each() {
    let mut ep = Endpoint::new(QpCaps::default());
    let (rc, ud1) = setup_on(&mut ep, None);
    let (_, ud2) = setup_on(&mut ep, None);
    let (_, ud3) = setup_on(&mut ep, None);
    let mut mem = VecMemory::new();
    let k = mem
        .register_bytes(1, 0x1000, vec![0; 3 * 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for (i, qpn) in [ud1, ud2, ud3].into_iter().enumerate() {
        let va = 0x1000 + 256 * i as u64;
        ep.post_recv(qpn, rwr(i as u64, k, va, 256)).unwrap();
    }
    let g = mapped_v4([239, 1, 2, 3]);
    assert_eq!(ep.attach_mcast(ud1, g), Ok(true));
    assert_eq!(ep.attach_mcast(ud2, g), Ok(false));
    // Twice attached, still one copy (ibv_attach_mcast(3)).
    assert_eq!(ep.attach_mcast(ud2, g), Ok(false));
    assert_eq!(
        ep.attach_mcast(rc, g),
        Err(EndpointError::McastNotUd(QpType::Rc))
    );
    assert_eq!(
        ep.attach_mcast(ud3, mapped_v4([10, 0, 0, 1])),
        Err(EndpointError::Mcast(McastError::NotMulticast))
    );
    mcast_send(&mut ep, &mut mem, g, 0x1111, b"hello group");
    let got: Vec<_> = completions(&mut ep)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status, w.byte_len, w.src_qp))
        .collect();
    let ok = WcStatus::Success;
    assert_eq!(got, [(0, ud1, ok, 51, 0x77), (1, ud2, ok, 51, 0x77)]);
    let b = mem.bytes(k).unwrap();
    assert_eq!(&b[40..51], b"hello group");
    assert_eq!(&b[256 + 40..256 + 51], b"hello group");
    assert_eq!(&b[512..768], &[0; 256][..], "the unattached QP got nothing");
    assert_eq!(ep.counters().get(Counter::RcvdMcastCopies), 2);

    // Each copy is checked as its own datagram: a wrong Q_Key is dropped
    // by every member (counted per copy), and nothing is delivered.
    mcast_send(&mut ep, &mut mem, g, 0x2222, b"bad qkey");
    assert!(completions(&mut ep).is_empty());
    // Another group, and a non-UD packet to the permissive QPN: dropped.
    mcast_send(&mut ep, &mut mem, mapped_v4([239, 9, 9, 9]), 0x1111, b"x");
    assert_eq!(ep.counters().get(Counter::DropMcastNoGroup), 1);
    let rc_to_all = request(
        MULTICAST_QPN,
        Opcode::RC_SEND_ONLY,
        0,
        ExtReprs::default(),
        b"x",
    );
    let meta = RecvMeta::between(Gid::ZERO, g);
    let unknown = ep.counters().get(Counter::DropUnknownQp);
    ep.handle(Instant::ZERO, &meta, &rc_to_all, &mut mem);
    assert_eq!(ep.counters().get(Counter::DropUnknownQp), unknown + 1);

    // Destroy is refused while attached (EBUSY in the kernel); detach
    // reports the last member; then the group is gone.
    assert_eq!(ep.destroy_qp(ud1), Err(EndpointError::McastAttached(ud1)));
    assert_eq!(ep.mcast_groups_of(ud1), vec![g]);
    assert_eq!(ep.detach_mcast(ud1, g), Ok(false));
    assert_eq!(
        ep.detach_mcast(ud1, g),
        Err(EndpointError::Mcast(McastError::NotAttached(ud1)))
    );
    assert_eq!(ep.detach_mcast(ud2, g), Ok(true));
    assert_eq!(ep.destroy_qp(ud1), Ok(()));
    mcast_send(&mut ep, &mut mem, g, 0x1111, b"after");
    assert_eq!(ep.counters().get(Counter::DropMcastNoGroup), 2);
    assert!(completions(&mut ep).is_empty());
}

// ---- congestion control (congestion.rs, dcqcn.rs) -------------------------

fn marked() -> RecvMeta {
    RecvMeta {
        ce: true,
        ..RecvMeta::between(Gid::ZERO, Gid::ZERO)
    }
}

fn cnp_to(qpn: u32) -> Vec<u8> {
    let bth = BthRepr {
        becn: true,
        ..test_packet::bth(Opcode::CNP, qpn, 0)
    };
    test_packet::emit(bth, ExtReprs::default(), &[0; 16])
}

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1000)
}

/// A signaled RDMA WRITE of `len` bytes from 0x1000 (region `lkey`) to
/// 0x9000 (rkey 0x42).
fn write_wr(wr_id: u64, lkey: u32, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote_addr: 0x9000,
            rkey: 0x42,
        },
        data: SendData::Sges(vec![Sge {
            addr: 0x1000,
            length: len,
            lkey,
        }]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

/// RTR -> RTS with the attributes RC needs (sq_psn 500, no ACK timer).
fn to_rts(ep: &mut Endpoint, qpn: u32) {
    let a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(500)),
        timeout: Some(0),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(1),
        ..Default::default()
    };
    ep.modify_qp(qpn, &a, a.mask()).unwrap();
}

/// Every packet the endpoint has to send at `now`, as (opcode, bytes).
fn drain(ep: &mut Endpoint, mem: &mut VecMemory, now: Instant) -> Vec<(Opcode, Vec<u8>)> {
    let mut buf = [0u8; 4096 + 64];
    let mut v = Vec::new();
    while let Some(t) = ep.poll_transmit(now, mem, &mut buf) {
        v.push((Opcode(buf[0]), buf[..t.len].to_vec()));
    }
    v
}

#[test]
fn a_ce_marked_packet_sends_one_cnp_per_min_time_to_the_peer_qp() {
    let (mut ep, rc, ud) = setup();
    let mut mem = VecMemory::new();
    let send = request(rc, Opcode::RC_SEND_ONLY, 100, ExtReprs::default(), &[7; 8]);
    ep.handle(us(10), &marked(), &send, &mut mem);
    let out = drain(&mut ep, &mut mem, us(10));
    // The CNP first, then the RNR NAK the SEND without a receive earns.
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].0, Opcode::CNP);
    let cnp = TransportRepr::parse(&out[0].1).unwrap();
    let b = cnp.repr.bth;
    // Annex A17.9.3: to the QP that sent the marked packet, BECN set,
    // PSN 0, the QP's P_Key, 16 zero bytes.
    assert_eq!((b.dest_qp, b.psn, b.pkey), (0x22, 0, 0xffff));
    assert!(b.becn && !b.fecn && !b.ack_req && !b.solicited);
    assert_eq!(cnp.payload, &[0; 16]);
    assert_eq!(out[0].1.len(), 12 + 16 + 4);
    assert_eq!(out[1].0, Opcode::RC_ACKNOWLEDGE);
    // Within 4 µs (min_time_between_cnps) no second CNP; after, one.
    let dup = request(rc, Opcode::RC_SEND_ONLY, 100, ExtReprs::default(), &[7; 8]);
    ep.handle(us(12), &marked(), &dup, &mut mem);
    assert!(drain(&mut ep, &mut mem, us(12))
        .iter()
        .all(|(op, _)| *op != Opcode::CNP));
    ep.handle(us(14), &marked(), &dup, &mut mem);
    let cnps = drain(&mut ep, &mut mem, us(14))
        .iter()
        .filter(|(op, _)| *op == Opcode::CNP)
        .count();
    assert_eq!(cnps, 1);
    // A marked UD packet earns no CNP (congestion module's decisions).
    let ext = ExtReprs {
        deth: Some(DethRepr {
            qkey: 0x1111,
            src_qp: 0x77,
        }),
        ..Default::default()
    };
    ep.handle(
        us(20),
        &marked(),
        &request(ud, Opcode::UD_SEND_ONLY, 0, ext, &[1]),
        &mut mem,
    );
    assert!(drain(&mut ep, &mut mem, us(20)).is_empty());
    let c = ep.counters();
    assert_eq!(c.get(Counter::NpEcnMarkedPackets), 4);
    assert_eq!(c.get(Counter::NpCnpSent), 2);
    assert_eq!(c.get(Counter::NpCnpSuppressed), 1);
}

#[test]
fn with_the_notification_point_off_ce_is_only_counted() {
    let (mut ep, rc, _) = setup();
    ep.set_congestion(CongestionConfig {
        np: false,
        ..CongestionConfig::default()
    });
    let mut mem = VecMemory::new();
    let send = request(rc, Opcode::RC_SEND_ONLY, 100, ExtReprs::default(), &[7; 8]);
    ep.handle(us(10), &marked(), &send, &mut mem);
    assert!(drain(&mut ep, &mut mem, us(10))
        .iter()
        .all(|(op, _)| *op != Opcode::CNP));
    assert_eq!(ep.counters().get(Counter::NpEcnMarkedPackets), 1);
    assert_eq!(ep.counters().get(Counter::NpCnpSent), 0);
}

#[test]
fn cnps_are_ignored_unless_the_qp_can_react() {
    let (mut ep, rc, ud) = setup();
    let mut mem = VecMemory::new();
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    ep.handle(us(1), &meta, &cnp_to(0x999), &mut mem);
    ep.handle(us(1), &meta, &cnp_to(ud), &mut mem);
    // RTR: the QP sends nothing yet, so there is no rate to lower.
    ep.handle(us(1), &meta, &cnp_to(rc), &mut mem);
    assert_eq!(ep.counters().get(Counter::RpCnpIgnored), 3);
    assert_eq!(ep.counters().get(Counter::DropUnknownQp), 0);
    to_rts(&mut ep, rc);
    // From another path: ignored (no one may throttle a QP it does not talk to).
    let stranger = RecvMeta::between(Gid::from([9; 16]), Gid::ZERO);
    ep.handle(us(2), &stranger, &cnp_to(rc), &mut mem);
    assert_eq!(ep.counters().get(Counter::RpCnpIgnored), 4);
    assert_eq!(ep.qp_rate_mbps(rc, us(2)), None);
    ep.handle(us(2), &meta, &cnp_to(rc), &mut mem);
    assert_eq!(ep.counters().get(Counter::RpCnpHandled), 1);
    assert_eq!(ep.counters().get(Counter::RpRateReductions), 1);
    let rate = ep.qp_rate_mbps(rc, us(2)).expect("limited");
    assert!(rate < 25_000.0 * 0.51, "{rate}");
    // With the reaction point off, a CNP changes nothing.
    ep.set_congestion(CongestionConfig {
        rp: false,
        ..CongestionConfig::default()
    });
    ep.handle(us(100), &meta, &cnp_to(rc), &mut mem);
    assert_eq!(ep.counters().get(Counter::RpCnpIgnored), 5);
    assert_eq!(ep.counters().get(Counter::RpRateReductions), 1);
}

#[test]
fn a_cnp_paces_the_requester_by_time() {
    let (mut ep, rc, _) = setup();
    ep.set_congestion(CongestionConfig {
        dcqcn: crate::transport::DcqcnParams {
            max_rate_mbps: 1000,
            ..Default::default()
        },
        ..CongestionConfig::default()
    });
    to_rts(&mut ep, rc);
    let mut mem = VecMemory::new();
    let src = mem
        .register_bytes(1, 0x1000, vec![5; 8192], AccessFlags::empty())
        .unwrap();
    let write = |wr_id| write_wr(wr_id, src.raw(), 8192);
    // Unlimited: all 8 packets at once, no deadline but the ACK timer's.
    ep.post_send(rc, write(1)).unwrap();
    assert_eq!(drain(&mut ep, &mut mem, us(0)).len(), 8);
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    ep.handle(us(10), &meta, &cnp_to(rc), &mut mem);
    let rate = ep.qp_rate_mbps(rc, us(10)).unwrap();
    ep.post_send(rc, write(2)).unwrap();
    let first = drain(&mut ep, &mut mem, us(10));
    assert_eq!(first.len(), 1, "one packet, then the pacer holds the QP");
    let gap_ns = (first[0].1.len() as f64 * 8_000.0 / rate).ceil() as u64;
    let due = ep.poll_timeout().expect("the pacer's deadline");
    assert_eq!(due.as_nanos(), us(10).as_nanos() + gap_ns);
    // Nothing before it is due; the next packet when it is.
    assert!(drain(&mut ep, &mut mem, Instant::from_nanos(due.as_nanos() - 1)).is_empty());
    ep.handle_timeout(due);
    assert_eq!(drain(&mut ep, &mut mem, due).len(), 1);
    // Driven by its deadlines, the QP sends the rest at about `rate`.
    let mut sent = 2;
    let mut now = due;
    while sent < 8 {
        let t = ep.poll_timeout().unwrap();
        now = t;
        ep.handle_timeout(now);
        sent += drain(&mut ep, &mut mem, now).len();
    }
    let elapsed = now.saturating_since(us(10)).as_secs_f64();
    let bits = 7.0 * first[0].1.len() as f64 * 8.0;
    let measured = bits / elapsed / 1e6;
    assert!(
        (measured - rate).abs() / rate < 0.05,
        "{measured} vs {rate} Mb/s"
    );
}

// ---- selective retransmission: what a peer can make the responder hold

/// An RC SEND MIDDLE of `len` bytes to `qpn` at `psn`.
fn middle(ep: &mut Endpoint, mem: &mut VecMemory, qpn: u32, psn: u32, len: usize) {
    rc_send(ep, mem, qpn, psn, Opcode::RC_SEND_MIDDLE, &vec![7; len]);
}

#[test]
fn packets_ahead_are_held_only_within_bounds() {
    let (mut ep, rc, _) = setup();
    let mut mem = VecMemory::new();
    // 300 packets ahead of the expected PSN (100): the 255 within
    // MAX_HELD PSNs are held, the rest discarded; one NAK for the gap.
    for psn in 101..401 {
        middle(&mut ep, &mut mem, rc, psn, 1024);
    }
    let c = ep.counters();
    assert_eq!(c.get(Counter::OooHeld), 255);
    assert_eq!(c.get(Counter::OooDiscarded), 45);
    assert_eq!(
        acks(&mut ep, &mut mem),
        vec![(100, Syndrome::Nak(NakCode::PsnSequenceError))]
    );
    let per_packet = request(
        rc,
        Opcode::RC_SEND_MIDDLE,
        0,
        ExtReprs::default(),
        &[0; 1024],
    )
    .len();
    assert_eq!(ep.held_bytes, 255 * per_packet);
    // Longer than the path MTU (1024), a READ request, or failing the
    // P_Key check: not held.
    let (mut ep, rc, _) = setup();
    middle(&mut ep, &mut mem, rc, 101, 1025);
    let reth = ExtReprs {
        reth: Some(crate::wire::RethRepr {
            va: 0,
            rkey: 1,
            dma_len: 8,
        }),
        ..Default::default()
    };
    let read = request(rc, Opcode::RC_RDMA_READ_REQUEST, 102, reth, &[]);
    ep.handle(
        Instant::ZERO,
        &RecvMeta::between(Gid::ZERO, Gid::ZERO),
        &read,
        &mut mem,
    );
    let foreign = test_packet::emit(
        BthRepr {
            pkey: 0x7001,
            ..test_packet::bth(Opcode::RC_SEND_MIDDLE, rc, 103)
        },
        ExtReprs::default(),
        &[1; 64],
    );
    ep.handle(
        Instant::ZERO,
        &RecvMeta::between(Gid::ZERO, Gid::ZERO),
        &foreign,
        &mut mem,
    );
    let c = ep.counters();
    assert_eq!(c.get(Counter::OooHeld), 0);
    assert_eq!(c.get(Counter::OooDiscarded), 2, "the long one and the READ");
    assert_eq!(c.get(Counter::DropPkeyMismatch), 1);
    assert_eq!(ep.held_bytes, 0);
}

#[test]
fn held_packets_go_when_the_qp_changes_state_or_is_destroyed() {
    let (mut ep, rc, _) = setup();
    let mut mem = VecMemory::new();
    for psn in 101..111 {
        middle(&mut ep, &mut mem, rc, psn, 512);
    }
    assert_eq!(ep.counters().get(Counter::OooHeld), 10);
    to_state(&mut ep, rc, QpState::Error);
    assert_eq!(ep.held_bytes, 0);
    assert_eq!(ep.counters().get(Counter::OooDiscarded), 10);
    let (mut ep, rc, _) = setup();
    middle(&mut ep, &mut mem, rc, 105, 512);
    assert!(ep.held_bytes > 0);
    to_state(&mut ep, rc, QpState::Reset);
    ep.destroy_qp(rc).unwrap();
    assert_eq!(ep.held_bytes, 0);
}

#[test]
fn all_qps_together_hold_at_most_the_endpoint_budget() {
    use super::reorder_calls::MAX_HELD_BYTES;
    let mut ep = Endpoint::new(QpCaps::default());
    let mut mem = VecMemory::new();
    let per_qp = 255
        * request(
            1,
            Opcode::RC_SEND_MIDDLE,
            0,
            ExtReprs::default(),
            &[0; 1024],
        )
        .len();
    let qps = MAX_HELD_BYTES / per_qp + 2;
    for _ in 0..qps {
        let (rc, _) = setup_on(&mut ep, None);
        for psn in 101..356 {
            middle(&mut ep, &mut mem, rc, psn, 1024);
        }
    }
    assert!(ep.held_bytes <= MAX_HELD_BYTES, "{} held", ep.held_bytes);
    assert!(
        ep.held_bytes + per_qp > MAX_HELD_BYTES,
        "the budget is used"
    );
    assert!(ep.counters().get(Counter::OooDiscarded) >= 255);
}

// ---- transmit order

/// Busy QPs take turns of `TX_QUANTUM` packets, so that each QP's packets
/// leave in runs the device can send as one GSO message, and every QP
/// still gets its turn.
#[test]
fn busy_qps_take_turns_of_a_quantum_of_packets() {
    let mut ep = Endpoint::new(QpCaps::default());
    let qps: Vec<u32> = (0..3).map(|_| setup_on(&mut ep, None).0).collect();
    let mut mem = VecMemory::new();
    let len = 40 * 1024;
    let src = mem
        .register_bytes(1, 0x1000, vec![5; len], AccessFlags::empty())
        .unwrap();
    for &qpn in &qps {
        to_rts(&mut ep, qpn);
        ep.post_send(qpn, write_wr(u64::from(qpn), src.raw(), len as u32))
            .unwrap();
    }
    let mut buf = [0u8; 1024 + 64];
    let mut order = Vec::new();
    while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut mem, &mut buf) {
        order.push(t.src_qpn);
    }
    // MTU 1024: 40 packets each, in turns of 16, 16 and the last 8.
    let q = TX_QUANTUM as usize;
    let mut expected = Vec::new();
    for turn in [q, q, 40 - 2 * q] {
        for &qpn in &qps {
            expected.extend(std::iter::repeat_n(qpn, turn));
        }
    }
    assert_eq!(order, expected);
}

/// A QP's lone ACK goes after its requests of the same turn (so that it
/// can end their GSO run), and in the turn's last slot at the latest.
#[test]
fn a_lone_ack_follows_the_requests_of_its_turn_and_never_waits_longer() {
    for (len, requests_before_ack) in [(8, 1), (40 * 1024, TX_QUANTUM as usize - 1)] {
        let (mut ep, rc, _) = setup();
        to_rts(&mut ep, rc);
        let mut mem = VecMemory::new();
        let dst = mem
            .register_bytes(1, 0x1000, vec![0; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
        ep.post_recv(rc, rwr(7, dst, 0x1000, 64)).unwrap();
        let src = mem
            .register_bytes(1, 0x8000, vec![5; len], AccessFlags::empty())
            .unwrap();
        rc_send(&mut ep, &mut mem, rc, 100, Opcode::RC_SEND_ONLY, b"ping");
        let wr = SendWr {
            data: SendData::Sge(Sge {
                addr: 0x8000,
                length: len as u32,
                lkey: src.raw(),
            }),
            ..write_wr(1, src.raw(), len as u32)
        };
        ep.post_send(rc, wr).unwrap();
        let sent = drain(&mut ep, &mut mem, Instant::ZERO);
        let ack = sent
            .iter()
            .position(|(op, _)| *op == Opcode::RC_ACKNOWLEDGE)
            .expect("the ACK of the SEND");
        assert_eq!(ack, requests_before_ack, "{len} bytes");
        let acks = sent.iter().filter(|(op, _)| *op == Opcode::RC_ACKNOWLEDGE);
        assert_eq!(acks.count(), 1);
        assert_eq!(
            TransportRepr::parse(&sent[ack].1).unwrap().repr.bth.psn,
            100
        );
        // MTU 1024: the rest of the WRITE follows in later turns.
        assert_eq!(sent.len(), len.div_ceil(1024) + 1);
    }
}

// ---- timers

/// An ACK that moves a QP's ACK timer later leaves its entry where it was:
/// that entry fires to nothing (no retransmission) and the timer is set
/// again for when it is really due, where it fires.
#[test]
fn a_timer_moved_later_fires_once_early_to_nothing_then_when_due() {
    let (mut ep, rc, _) = setup();
    let a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(500)),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(1),
        ..Default::default()
    };
    ep.modify_qp(rc, &a, a.mask()).unwrap();
    let mut mem = VecMemory::new();
    let src = mem
        .register_bytes(1, 0x1000, vec![5; 8192], AccessFlags::empty())
        .unwrap();
    ep.post_send(rc, write_wr(1, src.raw(), 8192)).unwrap();
    assert_eq!(drain(&mut ep, &mut mem, us(0)).len(), 8);
    let first = ep.poll_timeout().expect("the ACK timer");
    // PSNs 500..=503 acknowledged 1 ms later: the timer is due 1 ms later.
    let ext = ExtReprs {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 0,
        }),
        ..Default::default()
    };
    let ack = test_packet::emit(test_packet::bth(Opcode::RC_ACKNOWLEDGE, rc, 503), ext, &[]);
    let meta = RecvMeta::between(Gid::ZERO, Gid::ZERO);
    ep.handle(us(1000), &meta, &ack, &mut mem);
    assert_eq!(ep.poll_timeout(), Some(first), "the entry stays");
    ep.handle_timeout(first);
    assert!(
        drain(&mut ep, &mut mem, first).is_empty(),
        "nothing was due"
    );
    assert_eq!(ep.counters().get(Counter::CompleterRetryErr), 0);
    let due = ep.poll_timeout().expect("set again");
    assert_eq!(due, first.saturating_add(us(1000).saturating_since(us(0))));
    ep.handle_timeout(due);
    let resent = drain(&mut ep, &mut mem, due);
    let psn = TransportRepr::parse(&resent[0].1).unwrap().repr.bth.psn;
    assert_eq!(psn, 504, "the oldest unacknowledged packet");
    assert_eq!(
        ep.counters().get(Counter::CompleterRetryErr),
        1,
        "one retry"
    );
    // A destroyed QP's entry goes with it, not when it would have fired.
    assert!(ep.poll_timeout().is_some());
    ep.destroy_qp(rc).unwrap();
    assert_eq!(ep.poll_timeout(), None);
}
