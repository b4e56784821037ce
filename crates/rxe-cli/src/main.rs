//! `rxe`: the command-line face of the rxe software RoCE NIC.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod busy_poll;
mod congestion;
mod demo;
mod devices;
mod dissect;
mod exec;
mod ibv_format;
mod info;
mod ladder;
mod options;
mod pattern;
mod perf;
mod pingpong;
mod place;
mod side_channel;
#[cfg(test)]
mod test_support;

#[derive(Parser)]
#[command(name = "rxe", version, about = "rxe: a software RoCEv2 NIC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List where a device can be added: interfaces, their MTUs, and each
    /// address (`--ip`) with its GID.
    ///
    /// An rxe device lives in the process that adds it (each `rxe` command
    /// adds its own and removes it when it ends), so unlike `ibv_devices`
    /// this lists the places a device can go rather than devices.
    Devices(devices::Args),
    /// Add a device for a moment and describe it as `ibv_devinfo` does
    /// (`-v`: as `ibv_devinfo -v`), with its GID table.
    Info(info::Args),
    /// Ping-pong SENDs with a peer, as ibv_rc_pingpong, ibv_uc_pingpong,
    /// ibv_ud_pingpong and ibv_srq_pingpong do, and interoperating with
    /// them.
    Pingpong(pingpong::Args),
    /// perftest's bandwidth and latency tests (ib_write_bw, ib_read_bw,
    /// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat),
    /// interoperating with them.
    Perf(perf::Args),
    /// Two devices in this process: SEND, RDMA WRITE with immediate, RDMA
    /// READ, CMP_SWAP, FETCH_ADD and a UD SEND, every packet dissected and
    /// every result checked.
    Demo(demo::Args),
    /// Decode every RoCE packet (RoCEv2, RoCEv1, native IB) in a pcap or pcapng file.
    Dissect(dissect::Args),
    /// Run an unmodified libibverbs program (ibv_devinfo, ibv_rc_pingpong,
    /// perftest, ...) over rxe: `rxe exec --ip 127.0.0.2 -- ib_write_bw
    /// -d rxe0 -x 0 ...`. The devices run inside the program, one address
    /// per process; see docs/ibverbs.md.
    Exec(exec::Args),
    /// Draw a capture as an RDMA ladder diagram with a byte map of every
    /// packet: one self-contained HTML page.
    Ladder(ladder::Args),
    /// rxe and raw UDP side by side on loopback, in one run: RC WRITE,
    /// READ and SEND of 1 MiB, 64-byte WRITEs pipelined, the WRITE round
    /// trip; a table with the ratios and each side's CPU time.
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Devices(args) => devices::run(&args),
        Command::Info(args) => info::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Dissect(args) => dissect::run(&args),
        Command::Exec(args) => exec::run(&args),
        Command::Ladder(args) => ladder::run(&args),
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(code) => code,
        // A reader that went away (`rxe dissect f | head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rxe: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
