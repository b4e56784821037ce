//! `rxe perf` against itself: two processes on one host, each with its own
//! device on its own loopback address, speaking perftest's TCP exchange;
//! exit codes, output tables, and (with --check) every byte and atomic
//! result checked by the receiving side.
//!
//! Each test has its own addresses (127.0.111.x to 127.0.115.x) and TCP
//! port (28801 up): tests run in parallel. Every wait is bounded and a
//! child still running when a test fails is killed.

mod support;

use std::time::Duration;

use support::{Finished, Rxe};

const T: Duration = Duration::from_secs(90);

/// Runs a server on `127.0.111.<2n+1>` and a client on `.<2n+2>`, TCP port
/// `28801 + n`, both with `args`; returns (server, client).
fn pair(n: u16, args: &[&str]) -> (Finished, Finished) {
    pair_split(n, args, args)
}

fn pair_split(n: u16, srv_args: &[&str], cli_args: &[&str]) -> (Finished, Finished) {
    pair_timeout(n, "30", srv_args, cli_args)
}

/// As [`pair_split`], with `--timeout secs` on both sides.
fn pair_timeout(n: u16, secs: &str, srv_args: &[&str], cli_args: &[&str]) -> (Finished, Finished) {
    let srv = format!("127.0.111.{}", 2 * n + 1);
    let cli = format!("127.0.111.{}", 2 * n + 2);
    let port = (28801 + n).to_string();
    let mut sargs = vec!["perf", "--ip", &srv, "-p", &port, "--timeout", secs];
    sargs.extend_from_slice(srv_args);
    let mut server = Rxe::spawn(&sargs);
    server.wait_for_line("* Waiting for client to connect... *", T);
    let mut cargs = vec!["perf", "--ip", &cli, "-p", &port, "--timeout", secs];
    cargs.extend_from_slice(cli_args);
    cargs.push(&srv);
    let mut client = Rxe::spawn(&cargs);
    let c = client.finish(T);
    let s = server.finish(T);
    (s, c)
}

/// The row under the table header, if any.
fn row(f: &Finished, header_start: &str) -> Option<String> {
    let i = f.stdout.iter().position(|l| l.starts_with(header_start))?;
    f.stdout.get(i + 1).cloned()
}

/// Both ended well; each printed its title, one local and one remote
/// address per QP with the other side's GID, and a table row for
/// `size` x `iters` (or, `None`, no row).
fn check_side(f: &Finished, title: &str, me: &str, peer: &str, qps: usize) {
    assert!(f.ok(), "{f:#?}");
    assert!(
        f.stdout.iter().any(|l| l.trim() == title),
        "no {title:?}: {f:#?}"
    );
    let locals = f
        .stdout
        .iter()
        .filter(|l| l.starts_with(" local address: LID 0000 QPN 0x"))
        .count();
    let remotes = f
        .stdout
        .iter()
        .filter(|l| l.starts_with(" remote address: LID 0000 QPN 0x"))
        .count();
    assert_eq!((locals, remotes), (qps, qps), "{f:#?}");
    let gid = |ip: &str| {
        let d: Vec<String> = ip
            .split('.')
            .map(|o| format!("{:02}", o.parse::<u8>().unwrap()))
            .collect();
        format!(
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:{}",
            d.join(":")
        )
    };
    assert!(f.stdout.contains(&gid(me)), "{f:#?}");
    assert!(f.stdout.contains(&gid(peer)), "{f:#?}");
}

fn bw_fields(r: &str) -> (u64, u64, f64, f64, f64) {
    let v: Vec<&str> = r.split_whitespace().collect();
    assert_eq!(v.len(), 5, "{r:?}");
    (
        v[0].parse().unwrap(),
        v[1].parse().unwrap(),
        v[2].parse().unwrap(),
        v[3].parse().unwrap(),
        v[4].parse().unwrap(),
    )
}

const BW_HEADER: &str = " #bytes     #iterations    BW peak[MB/sec]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]";

