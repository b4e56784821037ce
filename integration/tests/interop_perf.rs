//! `rxe perf` against perftest 4.5's own `ib_*_bw` and `ib_*_lat` on the
//! kernel's Soft-RoCE in the reference guest, in both directions. Both exit
//! statuses must be 0, and each side must print its result table. perftest
//! does not check data; rxe checks what it can see of it: as ib_read_bw's
//! client every READ (`--chk-same-reads`), as ib_atomic_bw's FETCH_ADD
//! server that every word ends at its first value plus the number of adds
//! to it, each applied exactly once (`--check`), and in ib_write_lat each
//! side waits for the peer's exact iteration number in the byte it polls.
//!
//! Ignored by a plain `cargo test`; `scripts/interop.sh` runs them.

use std::time::Duration;

use rxe_integration::peer::*;

/// perftest's `tool` with `opts` against `rxe perf ours_args`, guest as
/// server then as client.
fn both_ways(tool: &str, opts: &str, ours: &str) -> [String; 2] {
    both_ways_on(tool, opts, ours, HOST_IP, 1)
}

/// As [`both_ways`], with rxe's device on `our_ip` and perftest on its GID
/// `guest_gid` (1: IPv4, 2: IPv6). The TCP side channel stays on IPv4, as
/// perftest's does. Returns the clients' outputs: rxe's, then the guest's.
fn both_ways_on(tool: &str, opts: &str, ours: &str, our_ip: &str, guest_gid: u8) -> [String; 2] {
    if !require_peer() {
        return Default::default();
    }
    let _turn = exclusive();
    // As the client of ib_read_bw, rxe checks the data it reads: the
    // server's buffer is random and does not change, so every READ of a
    // position must return the bytes of the first. As the server of
    // ib_atomic_bw's FETCH_ADD (perftest adds 1), rxe knows what its words
    // held and checks that each add was applied exactly once.
    let bw = !ours.contains("--lat");
    let client_checks = bw && ours.starts_with("read");
    let server_checks = bw && ours.starts_with("atomic") && !ours.contains("--cmp-swap");
    let args = |server: bool| -> Vec<String> {
        let mut v = vec!["perf".to_string()];
        v.extend(ours.split_whitespace().map(str::to_string));
        v.extend(["--ip", our_ip, "--timeout", "150"].map(str::to_string));
        if server && server_checks {
            v.push("--check".to_string());
        }
        if !server {
            if client_checks {
                v.push("--chk-same-reads".to_string());
            }
            v.push(GUEST_IP.to_string());
        }
        v
    };
    let job = GuestJob::start(&format!("{tool} -d rxe0 -x {guest_gid} -F {opts}"));
    assert!(
        guest_waitport(18515, 30),
        "the guest's {tool} did not listen"
    );
    let (rs, client_out) = finish(rxe_in_netns(&args(false), 200));
    let (gs, gout) = job.wait(200);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, guest server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{client_out}\n--- guest:\n{gout}"
    );
    assert!(client_out.contains("#bytes"), "{client_out}");
    if client_checks {
        assert!(client_out.contains(" Data check: "), "{client_out}");
        assert!(!client_out.contains("uniform"), "{client_out}");
    }
    let server = rxe_in_netns(&args(true), 200);
    assert!(
        netns_waitport(18515, Duration::from_secs(30)),
        "rxe's server did not listen"
    );
    let (gs, gout) = guest_exec(
        &format!("{tool} -d rxe0 -x {guest_gid} -F {opts} {HOST_IP}"),
        200,
    );
    let (rs, rout) = finish(server);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, rxe server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{rout}\n--- guest:\n{gout}"
    );
    assert!(gout.contains("#bytes"), "{gout}");
    if server_checks {
        assert!(rout.contains("applied exactly once"), "{rout}");
    }
    [client_out, gout]
}

