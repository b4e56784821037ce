//! The IPv4 Identification of UDP GSO segments, read off a real wire: a
//! port with GSO sends runs of packets through a veth whose segmentation
//! offload is off (`ethtool -K`), so that the kernel cuts each message
//! into datagrams in software before the wire, and dumpcap on the other
//! end records them. Every segment must carry the ID the port sealed its
//! ICRC for (0, 1, 2 ... within its run; IBTA Annex A17.3.3 leaves the ID
//! unmasked), verify against the IP and UDP header it really carries, and
//! open through the receive path's ID solve.
//!
//! The outer test creates a network namespace (`rxe-gso-<pid>`) and runs
//! this test binary inside it with the inner test selected. It needs root,
//! iproute2, ethtool and dumpcap (scripts/setup.sh installs them); without
//! them it fails loudly, unless `RXE_SKIP_NETNS=1`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant as StdInstant};

use rxe_core::transport::{AddressVector, Transmit, ECN_ECT0};
use rxe_core::wire::icrc;
use rxe_core::wire::{BthRepr, ExtReprs, IcrcScope, Opcode, TransportRepr};
use rxe_core::Gid;
use rxe_net::encap::{self, OpenOptions, RecvInfo};
use rxe_net::{Clock, NetCounter, NetPort, Offload, Outgoing};
use rxe_pcap::CaptureReader;

const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 2);

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "`{cmd}` failed");
}

/// Hands the port a fixed list of packets (BTH .. ICRC) to PEER, from
/// LOCAL, as an engine's `poll_transmit` would, each with its TOS.
fn script(packets: &[(Vec<u8>, u8)]) -> impl FnMut(&mut [u8]) -> Option<Outgoing> + '_ {
    let mut next = packets.iter();
    move |buf| {
        let (p, tos) = next.next()?;
        buf[..p.len()].copy_from_slice(p);
        Some(Outgoing {
            transmit: Transmit {
                len: p.len(),
                dest: AddressVector {
                    dgid: Gid::from(IpAddr::V4(PEER)),
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: *tos,
                    flow_label: 0,
                    sl: 0,
                    src_port: None,
                },
                src_qpn: 0x11,
            },
            source: Some(Gid::from(IpAddr::V4(LOCAL))),
        })
    }
}

/// A WRITE-middle-like packet of `len` bytes (BTH .. ICRC), numbered by
/// its PSN and payload, ICRC left 0.
fn packet(psn: u32, len: usize) -> Vec<u8> {
    let bth = BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x22,
        ack_req: false,
        psn,
    };
    let payload: Vec<u8> = (0..len - 16).map(|i| (i as u32 ^ psn) as u8).collect();
    let t = TransportRepr::new(bth, ExtReprs::default(), payload.len());
    let mut buf = vec![0; t.buffer_len().unwrap()];
    t.emit(&mut buf, &payload).unwrap();
    assert_eq!(buf.len(), len);
    buf
}

#[test]
fn gso_segments_carry_the_ids_their_icrcs_were_sealed_for() {
    rxe_integration::netns::run_inner_test("rxe-gso", "inner_gso_ids");
}

