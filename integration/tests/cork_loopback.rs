//! Corking (`Device::kick_corked`): small posts to an RC QP whose earlier
//! packets are still unacknowledged wait to leave together, so that a
//! pipelined run of 64-byte WRITEs goes out in a few batched sends (UDP GSO)
//! instead of one system call each; with `cork: false` every post sends
//! its own packet at once. Either way every WRITE completes, in order,
//! with its bytes. Addresses 127.0.148.x.

use std::net::IpAddr;

use rxe_integration::verbs_harness::*;
use rxe_verbs::*;

const WRITES: u64 = 64;
const LEN: usize = 64;

fn node(ip: &str, cork: bool) -> Node {
    let ip: IpAddr = ip.parse().unwrap();
    Node::with_config(DeviceConfig {
        cork,
        gso: true,
        ..DeviceConfig::on_address(ip)
    })
}

fn counter(n: &Node, name: &str) -> u64 {
    n.dev
        .counters()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| v)
}

/// Posts `WRITES` signaled 64-byte WRITEs on `qa`, each from its own
/// `LEN` bytes of a's region to the same place in b's.
fn post_writes(qa: &Qp, a: &Node, b: &Node) {
    for i in 0..WRITES {
        let off = i as usize * LEN;
        qa.post_send(SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite {
                remote_addr: b.mr.addr() + off as u64,
                rkey: b.mr.rkey(),
            },
            data: SendData::Sges(vec![a.mr.sge(off, LEN as u32)]),
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        })
        .unwrap();
    }
}

/// Posts `WRITES` 64-byte WRITEs back to back from a to b, each from its own
/// bytes to its own place; returns how many batched (GSO) sends a made.
fn pipelined_writes(a: &Node, b: &Node) -> u64 {
    let (qa, _qb) = pair(a, b, QpType::Rc);
    let data: Vec<u8> = (0..WRITES as usize * LEN).map(|i| (i * 7) as u8).collect();
    a.mr.write(0, &data).unwrap();
    let before = counter(a, "net_sent_gso_msgs");
    post_writes(&qa, a, b);
    let wcs = a.wait(WRITES as usize);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..WRITES).collect::<Vec<_>>(), "in order");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0u8; data.len()];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data, "every WRITE's bytes arrived");
    counter(a, "net_sent_gso_msgs") - before
}

#[test]
fn small_posts_behind_unacknowledged_ones_leave_in_batches() {
    let a = node("127.0.148.1", true);
    let b = node("127.0.148.2", true);
    let batched = pipelined_writes(&a, &b);
    println!("corked: {WRITES} WRITEs in {batched} batched sends");
    assert!(batched >= 1, "no post was held back to join a batch");
}

#[test]
fn without_corking_each_post_sends_at_once() {
    let a = node("127.0.148.3", false);
    let b = node("127.0.148.4", false);
    let batched = pipelined_writes(&a, &b);
    println!("not corked: {WRITES} WRITEs in {batched} batched sends");
    assert_eq!(batched, 0, "a post waited for another");
}

/// With busy polling preferred and a poller at work, a corked post does
/// not wake the driver thread (the poller's next turn would send the
/// batch). A poller that then stops without saying so strands nothing:
/// the driver thread's next look, within a millisecond, sends what is
/// corked. Nothing polls a's CQ until b has every byte.
#[test]
fn corked_posts_of_a_poller_that_stops_still_leave() {
    let a = node("127.0.148.5", true);
    let b = node("127.0.148.6", true);
    a.dev.set_prefer_busy_poll(true);
    let (qa, _qb) = pair(&a, &b, QpType::Rc);
    let data: Vec<u8> = (0..WRITES as usize * LEN).map(|i| (i * 11) as u8).collect();
    a.mr.write(0, &data).unwrap();
    a.dev.busy_poll();
    post_writes(&qa, &a, &b);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = vec![0u8; data.len()];
    loop {
        b.mr.read(0, &mut got).unwrap();
        if got == data {
            break;
        }
        assert!(std::time::Instant::now() < end, "corked WRITEs never left");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let wcs = a.wait(WRITES as usize);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
}