/// The message sizes of a client's result rows.
fn row_sizes(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// `-a`: every size from 2 B to 8 MiB, one row each on the client, the
/// server's buffer holding the largest; bandwidth and latency.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn all_sizes() {
    let want: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    for (tool, ours) in [
        ("ib_write_bw", "write"),
        ("ib_read_bw", "read"),
        ("ib_write_lat", "write --lat"),
        ("ib_read_lat", "read --lat"),
    ] {
        // rxe's Local ACK timeout 2^18 x 4.096 us (1 s, with its backoff
        // about 27 s without progress): the emulated guest serves an 8 MiB
        // READ at some 16 MB/s and stalls for seconds when the host is
        // busy, longer than the default 67 ms times its retries.
        let outs = both_ways(tool, "-a -n 5", &format!("{ours} -a -n 5 -u 18"));
        if outs[0].is_empty() {
            return; // RXE_SKIP_INTEROP
        }
        for o in &outs {
            assert_eq!(row_sizes(o), want, "{o}");
        }
    }
}

/// RoCEv2 over IPv6: rxe on fd99::1, perftest on its IPv6 GID.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn bw_over_ipv6() {
    both_ways_on("ib_write_bw", "-n 200", "write -n 200", "fd99::1", 2);
    both_ways_on(
        "ib_read_bw",
        "-n 100 -s 16384",
        "read -n 100 -s 16384",
        "fd99::1",
        2,
    );
}

/// The guest's rdma_rxe counters (`rdma statistic`), by name.
fn guest_counters() -> std::collections::HashMap<String, u64> {
    let (s, out) = guest_exec("rdma statistic show link rxe0/1", 20);
    assert_eq!(s, 0, "{out}");
    named_numbers(&out)
}

/// What the guest saw of the packets rxe sent it: its rdma_rxe counters,
/// and the datagrams dropped before rdma_rxe (the NIC's receive drops,
/// UDP's InErrors, the backlog's drops).
#[derive(Debug)]
struct GuestView {
    counters: std::collections::HashMap<String, u64>,
    dropped_before_rxe: u64,
}

fn guest_view() -> GuestView {
    let (s, out) = guest_exec(
        "rdma statistic show link rxe0/1; \
         echo eth0_rx_dropped $(cat /sys/class/net/eth0/statistics/rx_dropped); \
         awk '/^Udp:/ { if (seen) print \"udp_in_errors\", $4; seen = 1 }' /proc/net/snmp; \
         n=0; for x in $(cut -d' ' -f2 /proc/net/softnet_stat); do n=$((n + 0x$x)); done; \
         echo backlog_dropped $n",
        20,
    );
    assert_eq!(s, 0, "{out}");
    let mut counters = named_numbers(&out);
    let mut take = |k: &str| {
        counters
            .remove(k)
            .unwrap_or_else(|| panic!("no {k}: {out}"))
    };
    let dropped_before_rxe =
        take("eth0_rx_dropped") + take("udp_in_errors") + take("backlog_dropped");
    GuestView {
        counters,
        dropped_before_rxe,
    }
}

/// Every `name number` pair in `text`.
fn named_numbers(text: &str) -> std::collections::HashMap<String, u64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|w| Some((w[0].to_string(), w[1].parse().ok()?)))
        .collect()
}

/// The counters `rxe perf --counters` printed ("rxe counters: name value
/// ..."), absent ones 0.
fn rxe_counters(out: &str) -> impl Fn(&str) -> u64 {
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("rxe counters:"))
        .unwrap_or_else(|| panic!("no counters line: {out}"));
    let map = named_numbers(line);
    move |k| map.get(k).copied().unwrap_or(0)
}

