//! Two devices over real UDP on loopback (each on its own 127.0.x.y
//! address, port 4791), driven by their driver threads: RC SEND, RDMA
//! WRITE, READ and atomics with the data checked, a UD SEND whose GRH
//! space holds the rebuilt IPv4 header, and a pcap tap whose frames all
//! dissect with good ICRCs. Devices use UDP GSO and GRO, as rxe-verbs'
//! do by default; the throughput test runs without them too.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant as StdInstant};

use rxe_core::transport::{
    AccessFlags, AddressVector, Endpoint, Key, PathMtu, Psn, QpAttr, QpCaps, QpInit, QpState,
    QpType, RecvWr, SendData, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
    WorkQueue,
};
use rxe_core::wire::dissect::dissect;
use rxe_core::Gid;
use rxe_net::netif::{interface_for_addr, mtu_to_ib};
use rxe_net::{Clock, NetCounter, NetPort, Offload, PcapTap};
use rxe_pcap::CaptureReader;
use rxe_verbs::driver::{Driver, DriverWaker, EndpointEngine};

struct Dev {
    ip: IpAddr,
    port: Arc<NetPort>,
    engine: Arc<Mutex<EndpointEngine>>,
    waker: DriverWaker,
    driver: Option<Driver>,
    /// The traffic class of the address vectors that reach this device.
    tclass: std::cell::Cell<u8>,
}

impl Dev {
    fn new(ip: IpAddr) -> Dev {
        Dev::on_port(ip, 4791, Offload::BOTH).expect("bind")
    }

    fn on_port(ip: IpAddr, udp_port: u16, offload: Offload) -> std::io::Result<Dev> {
        let port = Arc::new(
            NetPort::with_options(
                Clock::new(),
                udp_port,
                rxe_net::encap::OpenOptions::default(),
            )
            .with_offload(offload),
        );
        port.add_address(ip)?;
        let engine = Arc::new(Mutex::new(EndpointEngine::new(
            Endpoint::new(QpCaps::default()),
            vec![Gid::from(ip)],
        )));
        let driver = Driver::spawn(port.clone(), engine.clone()).expect("driver");
        Ok(Dev {
            ip,
            port,
            waker: driver.waker(),
            engine,
            driver: Some(driver),
            tclass: std::cell::Cell::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, EndpointEngine> {
        self.engine.lock().unwrap()
    }

    /// Runs `f` on the engine, then sends what it queued from this thread
    /// (as the verbs layer does after a post) and tells the driver the
    /// deadline.
    fn with<R>(&self, f: impl FnOnce(&mut EndpointEngine) -> R) -> R {
        let mut e = self.lock();
        let r = f(&mut e);
        self.waker.flush(&self.port, &mut *e);
        let d = e.endpoint.poll_timeout();
        drop(e);
        self.waker.notify_deadline(d);
        r
    }

    fn av(&self) -> AddressVector {
        AddressVector {
            dgid: Gid::from(self.ip),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: self.tclass.get(),
            flow_label: 0,
            sl: 0,
            src_port: None,
        }
    }

    fn reg(&self, va: u64, data: Vec<u8>) -> Key {
        self.lock()
            .memory
            .register_bytes(1, va, data, AccessFlags::all())
            .unwrap()
    }

    fn bytes(&self, key: Key) -> Vec<u8> {
        self.lock().memory.bytes(key).unwrap().to_vec()
    }

    /// Waits (bounded) for the completion of `wr_id` on `qpn`'s queue `q`.
    fn wait(&self, qpn: u32, q: WorkQueue, wr_id: u64) -> WorkCompletion {
        let until = StdInstant::now() + Duration::from_secs(20);
        loop {
            {
                let mut e = self.lock();
                if let Some(i) = e
                    .completions
                    .iter()
                    .position(|w| w.qp_num == qpn && w.queue == q && w.wr_id == wr_id)
                {
                    return e.completions.remove(i);
                }
            }
            assert!(
                StdInstant::now() < until,
                "no completion for wr {wr_id} on QP {qpn:#x}; counters {:?}",
                self.port.counters().snapshot()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(d) = self.driver.take() {
            d.stop();
        }
    }
}

fn bring_up(dev: &Dev, qpn: u32, peer: &Dev, dest_qpn: u32, sq: u32, rq: u32, mtu: PathMtu) {
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: Some(AccessFlags::all()),
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        av: Some(peer.av()),
        path_mtu: Some(mtu),
        dest_qpn: Some(dest_qpn),
        rq_psn: Some(Psn::new(rq)),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(sq)),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..Default::default()
    };
    dev.with(|e| {
        for a in [init, rtr, rts] {
            e.endpoint.modify_qp(qpn, &a, a.mask()).unwrap();
        }
    });
}

fn connect(a: &Dev, b: &Dev, mtu: PathMtu) -> (u32, u32) {
    let qa = a.with(|e| e.endpoint.create_qp(QpInit::new(QpType::Rc, 1)).unwrap());
    let qb = b.with(|e| e.endpoint.create_qp(QpInit::new(QpType::Rc, 1)).unwrap());
    bring_up(a, qa, b, qb, 0x100, 0x200, mtu);
    bring_up(b, qb, a, qa, 0x200, 0x100, mtu);
    (qa, qb)
}

fn create_ud(dev: &Dev, qkey: u32) -> u32 {
    dev.with(|e| {
        let q = e.endpoint.create_qp(QpInit::new(QpType::Ud, 1)).unwrap();
        let init = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(qkey),
            ..Default::default()
        };
        let rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        };
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(7)),
            ..Default::default()
        };
        for a in [init, rtr, rts] {
            e.endpoint.modify_qp(q, &a, a.mask()).unwrap();
        }
        q
    })
}

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

