//! The options of `rxe pingpong`, checked and completed with the tools'
//! defaults into the [`Config`] of one run.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::ValueEnum;
use rxe_core::wire::grh::HEADER_LEN as GRH_LEN;
use rxe_verbs::{PathMtu, QpType};

use super::handshake::{self, SRQ_MESSAGES};
use crate::options;
use crate::pattern::Role;
use crate::place::{Capture, Place};

/// `srq_pingpong` has room for this many QPs (and always sends this many
/// descriptions).
const MAX_SRQ_QP: u32 = SRQ_MESSAGES as u32;

/// Which of the four tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// ibv_rc_pingpong: one RC QP.
    Rc,
    /// ibv_uc_pingpong: one UC QP.
    Uc,
    /// ibv_ud_pingpong: one UD QP, Q_Key 0x11111111, messages up to the port MTU.
    Ud,
    /// ibv_srq_pingpong: -q RC QPs sharing one shared receive queue.
    Srq,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Without HOST: wait on TCP port -p for a client. With HOST: connect to the server there.
Both sides must use the same kind, -s, -m, -n (and -q for srq). Each side needs its own
device, so on one host give each its own --ip (127.0.0.1 and 127.0.0.2, say). Without
--ip or -d, a client's device goes on the address it reaches HOST from, a server's on the
first interface that is up with an address (not loopback).
Interoperates with ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
(give those -g with the index of their IPv4 GID).")]
pub struct Args {
    /// rc, uc, ud or srq.
    #[arg(value_enum)]
    kind: Kind,
    /// The server to connect to; without it, be the server.
    host: Option<String>,
    #[command(flatten)]
    pub(super) place: Place,
    #[command(flatten)]
    pub(super) capture: Capture,
    /// At the end, print the device's nonzero counters on one line, as
    /// `rdma statistic show` does (duplicates re-acknowledged, NAKs, drops
    /// by reason ...).
    #[arg(long)]
    pub(super) counters: bool,
    /// Local port GID index [default: the GID of --ip, else the first IPv4 GID].
    #[arg(short = 'g', long = "gid-idx", value_name = "GID_INDEX")]
    gid_idx: Option<u8>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long, default_value_t = handshake::DEFAULT_PORT)]
    port: u16,
    /// Use this port of the device (rxe devices have port 1 only).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Size of each message [default: 4096; ud: 2048].
    #[arg(short = 's', long)]
    size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 1024] (not for ud).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges (srq: over all QPs together).
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level.
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Fill each message with a pattern and check every one received
    /// (rxe on both sides only).
    #[arg(short = 'c', long = "chk", conflicts_with = "chk_echo")]
    check: bool,
    /// The peer is rdma-core's own ibv_rc/uc/ud_pingpong, which receives
    /// into the buffer it sends from and so sends back the message it last
    /// received: send a new pattern each time and check that every message
    /// coming back is the one sent before it (a client's first message,
    /// its initial buffer, is not checked).
    #[arg(long = "chk-echo")]
    chk_echo: bool,
    /// Number of QPs (srq only) [default: 16].
    #[arg(short = 'q', long = "num-qp")]
    num_qp: Option<u32>,
    /// Give up when the peer or a completion keeps us waiting this long
    /// (seconds) [default: wait forever, as the real tools].
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
}

/// What `rxe pingpong` checks of the data it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    Off,
    /// `-c`: the peer (rxe) fills each message with its pattern.
    Pattern,
    /// `--chk-echo`: the peer (the real tool) sends back our last message.
    Echo,
}

/// The validated settings of one run.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) kind: Kind,
    pub(super) host: Option<String>,
    pub(super) port: u16,
    pub(super) size: usize,
    pub(super) mtu: PathMtu,
    pub(super) rx_depth: u32,
    pub(super) iters: u64,
    pub(super) sl: u8,
    pub(super) events: bool,
    pub(super) check: Check,
    pub(super) num_qp: u32,
    pub(super) timeout: Option<Duration>,
    pub(super) gid_idx: Option<u8>,
}