/// A bandwidth test of the RDMA verbs: the server prints the client's
/// report, so both rows are the same.
fn rdma_bw(n: u16, test: &[&str], title: &str, size: u64, iters: u64, qps: usize) {
    let mut args = test.to_vec();
    args.push("--check");
    let (s, c) = pair(n, &args);
    let (srv, cli) = (
        format!("127.0.111.{}", 2 * n + 1),
        format!("127.0.111.{}", 2 * n + 2),
    );
    check_side(&s, title, &srv, &cli, qps);
    check_side(&c, title, &cli, &srv, qps);
    let cr = row(&c, BW_HEADER).expect("client table");
    let sr = row(&s, BW_HEADER).expect("server table");
    assert_eq!(cr, sr, "the server prints the client's report");
    let (b, i, peak, avg, rate) = bw_fields(&cr);
    assert_eq!((b, i), (size, iters * qps as u64), "{cr}");
    assert!(avg > 0.0 && rate > 0.0 && peak >= 0.0, "{cr}");
    // The client asks for completions; it says how it was set up.
    assert!(c
        .stdout
        .iter()
        .any(|l| l.starts_with(" TX depth        : ")));
    // A WRITE or atomic server checked its buffer at the end, and says so.
    if matches!(test[0], "write" | "atomic") {
        assert!(
            s.stdout
                .iter()
                .any(|l| l.starts_with(" Data check: each of ")),
            "{s:#?}"
        );
    }
}

#[test]
fn write_bw_checked() {
    rdma_bw(
        0,
        &["write", "-n", "300", "-s", "4096"],
        "RDMA_Write BW Test",
        4096,
        300,
        1,
    );
}

#[test]
fn read_bw_checked() {
    rdma_bw(
        1,
        &["read", "-n", "300", "-s", "10000"],
        "RDMA_Read BW Test",
        10000,
        300,
        1,
    );
}

#[test]
fn atomic_fetch_add_checked() {
    rdma_bw(
        2,
        &["atomic", "-n", "500"],
        "Atomic FETCH_AND_ADD BW Test",
        8,
        500,
        1,
    );
}

#[test]
fn atomic_cmp_swap_checked() {
    rdma_bw(
        3,
        &["atomic", "--cmp-swap", "-n", "500"],
        "Atomic CMP_AND_SWAP BW Test",
        8,
        500,
        1,
    );
}

#[test]
fn several_qps_small_writes_checked() {
    // 100-byte WRITEs walk the server's buffer in 128-byte steps, on 3 QPs.
    rdma_bw(
        4,
        &["write", "-q", "3", "-s", "100", "-n", "400", "-t", "16"],
        "RDMA_Write BW Test",
        100,
        400,
        3,
    );
}

/// A thousand QPs on each side (the "1 to 1000 QPs"), each
/// writing a few checked messages: setup, the key exchange and the data
/// path hold at that scale (speed is measured by benchmarks, not here).
#[test]
fn a_thousand_qps_write_checked() {
    rdma_bw(
        20,
        &["write", "-q", "1000", "-s", "64", "-n", "5", "-t", "4"],
        "RDMA_Write BW Test",
        64,
        5,
        1000,
    );
}

#[test]
fn send_bw_checked() {
    let (s, c) = pair(
        5,
        &["send", "-n", "400", "-s", "3000", "-q", "2", "--check"],
    );
    check_side(&s, "Send BW Test", "127.0.111.11", "127.0.111.12", 2);
    check_side(&c, "Send BW Test", "127.0.111.12", "127.0.111.11", 2);
    // Each side measured for itself; the receiver has no peak.
    let (b, i, _, avg, _) = bw_fields(&row(&c, BW_HEADER).unwrap());
    assert_eq!((b, i), (3000, 800));
    assert!(avg > 0.0);
    let (b, i, peak, avg, _) = bw_fields(&row(&s, BW_HEADER).unwrap());
    assert_eq!((b, i, peak), (3000, 800, 0.0));
    assert!(avg > 0.0);
    assert!(s
        .stdout
        .iter()
        .any(|l| l.starts_with(" RX depth        : ")));
}

