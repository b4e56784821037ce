//! Automatic path migration on real sockets: two devices with two
//! addresses each, an RC connection on the first pair with an alternate
//! path on the second, the primary path cut by nftables mid-transfer. The
//! transfer completes on the alternate path with every byte checked.
//!
//! The namespace (`rxeapm-<pid>`) holds a veth pair: `rxapma` with
//! 10.97.1.1 and 10.97.2.1 (device A), `rxapmb` with 10.97.1.2 and
//! 10.97.2.2 (device B). The primary path is 10.97.1.1 ↔ 10.97.1.2, the
//! alternate 10.97.2.1 ↔ 10.97.2.2. Both QPs load the alternate path with
//! REARM, as a connection manager does after LAP/APR, and arm on each
//! other's first packet. Then an nftables rule drops every RoCE packet of
//! the primary pair, both ways: A's retries run out, A migrates
//! (PATH_MIG), its first packet on the alternate path moves B too
//! (PATH_MIG), and the WRITEs left go on there.
//!
//! It needs root, iproute2 and nftables (scripts/setup.sh installs them);
//! without them it fails loudly, unless `RXE_SKIP_NETNS=1`.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rxe_integration::netns::{assert_nft, nft, nft_counter, sh};
use rxe_integration::verbs_harness::{all_access, rc_qp};
use rxe_verbs::connect::{self, InitParams, RcParams, ReadyParams, RemoteQp};
use rxe_verbs::*;

const MSG: usize = 64 * 1024;
const MESSAGES: u64 = 96;
const DEPTH: u64 = 8;
/// The cut comes after this many WRITEs completed.
const CUT_AFTER: u64 = 24;
/// 16 ms transport timer, 3 retries: the primary is given up after about
/// a quarter second.
const RC: RcParams = RcParams {
    timeout: 12,
    retry_cnt: 3,
    ..RcParams::PINGPONG.with_rd_atomic(4)
};

#[test]
fn a_cut_primary_path_moves_the_connection_to_its_alternate() {
    rxe_integration::netns::run_inner_test("rxeapm", "inner_cut_primary_path");
}

/// The GID index of `ip` on `dev`.
fn gid_index(dev: &Device, ip: &str) -> u8 {
    let ip: IpAddr = ip.parse().unwrap();
    dev.find_gid(&Gid::from(ip))
        .unwrap_or_else(|| panic!("{ip} is not in {}'s GID table", dev.name()))
        .1
}

fn path(dev: &Device, from: &str, to: &str) -> AddressVector {
    AddressVector {
        dgid: Gid::from(to.parse::<std::net::IpAddr>().unwrap()),
        sgid_index: gid_index(dev, from),
        hop_limit: 64,
        ..Default::default()
    }
}

