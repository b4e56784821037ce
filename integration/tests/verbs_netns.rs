//! Port and GID events when the host's addresses change, inside a network
//! namespace of the test's own (veth pair, 10.98.0.0/24 and fd98::/64), so
//! that the host's network is never touched.
//!
//! The outer test creates the namespace and runs this same test binary
//! inside it (`ip netns exec`) with the inner test selected. It needs root
//! and iproute2; without them it fails loudly, unless `RXE_SKIP_NETNS=1`.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rxe_verbs::*;

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "`{cmd}` failed");
}

fn wait_for(events: &Arc<Mutex<Vec<AsyncEvent>>>, want: AsyncEvent) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if events.lock().unwrap().contains(&want) {
            events.lock().unwrap().clear();
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {want:?}; got {:?}",
            events.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn port_and_gid_events_follow_the_hosts_addresses() {
    rxe_integration::netns::run_inner_test("rxe-it", "inner_port_events");
}

/// Runs inside the namespace only (the outer test starts it).
#[test]
#[ignore = "run by port_and_gid_events_follow_the_hosts_addresses inside a namespace"]
fn inner_port_events() {
    rxe_integration::netns::assert_inside();
    sh("ip link set lo up");
    sh("ip link add v0 type veth peer name v1");
    sh("ip link set v1 up && ip link set v0 up");
    sh("ip addr add 10.98.0.1/24 dev v0");

    // A device on one address: the address goes, the port goes down.
    let dev = Device::add(DeviceConfig::on_address("10.98.0.1".parse().unwrap())).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    dev.register_event_handler(move |ev| e.lock().unwrap().push(*ev));
    assert_eq!(dev.query_port(1).unwrap().state, PortState::Active);
    assert_eq!(dev.query_port(1).unwrap().netdev, "v0");
    sh("ip addr del 10.98.0.1/24 dev v0");
    dev.refresh();
    wait_for(&events, AsyncEvent::PortErr { port: 1 });
    assert_eq!(dev.query_port(1).unwrap().state, PortState::Down);
    assert!(dev.gid_table(1).unwrap().is_empty());
    sh("ip addr add 10.98.0.1/24 dev v0");
    dev.refresh();
    wait_for(&events, AsyncEvent::PortActive { port: 1 });
    assert_eq!(dev.gid_table(1).unwrap().len(), 1);
    // Interface down: port down too.
    sh("ip link set v0 down");
    dev.refresh();
    wait_for(&events, AsyncEvent::PortErr { port: 1 });
    sh("ip link set v0 up");
    dev.refresh();
    wait_for(&events, AsyncEvent::PortActive { port: 1 });
    dev.remove().unwrap();

    // A device on the interface: every address is a GID, kept current.
    sh("ip addr add 10.98.0.7/24 dev v0");
    let dev = Device::add(DeviceConfig::on_interface("v0")).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    dev.register_event_handler(move |ev| e.lock().unwrap().push(*ev));
    let ips = |d: &Device| -> Vec<std::net::IpAddr> {
        let mut v: Vec<_> = d
            .gid_table(1)
            .unwrap()
            .iter()
            .map(|g| g.gid.to_ip())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        ips(&dev),
        vec![
            "10.98.0.1".parse::<std::net::IpAddr>().unwrap(),
            "10.98.0.7".parse().unwrap()
        ]
    );
    sh("ip addr add 10.98.0.9/24 dev v0");
    dev.refresh();
    wait_for(&events, AsyncEvent::GidChange { port: 1 });
    assert_eq!(ips(&dev).len(), 3);
    sh("ip addr del 10.98.0.7/24 dev v0");
    dev.refresh();
    wait_for(&events, AsyncEvent::GidChange { port: 1 });
    assert_eq!(ips(&dev).len(), 2);
    // The MAC of the interface makes the node GUID (EUI-64).
    let mac = std::fs::read_to_string("/sys/class/net/v0/address").unwrap();
    let m: Vec<u8> = mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let guid = dev.query_device().unwrap().node_guid.to_be_bytes();
    assert_eq!(
        guid,
        [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]],
        "EUI-64 from the MAC"
    );
    dev.remove().unwrap();

    // RoCEv2 over IPv6 between two devices: RC SEND and READ, and a UD
    // SEND whose GRH space holds the IPv6 header.
    sh("ip addr add fd98::1/64 dev v0 nodad && ip addr add fd98::2/64 dev v0 nodad");
    ipv6_traffic();
}