fn sge(addr: u64, length: u32, key: Key) -> Sge {
    Sge {
        addr,
        length,
        lkey: key.raw(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[test]
fn rc_and_ud_over_loopback_with_a_tap() {
    let ip_a = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));
    let ip_b = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 2));
    let a = Dev::new(ip_a);
    let b = Dev::new(ip_b);
    let cap = std::env::temp_dir().join(format!("rxe-net-loopback-{}.pcap", std::process::id()));
    a.port.set_tap(Some(PcapTap::create(&cap).unwrap()));

    let lo = interface_for_addr(ip_a).expect("lo");
    assert_eq!(lo.name, "lo");
    let mtu = mtu_to_ib(lo.mtu).min(PathMtu::Mtu1024); // several packets per message
    let (qa, qb) = connect(&a, &b, mtu);

    // SEND: 3000 bytes, three packets at MTU 1024.
    let src = pattern(3000, 1);
    let ka = a.reg(0x1000, src.clone());
    let kb = b.reg(0x9000, vec![0; 3000]);
    b.with(|e| {
        e.endpoint
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 1,
                    sg_list: [sge(0x9000, 3000, kb)].into(),
                },
            )
            .unwrap()
    });
    a.with(|e| {
        e.endpoint
            .post_send(qa, wr(11, SendOp::Send, vec![sge(0x1000, 3000, ka)]))
            .unwrap()
    });
    let wc = b.wait(qb, WorkQueue::Recv, 1);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.byte_len, 3000);
    assert_eq!(a.wait(qa, WorkQueue::Send, 11).status, WcStatus::Success);
    assert_eq!(b.bytes(kb), src);

    // RDMA WRITE: 5000 bytes into b's region at an offset.
    let data = pattern(5000, 7);
    let kw = a.reg(0x2_0000, data.clone());
    let kt = b.reg(0x5_0000, vec![0; 8192]);
    a.with(|e| {
        e.endpoint
            .post_send(
                qa,
                wr(
                    12,
                    SendOp::RdmaWrite {
                        remote_addr: 0x5_0100,
                        rkey: kt.raw(),
                    },
                    vec![sge(0x2_0000, 5000, kw)],
                ),
            )
            .unwrap()
    });
    assert_eq!(a.wait(qa, WorkQueue::Send, 12).status, WcStatus::Success);
    let t = b.bytes(kt);
    assert_eq!(&t[0x100..0x100 + 5000], &data[..]);
    assert!(t[..0x100].iter().all(|&x| x == 0));
    assert!(t[0x100 + 5000..].iter().all(|&x| x == 0));

    // RDMA READ: 4000 bytes back from b.
    let kr = a.reg(0x3_0000, vec![0; 4000]);
    a.with(|e| {
        e.endpoint
            .post_send(
                qa,
                wr(
                    13,
                    SendOp::RdmaRead {
                        remote_addr: 0x5_0100,
                        rkey: kt.raw(),
                    },
                    vec![sge(0x3_0000, 4000, kr)],
                ),
            )
            .unwrap()
    });
    let wc = a.wait(qa, WorkQueue::Send, 13);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.opcode, WcOpcode::RdmaRead);
    assert_eq!(a.bytes(kr), &data[..4000]);

    // Atomics: fetch-and-add then compare-and-swap on b's counter.
    let kc = b.reg(0x7_0000, 40u64.to_le_bytes().to_vec());
    let ko = a.reg(0x8_0000, vec![0; 16]);
    a.with(|e| {
        e.endpoint
            .post_send(
                qa,
                wr(
                    14,
                    SendOp::FetchAdd {
                        remote_addr: 0x7_0000,
                        rkey: kc.raw(),
                        add: 2,
                    },
                    vec![sge(0x8_0000, 8, ko)],
                ),
            )
            .unwrap()
    });
    assert_eq!(a.wait(qa, WorkQueue::Send, 14).status, WcStatus::Success);
    a.with(|e| {
        e.endpoint
            .post_send(
                qa,
                wr(
                    15,
                    SendOp::CmpSwap {
                        remote_addr: 0x7_0000,
                        rkey: kc.raw(),
                        compare: 42,
                        swap: 1000,
                    },
                    vec![sge(0x8_0008, 8, ko)],
                ),
            )
            .unwrap()
    });
    assert_eq!(a.wait(qa, WorkQueue::Send, 15).status, WcStatus::Success);
    let o = a.bytes(ko);
    assert_eq!(u64::from_le_bytes(o[..8].try_into().unwrap()), 40);
    assert_eq!(u64::from_le_bytes(o[8..].try_into().unwrap()), 42);
    assert_eq!(
        u64::from_le_bytes(b.bytes(kc)[..8].try_into().unwrap()),
        1000
    );

    // UD: the receive buffer starts with 20 zero bytes and the IPv4 header
    // as rebuilt, with the solved Identification (0 from our sockets).
    let qkey = 0x1111_1111;
    let ua = create_ud(&a, qkey);
    let ub = create_ud(&b, qkey);
    let msg = pattern(200, 9);
    let km = a.reg(0xa_0000, msg.clone());
    let kg = b.reg(0xb_0000, vec![0xee; 40 + 200]);
    b.with(|e| {
        e.endpoint
            .post_recv(
                ub,
                RecvWr {
                    wr_id: 2,
                    sg_list: [sge(0xb_0000, 240, kg)].into(),
                },
            )
            .unwrap()
    });
    a.with(|e| {
        let mut w = wr(16, SendOp::Send, vec![sge(0xa_0000, 200, km)]);
        w.ud = Some(UdDest {
            av: b.av(),
            remote_qpn: ub,
            remote_qkey: qkey,
        });
        e.endpoint.post_send(ua, w).unwrap()
    });
    let wc = b.wait(ub, WorkQueue::Recv, 2);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.byte_len, 240);
    assert_eq!(wc.src_qp, ua);
    assert!(wc.grh);
    let g = b.bytes(kg);
    assert_eq!(&g[..20], &[0; 20]);
    let h = &g[20..40];
    assert_eq!(h[0], 0x45);
    assert_eq!(u16::from_be_bytes([h[2], h[3]]), 20 + 8 + 12 + 8 + 200 + 4);
    assert_eq!(&h[4..6], &[0, 0], "the solved IPv4 ID");
    assert_eq!(h[6] & 0x40, 0x40, "DF");
    assert_eq!(h[8], 64, "TTL as received");
    assert_eq!(h[9], 17);
    assert_eq!(&h[12..16], &[127, 0, 1, 1]);
    assert_eq!(&h[16..20], &[127, 0, 1, 2]);
    assert!(ipv4_checksum_ok(h));
    assert_eq!(&g[40..], &msg[..]);
    a.wait(ua, WorkQueue::Send, 16);

    // The tap: every frame a sent or received by a, all RoCE, all good.
    let tap = a.port.set_tap(None).unwrap();
    let frames = tap.frames();
    tap.finish().unwrap();
    let mut n = 0;
    let (mut from_a, mut to_a) = (0, 0);
    for f in CaptureReader::open(&cap).unwrap() {
        let f = f.unwrap();
        let d = dissect(f.link_type, &f.data)
            .unwrap()
            .expect("a RoCE frame");
        assert!(d.is_good(), "frame {}: {:?}", f.number, d.problems());
        match d.frame.addresses() {
            Some((s, _)) if s == ip_a => from_a += 1,
            Some((_, t)) if t == ip_a => to_a += 1,
            other => panic!("frame {} between {other:?}", f.number),
        }
        n += 1;
    }
    assert_eq!(n, frames);
    assert!(from_a >= 9 && to_a >= 8, "{from_a} from a, {to_a} to a");
    // RXE_NET_KEEP_CAPTURE=1 keeps it (to look at it in tshark).
    if std::env::var_os("RXE_NET_KEEP_CAPTURE").is_none() {
        let _ = std::fs::remove_file(&cap);
    } else {
        eprintln!("capture kept: {}", cap.display());
    }

    for d in [&a, &b] {
        let c = d.port.counters();
        assert_eq!(c.drops(), 0, "{:?}", c.snapshot());
        assert!(c.get(NetCounter::SentPkts) > 0 && c.get(NetCounter::RcvdPkts) > 0);
    }
    // Every packet a sent arrived at b, and back (no loss on loopback).
    assert_eq!(
        a.port.counters().get(NetCounter::SentPkts),
        b.port.counters().get(NetCounter::RcvdPkts)
    );
}