/// Runs inside the namespace only (the outer test starts it).
#[test]
#[ignore = "run by a_cut_primary_path_moves_the_connection_to_its_alternate inside a namespace"]
fn inner_cut_primary_path() {
    rxe_integration::netns::assert_inside();
    assert_nft();
    sh("ip link set lo up");
    sh("ip link add rxapma type veth peer name rxapmb");
    for (dev, host) in [("rxapma", 1), ("rxapmb", 2)] {
        sh(&format!("ip addr add 10.97.1.{host}/24 dev {dev}"));
        sh(&format!("ip addr add 10.97.2.{host}/24 dev {dev}"));
        sh(&format!("ip link set {dev} up"));
    }
    let a = Device::add(DeviceConfig::on_interface("rxapma")).expect("device A");
    let b = Device::add(DeviceConfig::on_interface("rxapmb")).expect("device B");
    let events: Arc<Mutex<Vec<(char, AsyncEvent)>>> = Arc::default();
    for (name, dev) in [('A', &a), ('B', &b)] {
        let ev = events.clone();
        dev.register_event_handler(move |e| ev.lock().unwrap().push((name, *e)));
    }

    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(256).unwrap(), b.create_cq(256).unwrap());
    let (qa, qb) = (rc_qp(&pa, &ca, 64), rc_qp(&pb, &cb, 64));
    let total = MSG * MESSAGES as usize;
    let data: Vec<u8> = (0..total).map(|k| (k * 7 + k / 4093) as u8).collect();
    let src = pa.reg_mr(data, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pb.reg_mr_zeroed(total, all_access()).unwrap();

    // The primary path on the 10.97.1 pair, the alternate on 10.97.2.
    let up = |q: &Qp, dev: &Device, peer: &Qp, from: &str, to: &str, psns: (u32, u32)| {
        let remote = RemoteQp {
            qpn: peer.qp_num(),
            psn: Psn::new(psns.1),
            av: path(dev, from, to),
            path_mtu: PathMtu::Mtu1024,
        };
        let ready = ReadyParams::Rc {
            sq_psn: Psn::new(psns.0),
            remote,
            rc: RC,
        };
        connect::connect(q, &InitParams::connected(all_access()), &ready).expect("connect");
    };
    up(&qa, &a, &qb, "10.97.1.1", "10.97.1.2", (0x100, 0x200));
    up(&qb, &b, &qa, "10.97.1.2", "10.97.1.1", (0x200, 0x100));
    let rearm = |q: &Qp, dev: &Device, from: &str, to: &str| {
        q.modify(&QpAttr {
            alt_path: Some(AltPath {
                av: path(dev, from, to),
                pkey_index: 0,
                port_num: PORT,
                timeout: RC.timeout,
            }),
            path_mig_state: Some(MigState::Rearm),
            ..Default::default()
        })
        .expect("load the alternate path")
    };
    rearm(&qa, &a, "10.97.2.1", "10.97.2.2");
    rearm(&qb, &b, "10.97.2.2", "10.97.2.1");

    let write = |i: u64| SendWr {
        wr_id: i,
        op: SendOp::RdmaWrite {
            remote_addr: dst.addr() + i * MSG as u64,
            rkey: dst.rkey(),
        },
        data: SendData::Sges(vec![src.sge(i as usize * MSG, MSG as u32)]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    };
    let (mut posted, mut done) = (0u64, 0u64);
    let mut cut_at = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "only {done} of {MESSAGES} WRITEs completed"
        );
        for wc in ca.poll(64).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "WRITE {}: {wc:?}", wc.wr_id);
            done += 1;
        }
        while posted < MESSAGES && posted - done < DEPTH {
            qa.post_send(write(posted)).unwrap();
            posted += 1;
        }
        if cut_at.is_none() && done >= CUT_AFTER {
            // Both QPs must be armed by now (their traffic carried MigReq 0).
            for (n, q) in [('A', &qa), ('B', &qb)] {
                let m = q.query().unwrap().attr.path_mig_state;
                assert_eq!(m, Some(MigState::Armed), "{n} armed");
            }
            nft(
                "table ip rxeapm {\n chain out {\n  type filter hook output priority 0; \
                 policy accept;\n  ip saddr 10.97.1.0/24 ip daddr 10.97.1.0/24 udp dport 4791 \
                 counter drop\n }\n}\n",
            );
            cut_at = Some((Instant::now(), done));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let (cut_time, done_at_cut) = cut_at.expect("the cut happened");
    eprintln!(
        "cut after {done_at_cut} WRITEs; the other {} completed {:?} later",
        MESSAGES - done_at_cut,
        cut_time.elapsed()
    );
    assert!(
        done_at_cut < MESSAGES,
        "WRITEs were left for the alternate path"
    );
    assert_eq!(
        dst.to_vec().unwrap(),
        src.to_vec().unwrap(),
        "the target holds the source"
    );

    // Both ends moved to the alternate path, each with one PATH_MIG.
    let dropped = nft_counter("rxeapm");
    eprintln!("nft: {dropped}");
    assert!(
        dropped.contains("packets ") && !dropped.contains("packets 0 "),
        "the rule dropped packets: {dropped}"
    );
    for (n, q, dev, alt) in [('A', &qa, &a, "10.97.2.2"), ('B', &qb, &b, "10.97.2.1")] {
        let info = q.query().unwrap();
        assert_eq!(info.state, QpState::Rts, "{n}");
        assert_eq!(info.attr.path_mig_state, Some(MigState::Migrated), "{n}");
        assert_eq!(
            info.attr.av.unwrap().dgid,
            Gid::from(alt.parse::<std::net::IpAddr>().unwrap()),
            "{n}"
        );
        assert_eq!(info.attr.alt_path, None, "{n}");
        eprintln!(
            "{n}: path_migrated {} path_migrated_by_peer {} retransmissions {}",
            dev.counter("path_migrated"),
            dev.counter("path_migrated_by_peer"),
            dev.counter("completer_retry_err")
        );
    }
    assert_eq!(a.counter("path_migrated"), 1);
    assert_eq!(b.counter("path_migrated_by_peer"), 1);
    assert_eq!(a.counter("retry_exceeded_err"), 0);
    // The event thread runs on its own: give it a moment.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let ev = events.lock().unwrap().clone();
        let mig = |n: char, q: &Qp| {
            ev.iter()
                .filter(|(d, e)| *d == n && *e == AsyncEvent::PathMig { qp_num: q.qp_num() })
                .count()
        };
        if (mig('A', &qa), mig('B', &qb)) == (1, 1) || Instant::now() > until {
            assert_eq!((mig('A', &qa), mig('B', &qb)), (1, 1), "events: {ev:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
