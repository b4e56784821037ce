//! Tests of the receive side: the responder against hand-built request
//! packets, then the SRQ and the responder resources on their own.

use super::responder::Responder;
use super::srq::{Srq, SrqInit};
use crate::transport::counters::{Counter, Counters};
use crate::transport::error::PostError;
use crate::transport::io::RecvMeta;
use crate::transport::memory::{Key, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{
    modify, AccessFlags, AddressVector, AsyncEvent, PathMtu, QpAttr, QpCaps, QpCommon, QpConfig,
    QpInit, QpState, QpType, GSI_QKEY,
};
use crate::transport::test_packet;
use crate::transport::time::Instant;
use crate::transport::vec_memory::VecMemory;
use crate::transport::wr::{RecvWr, Sge, WcOpcode, WcStatus, WorkCompletion, WorkQueue};
use crate::wire::Gid;
use crate::wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtReprs, IethRepr, ImmDtRepr, NakCode, Opcode, RethRepr,
    Syndrome, TransportRepr,
};

const PD: u32 = 3;
const QPN: u32 = 0x12;
const PEER: u32 = 0x34;
const RQ_PSN: u32 = 100;
const MTU: usize = 256;
const RNR_TIMER: u8 = 12;
const QKEY: u32 = 0x1111_1111;
const ALL: AccessFlags = AccessFlags::all();

struct H {
    resp: Responder,
    c: QpCommon,
    cnt: Counters,
    mem: VecMemory,
    meta: RecvMeta,
    next_va: u64,
    /// The SRQ the QP is attached to, if any (the endpoint's part).
    srq: Option<Srq>,
}

const SRQN: u32 = 0x5;

fn av() -> AddressVector {
    let dgid = Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2));
    AddressVector {
        dgid,
        hop_limit: 64,
        ..AddressVector::default()
    }
}

fn step(cfg: &QpConfig, attr: QpAttr) -> QpConfig {
    modify(cfg, &attr, attr.mask()).unwrap()
}

impl H {
    /// A QP of type `ty` in RTR; RC/UC with QP access `access` and
    /// `max_dest_rd_atomic` `max_dest`, expecting `rq_psn`.
    fn with(ty: QpType, access: AccessFlags, max_dest: u8, rq_psn: u32) -> H {
        let caps = QpCaps::default();
        let cfg = match ty {
            QpType::Gsi => QpConfig::new_gsi(1, caps).unwrap(),
            _ => QpConfig::new(ty, caps),
        };
        let mut init = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            ..QpAttr::default()
        };
        match ty {
            QpType::Rc | QpType::Uc => {
                init.port_num = Some(1);
                init.access_flags = Some(access);
            }
            QpType::Ud => {
                init.port_num = Some(1);
                init.qkey = Some(QKEY);
            }
            QpType::Gsi => init.qkey = Some(GSI_QKEY),
        }
        let cfg = step(&cfg, init);
        let mut rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..QpAttr::default()
        };
        if !ty.is_datagram() {
            rtr.av = Some(av());
            rtr.path_mtu = Some(PathMtu::Mtu256);
            rtr.dest_qpn = Some(PEER);
            rtr.rq_psn = Some(Psn::new(rq_psn));
        }
        if ty == QpType::Rc {
            rtr.max_dest_rd_atomic = Some(max_dest);
            rtr.min_rnr_timer = Some(RNR_TIMER);
        }
        let rtr_cfg = step(&cfg, rtr);
        let qpn = if ty == QpType::Gsi { 1 } else { QPN };
        let mut c = QpCommon::new(qpn, QpInit::new(ty, PD), cfg, 0xffff);
        let mut resp = Responder::new();
        c.config = rtr_cfg;
        resp.on_modify(&mut c, QpState::Init);
        H {
            resp,
            c,
            cnt: Counters::new(),
            mem: VecMemory::new(),
            meta: RecvMeta::between(Gid::from([1; 16]), Gid::from([2; 16])),
            next_va: 0x10_000,
            srq: None,
        }
    }

    /// As `new`, but attached to an SRQ created with `init`.
    fn with_srq(ty: QpType, init: SrqInit) -> H {
        let mut h = H::new(ty);
        h.c.init.srq = Some(SRQN);
        h.srq = Some(Srq::new(SRQN, init).unwrap());
        h
    }

    fn srq(&mut self) -> &mut Srq {
        self.srq.as_mut().unwrap()
    }

    fn new(ty: QpType) -> H {
        H::with(ty, ALL, 4, RQ_PSN)
    }

    fn enter_rts(&mut self) {
        let ty = self.c.qp_type();
        let mut a = QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(7)),
            ..QpAttr::default()
        };
        if ty == QpType::Rc {
            a.timeout = Some(14);
            a.retry_cnt = Some(7);
            a.rnr_retry = Some(7);
            a.max_rd_atomic = Some(1);
        }
        self.c.config = step(&self.c.config, a);
        self.resp.on_modify(&mut self.c, QpState::Rtr);
    }

    /// Registers `len` bytes (filled with `fill`) with `access`.
    fn region(&mut self, len: usize, fill: u8, access: AccessFlags) -> (Key, u64) {
        let va = self.next_va;
        self.next_va += 0x10_000;
        let k = self
            .mem
            .register_bytes(PD, va, vec![fill; len], access)
            .unwrap();
        (k, va)
    }

    /// Posts a receive of one SGE of `len` bytes (to the SRQ if the QP has
    /// one); returns its key.
    fn recv(&mut self, wr_id: u64, len: u32) -> Key {
        let (k, va) = self.region(len as usize, 0xee, AccessFlags::LOCAL_WRITE);
        let wr = RecvWr {
            wr_id,
            sg_list: [Sge {
                addr: va,
                length: len,
                lkey: k.raw(),
            }]
            .into(),
        };
        match self.srq.as_mut() {
            Some(srq) => srq.post(wr).unwrap(),
            None => self.resp.post_recv(&self.c, wr).unwrap(),
        }
        k
    }

    /// Feeds the request packet that `pkt` builds from these parts.
    fn rx(&mut self, op: Opcode, psn: u32, ack_req: bool, ext: ExtReprs, payload: &[u8]) {
        self.feed(&pkt(op, psn, ack_req, ext, payload));
    }

    /// Feeds an RDMA READ request (AckReq set) for `len` bytes at `va`.
    fn read_req(&mut self, psn: u32, rkey: Key, va: u64, len: u32) {
        self.rx(
            Opcode::RC_RDMA_READ_REQUEST,
            psn,
            true,
            reth(va, rkey, len),
            b"",
        );
    }

    fn feed(&mut self, bytes: &[u8]) {
        let pkt = TransportRepr::parse(bytes).unwrap();
        self.resp.handle_request(
            &mut self.c,
            &mut self.cnt,
            self.srq.as_mut(),
            Instant::ZERO,
            &self.meta,
            0,
            &pkt,
            &mut self.mem,
        );
        // What the endpoint does after each call.
        if self.c.take_flush() {
            self.resp.flush(&mut self.c);
        }
    }

    /// Everything `poll_transmit` has, parsed: (repr, payload).
    fn out(&mut self) -> Vec<(TransportRepr, Vec<u8>)> {
        let mut v = Vec::new();
        let mut buf = [0u8; 4096 + 64];
        while let Some(t) =
            self.resp
                .poll_transmit(&mut self.c, &mut self.cnt, &mut self.mem, &mut buf)
        {
            assert_eq!(t.src_qpn, self.c.qpn);
            assert_eq!(t.dest, self.c.config.attrs().av.unwrap_or_default());
            let p = TransportRepr::parse(&buf[..t.len]).unwrap();
            assert_eq!(p.repr.bth.dest_qp, PEER);
            v.push((p.repr, p.payload.to_vec()));
            assert!(v.len() < 10_000);
        }
        if self.c.take_flush() {
            self.resp.flush(&mut self.c);
        }
        v
    }

    fn wcs(&mut self) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| self.c.pop_completion()).collect()
    }

    fn events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.c.pop_event()).collect()
    }
}

fn pkt(op: Opcode, psn: u32, ack_req: bool, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
    let bth = BthRepr {
        ack_req,
        ..test_packet::bth(op, QPN, psn)
    };
    test_packet::emit(bth, ext, payload)
}