/// Rough throughput over loopback with both driver threads: RDMA WRITEs of
/// 64 KiB at path MTU 4096 (16 packets each), bounded in count and time.
#[test]
fn write_throughput_over_loopback() {
    let a = Dev::new(IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1)));
    let b = Dev::new(IpAddr::V4(Ipv4Addr::new(127, 0, 2, 2)));
    write_throughput(&a, &b, "with GSO/GRO");
    // 64 KiB at MTU 4096 is 16 packets: runs of 15 and 1, so GSO messages
    // went out and GRO datagrams came in.
    assert!(a.port.counters().get(NetCounter::SentGsoMsgs) > 0);
    assert!(b.port.counters().get(NetCounter::RcvdGroDatagrams) > 0);
    for d in [&a, &b] {
        let c = d.port.counters();
        assert_eq!(c.drops(), 0, "{:?}", c.snapshot());
    }
}

#[test]
fn write_throughput_over_loopback_without_offload() {
    let a = Dev::on_port(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 173)),
        4791,
        Offload::NONE,
    )
    .unwrap();
    let b = Dev::on_port(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 174)),
        4791,
        Offload::NONE,
    )
    .unwrap();
    write_throughput(&a, &b, "one datagram per packet");
    assert_eq!(a.port.counters().get(NetCounter::SentGsoMsgs), 0);
    assert_eq!(b.port.counters().get(NetCounter::RcvdGroDatagrams), 0);
}

