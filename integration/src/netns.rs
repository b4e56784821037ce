//! Tests in a network namespace of their own: the outer test creates
//! `PREFIX-<pid>`, runs this same test binary inside it with only the inner
//! (ignored) test selected, deletes the namespace and asserts the inner
//! test ran and passed. It needs root and iproute2; without them it fails
//! loudly, unless `RXE_SKIP_NETNS=1` says to skip (printed).

use std::process::Command;

/// Runs the ignored test `inner` of the current test binary in a fresh
/// namespace named `prefix-<pid>`; `false` if skipped by `RXE_SKIP_NETNS`.
/// The inner test sees `RXE_IN_NETNS=1` (see [`assert_inside`]).
pub fn run_inner_test(prefix: &str, inner: &str) -> bool {
    if std::env::var_os("RXE_SKIP_NETNS").is_some() {
        eprintln!("SKIPPED: RXE_SKIP_NETNS is set");
        return false;
    }
    let ns = format!("{prefix}-{}", std::process::id());
    let created = Command::new("ip").args(["netns", "add", &ns]).status();
    match created {
        Ok(s) if s.success() => {}
        other => panic!(
            "cannot create a network namespace ({other:?}): this test needs root and iproute2; \
             set RXE_SKIP_NETNS=1 to skip it"
        ),
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(&exe)
        .args(["--exact", inner, "--ignored", "--nocapture"])
        .env("RXE_IN_NETNS", "1")
        .output()
        .expect("ip netns exec");
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // What the inner test printed (its measurements), for --nocapture.
    eprintln!("{text}");
    assert!(out.status.success(), "inner test failed:\n{text}");
    assert!(text.contains("1 passed"), "inner test did not run:\n{text}");
    true
}

/// Panics unless running inside a namespace [`run_inner_test`] made.
pub fn assert_inside() {
    assert!(
        std::env::var_os("RXE_IN_NETNS").is_some(),
        "run only inside the test's namespace"
    );
}

/// Runs `cmd` with `sh -c`; panics if it fails (namespace set-up).
pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "`{cmd}` failed");
}

/// Panics unless nftables' `nft` is installed (scripts/setup.sh installs
/// it).
pub fn assert_nft() {
    assert!(
        Command::new("sh")
            .args(["-c", "command -v nft"])
            .status()
            .is_ok_and(|s| s.success()),
        "nft is not installed (scripts/setup.sh installs nftables)"
    );
}

/// Loads nftables `rules` (`nft -f -`); panics if nft refuses them.
pub fn nft(rules: &str) {
    use std::io::Write as _;
    let mut p = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    p.stdin
        .take()
        .expect("nft's stdin")
        .write_all(rules.as_bytes())
        .expect("write the rules");
    assert!(p.wait().expect("nft").success(), "nft refused:\n{rules}");
}

/// The first line with a counter of nftables table `ip NAME`, as
/// `nft list table` prints it (its packets and bytes).
pub fn nft_counter(name: &str) -> String {
    let out = Command::new("nft")
        .args(["list", "table", "ip", name])
        .output()
        .expect("nft list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("counter"))
        .unwrap_or("")
        .trim()
        .to_string()
}