fn none() -> ExtReprs {
    ExtReprs::default()
}

fn reth(va: u64, rkey: Key, len: u32) -> ExtReprs {
    ExtReprs {
        reth: Some(RethRepr {
            va,
            rkey: rkey.raw(),
            dma_len: len,
        }),
        ..ExtReprs::default()
    }
}

fn imm(v: u32) -> ExtReprs {
    ExtReprs {
        immdt: Some(ImmDtRepr { imm: v }),
        ..ExtReprs::default()
    }
}

fn atomic(va: u64, rkey: Key, swap_add: u64, compare: u64) -> ExtReprs {
    ExtReprs {
        atomic_eth: Some(AtomicEthRepr {
            va,
            rkey: rkey.raw(),
            swap_add,
            compare,
        }),
        ..ExtReprs::default()
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Asserts one acknowledge with this PSN, syndrome and MSN.
fn assert_ack(o: &(TransportRepr, Vec<u8>), psn: u32, syndrome: Syndrome, msn: u32) {
    assert_eq!(o.0.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(o.0.bth.psn, psn, "ack psn");
    let aeth = o.0.ext.aeth.unwrap();
    assert_eq!(aeth.syndrome, syndrome);
    assert_eq!(aeth.msn, msn, "msn");
}

const ACK: Syndrome = Syndrome::ACK_CREDITS_INVALID;

fn nak(code: NakCode) -> Syndrome {
    Syndrome::Nak(code)
}

// ---- post_recv, modify ----------------------------------------------------

#[test]
fn post_recv_checks_state_sges_depth_and_length() {
    let cfg = QpConfig::new(QpType::Rc, QpCaps::default());
    let mut init = QpInit::new(QpType::Rc, PD);
    init.max_recv_wr = 2;
    init.max_recv_sge = 1;
    let mut c = QpCommon::new(QPN, init, cfg, 0xffff);
    let mut r = Responder::new();
    let sge = |length| Sge {
        addr: 0,
        length,
        lkey: 1,
    };
    let wr = |sg_list: Vec<Sge>| RecvWr {
        wr_id: 1,
        sg_list: sg_list.into(),
    };
    // RESET: refused (IBTA 10.3.1; kernel rxe likewise).
    assert_eq!(r.post_recv(&c, wr(vec![sge(8)])), Err(PostError::BadState));
    c.config = step(
        &c.config,
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(ALL),
            ..QpAttr::default()
        },
    );
    assert_eq!(
        r.post_recv(&c, wr(vec![sge(8), sge(8)])),
        Err(PostError::TooManySges { given: 2, max: 1 })
    );
    assert!(matches!(
        r.post_recv(
            &c,
            wr(vec![Sge {
                addr: 0,
                length: u32::MAX,
                lkey: 1
            }])
        ),
        Err(PostError::MessageTooLarge { .. })
    ));
    assert_eq!(r.post_recv(&c, wr(vec![])), Ok(()));
    assert_eq!(r.post_recv(&c, wr(vec![sge(8)])), Ok(()));
    assert_eq!(
        r.post_recv(&c, wr(vec![sge(8)])),
        Err(PostError::QueueFull { depth: 2 })
    );
    assert_eq!(r.posted_recvs(), 2);
}

#[test]
fn post_recv_in_err_is_flushed_by_the_endpoint() {
    use crate::transport::endpoint::Endpoint;
    let mut ep = Endpoint::new(QpCaps::default());
    let qpn = ep.create_qp(QpInit::new(QpType::Ud, PD)).unwrap();
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qkey: Some(QKEY),
        ..QpAttr::default()
    };
    ep.modify_qp(qpn, &init, init.mask()).unwrap();
    let err = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    ep.modify_qp(qpn, &err, err.mask()).unwrap();
    ep.post_recv(
        qpn,
        RecvWr {
            wr_id: 9,
            sg_list: Default::default(),
        },
    )
    .unwrap();
    let wc = ep.poll_completion().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.queue),
        (9, WcStatus::WrFlushErr, WcOpcode::Recv, WorkQueue::Recv)
    );
}

#[test]
fn rtr_takes_rq_psn_and_comm_established_once() {
    let mut h = H::new(QpType::Rc);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN));
    h.recv(1, 64);
    h.recv(2, 64);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"abcd");
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 1, true, none(), b"efgh");
    assert_eq!(h.events(), [AsyncEvent::CommEstablished { qpn: QPN }]);

    // A QP that reaches RTS before its first packet raises nothing.
    let mut h = H::new(QpType::Rc);
    h.enter_rts();
    h.recv(1, 64);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"abcd");
    assert_eq!(h.events(), []);
}

// ---- SEND ----------------------------------------------------------------

#[test]
fn send_only_completes_and_is_acked() {
    let mut h = H::new(QpType::Rc);
    let k = h.recv(5, 64);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"hello");
    let wcs = h.wcs();
    assert_eq!(wcs.len(), 1);
    let wc = wcs[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (5, WcStatus::Success, WcOpcode::Recv, 5, QPN)
    );
    assert_eq!(
        (wc.imm_data, wc.invalidated_rkey, wc.grh),
        (None, None, false)
    );
    assert_eq!(&h.mem.bytes(k).unwrap()[..6], b"hello\xee");
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, ACK, 1);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN + 1));
    assert_eq!(h.cnt.get(Counter::RdmaRecvs), 1);
}

#[test]
fn multi_packet_send_scatters_over_sges_with_immediate() {
    let mut h = H::new(QpType::Rc);
    let (k1, va1) = h.region(300, 0, AccessFlags::LOCAL_WRITE);
    let (k2, va2) = h.region(400, 0, AccessFlags::LOCAL_WRITE);
    let sg_list = vec![
        Sge {
            addr: va1 + 100,
            length: 200,
            lkey: k1.raw(),
        },
        Sge {
            addr: va2,
            length: 400,
            lkey: k2.raw(),
        },
    ];
    h.resp
        .post_recv(
            &h.c,
            RecvWr {
                wr_id: 7,
                sg_list: sg_list.into(),
            },
        )
        .unwrap();
    let data = bytes(2 * MTU + 10, 3);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    h.rx(
        Opcode::RC_SEND_MIDDLE,
        RQ_PSN + 1,
        false,
        none(),
        &data[MTU..2 * MTU],
    );
    assert!(h.out().is_empty(), "no AckReq, not last: coalesced");
    h.rx(
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        RQ_PSN + 2,
        true,
        imm(0xdead_beef),
        &data[2 * MTU..],
    );
    let wc = h.wcs()[0];
    assert_eq!(wc.byte_len as usize, data.len());
    assert_eq!(wc.imm_data, Some(0xdead_beef));
    assert_eq!(wc.opcode, WcOpcode::Recv);
    assert_eq!(&h.mem.bytes(k1).unwrap()[100..300], &data[..200]);
    assert_eq!(&h.mem.bytes(k2).unwrap()[..data.len() - 200], &data[200..]);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN + 2, ACK, 1);
}

#[test]
fn ack_req_on_a_middle_packet_is_answered_and_acks_coalesce() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 1024);
    let data = bytes(3 * MTU, 1);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, true, none(), &data[..MTU]);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, ACK, 0);
    h.rx(
        Opcode::RC_SEND_MIDDLE,
        RQ_PSN + 1,
        true,
        none(),
        &data[MTU..2 * MTU],
    );
    h.rx(
        Opcode::RC_SEND_LAST,
        RQ_PSN + 2,
        true,
        none(),
        &data[2 * MTU..],
    );
    // Two ACKs queued back to back: the newer replaces the older.
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN + 2, ACK, 1);
}

fn ieth(rkey: Key) -> ExtReprs {
    ExtReprs {
        ieth: Some(IethRepr { rkey: rkey.raw() }),
        ..ExtReprs::default()
    }
}