fn write_throughput(a: &Dev, b: &Dev, what: &str) {
    let (qa, _qb) = connect(a, b, PathMtu::Mtu4096);
    const LEN: usize = 64 << 10;
    let ks = a.reg(0x10_0000, pattern(LEN, 3));
    let kt = b.reg(0x20_0000, vec![0; LEN]);
    let total = 1500u64;
    let window = 16u64;
    let started = StdInstant::now();
    let mut posted = 0u64;
    let mut done = 0u64;
    while done < total && started.elapsed() < Duration::from_secs(30) {
        while posted < total && posted - done < window {
            a.with(|e| {
                e.endpoint
                    .post_send(
                        qa,
                        wr(
                            posted,
                            SendOp::RdmaWrite {
                                remote_addr: 0x20_0000,
                                rkey: kt.raw(),
                            },
                            vec![sge(0x10_0000, LEN as u32, ks)],
                        ),
                    )
                    .unwrap()
            });
            posted += 1;
        }
        let wc = a.wait(qa, WorkQueue::Send, done);
        assert_eq!(wc.status, WcStatus::Success);
        done += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(done, total);
    let pkts = a.port.counters().get(NetCounter::SentPkts);
    eprintln!(
        "loopback RDMA WRITE, {what}: {total} x {LEN} B in {secs:.3} s: {:.0} MB/s, {:.0} packets/s sent by the requester",
        (total as f64 * LEN as f64) / secs / 1e6,
        pkts as f64 / secs
    );
    assert_eq!(b.bytes(kt), pattern(LEN, 3));
}

/// IPv6: one device on ::1 with two RC QPs connected to each other (two
/// devices cannot share ::1's port), on an unusual UDP port so as not to
/// meet other tests. The ICRC over IPv6 is fully checked on receive.
#[test]
fn rc_over_ipv6_loopback_to_itself() {
    let ip = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    let Ok(d) = Dev::on_port(ip, 47910, Offload::BOTH) else {
        eprintln!("no IPv6 loopback: skipped");
        return;
    };
    let cap = std::env::temp_dir().join(format!("rxe-net-ipv6-{}.pcap", std::process::id()));
    d.port.set_tap(Some(PcapTap::create(&cap).unwrap()));
    let (qa, qb) = connect(&d, &d, PathMtu::Mtu1024);
    let src = pattern(2500, 5);
    let ka = d.reg(0x1000, src.clone());
    let kb = d.reg(0x9000, vec![0; 2500]);
    d.with(|e| {
        e.endpoint
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 1,
                    sg_list: [sge(0x9000, 2500, kb)].into(),
                },
            )
            .unwrap();
        e.endpoint
            .post_send(qa, wr(2, SendOp::Send, vec![sge(0x1000, 2500, ka)]))
            .unwrap();
    });
    assert_eq!(d.wait(qb, WorkQueue::Recv, 1).status, WcStatus::Success);
    assert_eq!(d.wait(qa, WorkQueue::Send, 2).status, WcStatus::Success);
    assert_eq!(d.bytes(kb), src);
    let kr = d.reg(0x2_0000, vec![0; 2500]);
    d.with(|e| {
        e.endpoint
            .post_send(
                qa,
                wr(
                    3,
                    SendOp::RdmaRead {
                        remote_addr: 0x9000,
                        rkey: kb.raw(),
                    },
                    vec![sge(0x2_0000, 2500, kr)],
                ),
            )
            .unwrap()
    });
    assert_eq!(d.wait(qa, WorkQueue::Send, 3).status, WcStatus::Success);
    assert_eq!(d.bytes(kr), src);
    let tap = d.port.set_tap(None).unwrap();
    tap.finish().unwrap();
    let mut n = 0;
    for f in CaptureReader::open(&cap).unwrap() {
        let f = f.unwrap();
        // Not port 4791, so the frame decoder would not call it RoCE:
        // take it apart by hand.
        let b = &f.data;
        assert_eq!(&b[12..14], &[0x86, 0xdd]);
        assert_eq!(b[14 + 6], 17);
        assert_eq!(&b[14 + 8..14 + 24], Gid::from(ip).as_bytes());
        let (ip6, udp, t) = (&b[14..54], &b[54..62], &b[62..]);
        let scope = rxe_core::wire::IcrcScope::RoceV2 {
            ip_header: ip6,
            udp_header: udp,
        };
        rxe_core::wire::icrc::verify(&scope, t).unwrap();
        rxe_core::wire::TransportRepr::parse(t).unwrap();
        assert_ne!(&udp[6..8], &[0, 0], "the UDP checksum the kernel computes");
        // The traffic class (bits 4..12): ECT(0), sent and received
        // (IPV6_TCLASS on send, IPV6_RECVTCLASS on receive).
        let tclass = (u16::from_be_bytes([ip6[0], ip6[1]]) >> 4) as u8;
        assert_eq!(tclass, 0b10, "ECN-capable");
        n += 1;
    }
    // Each packet is recorded twice: sent, then received.
    assert!(n >= 2 * 8, "{n} frames");
    let _ = std::fs::remove_file(&cap);
    let c = d.port.counters();
    assert_eq!(c.drops(), 0, "{:?}", c.snapshot());
    assert_eq!(c.get(NetCounter::SentPkts), c.get(NetCounter::RcvdPkts));
}

