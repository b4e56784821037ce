//! Busy polling preferred (the default): a poller's turn that receives a
//! request leaves the answer (the ACK) for the poller's next post, so
//! that it leaves with it. These tests are about the other endings: the
//! poller destroys its QP, or stops polling, without posting again; the
//! peer's request must still be acknowledged, and within its QP's
//! retransmission timeout. Addresses 127.0.151.x.

use std::time::{Duration, Instant};

use rxe_integration::verbs_harness::*;
use rxe_verbs::*;

/// How many times a case is tried until the poller's own turn took the
/// request (the driver thread may take it instead, on a loaded machine).
const ATTEMPTS: usize = 30;

fn counter(n: &Node, name: &str) -> u64 {
    n.dev.counter(name)
}

fn send_wr(a: &Node) -> SendWr {
    SendWr {
        wr_id: 7,
        op: SendOp::Send,
        data: SendData::Sges(vec![a.mr.sge(0, 64)]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

/// Posts a receive on `qb` and a SEND to it on `qa`, then polls b's CQ
/// without pause until the receive completes. Whether b's turn left the
/// ACK for a post (`net_answers_deferred` rose).
fn send_and_poll_for_it(a: &Node, b: &Node, qa: &Qp, qb: &Qp) -> bool {
    qb.post_recv(RecvWr {
        wr_id: 9,
        sg_list: vec![b.mr.sge(0, 64)].into(),
    })
    .unwrap();
    let before = counter(b, "net_answers_deferred");
    qa.post_send(send_wr(a)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = b.cq.poll(4).unwrap();
        if let Some(wc) = got.first() {
            assert_eq!(wc.queue, WorkQueue::Recv, "{got:?}");
            assert_eq!(wc.status, WcStatus::Success, "{got:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the SEND never arrived");
    }
    counter(b, "net_answers_deferred") > before
}

/// a's SEND completes, successfully, and was never resent.
fn acknowledged_once(a: &Node, b: &Node) {
    let wcs = a.wait(1);
    assert_eq!(wcs[0].queue, WorkQueue::Send, "{wcs:?}");
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
    assert_eq!(counter(a, "completer_retry_err"), 0, "a resent its SEND");
    assert_eq!(counter(b, "duplicate_request"), 0, "b saw the SEND twice");
}

#[test]
fn an_answer_left_for_a_post_leaves_when_the_qp_is_destroyed() {
    let a = Node::new("127.0.151.1");
    let b = Node::new("127.0.151.2");
    for attempt in 0..ATTEMPTS {
        let (qa, qb) = pair(&a, &b, QpType::Rc);
        let deferred = send_and_poll_for_it(&a, &b, &qa, &qb);
        // The QP that owes the ACK goes at once: `Qp::destroy` sends it
        // first, as a NIC would have sent it already.
        qb.destroy().unwrap();
        acknowledged_once(&a, &b);
        qa.destroy().unwrap();
        if deferred {
            println!("deferred at attempt {attempt}");
            return;
        }
    }
    panic!("b's own turn never took the SEND in {ATTEMPTS} attempts");
}

#[test]
fn an_answer_left_for_a_post_leaves_when_the_poller_stops() {
    let a = Node::new("127.0.151.3");
    let b = Node::new("127.0.151.4");
    for attempt in 0..ATTEMPTS {
        let (qa, qb) = pair(&a, &b, QpType::Rc);
        let deferred = send_and_poll_for_it(&a, &b, &qa, &qb);
        // b neither posts nor polls again: its driver thread's look sends
        // the ACK once it has waited its bound (half a millisecond), far
        // inside a's retransmission timeout (67 ms at timeout 14).
        acknowledged_once(&a, &b);
        qa.destroy().unwrap();
        qb.destroy().unwrap();
        if deferred {
            println!("deferred at attempt {attempt}");
            return;
        }
    }
    panic!("b's own turn never took the SEND in {ATTEMPTS} attempts");
}