#[test]
fn send_with_invalidate_invalidates_and_reports_the_rkey() {
    let mut h = H::new(QpType::Rc);
    let va = 0x70_0000;
    let target = h.mem.register_invalidatable(PD, va, 64, ALL).unwrap();
    h.recv(1, 64);
    h.rx(
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        RQ_PSN,
        true,
        ieth(target),
        b"x",
    );
    let wc = h.wcs()[0];
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.invalidated_rkey, Some(target.raw()));
    assert_eq!(h.mem.is_invalidated(target), Ok(true));
    assert_ack(&h.out()[0], RQ_PSN, ACK, 1);
    // No key names the region any more.
    assert!(h
        .mem
        .check(target, PD, true, AccessFlags::REMOTE_WRITE, va, 1)
        .is_err());
}

/// Kernel rxe refuses remote invalidation of an ordinary (`ibv_reg_mr`)
/// region, of another PD's region and of a key that is not the region's
/// current one: the receive completes with REM_INV_REQ_ERR, the requester
/// gets NAK Invalid Request, the QP goes to ERR and the region stays valid.
#[test]
fn send_with_invalidate_is_refused_unless_the_region_allows_it() {
    for case in ["ordinary", "other pd", "stale key", "no region"] {
        let mut h = H::new(QpType::Rc);
        let (ordinary, _) = h.region(64, 0, ALL);
        let fast = h
            .mem
            .register_invalidatable(PD, 0x70_0000, 64, ALL)
            .unwrap();
        let other = h
            .mem
            .register_invalidatable(PD + 1, 0x80_0000, 64, ALL)
            .unwrap();
        let rkey = match case {
            "ordinary" => ordinary,
            "other pd" => other,
            "stale key" => fast.inc(),
            _ => Key::from_parts(0x7f_0000, 1).unwrap(),
        };
        h.recv(1, 64);
        h.rx(
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            RQ_PSN,
            true,
            ieth(rkey),
            b"x",
        );
        let wcs = h.wcs();
        assert_eq!(wcs[0].status, WcStatus::RemInvReqErr, "{case}");
        assert_eq!(wcs[0].invalidated_rkey, None, "{case}");
        assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
        assert_eq!(h.c.state(), QpState::Error, "{case}");
        for k in [ordinary, fast, other] {
            assert_eq!(h.mem.is_invalidated(k), Ok(false), "{case}");
        }
    }
}

#[test]
fn zero_length_send() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 0);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"");
    let wc = h.wcs()[0];
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 0));
}

// ---- RNR, sequence errors, duplicates --------------------------------------

#[test]
fn rnr_nak_then_silence_then_success() {
    let mut h = H::new(QpType::Rc);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"a");
    // Packets in flight behind it: no sequence-error NAK on top.
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 1, true, none(), b"b");
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, Syndrome::RnrNak { timer: RNR_TIMER }, 0);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN));
    assert_eq!(h.cnt.get(Counter::SendRnrErr), 1);
    assert_eq!(h.c.state(), QpState::Rtr);
    h.recv(1, 8);
    h.recv(2, 8);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"a");
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 1, true, none(), b"b");
    assert_eq!(h.wcs().len(), 2);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN + 1, ACK, 2);
}

#[test]
fn rnr_on_a_multi_packet_send_names_its_first_packet() {
    let mut h = H::new(QpType::Rc);
    let data = bytes(2 * MTU, 0);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    h.rx(Opcode::RC_SEND_LAST, RQ_PSN + 1, true, none(), &data[MTU..]);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, Syndrome::RnrNak { timer: RNR_TIMER }, 0);
}

#[test]
fn sequence_error_nak_once_until_the_expected_psn() {
    let mut h = H::new(QpType::Rc);
    for _ in 0..4 {
        h.recv(1, 64);
    }
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 1, true, none(), b"b");
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 2, true, none(), b"c");
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, nak(NakCode::PsnSequenceError), 0);
    assert_eq!(h.cnt.get(Counter::OutOfSeqRequest), 2);
    assert!(h.wcs().is_empty());
    // The expected one clears it; a new gap gets a new NAK.
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"a");
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 3, true, none(), b"d");
    let out = h.out();
    assert_eq!(out.len(), 2);
    assert_ack(&out[0], RQ_PSN, ACK, 1);
    assert_ack(&out[1], RQ_PSN + 1, nak(NakCode::PsnSequenceError), 1);
    assert_eq!(h.c.state(), QpState::Rtr);
}

#[test]
fn duplicate_send_and_write_are_reacked_not_redelivered() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 64);
    h.recv(2, 64);
    let (k, va) = h.region(64, 0, ALL);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"a");
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN + 1,
        true,
        reth(va, k, 4),
        b"wxyz",
    );
    assert_eq!(h.out().len(), 1);
    h.mem.bytes_mut(k).unwrap()[..4].copy_from_slice(b"0000");
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"a");
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN + 1,
        true,
        reth(va, k, 4),
        b"wxyz",
    );
    assert_eq!(h.wcs().len(), 1, "delivered once");
    assert_eq!(&h.mem.bytes(k).unwrap()[..4], b"0000", "not written twice");
    let out = h.out();
    assert_eq!(out.len(), 1, "coalesced");
    assert_ack(&out[0], RQ_PSN + 1, ACK, 2);
    assert_eq!(h.cnt.get(Counter::DuplicateRequest), 2);
    assert_eq!(h.resp.posted_recvs(), 1);
}

#[test]
fn psn_wraps_at_2_pow_24() {
    let mut h = H::with(QpType::Rc, ALL, 1, 0xff_ffff);
    h.recv(1, 1024);
    let data = bytes(MTU + 1, 0);
    h.rx(
        Opcode::RC_SEND_FIRST,
        0xff_ffff,
        false,
        none(),
        &data[..MTU],
    );
    h.rx(Opcode::RC_SEND_LAST, 0, true, none(), &data[MTU..]);
    assert_eq!(h.wcs()[0].byte_len as usize, MTU + 1);
    let out = h.out();
    assert_ack(&out[0], 0, ACK, 1);
    assert_eq!(h.resp.expected_psn(), Psn::new(1));
    // 0xffffff is now a duplicate.
    h.rx(
        Opcode::RC_SEND_FIRST,
        0xff_ffff,
        false,
        none(),
        &data[..MTU],
    );
    assert_ack(&h.out()[0], 0, ACK, 1);
}

// ---- errors ----------------------------------------------------------------

#[test]
fn send_longer_than_the_receive_is_loc_len_err_and_nak_invalid_request() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 4);
    h.recv(2, 64);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"toolong");
    let wcs = h.wcs();
    assert_eq!(wcs.len(), 2);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::LocLenErr));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(h.c.state(), QpState::Error);
    assert!(h.events().contains(&AsyncEvent::QpFatal { qpn: QPN }));
    // The NAK still goes out in ERR.
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
}

#[test]
fn bad_receive_buffer_is_loc_prot_err_and_remote_operational_error() {
    let mut h = H::new(QpType::Rc);
    // A receive buffer without LOCAL_WRITE.
    let (k, va) = h.region(64, 0, AccessFlags::REMOTE_READ);
    let sg_list = vec![Sge {
        addr: va,
        length: 64,
        lkey: k.raw(),
    }];
    h.resp
        .post_recv(
            &h.c,
            RecvWr {
                wr_id: 3,
                sg_list: sg_list.into(),
            },
        )
        .unwrap();
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"x");
    assert_eq!(h.wcs()[0].status, WcStatus::LocProtErr);
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::RemoteOperationalError), 0);
    assert_eq!(h.c.state(), QpState::Error);
}

#[test]
fn opcode_sequence_errors_are_invalid_requests() {
    let data = bytes(MTU, 0);
    // MIDDLE without FIRST.
    let mut h = H::new(QpType::Rc);
    h.recv(1, 1024);
    h.rx(Opcode::RC_SEND_MIDDLE, RQ_PSN, true, none(), &data);
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
    assert_eq!(h.c.state(), QpState::Error);
    assert_eq!(h.wcs()[0].status, WcStatus::WrFlushErr);

    // A new FIRST inside a message; the receive in progress is flushed.
    let mut h = H::new(QpType::Rc);
    h.recv(1, 1024);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN + 1, false, none(), &data);
    assert_ack(&h.out()[0], RQ_PSN + 1, nak(NakCode::InvalidRequest), 0);
    let wcs = h.wcs();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::WrFlushErr));

    // A FIRST shorter than the path MTU.
    let mut h = H::new(QpType::Rc);
    h.recv(1, 1024);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data[..8]);
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
}

