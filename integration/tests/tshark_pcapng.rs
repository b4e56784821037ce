//! A device's live capture as pcapng (the tap, `rxe_net::tap`): tshark
//! reads it without a warning, names the interface as the file describes
//! it (the device's address), and decodes every packet as RoCEv2; the
//! capture reader (what `rxe dissect` uses) reads the same frames with
//! good ICRCs.

#![forbid(unsafe_code)]

use std::process::Command;

use rxe_core::wire::dissect::dissect;
use rxe_integration::tshark;
use rxe_integration::verbs_harness::{pair, wait_cq, Node};
use rxe_pcap::{CaptureFormat, CaptureReader};
use rxe_verbs::{QpType, RecvWr, SendData, SendOp, SendWr, WcStatus};

#[test]
fn tshark_reads_the_devices_pcapng_capture() {
    if !tshark::present() {
        return;
    }
    let a = Node::new("127.0.0.165");
    let b = Node::new("127.0.0.166");
    let (qa, qb) = pair(&a, &b, QpType::Rc);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tap-{}.pcapng", std::process::id()));
    a.dev.set_capture(Some(&path)).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sg_list: [b.mr.sge(0, 4096)].into(),
    })
    .unwrap();
    for (wr_id, op) in [
        (2, SendOp::Send),
        (
            3,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr() + 8192,
                rkey: b.mr.rkey(),
            },
        ),
    ] {
        qa.post_send(SendWr {
            wr_id,
            op,
            data: SendData::Sges(vec![a.mr.sge(0, 3000)]),
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        })
        .unwrap();
        let wc = wait_cq(&a.cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (wr_id, WcStatus::Success));
    }
    a.dev.set_capture(None).unwrap();

    let reader = CaptureReader::open(&path).unwrap();
    assert_eq!(reader.format(), CaptureFormat::PcapNg);
    let frames: Vec<_> = reader.map(|f| f.unwrap()).collect();
    // Two messages of 3 packets each (MTU 1024) and their ACKs.
    assert!(frames.len() >= 8, "{} frames", frames.len());
    for f in &frames {
        let d = dissect(f.link_type, &f.data).unwrap().expect("RoCE");
        assert!(d.is_good(), "frame {}: {:?}", f.number, d.problems());
    }

    let out = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.interface_name", "-e", "infiniband.bth.opcode"])
        .output()
        .expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // tshark's only permitted remark is about running as root.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("Running as user \"root\""))
        .collect();
    assert!(
        out.status.success() && warnings.is_empty(),
        "tshark: {stderr}"
    );
    let rows: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), frames.len());
    for r in &rows {
        assert_eq!(r[0], "rxe:127.0.0.165", "interface name: {r:?}");
        assert!(!r[1].is_empty(), "not decoded as RoCEv2: {r:?}");
    }
    // SEND FIRST/MIDDLE/LAST (0, 1, 2), WRITE FIRST/MIDDLE/LAST (6, 7, 8),
    // ACK (17).
    for op in ["0", "2", "6", "8", "17"] {
        assert!(rows.iter().any(|r| r[1] == op), "no opcode {op}: {rows:?}");
    }
    let _ = std::fs::remove_file(&path);
}
