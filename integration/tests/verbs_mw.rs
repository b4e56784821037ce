//! Memory windows through the verbs API, between two devices over real UDP
//! on loopback (127.0.0.180 to 127.0.0.189): a type 2B window bound by a
//! BIND_MW work request, remote WRITE and READ through its R_Key, accesses
//! past it and of rights it does not grant refused, deregistration of its
//! region refused while it is bound, invalidation by a peer's SEND with
//! Invalidate, a rebind with a new key; a type 1 window bound by the verb
//! and rebound; LOCAL_INV; a bind the region does not allow; fast
//! registration; IBTA 1.5 ATOMIC WRITE and FLUSH.

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

fn write(wr_id: u64, src: Sge, remote_addr: u64, rkey: u32) -> SendWr {
    send_wr(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, vec![src])
}

fn bind_region(n: &Node) -> Mr {
    n.pd.reg_mr_zeroed(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap()
}

fn inc(rkey: u32) -> u32 {
    rkey & !0xff | (rkey.wrapping_add(1) & 0xff)
}

const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
const RR: AccessFlags = AccessFlags::REMOTE_READ;

#[test]
fn type2b_window_bind_access_invalidate_rebind() {
    let a = Node::new("127.0.0.180");
    let b = Node::new("127.0.0.181");
    assert!(b.dev.query_device().unwrap().max_mw > 0);
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let mr = bind_region(&b);
    let mw = b.pd.alloc_mw(MwType::Type2B).unwrap();
    let base = mr.addr() + 256;
    let k1 = inc(mw.rkey());
    qb.post_send(send_wr(1, mw.bind_op(k1, &mr, base, 512, RW | RR), vec![]))
        .unwrap();
    let w = b.wait(1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (1, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey(), k1);
    assert_eq!(mw.bound_to(), Some(mr.lkey()));

    // WRITE through the window, READ it back.
    a.mr.write(0, &[0x5a; 64]).unwrap();
    qa.post_send(write(2, a.mr.sge(0, 64), base + 448, k1))
        .unwrap();
    qa.post_send(send_wr(
        3,
        SendOp::RdmaRead {
            remote_addr: base + 448,
            rkey: k1,
        },
        vec![a.mr.sge(1024, 64)],
    ))
    .unwrap();
    let w = a.wait(2);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    let mut got = [0u8; 64];
    mr.read(256 + 448, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64]);
    a.mr.read(1024, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64]);

    // The region cannot go while the window is bound to it.
    assert!(matches!(
        mr.dereg(),
        Err(VerbsError::Busy {
            kind: ObjectKind::Mr,
            ..
        })
    ));

    // The peer invalidates the window with its SEND.
    qb.post_recv(RecvWr {
        wr_id: 4,
        sg_list: [b.mr.sge(0, 64)].into(),
    })
    .unwrap();
    qa.post_send(send_wr(5, SendOp::SendWithInv { rkey: k1 }, vec![]))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::Success));
    let w = b.wait(1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].invalidated_rkey),
        (4, WcStatus::Success, Some(k1))
    );
    assert_eq!(mw.bound_to(), None);

    // Rebound with a new key on the same QP: the new key works, the old
    // one is refused, and the region is still busy.
    let k2 = inc(k1);
    qb.post_send(send_wr(6, mw.bind_op(k2, &mr, mr.addr(), 4096, RW), vec![]))
        .unwrap();
    assert_eq!(b.wait(1)[0].status, WcStatus::Success);
    assert_eq!(mw.rkey(), k2);
    qa.post_send(write(7, a.mr.sge(0, 8), mr.addr(), k2))
        .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    qa.post_send(write(8, a.mr.sge(0, 8), mr.addr(), k1))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (8, WcStatus::RemAccessErr));

    // Another pair: a type 2B window answers only the QP that bound it.
    let (qa2, _qb2) = pair(&a, &b, QpType::Rc);
    qa2.post_send(write(9, a.mr.sge(0, 8), mr.addr(), k2))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (9, WcStatus::RemAccessErr));

    mw.dealloc().unwrap();
    assert!(mw.dealloc().is_err(), "deallocated once");
    mr.dereg().unwrap();
}