// ---- WRITE -----------------------------------------------------------------

#[test]
fn write_multi_packet_lands_at_offsets() {
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(1024, 0, ALL);
    let data = bytes(2 * MTU + 3, 9);
    let len = data.len() as u32;
    h.rx(
        Opcode::RC_RDMA_WRITE_FIRST,
        RQ_PSN,
        false,
        reth(va + 8, k, len),
        &data[..MTU],
    );
    h.rx(
        Opcode::RC_RDMA_WRITE_MIDDLE,
        RQ_PSN + 1,
        false,
        none(),
        &data[MTU..2 * MTU],
    );
    h.rx(
        Opcode::RC_RDMA_WRITE_LAST,
        RQ_PSN + 2,
        true,
        none(),
        &data[2 * MTU..],
    );
    assert_eq!(&h.mem.bytes(k).unwrap()[8..8 + data.len()], &data[..]);
    assert!(h.wcs().is_empty(), "a WRITE consumes no receive");
    assert_ack(&h.out()[0], RQ_PSN + 2, ACK, 1);
}

#[test]
fn write_lengths_must_add_up_to_the_dma_length() {
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(1024, 0, ALL);
    let data = bytes(2 * MTU, 0);
    h.rx(
        Opcode::RC_RDMA_WRITE_FIRST,
        RQ_PSN,
        false,
        reth(va, k, 600),
        &data[..MTU],
    );
    h.rx(
        Opcode::RC_RDMA_WRITE_LAST,
        RQ_PSN + 1,
        true,
        none(),
        &data[MTU..2 * MTU],
    );
    assert_ack(&h.out()[0], RQ_PSN + 1, nak(NakCode::InvalidRequest), 0);
    assert_eq!(h.c.state(), QpState::Error);

    // ONLY with a payload other than the DMA length.
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(64, 0, ALL);
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN,
        true,
        reth(va, k, 8),
        b"abcd",
    );
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
}

#[test]
fn write_access_errors_are_remote_access_errors() {
    let cases: [(AccessFlags, i64, u8); 4] = [
        (AccessFlags::REMOTE_READ, 0, 0), // MR without REMOTE_WRITE
        (ALL, 60, 0),                     // past the end
        (ALL, 0, 1),                      // stale key portion
        (ALL, -8, 0),                     // before the start
    ];
    for (access, shift, key_delta) in cases {
        let mut h = H::new(QpType::Rc);
        let (k, va) = h.region(64, 0, access | AccessFlags::LOCAL_WRITE);
        let k = k.with_key(k.key().wrapping_add(key_delta));
        let va = va.wrapping_add_signed(shift);
        h.rx(
            Opcode::RC_RDMA_WRITE_ONLY,
            RQ_PSN,
            true,
            reth(va, k, 8),
            b"abcdefgh",
        );
        assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::RemoteAccessError), 0);
        assert_eq!(h.c.state(), QpState::Error);
    }
    // Another PD.
    let mut h = H::new(QpType::Rc);
    let k = h.mem.register(PD + 1, 0x100, 64, ALL).unwrap();
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN,
        true,
        reth(0x100, k, 4),
        b"abcd",
    );
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::RemoteAccessError), 0);
}

#[test]
fn operations_the_qp_does_not_enable_are_invalid_requests() {
    let mut h = H::with(QpType::Rc, AccessFlags::LOCAL_WRITE, 4, RQ_PSN);
    let (k, va) = h.region(64, 0, ALL);
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN,
        true,
        reth(va, k, 4),
        b"abcd",
    );
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
    assert_eq!(h.mem.bytes(k).unwrap()[0], 0);

    let mut h = H::with(QpType::Rc, AccessFlags::REMOTE_WRITE, 4, RQ_PSN);
    let (k, va) = h.region(64, 0, ALL);
    h.read_req(RQ_PSN, k, va, 4);
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);

    let mut h = H::with(QpType::Rc, AccessFlags::REMOTE_READ, 4, RQ_PSN);
    let (k, va) = h.region(64, 0, ALL);
    h.rx(Opcode::RC_FETCH_ADD, RQ_PSN, true, atomic(va, k, 1, 0), b"");
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
}

/// A WRITE with immediate (77) of MTU + 4 bytes into a new region, whose
/// LAST packet finds no receive: the RNR NAK names the LAST and the WRITE
/// state survives. Then `post` posts receives, the LAST comes again and the
/// WRITE lands. Returns the region's key and VA, the length and the
/// completion.
fn write_imm_after_rnr(h: &mut H, post: impl FnOnce(&mut H)) -> (Key, u64, u32, WorkCompletion) {
    let (k, va) = h.region(1024, 0, ALL);
    let data = bytes(MTU + 4, 2);
    let len = data.len() as u32;
    h.rx(
        Opcode::RC_RDMA_WRITE_FIRST,
        RQ_PSN,
        false,
        reth(va, k, len),
        &data[..MTU],
    );
    let last = |h: &mut H| {
        h.rx(
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            RQ_PSN + 1,
            true,
            imm(77),
            &data[MTU..],
        )
    };
    last(h);
    assert_ack(
        &h.out()[0],
        RQ_PSN + 1,
        Syndrome::RnrNak { timer: RNR_TIMER },
        0,
    );
    post(h);
    last(h);
    let wc = h.wcs()[0];
    assert_eq!(&h.mem.bytes(k).unwrap()[..data.len()], &data[..]);
    (k, va, len, wc)
}

#[test]
fn write_with_immediate_consumes_a_receive() {
    let mut h = H::new(QpType::Rc);
    let (_, _, len, wc) = write_imm_after_rnr(&mut h, |h| {
        h.recv(4, 0);
    });
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.imm_data),
        (4, WcOpcode::RecvRdmaWithImm, len, Some(77))
    );
    assert_ack(&h.out()[0], RQ_PSN + 1, ACK, 1);

    // Zero-length WRITE with immediate: no valid R_Key needed (C9-88).
    h.recv(5, 0);
    let mut ext = reth(0, Key::new(0), 0);
    ext.immdt = Some(ImmDtRepr { imm: 1 });
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        RQ_PSN + 2,
        true,
        ext,
        b"",
    );
    let wc = h.wcs()[0];
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.status),
        (5, 0, WcStatus::Success)
    );
}

// ---- READ ------------------------------------------------------------------

fn filled(h: &mut H, len: usize) -> (Key, u64, Vec<u8>) {
    let data = bytes(len, 5);
    let va = h.next_va;
    h.next_va += 0x10_000;
    let k = h.mem.register_bytes(PD, va, data.clone(), ALL).unwrap();
    (k, va, data)
}

#[test]
fn read_responses_first_middle_last_with_psns_and_aeth() {
    let mut h = H::new(QpType::Rc);
    let (k, va, data) = filled(&mut h, 1000);
    h.read_req(RQ_PSN, k, va + 10, 600);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN + 3));
    let out = h.out();
    let ops: Vec<_> = out.iter().map(|o| o.0.bth.opcode).collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST
        ]
    );
    let psns: Vec<_> = out.iter().map(|o| o.0.bth.psn).collect();
    assert_eq!(psns, [RQ_PSN, RQ_PSN + 1, RQ_PSN + 2]);
    assert!(out[1].0.ext.aeth.is_none());
    assert_eq!(out[0].0.ext.aeth.unwrap().msn, 1);
    assert_eq!(out[2].0.ext.aeth.unwrap().syndrome, ACK);
    let got: Vec<u8> = out.iter().flat_map(|o| o.1.clone()).collect();
    assert_eq!(&got[..], &data[10..610]);

    // Zero-length READ: one empty ONLY.
    h.rx(
        Opcode::RC_RDMA_READ_REQUEST,
        RQ_PSN + 3,
        true,
        reth(0, Key::new(0), 0),
        b"",
    );
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(out[0].0.bth.psn, RQ_PSN + 3);
    assert!(out[0].1.is_empty());
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN + 4));
}

