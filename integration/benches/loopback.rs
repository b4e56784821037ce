//! rxe against raw UDP on the same machine, in the same run: streaming
//! throughput (RC RDMA WRITE of 64 KiB messages at MTU 4096 against a raw
//! UDP sender of 4 KiB datagrams) and round-trip latency (RC SEND
//! ping-pong against a raw UDP ping-pong), over loopback; and the cost of
//! an empty busy poll (`poll_one` on an idle CQ, which runs a turn of the
//! engine) against a non-blocking `recv` on an empty UDP socket.
//!
//! `cargo bench -p rxe-integration --bench loopback` (add `-- --secs N` to
//! run each phase longer). The machine is noisy: compare the ratios, and
//! run it twice.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rxe_core::transport::Psn;
use rxe_core::Gid;
use rxe_integration::bench_args::secs;
use rxe_integration::verbs_harness::*;
use rxe_verbs::*;

/// Raw UDP: one thread sends 4 KiB datagrams as fast as it can, the other
/// receives; the rate is what arrived.
fn raw_udp_stream(d: Duration) -> f64 {
    let rx = UdpSocket::bind("127.0.40.2:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let to = rx.local_addr().unwrap();
    let tx = UdpSocket::bind("127.0.40.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let (s, g) = (stop.clone(), got.clone());
    let r = std::thread::spawn(move || {
        let mut buf = vec![0u8; 9000];
        while !s.load(Ordering::Relaxed) {
            if let Ok(n) = rx.recv(&mut buf) {
                g.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    });
    let payload = vec![7u8; 4096];
    let start = Instant::now();
    while start.elapsed() < d {
        for _ in 0..64 {
            let _ = tx.send_to(&payload, to);
        }
    }
    let el = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    r.join().unwrap();
    got.load(Ordering::Relaxed) as f64 / el
}

fn raw_udp_pingpong(d: Duration) -> (f64, u64) {
    let a = UdpSocket::bind("127.0.41.1:0").unwrap();
    let b = UdpSocket::bind("127.0.41.2:0").unwrap();
    let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    b.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !s.load(Ordering::Relaxed) {
            if let Ok(n) = b.recv(&mut buf) {
                let _ = b.send_to(&buf[..n], aa);
            }
        }
    });
    let mut buf = [0u8; 64];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        a.send_to(&buf.clone(), ba).unwrap();
        a.recv(&mut buf).unwrap();
        n += 1;
    }
    let el = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    (el / n as f64 * 1e6, n)
}

/// RC RDMA WRITE of 64 KiB messages, 16 outstanding, MTU 4096.
fn rxe_write_stream(a: &Node, b: &Node, d: Duration) -> f64 {
    let qa = a.qp(QpType::Rc);
    let qb = b.qp(QpType::Rc);
    up_4096(&qa, qb.qp_num(), b.gid());
    up_4096(&qb, qa.qp_num(), a.gid());
    let size = 65536u32;
    let wr = |i: u64| SendWr {
        wr_id: i,
        op: SendOp::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        data: SendData::Sges(vec![a.mr.sge(0, size)]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    };
    let mut outstanding = 0;
    let mut done = 0u64;
    let mut wcs = Vec::with_capacity(32);
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < d {
        while outstanding < 16 {
            qa.post_send(wr(i)).unwrap();
            i += 1;
            outstanding += 1;
        }
        wcs.clear();
        a.cq.poll_into(32, &mut wcs).unwrap();
        for wc in &wcs {
            assert_eq!(wc.status, WcStatus::Success);
        }
        outstanding -= wcs.len();
        done += wcs.len() as u64;
    }
    let el = start.elapsed().as_secs_f64();
    while outstanding > 0 {
        outstanding -= wait_cq(&a.cq, 1).len();
    }
    done as f64 * size as f64 / el
}

fn up_4096(qp: &Qp, dest: u32, dgid: Gid) {
    let ready = ReadyParams::Rc {
        sq_psn: Psn::new(0),
        remote: RemoteQp {
            qpn: dest,
            psn: Psn::new(0),
            av: AddressVector {
                dgid,
                hop_limit: 64,
                ..Default::default()
            },
            path_mtu: PathMtu::Mtu4096,
        },
        rc: RcParams {
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        },
    };
    let init = InitParams::connected(all_access()).with_port(1);
    connect::connect(qp, &init, &ready).unwrap();
}

/// RC SEND ping-pong of 64 bytes, both sides busy-polling.
fn rxe_pingpong(a: &Node, b: &Node, d: Duration) -> (f64, u64) {
    let (qa, qb) = pair(a, b, QpType::Rc);
    let send = |qp: &Qp, n: &Node, i: u64| {
        qp.post_send(SendWr {
            wr_id: i,
            op: SendOp::Send,
            data: SendData::Sges(vec![n.mr.sge(0, 64)]),
            signaled: false,
            fence: false,
            solicited: false,
            ud: None,
        })
        .unwrap()
    };
    let recv = |qp: &Qp, n: &Node, i: u64| {
        qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: [n.mr.sge(4096, 64)].into(),
        })
        .unwrap()
    };
    for i in 0..64 {
        recv(&qa, a, i);
        recv(&qb, b, i);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (qb2, bcq, bmr) = (qb.clone(), b.cq.clone(), b.mr.clone());
    let echo = std::thread::spawn(move || {
        let mut i = 0;
        while !s.load(Ordering::Relaxed) {
            if let Some(wc) = bcq.poll_one().unwrap() {
                if wc.queue == WorkQueue::Recv {
                    qb2.post_recv(RecvWr {
                        wr_id: i,
                        sg_list: [bmr.sge(4096, 64)].into(),
                    })
                    .unwrap();
                    qb2.post_send(SendWr {
                        wr_id: i,
                        op: SendOp::Send,
                        data: SendData::Sges(vec![bmr.sge(0, 64)]),
                        signaled: false,
                        fence: false,
                        solicited: false,
                        ud: None,
                    })
                    .unwrap();
                    i += 1;
                }
            }
        }
    });
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        send(&qa, a, n);
        loop {
            if let Some(wc) = a.cq.poll_one().unwrap() {
                if wc.queue == WorkQueue::Recv {
                    break;
                }
            }
        }
        recv(&qa, a, n);
        n += 1;
    }
    let el = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    (el / n as f64 * 1e6, n)
}

