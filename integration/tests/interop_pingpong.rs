//! `rxe pingpong` against rdma-core's own `ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong` running on
//! the kernel's Soft-RoCE in the reference guest, in both directions: our
//! client with the guest's server, then the guest's client with our server.
//! Both exit statuses must be 0; each side's tool checks that every
//! iteration completed. The data is checked too: the real tools receive
//! into the buffer they send from, so they send back what they received;
//! rxe sends a new pattern every time and, with `--chk-echo`, checks every
//! byte that comes back (rc, uc and ud; ibv_srq_pingpong's QPs share one
//! buffer, so its echo is not one message).
//!
//! The tests are ignored by a plain `cargo test`; `scripts/interop.sh`
//! boots the guest (with a 9000-byte MTU, so that path MTU 4096 is
//! possible) and runs them with `--ignored`. Run without a peer, they fail
//! and say why.

use std::time::Duration;

use rxe_integration::peer::*;

/// One run in each direction of `tool` (ibv_*_pingpong) with `opts` given
/// to both sides, and `kind` (rc, uc, ud, srq) for ours.
fn both_ways(kind: &str, tool: &str, opts: &str) -> [String; 2] {
    both_ways_on(kind, tool, opts, HOST_IP, 1)
}

/// As [`both_ways`], with rxe's device on `our_ip` and the guest using its
/// GID `guest_gid` (1: IPv4, 2: IPv6). The TCP side channel stays on IPv4,
/// as the tools require. Returns rxe's output, as client then as server.
fn both_ways_on(kind: &str, tool: &str, opts: &str, our_ip: &str, guest_gid: u8) -> [String; 2] {
    if !require_peer() {
        return Default::default();
    }
    let _turn = exclusive();
    let ours = |server: bool| -> Vec<String> {
        let mut v = vec!["pingpong".to_string(), kind.to_string()];
        v.extend(opts.split_whitespace().map(str::to_string));
        v.extend(["--ip", our_ip, "--timeout", "90", "--counters"].map(str::to_string));
        if kind != "srq" {
            v.push("--chk-echo".to_string());
        }
        if !server {
            v.push(GUEST_IP.to_string());
        }
        v
    };
    // 1. The guest serves, rxe is the client.
    let job = GuestJob::start(&format!("{tool} -d rxe0 -g {guest_gid} {opts}"));
    assert!(
        guest_waitport(18515, 30),
        "the guest's {tool} did not listen"
    );
    let (rs, client_out) = finish(rxe_in_netns(&ours(false), 120));
    let (gs, gout) = job.wait(120);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, guest server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{client_out}\n--- guest:\n{gout}"
    );
    assert!(client_out.contains("iters in"), "{client_out}");
    // 2. rxe serves, the guest is the client.
    let server = rxe_in_netns(&ours(true), 120);
    assert!(
        netns_waitport(18515, Duration::from_secs(30)),
        "rxe's server did not listen"
    );
    let (gs, gout) = guest_exec(
        &format!("{tool} -d rxe0 -g {guest_gid} {opts} {HOST_IP}"),
        120,
    );
    let (rs, rout) = finish(server);
    assert!(
        rs == 0 && gs == 0,
        "{tool} {opts}, rxe server: rxe exit {rs}, guest exit {gs}\n--- rxe:\n{rout}\n--- guest:\n{gout}"
    );
    assert!(gout.contains("iters in"), "{gout}");
    [client_out, rout]
}

/// A counter from rxe's ` rxe counters: name value ...` line (0 if absent).
fn counter(out: &str, name: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(" rxe counters:"))
        .unwrap_or_else(|| panic!("no counters line in {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == name)
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_4k() {
    both_ways("rc", "ibv_rc_pingpong", "-n 50");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_64k() {
    both_ways("rc", "ibv_rc_pingpong", "-n 20 -s 65536");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_1_byte_mtu_256() {
    both_ways("rc", "ibv_rc_pingpong", "-n 20 -s 1 -m 256");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_1_mib_mtu_4096() {
    both_ways("rc", "ibv_rc_pingpong", "-n 5 -s 1048576 -m 4096");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_10000_bytes_mtu_2048() {
    // Five packets, the last one short.
    both_ways("rc", "ibv_rc_pingpong", "-n 20 -s 10000 -m 2048");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_events() {
    both_ways("rc", "ibv_rc_pingpong", "-n 20 -e");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_over_ipv6() {
    both_ways_on("rc", "ibv_rc_pingpong", "-n 20 -s 8192", "fd99::1", 2);
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn ud_over_ipv6() {
    both_ways_on("ud", "ibv_ud_pingpong", "-n 20 -s 1024", "fd99::1", 2);
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn uc() {
    both_ways("uc", "ibv_uc_pingpong", "-n 50 -s 2048");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn uc_mtu_512() {
    both_ways("uc", "ibv_uc_pingpong", "-n 20 -s 5000 -m 512");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn ud() {
    both_ways("ud", "ibv_ud_pingpong", "-n 50 -s 512");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn ud_4096() {
    both_ways("ud", "ibv_ud_pingpong", "-n 20 -s 4096");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn srq() {
    both_ways("srq", "ibv_srq_pingpong", "-n 20 -q 4 -s 1024");
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rc_64k_under_loss_reordering_and_duplication() {
    if !require_peer() {
        return;
    }
    let faults = {
        let _turn = exclusive();
        Faults::on()
    };
    let outs = both_ways("rc", "ibv_rc_pingpong", "-n 20 -s 65536");
    drop(faults);
    // Duplicates (netem's, and the kernel's retransmissions) did arrive,
    // were acknowledged again, and none was delivered twice: the echo check
    // saw every message exactly once, in order.
    let dups: u64 = outs.iter().map(|o| counter(o, "duplicate_request")).sum();
    assert!(dups > 0, "no duplicate reached rxe: {outs:?}");
    for o in &outs {
        assert_eq!(counter(o, "rdma_recvs"), 20, "{o}");
    }
}
