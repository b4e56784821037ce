//! The seeded fault layer on real sockets (rxe-net's `fault` module): two
//! devices on loopback (127.0.147.x) that drop, duplicate and reorder what
//! they receive. RC WRITEs and SENDs still arrive whole, once each, in
//! order; the transport's recovery shows in its counters.

use std::time::{Duration, Instant};

use rxe_integration::verbs_harness::{all_access, connect, rc_qp};
use rxe_verbs::*;

const MSG: usize = 128 * 1024;
const MESSAGES: u64 = 24;

fn device(ip: &str, faults: &str) -> Device {
    Device::add(DeviceConfig {
        faults: Some(faults.parse().expect("fault spec")),
        ..DeviceConfig::on_address(ip.parse().unwrap())
    })
    .expect("device")
}

#[test]
fn rc_recovers_from_loss_duplicates_and_reordering() {
    let a = device("127.0.147.1", "drop=0.02,dup=0.01,reorder=0.02,seed=11");
    let b = device("127.0.147.2", "drop=0.02,dup=0.01,reorder=0.02,seed=12");
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(256).unwrap(), b.create_cq(256).unwrap());
    let (qa, qb) = (rc_qp(&pa, &ca, 64), rc_qp(&pb, &cb, 64));
    connect(&qa, qb.qp_num(), b.query_gid(1, 0).unwrap(), 0x10, 0x20);
    connect(&qb, qa.qp_num(), a.query_gid(1, 0).unwrap(), 0x20, 0x10);
    let total = MSG * MESSAGES as usize;
    let data: Vec<u8> = (0..total).map(|k| (k * 13 + k / 509) as u8).collect();
    let src = pa.reg_mr(data, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pb.reg_mr_zeroed(total, all_access()).unwrap();
    // Half WRITEs into place, half SENDs into posted receives.
    for i in (1..MESSAGES).step_by(2) {
        qb.post_recv(RecvWr {
            wr_id: i,
            sg_list: [dst.sge(i as usize * MSG, MSG as u32)].into(),
        })
        .unwrap();
    }
    for i in 0..MESSAGES {
        let op = if i % 2 == 0 {
            SendOp::RdmaWrite {
                remote_addr: dst.addr() + i * MSG as u64,
                rkey: dst.rkey(),
            }
        } else {
            SendOp::Send
        };
        qa.post_send(SendWr {
            wr_id: i,
            op,
            data: SendData::Sges(vec![src.sge(i as usize * MSG, MSG as u32)]),
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        })
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    while sends.len() < MESSAGES as usize || recvs.len() < MESSAGES as usize / 2 {
        assert!(
            Instant::now() < deadline,
            "{} sends and {} receives completed",
            sends.len(),
            recvs.len()
        );
        for wc in ca.poll(64).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            sends.push(wc.wr_id);
        }
        for wc in cb.poll(64).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            recvs.push(wc.wr_id);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sends, (0..MESSAGES).collect::<Vec<_>>(), "in order");
    assert_eq!(
        recvs,
        (1..MESSAGES).step_by(2).collect::<Vec<_>>(),
        "each SEND once, in order"
    );
    assert_eq!(dst.to_vec().unwrap(), src.to_vec().unwrap(), "every byte");
    let c = |d: &Device, n: &str| d.counter(n);
    for (name, d) in [("A", &a), ("B", &b)] {
        eprintln!(
            "{name}: fault dropped {} duplicated {} reordered {}; retransmissions {} \
             duplicates {} out of sequence {}",
            c(d, "net_fault_dropped"),
            c(d, "net_fault_duplicated"),
            c(d, "net_fault_reordered"),
            c(d, "completer_retry_err"),
            c(d, "duplicate_request"),
            c(d, "out_of_seq_request")
        );
    }
    // B received most of the packets, so it saw faults of each kind.
    assert!(c(&b, "net_fault_dropped") > 0);
    assert!(c(&b, "net_fault_duplicated") > 0);
    assert!(c(&b, "net_fault_reordered") > 0);
    assert!(c(&a, "completer_retry_err") > 0, "A resent what B lost");
    assert!(c(&b, "duplicate_request") > 0, "B saw duplicates");
}

/// Without `faults` nothing is dropped, duplicated or reordered.
#[test]
fn no_faults_unless_asked() {
    let a = Device::add(DeviceConfig::on_address("127.0.147.5".parse().unwrap())).unwrap();
    assert_eq!(a.counter("net_fault_dropped"), 0);
    if std::env::var_os("RXE_FAULTS").is_none() {
        assert_eq!(DeviceConfig::default_faults(), None);
    }
}