/// Raw UDP: the cost of one non-blocking `recv` on an empty socket.
fn raw_empty_recv(d: Duration) -> f64 {
    let s = UdpSocket::bind("127.0.42.5:0").unwrap();
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            assert!(s.recv(&mut buf).is_err());
        }
        n += 1000;
    }
    start.elapsed().as_secs_f64() / n as f64 * 1e9
}

/// rxe: the cost of one `poll_one` on an empty CQ, busy polling preferred
/// (each empty poll is a turn of the engine: the sockets read, the timers
/// looked at, nothing to send), with one RC QP in RTS and idle.
fn rxe_empty_poll(a: &Node, b: &Node, d: Duration) -> f64 {
    let _qps = pair(a, b, QpType::Rc);
    a.dev.set_prefer_busy_poll(true);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            assert!(a.cq.poll_one().unwrap().is_none());
        }
        n += 1000;
    }
    let el = start.elapsed().as_secs_f64();
    a.dev.set_prefer_busy_poll(false);
    el / n as f64 * 1e9
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs benches only with
    // `--benches`, and then this is a quick smoke run.
    let d = Duration::from_secs_f64(secs(2.0));
    let a = Node::new("127.0.42.1");
    let b = Node::new("127.0.42.2");
    let udp = raw_udp_stream(d);
    let rxe = rxe_write_stream(&a, &b, d);
    let (udp_rtt, udp_n) = raw_udp_pingpong(d);
    let (rxe_rtt, rxe_n) = rxe_pingpong(&a, &b, d);
    let raw_empty = raw_empty_recv(d);
    let rxe_empty = rxe_empty_poll(&a, &b, d);
    println!(
        "loopback, {:.1} s per phase, {} cores",
        d.as_secs_f64(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!(
        "throughput  raw UDP 4 KiB datagrams   {:8.1} MB/s",
        udp / 1e6
    );
    println!(
        "throughput  rxe RC WRITE 64 KiB, MTU 4096 {:6.1} MB/s   ratio rxe/UDP {:.2}",
        rxe / 1e6,
        rxe / udp
    );
    println!("latency     raw UDP 64 B ping-pong     {udp_rtt:8.1} us RTT ({udp_n} round trips)");
    println!(
        "latency     rxe RC SEND 64 B ping-pong  {rxe_rtt:8.1} us RTT ({rxe_n} round trips)   ratio rxe/UDP {:.2}",
        rxe_rtt / udp_rtt
    );
    println!("empty poll  raw UDP recv, non-blocking {raw_empty:8.0} ns");
    println!(
        "empty poll  rxe poll_one, busy polling  {rxe_empty:8.0} ns   ratio rxe/UDP {:.2}",
        rxe_empty / raw_empty
    );
    println!(
        "rxe counters (sender): sent_pkts {}, retransmits {}",
        a.dev.counter("sent_pkts"),
        a.dev.counter("completer_retry_err")
    );
}
