//! `rxe pingpong {rc,uc,ud,srq}`: the libibverbs examples
//! `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong` on an rxe device, with their options, defaults, QP
//! attributes, TCP handshake and output, so that either side can be the
//! real tool (on kernel rxe or a NIC) and the other `rxe`.
//!
//! What rxe adds: `--ip` puts the device on one local address (so that two
//! processes on one host each have their own), `-c` fills every message
//! with a pattern and checks every received one (meaningful only when both
//! sides are rxe: the real tools send their buffer's 0x7b bytes),
//! `--chk-echo` checks the data against a real tool (which sends back what
//! it received), and `--timeout` bounds every wait (the real tools wait
//! forever).
//!
//! The exchange is the tools': the client sends first; each side, once a
//! QP's send and receive have both completed, sends again, until it has
//! sent and received `-n` messages (for srq, `-n` in total over its QPs).
//!
//! The files: [`config`] the options, [`session`] one run (objects, TCP
//! handshake, QP bring-up, closing lines), [`exchange`] the loop and the
//! data checks, [`handshake`] the tools' TCP messages, [`report`] their
//! output lines.

mod config;
mod exchange;
mod handshake;
mod report;
mod session;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::place;
pub use config::Args;
use config::Config;
use session::Pingpong;

/// How long a side keeps its device after nothing more arrived, so that
/// the acknowledgements of the peer's last messages leave before the UDP
/// port closes (an RC peer with retry_cnt 7 retransmits forever). Longer
/// than the peer's ACK timeout (67 ms at `timeout` 14, as ibv_rc_pingpong
/// sets it), so that a resend after a lost last ACK still finds the QP.
const LINGER: Duration = Duration::from_millis(200);

pub fn run(args: &Args) -> Result<ExitCode> {
    let cfg = Config::from_args(args)?;
    let host = cfg.host.clone();
    place::run_on_device(
        &args.place,
        &args.capture,
        host.as_deref(),
        args.counters,
        LINGER,
        |dev, target| Pingpong::new(dev, target, cfg).and_then(|mut p| p.run()),
    )
}