/// ECN over real sockets: a sender whose address vector asks for the
/// traffic class CE (its own ECN off, so the class goes out as given)
/// stands in for a switch that marked its packets. The receiver counts
/// the marks, answers with CNPs (non-ECT, DSCP 48) and sends its own
/// packets ECT(0); the sender's QP gets rate limited; the data arrives.
#[test]
fn ce_marks_are_answered_by_cnps_over_loopback() {
    use rxe_core::transport::{CongestionConfig, Counter};
    let ip_a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 190));
    let ip_b = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 191));
    let a = Dev::new(ip_a);
    let b = Dev::new(ip_b);
    let marking = CongestionConfig {
        ecn: false,
        ..CongestionConfig::default()
    };
    a.port.set_congestion(&marking);
    a.with(|e| e.endpoint.set_congestion(marking));
    let cap = std::env::temp_dir().join(format!("rxe-net-ce-{}.pcap", std::process::id()));
    b.port.set_tap(Some(PcapTap::create(&cap).unwrap()));
    // a's QP reaches b with traffic class CE.
    b.tclass.set(0x03);
    let (qa, qb) = connect(&a, &b, PathMtu::Mtu1024);
    let len = 256 * 1024;
    let src = pattern(len, 9);
    let ks = a.reg(0x10_0000, src.clone());
    let kt = b.reg(0x20_0000, vec![0; len]);
    let write = |id| {
        wr(
            id,
            SendOp::RdmaWrite {
                remote_addr: 0x20_0000,
                rkey: kt.raw(),
            },
            vec![sge(0x10_0000, len as u32, ks)],
        )
    };
    for id in 0..4 {
        a.with(|e| e.endpoint.post_send(qa, write(id)).unwrap());
        assert_eq!(a.wait(qa, WorkQueue::Send, id).status, WcStatus::Success);
    }
    assert_eq!(b.bytes(kt), src);
    let tap = b.port.set_tap(None).unwrap();
    tap.finish().unwrap();
    let (nb, na) = (b.port.counters(), a.port.counters());
    assert!(nb.get(NetCounter::RcvdCe) > 0, "{:?}", nb.snapshot());
    assert!(nb.get(NetCounter::SentCnps) > 0);
    assert!(nb.get(NetCounter::SentEct) > 0, "b's ACKs are ECT(0)");
    assert_eq!(na.get(NetCounter::SentEct), 0);
    let (ce, cnps) = b.with(|e| {
        let c = e.endpoint.counters();
        (
            c.get(Counter::NpEcnMarkedPackets),
            c.get(Counter::NpCnpSent),
        )
    });
    assert_eq!(ce, nb.get(NetCounter::RcvdCe));
    assert_eq!(cnps, nb.get(NetCounter::SentCnps));
    let handled = a.with(|e| e.endpoint.counters().get(Counter::RpCnpHandled));
    assert!(handled > 0);
    // In b's capture: what came from a is CE, b's CNPs DSCP 48 non-ECT,
    // b's ACKs ECT(0); every frame good.
    let mut seen = [0usize; 3];
    for f in CaptureReader::open(&cap).unwrap() {
        let f = f.unwrap();
        let d = dissect(f.link_type, &f.data)
            .unwrap()
            .expect("a RoCE frame");
        assert!(d.is_good(), "frame {}: {:?}", f.number, d.problems());
        let tos = d.frame.ip.expect("IPv4")[1];
        let opcode = d.frame.transport[0];
        let from_b = matches!(d.frame.addresses(), Some((s, _)) if s == ip_b);
        match (from_b, opcode) {
            (false, _) => {
                assert_eq!(tos, 0x03);
                seen[0] += 1;
            }
            (true, 0x81) => {
                assert_eq!(tos, 48 << 2);
                seen[1] += 1;
            }
            (true, _) => {
                assert_eq!(tos, 0x02);
                seen[2] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    if std::env::var_os("RXE_NET_KEEP_CAPTURE").is_none() {
        let _ = std::fs::remove_file(&cap);
    } else {
        eprintln!("capture kept: {}", cap.display());
    }
    let _ = qb;
}
