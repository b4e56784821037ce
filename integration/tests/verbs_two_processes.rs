//! Two processes, each with its own device (127.0.26.1 and 127.0.26.2),
//! talking RC and UD with every operation. The test runs itself a second
//! time as the peer process (the ignored test `peer_process`), and the two
//! exchange QP numbers, keys and addresses as text lines over the child's
//! stdin and stdout, the way applications use a TCP side channel.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rxe_core::Gid;
use rxe_integration::verbs_harness::*;
use rxe_verbs::*;

fn wr(wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWr {
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

fn hex(g: &Gid) -> String {
    g.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Gid {
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    Gid::from(g)
}

#[test]
fn every_operation_between_two_processes() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "peer_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RXE_PEER_PROCESS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Whatever happens here, the peer does not outlive the test.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    // The peer announces: PEER <rc qpn> <ud qpn> <gid> <mr addr> <rkey>
    let peer = loop {
        line.clear();
        assert!(from.read_line(&mut line).unwrap() > 0, "peer died");
        // The harness may have printed "test peer_process ... " first.
        if let Some(at) = line.find("PEER ") {
            break line[at + 5..]
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>();
        }
    };
    let (rqpn, uqpn) = (
        u32::from_str_radix(&peer[0], 16).unwrap(),
        u32::from_str_radix(&peer[1], 16).unwrap(),
    );
    let pgid = unhex(&peer[2]);
    let (raddr, rkey) = (
        u64::from_str_radix(&peer[3], 16).unwrap(),
        u32::from_str_radix(&peer[4], 16).unwrap(),
    );
    let a = Node::new("127.0.26.1");
    let qa = a.qp(QpType::Rc);
    let ua = a.qp(QpType::Ud);
    ud_up(&ua, 0x1111_1111, 0);
    connect(&qa, rqpn, pgid, 10, 20);
    writeln!(to, "{:x} {:x} {}", qa.qp_num(), ua.qp_num(), hex(&a.gid())).unwrap();

    // SEND with immediate: the peer echoes it back by RDMA WRITE into our
    // region, so every direction is used. Then WRITE, READ, atomics.
    a.mr.write(0, b"from the other process").unwrap();
    qa.post_send(wr(
        1,
        SendOp::SendWithImm { imm: 77 },
        vec![a.mr.sge(0, 22)],
    ))
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    a.mr.write(100, &[3u8; 5000]).unwrap();
    qa.post_send(wr(
        2,
        SendOp::RdmaWrite {
            remote_addr: raddr + 8192,
            rkey,
        },
        vec![a.mr.sge(100, 5000)],
    ))
    .unwrap();
    qa.post_send(wr(
        3,
        SendOp::RdmaRead {
            remote_addr: raddr + 8192,
            rkey,
        },
        vec![a.mr.sge(20000, 5000)],
    ))
    .unwrap();
    qa.post_send(wr(
        4,
        SendOp::FetchAdd {
            remote_addr: raddr + 64,
            rkey,
            add: 10,
        },
        vec![a.mr.sge(30000, 8)],
    ))
    .unwrap();
    qa.post_send(wr(
        5,
        SendOp::CmpSwap {
            remote_addr: raddr + 64,
            rkey,
            compare: 11,
            swap: 99,
        },
        vec![a.mr.sge(30008, 8)],
    ))
    .unwrap();
    let wcs = a.wait(4);
    for w in &wcs {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
    }
    let mut back = vec![0u8; 5000];
    a.mr.read(20000, &mut back).unwrap();
    assert_eq!(back, vec![3u8; 5000], "READ returns what WRITE put there");
    assert_eq!(
        a.mr.load_u64(30000).unwrap(),
        1,
        "the peer's word started at 1"
    );
    assert_eq!(a.mr.load_u64(30008).unwrap(), 11);
    // UD SEND to the peer's UD QP.
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: pgid,
            hop_limit: 64,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    qa.post_recv(RecvWr {
        wr_id: 9,
        sg_list: [a.mr.sge(40000, 64)].into(),
    })
    .unwrap();
    a.mr.write(0, b"ud datagram").unwrap();
    ua.post_send(SendWr {
        ud: Some(ah.ud_dest(uqpn, 0x1111_1111)),
        ..wr(6, SendOp::Send, vec![a.mr.sge(0, 11)])
    })
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    // The peer checks everything, then answers with a SEND "done".
    let w = a.wait(1);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 4));
    let mut done = [0u8; 4];
    a.mr.read(40000, &mut done).unwrap();
    assert_eq!(&done, b"done");
    drop(to);
    let status = child.0.wait().unwrap();
    assert!(status.success(), "the peer process failed");
}

/// The peer side, run by `every_operation_between_two_processes` as a child
/// process.
#[test]
#[ignore = "the peer process of every_operation_between_two_processes"]
fn peer_process() {
    assert!(std::env::var_os("RXE_PEER_PROCESS").is_some());
    let b = Node::new("127.0.26.2");
    let qb = b.qp(QpType::Rc);
    let ub = b.qp(QpType::Ud);
    ud_up(&ub, 0x1111_1111, 0);
    b.mr.write(64, &1u64.to_ne_bytes()).unwrap();
    ub.post_recv(RecvWr {
        wr_id: 2,
        sg_list: [b.mr.sge(1000, 40 + 64)].into(),
    })
    .unwrap();
    // Straight to the process's stdout: the test harness captures
    // `println!`.
    let mut out = std::io::stdout();
    writeln!(
        out,
        "PEER {:x} {:x} {} {:x} {:x}",
        qb.qp_num(),
        ub.qp_num(),
        hex(&b.gid()),
        b.mr.addr(),
        b.mr.rkey()
    )
    .unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    let aqpn = u32::from_str_radix(f[0], 16).unwrap();
    let agid = unhex(f[2]);
    connect(&qb, aqpn, agid, 20, 10);
    // A SEND that arrives before this receive gets an RNR NAK and is
    // retried (rnr_retry 7).
    qb.post_recv(RecvWr {
        wr_id: 1,
        sg_list: [b.mr.sge(0, 64)].into(),
    })
    .unwrap();
    let w = b.wait(2);
    let rc = w.iter().find(|w| w.qp_num == qb.qp_num()).unwrap();
    assert_eq!(
        (rc.status, rc.imm_data, rc.byte_len),
        (WcStatus::Success, Some(77), 22)
    );
    let mut got = [0u8; 22];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from the other process");
    let ud = w.iter().find(|w| w.qp_num == ub.qp_num()).unwrap();
    assert_eq!((ud.status, ud.byte_len), (WcStatus::Success, 40 + 11));
    let mut got = [0u8; 11];
    b.mr.read(1040, &mut got).unwrap();
    assert_eq!(&got, b"ud datagram");
    // The atomics ran here exactly once: 1 + 10 = 11, swapped for 99.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while b.mr.load_u64(64).unwrap() != 99 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    b.mr.write(0, b"done").unwrap();
    qb.post_send(wr(3, SendOp::Send, vec![b.mr.sge(0, 4)]))
        .unwrap();
    assert_eq!(b.wait(1)[0].status, WcStatus::Success);
    // Wait for the parent to close stdin before going away, so that our
    // ACKs are not lost with the device.
    let _ = std::io::stdin().read_line(&mut line);
}
