//! `rxe pingpong` between two processes on one host, each with its own
//! device on its own loopback address, as a user runs it: exit codes,
//! output lines, and (with -c) every message's bytes checked.
//!
//! Each test has its own addresses and TCP port: tests run in parallel.
//! This crate's tests keep to 127.0.101.0 - 127.0.107.255 (and 127.0.0.1
//! for `rxe info`), away from the addresses other crates' tests use.

mod support;

use std::time::Duration;

use support::{Finished, Rxe};

const T: Duration = Duration::from_secs(60);

/// Runs a server on `srv` and a client on `cli`, both with `extra`
/// options; returns (server, client).
fn pair(kind: &str, srv: &str, cli: &str, port: u16, extra: &[&str]) -> (Finished, Finished) {
    pair_split(kind, srv, cli, port, extra, extra)
}

fn pair_split(
    kind: &str,
    srv: &str,
    cli: &str,
    port: u16,
    srv_extra: &[&str],
    cli_extra: &[&str],
) -> (Finished, Finished) {
    let port = port.to_string();
    let mut sargs = vec!["pingpong", kind, "--ip", srv, "-p", &port];
    sargs.extend_from_slice(srv_extra);
    let mut server = Rxe::spawn(&sargs);
    server.wait_for_line("  local address:", T);
    let mut cargs = vec!["pingpong", kind, "--ip", cli, "-p", &port];
    cargs.extend_from_slice(cli_extra);
    cargs.push(srv);
    let mut client = Rxe::spawn(&cargs);
    let c = client.finish(T);
    let s = server.finish(T);
    (s, c)
}

/// Both sides ended well and printed what the real tools print.
fn check_run(f: &Finished, me: &str, peer: &str, size: u64, iters: u64, qps: usize, ud: bool) {
    assert!(f.ok(), "{f:#?}");
    let sep = if ud { ":" } else { "," };
    let locals: Vec<&String> = f
        .stdout
        .iter()
        .filter(|l| l.starts_with("  local address:  LID 0x0000, QPN 0x"))
        .collect();
    let remotes: Vec<&String> = f
        .stdout
        .iter()
        .filter(|l| l.starts_with("  remote address: LID 0x0000, QPN 0x"))
        .collect();
    assert_eq!(locals.len(), qps, "{f:#?}");
    assert_eq!(remotes.len(), qps, "{f:#?}");
    for l in locals {
        assert!(
            l.ends_with(&format!("{sep} GID ::ffff:{me}")),
            "{l:?} in {f:#?}"
        );
    }
    for r in remotes {
        assert!(r.ends_with(&format!(", GID ::ffff:{peer}")), "{r:?}");
    }
    let bytes = size * iters * 2;
    let a = f
        .stdout
        .iter()
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("no throughput line: {f:#?}"));
    assert!(a.starts_with(&format!("{bytes} bytes in ")), "{a}");
    assert!(a.ends_with(" Mbit/sec"), "{a}");
    let b = f.stdout.iter().find(|l| l.contains(" iters in ")).unwrap();
    assert!(b.starts_with(&format!("{iters} iters in ")), "{b}");
    assert!(b.ends_with(" usec/iter"), "{b}");
    // "N bytes in S.SS seconds = R.RR Mbit/sec"
    let secs = a.split(" in ").nth(1).unwrap().split(' ').next().unwrap();
    assert_eq!(secs.split('.').nth(1).map(str::len), Some(2), "{a}");
}

/// One run per (size, QPs, options), each with -c and 20 iterations.
type Sizes<'a> = &'a [(u64, usize, &'a [&'a str])];

fn run_sizes(kind: &str, srv: &str, cli: &str, port: u16, sizes: Sizes<'_>) {
    let ud = kind == "ud";
    for (size, qps, more) in sizes {
        let s = size.to_string();
        let mut extra = vec!["-c", "-n", "20", "-s", &s, "--timeout", "20"];
        extra.extend_from_slice(more);
        let (srv_out, cli_out) = pair(kind, srv, cli, port, &extra);
        check_run(&srv_out, srv, cli, *size, 20, *qps, ud);
        check_run(&cli_out, cli, srv, *size, 20, *qps, ud);
    }
}

