//! Debian's unmodified RDMA CM programs (rdmacm-utils, perftest's `-R`)
//! over rxe's drop-in `librdmacm.so.1`, two copies of each under `rxe
//! exec` with their own addresses: the library's symbols against what the
//! binaries import, rping (data checked by rping itself), ucmatose with
//! several connections, rdma_server/rdma_client (the synchronous calls),
//! udaddy (UD over SIDR), rstream and riostream (rsockets and their I/O
//! map: blocking, non-blocking and through rpoll, data checked by the
//! tools), qperf's RC tests over the CM, ib_write_bw -R and
//! ib_send_lat -R, a connection to a port nobody listens on, and a client
//! of our own (`tests/c/exit_connected.c`) that exits connected.
//!
//! Each test has its own addresses in 127.0.112.0/24 and its own CM
//! ports. Without the Debian tools the tests fail, unless
//! RXE_SKIP_IBVERBS_TOOLS=1 says to skip them (loudly).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::tools::{
    build_c, dynamic_symbols, exec, exports, have, lib_dir, serial, versioned_imports,
};
use support::{Finished, Rxe};

const T: Duration = Duration::from_secs(120);

/// A server and its client, with `rxe exec` options and the program after
/// `--` in `server` and `client`: the client starts once the server
/// listens, which the library logs (`RXE_LOG`) on stderr (C stdio buffers
/// the server's own output in a pipe, and a REQ long before `rdma_listen`
/// would be rejected: IBTA REJ reason 8, invalid ServiceID).
fn pair_args(srv: &str, server: &[&str], cli: &str, client: &[&str]) -> (Finished, Finished) {
    let mut s = listening(srv, server);
    let mut a = vec!["exec", "--ip", cli];
    a.extend_from_slice(client);
    let c = Rxe::spawn(&a).finish(T);
    let s = s.finish(T);
    (s, c)
}

/// `rxe exec --ip ADDR ARGS` (options, `--`, the program), once the
/// library has logged that it listens.
fn listening(addr: &str, args: &[&str]) -> Rxe {
    spawn_ready(addr, args, "rxe_verbs::cm::id=info", "CM listening")
}

/// `rxe exec --ip ADDR ARGS` with `RXE_LOG=log`, once `ready` is on its
/// stderr (C stdio buffers the program's own output in a pipe).
fn spawn_ready(addr: &str, args: &[&str], log: &str, ready: &str) -> Rxe {
    let mut a = vec!["exec", "--ip", addr];
    a.extend_from_slice(args);
    let mut s = Rxe::spawn_with_env(&a, &[("RXE_LOG", log)]);
    if !s.wait_for_stderr(ready, Duration::from_secs(30)) {
        let f = s.finish(Duration::from_secs(5));
        panic!("no {ready:?} from {args:?}: {f:#?}");
    }
    s
}

