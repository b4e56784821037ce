//! The connected path over real sockets: a third host that knows an RC
//! QP's number, its next PSN and the P_Key, and sends well-formed packets
//! with a good ICRC from its own address, is dropped and counted
//! (`drop_wrong_address`); the QP's real peer is not disturbed (IBTA
//! 9.6.1.5; kernel rxe's `check_addr()`). IPv4 here, on 127.0.130.0/24;
//! the IPv6 case runs in the namespace test (verbs_netns.rs).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use rxe_core::wire::{ExtReprs, Opcode, RethRepr};
use rxe_integration::forge;
use rxe_integration::verbs_harness::*;
use rxe_verbs::{QpType, RecvWr, SendData, SendOp, SendWr, WcStatus};

#[test]
fn a_spoofed_source_is_dropped_and_counted() {
    let a = Node::new("127.0.130.1");
    let b = Node::new("127.0.130.2");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let spoofer = UdpSocket::bind("127.0.130.3:4791").expect("spoofer socket");
    let from = spoofer.local_addr().unwrap();
    let victim: SocketAddr = "127.0.130.2:4791".parse().unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sg_list: [b.mr.sge(0, 4096)].into(),
    })
    .unwrap();

    // A SEND and an RDMA WRITE at the PSN b expects next (0x100): both
    // would be accepted if they came from a.
    let send = forge::request(
        from,
        victim,
        Opcode::RC_SEND_ONLY,
        qb.qp_num(),
        0x100,
        ExtReprs::default(),
        &[0xee; 64],
    );
    let reth = ExtReprs {
        reth: Some(RethRepr {
            va: b.mr.addr() + 8192,
            rkey: b.mr.rkey(),
            dma_len: 64,
        }),
        ..Default::default()
    };
    let write = forge::request(
        from,
        victim,
        Opcode::RC_RDMA_WRITE_ONLY,
        qb.qp_num(),
        0x100,
        reth,
        &[0xee; 64],
    );
    spoofer.send_to(&send, victim).unwrap();
    spoofer.send_to(&write, victim).unwrap();
    assert_quiet(&b.cq, Duration::from_millis(300));
    assert_eq!(
        b.dev.counter("drop_wrong_address"),
        2,
        "both forged packets dropped here"
    );
    assert_eq!(b.dev.counter("net_rcvd_bad_icrc"), 0, "their ICRC was good");
    assert_eq!(
        b.mr.to_vec().unwrap(),
        vec![0; 65536],
        "b's memory untouched"
    );
    spoofer
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut answer = [0u8; 64];
    assert!(
        spoofer.recv_from(&mut answer).is_err(),
        "no ACK or NAK to the spoofer"
    );

    // The real peer's SEND uses PSN 0x100 as if nothing had happened.
    a.mr.write(0, &[0x5a; 64]).unwrap();
    qa.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send,
        data: SendData::Sges(vec![a.mr.sge(0, 64)]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    })
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let wb = b.wait(1);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 64));
    let mut got = [0u8; 64];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64], "the real peer's bytes");
    assert_eq!(b.dev.counter("drop_wrong_address"), 2);
}
