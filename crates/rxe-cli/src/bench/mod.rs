//! `rxe bench`: rxe and raw UDP side by side, in one run, on loopback,
//! with the ratios and the CPU each side spends (issue #14's figures).
//!
//! The raw UDP baselines ([`raw`]) run as two threads of this process on
//! 127.0.0.152-155; the rxe figures ([`perf_run`]) run `rxe perf` as two
//! child processes on 127.0.0.150 and .151, each with its own device, as
//! a user runs perftest; [`idle_qp`] measures an idle QP's memory on
//! 127.0.0.156; with Debian's perftest on the `PATH` and the drop-in
//! libraries built, [`perf_run::Program::Perftest`] runs `ib_write_bw`
//! and `ib_write_lat` over rxe the way a user's unmodified program runs
//! (`rxe exec`), on the same addresses. Every measurement lasts about `--duration`
//! seconds (the rxe ones by an iteration count picked for it), so a run
//! is bounded; `--quick` makes each a fraction of a second (the smoke
//! test). The machine may be busy: compare ratios of one run, and take
//! medians of several runs. [`table`] prints the result.

mod cpu;
mod idle_qp;
mod perf_run;
mod raw;
mod table;

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use perf_run::{PerfRun, Program};
use table::{Cpu, Row};

/// The raw UDP addresses (rxe's are 127.0.0.150 and .151).
const RAW_A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 152));
const RAW_B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 153));
/// A RoCEv2 packet of 4096 bytes of payload: BTH (12) + RETH (16) +
/// payload + ICRC (4).
const ROCE_4K: usize = 12 + 16 + 4096 + 4;
/// The TCP ports of the rxe runs (one each, so that no run waits for
/// another's TIME_WAIT).
const TCP_PORT: u16 = 18650;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each measurement lasts, about.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// A quick run (0.2 s each): the table's shape, not good numbers.
    #[arg(long)]
    quick: bool,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let secs = if args.quick {
        0.2
    } else {
        args.duration.clamp(0.05, 60.0)
    };
    let d = Duration::from_secs_f64(secs);
    let exe = std::env::current_exe().context("cannot find this executable")?;
    // Each rxe run: its iterations for about `secs` at the rates this
    // machine gave (issue #14), at least perftest's minimum of 5.
    let iters = |per_sec: f64| ((per_sec * secs) as u64).max(5).to_string();
    let limit = Duration::from_secs_f64(30.0 + 10.0 * secs);
    let port = std::cell::Cell::new(TCP_PORT);
    let run_with = |program: Program, args: &[&str], server_args: &[&str], env: &[(&str, &str)]| {
        port.set(port.get() + 1);
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let (a, sa) = (owned(args), owned(server_args));
        let e: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        let extra = if sa.is_empty() {
            String::new()
        } else {
            format!(" (server {})", sa.join(" "))
        };
        eprintln!(
            "rxe bench: {}{} {}{extra}",
            e.concat(),
            program.name(),
            a.join(" ")
        );
        perf_run::run(&exe, program, &a, &sa, env, port.get(), limit)
    };
    let perf_with = |args: &[&str], server_args: &[&str], env: &[(&str, &str)]| {
        run_with(Program::RxePerf, args, server_args, env)
    };
    let perf_env = |args: &[&str], env: &[(&str, &str)]| perf_with(args, &[], env);
    let perf = |args: &[&str]| perf_env(args, &[]);

    // First, while the heap is fresh, so that the QPs take new pages
    // rather than ones freed by the runs before.
    eprintln!("rxe bench: idle QP memory");
    let idle = idle_qp::measure(if args.quick { 1_000 } else { 10_000 })?;
    eprintln!("rxe bench: raw UDP, {secs} s each");
    let gso = raw::gso_gro(RAW_A, RAW_B, ROCE_4K, d)?;
    let mmsg = raw::mmsg(RAW_A, RAW_B, ROCE_4K, d)?;
    // 64 bytes of payload as rxe sends them: BTH + RETH + 64 + ICRC.
    let small = raw::mmsg(RAW_A, RAW_B, 12 + 16 + 64 + 4, d)?;
    let pp = raw::ping_pong(RAW_A, RAW_B, d)?;
    for s in [&gso, &mmsg, &small] {
        if s.bad > 0 {
            eprintln!("rxe bench: {} raw datagrams had a bad CRC", s.bad);
        }
    }

    let mib = 1u64 << 20;
    let big = |test: &str| -> Result<(f64, Cpu)> {
        let n = iters(700.0);
        let r = perf(&[test, "-s", "1048576", "-n", &n, "--report_gbits"])?;
        let bytes = r.col(1)? * mib as f64;
        // READ moves data from the server to the client.
        let (tx, rx) = if test == "read" {
            (r.server_cpu, r.client_cpu)
        } else {
            (r.client_cpu, r.server_cpu)
        };
        Ok((r.col(3)?, Cpu::per_gb(tx, rx, bytes)))
    };
    let raw_gso_cpu = Cpu::per_gb(gso.tx_cpu, gso.rx_cpu, gso.bytes as f64);
    let raw_mmsg_cpu = Cpu::per_gb(mmsg.tx_cpu, mmsg.rx_cpu, mmsg.bytes as f64);
    let mut rows = Vec::new();
    let (write, write_cpu) = big("write")?;
    rows.push(Row::new(
        "RC WRITE 1 MiB, 1 QP [Gb/s]",
        write,
        gso.gbits(),
        ">= 0.5",
        write_cpu,
        raw_gso_cpu,
        "GSO+GRO 4128 B + CRC32",
    ));
    rows.push(Row::new(
        "RC WRITE 1 MiB, 1 QP [Gb/s]",
        write,
        mmsg.gbits(),
        "",
        write_cpu,
        raw_mmsg_cpu,
        "sendmmsg/recvmmsg 4128 B + CRC32",
    ));
    let (read, read_cpu) = big("read")?;
    rows.push(Row::new(
        "RC READ 1 MiB, 1 QP [Gb/s]",
        read,
        gso.gbits(),
        ">= 0.5",
        read_cpu,
        raw_gso_cpu,
        "GSO+GRO 4128 B + CRC32",
    ));
    let (send, send_cpu) = big("send")?;
    rows.push(Row::new(
        "RC SEND 1 MiB, 1 QP [Gb/s]",
        send,
        gso.gbits(),
        ">= 0.5",
        send_cpu,
        raw_gso_cpu,
        "GSO+GRO 4128 B + CRC32",
    ));

    // A 64-byte WRITE row (MsgRate, column 4, against sendmmsg of 96 B)
    // and a round-trip row (perftest's t_typical, column 4, is half the
    // round trip; column 1 the iterations): rxe perf's and perftest's
    // over the drop-in library alike.
    let small_row = |figure, goal, r: &PerfRun| -> Result<Row> {
        Ok(Row::new(
            figure,
            r.col(4)?,
            small.msg_rate() / 1e6,
            goal,
            Cpu::per_gb(r.client_cpu, r.server_cpu, r.col(1)? * 64.0),
            Cpu::per_gb(small.tx_cpu, small.rx_cpu, small.msgs as f64 * 64.0),
            "sendmmsg/recvmmsg 96 B + CRC32",
        ))
    };
    let rtt_row = |figure, r: &PerfRun| -> Result<Row> {
        Ok(Row::new(
            figure,
            2.0 * r.col(4)?,
            pp.rtt.as_secs_f64() * 1e6,
            "<= 2",
            Cpu::per_round_trip(r.client_cpu, r.server_cpu, r.col(1)?),
            Cpu::per_round_trip(pp.cpu_a, pp.cpu_b, pp.round_trips as f64),
            "busy-poll ping-pong 8 B",
        ))
    };

    let n = iters(200_000.0);
    let r = perf(&["write", "-s", "64", "-n", &n])?;
    rows.push(small_row(
        "RC WRITE 64 B pipelined [M msg/s]",
        ">= 2 M/s",
        &r,
    )?);
    // The same with the server's device busy polling (`rxe perf --busy`):
    // its driver thread no longer sleeps between batches, for a core.
    let r = perf_with(&["write", "-s", "64", "-n", &n], &["--busy"], &[])?;
    rows.push(small_row(
        "RC WRITE 64 B pipelined, server --busy [M msg/s]",
        "",
        &r,
    )?);

    let r = perf(&["write", "--lat", "-n", &iters(25_000.0)])?;
    rows.push(rtt_row("RC WRITE 2 B round trip [us]", &r)?);
    // Against rxe itself: many QPs against one, loss against none.
    let kib64 = 65536.0;
    let one = perf(&[
        "write",
        "-s",
        "65536",
        "-n",
        &iters(28_000.0),
        "--report_gbits",
    ])?;
    let many = perf(&[
        "write",
        "-s",
        "65536",
        "-n",
        &iters(28.0),
        "-q",
        "1000",
        "-t",
        "4",
        "--report_gbits",
    ])?;
    rows.push(Row::new(
        "RC WRITE 64 KiB, 1000 QPs [Gb/s]",
        many.col(3)?,
        one.col(3)?,
        ">= 0.9",
        Cpu::per_gb(many.client_cpu, many.server_cpu, many.col(1)? * kib64),
        Cpu::per_gb(one.client_cpu, one.server_cpu, one.col(1)? * kib64),
        "rxe itself, 1 QP (not raw UDP)",
    ));
    // As many WRITEs as the lossless row: at 70 a second (the rate before
    // early and selective retransmission) the run had shrunk to a tenth
    // of a second, and the row swung between 0.43 and 0.64 from run to run.
    let lossy = perf_env(
        &[
            "write",
            "-s",
            "1048576",
            "-n",
            &iters(700.0),
            "--report_gbits",
        ],
        &[("RXE_FAULTS", "drop=0.01,seed=1")],
    )?;
    rows.push(Row::new(
        "RC WRITE 1 MiB, 1 % loss [Gb/s]",
        lossy.col(3)?,
        write,
        ">= 0.5",
        Cpu::per_gb(
            lossy.client_cpu,
            lossy.server_cpu,
            lossy.col(1)? * mib as f64,
        ),
        write_cpu,
        "rxe itself, lossless (not raw UDP)",
    ));
    // The same figures for an unmodified program over the drop-in
    // library, when Debian's perftest and the libraries are here.
    match drop_in_missing() {
        Some(why) => eprintln!("rxe bench: no rows over rxe exec: {why}"),
        None => {
            let tool = |t| move |args: &[&str]| run_with(Program::Perftest(t), args, &[], &[]);
            let (bw, lat) = (tool("ib_write_bw"), tool("ib_write_lat"));
            let n = iters(700.0);
            let r = bw(&["-s", "1048576", "-n", &n, "--report_gbits"])?;
            rows.push(Row::new(
                "ib_write_bw 1 MiB over rxe exec [Gb/s]",
                r.col(3)?,
                gso.gbits(),
                ">= 0.5",
                Cpu::per_gb(r.client_cpu, r.server_cpu, r.col(1)? * mib as f64),
                raw_gso_cpu,
                "GSO+GRO 4128 B + CRC32",
            ));
            let r = bw(&["-s", "64", "-n", &iters(200_000.0)])?;
            rows.push(small_row(
                "ib_write_bw 64 B over rxe exec [M msg/s]",
                ">= 2 M/s",
                &r,
            )?);
            let r = lat(&["-n", &iters(25_000.0)])?;
            rows.push(rtt_row(
                "ib_write_lat 2 B round trip over rxe exec [us]",
                &r,
            )?);
        }
    }
    print!("{}", table::render(&rows, secs));
    println!(
        "\nIdle RC QP in RTS: {:.2} KiB each (resident-set growth over {} QPs; goal <= 16 KiB)",
        idle.bytes_per_qp / 1024.0,
        idle.qps
    );
    Ok(ExitCode::SUCCESS)
}

/// Why the rows over the drop-in library cannot run here, if they cannot:
/// perftest's tools are not on the `PATH`, or the libraries are not built.
fn drop_in_missing() -> Option<String> {
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    };
    if let Some(t) = ["ib_write_bw", "ib_write_lat"]
        .into_iter()
        .find(|t| !on_path(t))
    {
        return Some(format!("{t} is not on the PATH (Debian's perftest)"));
    }
    crate::exec::lib_dir().err().map(|e| e.to_string())
}