#[test]
fn rc_pingpong_1b_4k_64k() {
    run_sizes(
        "rc",
        "127.0.101.1",
        "127.0.101.2",
        28601,
        &[(1, 1, &[]), (4096, 1, &["-e"]), (65536, 1, &["-m", "4096"])],
    );
}

#[test]
fn uc_pingpong_1b_4k_64k() {
    run_sizes(
        "uc",
        "127.0.102.1",
        "127.0.102.2",
        28602,
        &[
            (1, 1, &["-e"]),
            (4096, 1, &[]),
            (65536, 1, &["-e", "-m", "2048"]),
        ],
    );
}

#[test]
fn ud_pingpong_up_to_the_mtu() {
    // Loopback's MTU gives an IB MTU of 4096: UD messages up to that.
    run_sizes(
        "ud",
        "127.0.103.1",
        "127.0.103.2",
        28603,
        &[(1, 1, &[]), (2048, 1, &["-e"]), (4096, 1, &[])],
    );
}

#[test]
fn srq_pingpong_1b_4k_64k() {
    run_sizes(
        "srq",
        "127.0.104.1",
        "127.0.104.2",
        28604,
        &[
            (1, 4, &["-q", "4"]),
            (4096, 16, &["-e"]),
            (65536, 2, &["-q", "2", "-r", "64"]),
        ],
    )
}

#[test]
fn srq_default_is_16_qps() {
    let (s, c) = pair(
        "srq",
        "127.0.104.11",
        "127.0.104.12",
        28605,
        &["-c", "-n", "40", "-s", "64", "--timeout", "20"],
    );
    check_run(&s, "127.0.104.11", "127.0.104.12", 64, 40, 16, false);
    check_run(&c, "127.0.104.12", "127.0.104.11", 64, 40, 16, false);
}

#[test]
fn a_wrong_payload_fails_the_check() {
    // The client does not write patterns (it sends 0x7b bytes, as the real
    // tool); the server checks and must refuse the first message.
    let (s, c) = pair_split(
        "rc",
        "127.0.105.1",
        "127.0.105.2",
        28606,
        &["-c", "-n", "5", "--timeout", "5"],
        &["-n", "5", "--timeout", "3"],
    );
    assert!(!s.ok(), "{s:#?}");
    assert!(s.stderr.contains("data check failed"), "{s:#?}");
    assert!(s.stderr.contains("message 0 from the client"), "{s:#?}");
    assert!(!c.ok(), "{c:#?}");
}

#[test]
fn an_echo_check_refuses_a_peer_that_does_not_echo() {
    // --chk-echo expects the real tool, which sends back what it received;
    // an rxe server with -c sends its own pattern instead.
    let (s, c) = pair_split(
        "rc",
        "127.0.105.51",
        "127.0.105.52",
        28610,
        &["-c", "-n", "5", "--timeout", "3"],
        &["--chk-echo", "-n", "5", "--timeout", "5"],
    );
    assert!(!c.ok(), "{c:#?}");
    assert!(
        c.stderr.contains("message 0 from the server on QP 0x"),
        "{c:#?}"
    );
    assert!(
        c.stderr.contains("(expected our message 0 sent back)"),
        "{c:#?}"
    );
    assert!(!s.ok(), "{s:#?}");
}

