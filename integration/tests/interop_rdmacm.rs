//! The RDMA CM against the kernel's: Debian's rdmacm-utils and perftest's
//! `-R` on the host over rxe's drop-in `librdmacm.so.1` (`rxe exec --ip
//! 10.99.0.1`), against the same binaries on the kernel's rdma_cm and
//! Soft-RoCE in the reference guest, in both directions: rping (data
//! checked by rping), ucmatose with several connections, udaddy (UD over
//! SIDR), mckey (UD multicast: the kernel's rxe receiving what rxe sends
//! to a group, and the other way), rstream and riostream (rsockets and
//! their I/O map: rxe's against rdma-core's librdmacm, every byte
//! checked), ib_write_bw/ib_read_bw/ib_send_bw -R,
//! and rping again under
//! netem loss, reordering and duplication. Both exit statuses
//! must be 0 and each tool must print its result.
//!
//! Ignored by a plain `cargo test`; `scripts/interop.sh` runs them.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use rxe_integration::peer::*;

/// A host tool over rxe, its stderr watched for the library's "CM
/// listening" log line (`RXE_LOG`): (child, a receiver that says when it
/// came).
fn host_tool(cmd: &str, secs: u64) -> (std::process::Child, std::sync::mpsc::Receiver<()>) {
    host_tool_ready(cmd, secs, "rxe_verbs::cm::id=info", "CM listening", &[])
}

/// How long the shim `integration/c/connect_delay.c` holds back every
/// `rdma_connect` after a process's first, on a retried run.
const CONNECT_DELAY_MS: &str = "1500";

/// `integration/c/connect_delay.c`, built once for this test binary.
fn connect_delay_shim() -> &'static std::path::Path {
    static SHIM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| {
        let so = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("connect_delay.so");
        compile_c("connect_delay", &so, &["-shared", "-fPIC", "-ldl"]);
        so
    })
}

/// [`host_tool`] with another log filter and ready line.
fn host_tool_ready(
    cmd: &str,
    secs: u64,
    log: &str,
    ready: &'static str,
    env: &[(&str, &std::ffi::OsStr)],
) -> (std::process::Child, std::sync::mpsc::Receiver<()>) {
    let mut child = Command::new("timeout")
        .arg(secs.to_string())
        .args(["ip", "netns", "exec", NETNS])
        .arg(rxe_bin())
        .args(["exec", "--ip", HOST_IP, "--"])
        .args(cmd.split_whitespace())
        .env("RXE_LOG", log)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec rxe exec");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = channel();
    // The log lines go back into the child's output at the end through
    // this thread's own copy.
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if l.contains(ready) {
                let _ = tx.send(());
            } else {
                eprintln!("host: {l}");
            }
        }
    });
    (child, rx)
}

/// Waits until the guest's kernel has a listening CM ID on `port`
/// (iproute2's `rdma resource show cm_id`).
fn guest_listens(port: u16) -> bool {
    for _ in 0..60 {
        let (_, out) = guest_exec("rdma res show cm_id", 20);
        if out
            .lines()
            .any(|l| l.contains("state LISTEN") && l.contains(&format!(":{port} ")))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// Kills what an earlier, failed case may have left in the guest.
fn guest_clean() {
    guest_exec(
        "for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); \
         case \"$c\" in rping|ucmatose|udaddy|mckey|ib_*) kill ${p#/proc/};; esac; done; true",
        20,
    );
}

/// `server`/`client` command lines (ADDR stands for the server's address),
/// the guest serving first, then rxe; `done` must be in the client's
/// output, `port` is the server's CM port.
///
/// Each direction may be tried `tries` times. With the guest serving: perftest's
/// `-R` connects twice in a row, and the kernel refuses the second REQ
/// (REJ reason 8) if the emulated guest has not listened again yet; the
/// tool then gives up, with its server waiting. The first try runs the
/// tools as they are; a retry preloads `integration/c/connect_delay.c`,
/// which holds the host's second `rdma_connect` back for a moment, as a
/// slower client would. (rxe's own CM holds such a REQ for a moment
/// instead, so the other direction needs no retry.)
fn both_ways(server: &str, client: &str, port: u16, done: &str, tries: u32) {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    guest_clean();
    // 1. The guest's kernel serves, the host's tool over rxe connects.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let job = GuestJob::start(&server.replace("ADDR", GUEST_IP));
        assert!(guest_listens(port), "the guest's {server} did not listen");
        let client_cmd = client.replace("ADDR", GUEST_IP);
        let (child, _) = if attempt == 1 {
            host_tool(&client_cmd, 120)
        } else {
            let shim = connect_delay_shim().as_os_str();
            host_tool_ready(
                &client_cmd,
                120,
                "rxe_verbs::cm::id=info",
                "CM listening",
                &[
                    ("LD_PRELOAD", shim),
                    ("RXE_TEST_CONNECT_DELAY_MS", CONNECT_DELAY_MS.as_ref()),
                ],
            )
        };
        let (hs, hout) = finish(child);
        if hs != 0 && attempt < tries {
            eprintln!("{client} -> guest: host exit {hs}, trying again\n{hout}");
            drop(job);
            guest_clean();
            continue;
        }
        let (gs, gout) = job.wait(120);
        assert!(
            hs == 0 && gs == 0,
            "{client} -> guest: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
        );
        assert!(hout.contains(done), "{hout}");
        break;
    }
    // 2. rxe serves, the guest's tool connects. Under netem a try may be
    // lost the same way as the other direction, or at its very end: the
    // kernel sends its DREQ once as the client exits (destroying the ID
    // cancels the resend), and a server that never hears it waits, as it
    // would for any peer.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (server_child, listening) = host_tool(&server.replace("ADDR", HOST_IP), 120);
        assert!(
            listening.recv_timeout(Duration::from_secs(60)).is_ok(),
            "the host's {server} over rxe did not listen"
        );
        let (gs, gout) = guest_exec(&client.replace("ADDR", HOST_IP), 120);
        let (hs, hout) = finish_within(server_child, Duration::from_secs(30));
        if (hs != 0 || gs != 0) && attempt < tries {
            eprintln!(
                "guest {client} -> rxe: host exit {hs}, guest exit {gs}, trying again\n{hout}"
            );
            guest_clean();
            continue;
        }
        assert!(
            hs == 0 && gs == 0,
            "guest {client} -> rxe: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
        );
        assert!(gout.contains(done), "{gout}");
        break;
    }
}

