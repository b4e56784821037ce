//! The options of `rxe perf`, checked and completed with perftest's
//! defaults into the [`Config`] of one run.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::ValueEnum;
use rxe_verbs::{AccessFlags, PathMtu};

use super::handshake::{self as hs, Flow, Verb};
use super::report::BwUnit;
use crate::options;
use crate::place::{Capture, Place};

/// Defaults of perftest.
const DEFAULT_BW_SIZE: u64 = 65536;
/// perftest's -a: sizes 2^1 to 2^23.
pub(super) const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;
const DEFAULT_LAT_SIZE: u64 = 2;
const DEFAULT_BW_ITERS: u64 = 5000;
const DEFAULT_LAT_ITERS: u64 = 1000;
const DEFAULT_TX_DEPTH: u32 = 128;
const DEFAULT_RX_DEPTH: u32 = 512;
const DEFAULT_CQ_MOD: u32 = 100;
/// Above this message size perftest's default moderation is 1.
const CQ_MOD_SIZE_LIMIT: u64 = 8192;
/// perftest will not run fewer.
const MIN_ITERS: u64 = 5;
/// perftest sets no bound; this one keeps a typo from making a million QPs
/// (the device has 65536).
const MAX_QPS: u32 = 4096;
/// A latency test keeps the time of every message.
const MAX_LAT_ITERS: u64 = 10_000_000;

/// Which perftest tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// ib_write_bw / ib_write_lat: RDMA WRITE.
    Write,
    /// ib_read_bw / ib_read_lat: RDMA READ.
    Read,
    /// ib_send_bw / ib_send_lat: SEND.
    Send,
    /// ib_atomic_bw: FETCH_ADD (or CMP_SWAP with --cmp-swap).
    Atomic,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Without HOST: wait on TCP port -p for a client. With HOST: connect to the server there.
Both sides must run the same test with the same -s, -n and -q (as with perftest). Each side
needs its own device, so on one host give each its own --ip (127.0.0.1 and 127.0.0.2, say).
Without --ip or -d, a client's device goes on the address it reaches HOST from, a server's
on the first interface that is up with an address (not loopback). A server given an IPv4
--ip listens on that address only, else on all IPv4 addresses (perftest's TCP side is IPv4).
rxe counts retry_cnt 7 as seven retries (kernel rxe retries forever), with the ACK timer
backing off to 4x: at the default -u 14 a peer may stall 1.8 s. For longer, raise -u.
Interoperates with perftest 4.5's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw,
ib_write_lat, ib_read_lat and ib_send_lat (RC, without -R; give those -x with the index of
their IPv4 GID).")]
pub struct Args {
    /// write, read, send or atomic.
    #[arg(value_enum)]
    test: Test,
    /// The server to connect to; without it, be the server.
    host: Option<String>,
    /// Measure latency (ib_*_lat) instead of bandwidth (ib_*_bw).
    #[arg(long)]
    lat: bool,
    /// atomic: CMP_AND_SWAP instead of FETCH_AND_ADD.
    #[arg(long = "cmp-swap")]
    cmp_swap: bool,
    /// atomic: FETCH_AND_ADD or CMP_AND_SWAP, as perftest's -A.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_name = "TYPE",
        value_parser = ["FETCH_AND_ADD", "CMP_AND_SWAP"],
        conflicts_with = "cmp_swap"
    )]
    atomic_type: Option<String>,
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
    #[arg(short = 'x', long = "gid-index", value_name = "GIDIDX")]
    gid_index: Option<u8>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long, default_value_t = hs::DEFAULT_PORT)]
    port: u16,
    /// Use this port of the device (rxe devices have port 1 only).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Message size [default: 65536; --lat: 2; atomic: 8, the only size].
    #[arg(short = 's', long, conflicts_with = "all")]
    size: Option<u64>,
    /// Every size from 2 bytes to 8 MiB, doubling, one row each, as
    /// perftest's -a (WRITE and READ tests, bandwidth and latency; both
    /// sides give it: the server's buffer must hold 8 MiB messages).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Number of messages per QP, at least 5 [default: 5000; --lat: 1000].
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the port's active
    /// MTU]; both sides use the smaller of theirs.
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// Requests outstanding per QP [default: 128, at most -n; --lat: 1].
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Ask for a completion every N requests [default: 100, at most -t;
    /// 1 for messages over 8 KiB].
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    cq_mod: Option<u32>,
    /// Receives posted per QP (SEND tests) [default: 512, at most -n].
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,
    /// Local ACK timeout: 4.096 us x 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// Connection type: RC only.
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    connection: String,
    /// Report bandwidth in Gb/s (10^9 bits) instead of MB/s (2^20 bytes).
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Accepted for perftest's command lines; rxe does not look at the CPU
    /// frequency.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Give every message and buffer a pattern and check all data that
    /// arrives, every READ, every atomic result and the final contents of
    /// the buffer the peer wrote (rxe on both sides only).
    #[arg(long, conflicts_with = "chk_same_reads")]
    check: bool,
    /// The peer is perftest's ib_read_bw server, whose buffer holds random
    /// bytes that do not change during the test: check that every READ of
    /// a position returns exactly what the first READ of it returned
    /// (READ bandwidth client only).
    #[arg(long = "chk-same-reads")]
    chk_same_reads: bool,
    /// Give up when the peer or a completion keeps us waiting this long
    /// (seconds) [default: wait forever, as the real tools].
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// The server of a WRITE or READ bandwidth test, which has nothing to
    /// poll for, polls its CQ anyway until the client's report comes, so
    /// that its own thread receives and answers (busy polling) instead of
    /// the device's driver thread: one core spins for it.
    #[arg(long)]
    busy: bool,
}