#[test]
fn duplicate_read_is_reexecuted_from_its_psn() {
    let mut h = H::new(QpType::Rc);
    let (k, va, data) = filled(&mut h, 1000);
    h.read_req(RQ_PSN, k, va, 600);
    assert_eq!(h.out().len(), 3);
    // The requester lost the last two and asks for the rest.
    h.read_req(RQ_PSN + 1, k, va + MTU as u64, 600 - MTU as u32);
    let out = h.out();
    let ops: Vec<_> = out.iter().map(|o| (o.0.bth.opcode, o.0.bth.psn)).collect();
    assert_eq!(
        ops,
        [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, RQ_PSN + 1),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, RQ_PSN + 2)
        ]
    );
    let got: Vec<u8> = out.iter().flat_map(|o| o.1.clone()).collect();
    assert_eq!(&got[..], &data[MTU..600]);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN + 3));
    assert_eq!(h.cnt.get(Counter::DuplicateRequest), 1);

    // Outside the original range: dropped.
    h.read_req(RQ_PSN + 1, k, va, 700);
    assert!(h.out().is_empty());
    // A duplicate while the first answer is still queued restarts it.
    h.read_req(RQ_PSN, k, va, 600);
    h.read_req(RQ_PSN, k, va, 600);
    assert_eq!(h.out().len(), 3);
    assert_eq!(h.c.state(), QpState::Rtr);
}

#[test]
fn responses_keep_psn_order_with_acks() {
    let mut h = H::new(QpType::Rc);
    let (k, va, _) = filled(&mut h, 1000);
    h.recv(1, 64);
    h.read_req(RQ_PSN, k, va, 300);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN + 2, true, none(), b"s");
    let out = h.out();
    let ops: Vec<_> = out.iter().map(|o| (o.0.bth.opcode, o.0.bth.psn)).collect();
    assert_eq!(
        ops,
        [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, RQ_PSN),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, RQ_PSN + 1),
            (Opcode::RC_ACKNOWLEDGE, RQ_PSN + 2),
        ]
    );
    assert_eq!(out[2].0.ext.aeth.unwrap().msn, 2);
}

#[test]
fn more_reads_than_max_dest_rd_atomic_is_invalid_request() {
    let mut h = H::with(QpType::Rc, ALL, 1, RQ_PSN);
    let (k, va, _) = filled(&mut h, 64);
    h.read_req(RQ_PSN, k, va, 8);
    h.read_req(RQ_PSN + 1, k, va, 8);
    let out = h.out();
    assert_eq!(out.len(), 1, "in ERR only the NAK still goes out");
    assert_ack(&out[0], RQ_PSN + 1, nak(NakCode::InvalidRequest), 1);
    assert_eq!(h.c.state(), QpState::Error);

    // Answered one at a time, any number is fine.
    let mut h = H::with(QpType::Rc, ALL, 1, RQ_PSN);
    let (k, va, _) = filled(&mut h, 64);
    for i in 0..3 {
        h.read_req(RQ_PSN + i, k, va, 8);
        assert_eq!(h.out().len(), 1);
    }
    assert_eq!(h.c.state(), QpState::Rtr);
}

#[test]
fn read_access_error() {
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(64, 0, AccessFlags::REMOTE_WRITE);
    h.read_req(RQ_PSN, k, va, 8);
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::RemoteAccessError), 0);
    assert_eq!(h.c.state(), QpState::Error);
}

#[test]
fn region_gone_while_read_responses_are_sent_is_a_nak() {
    let mut h = H::new(QpType::Rc);
    let (k, va, _) = filled(&mut h, 1000);
    h.read_req(RQ_PSN, k, va, 600);
    h.mem.deregister(k).unwrap();
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, nak(NakCode::RemoteAccessError), 1);
    assert_eq!(h.c.state(), QpState::Error);
}

// ---- atomics -----------------------------------------------------------------

fn word(h: &H, k: Key) -> u64 {
    u64::from_ne_bytes(h.mem.bytes(k).unwrap()[..8].try_into().unwrap())
}

#[test]
fn fetch_add_once_and_duplicate_answered_from_the_table() {
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(16, 0, ALL);
    h.mem.bytes_mut(k).unwrap()[..8].copy_from_slice(&40u64.to_ne_bytes());
    h.rx(Opcode::RC_FETCH_ADD, RQ_PSN, true, atomic(va, k, 2, 0), b"");
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(out[0].0.bth.psn, RQ_PSN);
    assert_eq!(out[0].0.ext.atomic_ack_eth.unwrap().orig_data, 40);
    assert_eq!(out[0].0.ext.aeth.unwrap().msn, 1);
    assert_eq!(word(&h, k), 42);
    // The duplicate is never executed again.
    h.rx(Opcode::RC_FETCH_ADD, RQ_PSN, true, atomic(va, k, 2, 0), b"");
    h.rx(Opcode::RC_FETCH_ADD, RQ_PSN, true, atomic(va, k, 2, 0), b"");
    let out = h.out();
    assert_eq!(out.len(), 1, "one answer while one is queued");
    assert_eq!(out[0].0.ext.atomic_ack_eth.unwrap().orig_data, 40);
    assert_eq!(word(&h, k), 42);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN + 1));
}

#[test]
fn compare_swap() {
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(16, 0, ALL);
    h.mem.bytes_mut(k).unwrap()[8..16].copy_from_slice(&5u64.to_ne_bytes());
    // Mismatch: unchanged.
    h.rx(
        Opcode::RC_COMPARE_SWAP,
        RQ_PSN,
        true,
        atomic(va + 8, k, 9, 4),
        b"",
    );
    // Match: swapped.
    h.rx(
        Opcode::RC_COMPARE_SWAP,
        RQ_PSN + 1,
        true,
        atomic(va + 8, k, 9, 5),
        b"",
    );
    let out = h.out();
    let origs: Vec<_> = out
        .iter()
        .map(|o| o.0.ext.atomic_ack_eth.unwrap().orig_data)
        .collect();
    assert_eq!(origs, [5, 5]);
    assert_eq!(&h.mem.bytes(k).unwrap()[8..16], &9u64.to_ne_bytes());
}

#[test]
fn atomic_errors() {
    // Misaligned: Invalid Request.
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(16, 0, ALL);
    h.rx(
        Opcode::RC_FETCH_ADD,
        RQ_PSN,
        true,
        atomic(va + 4, k, 1, 0),
        b"",
    );
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::InvalidRequest), 0);
    // No REMOTE_ATOMIC on the region: Remote Access Error.
    let mut h = H::new(QpType::Rc);
    let (k, va) = h.region(16, 0, AccessFlags::REMOTE_WRITE);
    h.rx(Opcode::RC_FETCH_ADD, RQ_PSN, true, atomic(va, k, 1, 0), b"");
    assert_ack(&h.out()[0], RQ_PSN, nak(NakCode::RemoteAccessError), 0);
    assert_eq!(h.c.state(), QpState::Error);
}

// ---- UC --------------------------------------------------------------------

#[test]
fn uc_gap_drops_the_message_and_reuses_its_receive() {
    let mut h = H::new(QpType::Uc);
    let k = h.recv(1, 1024);
    let data = bytes(3 * MTU, 0);
    h.rx(Opcode::UC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    // RQ_PSN + 1 (MIDDLE) lost.
    h.rx(
        Opcode::UC_SEND_LAST,
        RQ_PSN + 2,
        false,
        none(),
        &data[2 * MTU..],
    );
    assert!(h.wcs().is_empty());
    assert_eq!(h.resp.posted_recvs(), 1);
    // The next message gets the same receive.
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN + 3, false, none(), b"next");
    let wc = h.wcs()[0];
    assert_eq!((wc.wr_id, wc.byte_len), (1, 4));
    assert_eq!(&h.mem.bytes(k).unwrap()[..4], b"next");
    // A stale copy of it is not delivered twice.
    h.recv(2, 64);
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN + 3, false, none(), b"next");
    assert!(h.wcs().is_empty());
    assert!(h.out().is_empty(), "UC never acknowledges");
    assert!(h.cnt.get(Counter::DropUcIncomplete) >= 1);
    assert_eq!(h.cnt.get(Counter::DuplicateRequest), 1);
}

