//! Debian's unmodified RDMA programs (ibverbs-utils, perftest) over rxe's
//! drop-in `libibverbs.so.1`, run with `rxe exec` as a user would: the
//! library's symbols against what the binaries import, ibv_devinfo, the
//! four ibv_*_pingpong examples between two copies and against `rxe
//! pingpong`, perftest between two copies and against `rxe perf`.
//!
//! Each test has its own addresses in 127.0.110.0/24 and its own TCP
//! ports (tests run in parallel). Without the Debian tools the tests fail,
//! unless RXE_SKIP_IBVERBS_TOOLS=1 says to skip them (loudly).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::tools::{
    build_c, dynamic_symbols, exec, exports, have, lib_dir, serial, versioned_imports,
};
use support::{Finished, Rxe};

const T: Duration = Duration::from_secs(120);

/// Whether a TCP socket listens on `port` (from /proc/net/tcp), so that a
/// client starts only once its C server is ready (C stdio buffers the
/// server's output in a pipe, so its lines cannot tell).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
}

fn wait_listening(port: u16, server: &mut Rxe) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening(port) {
        if Instant::now() > deadline {
            let f = server.finish(Duration::from_secs(1));
            panic!("nothing listens on port {port}: {f:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server tool on `srv` and a client tool on `cli` (port `port`, the
/// client's last argument the server); returns (server, client).
fn tools(prog: &str, srv: &str, cli: &str, port: u16, args: &[&str]) -> (Finished, Finished) {
    let p = port.to_string();
    let mut sargs: Vec<&str> = args.to_vec();
    sargs.extend(["-p", &p]);
    let mut server = exec(srv, prog, &sargs);
    wait_listening(port, &mut server);
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let mut client = exec(cli, prog, &cargs);
    let c = client.finish(T);
    let s = server.finish(T);
    (s, c)
}

/// An ibv_*_pingpong run that ended well and printed its result lines
/// with the peer's GID.
fn check_pingpong(f: &Finished, peer: &str, bytes: u64, iters: u64) {
    assert!(f.ok(), "{f:#?}");
    let text = f.text();
    assert!(
        text.contains(&format!("GID ::ffff:{peer}")),
        "no remote GID ::ffff:{peer}: {f:#?}"
    );
    assert!(
        text.contains(&format!("{} bytes in ", 2 * bytes * iters)),
        "no byte count: {f:#?}"
    );
    assert!(
        text.contains(&format!("{iters} iters in ")),
        "no iteration count: {f:#?}"
    );
}

#[test]
fn the_library_exports_what_debian_binaries_import() {
    let _serial = serial();
    let so = lib_dir().join("libibverbs.so");
    let dump = |p: &Path| dynamic_symbols(p);
    let ours = dump(&so);
    let exported = |name: &str, ver: &str| exports(&ours, name, ver);
    // The checked-in list, then whatever the installed binaries import now
    // (so that a distribution update is caught).
    let mut want: Vec<(String, String)> = include_str!("data/ibverbs-imports.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (v, n) = l.split_once(' ').unwrap();
            (n.to_string(), v.to_string())
        })
        .collect();
    let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/bin")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    bins.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        n.starts_with("ibv_") || n.starts_with("ib_")
    });
    bins.push("/usr/lib/x86_64-linux-gnu/librdmacm.so.1".into());
    for b in bins.iter().filter(|b| b.exists()) {
        want.extend(versioned_imports(&dump(b), "IBVERBS_"));
    }
    want.sort();
    want.dedup();
    assert!(want.len() >= 40, "{want:?}");
    let missing: Vec<_> = want.iter().filter(|(n, v)| !exported(n, v)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Also the hidden aliases of the private helper, and the SONAME.
    assert!(exported("ibv_query_gid_type", "IBVERBS_PRIVATE_65"));
    let d = Command::new("readelf")
        .arg("-d")
        .arg(&so)
        .output()
        .expect("readelf runs");
    assert!(String::from_utf8_lossy(&d.stdout).contains("Library soname: [libibverbs.so.1]"));
    for (f, soname) in [("libmlx5.so", "libmlx5.so.1"), ("libefa.so", "libefa.so.1")] {
        let d = Command::new("readelf")
            .arg("-d")
            .arg(lib_dir().join(f))
            .output()
            .expect("readelf runs");
        assert!(
            String::from_utf8_lossy(&d.stdout).contains(&format!("[{soname}]")),
            "{f}"
        );
    }
    // Under rxe exec, the loader takes ours and never the system's.
    if Path::new("/usr/bin/ib_write_bw").exists() {
        let l = exec("127.0.110.2", "ldd", &["/usr/bin/ib_write_bw"]).finish(T);
        assert!(l.ok(), "{l:#?}");
        let t = l.text();
        assert!(
            t.contains("rxe-lib")
                && t.contains("/libibverbs.so.1 (")
                && !t.contains("libibverbs.so.1 => /"),
            "{t}"
        );
    }
    let mlx5 = dump(&lib_dir().join("libmlx5.so"));
    assert!(mlx5.contains("MLX5_1.7") && mlx5.contains("mlx5dv_open_device"));
}

#[test]
fn ibv_devices_and_ibv_devinfo_see_the_device() {
    let _serial = serial();
    if !have("ibv_devinfo") {
        return;
    }
    let d = exec("127.0.110.1", "ibv_devices", &[]).finish(T);
    assert!(d.ok(), "{d:#?}");
    assert!(
        d.stdout.iter().any(|l| l.trim_start().starts_with("rxe0")),
        "{d:#?}"
    );
    let f = exec("127.0.110.1", "ibv_devinfo", &["-v"]).finish(T);
    assert!(f.ok(), "{f:#?}");
    let t = f.text();
    for want in [
        "hca_id:\trxe0",
        "transport:\t\t\tInfiniBand (0)",
        "vendor_id:\t\t\t0xffffff",
        "phys_port_cnt:\t\t\t1",
        "max_qp_rd_atom:\t\t\t128",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "max_msg_sz:\t\t0x80000000",
        "gid_tbl_len:\t\t32",
        "phys_state:\t\tLINK_UP (5)",
        "GID[  0]:\t\t::ffff:127.0.110.1, RoCE v2",
        "num_comp_vectors:",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
    // The same device as `rxe info -v` describes (its GUID).
    let info = support::run(&["info", "-v", "--ip", "127.0.110.1"], T);
    assert!(info.ok(), "{info:#?}");
    let guid = |s: &str| {
        s.lines()
            .find(|l| l.trim_start().starts_with("node_guid:"))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
    };
    assert_eq!(guid(&t), guid(&info.text()));
    // Field for field what `rxe info -v` says, but for rxe's additions:
    // two lines, and the congestion control settings (from their heading
    // to the GID table).
    let mut in_cc = false;
    for l in info.stdout.iter().filter(|l| {
        if l.starts_with("\t\t\tcongestion control") {
            in_cc = true;
        } else if l.starts_with("\t\t\tGID[") {
            in_cc = false;
        }
        !in_cc
            && !l.trim().is_empty()
            && !l.starts_with("\tmax_inline_data:")
            && !l.starts_with("\t\t\tnetdev:")
    }) {
        assert!(f.stdout.contains(l), "ibv_devinfo -v lacks {l:?}:\n{t}");
    }
}

#[test]
fn rc_pingpong_between_two_copies_at_every_size() {
    let _serial = serial();
    if !have("ibv_rc_pingpong") {
        return;
    }
    for (i, (size, iters)) in [(1u64, 200u64), (4096, 200), (65536, 50), (1 << 20, 10)]
        .into_iter()
        .enumerate()
    {
        let (s, n) = (size.to_string(), iters.to_string());
        let (srv, cli) = tools(
            "ibv_rc_pingpong",
            "127.0.110.3",
            "127.0.110.4",
            19110 + i as u16,
            &["-d", "rxe0", "-g", "0", "-s", &s, "-n", &n],
        );
        check_pingpong(&srv, "127.0.110.4", size, iters);
        check_pingpong(&cli, "127.0.110.3", size, iters);
    }
}

#[test]
fn rc_pingpong_path_mtus_completion_events_and_the_wr_api() {
    let _serial = serial();
    if !have("ibv_rc_pingpong") {
        return;
    }
    // -N: ibv_create_qp_ex and the ibv_wr_* builder.
    let runs: [&[&str]; 4] = [
        &["-m", "256"],
        &["-m", "4096", "-s", "16384"],
        &["-e"],
        &["-N", "-e"],
    ];
    for (i, extra) in runs.into_iter().enumerate() {
        let mut a = vec!["-d", "rxe0", "-g", "0", "-n", "100"];
        a.extend_from_slice(extra);
        let size = if extra.contains(&"16384") {
            16384
        } else {
            4096
        };
        let (srv, cli) = tools(
            "ibv_rc_pingpong",
            "127.0.110.5",
            "127.0.110.6",
            19120 + i as u16,
            &a,
        );
        check_pingpong(&srv, "127.0.110.6", size, 100);
        check_pingpong(&cli, "127.0.110.5", size, 100);
    }
}

#[test]
fn uc_ud_and_srq_pingpong_between_two_copies() {
    let _serial = serial();
    for (i, (prog, extra, size)) in [
        ("ibv_uc_pingpong", vec!["-e"], 4096u64),
        ("ibv_ud_pingpong", vec!["-s", "1024"], 1024),
        ("ibv_ud_pingpong", vec!["-s", "512", "-e"], 512),
        ("ibv_srq_pingpong", vec!["-q", "4"], 4096),
        ("ibv_srq_pingpong", vec!["-q", "2", "-e"], 4096),
    ]
    .into_iter()
    .enumerate()
    {
        if !have(prog) {
            return;
        }
        let mut a = vec!["-d", "rxe0", "-g", "0", "-n", "100"];
        a.extend_from_slice(&extra);
        let (srv, cli) = tools(prog, "127.0.110.7", "127.0.110.8", 19130 + i as u16, &a);
        // srq_pingpong counts the bytes of all its QPs' iterations.
        check_pingpong(&srv, "127.0.110.8", size, 100);
        check_pingpong(&cli, "127.0.110.7", size, 100);
    }
}

#[test]
fn rc_pingpong_against_rxe_pingpong_both_ways() {
    let _serial = serial();
    if !have("ibv_rc_pingpong") {
        return;
    }
    // rxe is the server, the Debian tool the client.
    let mut server = Rxe::spawn(&[
        "pingpong",
        "rc",
        "--ip",
        "127.0.110.9",
        "-p",
        "19140",
        "-n",
        "100",
        "--chk-echo",
    ]);
    server.wait_for_line("  local address:", T);
    let c = exec(
        "127.0.110.10",
        "ibv_rc_pingpong",
        &[
            "-d",
            "rxe0",
            "-g",
            "0",
            "-p",
            "19140",
            "-n",
            "100",
            "127.0.110.9",
        ],
    )
    .finish(T);
    let s = server.finish(T);
    check_pingpong(&c, "127.0.110.9", 4096, 100);
    assert!(s.ok(), "{s:#?}");
    // The Debian tool is the server, rxe the client.
    let mut server = exec(
        "127.0.110.11",
        "ibv_rc_pingpong",
        &["-d", "rxe0", "-g", "0", "-p", "19141", "-n", "100", "-e"],
    );
    wait_listening(19141, &mut server);
    let c = support::run(
        &[
            "pingpong",
            "rc",
            "--ip",
            "127.0.110.12",
            "-p",
            "19141",
            "-n",
            "100",
            "--chk-echo",
            "127.0.0.1",
        ],
        T,
    );
    let s = server.finish(T);
    check_pingpong(&s, "127.0.110.12", 4096, 100);
    assert!(c.ok(), "{c:#?}");
}

/// A perftest run that ended well and printed its table row.
fn check_perf(f: &Finished) {
    assert!(f.ok(), "{f:#?}");
    let t = f.text();
    assert!(t.contains(" #bytes"), "no result table: {f:#?}");
    let i = f
        .stdout
        .iter()
        .position(|l| l.trim_start().starts_with("#bytes"))
        .unwrap();
    let row = &f.stdout[i + 1];
    assert!(
        row.split_whitespace()
            .next()
            .is_some_and(|n| n.parse::<u64>().is_ok()),
        "no result row: {f:#?}"
    );
}

#[test]
fn perftest_between_two_copies() {
    let _serial = serial();
    // RC for every test; UD sends (address handles from the completion,
    // ibv_create_ah_from_wc) and a UC write.
    let cases: [(&str, &[&str]); 10] = [
        ("ib_write_bw", &[]),
        ("ib_read_bw", &[]),
        ("ib_send_bw", &[]),
        ("ib_atomic_bw", &[]),
        ("ib_write_lat", &[]),
        ("ib_read_lat", &[]),
        ("ib_send_lat", &[]),
        ("ib_send_bw", &["-c", "UD"]),
        ("ib_send_lat", &["-c", "UD"]),
        ("ib_write_bw", &["-c", "UC"]),
    ];
    for (i, (prog, extra)) in cases.into_iter().enumerate() {
        if !have(prog) {
            return;
        }
        let mut a = vec!["-d", "rxe0", "-x", "0", "-F", "-n", "100"];
        a.extend_from_slice(extra);
        let (s, c) = tools(prog, "127.0.110.13", "127.0.110.14", 19150 + i as u16, &a);
        // ib_read_lat's server only serves: the client reports.
        if prog == "ib_read_lat" {
            assert!(s.ok(), "{s:#?}");
        } else {
            check_perf(&s);
        }
        check_perf(&c);
    }
}

#[test]
fn perftest_against_rxe_perf_both_ways() {
    let _serial = serial();
    let cases: [(&str, &[&str]); 7] = [
        ("ib_write_bw", &["write"]),
        ("ib_read_bw", &["read"]),
        ("ib_send_bw", &["send"]),
        ("ib_atomic_bw", &["atomic"]),
        ("ib_write_lat", &["write", "--lat"]),
        ("ib_read_lat", &["read", "--lat"]),
        ("ib_send_lat", &["send", "--lat"]),
    ];
    for (i, (prog, rxe_args)) in cases.into_iter().enumerate() {
        if !have(prog) {
            return;
        }
        let perf_args = ["-d", "rxe0", "-x", "0", "-F", "-n", "100"];
        // The Debian tool serves, rxe perf connects.
        let port = (19160 + 2 * i as u16).to_string();
        let mut a: Vec<&str> = perf_args.to_vec();
        a.extend(["-p", &port]);
        let mut server = exec("127.0.110.15", prog, &a);
        wait_listening(port.parse().unwrap(), &mut server);
        let mut r = vec!["perf"];
        r.extend_from_slice(rxe_args);
        r.extend([
            "--ip",
            "127.0.110.16",
            "-p",
            &port,
            "-n",
            "100",
            "127.0.0.1",
        ]);
        let c = support::run(&r, T);
        let s = server.finish(T);
        assert!(c.ok(), "{c:#?}");
        // ib_read_lat's server only serves: the client reports.
        if prog == "ib_read_lat" {
            assert!(s.ok(), "{s:#?}");
        } else {
            check_perf(&s);
        }
        // rxe perf serves, the Debian tool connects.
        let port = (19161 + 2 * i as u16).to_string();
        let mut r = vec!["perf"];
        r.extend_from_slice(rxe_args);
        r.extend(["--ip", "127.0.110.17", "-p", &port, "-n", "100"]);
        let mut server = Rxe::spawn(&r);
        server.wait_for_line("* Waiting for client to connect... *", T);
        let mut a: Vec<&str> = perf_args.to_vec();
        a.extend(["-p", &port, "127.0.110.17"]);
        let c = exec("127.0.110.18", prog, &a).finish(T);
        let s = server.finish(T);
        check_perf(&c);
        assert!(s.ok(), "{s:#?}");
    }
}

#[test]
fn a_second_process_on_a_busy_address_is_told_what_to_do() {
    let _serial = serial();
    if !have("ibv_rc_pingpong") {
        return;
    }
    let mut first = exec(
        "127.0.110.19",
        "ibv_rc_pingpong",
        &["-d", "rxe0", "-g", "0", "-p", "19176"],
    );
    wait_listening(19176, &mut first);
    // The first holds 127.0.110.19:4791 now; a second process on the same
    // address cannot create its PD.
    let second = exec(
        "127.0.110.19",
        "ibv_rc_pingpong",
        &["-d", "rxe0", "-g", "0", "-p", "19177"],
    )
    .finish(T);
    assert!(!second.ok(), "{second:#?}");
    assert!(
        second.stderr.contains("is used by another process")
            && second.stderr.contains("RXE_IBV_DEVICES"),
        "{second:#?}"
    );
    drop(first);
}

/// Builds `tests/c/NAME.c` against the installed verbs.h and libibverbs.so
/// (the real ones) and runs it under `rxe exec --ip ADDR` (the drop-in
/// case); it must print only "OK". Skipped without verbs.h only when
/// RXE_SKIP_IBVERBS_TOOLS=1.
fn c_program_prints_ok(name: &str, addr: &str) {
    c_program_with_args_prints_ok(name, addr, &[]);
}

/// [`c_program_prints_ok`] with arguments for the program.
fn c_program_with_args_prints_ok(name: &str, addr: &str, args: &[&str]) {
    let Some((dir, exe)) = build_c(name) else {
        return;
    };
    let f = exec(addr, exe.to_str().unwrap(), args).finish(T);
    assert!(f.ok() && f.stdout == ["OK"], "{f:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_rsocket_calls_fail_with_socket_errnos() {
    c_program_with_args_prints_ok("rsocket_errors", "127.0.110.25", &["127.0.110.25"]);
}

#[test]
fn path_migration_from_c() {
    // One device on two addresses (GID 0 and 1): the alternate path.
    c_program_prints_ok("path_migration", "127.0.110.30+127.1.110.30");
}

#[test]
fn bad_input_from_c_fails_as_rdma_core_does() {
    let _serial = serial();
    c_program_prints_ok("bad_input", "127.0.110.20");
}

#[test]
fn completion_events_wake_a_blocked_waiter_and_only_when_armed() {
    let _serial = serial();
    // A thread asleep in ibv_get_cq_event (past the spin), a waiter inside
    // the spin, an unarmed CQ and a solicited-only arm.
    c_program_prints_ok("cq_events", "127.0.170.9");
}

#[test]
fn memory_windows_and_atomic_write_from_c() {
    let _serial = serial();
    // ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw are inline in verbs.h:
    // they reach rxe through the context's ops; IBV_WR_BIND_MW,
    // IBV_WR_LOCAL_INV, ibv_wr_bind_mw and ibv_wr_local_inv through
    // post_send and the extended QP.
    c_program_prints_ok("memory_windows", "127.0.0.186");
}

#[test]
fn uc_ud_and_srq_pingpong_against_rxe_pingpong_both_ways() {
    let _serial = serial();
    // srq: no --chk-echo (the tool's QPs share one buffer, so what comes
    // back is not one message).
    let cases: [(&str, &str, &[&str], u64); 3] = [
        ("ibv_uc_pingpong", "uc", &["--chk-echo"], 4096),
        ("ibv_ud_pingpong", "ud", &["-s", "1024", "--chk-echo"], 1024),
        ("ibv_srq_pingpong", "srq", &["-q", "2"], 4096),
    ];
    for (i, (prog, kind, rxe_extra, size)) in cases.into_iter().enumerate() {
        if !have(prog) {
            return;
        }
        let tool_extra: Vec<&str> = rxe_extra
            .iter()
            .copied()
            .filter(|a| *a != "--chk-echo")
            .collect();
        let port = (19180 + 2 * i as u16).to_string();
        // rxe serves, the Debian tool connects.
        let mut a = vec![
            "pingpong",
            kind,
            "--ip",
            "127.0.110.21",
            "-p",
            &port,
            "-n",
            "50",
        ];
        a.extend_from_slice(rxe_extra);
        let mut server = Rxe::spawn(&a);
        server.wait_for_line("  local address:", T);
        let mut t = vec!["-d", "rxe0", "-g", "0", "-p", &port, "-n", "50"];
        t.extend_from_slice(&tool_extra);
        t.push("127.0.110.21");
        let c = exec("127.0.110.22", prog, &t).finish(T);
        let s = server.finish(T);
        check_pingpong(&c, "127.0.110.21", size, 50);
        assert!(s.ok(), "{s:#?}");
        // The Debian tool serves, rxe connects.
        let port = (19181 + 2 * i as u16).to_string();
        let mut t = vec!["-d", "rxe0", "-g", "0", "-p", &port, "-n", "50"];
        t.extend_from_slice(&tool_extra);
        let mut server = exec("127.0.110.23", prog, &t);
        wait_listening(port.parse().unwrap(), &mut server);
        let mut a = vec![
            "pingpong",
            kind,
            "--ip",
            "127.0.110.24",
            "-p",
            &port,
            "-n",
            "50",
        ];
        a.extend_from_slice(rxe_extra);
        a.push("127.0.0.1");
        let c = support::run(&a, T);
        let s = server.finish(T);
        check_pingpong(&s, "127.0.110.24", size, 50);
        assert!(c.ok(), "{c:#?}");
    }
}
