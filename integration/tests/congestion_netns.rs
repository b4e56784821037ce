//! Congestion control on real sockets: a congested switch emulated with
//! nftables in a network namespace of the test's own, two RC flows sharing
//! it, DCQCN bringing both towards a fair share without loss.
//!
//! The namespace (`rxeq3-<pid>`) holds three devices on 10.98.3.1 and
//! 10.98.3.2 (the senders) and 10.98.3.3 (the receiver). Their packets to
//! the receiver pass an nftables rule that marks ECN CE on whatever goes
//! over a byte rate (`limit rate over ... ip ecn set ce`): the emulated
//! switch port, which never drops. The receiver answers CE with CNPs; each
//! sender's DCQCN lowers its rate and recovers. The test asserts what must
//! hold (every byte arrives and checks, nothing is retransmitted, CNPs
//! flow, both senders reduce their rate), prints the two flows' average
//! rates and Jain's fairness index, and, with `RXE_CC_PLOT=FILE.svg`,
//! writes their rates over time (docs/congestion.md). Throughput itself is
//! not asserted: it is this host's, not the code's.
//!
//! It needs root, iproute2 and nftables (scripts/setup.sh installs them);
//! without them it fails loudly, unless `RXE_SKIP_NETNS=1`.

use std::time::{Duration, Instant};

use rxe_integration::netns::{assert_nft, nft, nft_counter, sh};
use rxe_integration::verbs_harness::{all_access, connect};
use rxe_verbs::*;

/// The rule marks CE on what goes to the receiver above this many bytes
/// per second (50 Mb/s).
const BOTTLENECK_BYTES_PER_S: u64 = 6_250_000;
const MSG: usize = 64 * 1024;
/// WRITEs each flow keeps outstanding.
const DEPTH: usize = 8;
const SAMPLE: Duration = Duration::from_millis(50);
const RUN: Duration = Duration::from_secs(6);
/// The second flow starts this late.
const SECOND_AT: Duration = Duration::from_secs(2);

#[test]
fn two_flows_through_a_marking_switch_share_it_without_loss() {
    rxe_integration::netns::run_inner_test("rxeq3", "inner_two_flows");
}

/// (seconds since the start, each flow's Mb/s, each flow's DCQCN rate
/// while limited).
type Sample = (f64, [f64; 2], [Option<f64>; 2]);

struct Sender {
    dev: Device,
    _pd: Pd,
    cq: Cq,
    src: Mr,
    qp: Qp,
    posted: u64,
    done: u64,
}