/// The validated settings of one run.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) verb: Verb,
    pub(super) lat: bool,
    pub(super) cmp_swap: bool,
    pub(super) host: Option<String>,
    pub(super) port: u16,
    pub(super) size: u64,
    pub(super) iters: u64,
    pub(super) mtu: Option<PathMtu>,
    pub(super) qps: usize,
    pub(super) tx_depth: u32,
    pub(super) rx_depth: u32,
    pub(super) cq_mod: u32,
    pub(super) qp_timeout: u8,
    pub(super) unit: BwUnit,
    pub(super) check: bool,
    pub(super) same_reads: bool,
    /// -a: every size of [`ALL_SIZES`]; `size` is the largest.
    pub(super) all: bool,
    pub(super) timeout: Option<Duration>,
    pub(super) gid_index: Option<u8>,
    /// --busy: a passive server busy polls while it waits.
    pub(super) busy: bool,
}

impl Config {
    pub(super) fn from_args(a: &Args) -> Result<Config> {
        let verb = match a.test {
            Test::Write => Verb::Write,
            Test::Read => Verb::Read,
            Test::Send => Verb::Send,
            Test::Atomic => Verb::Atomic,
        };
        options::check_ib_port(a.ib_port)?;
        if !a.connection.eq_ignore_ascii_case("RC") {
            bail!("connection type {}: rxe perf runs RC only", a.connection);
        }
        let cmp_swap = a.cmp_swap || a.atomic_type.as_deref() == Some("CMP_AND_SWAP");
        if verb != Verb::Atomic && (cmp_swap || a.atomic_type.is_some()) {
            bail!("--cmp-swap and -A apply to the atomic test only");
        }
        if a.lat && verb == Verb::Atomic {
            bail!("there is no atomic latency test: run atomic without --lat");
        }
        if a.all && !matches!(verb, Verb::Write | Verb::Read) {
            bail!("-a runs the WRITE and READ tests only");
        }
        if a.all && a.check {
            bail!("-a does not take --check (--chk-same-reads checks the READs of every size)");
        }
        let size = match (verb, a.size) {
            _ if a.all => 1 << ALL_SIZES.end(),
            (Verb::Atomic, None | Some(8)) => 8,
            (Verb::Atomic, Some(s)) => bail!("invalid size {s}: atomics are 8 bytes"),
            (_, Some(0)) => bail!("invalid size 0: messages carry at least one byte"),
            (_, Some(s)) => s,
            (_, None) if a.lat => DEFAULT_LAT_SIZE,
            (_, None) => DEFAULT_BW_SIZE,
        };
        if size > u64::from(u32::MAX >> 1) {
            bail!("invalid size {size}: at most 2^31 - 1 bytes");
        }
        let iters = a.iters.unwrap_or(if a.lat {
            DEFAULT_LAT_ITERS
        } else {
            DEFAULT_BW_ITERS
        });
        if iters < MIN_ITERS {
            bail!("invalid number of iterations {iters}: at least {MIN_ITERS}");
        }
        if iters > 1 << 40 || (a.lat && iters > MAX_LAT_ITERS) {
            bail!("invalid number of iterations {iters}: too many to keep every sample");
        }
        let mtu = a.mtu.map(options::path_mtu).transpose()?;
        if a.lat && a.qps != 1 {
            bail!("latency tests run one QP (-q 1)");
        }
        if a.qps == 0 || a.qps > MAX_QPS {
            bail!("invalid number of QPs {}: 1 to {MAX_QPS}", a.qps);
        }
        let tx_depth = match (a.lat, a.tx_depth) {
            (true, None | Some(1)) => 1,
            (true, Some(t)) => {
                bail!("invalid tx-depth {t}: latency tests keep one request in flight")
            }
            (false, Some(0)) => bail!("invalid tx-depth 0"),
            (false, t) => {
                let t = u64::from(t.unwrap_or(DEFAULT_TX_DEPTH)).min(iters);
                u32::try_from(t)?
            }
        };
        if tx_depth > 8192 {
            bail!("invalid tx-depth {tx_depth}: at most 8192");
        }
        let rx_depth = match a.rx_depth {
            Some(0) => bail!("invalid rx-depth 0"),
            Some(r) if r > 8192 => bail!("invalid rx-depth {r}: at most 8192"),
            r => u32::try_from(u64::from(r.unwrap_or(DEFAULT_RX_DEPTH)).min(iters))?,
        };
        let cq_mod = match (a.lat, a.cq_mod) {
            (true, _) => 1,
            (false, Some(0)) => bail!("invalid CQ moderation 0"),
            (false, Some(m)) => m.min(tx_depth),
            // perftest asks for every completion of large messages.
            (false, None) if size > CQ_MOD_SIZE_LIMIT => 1,
            (false, None) => DEFAULT_CQ_MOD.min(tx_depth),
        };
        if a.qp_timeout > 31 {
            bail!("invalid QP timeout {}: 0 to 31", a.qp_timeout);
        }
        let timeout = options::timeout(a.timeout)?;
        if a.chk_same_reads && (verb != Verb::Read || a.lat || a.host.is_none()) {
            bail!("--chk-same-reads applies to the client of the READ bandwidth test only");
        }
        Ok(Config {
            verb,
            lat: a.lat,
            cmp_swap,
            host: a.host.clone(),
            port: a.port,
            size,
            iters,
            mtu,
            qps: a.qps as usize,
            tx_depth,
            rx_depth,
            cq_mod,
            qp_timeout: a.qp_timeout,
            unit: if a.report_gbits {
                BwUnit::Gbits
            } else {
                BwUnit::MBytes
            },
            check: a.check,
            same_reads: a.chk_same_reads,
            all: a.all,
            timeout,
            gid_index: a.gid_index,
            busy: a.busy,
        })
    }

