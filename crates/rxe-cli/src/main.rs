//! `rxe`: the command-line face of the rxe software RoCE NIC.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod dissect;

#[derive(Parser)]
#[command(name = "rxe", version, about = "rxe: a software RoCEv2 NIC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode every RoCE packet (RoCEv2, RoCEv1, native IB) in a pcap or pcapng file.
    Dissect(dissect::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dissect(args) => dissect::run(&args),
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
