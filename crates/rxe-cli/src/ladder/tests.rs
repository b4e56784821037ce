//! The analysis on hand-made packet sequences and on real captures: the
//! golden kernel-rxe ones (integration/testdata/captures) and the
//! simulator's (integration/testdata/rxe).

use std::path::{Path, PathBuf};

use rxe_core::wire::{NakCode, Syndrome};

use super::analyze::{analyze, psn_diff};
use super::model::{Arrow, Kind, MarkKind, Model};
use super::packet::{BthKeys, Pkt};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";
const QA: u32 = 0x11;
const QB: u32 = 0x22;

fn req(frame: u64, t: f64, op: u8, psn: u32) -> Pkt {
    let mut k = BthKeys::bare(op, QB, psn);
    k.payload_len = 1024;
    Pkt {
        frame,
        time: t,
        src: A.into(),
        dst: B.into(),
        bth: Some(k),
        problem: None,
    }
}

fn resp(frame: u64, t: f64, op: u8, psn: u32, syn: Option<Syndrome>) -> Pkt {
    let mut k = BthKeys::bare(op, QA, psn);
    k.aeth = syn.map(|s| (s, 1));
    Pkt {
        frame,
        time: t,
        src: B.into(),
        dst: A.into(),
        bth: Some(k),
        problem: None,
    }
}

const ACK: Option<Syndrome> = Some(Syndrome::Ack { credits: 31 });

fn arrow(m: &Model, frame: u64) -> &Arrow {
    m.arrows.iter().find(|a| a.frame == frame).expect("frame")
}