/// Runs inside the namespace only (the outer test starts it).
#[test]
#[ignore = "run by gso_segments_carry_the_ids_their_icrcs_were_sealed_for inside a namespace"]
fn inner_gso_ids() {
    rxe_integration::netns::assert_inside();
    for tool in ["ethtool", "dumpcap"] {
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {tool}"))
                .status()
                .is_ok_and(|s| s.success()),
            "{tool} is not installed (scripts/setup.sh installs it)"
        );
    }
    sh("ip link set lo up");
    sh("ip link add g0 type veth peer name g1");
    // Segmentation in software on g0's transmit, before the wire.
    sh("ethtool -K g0 tx-udp-segmentation off gso off tso off >/dev/null");
    sh("ip link set g0 up && ip link set g1 up");
    sh(&format!("ip addr add {LOCAL}/24 dev g0"));
    // The peer is g1's MAC with no stack behind it: frames end at dumpcap.
    let mac = std::fs::read_to_string("/sys/class/net/g1/address").unwrap();
    sh(&format!(
        "ip neigh replace {PEER} lladdr {} dev g0 nud permanent",
        mac.trim()
    ));

    // Runs: 40 x 1000 and a shorter 600 (one message of 41), 3 x 1200
    // (another segment size: the next sendmmsg), one alone with another
    // TOS (another header), then 2 x 1200 again.
    let mut lens: Vec<(usize, u8)> = vec![(1000, 0); 40];
    lens.push((600, 0));
    lens.extend([(1200, 0); 3]);
    lens.push((1200, 0x20));
    lens.extend([(1200, 0); 2]);
    let want_ids: Vec<u16> = (0..41).chain(0..3).chain(0..1).chain(0..2).collect();
    let packets: Vec<(Vec<u8>, u8)> = lens
        .iter()
        .enumerate()
        .map(|(i, &(len, tos))| (packet(i as u32, len), tos))
        .collect();

    let cap = std::env::temp_dir().join(format!("rxe-gso-{}.pcap", std::process::id()));
    let _ = std::fs::remove_file(&cap);
    let mut dumpcap = Command::new("dumpcap")
        .args([
            "-q",
            "-P",
            "-i",
            "g1",
            "-f",
            "udp port 4791",
            "-a",
            "duration:20",
        ])
        .args(["-c", &packets.len().to_string(), "-w"])
        .arg(&cap)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dumpcap");
    wait_for_file(&cap);
    // dumpcap writes the header once it captures; give the filter a moment.
    std::thread::sleep(Duration::from_millis(300));

    let port = NetPort::new(Clock::new()).with_offload(Offload::BOTH);
    port.add_address(IpAddr::V4(LOCAL)).unwrap();
    assert_eq!(port.flush(script(&packets)), packets.len());
    let c = port.counters();
    assert_eq!(c.get(NetCounter::GsoFallback), 0, "{:?}", c.snapshot());
    // Messages of several packets: the 41, the 3 and the 2.
    assert_eq!(c.get(NetCounter::SentGsoMsgs), 3, "{:?}", c.snapshot());

    let st = dumpcap.wait().expect("dumpcap");
    assert!(st.success(), "dumpcap: {st}");
    let mut got = Vec::new();
    for f in CaptureReader::open(&cap).unwrap() {
        let f = f.unwrap();
        got.push(f.data);
    }
    let _ = std::fs::remove_file(&cap);
    assert_eq!(got.len(), packets.len(), "frames on the wire");
    for (k, frame) in got.iter().enumerate() {
        assert_eq!(&frame[12..14], &[0x08, 0x00], "frame {k}: IPv4");
        let ip = &frame[14..34];
        let udp: &[u8; 8] = frame[34..42].try_into().unwrap();
        let t = &frame[42..];
        let id = u16::from_be_bytes([ip[4], ip[5]]);
        assert_eq!(id, want_ids[k], "frame {k}: the kernel's ID");
        assert_eq!(ip[6] & 0x40, 0x40, "frame {k}: DF");
        // The address vector's TOS, with ECT(0): the port sends
        // ECN-capable by default (rxe-core's congestion module).
        assert_eq!(ip[1], lens[k].1 | ECN_ECT0, "frame {k}: TOS");
        assert_eq!(t.len(), lens[k].0, "frame {k}: length");
        // The packet as the engine made it, in order (the PSN).
        let (p, _) = &packets[k];
        assert_eq!(&t[..t.len() - 4], &p[..p.len() - 4], "frame {k}: bytes");
        let scope = IcrcScope::RoceV2 {
            ip_header: ip,
            udp_header: udp,
        };
        icrc::verify(&scope, t).unwrap_or_else(|e| panic!("frame {k} (ID {id}): {e:?}"));
        // The receive path finds the same ID.
        let info = RecvInfo {
            src: SocketAddr::new(IpAddr::V4(LOCAL), u16::from_be_bytes([udp[0], udp[1]])),
            dst: SocketAddr::new(IpAddr::V4(PEER), 4791),
            hop_limit: Some(ip[8]),
            traffic_class: Some(ip[1]),
        };
        let o = encap::open(t, &info, OpenOptions::default()).unwrap();
        assert_eq!(
            o.headers.ip_header()[4..6],
            ip[4..6],
            "frame {k}: solved ID"
        );
    }
}

fn wait_for_file(path: &Path) {
    let deadline = StdInstant::now() + Duration::from_secs(10);
    while std::fs::metadata(path).map_or(true, |m| m.len() < 24) {
        assert!(StdInstant::now() < deadline, "dumpcap did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}
