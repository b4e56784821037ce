//! `rxe ladder` pages in a real browser: headless Chromium, without network,
//! opens the page of a capture with the page's self-test (`#selftest=N`),
//! which walks the whole ladder and clicks frame N, and writes what the DOM
//! showed into `<pre id="selftest">`; `--dump-dom` hands that back. A
//! screenshot is written under target/tmp/ for a person to look at.
//! `RXE_SKIP_BROWSER=1` skips these tests (loudly).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rxe_core::wire::dissect::dissect;
use rxe_pcap::{CaptureReader, PcapWriter};
use serde_json::Value;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration/testdata")
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ladder");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The browser, or `None` when told to skip.
fn chromium() -> Option<String> {
    if std::env::var_os("RXE_SKIP_BROWSER").is_some_and(|v| v == "1") {
        eprintln!("\n*** RXE_SKIP_BROWSER=1: SKIPPING the rxe ladder browser test ***\n");
        return None;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(name.to_string());
        }
    }
    panic!("no Chromium found: install it (scripts/setup.sh: apt-get install chromium) or set RXE_SKIP_BROWSER=1");
}

fn ladder(capture: &Path, html: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_rxe"))
        .args([
            "ladder",
            capture.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Runs the browser on `url` with `args`, with no network: in a network
/// namespace of its own when we may make one (then it has not even a
/// loopback that is up), and with every host name unresolvable and every
/// request sent to a closed loopback port in any case.
fn browse(browser: &str, url: &str, args: &[&str]) -> String {
    // A profile per run: tests run in parallel and Chromium locks its profile.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let profile = out_dir().join(format!("profile-{}-{run}", std::process::id()));
    let own_netns = Command::new("unshare")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut cmd = if own_netns {
        let mut c = Command::new("unshare");
        c.args(["-n", browser]);
        c
    } else {
        Command::new(browser)
    };
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=127.0.0.1:9",
        "--hide-scrollbars",
        "--virtual-time-budget=10000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url);
    let o = cmd.output().expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn selftest(browser: &str, html: &Path, frame: u64) -> Value {
    let url = format!("file://{}#selftest={frame}", html.display());
    let dom = browse(browser, &url, &["--dump-dom"]);
    let start = dom
        .find("<pre id=\"selftest\" data-done=\"1\">")
        .unwrap_or_else(|| {
            panic!(
                "the page's self-test did not finish; DOM starts: {}",
                &dom[..dom.len().min(2000)]
            )
        });
    let body = &dom[start..];
    let body = &body[body.find('>').unwrap() + 1..body.find("</pre>").unwrap()];
    let text = body
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn frames_marked(r: &Value, kind: &str) -> Vec<u64> {
    r["marks"][kind]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The BTH fields of frame `n` of a capture, as the dissector reads them.
fn bth_of(capture: &Path, n: u64) -> (u8, u32, u32) {
    let mut r = CaptureReader::open(capture).unwrap();
    while let Some(f) = r.next_frame().unwrap() {
        if f.number == n {
            let d = dissect(f.link_type, &f.data).unwrap().unwrap();
            let b = d.packet.unwrap().repr.bth;
            return (b.opcode.0, b.dest_qp, b.psn);
        }
    }
    panic!("no frame {n}");
}

fn check_self_contained(html: &Path) {
    let page = std::fs::read_to_string(html).unwrap();
    for bad in [
        "http:",
        "https:",
        "src=",
        "url(",
        "<link",
        "@import",
        "//cdn",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!page.contains(bad), "{} contains {bad:?}", html.display());
    }
    assert!(page.contains("Content-Security-Policy\" content=\"default-src 'none'"));
}

#[test]
fn the_simulator_capture_in_a_browser() {
    let Some(browser) = chromium() else { return };
    let capture = testdata().join("rxe/rxe_sim_faults.pcap");
    let html = out_dir().join("rxe_sim_faults.html");
    ladder(&capture, &html);
    check_self_contained(&html);
    // Frame 45: the NAK after the corrupted WRITE packet.
    let r = selftest(&browser, &html, 45);
    assert_eq!(r["packets"], 48, "{r}");
    assert_eq!(r["seen"], 48, "every RoCE frame has its arrow: {r}");
    assert_eq!(r["missing"].as_array().unwrap().len(), 0);
    let retx = frames_marked(&r, "retx");
    for f in [10, 15, 20, 40, 46, 47] {
        assert!(
            retx.contains(&f),
            "frame {f} not marked retransmitted: {retx:?}"
        );
    }
    assert!(!retx.contains(&1) && !retx.contains(&9));
    assert_eq!(frames_marked(&r, "nak"), vec![9, 45]);
    assert_eq!(frames_marked(&r, "rnr"), vec![19, 22, 25, 28, 31]);
    assert_eq!(frames_marked(&r, "error"), vec![43]);
    assert_eq!(frames_marked(&r, "gap"), vec![3]);
    // Clicking frame 45 shows its byte map with the BTH as the dissector reads it.
    let c = &r["clicked"];
    assert_eq!(c["frame"], 45);
    let (op, qp, psn) = bth_of(&capture, 45);
    assert_eq!(c["bth"]["OpCode"], op.to_string(), "{c}");
    assert_eq!(c["bth"]["DestQP"], qp.to_string(), "{c}");
    assert_eq!(c["bth"]["PSN"], psn.to_string(), "{c}");
    assert_eq!(c["bth"]["P_Key"], "65535");
    assert_eq!(c["icrc"], "verified");
    // An ACK (NAK) frame: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4.
    assert_eq!(c["bytes"], 62);
    assert_eq!(r["resources"], 0, "the page loaded something: {r}");
    let shot = out_dir().join("rxe_sim_faults.png");
    let url = format!("file://{}#frame=45", html.display());
    browse(
        &browser,
        &url,
        &[
            "--window-size=1500,1000",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn a_golden_kernel_capture_in_a_browser() {
    let Some(browser) = chromium() else { return };
    let capture = testdata().join("captures/send_bw.pcap");
    let html = out_dir().join("send_bw.html");
    ladder(&capture, &html);
    check_self_contained(&html);
    let r = selftest(&browser, &html, 155);
    assert_eq!(r["seen"], 758, "{}", r["missing"]);
    // Frame 155: PSN 7162070 again, after a timeout.
    assert!(frames_marked(&r, "retx").contains(&155));
    assert_eq!(frames_marked(&r, "retx").len(), 129);
    let (op, qp, psn) = bth_of(&capture, 155);
    let c = &r["clicked"];
    assert_eq!(c["bth"]["OpCode"], op.to_string(), "{c}");
    assert_eq!(c["bth"]["DestQP"], qp.to_string());
    assert_eq!(c["bth"]["PSN"], psn.to_string());
    assert_eq!(c["icrc"], "verified");
    assert_eq!(r["resources"], 0);
    let shot = out_dir().join("send_bw.png");
    let url = format!("file://{}#frame=155", html.display());
    browse(
        &browser,
        &url,
        &[
            "--window-size=1500,1000",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    eprintln!("screenshot: {}", shot.display());
}

/// 10 000+ packets: send_bw.pcap fourteen times over. The page must show
/// every arrow while keeping the SVG small (rows are windowed).
#[test]
fn ten_thousand_packets_stay_windowed() {
    let Some(browser) = chromium() else { return };
    let big = out_dir().join("send_bw_x14.pcap");
    let mut w = PcapWriter::create(&big).unwrap();
    let mut n = 0u64;
    for round in 0..14u64 {
        let mut r = CaptureReader::open(&testdata().join("captures/send_bw.pcap")).unwrap();
        while let Some(f) = r.next_frame().unwrap() {
            w.write_frame(f.timestamp + Duration::from_secs(round), &f.data)
                .unwrap();
            n += 1;
        }
    }
    w.finish().unwrap();
    assert!(n >= 10_000);
    let html = out_dir().join("send_bw_x14.html");
    ladder(&big, &html);
    let r = selftest(&browser, &html, 5000);
    assert_eq!(r["seen"], n, "{}", r["missing"]);
    let nodes = r["maxNodes"].as_u64().unwrap();
    assert!(nodes < 2_000, "the SVG is not windowed: {nodes} elements");
    eprintln!(
        "{n} packets: at most {nodes} SVG elements; window redraw median {} ms, max {} ms",
        r["drawMedianMs"], r["drawMaxMs"]
    );
}

/// What a capture says by itself, read with the dissector: the RoCE frames,
/// the data packets sent again (a request whose sender, destination QP,
/// opcode and PSN came before), and the NAKs (PSN sequence and others,
/// RNR apart).
fn story_of(capture: &Path) -> (u64, Vec<u64>, Vec<u64>) {
    use rxe_core::wire::aeth::Syndrome;
    let mut r = CaptureReader::open(capture).unwrap();
    let (mut roce, mut retx, mut naks) = (0, Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    while let Some(f) = r.next_frame().unwrap() {
        let Ok(Some(d)) = dissect(f.link_type, &f.data) else {
            continue;
        };
        let Ok(p) = d.packet else { continue };
        roce += 1;
        let b = p.repr.bth;
        match p.repr.ext.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Nak(_)) => naks.push(f.number),
            Some(_) => {}
            None => {
                let src = d.frame.ip.map(|ip| ip.to_vec()).unwrap_or_default();
                if !seen.insert((src, b.dest_qp, b.opcode.0, b.psn)) {
                    retx.push(f.number);
                }
            }
        }
    }
    (roce, retx, naks)
}

/// rxe's own capture (`rxe pingpong rc --pcap`, pcapng) of an RC exchange
/// with the kernel's Soft-RoCE in the reference guest under netem (2 %
/// loss, 5 % reordering, 1 % duplication, both ways): `ibv_rc_pingpong
/// -n 30 -s 8192` against `rxe pingpong rc --chk-echo`. Every RoCE frame
/// has its arrow, every packet the capture shows twice is marked a
/// retransmission or a duplicate, every NAK a NAK.
#[test]
fn a_netem_interop_capture_in_a_browser() {
    let Some(browser) = chromium() else { return };
    let capture = testdata().join("rxe/rxe_netem_interop.pcapng");
    let (roce, retx_want, naks) = story_of(&capture);
    assert!(
        !retx_want.is_empty() && !naks.is_empty(),
        "no faults in the capture"
    );
    let html = out_dir().join("rxe_netem_interop.html");
    ladder(&capture, &html);
    check_self_contained(&html);
    let r = selftest(&browser, &html, naks[0]);
    assert_eq!(
        r["seen"], roce,
        "every RoCE frame has its arrow: {}",
        r["missing"]
    );
    // A packet seen twice is a retransmission, or, when netem duplicated
    // it (an identical copy moments later), a duplicate.
    let retx = frames_marked(&r, "retx");
    let dup = frames_marked(&r, "dup");
    let missed: Vec<_> = retx_want
        .iter()
        .filter(|f| !retx.contains(f) && !dup.contains(f))
        .collect();
    assert!(missed.is_empty(), "sent again but not marked: {missed:?}");
    assert!(
        !retx.is_empty() && !dup.is_empty(),
        "retx {retx:?}, dup {dup:?}"
    );
    let nak = frames_marked(&r, "nak");
    let missed: Vec<_> = naks.iter().filter(|f| !nak.contains(f)).collect();
    assert!(missed.is_empty(), "NAKs not marked: {missed:?}");
    let (op, qp, psn) = bth_of(&capture, naks[0]);
    let c = &r["clicked"];
    assert_eq!(c["bth"]["OpCode"], op.to_string(), "{c}");
    assert_eq!(c["bth"]["DestQP"], qp.to_string());
    assert_eq!(c["bth"]["PSN"], psn.to_string());
    assert_eq!(c["icrc"], "verified");
    assert_eq!(r["resources"], 0);
    let shot = out_dir().join("rxe_netem_interop.png");
    let url = format!("file://{}#frame={}", html.display(), naks[0]);
    browse(
        &browser,
        &url,
        &[
            "--window-size=1500,1000",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    eprintln!("screenshot: {}", shot.display());
}