#[test]
fn counters_at_the_end() {
    let (s, c) = pair(
        "rc",
        "127.0.105.71",
        "127.0.105.72",
        28611,
        &["-n", "7", "-s", "3000", "--counters"],
    );
    for f in [&s, &c] {
        assert!(f.ok(), "{f:#?}");
        let line = f
            .stdout
            .iter()
            .find(|l| l.starts_with(" rxe counters: "))
            .unwrap_or_else(|| panic!("no counters line: {f:#?}"));
        // Seven messages in, seven out, each of 3 packets at MTU 1024.
        assert!(line.contains(" rdma_recvs 7 "), "{line}");
        assert!(line.contains(" rdma_sends 7 "), "{line}");
        assert!(!line.contains(" 0 "), "only nonzero counters: {line}");
    }
}

/// `--pcap`: each side records every packet its device sends and
/// receives, the server as classic pcap, the client as pcapng (chosen by
/// the name); `rxe dissect --check` reads both files, every packet parses
/// and its ICRC verifies, and each side saw the other's 7 SENDs of 3
/// packets and its own.
#[test]
fn each_side_captures_its_packets_live() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (sp, cp) = (
        dir.join(format!("pingpong-srv-{}.pcap", std::process::id())),
        dir.join(format!("pingpong-cli-{}.pcapng", std::process::id())),
    );
    let (s, c) = pair_split(
        "rc",
        "127.0.105.81",
        "127.0.105.82",
        28612,
        &["-n", "7", "-s", "3000", "--pcap", sp.to_str().unwrap()],
        &["-n", "7", "-s", "3000", "--pcap", cp.to_str().unwrap()],
    );
    assert!(s.ok() && c.ok(), "{s:#?} {c:#?}");
    for path in [&sp, &cp] {
        let check = support::run(&["dissect", "--check", path.to_str().unwrap()], T);
        assert!(check.ok(), "{check:#?}");
        assert!(
            check.stdout.iter().any(|l| l.ends_with(" 0 bad")),
            "{check:#?}"
        );
        let f = support::run(&["dissect", path.to_str().unwrap()], T);
        assert!(f.ok(), "{f:#?}");
        let sends = f.stdout.iter().filter(|l| l.contains("RC SEND")).count();
        // 7 messages each way, 3 packets each (MTU 1024).
        assert_eq!(sends, 42, "{:#?}", f.stdout);
        assert!(
            f.stdout.iter().any(|l| l.contains("ACK")),
            "{:#?}",
            f.stdout
        );
    }
    let magic = |p: &std::path::Path| std::fs::read(p).unwrap()[..4].to_vec();
    assert_eq!(
        magic(&cp),
        [0x0a, 0x0d, 0x0d, 0x0a],
        "the client's is pcapng"
    );
    assert_ne!(magic(&sp), [0x0a, 0x0d, 0x0d, 0x0a], "the server's is pcap");
}

#[test]
fn mismatched_qp_counts_are_refused() {
    let (s, c) = pair_split(
        "srq",
        "127.0.105.11",
        "127.0.105.12",
        28607,
        &["-q", "4", "--timeout", "10"],
        &["-q", "3", "--timeout", "10"],
    );
    assert!(!s.ok() && s.stderr.contains("same -q"), "{s:#?}");
    assert!(!c.ok(), "{c:#?}");
}

#[test]
fn no_server_is_a_clear_error() {
    let f = support::run(
        &[
            "pingpong",
            "rc",
            "--ip",
            "127.0.105.21",
            "-p",
            "28608",
            "--timeout",
            "5",
            "127.0.105.22",
        ],
        T,
    );
    assert!(!f.ok());
    assert!(
        f.stderr
            .starts_with("rxe: couldn't connect to 127.0.105.22:28608"),
        "{f:#?}"
    );
    assert_eq!(f.stderr.lines().count(), 1, "{f:#?}");
}

#[test]
fn server_without_client_times_out() {
    let f = support::run(
        &[
            "pingpong",
            "uc",
            "--ip",
            "127.0.105.31",
            "-p",
            "28609",
            "--timeout",
            "0.5",
        ],
        T,
    );
    assert!(!f.ok());
    assert!(f.stderr.contains("no client connected"), "{f:#?}");
}