/// UDP GSO towards the kernel: rxe sends runs of 4 KiB packets as one
/// `UDP_SEGMENT` message each and seals every segment's ICRC for the
/// header the kernel will give it (for IPv4 the Identification it numbers
/// the segments with, which the ICRC covers). Kernel rxe counts a packet in
/// `rcvd_pkts` only after its ICRC verified (rxe_recv.c `rxe_rcv`; 6.1
/// drops a bad one silently, with no counter and no log line of its own).
/// So every packet rxe sent must be in the guest's `rcvd_pkts`, or in a
/// drop counter below it: WRITEs and SENDs from rxe's requester, READ
/// responses from its responder, over IPv4 and IPv6. rxe's own check of
/// the kernel's packets must count no bad ICRC either.
///
/// Early retransmission is off on rxe's side (`RXE_ADAPTIVE_RETRANS=0`,
/// and a 1 s transport timer, `-u 18`): with it the emulated guest's slow
/// ACKs bring resends, and a resend that arrives after the guest's tool
/// has destroyed its QP is dropped uncounted (no QP), which would blur
/// the count. A resend still made (a real loss) is allowed for: up to two
/// windows of resends may go uncounted. Sealing every segment for ID 0
/// (a mutation tried by hand) fails it: kernel rxe counted 106,776 of
/// 1,297,630 packets, the rest resends of what it had dropped.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn gso_segments_pass_the_kernels_icrc_check() {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    // 40 messages of 1 MiB: 10,240 packets of the path MTU, 4 KiB.
    const DISTINCT: u64 = 40 * 256;
    // (perftest tool, rxe perf verb, rxe serves, our address, guest GID index)
    let cases = [
        ("ib_write_bw", "write", false, HOST_IP, 1),
        ("ib_send_bw", "send", false, HOST_IP, 1),
        ("ib_read_bw", "read", true, HOST_IP, 1),
        ("ib_write_bw", "write", false, "fd99::1", 2),
    ];
    for (tool, verb, rxe_serves, our_ip, gid) in cases {
        let opts = "-n 40 -s 1048576";
        let mut args: Vec<String> = ["perf", verb, "-n", "40", "-s", "1048576", "-u", "18"]
            .into_iter()
            .chain(["--counters", "--ip", our_ip, "--timeout", "150"])
            .map(str::to_string)
            .collect();
        let what = format!("{tool} {opts}, rxe on {our_ip}");
        let rxe = |args: &[String]| rxe_in_netns_with(args, 200, &[("RXE_ADAPTIVE_RETRANS", "0")]);
        let before = guest_view();
        let rxe_out = if rxe_serves {
            let server = rxe(&args);
            assert!(
                netns_waitport(18515, Duration::from_secs(30)),
                "rxe's server did not listen"
            );
            let (gs, gout) =
                guest_exec(&format!("{tool} -d rxe0 -x {gid} -F {opts} {HOST_IP}"), 200);
            let (rs, rout) = finish(server);
            assert!(
                rs == 0 && gs == 0,
                "{what}: rxe {rs}, guest {gs}\n{rout}\n{gout}"
            );
            rout
        } else {
            let job = GuestJob::start(&format!("{tool} -d rxe0 -x {gid} -F {opts}"));
            assert!(
                guest_waitport(18515, 30),
                "the guest's {tool} did not listen"
            );
            args.push(GUEST_IP.to_string());
            let (rs, rout) = finish(rxe(&args));
            let (gs, gout) = job.wait(200);
            assert!(
                rs == 0 && gs == 0,
                "{what}: rxe {rs}, guest {gs}\n{rout}\n{gout}"
            );
            rout
        };
        let after = guest_view();
        let ours = rxe_counters(&rxe_out);
        let sent = ours("net_sent_pkts");
        let gso_msgs = ours("net_sent_gso_msgs");
        assert!(sent >= DISTINCT, "{what}: sent {sent}\n{rxe_out}");
        assert!(
            gso_msgs > 0 && gso_msgs * 4 < sent,
            "{what}: {gso_msgs} GSO messages for {sent} packets\n{rxe_out}"
        );
        let counted = after.counters["rcvd_pkts"] - before.counters["rcvd_pkts"];
        let dropped = after.dropped_before_rxe - before.dropped_before_rxe;
        let seen = counted + dropped;
        let detail = format!(
            "{what}: rxe sent {sent} packets, the guest's rdma_rxe counted {counted} \
             and {dropped} were dropped before it: {before:?} -> {after:?}\n{rxe_out}"
        );
        // Uncounted: only resends that came after the guest's QP was gone,
        // at most two windows of them.
        let late = (sent - DISTINCT).min(2 * 128);
        assert!(seen <= sent && sent - seen <= late, "{detail}");
        assert_eq!(ours("rcvd_bad_icrc"), 0, "{what}\n{rxe_out}");
        assert_eq!(ours("drop_bad_icrc"), 0, "{what}\n{rxe_out}");
        eprintln!("{what}: {sent} sent in {gso_msgs} GSO messages, {counted} counted by kernel rxe, {dropped} dropped before it");
    }
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn write_bw() {
    both_ways("ib_write_bw", "-n 300", "write -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn read_bw_64k() {
    both_ways("ib_read_bw", "-n 200 -s 65536", "read -n 200 -s 65536");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn send_bw() {
    both_ways("ib_send_bw", "-n 300", "send -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn atomic_bw_fetch_add() {
    both_ways("ib_atomic_bw", "-n 300", "atomic -n 300");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn atomic_bw_cmp_swap() {
    both_ways(
        "ib_atomic_bw",
        "-n 300 -A CMP_AND_SWAP",
        "atomic -n 300 --cmp-swap",
    );
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn write_lat() {
    both_ways("ib_write_lat", "-n 200", "write --lat -n 200");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn read_lat() {
    both_ways("ib_read_lat", "-n 200", "read --lat -n 200");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn send_lat() {
    both_ways("ib_send_lat", "-n 200", "send --lat -n 200");
}

/// Receivers with 1 or 2 receive WQEs for 128 SENDs in flight: each side
/// sends RNR NAKs (its receive queue is empty) and waits out the other's,
/// with perftest's RNR timer (min_rnr_timer 12) and rnr_retry 7 (without
/// end). The slow guest always falls behind; rxe as the receiver only when
/// SENDs arrive faster than it reposts, so that run is repeated (each run
/// must succeed) until the guest has counted an RNR NAK from rxe.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn send_bw_through_rnr_naks() {
    if !require_peer() {
        return;
    }
    let first = guest_counters();
    let mut last = first.clone();
    for _ in 0..4 {
        both_ways(
            "ib_send_bw",
            "-n 300 -s 4096 -r 2",
            "send -n 300 -s 4096 -r 1",
        );
        last = guest_counters();
        if last["rcvd_rnr_err"] > first["rcvd_rnr_err"] {
            break;
        }
    }
    assert!(
        last["send_rnr_err"] > first["send_rnr_err"],
        "the guest sent no RNR NAK: {first:?} -> {last:?}"
    );
    assert!(
        last["rcvd_rnr_err"] > first["rcvd_rnr_err"],
        "rxe sent no RNR NAK in 4 runs: {first:?} -> {last:?}"
    );
    assert_eq!(
        last["retry_rnr_exceeded_err"],
        first["retry_rnr_exceeded_err"]
    );
}

/// ib_write_bw, ib_read_bw and ib_send_bw in both directions under netem
/// loss 2%, reordering 5% and duplication 1% on both directions of the
/// link; perftest itself checks every completion's status, and rxe, as
/// ib_read_bw's client, every byte it reads. (perftest has no data check
/// of its own; the SEND data under the same faults is checked byte for
/// byte by `interop_pingpong::rc_64k_under_loss_reordering_and_duplication`.)
/// Also ib_atomic_bw, whose FETCH_ADDs to rxe must each apply exactly once
/// though duplicated and retransmitted requests arrive.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn bw_under_loss_reordering_and_duplication() {
    if !require_peer() {
        return;
    }
    let faults = {
        let _turn = exclusive();
        Faults::on()
    };
    both_ways("ib_write_bw", "-n 100 -s 16384", "write -n 100 -s 16384");
    both_ways("ib_read_bw", "-n 100 -s 16384", "read -n 100 -s 16384");
    both_ways("ib_send_bw", "-n 100 -s 16384", "send -n 100 -s 16384");
    both_ways("ib_atomic_bw", "-n 200", "atomic -n 200");
    drop(faults);
}
