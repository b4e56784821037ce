//! `rxe perf {write,read,send,atomic} [--lat]`: perftest's `ib_write_bw`,
//! `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`,
//! `ib_read_lat` and `ib_send_lat` on an rxe device, with their defaults,
//! QP attributes, TCP exchange ([`handshake`]), traffic and
//! output ([`report`]), so that either side can be the real
//! tool (on kernel rxe or a NIC) and the other `rxe`.
//!
//! The traffic is the tools': a bandwidth client keeps up to `-t` requests
//! outstanding per QP, asks for a completion every `CQ Moderation`
//! requests, and walks the remote address through the peer's buffer in
//! cache-line steps when messages are small; the server of the RDMA tests
//! only answers (its NIC does the work) and prints the client's report;
//! the SEND server measures what it receives. `ib_write_lat` ping-pongs
//! RDMA WRITEs, each side watching the last byte of its buffer for the
//! peer's iteration number (the server writes first); `ib_send_lat`
//! ping-pongs SENDs (the client sends first); `ib_read_lat` issues one
//! READ at a time.
//!
//! What rxe adds: `--ip` puts the device on one local address, `--check`
//! gives every message and buffer a pattern and checks every byte that
//! arrives, every READ and every atomic result, and the final contents of
//! the buffer the peer wrote (meaningful only when both sides are rxe: the
//! real tools send whatever their buffers hold), and `--timeout` bounds
//! every wait (the real tools wait forever).
//!
//! The files: [`config`] the options, [`mod@session`] one run (the TCP
//! exchanges, the tables, which loop runs), [`setup`] the CQ, MRs and QPs
//! and their bring-up, [`layout`] where things are in each region,
//! [`queues`] posting and polling, [`bandwidth`] and [`latency`] the
//! loops, [`checks`] the data checks, [`handshake`] perftest's TCP
//! messages, [`report`] its tables.

mod bandwidth;
mod checks;
mod config;
mod handshake;
mod latency;
mod layout;
mod queues;
mod report;
mod session;
mod setup;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::place;
pub use config::Args;
use config::Config;
use handshake::Verb;
use session::session;

/// How long a side keeps its device after nothing more arrived, so that the
/// acknowledgements of the peer's last requests (and answers to its
/// retransmissions: kernel rxe retransmits forever with retry_cnt 7) leave
/// before the UDP port closes. `ib_write_lat` has no closing exchange, so
/// its server may end before the client has the last acknowledgement.
const LINGER: Duration = Duration::from_millis(200);
const LINGER_WRITE_LAT: Duration = Duration::from_millis(1000);

pub fn run(args: &Args) -> Result<ExitCode> {
    let cfg = Config::from_args(args)?;
    let linger = if cfg.lat && cfg.verb == Verb::Write {
        LINGER_WRITE_LAT
    } else {
        LINGER
    };
    place::run_on_device(
        &args.place,
        &args.capture,
        cfg.host.as_deref(),
        args.counters,
        linger,
        |dev, target| session(dev, target, &cfg),
    )
}
