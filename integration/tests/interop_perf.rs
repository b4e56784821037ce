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
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|w| Some((w[0].to_string(), w[1].parse().ok()?)))
        .collect()
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
