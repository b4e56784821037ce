//! `rxe exec`: run an unmodified libibverbs program over rxe.
//!
//! The program gets rxe's drop-in `libibverbs.so.1` and `librdmacm.so.1`
//! (both crate rxe-ibverbs) and the stub `libmlx5.so.1`/`libefa.so.1`
//! that perftest links, with its
//! devices named in `RXE_IBV_DEVICES`: `rxe0`, `rxe1`, ... on the places
//! given by `--ip`/`-d`, in order, or without them one device per up,
//! non-loopback interface with an address. The device runs inside the
//! program's own process; each process needs its own address.
//!
//! The libraries are found in `RXE_LIB_DIR`, or next to this executable
//! (or in its `deps/`, where `cargo test` builds them). Cargo names them
//! `libibverbs.so`, ...; the loader wants their SONAMEs, so a directory of
//! `.so.1` links is made under the temporary directory. The program then
//! runs with that directory first in `LD_LIBRARY_PATH` and the three
//! libraries in `LD_PRELOAD` (which also beats an RPATH), after whatever
//! the caller preloads already.

use std::ffi::OsString;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A device on this local address (repeatable: rxe0, rxe1, ... in the
    /// order given, with -d); ADDR+ADDR is one device on both addresses
    /// (GID indexes 0 and 1: an alternate path for path migration).
    #[arg(long = "ip", value_name = "ADDR", value_parser = parse_addresses)]
    ips: Vec<String>,
    /// A device on this network interface, with all its addresses
    /// (repeatable).
    #[arg(short = 'd', long = "ib-dev", value_name = "IFACE")]
    ifaces: Vec<String>,
    /// Write every packet of the device to this pcap file (several
    /// devices: FILE.rxe0, FILE.rxe1, ...).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Only print the environment the program would get, one VAR=value
    /// per line, and do not run it.
    #[arg(long)]
    print_env: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    command: Vec<OsString>,
}

/// The libraries a program needs: (file cargo builds, SONAME).
/// `librdmacm.so.1` is the same file as `libibverbs.so.1` (the rdma_*
/// calls live in rxe-ibverbs): the loader maps one object under both
/// names, because both links lead to one inode.
const LIBS: [(&str, &str); 4] = [
    ("libibverbs.so", "libibverbs.so.1"),
    ("libibverbs.so", "librdmacm.so.1"),
    ("libmlx5.so", "libmlx5.so.1"),
    ("libefa.so", "libefa.so.1"),
];

/// One `--ip` value: an address, or addresses joined by `+`.
fn parse_addresses(s: &str) -> Result<String, String> {
    let ips: Result<Vec<IpAddr>, _> = s.split('+').map(str::parse).collect();
    match ips {
        Ok(v) => Ok(v
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join("+")),
        Err(e) => Err(format!("{s:?}: {e} (want ADDR or ADDR+ADDR)")),
    }
}

/// `--ip` and `-d` values in command-line order: clap keeps each list in
/// order, the raw arguments say how the two interleave.
fn ordered_targets(args: &Args, raw: &[String]) -> Vec<String> {
    let (mut ips, mut ifs) = (args.ips.iter(), args.ifaces.iter());
    let mut out = Vec::new();
    for a in raw.iter().take_while(|a| *a != "--") {
        let is_ip = a == "--ip" || a.starts_with("--ip=");
        let is_if = a == "-d"
            || a == "--ib-dev"
            || a.starts_with("--ib-dev=")
            || (a.starts_with("-d") && a.len() > 2 && !a.starts_with("--"));
        if is_ip {
            if let Some(ip) = ips.next() {
                out.push(ip.to_string());
            }
        } else if is_if {
            if let Some(i) = ifs.next() {
                out.push(i.clone());
            }
        }
    }
    out.extend(ips.map(|i| i.to_string()));
    out.extend(ifs.cloned());
    out
}

/// Without places: every up interface that is not loopback and has an
/// address, as the library itself defaults to.
fn default_targets() -> Result<Vec<String>> {
    let t: Vec<String> = rxe_net::netif::list_interfaces()?
        .into_iter()
        .filter(|i| {
            i.up && i.name != "lo"
                && i.addrs.iter().any(|a| match a {
                    IpAddr::V4(v4) => !v4.is_loopback(),
                    IpAddr::V6(v6) => !v6.is_loopback() && v6.segments()[0] & 0xffc0 != 0xfe80,
                })
        })
        .map(|i| i.name)
        .collect();
    if t.is_empty() {
        bail!("no interface is up with an address: give the device a place with --ip ADDR or -d IFACE");
    }
    Ok(t)
}