fn text(a: &Arrow, k: MarkKind) -> String {
    a.marks
        .iter()
        .filter(|m| m.kind == k)
        .map(|m| m.text.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[test]
fn serial_psn_arithmetic_wraps() {
    assert_eq!(psn_diff(0, 0xff_ffff), 1);
    assert_eq!(psn_diff(0xff_ffff, 0), -1);
    assert_eq!(psn_diff(5, 3), 2);
}

#[test]
fn a_coalesced_ack_covers_every_packet_before_it() {
    let m = analyze(&[
        req(1, 0.0, 0x00, 10),
        req(2, 0.1, 0x01, 11),
        req(3, 0.2, 0x02, 12),
        resp(4, 0.3, 0x11, 12, ACK),
        req(5, 0.4, 0x04, 13),
        resp(6, 0.5, 0x11, 13, ACK),
    ]);
    let ack = arrow(&m, 4);
    assert_eq!(ack.kind, Kind::Ack);
    let c = ack.cover.as_ref().unwrap();
    assert_eq!(c.psns, (10, 12));
    assert_eq!(c.frames, vec![1, 2, 3]);
    assert_eq!(arrow(&m, 6).cover.as_ref().unwrap().frames, vec![5]);
    // The QPN of A's lane comes from the ACKs' destination QP.
    assert_eq!(m.lanes[arrow(&m, 1).from].qpn, Some(QA));
    assert_eq!(m.lanes[arrow(&m, 1).to].qpn, Some(QB));
    assert_eq!(m.summary.messages, 2);
    assert_eq!(m.summary.retransmissions, 0);
    assert_eq!(m.summary.rtt.len(), 1);
    assert_eq!(m.summary.rtt[0].samples, 2);
    assert!((m.summary.rtt[0].median - 0.1).abs() < 1e-9);
}

#[test]
fn a_lost_packet_shows_as_a_gap_a_nak_and_go_back_n() {
    let nak = Some(Syndrome::Nak(NakCode::PsnSequenceError));
    let m = analyze(&[
        req(1, 0.0, 0x00, 10),
        // PSN 11 was lost before the capture point.
        req(2, 0.1, 0x02, 12),
        resp(3, 0.2, 0x11, 11, nak),
        req(4, 0.3, 0x01, 11),
        req(5, 0.4, 0x02, 12),
        resp(6, 0.5, 0x11, 12, ACK),
    ]);
    assert!(text(arrow(&m, 2), MarkKind::Gap).contains("PSNs 11..11"));
    let n = arrow(&m, 3);
    assert_eq!(n.kind, Kind::Nak);
    assert!(text(n, MarkKind::Nak).contains("expected PSN 11"));
    // The NAK acknowledges PSN 10.
    assert_eq!(n.cover.as_ref().unwrap().frames, vec![1]);
    // PSN 11 is new to the capture but behind the highest PSN sent.
    for f in [4, 5] {
        let a = arrow(&m, f);
        assert!(text(a, MarkKind::Retransmit).contains("go-back-N"), "{a:?}");
        assert_eq!(a.related, Some(3));
    }
    assert_eq!(arrow(&m, 6).cover.as_ref().unwrap().frames, vec![4, 5]);
    assert_eq!(m.summary.retransmissions, 2);
    assert_eq!(m.summary.naks.get("NAK(PSN sequence error)"), Some(&1));
}

#[test]
fn an_rnr_nak_and_the_wait_before_the_retry() {
    let m = analyze(&[
        req(1, 0.0, 0x04, 20),
        resp(2, 0.001, 0x11, 20, Some(Syndrome::RnrNak { timer: 10 })),
        req(3, 0.0014, 0x04, 20),
        resp(4, 0.0015, 0x11, 20, ACK),
    ]);
    let r = arrow(&m, 2);
    assert_eq!(r.kind, Kind::RnrNak);
    assert!(text(r, MarkKind::Rnr).contains("0.320 ms"), "{r:?}");
    let again = arrow(&m, 3);
    let why = text(again, MarkKind::Retransmit);
    assert!(
        why.contains("RNR NAK in frame 2") && why.contains("waited 0.400 ms"),
        "{why}"
    );
    assert_eq!(again.related, Some(2));
    assert_eq!(m.summary.naks.get("RNR NAK"), Some(&1));
    // Karn: the retransmitted PSN gives no RTT sample.
    assert!(m.summary.rtt.is_empty());
}

#[test]
fn a_timeout_retransmission_and_a_duplicate() {
    let m = analyze(&[
        req(1, 0.0, 0x04, 30),
        req(2, 0.068, 0x04, 30),
        resp(3, 0.069, 0x11, 30, ACK),
        // Sent again after its ACK: the responder has it already.
        req(4, 0.2, 0x04, 30),
        resp(5, 0.201, 0x11, 30, ACK),
    ]);
    let t = text(arrow(&m, 2), MarkKind::Retransmit);
    assert!(
        t.contains("timeout") && t.contains("frame 1") && t.contains("68.000 ms"),
        "{t}"
    );
    assert_eq!(arrow(&m, 2).related, Some(1));
    assert!(!arrow(&m, 2).has(MarkKind::Duplicate));
    assert!(arrow(&m, 4).has(MarkKind::Duplicate));
    let t = text(arrow(&m, 4), MarkKind::Retransmit);
    assert!(
        t.contains("131.000 ms after frame 3 acknowledged it"),
        "{t}"
    );
    assert!(arrow(&m, 5).has(MarkKind::RepeatAck));
    assert_eq!(m.summary.retransmissions, 2);
    assert_eq!(m.summary.duplicates, 1);
    assert_eq!(m.summary.messages, 1);
}

#[test]
fn an_identical_copy_close_behind_is_a_network_duplicate() {
    let m = analyze(&[req(1, 0.0, 0x04, 30), req(2, 0.000_01, 0x04, 30)]);
    assert!(arrow(&m, 2).has(MarkKind::Duplicate));
    assert!(!arrow(&m, 2).has(MarkKind::Retransmit));
}

#[test]
fn read_responses_and_atomic_acks_point_at_their_requests() {
    let mut read = req(1, 0.0, 0x0c, 40);
    read.bth.as_mut().unwrap().dma_len = Some(3000);
    let m = analyze(&[
        read,
        resp(2, 0.1, 0x0d, 40, ACK),
        resp(3, 0.2, 0x0e, 41, None),
        resp(4, 0.3, 0x0f, 42, ACK),
        req(5, 0.4, 0x14, 43),
        resp(6, 0.5, 0x12, 43, ACK),
        req(7, 0.6, 0x04, 44),
        resp(8, 0.7, 0x11, 44, ACK),
    ]);
    assert!(arrow(&m, 1).label.contains("len=3000"));
    for f in [2, 3, 4] {
        assert_eq!(arrow(&m, f).kind, Kind::ReadResponse);
        assert_eq!(arrow(&m, f).related, Some(1));
    }
    assert_eq!(arrow(&m, 6).kind, Kind::AtomicAck);
    assert_eq!(arrow(&m, 6).related, Some(5));
    // The PSNs the READ used are not a gap before the atomic.
    assert!(!arrow(&m, 5).has(MarkKind::Gap));
    assert_eq!(arrow(&m, 8).cover.as_ref().unwrap().frames, vec![7]);
}

#[test]
fn coverage_across_the_psn_wrap() {
    let m = analyze(&[
        req(1, 0.0, 0x00, 0xff_fffe),
        req(2, 0.1, 0x01, 0xff_ffff),
        req(3, 0.2, 0x02, 0),
        resp(4, 0.3, 0x11, 0, ACK),
    ]);
    assert!(m.arrows.iter().all(|a| a.marks.is_empty()), "{m:?}");
    assert_eq!(arrow(&m, 4).cover.as_ref().unwrap().frames, vec![1, 2, 3]);
}

#[test]
fn cm_mads_ud_datagrams_and_bad_packets() {
    let mut cm = BthKeys::bare(0x64, 1, 6);
    cm.src_qp = Some(1);
    cm.mad = Some((0x07, 0x0010));
    let mut ud = BthKeys::bare(0x64, 0x50, 7);
    ud.src_qp = Some(0x60);
    let p = |f: u64, k: BthKeys, problem: Option<&str>| Pkt {
        frame: f,
        time: f as f64,
        src: A.into(),
        dst: B.into(),
        bth: Some(k),
        problem: problem.map(str::to_string),
    };
    let m = analyze(&[
        p(1, cm, None),
        p(2, ud.clone(), None),
        p(3, ud, Some("ICRC mismatch")),
        super::packet::malformed(4, 4.0, "IPv4 header too short".into()),
    ]);
    assert_eq!(arrow(&m, 1).kind, Kind::Cm);
    assert!(
        arrow(&m, 1).label.starts_with("CM REQ"),
        "{}",
        arrow(&m, 1).label
    );
    assert_eq!(m.lanes[arrow(&m, 1).from].qpn, Some(1));
    assert_eq!(arrow(&m, 2).kind, Kind::Ud);
    assert_eq!(m.lanes[arrow(&m, 2).from].qpn, Some(0x60));
    assert_eq!(arrow(&m, 3).kind, Kind::Bad);
    assert!(text(arrow(&m, 3), MarkKind::Error).contains("ICRC"));
    assert_eq!(arrow(&m, 4).kind, Kind::Bad);
    assert_eq!(m.summary.bad, 2);
    assert_eq!(m.summary.cm, 1);
}

#[test]
fn several_qps_between_two_hosts_pair_by_the_psns_they_acknowledge() {
    let mut pk = Vec::new();
    let mut f = 0;
    for (qa, qb, psn) in [(0x11, 0x21, 100), (0x12, 0x22, 500), (0x13, 0x23, 900)] {
        let mut k = BthKeys::bare(0x04, qb, psn);
        k.ack_req = true;
        f += 1;
        pk.push(Pkt {
            frame: f,
            time: f as f64,
            src: A.into(),
            dst: B.into(),
            bth: Some(k),
            problem: None,
        });
        let mut a = BthKeys::bare(0x11, qa, psn);
        a.aeth = ACK.map(|s| (s, 1));
        f += 1;
        pk.push(Pkt {
            frame: f,
            time: f as f64,
            src: B.into(),
            dst: A.into(),
            bth: Some(a),
            problem: None,
        });
    }
    let m = analyze(&pk);
    assert_eq!(m.lanes.len(), 6);
    assert_eq!(m.conns.len(), 3);
    for a in &m.arrows {
        let (from, to) = (&m.lanes[a.from], &m.lanes[a.to]);
        assert!(from.qpn.is_some() && to.qpn.is_some());
        // 0x11 talks to 0x21, 0x12 to 0x22 ...
        assert_eq!(from.qpn.unwrap() & 0xf, to.qpn.unwrap() & 0xf, "{a:?}");
    }
}

// ---- real captures ------------------------------------------------------

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration/testdata")
}

fn model_of(rel: &str) -> Model {
    let loaded = super::load(&testdata().join(rel)).expect("capture");
    let m = analyze(&loaded.pkts);
    assert_eq!(m.arrows.len(), loaded.maps.len());
    m
}

#[test]
fn every_golden_capture_has_an_arrow_per_packet_and_no_errors() {
    for e in std::fs::read_dir(testdata().join("captures")).unwrap() {
        let p = e.unwrap().path();
        let name = format!("captures/{}", p.file_name().unwrap().to_string_lossy());
        let m = model_of(&name);
        assert_eq!(m.arrows.len(), m.summary.packets, "{name}");
        assert!(m.arrows.len() > 50, "{name}");
        assert_eq!(m.summary.bad, 0, "{name}");
        // tshark's frame numbers are ours.
        assert!(m.arrows.windows(2).all(|w| w[0].frame < w[1].frame));
        // Both ends of every QP are named, except in host_rc_send, whose
        // peer never answers: nothing on the wire tells the sender's QPN.
        let lone = name.ends_with("host_rc_send.pcap");
        for a in &m.arrows {
            assert_eq!(
                m.lanes[a.from].qpn.is_none(),
                lone,
                "{name}: frame {}",
                a.frame
            );
        }
    }
}

#[test]
fn rping_connects_with_cm_then_reads() {
    let m = model_of("captures/rping.pcap");
    let labels: Vec<&str> = m.arrows[..3].iter().map(|a| a.label.as_str()).collect();
    assert!(labels[0].starts_with("CM REQ"), "{labels:?}");
    assert!(labels[1].starts_with("CM REP"), "{labels:?}");
    assert!(labels[2].starts_with("CM RTU"), "{labels:?}");
    assert_eq!(m.summary.cm, 5);
    // Frame 7, the READ response, answers frame 6's READ request.
    assert_eq!(arrow(&m, 7).kind, Kind::ReadResponse);
    assert_eq!(arrow(&m, 7).related, Some(6));
    // Frame 5 acknowledges frame 4's SEND.
    assert_eq!(arrow(&m, 5).cover.as_ref().unwrap().frames, vec![4]);
    assert_eq!(m.summary.retransmissions, 0);
    // CM lanes (QP1) and the RC lanes of both hosts.
    assert_eq!(m.lanes.len(), 4);
}

#[test]
fn send_bw_has_timeout_retransmissions_and_repeated_acks() {
    let m = model_of("captures/send_bw.pcap");
    // Frame 5 is the coalesced ACK of the first 4-packet message.
    assert_eq!(
        arrow(&m, 5).cover.as_ref().unwrap().frames,
        vec![1, 2, 3, 4]
    );
    // Frame 155 resends PSN 7162070, first sent in frame 22.
    let a = arrow(&m, 155);
    let why = text(a, MarkKind::Retransmit);
    assert!(why.contains("timeout") && why.contains("frame 22"), "{why}");
    assert_eq!(a.related, Some(22));
    assert!(arrow(&m, 429).has(MarkKind::RepeatAck));
    assert_eq!(m.summary.retransmissions, 129);
    assert!(m.summary.naks.is_empty());
}

#[test]
fn atomics_are_answered_by_their_atomic_acks() {
    let m = model_of("captures/atomic_bw.pcap");
    let acks: Vec<&Arrow> = m
        .arrows
        .iter()
        .filter(|a| a.kind == Kind::AtomicAck)
        .collect();
    assert_eq!(acks.len(), 100);
    for a in acks {
        let r = arrow(&m, a.related.expect("request"));
        assert!(r.label.contains("FetchAdd"), "{}", r.label);
    }
}

#[test]
fn the_simulator_capture_tells_its_whole_story() {
    let m = model_of("rxe/rxe_sim_faults.pcap");
    assert!(text(arrow(&m, 3), MarkKind::Gap).contains("PSNs 258..258"));
    assert_eq!(arrow(&m, 9).kind, Kind::Nak);
    for f in 10..=15 {
        assert!(
            text(arrow(&m, f), MarkKind::Retransmit).contains("go-back-N"),
            "{f}"
        );
        assert_eq!(arrow(&m, f).related, Some(9));
    }
    assert_eq!(
        arrow(&m, 16).cover.as_ref().unwrap().frames,
        vec![10, 11, 12, 13, 14, 15]
    );
    assert_eq!(arrow(&m, 19).kind, Kind::RnrNak);
    assert!(text(arrow(&m, 20), MarkKind::Retransmit).contains("RNR NAK in frame 19"));
    assert_eq!(arrow(&m, 37).related, Some(35));
    // The atomic's ACK was lost: frame 40 resends it after the timeout.
    assert!(text(arrow(&m, 40), MarkKind::Retransmit).contains("timeout"));
    assert_eq!(arrow(&m, 41).related, Some(36));
    // Frame 43 is corrupted: bad ICRC; the responder NAKs its PSN.
    assert_eq!(arrow(&m, 43).kind, Kind::Bad);
    assert!(text(arrow(&m, 43), MarkKind::Error).contains("ICRC"));
    assert!(text(arrow(&m, 45), MarkKind::Nak).contains("expected PSN 271"));
    assert!(text(arrow(&m, 46), MarkKind::Retransmit).contains("go-back-N"));
    assert_eq!(m.summary.naks.get("RNR NAK"), Some(&5));
    assert_eq!(m.summary.naks.get("NAK(PSN sequence error)"), Some(&2));
    assert_eq!(m.summary.bad, 1);
}

#[test]
fn rxe_demo_pairs_reads_atomics_and_ud() {
    let m = model_of("rxe/rxe_demo.pcap");
    assert_eq!(arrow(&m, 6).cover.as_ref().unwrap().frames, vec![3, 4, 5]);
    assert_eq!(arrow(&m, 8).related, Some(7));
    assert_eq!(arrow(&m, 9).related, Some(7));
    assert_eq!(arrow(&m, 11).related, Some(10));
    assert_eq!(arrow(&m, 13).related, Some(12));
    // The atomic after the READ: the READ's response PSN is no gap.
    assert!(arrow(&m, 10).marks.is_empty(), "{:?}", arrow(&m, 10));
    let ud = arrow(&m, 14);
    assert_eq!(ud.kind, Kind::Ud);
    assert_eq!(m.lanes[ud.from].qpn, Some(0x712ff));
    assert_eq!(m.lanes[ud.to].qpn, Some(0xe57e3));
    // SEND, WRITE, READ, CMP_SWAP, FETCH_ADD and the UD SEND.
    assert_eq!(m.summary.messages, 6);
    assert!(m.arrows.iter().all(|a| a.marks.is_empty()));
}

/// Bad input never panics: every frame of two captures cut at many lengths
/// and with bytes flipped goes through the whole pipeline.
#[test]
fn truncated_and_corrupted_frames_do_not_panic() {
    use rxe_core::wire::dissect::dissect;
    use rxe_pcap::CaptureReader;
    let mut pkts = Vec::new();
    let mut schemas = super::bytemap::Schemas::default();
    for name in ["captures/rping.pcap", "rxe/rxe_sim_faults.pcap"] {
        let mut r = CaptureReader::open(&testdata().join(name)).unwrap();
        while let Some(f) = r.next_frame().unwrap() {
            for cut in (0..=f.data.len()).step_by(5) {
                for flip in [None, Some(cut / 2), Some(cut.saturating_sub(1))] {
                    let mut b = f.data[..cut].to_vec();
                    if let Some(i) = flip.filter(|&i| i < b.len()) {
                        b[i] ^= 0xa5;
                    }
                    let n = pkts.len() as u64 + 1;
                    match dissect(f.link_type, &b) {
                        Ok(Some(d)) => {
                            pkts.push(super::packet::from_dissection(n, 0.0, &d));
                            let map = super::bytemap::bytemap(&d, &mut schemas);
                            assert!(map["len"].as_u64() == Some(b.len() as u64));
                        }
                        Ok(None) => {}
                        Err(e) => pkts.push(super::packet::malformed(n, 0.0, e.to_string())),
                    }
                }
            }
        }
    }
    assert!(pkts.len() > 5_000);
    let m = analyze(&pkts);
    assert_eq!(m.arrows.len(), pkts.len());
    assert!(m.summary.bad > 1_000);
}

#[test]
fn ecn_bits_and_cnps_are_marked() {
    let mut marked = BthKeys::bare(0x04, QB, 60);
    marked.fecn = true;
    let cnp = BthKeys::bare(0x81, QA, 0);
    let p = |f: u64, src: &str, dst: &str, k: BthKeys| Pkt {
        frame: f,
        time: f as f64,
        src: src.into(),
        dst: dst.into(),
        bth: Some(k),
        problem: None,
    };
    let m = analyze(&[p(1, A, B, marked), p(2, B, A, cnp)]);
    assert!(text(arrow(&m, 1), MarkKind::Ecn).contains("FECN"));
    assert_eq!(arrow(&m, 2).kind, Kind::Cnp);
    assert_eq!(arrow(&m, 2).label, "CNP");
    assert!(arrow(&m, 2).has(MarkKind::Ecn));
    // ECN is news, not trouble: "errors only" does not show it.
    assert!(!MarkKind::Ecn.is_trouble());
}