/// Runs inside the namespace only (the outer test starts it).
#[test]
#[ignore = "run by two_flows_through_a_marking_switch_share_it_without_loss inside a namespace"]
fn inner_two_flows() {
    rxe_integration::netns::assert_inside();
    assert_nft();
    sh("ip link set lo up");
    for i in 1..=3 {
        sh(&format!("ip addr add 10.98.3.{i}/32 dev lo"));
    }
    // Everything to the receiver's RoCE port passes the output hook; above
    // the rate (after a 64 KiB burst) it leaves marked CE, as a switch
    // port's RED/ECN marks above its threshold.
    let rules = format!(
        "table ip rxeq3 {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  \
         ip daddr 10.98.3.3 udp dport 4791 limit rate over {} kbytes/second burst 64 kbytes \
         ip ecn set ce counter\n }}\n}}\n",
        BOTTLENECK_BYTES_PER_S / 1000
    );
    nft(&rules);

    // DCQCN with ConnectX's defaults, the line rate set to 500 Mb/s (the
    // rate a QP recovers to, ten times the marking threshold).
    let cc = CongestionConfig {
        dcqcn: DcqcnParams {
            max_rate_mbps: 500,
            ..DcqcnParams::default()
        },
        ..CongestionConfig::default()
    };
    let add = |ip: &str| {
        Device::add(DeviceConfig {
            congestion: cc,
            // Without GSO each packet passes the rule on its own, as
            // through a switch (a GSO message would be marked whole).
            gso: false,
            ..DeviceConfig::on_address(ip.parse().unwrap())
        })
        .expect("device")
    };
    let rx = add("10.98.3.3");
    let rx_pd = rx.alloc_pd().unwrap();
    let rx_cq = rx.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut senders = Vec::new();
    let mut targets = Vec::new();
    let mut rx_qps = Vec::new();
    for (i, ip) in ["10.98.3.1", "10.98.3.2"].iter().enumerate() {
        let dev = add(ip);
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(256).unwrap();
        let data: Vec<u8> = (0..MSG).map(|k| (k * 7 + i * 13) as u8).collect();
        let src = pd.reg_mr(data, AccessFlags::LOCAL_WRITE).unwrap();
        let tgt = rx_pd.reg_mr_zeroed(MSG, all_access()).unwrap();
        let init = |pd: &Pd, cq: &Cq| {
            pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
                sq_sig_all: true,
            })
            .unwrap()
        };
        let qp = init(&pd, &cq);
        let rqp = init(&rx_pd, &rx_cq);
        connect(&qp, rqp.qp_num(), rx.query_gid(1, 0).unwrap(), 0x100, 0x200);
        connect(
            &rqp,
            qp.qp_num(),
            dev.query_gid(1, 0).unwrap(),
            0x200,
            0x100,
        );
        senders.push(Sender {
            dev,
            _pd: pd,
            cq,
            src,
            qp,
            posted: 0,
            done: 0,
        });
        targets.push(tgt);
        rx_qps.push(rqp);
    }

    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut last = [0u64; 2];
    let mut next_sample = start + SAMPLE;
    while start.elapsed() < RUN {
        for (i, s) in senders.iter_mut().enumerate() {
            let wcs = s.cq.poll(64).unwrap();
            for wc in &wcs {
                assert_eq!(wc.status, WcStatus::Success, "flow {i}: {wc:?}");
            }
            s.done += wcs.len() as u64;
            let active = i == 0 || start.elapsed() >= SECOND_AT;
            while active && s.posted - s.done < DEPTH as u64 {
                s.qp.post_send(SendWr {
                    wr_id: s.posted,
                    op: SendOp::RdmaWrite {
                        remote_addr: targets[i].addr(),
                        rkey: targets[i].rkey(),
                    },
                    data: SendData::Sges(vec![s.src.sge(0, MSG as u32)]),
                    signaled: true,
                    fence: false,
                    solicited: false,
                    ud: None,
                })
                .unwrap();
                s.posted += 1;
            }
        }
        if Instant::now() >= next_sample {
            next_sample += SAMPLE;
            let t = start.elapsed().as_secs_f64();
            let mut rates = [0.0; 2];
            let mut dcqcn = [None; 2];
            for (i, s) in senders.iter().enumerate() {
                let bytes = (s.done - last[i]) * MSG as u64;
                last[i] = s.done;
                rates[i] = bytes as f64 * 8.0 / SAMPLE.as_secs_f64() / 1e6;
                dcqcn[i] = s.dev.qp_rate_mbps(s.qp.qp_num());
            }
            samples.push((t, rates, dcqcn));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // Drain: every posted WRITE completes, with success.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, s) in senders.iter_mut().enumerate() {
        while s.done < s.posted {
            assert!(Instant::now() < deadline, "flow {i} did not drain");
            for wc in s.cq.poll(64).unwrap() {
                assert_eq!(wc.status, WcStatus::Success, "flow {i}: {wc:?}");
                s.done += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for (i, s) in senders.iter().enumerate() {
        assert_eq!(
            targets[i].to_vec().unwrap(),
            s.src.to_vec().unwrap(),
            "flow {i}: the target holds the source"
        );
    }

    eprintln!("nft: {}", nft_counter("rxeq3"));
    let c = |d: &Device, n: &str| d.counter(n);
    let cnps = c(&rx, "np_cnp_sent");
    eprintln!(
        "receiver: CE marked {} CNPs sent {cnps} suppressed {}",
        c(&rx, "np_ecn_marked_roce_packets"),
        c(&rx, "np_cnp_suppressed")
    );
    assert!(
        c(&rx, "np_ecn_marked_roce_packets") > 0,
        "the switch marked"
    );
    assert!(cnps > 0, "the receiver sent CNPs");
    for (i, s) in senders.iter().enumerate() {
        let d = &s.dev;
        eprintln!(
            "flow {i}: {} WRITEs of {MSG} B, CNPs handled {} ignored {}, rate reductions {}, \
             retransmissions {}, net drops {}",
            s.done,
            c(d, "rp_cnp_handled"),
            c(d, "rp_cnp_ignored"),
            c(d, "rp_rate_reductions"),
            c(d, "completer_retry_err"),
            c(d, "net_send_err") + c(d, "net_rcvd_bad_icrc")
        );
        assert!(c(d, "rp_cnp_handled") > 0, "flow {i} heard CNPs");
        assert!(c(d, "rp_rate_reductions") > 0, "flow {i} lowered its rate");
        assert_eq!(
            c(d, "completer_retry_err"),
            0,
            "flow {i}: no loss, no retry"
        );
        assert_eq!(c(d, "net_send_err"), 0);
    }
    assert_eq!(c(&rx, "duplicate_request"), 0, "nothing arrived twice");

    // The fairness numbers (reported, not asserted: they are the host's).
    let both: Vec<_> = samples
        .iter()
        .filter(|(t, _, _)| *t >= SECOND_AT.as_secs_f64() + 1.0)
        .collect();
    if !both.is_empty() {
        let mean = |i: usize| both.iter().map(|s| s.1[i]).sum::<f64>() / both.len() as f64;
        let (a, b) = (mean(0), mean(1));
        let jain = (a + b).powi(2) / (2.0 * (a * a + b * b));
        let limited = |i: usize| both.iter().filter(|s| s.2[i].is_some()).count();
        eprintln!(
            "shared phase ({} samples): flow 0 {a:.0} Mb/s, flow 1 {b:.0} Mb/s, \
             Jain's index {jain:.3}, marking above {} Mb/s; DCQCN limited the flows in \
             {} and {} samples",
            both.len(),
            BOTTLENECK_BYTES_PER_S * 8 / 1_000_000,
            limited(0),
            limited(1)
        );
    }
    if let Some(path) = std::env::var_os("RXE_CC_PLOT") {
        std::fs::write(&path, svg(&samples)).expect("write the plot");
        eprintln!("plot written to {}", path.to_string_lossy());
    }
    drop(rx_qps);
}

/// Each flow's measured rate over time.
fn svg(samples: &[Sample]) -> String {
    let (w, h, left, bottom) = (720.0, 360.0, 60.0, 40.0);
    let link = (BOTTLENECK_BYTES_PER_S * 8) as f64 / 1e6;
    let t_max = samples.last().map_or(1.0, |s| s.0);
    let top = samples
        .iter()
        .flat_map(|(_, r, _)| [r[0], r[1]])
        .fold(link, f64::max);
    let y_max = (top * 1.1 / 50.0).ceil() * 50.0;
    let x = |t: f64| left + t / t_max * (w - left - 20.0);
    let y = |r: f64| h - bottom - r.min(y_max) / y_max * (h - bottom - 20.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for i in 0..=4 {
        let r = y_max * f64::from(i) / 4.0;
        let (x2, yy, tx, ty) = (w - 20.0, y(r), left - 4.0, y(r) + 4.0);
        out += &format!(
            "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{r:.0}</text>\n"
        );
    }
    let (x2, yh) = (w - 20.0, y(link));
    out += &format!(
        "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{yh:.1}\" y2=\"{yh:.1}\" stroke=\"#999\" \
         stroke-dasharray=\"4 3\"/>\n"
    );
    for (i, color) in [(0usize, "#1f77b4"), (1, "#d62728")] {
        let pts: Vec<String> = samples
            .iter()
            .map(|(t, r, _)| format!("{:.1},{:.1}", x(*t), y(r[i])))
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        let (lx, ly) = (w - 80.0, 20.0 + 16.0 * i as f64);
        out += &format!("<text x=\"{lx}\" y=\"{ly}\" fill=\"{color}\">flow {i}</text>\n");
    }
    let (mx, my, cy) = ((w + left) / 2.0, h - 8.0, h / 2.0);
    out += &format!(
        "<text x=\"{mx}\" y=\"{my}\" text-anchor=\"middle\">time (s)</text>\n\
         <text x=\"14\" y=\"{cy}\" transform=\"rotate(-90 14 {cy})\" text-anchor=\"middle\">\
         Mb/s (dashed: the rule marks CE above {link:.0} Mb/s)</text>\n"
    );
    for i in 0..=6 {
        let t = t_max * f64::from(i) / 6.0;
        let (tx, ty) = (x(t), h - bottom + 16.0);
        out += &format!("<text x=\"{tx:.1}\" y=\"{ty}\" text-anchor=\"middle\">{t:.1}</text>\n");
    }
    out + "</svg>\n"
}