#[test]
fn type1_window_bound_by_the_verb_rebound_and_refused_outside() {
    let a = Node::new("127.0.0.182");
    let b = Node::new("127.0.0.183");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let mr = bind_region(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    // The PD is in use while the window exists.
    assert!(matches!(b.pd.dealloc(), Err(VerbsError::Busy { .. })));
    let k1 = mw
        .bind(&qb, 1, Some(&mr), mr.addr(), 128, RW | RR, true)
        .unwrap();
    let w = b.wait(1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (1, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey(), k1);
    qa.post_send(write(2, a.mr.sge(0, 128), mr.addr(), k1))
        .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    // A bound type 1 window may be bound again: the old key stops, the
    // new range is the only one.
    let k2 = mw
        .bind(&qb, 3, Some(&mr), mr.addr() + 1024, 64, RR, true)
        .unwrap();
    assert_eq!(b.wait(1)[0].status, WcStatus::Success);
    assert_ne!(k1, k2);
    // Read-only now: a WRITE through it is refused.
    qa.post_send(write(4, a.mr.sge(0, 8), mr.addr() + 1024, k2))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::RemAccessErr));
    // A type 2 bind work request on a type 1 window is a bind error.
    let (_qa2, qb2) = pair(&a, &b, QpType::Rc);
    qb2.post_send(send_wr(
        5,
        mw.bind_op(inc(k2), &mr, mr.addr(), 8, RR),
        vec![],
    ))
    .unwrap();
    let w = b.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::MwBindErr));
    // Unbinding by a zero-length bind frees the region.
    let (_qa3, qb3) = pair(&a, &b, QpType::Rc);
    mw.bind(&qb3, 6, None, 0, 0, RR, true).unwrap();
    assert_eq!(b.wait(1)[0].status, WcStatus::Success);
    mr.dereg().unwrap();
    mw.dealloc().unwrap();
}

#[test]
fn local_invalidation_and_refused_binds() {
    let a = Node::new("127.0.0.184");
    let b = Node::new("127.0.0.185");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let mr = bind_region(&b);
    let mw = b.pd.alloc_mw(MwType::Type2A).unwrap();
    let k = inc(mw.rkey());
    qb.post_send(send_wr(1, mw.bind_op(k, &mr, mr.addr(), 64, RW), vec![]))
        .unwrap();
    qb.post_send(send_wr(2, SendOp::LocalInv { key: k }, vec![]))
        .unwrap();
    let w = b.wait(2);
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::Success, WcOpcode::LocalInv)
        ]
    );
    qa.post_send(write(3, a.mr.sge(0, 8), mr.addr(), k))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::RemAccessErr));

    // A region without MW_BIND: MW_BIND_ERR, and the QP goes to ERR.
    let (_qa2, qb2) = pair(&a, &b, QpType::Rc);
    let plain = b.pd.reg_mr_zeroed(64, AccessFlags::LOCAL_WRITE).unwrap();
    qb2.post_send(send_wr(
        4,
        mw.bind_op(inc(k), &plain, plain.addr(), 8, RR),
        vec![],
    ))
    .unwrap();
    let w = b.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::MwBindErr));
    assert_eq!(qb2.query().unwrap().state, QpState::Error);

    // LOCAL_INV of an ordinary region: LOC_QP_OP_ERR.
    let (_qa3, qb3) = pair(&a, &b, QpType::Rc);
    qb3.post_send(send_wr(5, SendOp::LocalInv { key: plain.lkey() }, vec![]))
        .unwrap();
    let w = b.wait(1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (5, WcStatus::LocQpOpErr, WcOpcode::LocalInv)
    );
    mw.dealloc().unwrap();
    mr.dereg().unwrap();
}