#[test]
fn uc_discards_until_the_next_first_or_only() {
    let mut h = H::new(QpType::Uc);
    h.recv(1, 1024);
    let data = bytes(3 * MTU, 0);
    // FIRST lost; MIDDLE and LAST are dropped.
    h.rx(
        Opcode::UC_SEND_MIDDLE,
        RQ_PSN + 1,
        false,
        none(),
        &data[..MTU],
    );
    h.rx(Opcode::UC_SEND_LAST, RQ_PSN + 2, false, none(), b"z");
    assert!(h.wcs().is_empty());
    // WRITE to a valid region starts fresh.
    let (k, va) = h.region(64, 0, ALL);
    h.rx(
        Opcode::UC_RDMA_WRITE_ONLY,
        RQ_PSN + 3,
        false,
        reth(va, k, 2),
        b"ok",
    );
    assert_eq!(&h.mem.bytes(k).unwrap()[..2], b"ok");
    assert_eq!(h.c.state(), QpState::Rtr);
}

#[test]
fn uc_errors_drop_without_nak() {
    let mut h = H::new(QpType::Uc);
    // No receive.
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN, false, none(), b"a");
    assert_eq!(h.cnt.get(Counter::DropNoRecv), 1);
    // Bad R_Key.
    h.rx(
        Opcode::UC_RDMA_WRITE_ONLY,
        RQ_PSN + 1,
        false,
        reth(0x99, Key::new(0x500), 1),
        b"a",
    );
    assert!(h.out().is_empty());
    assert_eq!(h.c.state(), QpState::Rtr);
    // Still working.
    h.recv(1, 8);
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN + 2, false, none(), b"b");
    assert_eq!(h.wcs()[0].status, WcStatus::Success);
}

// ---- UD / GSI -----------------------------------------------------------------

fn deth(qkey: u32, src_qp: u32) -> ExtReprs {
    ExtReprs {
        deth: Some(DethRepr { qkey, src_qp }),
        ..ExtReprs::default()
    }
}

#[test]
fn ud_receive_has_grh_space_and_source() {
    let mut h = H::new(QpType::Ud);
    h.meta.grh = [0x45; 40];
    let k = h.recv(3, 100);
    let mut ext = deth(QKEY, 0x77);
    ext.immdt = Some(ImmDtRepr { imm: 5 });
    h.rx(
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        999,
        false,
        ext,
        b"dgram",
    );
    let wc = h.wcs()[0];
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp, wc.grh, wc.imm_data),
        (WcStatus::Success, 45, 0x77, true, Some(5))
    );
    let b = h.mem.bytes(k).unwrap();
    assert_eq!(&b[..40], &[0x45; 40]);
    assert_eq!(&b[40..45], b"dgram");
    assert!(h.out().is_empty());
    assert_eq!(h.events(), [], "no COMM_EST for datagram QPs");
}

#[test]
fn ud_drops_wrong_qkey_and_no_receive() {
    let mut h = H::new(QpType::Ud);
    h.rx(Opcode::UD_SEND_ONLY, 1, false, deth(QKEY, 1), b"a");
    assert_eq!(h.cnt.get(Counter::DropNoRecv), 1);
    h.recv(1, 64);
    h.rx(Opcode::UD_SEND_ONLY, 2, false, deth(QKEY + 1, 1), b"a");
    assert_eq!(h.cnt.get(Counter::DropQkeyMismatch), 1);
    assert!(h.wcs().is_empty());
    assert_eq!(h.resp.posted_recvs(), 1);
}

#[test]
fn ud_buffer_without_room_for_the_grh_is_loc_len_err() {
    let mut h = H::new(QpType::Ud);
    h.recv(1, 44);
    h.rx(Opcode::UD_SEND_ONLY, 1, false, deth(QKEY, 1), b"abcde");
    assert_eq!(h.wcs()[0].status, WcStatus::LocLenErr);
    assert_eq!(h.c.state(), QpState::Error);
}

#[test]
fn gsi_takes_the_well_known_qkey() {
    let mut h = H::new(QpType::Gsi);
    h.recv(1, 256);
    h.rx(Opcode::UD_SEND_ONLY, 1, false, deth(QKEY, 1), b"mad");
    assert_eq!(h.cnt.get(Counter::DropQkeyMismatch), 1);
    h.rx(Opcode::UD_SEND_ONLY, 2, false, deth(GSI_QKEY, 1), b"mad");
    let wc = h.wcs()[0];
    assert_eq!(
        (wc.status, wc.byte_len, wc.qp_num),
        (WcStatus::Success, 43, 1)
    );
}

// ---- flush -------------------------------------------------------------------

#[test]
fn flush_completes_every_receive_in_order() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 1024);
    h.recv(2, 1024);
    h.recv(3, 1024);
    let data = bytes(MTU, 0);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data);
    h.c.config.enter_error();
    h.resp.flush(&mut h.c);
    let ids: Vec<_> = h
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::WrFlushErr, WcOpcode::Recv),
            (2, WcStatus::WrFlushErr, WcOpcode::Recv),
            (3, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    assert!(h.out().is_empty());
    assert_eq!(h.resp.posted_recvs(), 0);
}

// ---- shared receive queue ----------------------------------------------------

/// The wr_ids still queued on the SRQ, front first (emptying it).
fn srq_ids(h: &mut H) -> Vec<u64> {
    std::iter::from_fn(|| h.srq().pop())
        .map(|w| w.wr_id)
        .collect()
}

#[test]
fn srq_send_takes_from_the_srq_with_rnr_when_it_is_empty() {
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    // The QP has no receive queue of its own.
    let wr = RecvWr {
        wr_id: 9,
        sg_list: Default::default(),
    };
    assert_eq!(h.resp.post_recv(&h.c, wr), Err(PostError::QpHasSrq));
    // Empty SRQ: RNR NAK, expected PSN unchanged.
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"abc");
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_ack(&out[0], RQ_PSN, Syndrome::RnrNak { timer: RNR_TIMER }, 0);
    assert_eq!(h.resp.expected_psn(), Psn::new(RQ_PSN));
    assert!(h.wcs().is_empty());
    // Posted to the SRQ: the resend lands in the SRQ's oldest receive.
    let k1 = h.recv(1, 64);
    h.recv(2, 64);
    h.rx(Opcode::RC_SEND_ONLY, RQ_PSN, true, none(), b"abc");
    let wcs = h.wcs();
    assert_eq!(wcs.len(), 1);
    let wc = wcs[0];
    assert_eq!(
        (
            wc.wr_id,
            wc.status,
            wc.opcode,
            wc.byte_len,
            wc.qp_num,
            wc.queue
        ),
        (
            1,
            WcStatus::Success,
            WcOpcode::Recv,
            3,
            QPN,
            WorkQueue::Recv
        )
    );
    assert_eq!(&h.mem.bytes(k1).unwrap()[..3], b"abc");
    assert_ack(&h.out()[0], RQ_PSN, ACK, 1);
    assert_eq!(h.resp.posted_recvs(), 0);
    assert_eq!(srq_ids(&mut h), [2]);
}

#[test]
fn srq_multi_packet_send_takes_its_receive_at_the_first_packet() {
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    let k = h.recv(1, 1024);
    h.recv(2, 1024);
    let data = bytes(2 * MTU + 5, 1);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    assert_eq!(h.srq().len(), 1, "taken at the FIRST packet");
    h.rx(
        Opcode::RC_SEND_MIDDLE,
        RQ_PSN + 1,
        false,
        none(),
        &data[MTU..2 * MTU],
    );
    assert_eq!(h.srq().len(), 1);
    h.rx(
        Opcode::RC_SEND_LAST,
        RQ_PSN + 2,
        true,
        none(),
        &data[2 * MTU..],
    );
    let wc = h.wcs()[0];
    assert_eq!((wc.wr_id, wc.byte_len), (1, data.len() as u32));
    assert_eq!(&h.mem.bytes(k).unwrap()[..data.len()], &data[..]);
    // A duplicate of the whole message takes nothing more.
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    assert!(h.wcs().is_empty());
    assert_eq!(srq_ids(&mut h), [2]);
}