    pub(super) fn client(&self) -> bool {
        self.host.is_some()
    }

    pub(super) fn flow(&self) -> Flow {
        Flow {
            verb: self.verb,
            lat: self.lat,
            qps: self.qps,
        }
    }

    /// Each outstanding request has a local slot of its own (so that its
    /// data can be checked once it completes).
    pub(super) fn own_slots(&self) -> bool {
        self.check || self.same_reads
    }

    /// READ and atomic tests let many requests be outstanding.
    pub(super) fn reads(&self) -> bool {
        matches!(self.verb, Verb::Read | Verb::Atomic)
    }

    /// This side posts receives (the SEND server, both SEND latency sides).
    pub(super) fn receives(&self) -> bool {
        self.verb == Verb::Send && (self.lat || !self.client())
    }

    /// The access a QP grants its peer, as perftest's.
    pub(super) fn qp_access(&self) -> AccessFlags {
        match self.verb {
            Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
            Verb::Read => AccessFlags::REMOTE_READ,
            Verb::Write => AccessFlags::REMOTE_WRITE,
            Verb::Send => AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        }
    }
}

/// The [`Config`] of a command line, for the tests of this module and
/// its siblings.
#[cfg(test)]
pub(super) fn parse_config(args: &[&str]) -> Result<Config> {
    Config::from_args(&crate::test_support::parse_args("perf", args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    use parse_config as cfg;

    #[test]
    fn all_sizes_is_for_the_write_and_read_tests() {
        for t in ["write", "read"] {
            let c = cfg(&[t, "-a", "-n", "5"]).unwrap();
            assert!(c.all);
            assert_eq!(c.size, 8 << 20, "memory for the largest size");
        }
        assert!(cfg(&["read", "-a", "--chk-same-reads", "host"]).is_ok());
        assert!(cfg(&["write", "--lat", "-a"]).unwrap().all);
        assert!(cfg(&["read", "--lat", "-a", "host"]).unwrap().all);
        for bad in [
            &["send", "-a"][..],
            &["send", "--lat", "-a"],
            &["atomic", "-a"],
            &["write", "-a", "-s", "64"],
            &["write", "-a", "--check"],
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn same_reads_is_for_the_read_bw_client() {
        let c = cfg(&["read", "--chk-same-reads", "host"]).unwrap();
        assert!(c.same_reads && c.own_slots() && !c.check);
        for bad in [
            &["read", "--chk-same-reads"][..],
            &["write", "--chk-same-reads", "host"],
            &["read", "--lat", "--chk-same-reads", "host"],
            &["read", "--check", "--chk-same-reads", "host"],
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_perftests() {
        let c = cfg(&["write"]).unwrap();
        assert_eq!(
            (c.size, c.iters, c.tx_depth, c.cq_mod, c.port, c.qps),
            (65536, 5000, 128, 1, 18515, 1)
        );
        // Moderation as ib_write_bw prints it: 100 up to 8 KiB, else 1,
        // unless -Q; never above the TX depth.
        assert_eq!(cfg(&["write", "-s", "8192"]).unwrap().cq_mod, 100);
        assert_eq!(cfg(&["write", "-s", "8193"]).unwrap().cq_mod, 1);
        assert_eq!(cfg(&["write", "-Q", "10", "-n", "50"]).unwrap().cq_mod, 10);
        assert_eq!(cfg(&["write", "-Q", "100", "-n", "50"]).unwrap().cq_mod, 50);
        assert!(!c.client() && c.mtu.is_none() && c.unit == BwUnit::MBytes);
        let c = cfg(&["send", "--lat", "host"]).unwrap();
        assert_eq!((c.size, c.iters, c.tx_depth), (2, 1000, 1));
        assert!(c.client() && c.receives());
        let c = cfg(&["atomic", "-n", "100"]).unwrap();
        assert_eq!(
            (c.size, c.tx_depth, c.cq_mod, c.cmp_swap),
            (8, 100, 100, false)
        );
        assert!(cfg(&["atomic", "--cmp-swap"]).unwrap().cmp_swap);
        assert!(cfg(&["atomic", "-A", "CMP_AND_SWAP"]).unwrap().cmp_swap);
        let c = cfg(&[
            "read",
            "-n",
            "50",
            "-t",
            "16",
            "-q",
            "3",
            "-s",
            "4096",
            "--report_gbits",
        ])
        .unwrap();
        assert_eq!((c.tx_depth, c.cq_mod, c.qps), (16, 16, 3));
        assert_eq!(c.unit, BwUnit::Gbits);
        assert_eq!(c.qp_access(), AccessFlags::REMOTE_READ);
        let c = cfg(&["write", "-m", "4096", "-s", "1", "-F", "-c", "RC", "h"]).unwrap();
        assert_eq!((c.mtu, c.size), (Some(PathMtu::Mtu4096), 1));
    }

    #[test]
    fn bad_settings_are_refused() {
        for bad in [
            &["write", "-m", "1000"][..],
            &["write", "-s", "0"],
            &["write", "-n", "4"],
            &["atomic", "-s", "16"],
            &["atomic", "--lat"],
            &["write", "--cmp-swap"],
            &["write", "--lat", "-q", "2"],
            &["write", "--lat", "-t", "4"],
            &["write", "-q", "0"],
            &["write", "-q", "4097"],
            &["write", "-t", "0"],
            &["write", "-Q", "0"],
            &["send", "-r", "0"],
            &["write", "-c", "UC"],
            &["write", "-i", "2"],
            &["write", "-u", "32"],
            &["write", "--timeout", "0"],
            &["write", "-s", "4294967295"],
            &["write", "--lat", "-n", "20000000"],
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
        assert!(cfg(&["bogus"]).is_err());
        assert!(cfg(&["atomic", "-A", "SWAP"]).is_err());
        assert!(cfg(&["atomic", "-A", "CMP_AND_SWAP", "--cmp-swap"]).is_err());
        assert!(cfg(&["write", "--ip", "127.0.0.1", "-d", "lo"]).is_err());
    }
}