/// The host tool's exit once the guest's side is done: at most `grace`
/// more, then it is stopped (SIGTERM to its `timeout`, which passes it on)
/// and reported as `timeout` reports it, 124.
fn finish_within(mut child: std::process::Child, grace: Duration) -> (i32, String) {
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return finish(child);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let (_, out) = finish(child);
    (124, out)
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rping_ucmatose_udaddy_and_rsockets_with_the_kernels_rdma_cm() {
    both_ways(
        "rping -s -a ADDR -p 7174 -C 10 -S 200 -V -v",
        "rping -c -a ADDR -p 7174 -C 10 -S 200 -V -v",
        7174,
        "rdma-ping-9: ",
        1,
    );
    both_ways(
        "ucmatose -b ADDR -p 7471 -c 4 -C 10",
        "ucmatose -s ADDR -p 7471 -c 4 -C 10",
        7471,
        "return status 0",
        1,
    );
    // rsockets, the protocol of librdmacm's own: 100 kB transfers each
    // way, checked by rstream (-T v).
    both_ways(
        "rstream -b ADDR -p 7405 -S 100000 -C 20 -T v",
        "rstream -s ADDR -p 7405 -S 100000 -C 20 -T v",
        7405,
        "custom",
        1,
    );
    // riostream: each side maps its buffer and the other RDMA WRITEs
    // into it (riowrite), checked.
    both_ways(
        "riostream -b ADDR -p 7406 -S 100000 -C 20 -T v",
        "riostream -s ADDR -p 7406 -S 100000 -C 20 -T v",
        7406,
        "custom",
        1,
    );
    // udaddy has no port option: it serves on 7174 of the UDP port space.
    both_ways(
        "udaddy -b ADDR -c 2 -C 10",
        "udaddy -s ADDR -c 2 -C 10",
        7174,
        "return status 0",
        1,
    );
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn perftest_with_the_kernels_rdma_cm() {
    for (tool, opts) in [
        ("ib_write_bw", "-n 200"),
        ("ib_read_bw", "-n 100 -s 16384"),
        ("ib_send_bw", "-n 200"),
    ] {
        both_ways(
            &format!("{tool} -d rxe0 -R -F -p 18600 {opts}"),
            &format!("{tool} -d rxe0 -R -F -p 18600 {opts} ADDR"),
            18600,
            "#bytes",
            3,
        );
    }
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn rping_under_loss_reordering_and_duplication() {
    if !require_peer() {
        return;
    }
    let _faults = Faults::on();
    both_ways(
        "rping -s -a ADDR -p 7175 -C 20 -S 1000 -V -v",
        "rping -c -a ADDR -p 7175 -C 20 -S 1000 -V -v",
        7175,
        "rdma-ping-19: ",
        3,
    );
}

/// Waits until the guest's kernel has joined IPv4 multicast `group` on
/// some interface (`ip maddr`: the IGMP membership rdma_cm's join makes).
fn guest_joined(group: &str) -> bool {
    for _ in 0..60 {
        let (_, out) = guest_exec("ip maddr show", 20);
        if out.contains(group) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

#[test]
#[ignore = "needs the reference peer: run scripts/interop.sh"]
fn mckey_multicast_with_the_kernels_rdma_cm() {
    if !require_peer() {
        return;
    }
    let _turn = exclusive();
    guest_clean();
    // 1. The kernel's rxe receives (two QPs attached), rxe sends
    //    (send-only join; mckey waits 3 s after joining before sending).
    let group = "239.99.0.5";
    let job = GuestJob::start(&format!("mckey -m {group} -b {GUEST_IP} -c 2 -C 10"));
    assert!(
        guest_joined(group),
        "the guest's mckey did not join {group}"
    );
    let (child, _) = host_tool(&format!("mckey -m {group} -b {HOST_IP} -s -o -C 10"), 60);
    let (hs, hout) = finish(child);
    let (gs, gout) = job.wait(60);
    assert!(
        hs == 0 && gs == 0,
        "rxe -> guest multicast: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
    for out in [&hout, &gout] {
        assert!(out.contains("data transfers complete"), "{out}");
    }
    // 2. rxe receives (two QPs attached), the kernel's rxe sends.
    let group = "239.99.0.6";
    let (child, joined) = host_tool_ready(
        &format!("mckey -m {group} -b {HOST_IP} -c 2 -C 10"),
        60,
        "rxe_net::port=info",
        "multicast group joined",
        &[],
    );
    assert!(
        joined.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the host's mckey over rxe did not join {group}"
    );
    let (gs, gout) = guest_exec(&format!("mckey -m {group} -b {GUEST_IP} -s -o -C 10"), 60);
    let (hs, hout) = finish(child);
    assert!(
        hs == 0 && gs == 0,
        "guest -> rxe multicast: host exit {hs}, guest exit {gs}\n--- host (rxe):\n{hout}\n--- guest:\n{gout}"
    );
    for out in [&hout, &gout] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(
            out.contains(&format!("joined dgid: ::ffff:{group}")),
            "{out}"
        );
    }
}