impl Config {
    pub(super) fn from_args(a: &Args) -> Result<Config> {
        options::check_ib_port(a.ib_port)?;
        let size = a
            .size
            .unwrap_or(if a.kind == Kind::Ud { 2048 } else { 4096 });
        if size == 0 {
            bail!("invalid size 0: messages carry at least one byte");
        }
        let mtu = match (a.kind, a.mtu) {
            (Kind::Ud, Some(_)) => {
                bail!("-m does not apply to ud: a UD message is one packet of at most the port MTU")
            }
            (_, Some(m)) => options::path_mtu(m)?,
            (_, None) => PathMtu::Mtu1024,
        };
        let num_qp = match (a.kind, a.num_qp) {
            (Kind::Srq, q) => q.unwrap_or(16),
            (_, Some(_)) => bail!("-q applies to srq only"),
            (_, None) => 1,
        };
        if num_qp == 0 || num_qp > MAX_SRQ_QP {
            bail!("invalid number of QPs {num_qp}: 1 to {MAX_SRQ_QP}");
        }
        if a.rx_depth == 0 {
            bail!("invalid rx-depth 0: at least one receive must be posted");
        }
        if num_qp > a.rx_depth {
            bail!(
                "rx-depth {} is too small for {num_qp} QPs: each QP needs at least one receive",
                a.rx_depth
            );
        }
        if a.iters == 0 {
            bail!("invalid number of iterations 0");
        }
        if a.sl > 15 {
            bail!("invalid service level {}: 0 to 15", a.sl);
        }
        let slot = size as u64
            + if a.kind == Kind::Ud {
                GRH_LEN as u64
            } else {
                0
            };
        let total = slot * u64::from(a.rx_depth) + size as u64 * u64::from(num_qp);
        if total > 1 << 30 {
            bail!(
                "size {size} x rx-depth {} needs more than 1 GiB of buffers",
                a.rx_depth
            );
        }
        let check = match (a.check, a.chk_echo) {
            (_, true) if a.kind == Kind::Srq => bail!(
                "--chk-echo does not apply to srq: ibv_srq_pingpong's QPs share one buffer, so what it sends back is not one message"
            ),
            (_, true) => Check::Echo,
            (true, false) => Check::Pattern,
            (false, false) => Check::Off,
        };
        let timeout = options::timeout(a.timeout)?;
        Ok(Config {
            kind: a.kind,
            host: a.host.clone(),
            port: a.port,
            size: size as usize,
            mtu,
            rx_depth: a.rx_depth,
            iters: u64::from(a.iters),
            sl: a.sl,
            events: a.events,
            check,
            num_qp,
            timeout,
            gid_idx: a.gid_idx,
        })
    }

    pub(super) fn role(&self) -> Role {
        if self.host.is_some() {
            Role::Client
        } else {
            Role::Server
        }
    }

    pub(super) fn qp_type(&self) -> QpType {
        match self.kind {
            Kind::Rc | Kind::Srq => QpType::Rc,
            Kind::Uc => QpType::Uc,
            Kind::Ud => QpType::Ud,
        }
    }

    /// Bytes of one receive buffer.
    pub(super) fn recv_len(&self) -> usize {
        self.size + if self.kind == Kind::Ud { GRH_LEN } else { 0 }
    }

    /// How many descriptions go each way in the handshake.
    pub(super) fn messages(&self) -> usize {
        if self.kind == Kind::Srq {
            SRQ_MESSAGES
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(args: &[&str]) -> Result<Config> {
        Config::from_args(&crate::test_support::parse_args("pp", args)?)
    }

    #[test]
    fn data_checks() {
        assert_eq!(cfg(&["rc"]).unwrap().check, Check::Off);
        assert_eq!(cfg(&["rc", "-c"]).unwrap().check, Check::Pattern);
        assert_eq!(cfg(&["ud", "--chk-echo"]).unwrap().check, Check::Echo);
        assert!(cfg(&["rc", "-c", "--chk-echo"]).is_err());
        let e = cfg(&["srq", "--chk-echo"]).unwrap_err().to_string();
        assert!(e.contains("share one buffer"), "{e}");
    }

    #[test]
    fn defaults_are_the_tools() {
        let c = cfg(&["rc"]).unwrap();
        assert_eq!(
            (c.size, c.mtu, c.rx_depth, c.iters, c.port, c.num_qp),
            (4096, PathMtu::Mtu1024, 500, 1000, 18515, 1)
        );
        assert_eq!(c.role(), Role::Server);
        let c = cfg(&["ud", "10.0.0.1"]).unwrap();
        assert_eq!((c.size, c.role()), (2048, Role::Client));
        assert_eq!(c.recv_len(), 2088);
        let c = cfg(&["srq"]).unwrap();
        assert_eq!((c.num_qp, c.messages()), (16, 256));
        let c = cfg(&["uc", "-s", "1", "-m", "4096", "-n", "3", "-e", "-c", "h"]).unwrap();
        assert_eq!((c.size, c.mtu, c.iters), (1, PathMtu::Mtu4096, 3));
        assert!(c.events && c.check == Check::Pattern);
    }

    #[test]
    fn bad_settings_are_refused() {
        for bad in [
            &["rc", "-m", "1000"][..],
            &["ud", "-m", "1024"],
            &["rc", "-q", "4"],
            &["srq", "-q", "0"],
            &["srq", "-q", "257"],
            &["srq", "-q", "20", "-r", "10"],
            &["rc", "-s", "0"],
            &["rc", "-n", "0"],
            &["rc", "-r", "0"],
            &["rc", "-l", "16"],
            &["rc", "-i", "2"],
            &["rc", "--timeout", "-1"],
            &["rc", "-s", "1000000", "-r", "16000"],
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
        // clap refuses these before we see them.
        assert!(cfg(&["xx"]).is_err());
        assert!(cfg(&["rc", "--ip", "nope"]).is_err());
        assert!(cfg(&["rc", "--ip", "127.0.0.1", "-d", "lo"]).is_err());
        assert!(cfg(&["rc", "-p", "70000"]).is_err());
    }
}