fn lat_fields(r: &str) -> Vec<f64> {
    let v: Vec<f64> = r.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v.len(), 9, "{r:?}");
    v
}

/// A latency test: rows with size, iterations and ordered statistics.
fn check_lat_row(f: &Finished, size: f64, iters: f64) {
    let r = row(f, LAT_HEADER).unwrap_or_else(|| panic!("no table: {f:#?}"));
    let v = lat_fields(&r);
    assert_eq!((v[0], v[1]), (size, iters), "{r}");
    let (min, max, typ, avg, p99, p999) = (v[2], v[3], v[4], v[5], v[7], v[8]);
    assert!(min > 0.0 && min <= typ && typ <= max, "{r}");
    assert!(min <= avg && avg <= max, "{r}");
    assert!(p99 <= p999 && p999 <= max, "{r}");
}

#[test]
fn write_lat_checked() {
    let (s, c) = pair(6, &["write", "--lat", "-n", "300", "-s", "1500", "--check"]);
    check_side(
        &s,
        "RDMA_Write Latency Test",
        "127.0.111.13",
        "127.0.111.14",
        1,
    );
    check_side(
        &c,
        "RDMA_Write Latency Test",
        "127.0.111.14",
        "127.0.111.13",
        1,
    );
    check_lat_row(&c, 1500.0, 300.0);
    check_lat_row(&s, 1500.0, 300.0);
}

#[test]
fn read_lat_checked() {
    let (s, c) = pair(7, &["read", "--lat", "-n", "300", "-s", "5000", "--check"]);
    check_side(
        &s,
        "RDMA_Read Latency Test",
        "127.0.111.15",
        "127.0.111.16",
        1,
    );
    check_side(
        &c,
        "RDMA_Read Latency Test",
        "127.0.111.16",
        "127.0.111.15",
        1,
    );
    check_lat_row(&c, 5000.0, 300.0);
    // As ib_read_lat's server, it measures nothing.
    assert!(row(&s, LAT_HEADER).is_none(), "{s:#?}");
}

#[test]
fn send_lat_checked() {
    let (s, c) = pair(8, &["send", "--lat", "-n", "300", "--check"]);
    check_side(&s, "Send Latency Test", "127.0.111.17", "127.0.111.18", 1);
    check_side(&c, "Send Latency Test", "127.0.111.18", "127.0.111.17", 1);
    check_lat_row(&c, 2.0, 300.0);
    check_lat_row(&s, 2.0, 300.0);
}

#[test]
fn same_reads_against_a_server_that_does_not_check() {
    // The client cannot know the server's bytes, only that every READ of a
    // place returns the same: true of a patterned buffer, and of a buffer
    // of zeros, which it flags as proving little.
    let (s, c) = pair_split(
        13,
        &["read", "-n", "60", "-s", "3000", "--check"],
        &["read", "-n", "60", "-s", "3000", "--chk-same-reads"],
    );
    assert!(s.ok() && c.ok(), "{s:#?} {c:#?}");
    let note = c.stdout.iter().find(|l| l.starts_with(" Data check: "));
    assert_eq!(
        note.map(String::as_str),
        Some(" Data check: 60 READs, each the same bytes as the first READ of its position (1 positions)"),
        "{c:#?}"
    );
    let (s, c) = pair_split(
        14,
        &["read", "-n", "20", "-s", "3000"],
        &["read", "-n", "20", "-s", "3000", "--chk-same-reads"],
    );
    assert!(s.ok() && c.ok(), "{s:#?} {c:#?}");
    assert!(
        c.stdout
            .iter()
            .any(|l| l.ends_with("so this proves little")),
        "{c:#?}"
    );
}