#[test]
fn srq_write_with_immediate_takes_its_receive_at_the_last_packet() {
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    // The SRQ is empty at the LAST: RNR NAK names it.
    let (k, va, len, wc) = write_imm_after_rnr(&mut h, |h| {
        h.recv(4, 0);
        h.recv(5, 0);
    });
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.imm_data, wc.qp_num),
        (4, WcOpcode::RecvRdmaWithImm, len, Some(77), QPN)
    );
    // A plain WRITE takes no receive.
    h.rx(
        Opcode::RC_RDMA_WRITE_ONLY,
        RQ_PSN + 2,
        true,
        reth(va, k, 4),
        b"wxyz",
    );
    assert!(h.wcs().is_empty());
    assert_eq!(srq_ids(&mut h), [5]);
}

#[test]
fn srq_uc_gap_gives_the_receive_back_to_the_front_of_the_srq() {
    let mut h = H::with_srq(QpType::Uc, SrqInit::new(PD));
    let k1 = h.recv(1, 1024);
    h.recv(2, 1024);
    let data = bytes(3 * MTU, 0);
    h.rx(Opcode::UC_SEND_FIRST, RQ_PSN, false, none(), &data[..MTU]);
    assert_eq!(h.srq().len(), 1);
    // RQ_PSN + 1 (MIDDLE) lost: the receive goes back, in front of 2.
    h.rx(
        Opcode::UC_SEND_LAST,
        RQ_PSN + 2,
        false,
        none(),
        &data[2 * MTU..],
    );
    assert!(h.wcs().is_empty());
    assert_eq!(h.srq().len(), 2);
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN + 3, false, none(), b"next");
    let wc = h.wcs()[0];
    assert_eq!((wc.wr_id, wc.byte_len, wc.qp_num), (1, 4, QPN));
    assert_eq!(&h.mem.bytes(k1).unwrap()[..4], b"next");
    assert_eq!(srq_ids(&mut h), [2]);
    // Empty SRQ on UC: dropped, nothing taken, no NAK.
    h.rx(Opcode::UC_SEND_ONLY, RQ_PSN + 4, false, none(), b"x");
    assert!(h.wcs().is_empty());
    assert_eq!(h.cnt.get(Counter::DropNoRecv), 1);
    assert!(h.out().is_empty());
}

#[test]
fn srq_ud_receive() {
    let mut h = H::with_srq(QpType::Ud, SrqInit::new(PD));
    h.rx(Opcode::UD_SEND_ONLY, 1, false, deth(QKEY, 9), b"a");
    assert_eq!(h.cnt.get(Counter::DropNoRecv), 1);
    let k = h.recv(3, 100);
    h.rx(Opcode::UD_SEND_ONLY, 2, false, deth(QKEY, 9), b"dgram");
    let wc = h.wcs()[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.src_qp, wc.qp_num),
        (3, WcStatus::Success, 45, 9, QPN)
    );
    assert_eq!(&h.mem.bytes(k).unwrap()[40..45], b"dgram");
    assert!(h.srq().is_empty());
}

#[test]
fn srq_limit_event_is_raised_once_through_the_qp() {
    let mut h = H::with_srq(
        QpType::Rc,
        SrqInit {
            srq_limit: 2,
            ..SrqInit::new(PD)
        },
    );
    for i in 0..4 {
        h.recv(i, 16);
    }
    let mut psn = RQ_PSN;
    let mut send = |h: &mut H| {
        h.rx(Opcode::RC_SEND_ONLY, psn, true, none(), b"m");
        psn += 1;
    };
    send(&mut h); // 3 left
    send(&mut h); // 2 left: not below 2
    assert_eq!(h.events(), [AsyncEvent::CommEstablished { qpn: QPN }]);
    send(&mut h); // 1 left: below
    assert_eq!(h.events(), [AsyncEvent::SrqLimitReached { srqn: SRQN }]);
    assert_eq!(h.srq().attr().srq_limit, 0);
    send(&mut h); // 0 left: disarmed, nothing
    assert_eq!(h.events(), []);
    assert_eq!(h.wcs().len(), 4);
}

#[test]
fn srq_flush_completes_only_the_receive_taken_then_last_wqe_reached_once() {
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    h.recv(1, 1024);
    h.recv(2, 1024);
    h.recv(3, 1024);
    let data = bytes(MTU, 0);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data);
    h.events();
    h.c.config.enter_error();
    h.resp.flush(&mut h.c);
    let ids: Vec<_> = h
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.qp_num, w.queue))
        .collect();
    assert_eq!(
        ids,
        [(
            1,
            WcStatus::WrFlushErr,
            WcOpcode::Recv,
            QPN,
            WorkQueue::Recv
        )]
    );
    assert_eq!(h.events(), [AsyncEvent::LastWqeReached { qpn: QPN }]);
    // Another flush in the same ERR (a post in ERR asks for one): no repeat.
    h.resp.flush(&mut h.c);
    assert!(h.wcs().is_empty());
    assert_eq!(h.events(), []);
    // The SRQ keeps its receives for its other QPs.
    assert_eq!(srq_ids(&mut h), [2, 3]);
}

#[test]
fn srq_receive_error_is_fatal_and_reaches_the_last_wqe() {
    let mut h = H::with_srq(QpType::Ud, SrqInit::new(PD));
    h.recv(1, 44);
    h.recv(2, 1000);
    h.rx(Opcode::UD_SEND_ONLY, 1, false, deth(QKEY, 1), b"abcde");
    let wcs: Vec<_> = h.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wcs, [(1, WcStatus::LocLenErr)]);
    assert_eq!(h.c.state(), QpState::Error);
    assert_eq!(
        h.events(),
        [
            AsyncEvent::QpFatal { qpn: QPN },
            AsyncEvent::LastWqeReached { qpn: QPN }
        ]
    );
    assert_eq!(srq_ids(&mut h), [2]);
}

#[test]
fn no_last_wqe_reached_without_an_srq() {
    let mut h = H::new(QpType::Rc);
    h.recv(1, 8);
    h.c.config.enter_error();
    h.resp.flush(&mut h.c);
    assert_eq!(h.wcs().len(), 1);
    assert_eq!(h.events(), []);
}

#[test]
fn take_in_progress_recv_only_takes_a_send_in_progress() {
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    assert!(h.resp.take_in_progress_recv().is_none());
    h.recv(1, 1024);
    let data = bytes(MTU, 0);
    h.rx(Opcode::RC_SEND_FIRST, RQ_PSN, false, none(), &data);
    assert_eq!(h.resp.take_in_progress_recv().map(|w| w.wr_id), Some(1));
    assert!(h.resp.take_in_progress_recv().is_none());
    // A WRITE in progress holds no receive and is left alone: it goes on.
    let mut h = H::with_srq(QpType::Rc, SrqInit::new(PD));
    let (k, va) = h.region(1024, 0, ALL);
    h.rx(
        Opcode::RC_RDMA_WRITE_FIRST,
        RQ_PSN,
        false,
        reth(va, k, 2 * MTU as u32),
        &data,
    );
    assert!(h.resp.take_in_progress_recv().is_none());
    h.rx(Opcode::RC_RDMA_WRITE_LAST, RQ_PSN + 1, true, none(), &data);
    assert_eq!(&h.mem.bytes(k).unwrap()[MTU..2 * MTU], &data[..]);
    assert_ack(h.out().last().unwrap(), RQ_PSN + 1, ACK, 1);
}

mod srq {
    use super::super::queue::MAX_MESSAGE;
    use super::super::srq::*;
    use crate::transport::error::{EndpointError, PostError};
    use crate::transport::wr::RecvWr;
    use crate::transport::wr::Sge;

    fn wr(id: u64, sges: usize, len: u32) -> RecvWr {
        RecvWr {
            wr_id: id,
            sg_list: vec![
                Sge {
                    addr: 0x1000,
                    length: len,
                    lkey: 7,
                };
                sges
            ]
            .into(),
        }
    }

    fn srq(max_wr: u32, limit: u32) -> Srq {
        Srq::new(
            1,
            SrqInit {
                max_wr,
                srq_limit: limit,
                ..SrqInit::new(2)
            },
        )
        .unwrap()
    }

    fn ids(s: &mut Srq) -> Vec<u64> {
        std::iter::from_fn(|| s.pop()).map(|w| w.wr_id).collect()
    }