/// Where the built libraries are.
pub(crate) fn lib_dir() -> Result<PathBuf> {
    let has = |d: &Path| d.join(LIBS[0].0).exists() || d.join(LIBS[0].1).exists();
    if let Some(d) = std::env::var_os("RXE_LIB_DIR") {
        let d = PathBuf::from(d);
        if has(&d) {
            return Ok(d);
        }
        bail!("RXE_LIB_DIR={} holds no libibverbs.so", d.display());
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // Both may exist (cargo copies a workspace member's library up from
    // deps/ only when it is built for itself): take the newer, so that a
    // stale copy never wins over a fresh build.
    let modified = |d: &Path| {
        std::fs::metadata(d.join(LIBS[0].0))
            .or_else(|_| std::fs::metadata(d.join(LIBS[0].1)))
            .and_then(|m| m.modified())
            .ok()
    };
    if let Some(d) = [dir.clone(), dir.join("deps")]
        .into_iter()
        .filter(|d| has(d))
        .max_by_key(|d| modified(d))
    {
        return Ok(d);
    }
    bail!(
        "no libibverbs.so next to {} (build it with `cargo build -p rxe-ibverbs -p rxe-stub-mlx5 -p rxe-stub-efa`, or set RXE_LIB_DIR)",
        exe.display()
    )
}

/// A directory of `SONAME -> built file` links for `src`.
fn soname_dir(src: &Path) -> Result<PathBuf> {
    let src = src.canonicalize()?;
    if LIBS.iter().all(|(_, so)| src.join(so).exists()) {
        return Ok(src);
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    src.hash(&mut h);
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let dir = std::env::temp_dir().join(format!("rxe-lib-{user}-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (file, so) in LIBS {
        let target = src.join(file);
        if !target.exists() {
            eprintln!(
                "rxe exec: warning: no {file} in {} (programs that link it will not start)",
                src.display()
            );
            continue;
        }
        // Replace atomically, so that concurrent `rxe exec`s never see a
        // missing link.
        let tmp = dir.join(format!(".{so}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)?;
        std::fs::rename(&tmp, dir.join(so))?;
    }
    Ok(dir)
}

fn prepend(var: &str, value: &str, sep: char) -> String {
    match std::env::var(var) {
        Ok(old) if !old.is_empty() => format!("{value}{sep}{old}"),
        _ => value.to_string(),
    }
}

/// `value` after what `var` already holds: the caller's own preloads keep
/// their precedence, so a tracer or test shim that defines `ibv_*` or
/// `rdma_*` functions still interposes on rxe's libraries.
fn append(var: &str, value: &str, sep: char) -> String {
    match std::env::var(var) {
        Ok(old) if !old.is_empty() => format!("{old}{sep}{value}"),
        _ => value.to_string(),
    }
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let raw: Vec<String> = std::env::args().collect();
    let mut targets = ordered_targets(args, &raw);
    if targets.is_empty() {
        targets = default_targets()?;
    }
    let devices = targets
        .iter()
        .enumerate()
        .map(|(i, t)| format!("rxe{i}={t}"))
        .collect::<Vec<_>>()
        .join(",");
    let dir = soname_dir(&lib_dir()?)?;
    let d = dir.display().to_string();
    let preload = LIBS
        .iter()
        .map(|(_, so)| dir.join(so))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let mut env: Vec<(String, String)> = vec![
        ("RXE_IBV_DEVICES".into(), devices),
        (
            "LD_LIBRARY_PATH".into(),
            prepend("LD_LIBRARY_PATH", &d, ':'),
        ),
        ("LD_PRELOAD".into(), append("LD_PRELOAD", &preload, ' ')),
    ];
    if let Some(p) = &args.pcap {
        env.push(("RXE_IBV_PCAP".into(), p.display().to_string()));
    }
    if args.print_env {
        for (k, v) in &env {
            println!("{k}={v}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (prog, rest) = args.command.split_first().context("no program to run")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest);
    if args.pcap.is_none() {
        cmd.env_remove("RXE_IBV_PCAP");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // exec only returns on failure.
    let e = cmd.exec();
    bail!("cannot run {}: {e}", prog.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_keep_their_command_line_order() {
        let a = Args {
            ips: vec!["127.0.0.2".into(), "127.0.0.3".into()],
            ifaces: vec!["eth0".into()],
            pcap: None,
            print_env: false,
            command: vec!["x".into()],
        };
        let raw: Vec<String> = [
            "rxe",
            "exec",
            "--ip",
            "127.0.0.2",
            "-d",
            "eth0",
            "--ip=127.0.0.3",
            "--",
            "x",
            "--ip",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            ordered_targets(&a, &raw),
            ["127.0.0.2", "eth0", "127.0.0.3"]
        );
    }
}