#[test]
fn all_sizes() {
    // -a: 2 B to 8 MiB, one row each on the client; the server prints the
    // client's last report.
    let (s, c) = pair_split(15, &["write", "-a", "-n", "5"], &["write", "-a", "-n", "5"]);
    assert!(s.ok() && c.ok(), "{s:#?} {c:#?}");
    let sizes: Vec<u64> = c
        .stdout
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let want: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, want, "{c:#?}");
    let last = row(&s, BW_HEADER).expect("server table");
    assert!(last.starts_with(" 8388608 "), "{last}");
    // ib_write_lat -a: both sides measure every size.
    let (s, c) = pair(16, &["write", "--lat", "-a", "-n", "5"]);
    for f in [&s, &c] {
        assert!(f.ok(), "{f:#?}");
        let sizes: Vec<u64> = f
            .stdout
            .iter()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        assert_eq!(sizes, want, "{f:#?}");
    }
}

#[test]
fn gbits_report() {
    let (s, c) = pair(9, &["write", "-n", "100", "-s", "65536", "--report_gbits"]);
    assert!(s.ok() && c.ok(), "{s:#?} {c:#?}");
    let h = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
    assert!(c.stdout.iter().any(|l| l == h), "{c:#?}");
    let (b, i, _, avg, rate) = bw_fields(&row(&c, h).unwrap());
    assert_eq!((b, i), (65536, 100));
    // Gb/s = messages/s x bytes x 8 / 10^9, as the two columns agree.
    let from_rate = rate * 1e6 * 65536.0 * 8.0 / 1e9;
    assert!(
        (avg - from_rate).abs() <= 0.02 + avg * 0.01,
        "{avg} vs {from_rate}"
    );
}

#[test]
fn checks_catch_wrong_data() {
    // A server that does not fill its buffer: the client's READs see zeros.
    let (s, c) = pair_split(
        10,
        &["read", "-n", "50", "-s", "256"],
        &["read", "-n", "50", "-s", "256", "--check"],
    );
    assert!(!c.ok(), "{c:#?}");
    assert!(c.stderr.contains("READ 0"), "{c:#?}");
    assert!(!s.ok(), "the server sees the client leave: {s:#?}");
    // A client that sends its buffer as it is: the server's check fails.
    let (s, c) = pair_split(
        11,
        &["send", "-n", "50", "-s", "256", "--check"],
        &["send", "-n", "50", "-s", "256"],
    );
    assert!(!s.ok(), "{s:#?}");
    assert!(s.stderr.contains("data check failed"), "{s:#?}");
    let _ = c;
}

#[test]
fn mismatched_tests_fail_in_bounded_time() {
    // A WRITE server and a SEND client disagree on the exchange (one
    // barrier more before the run for SEND) and on the traffic (SENDs to a
    // QP with no receives); both must end, not hang, and not both claim
    // success.
    let (s, c) = pair_timeout(12, "5", &["write", "-n", "50"], &["send", "-n", "50"]);
    assert!(!s.ok() || !c.ok(), "{s:#?} {c:#?}");
}

/// `--busy` on a WRITE server: it polls while it waits (its own thread
/// takes the device's turns), and the test still ends with the client's
/// report and a server that checked every byte it was written.
#[test]
fn write_bw_with_a_busy_polling_server() {
    let (s, c) = pair_split(
        17,
        &["write", "-n", "300", "-s", "65536", "--check", "--busy"],
        &["write", "-n", "300", "-s", "65536", "--check"],
    );
    let (srv, cli) = ("127.0.111.35", "127.0.111.36");
    check_side(&s, "RDMA_Write BW Test", srv, cli, 1);
    check_side(&c, "RDMA_Write BW Test", cli, srv, 1);
    let cr = row(&c, BW_HEADER).expect("client table");
    assert_eq!(row(&s, BW_HEADER).as_deref(), Some(cr.as_str()));
    assert_eq!(bw_fields(&cr).1, 300, "{cr}");
    assert!(
        s.stdout
            .iter()
            .any(|l| l.starts_with(" Data check: each of ")),
        "{s:#?}"
    );
}
