//! The reference peer: the kernel's own Soft-RoCE in a QEMU guest
//! (`shared/interop/peer.sh`), driven from tests. Guest 1 is 10.99.0.2;
//! rxe runs on the host side, 10.99.0.1, inside the namespace `rxepeer`.
//!
//! `scripts/interop.sh` boots the guest, runs the interop tests and stops
//! it. A test that finds no running peer fails and says why, unless
//! `RXE_SKIP_INTEROP=1` is set.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Our side of the link.
pub const HOST_IP: &str = "10.99.0.1";
/// Guest 1.
pub const GUEST_IP: &str = "10.99.0.2";
/// The namespace the peer's bridge lives in.
pub const NETNS: &str = "rxepeer";

/// Where `peer.sh` is: `RXE_PEER_DIR`, else `shared/interop` next to the
/// repository, else `/work/shared/interop`, else the copy in
/// `integration/peer/` (the order of `scripts/interop.sh`).
pub fn peer_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("RXE_PEER_DIR") {
        return Some(PathBuf::from(d));
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        here.join("../../shared/interop"),
        PathBuf::from("/work/shared/interop"),
        here.join("peer"),
    ]
    .into_iter()
    .find(|d| d.join("peer.sh").exists())
}

/// The `rxe` binary of this build (`cargo build --bin rxe` makes it).
pub fn rxe_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RXE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test binary");
    // target/<profile>/deps/<test> -> target/<profile>/rxe
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("rxe"))
        .expect("target directory");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build --bin rxe)",
        p.display()
    );
    p
}

/// The guest is one machine: tests take turns.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the tests should run; fails loudly when the peer is not up.
pub fn require_peer() -> bool {
    if std::env::var_os("RXE_SKIP_INTEROP").is_some() {
        eprintln!("SKIPPED: RXE_SKIP_INTEROP is set; the kernel-rxe interop test did not run");
        return false;
    }
    let dir = peer_dir().unwrap_or_else(|| {
        panic!("the reference peer (shared/interop/peer.sh) is not found: set RXE_PEER_DIR, or RXE_SKIP_INTEROP=1 to skip")
    });
    let out = Command::new(dir.join("peer.sh"))
        .args(["exec", "-t", "20", "rdma link"])
        .output()
        .expect("peer.sh");
    assert!(
        out.status.success(),
        "the reference peer is not running (start it with scripts/interop.sh, or set RXE_SKIP_INTEROP=1): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

fn peer(args: &[&str]) -> Output {
    let dir = peer_dir().expect("peer dir");
    Command::new(dir.join("peer.sh"))
        .args(args)
        .output()
        .expect("peer.sh")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `cmd` in the guest and waits at most `secs`: (exit status, output).
pub fn guest_exec(cmd: &str, secs: u32) -> (i32, String) {
    let o = peer(&["exec", "-t", &secs.to_string(), cmd]);
    (o.status.code().unwrap_or(-1), text(&o))
}

/// Starts `cmd` in the guest in the background; returns its job id.
pub fn guest_bg(cmd: &str) -> String {
    let o = peer(&["exec", "--bg", cmd]);
    assert!(o.status.success(), "peer.sh exec --bg: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Waits for a background job: (exit status, its log).
pub fn guest_wait(job: &str, secs: u32) -> (i32, String) {
    let o = peer(&["wait", "-t", &secs.to_string(), job]);
    (o.status.code().unwrap_or(-1), text(&o))
}

/// A guest background job that is killed if the test ends without
/// waiting for it (a failed assertion must not leave a server holding the
/// guest's port for the next test).
pub struct GuestJob(Option<String>);

impl GuestJob {
    pub fn start(cmd: &str) -> GuestJob {
        GuestJob(Some(guest_bg(cmd)))
    }

    /// Waits for it: (exit status, its log).
    pub fn wait(mut self, secs: u32) -> (i32, String) {
        let job = self.0.take().expect("job");
        guest_wait(&job, secs)
    }
}

impl Drop for GuestJob {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            let _ = peer(&["kill", &job]);
        }
    }
}

/// Waits until something listens on TCP `port` in the guest.
pub fn guest_waitport(port: u16, secs: u32) -> bool {
    peer(&["waitport", &port.to_string(), &secs.to_string()])
        .status
        .success()
}

/// Runs `rxe ARGS` in the namespace, bounded by `secs`.
pub fn rxe_in_netns(args: &[String], secs: u64) -> std::process::Child {
    rxe_in_netns_with(args, secs, &[])
}

/// As [`rxe_in_netns`], with `env` added to rxe's environment.
pub fn rxe_in_netns_with(args: &[String], secs: u64, env: &[(&str, &str)]) -> std::process::Child {
    Command::new("timeout")
        .arg(secs.to_string())
        .args(["ip", "netns", "exec", NETNS])
        .arg(rxe_bin())
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ip netns exec")
}

/// Waits for a child and returns (exit status, stdout + stderr).
/// Compiles `integration/c/NAME.c` into `out` with warnings as errors and
/// the extra `args` (`-shared -fPIC`, libraries); panics with the
/// compiler's messages if it fails.
pub fn compile_c(name: &str, out: &std::path::Path, args: &[&str]) {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c"));
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(&src)
        .args(args)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
}

pub fn finish(child: std::process::Child) -> (i32, String) {
    let o = child.wait_with_output().expect("wait");
    (o.status.code().unwrap_or(-1), text(&o))
}

/// Waits until `addr:port` accepts TCP connections inside the namespace.
pub fn netns_waitport(port: u16, d: Duration) -> bool {
    let deadline = std::time::Instant::now() + d;
    while std::time::Instant::now() < deadline {
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                NETNS,
                "ss",
                "-ltnH",
                &format!("sport = :{port}"),
            ])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false);
        if ok {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Loss 2%, reordering 5% (1 ms delay) and duplication 1% on both
/// directions of the guest's link (netem in the guest: the host kernel has
/// none), removed again when the test ends.
pub struct Faults;

impl Faults {
    pub fn on() -> Faults {
        let (s, out) = guest_exec(
            "tc qdisc add dev eth0 root netem loss 2% delay 1ms reorder 5% duplicate 1% && \
             ip link set ifb0 up && tc qdisc add dev eth0 handle ffff: ingress && \
             tc filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0 && \
             tc qdisc add dev ifb0 root netem loss 2% delay 1ms reorder 5% duplicate 1%",
            30,
        );
        assert_eq!(s, 0, "netem: {out}");
        Faults
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        guest_exec(
            "tc qdisc del dev eth0 root; tc qdisc del dev eth0 ingress; tc qdisc del dev ifb0 root",
            30,
        );
    }
}