fn ipv6_traffic() {
    use rxe_integration::verbs_harness::*;
    let a = Node::new("fd98::1");
    let b = Node::new("fd98::2");
    assert_eq!(
        (a.gid()).to_ip(),
        "fd98::1".parse::<std::net::IpAddr>().unwrap()
    );
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    a.mr.write(0, &[0x5a; 3000]).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sg_list: [b.mr.sge(0, 4096)].into(),
    })
    .unwrap();
    let wr = |wr_id, op, sge| SendWr {
        wr_id,
        op,
        data: SendData::Sges(vec![sge]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    };
    qa.post_send(wr(2, SendOp::Send, a.mr.sge(0, 3000)))
        .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let wb = b.wait(1);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 3000));
    b.mr.write(8000, &[0xa5; 2000]).unwrap();
    qa.post_send(wr(
        3,
        SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 8000,
            rkey: b.mr.rkey(),
        },
        a.mr.sge(10000, 2000),
    ))
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let mut got = vec![0u8; 2000];
    a.mr.read(10000, &mut got).unwrap();
    assert_eq!(got, vec![0xa5; 2000]);

    let ua = a.qp(QpType::Ud);
    let ub = b.qp(QpType::Ud);
    ud_up(&ua, 7, 0);
    ud_up(&ub, 7, 0);
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: b.gid(),
            hop_limit: 9,
            traffic_class: 0x20,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    ub.post_recv(RecvWr {
        wr_id: 4,
        sg_list: [b.mr.sge(20000, 1064)].into(),
    })
    .unwrap();
    ua.post_send(SendWr {
        ud: Some(ah.ud_dest(ub.qp_num(), 7)),
        ..wr(5, SendOp::Send, a.mr.sge(0, 1024))
    })
    .unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let wb = b.wait(1);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 1064));
    let mut grh = [0u8; 40];
    b.mr.read(20000, &mut grh).unwrap();
    assert_eq!(grh[0] >> 4, 6, "an IPv6 header");
    assert_eq!(grh[7], 9, "the hop limit sent");
    assert_eq!(&grh[8..24], a.gid().as_bytes(), "source");
    assert_eq!(&grh[24..40], b.gid().as_bytes(), "destination");
    let back = b.pd.create_ah_from_wc(1, &wb[0], &grh).unwrap();
    assert_eq!(back.address_vector().dgid, a.gid());
    assert_eq!(
        a.dev.counter("net_rcvd_bad_icrc") + b.dev.counter("net_rcvd_bad_icrc"),
        0
    );

    // A third host on the link forges a SEND to b's RC QP at the PSN b
    // expects next (0x100 + 3 SEND packets + 2 READ response PSNs), from
    // its own address: dropped and counted (the connected path, IBTA
    // 9.6.1.5), and the real peer's next SEND lands.
    sh("ip addr add fd98::3/64 dev v0 nodad");
    let spoofer = bind_when_ready("[fd98::3]:4791");
    let victim: std::net::SocketAddr = "[fd98::2]:4791".parse().unwrap();
    let forged = rxe_integration::forge::request(
        spoofer.local_addr().unwrap(),
        victim,
        rxe_core::wire::Opcode::RC_SEND_ONLY,
        qb.qp_num(),
        0x105,
        Default::default(),
        &[0xee; 64],
    );
    qb.post_recv(RecvWr {
        wr_id: 6,
        sg_list: [b.mr.sge(30000, 64)].into(),
    })
    .unwrap();
    spoofer.send_to(&forged, victim).unwrap();
    assert_quiet(&b.cq, Duration::from_millis(300));
    assert_eq!(b.dev.counter("drop_wrong_address"), 1);
    assert_eq!(b.dev.counter("net_rcvd_bad_icrc"), 0, "the ICRC was good");
    a.mr.write(0, &[0x5a; 64]).unwrap();
    qa.post_send(wr(7, SendOp::Send, a.mr.sge(0, 64))).unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let wb = b.wait(1);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 64));
    let mut got = [0u8; 64];
    b.mr.read(30000, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64], "the real peer's bytes");
}

/// Binds a UDP socket once its address has left duplicate address
/// detection (`nodad` makes that quick, not instant).
fn bind_when_ready(addr: &str) -> std::net::UdpSocket {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::net::UdpSocket::bind(addr) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("bind {addr}: {e}"),
        }
    }
}