    #[test]
    fn defaults() {
        let i = SrqInit::new(9);
        assert_eq!((i.pd, i.max_wr, i.max_sge, i.srq_limit), (9, 128, 4, 0));
        let s = Srq::new(5, i).unwrap();
        assert_eq!(s.srqn(), 5);
        assert_eq!(s.pd(), 9);
        assert_eq!(
            s.attr(),
            SrqAttr {
                max_wr: 128,
                max_sge: 4,
                srq_limit: 0,
                queued: 0
            }
        );
    }

    #[test]
    fn create_checks() {
        let bad = |max_wr, srq_limit| {
            Srq::new(
                1,
                SrqInit {
                    max_wr,
                    srq_limit,
                    ..SrqInit::new(1)
                },
            )
            .unwrap_err()
        };
        assert!(matches!(bad(0, 0), EndpointError::InvalidSrqAttr(_)));
        assert_eq!(
            bad(4, 5),
            EndpointError::SrqLimitTooLarge {
                srq_limit: 5,
                max_wr: 4
            }
        );
        // Limit equal to the depth is allowed, and armed from the start.
        assert_eq!(srq(4, 4).attr().srq_limit, 4);
    }

    #[test]
    fn post_checks_sges_length_and_depth() {
        let mut s = srq(2, 0);
        assert_eq!(
            s.post(wr(1, 5, 8)),
            Err(PostError::TooManySges { given: 5, max: 4 })
        );
        // Four SGEs of 2^30 bytes: 2^32 > 2^31.
        assert_eq!(
            s.post(wr(1, 4, 1 << 30)),
            Err(PostError::MessageTooLarge {
                len: 1 << 32,
                max: MAX_MESSAGE
            })
        );
        // Exactly 2^31 is allowed; so is an empty list.
        s.post(wr(1, 2, 1 << 30)).unwrap();
        s.post(wr(2, 0, 0)).unwrap();
        assert_eq!(s.post(wr(3, 1, 8)), Err(PostError::QueueFull { depth: 2 }));
        assert_eq!(s.attr().queued, 2);
        // Refused posts left nothing behind.
        assert_eq!(ids(&mut s), [1, 2]);
    }

    #[test]
    fn fifo_and_push_front() {
        let mut s = srq(3, 0);
        for i in 1..=3 {
            s.post(wr(i, 1, 8)).unwrap();
        }
        let first = s.pop().unwrap();
        assert_eq!(first.wr_id, 1);
        s.post(wr(4, 1, 8)).unwrap();
        // Given back while the queue is full again: accepted, at the front.
        s.push_front(first);
        assert_eq!(s.len(), 4);
        assert_eq!(s.post(wr(5, 1, 8)), Err(PostError::QueueFull { depth: 3 }));
        assert_eq!(ids(&mut s), [1, 2, 3, 4]);
        assert!(s.is_empty());
        assert!(s.pop().is_none());
    }

    #[test]
    fn limit_fires_once_when_below_and_disarms() {
        let mut s = srq(8, 3);
        for i in 0..5 {
            s.post(wr(i, 1, 8)).unwrap();
        }
        s.pop(); // 4 left
        assert!(!s.take_limit_reached());
        s.pop(); // 3 left: not below 3
        assert!(!s.take_limit_reached());
        assert_eq!(s.attr().srq_limit, 3);
        s.pop(); // 2 left: below
        assert!(s.take_limit_reached());
        assert!(!s.take_limit_reached(), "reported once");
        assert_eq!(s.attr().srq_limit, 0, "disarmed");
        s.pop();
        s.pop();
        assert!(!s.take_limit_reached(), "disarmed: no second event");
        // Re-armed while already below: fires on the next WQE taken.
        s.post(wr(10, 1, 8)).unwrap();
        s.modify(None, Some(2)).unwrap();
        assert!(!s.take_limit_reached());
        s.pop();
        assert!(s.take_limit_reached());
        assert_eq!(s.attr().srq_limit, 0);
    }

    #[test]
    fn posting_does_not_fire_and_unarmed_never_fires() {
        let mut s = srq(4, 0);
        for i in 0..4 {
            s.post(wr(i, 1, 8)).unwrap();
        }
        while s.pop().is_some() {
            assert!(!s.take_limit_reached());
        }
    }

    #[test]
    fn rearming_clears_an_event_not_yet_taken() {
        let mut s = srq(4, 1);
        s.post(wr(1, 1, 8)).unwrap();
        s.pop();
        s.modify(None, Some(0)).unwrap();
        assert!(!s.take_limit_reached());
    }

    #[test]
    fn modify_checks() {
        let mut s = srq(4, 0);
        for i in 0..3 {
            s.post(wr(i, 1, 8)).unwrap();
        }
        assert_eq!(s.modify(Some(2), None), Err(EndpointError::SrqResize));
        assert!(matches!(
            s.modify(Some(0), None),
            Err(EndpointError::InvalidSrqAttr(_))
        ));
        assert_eq!(
            s.modify(None, Some(5)),
            Err(EndpointError::SrqLimitTooLarge {
                srq_limit: 5,
                max_wr: 4
            })
        );
        // Both at once are checked together: a limit above the new depth.
        assert_eq!(
            s.modify(Some(3), Some(4)),
            Err(EndpointError::SrqLimitTooLarge {
                srq_limit: 4,
                max_wr: 3
            })
        );
        assert_eq!(s.attr().max_wr, 4, "unchanged after errors");
        s.modify(None, Some(4)).unwrap();
        // Shrinking below an armed limit is refused.
        assert_eq!(
            s.modify(Some(3), None),
            Err(EndpointError::SrqLimitTooLarge {
                srq_limit: 4,
                max_wr: 3
            })
        );
        s.modify(Some(3), Some(2)).unwrap();
        assert_eq!(
            s.attr(),
            SrqAttr {
                max_wr: 3,
                max_sge: 4,
                srq_limit: 2,
                queued: 3
            }
        );
        assert_eq!(s.post(wr(9, 1, 8)), Err(PostError::QueueFull { depth: 3 }));
        // Growing makes room.
        s.modify(Some(10), None).unwrap();
        s.post(wr(9, 1, 8)).unwrap();
    }

    #[test]
    fn attach_counts() {
        let mut s = srq(4, 0);
        s.attach();
        s.attach();
        s.detach();
        assert_eq!(s.attached(), 1);
        s.detach();
        s.detach();
        assert_eq!(s.attached(), 0);
    }
}

mod resources {
    use super::super::resources::*;
    use crate::transport::psn::Psn;

    fn read(first: u32, npkts: u32) -> Entry {
        Entry {
            saved: Saved::Read {
                first: Psn::new(first),
                npkts,
                rkey: 1,
                va: 0,
                len: 0,
            },
            msn: 0,
        }
    }

    fn atomic(psn: u32, orig: u64) -> Entry {
        Entry {
            saved: Saved::Atomic {
                psn: Psn::new(psn),
                orig,
            },
            msn: 0,
        }
    }

    #[test]
    fn bounded_oldest_evicted() {
        let mut r = Resources::new(2);
        r.push(atomic(1, 10));
        r.push(atomic(2, 20));
        r.push(atomic(3, 30));
        assert_eq!(r.len(), 2);
        assert_eq!(r.find(Psn::new(1)), None);
        assert_eq!(r.find(Psn::new(3)), Some(atomic(3, 30)));
        r.set_capacity(1);
        assert_eq!(r.find(Psn::new(2)), None);
        assert_eq!(r.capacity(), 1);
        r.set_capacity(0);
        assert_eq!(r.capacity(), 1);
        r.clear();
        assert!(r.is_empty());
    }

    #[test]
    fn read_ranges_wrap() {
        let mut r = Resources::new(4);
        r.push(read(0xff_fffe, 4)); // 0xfffffe, 0xffffff, 0, 1
        assert!(r.find(Psn::new(0xff_fffe)).is_some());
        assert!(r.find(Psn::new(1)).is_some());
        assert!(r.find(Psn::new(2)).is_none());
        assert!(r.find(Psn::new(0xff_fffd)).is_none());
        // A zero-length READ still takes one PSN.
        r.push(read(7, 0));
        assert!(r.find(Psn::new(7)).is_some());
        assert!(r.find(Psn::new(8)).is_none());
    }
}