/// Fast registration: `alloc_mr`, REG_MR at an address and key portion
/// of the consumer's choice, remote READ and WRITE through it, LOCAL_INV,
/// the WRITE after it refused, registration again with the next key.
#[test]
fn fast_registration_register_access_invalidate_again() {
    let a = Node::new("127.0.0.187");
    let b = Node::new("127.0.0.188");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let fr = b.pd.alloc_mr(8192).unwrap();
    assert!(!fr.is_registered());
    assert_eq!((fr.capacity(), fr.len()), (8192, 0));
    fr.write(0, &[0x77; 32]).unwrap();
    let iova = 0x7700_0000;
    let k1 = fr.next_key();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qb.post_send(send_wr(1, fr.reg_op(k1, iova, 4096, rw), vec![]))
        .unwrap();
    let w = b.wait(1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (1, WcStatus::Success, WcOpcode::RegMr)
    );
    assert_eq!((fr.lkey(), fr.iova(), fr.len()), (k1, iova, 4096));
    assert!(fr.is_registered());
    qa.post_send(send_wr(
        2,
        SendOp::RdmaRead {
            remote_addr: iova,
            rkey: k1,
        },
        vec![a.mr.sge(0, 32)],
    ))
    .unwrap();
    a.mr.write(4096, &[0x33; 16]).unwrap();
    qa.post_send(write(3, a.mr.sge(4096, 16), iova + 4080, k1))
        .unwrap();
    let w = a.wait(2);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    let mut got = [0u8; 32];
    a.mr.read(0, &mut got).unwrap();
    assert_eq!(got, [0x77; 32]);
    let mut tail = [0u8; 16];
    fr.read(4080, &mut tail).unwrap();
    assert_eq!(tail, [0x33; 16]);
    // LOCAL_INV, then the same WRITE is refused.
    qb.post_send(send_wr(4, SendOp::LocalInv { key: k1 }, vec![]))
        .unwrap();
    let w = b.wait(1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    assert!(!fr.is_registered());
    qa.post_send(write(5, a.mr.sge(4096, 8), iova, k1)).unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::RemAccessErr);
    // Registered again, with the next key portion, on another pair.
    let (qa2, qb2) = pair(&a, &b, QpType::Rc);
    let k2 = fr.next_key();
    assert_ne!(k2, k1);
    qb2.post_send(send_wr(6, fr.reg_op(k2, iova, 64, rw), vec![]))
        .unwrap();
    assert_eq!(b.wait(1)[0].status, WcStatus::Success);
    qa2.post_send(write(7, a.mr.sge(4096, 8), iova, k2))
        .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    qa2.post_send(write(8, a.mr.sge(4096, 8), iova + 60, k2))
        .unwrap();
    assert_eq!(
        a.wait(1)[0].status,
        WcStatus::RemAccessErr,
        "past its length"
    );
    fr.dereg().unwrap();
    assert!(fr.dereg().is_err());
}

/// IBTA 1.5 ATOMIC WRITE and FLUSH between two QPs: the 8 bytes land
/// as one, FLUSH of a range and of the whole region complete after them,
/// a FLUSH to persistence is refused (no rxe region is persistent, and
/// registering one that claims to be is refused).
#[test]
fn atomic_write_and_flush_between_two_qps() {
    use rxe_core::wire::feth::{
        PLT_GLOBAL_VISIBILITY, PLT_PERSISTENCE, SEL_MEMORY_RANGE, SEL_MEMORY_REGION,
    };
    // One device, two of its QPs connected to each other.
    let a = Node::new("127.0.0.189");
    let b = &a;
    let (qa, _qb) = pair(&a, b, QpType::Rc);
    let lw_rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    assert!(matches!(
        b.pd.reg_mr_zeroed(64, lw_rw | AccessFlags::FLUSH_PERSISTENT),
        Err(VerbsError::InvalidArgument(_))
    ));
    let tgt =
        b.pd.reg_mr_zeroed(64, lw_rw | AccessFlags::FLUSH_GLOBAL)
            .unwrap();
    let v = 0x0123_4567_89ab_cdefu64.to_ne_bytes();
    let aw = SendWr {
        data: SendData::Inline(v[..].into()),
        ..send_wr(
            1,
            SendOp::AtomicWrite {
                remote_addr: tgt.addr() + 16,
                rkey: tgt.rkey(),
            },
            vec![],
        )
    };
    qa.post_send(aw).unwrap();
    let flush = |wr_id, placement, selectivity| {
        send_wr(
            wr_id,
            SendOp::Flush {
                remote_addr: tgt.addr() + 16,
                rkey: tgt.rkey(),
                len: 8,
                placement,
                selectivity,
            },
            vec![],
        )
    };
    qa.post_send(flush(2, PLT_GLOBAL_VISIBILITY, SEL_MEMORY_RANGE))
        .unwrap();
    qa.post_send(flush(3, PLT_GLOBAL_VISIBILITY, SEL_MEMORY_REGION))
        .unwrap();
    let w = a.wait(3);
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    assert_eq!(tgt.load_u64(16).unwrap(), u64::from_ne_bytes(v));
    qa.post_send(flush(4, PLT_PERSISTENCE, SEL_MEMORY_RANGE))
        .unwrap();
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::RemAccessErr));
}
