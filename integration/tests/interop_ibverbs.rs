//! The same Debian binaries on both sides: rdma-core's `ibv_*_pingpong`
//! and perftest's `ib_*` run unmodified on the host over rxe's drop-in
//! `libibverbs.so.1` (`rxe exec --ip 10.99.0.1`), against the very same
//! tools on the kernel's Soft-RoCE in the reference guest, in both
//! directions. Both exit statuses must be 0 and each tool must print its
//! result (kernel rxe drops a packet with a bad ICRC, so a run that ends
//! well carried only packets it accepted). And a program of ours,
//! `integration/c/mw_peer.c`, for memory windows, which no Debian tool uses.
//!
//! Ignored by a plain `cargo test`; `scripts/interop.sh` runs them after
//! building the drop-in libraries next to `rxe`.

use std::process::{Command, Stdio};
use std::time::Duration;

use rxe_integration::peer::*;

/// `rxe exec --ip our_ip -- program args...` inside the namespace, bounded
/// by `secs`.
fn host_tool(our_ip: &str, cmd: &str, secs: u64) -> std::process::Child {
    Command::new("timeout")
        .arg(secs.to_string())
        .args(["ip", "netns", "exec", NETNS])
        .arg(rxe_bin())
        .args(["exec", "--ip", our_ip, "--"])
        .args(cmd.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec rxe exec")
}

/// One run each way of `tool opts`: the guest serving and the host's copy
/// (over rxe) connecting, then the other way round. `gid` is the option
/// that names the GID index (`-g` for the pingpongs, `-x` for perftest);
/// `done` a string the client's output must contain.
fn both_ways(tool: &str, gid: &str, opts: &str, done: &str) {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    // 1. The guest serves, the host's tool over rxe is the client.
    let job = GuestJob::start(&format!("{tool} -d rxe0 {gid} 1 {opts}"));
    assert!(
        guest_waitport(18515, 30),
        "the guest's {tool} did not listen"
    );
    let (hs, hout) = finish(host_tool(
        HOST_IP,
        &format!("{tool} -d rxe0 {gid} 0 {opts} {GUEST_IP}"),
        200,
    ));
    let (gs, gout) = job.wait(200);
    assert!(
        hs == 0 && gs == 0,
        "{tool} {opts}, guest server: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
    assert!(hout.contains(done), "{hout}");
    // 2. The host's tool over rxe serves, the guest is the client.
    let server = host_tool(HOST_IP, &format!("{tool} -d rxe0 {gid} 0 {opts}"), 200);
    assert!(
        netns_waitport(18515, Duration::from_secs(30)),
        "the host's {tool} over rxe did not listen"
    );
    let (gs, gout) = guest_exec(&format!("{tool} -d rxe0 {gid} 1 {opts} {HOST_IP}"), 200);
    let (hs, hout) = finish(server);
    assert!(
        hs == 0 && gs == 0,
        "{tool} {opts}, host server: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
    assert!(gout.contains(done), "{gout}");
}

/// The four pingpong examples, RC also with completion events (`-e`, the
/// comp channel's eventfd) and a path MTU of 4096 with 64 KiB messages.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn pingpongs_over_the_drop_in_library() {
    both_ways("ibv_rc_pingpong", "-g", "-n 50", "iters in");
    both_ways(
        "ibv_rc_pingpong",
        "-g",
        "-n 20 -e -s 65536 -m 4096",
        "iters in",
    );
    both_ways("ibv_uc_pingpong", "-g", "-n 50 -s 2048", "iters in");
    both_ways("ibv_ud_pingpong", "-g", "-n 50 -s 512", "iters in");
    both_ways("ibv_srq_pingpong", "-g", "-n 20 -q 4 -s 1024", "iters in");
}

/// perftest's seven tools.
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn perftest_over_the_drop_in_library() {
    for (tool, opts) in [
        ("ib_write_bw", "-F -n 200"),
        ("ib_read_bw", "-F -n 100 -s 16384"),
        ("ib_send_bw", "-F -n 200"),
        ("ib_atomic_bw", "-F -n 200"),
        ("ib_write_lat", "-F -n 100"),
        ("ib_read_lat", "-F -n 100"),
        ("ib_send_lat", "-F -n 100"),
    ] {
        both_ways(tool, "-x", opts, "#bytes");
    }
}

/// Where the guest sees the host's directory `RXE_PEER_SHARE_DIR` (peer.sh
/// `--share`, set up by scripts/peer-up.sh): programs built here for it.
fn share_dir() -> std::path::PathBuf {
    std::env::var_os("RXE_PEER_SHARE_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peer-share"),
        std::path::PathBuf::from,
    )
}

/// A memory window across the two stacks, each way: the server binds a
/// type 2 window with a BIND_MW work request and hands out its R_Key, the
/// client WRITEs through it, the server checks the bytes and invalidates
/// the window with LOCAL_INV, and the client's next WRITE must be refused
/// with a remote access error (`integration/c/mw_peer.c`, built on the host
/// and run in the guest from the shared directory: no compiler there).
#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn a_memory_window_with_the_kernels_rxe() {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    let dir = share_dir();
    std::fs::create_dir_all(&dir).expect("share dir");
    let exe = dir.join("mw_peer");
    compile_c("mw_peer", &exe, &["-libverbs"]);
    let (ok, ls) = guest_exec("test -x /host/mw_peer && echo shared", 20);
    assert!(
        ok == 0 && ls.contains("shared"),
        "the guest does not see {} at /host (peer.sh start --share): {ls}",
        dir.display()
    );
    let exe = exe.to_str().expect("path");
    // The guest's RoCEv2 IPv4 GID, as the pingpongs' `-g 1`.
    let gidx = 1;
    // 1. The kernel's rxe binds the window, rxe writes through it.
    let job = GuestJob::start(&format!("/host/mw_peer server 18701 {gidx}"));
    assert!(
        guest_waitport(18701, 30),
        "the guest's mw_peer did not listen"
    );
    let (hs, hout) = finish(host_tool(
        HOST_IP,
        &format!("{exe} client {GUEST_IP} 18701 0"),
        60,
    ));
    let (gs, gout) = job.wait(60);
    assert!(
        hs == 0 && gs == 0 && hout.contains(": OK") && gout.contains(": OK"),
        "guest window: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
    // 2. rxe binds the window, the kernel's rxe writes through it.
    let server = host_tool(HOST_IP, &format!("{exe} server 18702 0"), 60);
    assert!(
        netns_waitport(18702, Duration::from_secs(30)),
        "the host's mw_peer over rxe did not listen"
    );
    let (gs, gout) = guest_exec(&format!("/host/mw_peer client {HOST_IP} 18702 {gidx}"), 60);
    let (hs, hout) = finish(server);
    assert!(
        hs == 0 && gs == 0 && hout.contains(": OK") && gout.contains(": OK"),
        "host window: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
}