/// [`pair_args`] with programs and their arguments only.
fn pair(
    srv: &str,
    server: (&str, &[&str]),
    cli: &str,
    client: (&str, &[&str]),
) -> (Finished, Finished) {
    fn side<'a>((prog, args): (&'a str, &[&'a str])) -> Vec<&'a str> {
        let mut v = vec!["--", prog];
        v.extend_from_slice(args);
        v
    }
    pair_args(srv, &side(server), cli, &side(client))
}

/// Both ran to the end and printed that their transfers completed (the
/// ucmatose and udaddy way).
fn both_complete(s: &Finished, c: &Finished) {
    assert!(c.ok() && s.ok(), "client {c:#?}\nserver {s:#?}");
    for f in [s, c] {
        let t = f.text();
        assert!(t.contains("data transfers complete"), "{f:#?}");
        assert!(t.contains("return status 0"), "{f:#?}");
    }
}

#[test]
fn the_library_exports_what_rdmacm_binaries_import() {
    let _serial = serial();
    let so = lib_dir().join("libibverbs.so");
    let dump = |p: &Path| dynamic_symbols(p);
    let ours = dump(&so);
    let exported = |name: &str, ver: &str| exports(&ours, name, ver);
    let mut want = Vec::new();
    for b in [
        "rping",
        "ucmatose",
        "udaddy",
        "mckey",
        "rdma_server",
        "rdma_client",
        "rstream",
        "riostream",
        "rdma_xserver",
        "rdma_xclient",
        "rcopy",
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_send_lat",
        "ib_write_lat",
        "ib_atomic_bw",
    ] {
        let p = Path::new("/usr/bin").join(b);
        if !p.exists() {
            continue;
        }
        want.extend(versioned_imports(&dump(&p), "RDMACM_"));
    }
    want.sort();
    want.dedup();
    if want.is_empty() && !have("rping") {
        return;
    }
    assert!(want.len() >= 20, "{want:?}");
    let missing: Vec<_> = want.iter().filter(|(n, v)| !exported(n, v)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Every node of Debian's librdmacm is defined, so that the loader's
    // version check of a program's librdmacm.so.1 needs passes.
    let v = Command::new("readelf").arg("-V").arg(&so).output().unwrap();
    let v = String::from_utf8_lossy(&v.stdout);
    for node in ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"] {
        assert!(v.contains(&format!("Name: {node}")), "no {node} in:\n{v}");
    }
    // Under rxe exec, librdmacm.so.1 is ours: the same object as
    // libibverbs.so.1, and never the system's.
    if Path::new("/usr/bin/rping").exists() {
        let l = exec("127.0.112.9", "ldd", &["/usr/bin/rping"]).finish(T);
        assert!(l.ok(), "{l:#?}");
        let t = l.text();
        assert!(
            t.contains("rxe-lib") && !t.contains("/usr/lib/x86_64-linux-gnu/librdmacm.so.1"),
            "{t}"
        );
    }
}

#[test]
fn rping_between_two_copies_checks_its_data() {
    let _serial = serial();
    if !have("rping") {
        return;
    }
    // Both devices' packets are captured (`rxe exec --pcap`), to read back.
    let dir = std::env::temp_dir().join(format!("rxe-rping-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sp, cp) = (dir.join("server.pcap"), dir.join("client.pcap"));
    let (sp_s, cp_s) = (sp.display().to_string(), cp.display().to_string());
    let server = [
        "--pcap",
        &sp_s,
        "--",
        "rping",
        "-s",
        "-a",
        "127.0.112.1",
        "-p",
        "19301",
        "-C",
        "20",
        "-S",
        "1000",
        "-V",
        "-v",
    ];
    let client = [
        "--pcap",
        &cp_s,
        "--",
        "rping",
        "-c",
        "-a",
        "127.0.112.1",
        "-p",
        "19301",
        "-C",
        "20",
        "-S",
        "1000",
        "-V",
        "-v",
    ];
    let (s, c) = pair_args("127.0.112.1", &server, "127.0.112.2", &client);
    assert!(c.ok() && s.ok(), "client {c:#?}\nserver {s:#?}");
    // rping -V compares each ping it reads back with what it wrote.
    let pings = c
        .stdout
        .iter()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .count();
    assert_eq!(pings, 20, "{c:#?}");
    assert!(c.text().contains("rdma-ping-19: "), "{c:#?}");
    let served = s
        .stdout
        .iter()
        .filter(|l| l.starts_with("server ping data: rdma-ping-"))
        .count();
    assert_eq!(served, 20, "{s:#?}");
    // Every CM MAD the two sent is explained (connection IDs, QPNs, the
    // ServiceID of port 19301) and every ICRC is good.
    let check = support::run(&["dissect", "--check", &cp_s], T);
    assert!(check.ok(), "{check:#?}");
    assert!(check.text().contains(" 0 bad"), "{check:#?}");
    let d = support::run(&["dissect", &cp_s], T);
    assert!(d.ok(), "{d:#?}");
    let t = d.text();
    for want in [
        "CM REQ",
        "svc=0x0000000001064b65 (RDMA_PS_TCP port 19301)",
        "CM REP",
        "CM RTU",
        // The DREP may come after the program has exited: not asked for.
        "CM DREQ",
        "RC RDMA READ Request",
        "RC SEND Only",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
    assert!(!t.contains("icrc=bad"), "{t}");
    // tshark reads them with no malformed packet and no warning.
    if Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        for p in [&sp, &cp] {
            let out = Command::new("tshark")
                .args(["-n", "-r"])
                .arg(p)
                .args(["-Y", "_ws.malformed || _ws.expert.severity >= warning"])
                .output()
                .expect("tshark runs");
            let shown = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && shown.trim().is_empty(),
                "{}: {shown}",
                p.display()
            );
            let all = Command::new("tshark")
                .args(["-n", "-r"])
                .arg(p)
                .args(["-Y", "infiniband.mad"])
                .output()
                .expect("tshark runs");
            let mads = String::from_utf8_lossy(&all.stdout).lines().count();
            assert!(mads >= 4, "tshark sees {mads} MADs in {}", p.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ucmatose_runs_eight_connections_at_once() {
    let _serial = serial();
    if !have("ucmatose") {
        return;
    }
    let (s, c) = pair(
        "127.0.112.3",
        (
            "ucmatose",
            &[
                "-b",
                "127.0.112.3",
                "-p",
                "19302",
                "-c",
                "8",
                "-C",
                "20",
                "-S",
                "4096",
            ],
        ),
        "127.0.112.4",
        (
            "ucmatose",
            &[
                "-s",
                "127.0.112.3",
                "-p",
                "19302",
                "-c",
                "8",
                "-C",
                "20",
                "-S",
                "4096",
            ],
        ),
    );
    both_complete(&s, &c);
}

#[test]
fn rdma_server_and_rdma_client_use_the_synchronous_calls() {
    let _serial = serial();
    if !have("rdma_server") {
        return;
    }
    let (s, c) = pair(
        "127.0.112.5",
        ("rdma_server", &["-s", "127.0.112.5", "-p", "19303"]),
        "127.0.112.6",
        ("rdma_client", &["-s", "127.0.112.5", "-p", "19303"]),
    );
    assert!(c.ok() && s.ok(), "client {c:#?}\nserver {s:#?}");
    assert!(c.text().contains("rdma_client: end 0"), "{c:#?}");
    assert!(s.text().contains("rdma_server: end 0"), "{s:#?}");
}

/// `prog` (rstream or riostream) server and client on 127.0.112.40/41
/// in three modes (`-T` letters: `v` checks every byte received, `a` waits
/// in `rpoll`, `n` sends and receives with MSG_DONTWAIT, retrying EAGAIN),
/// each on its own port from `port`.
fn rsocket_tool_in_three_modes(prog: &str, port: u16, runs: [(&str, &str, &str); 3]) {
    for (i, (size, count, mode)) in runs.into_iter().enumerate() {
        let port = (port + i as u16).to_string();
        let opts = ["-p", &port, "-S", size, "-C", count, "-T", mode, "-T", "v"];
        let mut sargs = vec!["-b", "127.0.112.40"];
        sargs.extend_from_slice(&opts);
        let mut cargs = vec!["-s", "127.0.112.40", "-b", "127.0.112.41"];
        cargs.extend_from_slice(&opts);
        let (s, c) = pair(
            "127.0.112.40",
            (prog, &sargs),
            "127.0.112.41",
            (prog, &cargs),
        );
        assert!(
            c.ok() && s.ok(),
            "{prog} -T {mode}: client {c:#?}\nserver {s:#?}"
        );
        for f in [&s, &c] {
            // The result line: name, bytes, transfers.
            assert!(f.text().contains("custom"), "{prog} -T {mode}: {f:#?}");
        }
    }
}

#[test]
fn rstream_moves_checked_bytes_over_rsockets() {
    let _serial = serial();
    if !have("rstream") {
        return;
    }
    rsocket_tool_in_three_modes(
        "rstream",
        19320,
        [
            ("1000000", "20", "v"),
            ("64", "500", "a"),
            ("100000", "20", "n"),
        ],
    );
}

/// riostream maps its buffer (`riomap`) and the peer `riowrite`s straight
/// into it, the receiver spinning on the buffer's last byte.
#[test]
fn riostream_writes_into_the_peers_mapped_buffer() {
    let _serial = serial();
    if !have("riostream") {
        return;
    }
    rsocket_tool_in_three_modes(
        "riostream",
        19330,
        [
            ("1000000", "10", "v"),
            ("64", "200", "a"),
            ("100000", "20", "n"),
        ],
    );
}

/// qperf over the CM (`-cm1`; its own exchange carries LIDs and no GIDs,
/// so on any RoCE NIC qperf needs the CM): RC SEND, RDMA WRITE and READ
/// bandwidth and latency, and both atomics. qperf's server forks a child
/// per test, each opening the device afresh, and its client makes a
/// send-only QP (no receive queue) for the bandwidth tests.
#[test]
fn qperf_runs_its_rc_tests_over_the_rdma_cm() {
    let _serial = serial();
    if !have("qperf") {
        return;
    }
    let _server = exec("127.0.112.50", "qperf", &["-lp", "19350"]);
    let tests = [
        "rc_bw",
        "rc_lat",
        "rc_rdma_write_bw",
        "rc_rdma_read_bw",
        "rc_rdma_write_lat",
        "rc_compare_swap_mr",
        "rc_fetch_add_mr",
    ];
    // `-to 30`: qperf's 5 s for exchanging results is short for two debug
    // builds on a loaded 2-core machine.
    let mut args = vec![
        "-cm1",
        "-ws",
        "30",
        "-to",
        "30",
        "-lp",
        "19350",
        "-t",
        "1",
        "127.0.112.50",
    ];
    args.extend_from_slice(&tests);
    let c = exec("127.0.112.51", "qperf", &args).finish(T);
    assert!(c.ok(), "{c:#?}");
    let t = c.text();
    for test in tests {
        assert!(t.contains(&format!("{test}:")), "{test} missing: {c:#?}");
    }
    // A number for each: three bandwidths, two latencies, two rates.
    assert_eq!(t.matches("bw  =").count(), 3, "{c:#?}");
    assert_eq!(t.matches("latency  =").count(), 2, "{c:#?}");
    assert_eq!(t.matches("msg_rate  =").count(), 2, "{c:#?}");
    assert!(!t.contains("failed"), "{c:#?}");
}

#[test]
fn udaddy_resolves_ud_services_with_sidr() {
    let _serial = serial();
    if !have("udaddy") {
        return;
    }
    let (s, c) = pair(
        "127.0.112.12",
        ("udaddy", &["-b", "127.0.112.12", "-c", "4", "-C", "20"]),
        "127.0.112.13",
        ("udaddy", &["-s", "127.0.112.12", "-c", "4", "-C", "20"]),
    );
    both_complete(&s, &c);
}

/// `rxe exec --ip ADDR -- mckey ARGS`, once its device has joined the
/// multicast group on the host.
fn mckey_joined(addr: &str, args: &[&str]) -> Rxe {
    let mut a = vec!["--", "mckey"];
    a.extend_from_slice(args);
    spawn_ready(addr, &a, "rxe_net::port=info", "multicast group joined")
}

#[test]
fn mckey_multicasts_to_every_attached_qp_of_every_device() {
    let _serial = serial();
    if !have("mckey") {
        return;
    }
    // Two receiving processes (devices): one with two IDs, so two UD QPs
    // of one device attached to the group, each wanting all 8 messages;
    // then a send-only sender on a third device.
    let group = "239.7.112.20";
    let mut a = mckey_joined(
        "127.0.112.20",
        &["-m", group, "-b", "127.0.112.20", "-c", "2", "-C", "8"],
    );
    let mut b = mckey_joined(
        "127.0.112.21",
        &["-m", group, "-b", "127.0.112.21", "-C", "8"],
    );
    let mut args = vec!["exec", "--ip", "127.0.112.22", "--pcap"];
    let dir = std::env::temp_dir().join(format!("rxe-mckey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("sender.pcap");
    let pcap_s = pcap.to_str().unwrap().to_string();
    args.push(&pcap_s);
    args.extend_from_slice(&[
        "--",
        "mckey",
        "-m",
        group,
        "-b",
        "127.0.112.22",
        "-s",
        "-o",
        "-C",
        "8",
    ]);
    let s = Rxe::spawn(&args).finish(T);
    let (a, b) = (a.finish(T), b.finish(T));
    for f in [&s, &a, &b] {
        assert!(f.ok(), "{f:#?}");
        let t = f.text();
        assert!(t.contains("joined dgid: ::ffff:239.7.112.20"), "{f:#?}");
        assert!(t.contains("data transfers complete"), "{f:#?}");
        assert!(t.contains("return status 0"), "{f:#?}");
    }
    // On the wire: UD SENDs to the group's address and QPN 0xFFFFFF, with
    // the CM's Q_Key, as rxe dissect reads them.
    let d = Command::new(env!("CARGO_BIN_EXE_rxe"))
        .args(["dissect", &pcap_s])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&d.stdout);
    let sends = text.matches("239.7.112.20").count();
    assert!(sends >= 8, "{text}");
    assert!(text.contains("0xffffff"), "{text}");
    assert!(text.to_lowercase().contains("0x1234567"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perftest_runs_over_the_rdma_cm() {
    let _serial = serial();
    if !have("ib_write_bw") {
        return;
    }
    for (tool, extra) in [
        ("ib_write_bw", &["-s", "65536", "-n", "500"][..]),
        ("ib_send_lat", &["-s", "64", "-n", "500"][..]),
        ("ib_read_bw", &["-s", "65536", "-n", "300"][..]),
    ] {
        let mut sargs = vec!["-R", "-F", "-p", "19304"];
        sargs.extend_from_slice(extra);
        let mut cargs = sargs.clone();
        cargs.push("127.0.112.7");
        let (s, c) = pair("127.0.112.7", (tool, &sargs), "127.0.112.8", (tool, &cargs));
        assert!(c.ok() && s.ok(), "{tool}: client {c:#?}\nserver {s:#?}");
        let t = c.text();
        assert!(t.contains("Data ex. method : rdma_cm"), "{tool}: {t}");
        // The result row: the size, then the iteration count.
        let row = t
            .lines()
            .find(|l| l.split_whitespace().next() == Some(extra[1]))
            .unwrap_or_else(|| panic!("{tool}: no result row in {t}"));
        assert_eq!(
            row.split_whitespace().nth(1),
            Some(extra[3]),
            "{tool}: {row}"
        );
    }
}

#[test]
fn a_connection_to_a_port_nobody_listens_on_is_rejected() {
    let _serial = serial();
    if !have("rping") {
        return;
    }
    // A device on .10 that listens on nothing but runs its CM (every
    // librdmacm program starts it): ucmatose's server on another port.
    let s = listening(
        "127.0.112.10",
        &["--", "ucmatose", "-b", "127.0.112.10", "-p", "19305"],
    );
    let c = exec(
        "127.0.112.11",
        "rping",
        &["-c", "-a", "127.0.112.10", "-p", "19306", "-C", "1"],
    )
    .finish(T);
    drop(s);
    assert!(!c.ok(), "{c:#?}");
    let all = format!("{}\n{}", c.text(), c.stderr);
    // rping prints the event and its status: the REJ's reason, 8
    // (invalid ServiceID).
    assert!(all.contains("RDMA_CM_EVENT_REJECTED, error 8"), "{all}");
}

#[test]
fn a_client_that_exits_connected_still_disconnects_its_peer() {
    let _serial = serial();
    let Some((dir, exe)) = build_c("exit_connected") else {
        return;
    };
    let exe = exe.to_str().unwrap();
    // The client returns from main with its connection up: no
    // rdma_disconnect, no destroy. The library's exit hook sends the DREQ
    // the kernel's CM would send once such a program has gone.
    let mut s = listening(
        "127.0.112.60",
        &["--", exe, "server", "127.0.112.60", "19307"],
    );
    let c = exec("127.0.112.61", exe, &["client", "127.0.112.60", "19307"]).finish(T);
    let s = s.finish(T);
    assert!(c.ok() && c.stdout == ["OK"], "client {c:#?}");
    assert!(s.ok() && s.stdout == ["OK"], "server {s:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
