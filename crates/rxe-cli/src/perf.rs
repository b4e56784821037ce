//! `rxe perf {write,read,send,atomic} [--lat]`: perftest's `ib_write_bw`,
//! `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`,
//! `ib_read_lat` and `ib_send_lat` on an rxe device, with their defaults,
//! QP attributes, TCP exchange ([`crate::perf_handshake`]), traffic and
//! output ([`crate::perf_report`]), so that either side can be the real
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

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use rxe_core::transport::Psn;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Cq, Device, InitParams, Mr, PathMtu, Qp, QpCap,
    QpInitAttr, QpType, RcParams, ReadyParams, RecvWr, RemoteQp, SendData, SendOp, SendWr, Sge,
    Target, WcStatus, WorkCompletion, WorkQueue,
};

use crate::pattern::{self, Role};
use crate::perf_handshake::{self as hs, Channel, Flow, Keys, Report, Verb};
use crate::perf_report::{self as rep, BwUnit, LatStats, TestInfo};
use crate::place::{self, Place};
use crate::report::wc_status_str;
use crate::side_channel::{accept, connect_to, random_psn};

/// perftest's buffer cycle and cache line, which both sides announce and
/// then take the larger of.
const PAGE_SIZE: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// perftest's `MIN_RNR_TIMER`.
const MIN_RNR_TIMER: u8 = 12;
/// Defaults of perftest.
const DEFAULT_BW_SIZE: u64 = 65536;
/// perftest's -a: sizes 2^1 to 2^23.
const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;
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
const MAX_QPS: u32 = 32;
/// A latency test keeps the time of every message.
const MAX_LAT_ITERS: u64 = 10_000_000;
/// Largest buffer a QP may need.
const MAX_BUFFER: u64 = 1 << 30;
/// How long a side keeps its device after the end, so that the
/// acknowledgements of the peer's last requests (and answers to its
/// retransmissions: kernel rxe retransmits forever with retry_cnt 7) leave
/// before the UDP port closes. `ib_write_lat` has no closing exchange, so
/// its server may end before the client has the last acknowledgement.
const LINGER: Duration = Duration::from_millis(200);
const LINGER_WRITE_LAT: Duration = Duration::from_millis(1000);

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
    place: Place,
    /// At the end, print the device's nonzero counters on one line, as
    /// `rdma statistic show` does (duplicates re-acknowledged, NAKs, drops
    /// by reason ...).
    #[arg(long)]
    counters: bool,
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
}

/// The validated settings of one run.
#[derive(Debug, Clone)]
struct Config {
    verb: Verb,
    lat: bool,
    cmp_swap: bool,
    host: Option<String>,
    port: u16,
    size: u64,
    iters: u64,
    mtu: Option<PathMtu>,
    qps: usize,
    tx_depth: u32,
    rx_depth: u32,
    cq_mod: u32,
    qp_timeout: u8,
    unit: BwUnit,
    check: bool,
    same_reads: bool,
    /// -a: every size of [`ALL_SIZES`]; `size` is the largest.
    all: bool,
    timeout: Option<Duration>,
    gid_index: Option<u8>,
}

impl Config {
    fn from_args(a: &Args) -> Result<Config> {
        let verb = match a.test {
            Test::Write => Verb::Write,
            Test::Read => Verb::Read,
            Test::Send => Verb::Send,
            Test::Atomic => Verb::Atomic,
        };
        if a.ib_port != rxe_verbs::PORT {
            bail!(
                "invalid --ib-port {}: an rxe device has port 1 only",
                a.ib_port
            );
        }
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
        let mtu = match a.mtu {
            None => None,
            Some(m) => Some(
                PathMtu::from_bytes(m)
                    .ok_or_else(|| anyhow!("invalid MTU {m}: use 256, 512, 1024, 2048 or 4096"))?,
            ),
        };
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
        let timeout = match a.timeout {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => bail!("invalid timeout {t}: a positive number of seconds"),
        };
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
        })
    }

    fn client(&self) -> bool {
        self.host.is_some()
    }

    fn flow(&self) -> Flow {
        Flow {
            verb: self.verb,
            lat: self.lat,
            qps: self.qps,
        }
    }

    /// Each outstanding request has a local slot of its own (so that its
    /// data can be checked once it completes).
    fn own_slots(&self) -> bool {
        self.check || self.same_reads
    }

    /// READ and atomic tests let many requests be outstanding.
    fn reads(&self) -> bool {
        matches!(self.verb, Verb::Read | Verb::Atomic)
    }

    /// This side posts receives (the SEND server, both SEND latency sides).
    fn receives(&self) -> bool {
        self.verb == Verb::Send && (self.lat || !self.client())
    }

    /// The access a QP grants its peer, as perftest's.
    fn qp_access(&self) -> AccessFlags {
        match self.verb {
            Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
            Verb::Read => AccessFlags::REMOTE_READ,
            Verb::Write => AccessFlags::REMOTE_WRITE,
            Verb::Send => AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        }
    }
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let cfg = Config::from_args(args)?;
    let target = match args.place.target() {
        Some(t) => t,
        None => match &cfg.host {
            Some(h) => Target::Address(place::source_address_for(h)?),
            None => Target::Interface(place::default_interface()?),
        },
    };
    let dev = place::add_device(&target)?;
    let result = session(&dev, &target, &cfg);
    if result.is_ok() {
        std::thread::sleep(if cfg.lat && cfg.verb == Verb::Write {
            LINGER_WRITE_LAT
        } else {
            LINGER
        });
    }
    place::remove_device(dev, args.counters);
    result.map(|()| ExitCode::SUCCESS)
}

fn say<I: IntoIterator<Item = S>, S: AsRef<str>>(lines: I) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for l in lines {
        writeln!(out, "{}", l.as_ref())?;
    }
    out.flush()?;
    Ok(())
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to.max(1)) * to.max(1)
}

/// Where things are in each QP's memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Bytes the peer targets with WRITEs, READs and atomics, at offset 0
    /// (the address in our key message).
    target: u64,
    /// Remote address step and how many steps before it wraps: a
    /// bandwidth sender walks the peer's buffer (of the same size as
    /// ours) in cache-line steps when messages fit twice in the cycle.
    step: u64,
    positions: u64,
    /// Send / READ destination / atomic result slots.
    src_off: u64,
    src_slot: u64,
    src_slots: u64,
    /// Receive slots (SEND tests).
    recv_off: u64,
    recv_slot: u64,
    recv_slots: u64,
    total: u64,
}

impl Layout {
    fn new(cfg: &Config, cycle: u64, cache: u64) -> Result<Layout> {
        let size = cfg.size;
        let cache = cache.max(8);
        let target = round_up(size.max(cycle), cache);
        let step = round_up(size, cache);
        let positions = if size <= cycle / 2 {
            (cycle / step).max(1)
        } else {
            1
        };
        let slot = round_up(size, 8);
        let (src_slot, src_slots) = if cfg.lat {
            (slot, 1)
        } else if cfg.own_slots() {
            (slot, u64::from(cfg.tx_depth))
        } else {
            // Without checks the sender's own address walks as the
            // remote one does, through a buffer of the target's size.
            (target, 1)
        };
        let (recv_slot, recv_slots) = if cfg.receives() {
            (slot, u64::from(cfg.rx_depth))
        } else {
            (0, 0)
        };
        let src_off = target;
        let recv_off = src_off + src_slot * src_slots;
        let total = recv_off + recv_slot * recv_slots;
        if total > MAX_BUFFER {
            bail!(
                "size {size} with these depths needs {total} bytes of buffers per QP, more than {MAX_BUFFER}"
            );
        }
        Ok(Layout {
            target,
            step,
            positions,
            src_off,
            src_slot,
            src_slots,
            recv_off,
            recv_slot,
            recv_slots,
            total,
        })
    }

    /// Offset in the peer's buffer of bandwidth message `k`.
    fn remote(&self, k: u64) -> u64 {
        (k % self.positions) * self.step
    }

    /// Offset in our region of the local side of bandwidth message `k`.
    fn local(&self, k: u64, check: bool) -> u64 {
        if check {
            self.src_off + (k % self.src_slots) * self.src_slot
        } else {
            self.src_off + self.remote(k)
        }
    }

    /// The last message (below `n`) to land at each position of the
    /// target, with the number that did: what the buffer shows at the end.
    fn last_writers(&self, n: u64) -> Vec<(u64, u64)> {
        (0..self.positions.min(n))
            .map(|p| {
                let visits = n / self.positions + u64::from(p < n % self.positions);
                (p + (visits - 1) * self.positions, visits)
            })
            .collect()
    }
}

/// A work request of perftest's kind on an RC QP: one SGE, no fence,
/// not solicited.
fn rc_wr(wr_id: u64, op: SendOp, sge: Sge, signaled: bool) -> SendWr {
    SendWr {
        wr_id,
        op,
        data: SendData::Sges(vec![sge]),
        signaled,
        fence: false,
        solicited: false,
        ud: None,
    }
}

/// The number of a READ and the bytes it returned.
type FirstRead = (u64, Vec<u8>);

/// `--chk-same-reads`: the first READ of each remote position, per QP,
/// and how many READs matched it.
struct SameReads {
    first: Vec<Vec<Option<FirstRead>>>,
    count: Vec<Vec<u64>>,
}

impl SameReads {
    fn new(qps: usize, positions: u64) -> SameReads {
        SameReads {
            first: vec![vec![None; positions as usize]; qps],
            count: vec![vec![0; positions as usize]; qps],
        }
    }

    /// Keeps `bytes` of READ `k` as the reference if it is the first READ
    /// of `pos`, else compares: Err((first READ's number, offset, got,
    /// expected)).
    fn compare(
        &mut self,
        q: usize,
        pos: usize,
        k: u64,
        bytes: Vec<u8>,
    ) -> Result<(), (u64, usize, u8, u8)> {
        self.count[q][pos] += 1;
        match &self.first[q][pos] {
            None => {
                self.first[q][pos] = Some((k, bytes));
                Ok(())
            }
            Some((first, want)) => match (0..want.len()).find(|&i| bytes[i] != want[i]) {
                None => Ok(()),
                Some(i) => Err((*first, i, bytes[i], want[i])),
            },
        }
    }

    /// One line for the user: how much was compared, and whether the
    /// peer's bytes vary at all (a buffer of one byte value would hide a
    /// READ that returned the wrong part of it).
    fn summary(&self) -> String {
        let reads: u64 = self.count.iter().flatten().sum();
        let firsts: Vec<&Vec<u8>> = self
            .first
            .iter()
            .flatten()
            .flatten()
            .map(|(_, b)| b)
            .collect();
        let uniform = firsts.iter().all(|b| b.windows(2).all(|w| w[0] == w[1]));
        format!(
            " Data check: {reads} READs, each the same bytes as the first READ of its position ({} positions){}",
            firsts.len(),
            if uniform { "; the peer's buffer is uniform, so this proves little" } else { "" }
        )
    }
}

/// The pattern the target region of QP `q` holds when the side owning it
/// fills it (READ and atomic tests with --check).
fn target_pattern(q: usize, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    pattern::fill(&mut b, Role::Server, 0x8000 + q as u32, 0);
    b
}

fn word_at(b: &[u8], off: u64) -> u64 {
    let o = off as usize;
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_ne_bytes(w)
}

fn bind_listener(ip: Option<IpAddr>, port: u16) -> Result<TcpListener> {
    // perftest listens on every IPv4 address; with --ip, listen on that one
    // (its TCP side is IPv4 even when the device's address is IPv6).
    let addr = match ip {
        Some(IpAddr::V4(v4)) => v4,
        _ => Ipv4Addr::UNSPECIFIED,
    };
    TcpListener::bind((addr, port)).with_context(|| format!("couldn't listen to port {port}"))
}

/// Everything from the TCP connection to the last line of output.
fn session(dev: &Device, target: &Target, cfg: &Config) -> Result<()> {
    let port = dev.query_port(rxe_verbs::PORT)?;
    let attr = dev.query_device()?;
    let gid_index = match cfg.gid_index {
        Some(g) => g,
        None => place::default_gid_index(dev, target)?,
    };
    let gid = dev
        .query_gid(rxe_verbs::PORT, gid_index)
        .with_context(|| format!("cannot read the GID of index {gid_index}"))?;
    let my_mtu = match cfg.mtu {
        Some(m) if m.bytes() > port.active_mtu.bytes() => {
            eprintln!(
                " Requested MTU {} is higher than the port's active MTU {}: using {}",
                m.bytes(),
                port.active_mtu.bytes(),
                port.active_mtu.bytes()
            );
            port.active_mtu
        }
        Some(m) => m,
        None => port.active_mtu,
    };

    let stream = match &cfg.host {
        None => {
            let ip = match target {
                Target::Address(ip) => Some(*ip),
                Target::Interface(_) => None,
            };
            let listener = bind_listener(ip, cfg.port)?;
            say(rep::WAITING)?;
            let s = accept(&listener, cfg.timeout)?;
            drop(listener);
            s
        }
        Some(h) => connect_to(h, cfg.port, cfg.timeout)?,
    };
    stream.set_read_timeout(cfg.timeout)?;
    stream.set_write_timeout(cfg.timeout)?;
    stream.set_nodelay(true)?;
    let mut ch = Channel::new(stream, cfg.client());
    let tcp = |e: hs::PerfHandshakeError| -> anyhow::Error {
        match &e {
            hs::PerfHandshakeError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                anyhow!(
                    "the peer did not answer on the TCP connection within {:.1} s",
                    cfg.timeout.unwrap_or_default().as_secs_f64()
                )
            }
            _ => anyhow::Error::new(e),
        }
    };

    ch.versions(hs::VERSION)
        .map_err(tcp)
        .context("failed to exchange versions")?;
    let (cycle, cache) = ch
        .sys_data(PAGE_SIZE, CACHE_LINE)
        .map_err(tcp)
        .context("failed to exchange system data")?;
    if !(64..=1 << 24).contains(&cycle) || !(8..=4096).contains(&cache) {
        bail!("the peer's buffer cycle {cycle} or cache line {cache} is out of range");
    }
    let mtu = ch
        .mtu(my_mtu.as_ibv())
        .map_err(tcp)
        .context("failed to exchange the MTU")?;
    let mtu = PathMtu::from_ibv(mtu).ok_or_else(|| anyhow!("bad MTU {mtu}"))?;

    let out_reads: u16 = if cfg.reads() {
        u16::from(attr.max_qp_rd_atom)
    } else {
        1
    };
    let client = cfg.client();
    let depth = if client {
        Some(("TX", cfg.tx_depth))
    } else if cfg.receives() {
        Some(("RX", cfg.rx_depth))
    } else {
        None
    };
    say(rep::info_block(&TestInfo {
        verb: cfg.verb,
        lat: cfg.lat,
        cmp_swap: cfg.cmp_swap,
        device: dev.name().to_string(),
        qps: cfg.qps,
        depth,
        cq_mod: (!cfg.lat).then_some(cfg.cq_mod),
        mtu: mtu.bytes(),
        gid_index,
        out_reads,
    }))?;

    let lay = Layout::new(cfg, u64::from(cycle), u64::from(cache))?;
    // -a: the client (both sides of ib_write_lat) runs each size in turn
    // over the memory laid out for the largest; a passive server only needs
    // that memory.
    let write_lat = cfg.lat && cfg.verb == Verb::Write;
    let sizes: Vec<Config> = if cfg.all && (client || write_lat) {
        ALL_SIZES
            .map(|k| Config {
                size: 1 << k,
                ..cfg.clone()
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut s = Perf::new(
        dev,
        cfg,
        lay,
        mtu,
        (gid_index, gid),
        port.lid,
        (out_reads, attr.max_qp_init_rd_atom.max(1)),
    )?;
    let mine = s.mine.clone();
    say(mine
        .iter()
        .flat_map(|k| rep::address_lines(true, k, cfg.verb)))?;
    let theirs = ch
        .connect_round(&mine)
        .map_err(tcp)
        .context("failed to exchange data between server and client")?;
    say(theirs
        .iter()
        .flat_map(|k| rep::address_lines(false, k, cfg.verb)))?;
    s.check_peer(&theirs)?;
    s.theirs = theirs.clone();
    s.connect().context("unable to connect the QPs")?;
    s.prepare()?;
    ch.ready(&cfg.flow(), &mine, &theirs)
        .map_err(tcp)
        .context("failed to exchange data between server and client")?;

    let read_lat_server = cfg.lat && cfg.verb == Verb::Read && !client;
    if read_lat_server {
        say([rep::RULE])?;
    } else if cfg.lat {
        say([rep::RULE, rep::LAT_HEADER])?;
    } else {
        say([rep::RULE.to_string(), rep::bw_header(cfg.unit)])?;
    }

    let flow = cfg.flow();
    let mut report = Report {
        size: cfg.size,
        iters: cfg.iters * cfg.qps as u64,
        ..Report::default()
    };
    if cfg.lat && cfg.all {
        for c in &sizes {
            s.cfg = c;
            s.lay = Layout::new(c, u64::from(cycle), u64::from(cache))?;
            let st = if write_lat {
                s.write_lat()?
            } else {
                s.read_lat()?
            };
            say([rep::lat_row(c.size, c.iters, &st)])?;
        }
        if !sizes.is_empty() {
            say([rep::RULE])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if cfg.lat {
        let stats = match (cfg.verb, client) {
            (Verb::Write, _) => Some(s.write_lat()?),
            (Verb::Send, _) => Some(s.send_lat()?),
            (Verb::Read, true) => Some(s.read_lat()?),
            _ => None,
        };
        if let Some(st) = stats {
            say([
                rep::lat_row(cfg.size, cfg.iters, &st),
                rep::RULE.to_string(),
            ])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if client && cfg.all {
        let mut notes = Vec::new();
        for c in &sizes {
            s.cfg = c;
            s.lay = Layout::new(c, u64::from(cycle), u64::from(cache))?;
            report = s.bw_sender()?;
            say([rep::bw_row(&report, cfg.unit)])?;
            notes.extend(s.data_note.take());
        }
        say([rep::RULE])?;
        if !notes.is_empty() {
            // One line for all sizes; a failed size ended the run already.
            let uniform = notes.iter().all(|n| n.contains("uniform"));
            say([format!(
                " Data check: at each of {} sizes, every READ of a position returned the bytes of the first{}",
                notes.len(),
                if uniform { "; the peer's buffer is uniform, so this proves little" } else { "" }
            )])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if client {
        report = s.bw_sender()?;
        say([rep::bw_row(&report, cfg.unit), rep::RULE.to_string()])?;
        if let Some(note) = s.data_note.take() {
            say([note])?;
        }
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else if cfg.verb == Verb::Send {
        report = s.send_receiver()?;
        say([rep::bw_row(&report, cfg.unit), rep::RULE.to_string()])?;
        ch.finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to close the connection between server and client")?;
    } else {
        // The NIC does the work; wait for the client's report.
        let theirs_report = ch
            .finish(&flow, &mine[0], &theirs[0], &report)
            .map_err(tcp)
            .context("failed to exchange the report between server and client")?
            .unwrap_or_default();
        say([rep::bw_row(&theirs_report, cfg.unit), rep::RULE.to_string()])?;
        if cfg.check {
            let note = s.check_target()?;
            if !note.is_empty() {
                say([note])?;
            }
        }
    }
    Ok(())
}

/// Completions of one run, and a deadline that moves with progress.
struct Waiter {
    timeout: Option<Duration>,
    since: Instant,
    polls: u32,
}

impl Waiter {
    fn new(timeout: Option<Duration>) -> Waiter {
        Waiter {
            timeout,
            since: Instant::now(),
            polls: 0,
        }
    }

    fn progressed(&mut self) {
        self.since = Instant::now();
    }

    /// Called on every empty poll: yields the CPU (the device's own
    /// threads need it) and fails once the wait is too long.
    fn idle(&mut self, what: &dyn Fn() -> String) -> Result<()> {
        std::thread::yield_now();
        self.polls = self.polls.wrapping_add(1);
        if self.polls % 256 == 0 {
            if let Some(t) = self.timeout {
                if self.since.elapsed() > t {
                    bail!(
                        "no progress for {:.1} s while {}: the peer stopped or is gone (same test, -s, -n and -q on both sides?)",
                        t.as_secs_f64(),
                        what()
                    );
                }
            }
        }
        Ok(())
    }
}

struct Perf<'a> {
    cfg: &'a Config,
    role: Role,
    lay: Layout,
    mtu: PathMtu,
    gid_index: u8,
    /// The most READs and atomics our device lets a QP have outstanding.
    max_init_rd: u8,
    cq: Cq,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    mine: Vec<Keys>,
    theirs: Vec<Keys>,
    /// With --check in READ and atomic tests: what each QP's target
    /// region holds before the run (the server writes it, the client
    /// expects it).
    regions: Vec<Vec<u8>>,
    start: Instant,
    wcs: Vec<WorkCompletion>,
    /// What a data check found, printed under the table.
    data_note: Option<String>,
}

impl<'a> Perf<'a> {
    /// The CQ, and per QP its memory region and QP (in INIT) and the keys
    /// describing them. `out_reads`: (what we announce, what our device
    /// allows as a requester).
    fn new(
        dev: &Device,
        cfg: &'a Config,
        lay: Layout,
        mtu: PathMtu,
        (gid_index, gid): (u8, [u8; 16]),
        lid: u16,
        (out_reads, max_init_rd): (u16, u8),
    ) -> Result<Perf<'a>> {
        let pd = dev.alloc_pd()?;
        let per_qp = cfg.tx_depth + if cfg.receives() { cfg.rx_depth } else { 0 } + 2;
        let cq = dev
            .create_cq(per_qp * cfg.qps as u32)
            .context("couldn't create the CQ (fewer QPs or smaller depths?)")?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mut qps = Vec::new();
        let mut mrs = Vec::new();
        let mut mine = Vec::new();
        for q in 0..cfg.qps {
            let mr = pd
                .reg_mr_zeroed(lay.total as usize, access)
                .context("couldn't register the buffer")?;
            let qp = pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: cfg.tx_depth + 1,
                    max_recv_wr: if cfg.receives() { cfg.rx_depth } else { 1 },
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })?;
            connect::to_init(&qp, &InitParams::connected(cfg.qp_access()))
                .context("failed to modify the QP to INIT")?;
            mine.push(Keys {
                lid,
                out_reads,
                qpn: qp.qp_num(),
                psn: random_psn(q as u64),
                rkey: if cfg.verb == Verb::Send { 0 } else { mr.rkey() },
                vaddr: mr.addr(),
                gid,
                srqn: 0,
            });
            qps.push(qp);
            mrs.push(mr);
        }
        Ok(Perf {
            cfg,
            role: if cfg.client() {
                Role::Client
            } else {
                Role::Server
            },
            lay,
            mtu,
            gid_index,
            max_init_rd,
            cq,
            qps,
            mrs,
            mine,
            theirs: Vec::new(),
            regions: if cfg.check && cfg.reads() {
                (0..cfg.qps)
                    .map(|q| target_pattern(q, lay.target))
                    .collect()
            } else {
                vec![Vec::new(); cfg.qps]
            },
            start: Instant::now(),
            wcs: Vec::with_capacity(64),
            data_note: None,
        })
    }

    /// Refuses peers this side cannot reach.
    fn check_peer(&self, theirs: &[Keys]) -> Result<()> {
        if theirs.iter().any(|k| k.gid == [0; 16]) {
            bail!("the peer sent no GID: RoCE needs one, run the peer with -x <gid index>");
        }
        let v4 = rxe_verbs::ip_of_gid(self.mine[0].gid).is_ipv4();
        if theirs
            .iter()
            .any(|k| rxe_verbs::ip_of_gid(k.gid).is_ipv4() != v4)
        {
            bail!(
                "found incompatibility issue with GID types: the peer's GID is of the other IP family than ours (-x {})",
                self.gid_index
            );
        }
        Ok(())
    }

    /// RTR and RTS with perftest's attributes.
    fn connect(&mut self) -> Result<()> {
        for (i, qp) in self.qps.iter().enumerate() {
            let peer = self.theirs[i];
            let me = self.mine[i];
            let ready = ReadyParams::Rc {
                sq_psn: Psn::new(me.psn),
                remote: RemoteQp {
                    qpn: peer.qpn,
                    psn: Psn::new(peer.psn),
                    av: AddressVector {
                        dgid: peer.gid,
                        sgid_index: self.gid_index,
                        hop_limit: 1,
                        sl: 0,
                        ..AddressVector::default()
                    },
                    path_mtu: self.mtu,
                },
                rc: RcParams {
                    max_dest_rd_atomic: me.out_reads.min(255) as u8,
                    min_rnr_timer: MIN_RNR_TIMER,
                    timeout: self.cfg.qp_timeout,
                    retry_cnt: 7,
                    rnr_retry: 7,
                    max_rd_atomic: (peer.out_reads.min(255) as u8).clamp(1, self.max_init_rd),
                },
            };
            connect::to_rtr(qp, &ready).context("failed to modify the QP to RTR")?;
            connect::to_rts(qp, &ready).context("failed to modify the QP to RTS")?;
        }
        Ok(())
    }

    /// Before the last barrier: receives posted, buffers the peer reads
    /// filled.
    fn prepare(&mut self) -> Result<()> {
        if self.cfg.receives() {
            let n = u64::from(self.cfg.rx_depth).min(self.cfg.iters);
            for q in 0..self.qps.len() {
                for slot in 0..n {
                    self.post_recv(q, slot)?;
                }
            }
        }
        if self.cfg.check && !self.cfg.client() && self.cfg.reads() {
            for (mr, region) in self.mrs.iter().zip(&self.regions) {
                mr.write(0, region)?;
            }
        }
        Ok(())
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn post_recv(&self, q: usize, slot: u64) -> Result<()> {
        let off = self.lay.recv_off + slot * self.lay.recv_slot;
        self.qps[q]
            .post_recv(RecvWr {
                wr_id: slot,
                sg_list: vec![self.mrs[q].sge(off as usize, self.cfg.size as u32)],
            })
            .context("couldn't post a receive")
    }

    fn qp_index(&self, wc: &WorkCompletion) -> Result<usize> {
        self.qps
            .iter()
            .position(|q| q.qp_num() == wc.qp_num)
            .ok_or_else(|| anyhow!("completion for unknown QP 0x{:06x}", wc.qp_num))
    }

    fn check_wc(&self, wc: &WorkCompletion) -> Result<()> {
        if wc.status != WcStatus::Success {
            let hint = if wc.status == WcStatus::RetryExcErr {
                // retry_cnt 7; the ACK timer backs off to 4x: 1 + 2 + 6 x 4
                // nominal intervals in all.
                let t = 4.096e-6 * f64::from(1u32 << self.cfg.qp_timeout);
                format!(
                    " (no progress through 7 retries, timeouts or sequence NAKs, about {:.1} s at -u {}: the peer is gone, or too slow?)",
                    27.0 * t,
                    self.cfg.qp_timeout
                )
            } else {
                String::new()
            };
            bail!(
                "completion with error: {} ({}) for wr_id {:#x} on QP 0x{:06x} ({:?}){hint}",
                wc_status_str(wc.status as u32),
                wc.status as u32,
                wc.wr_id,
                wc.qp_num,
                wc.queue
            );
        }
        Ok(())
    }

    /// Takes completions, waiting until at least one is there.
    fn poll(&mut self, w: &mut Waiter, what: &dyn Fn() -> String) -> Result<()> {
        self.wcs.clear();
        loop {
            let n = self
                .cq
                .poll_into(64, &mut self.wcs)
                .context("poll CQ failed")?;
            if n > 0 {
                w.progressed();
                return Ok(());
            }
            w.idle(what)?;
        }
    }

    /// The work request of bandwidth message `k` on QP `q`.
    fn bw_request(&self, q: usize, k: u64, signaled: bool) -> Result<SendWr> {
        let cfg = self.cfg;
        let peer = self.theirs[q];
        let mr = &self.mrs[q];
        let local = self.lay.local(k, cfg.own_slots());
        let remote_addr = peer.vaddr.wrapping_add(self.lay.remote(k));
        let size = cfg.size as u32;
        let op = match cfg.verb {
            Verb::Write => SendOp::RdmaWrite {
                remote_addr,
                rkey: peer.rkey,
            },
            Verb::Read => SendOp::RdmaRead {
                remote_addr,
                rkey: peer.rkey,
            },
            Verb::Send => SendOp::Send,
            Verb::Atomic => {
                let (compare, swap) = self.cmp_swap_values(q, k);
                if cfg.cmp_swap {
                    SendOp::CmpSwap {
                        remote_addr,
                        rkey: peer.rkey,
                        compare,
                        swap,
                    }
                } else {
                    SendOp::FetchAdd {
                        remote_addr,
                        rkey: peer.rkey,
                        add: 1,
                    }
                }
            }
        };
        if cfg.check && matches!(cfg.verb, Verb::Write | Verb::Send) {
            let mut buf = vec![0u8; cfg.size as usize];
            pattern::fill(&mut buf, Role::Client, q as u32, k);
            mr.write(local as usize, &buf)?;
        }
        Ok(rc_wr(
            (q as u64) << 48 | k,
            op,
            mr.sge(local as usize, size),
            signaled,
        ))
    }

    /// The value an atomic finds at message `k`'s word when every earlier
    /// one did its +1 (with --check), from the pattern the server wrote.
    fn atomic_expected(&self, k: u64, region: &[u8]) -> u64 {
        let pos = self.lay.remote(k);
        let visit = k / self.lay.positions;
        word_at(region, pos).wrapping_add(visit)
    }

    /// CMP_AND_SWAP's operands: perftest's (compare 0, swap 1), or with
    /// --check the value the word holds and that plus one, so that every
    /// swap succeeds and can be checked.
    fn cmp_swap_values(&self, q: usize, k: u64) -> (u64, u64) {
        if self.cfg.check {
            let e = self.atomic_expected(k, &self.regions[q]);
            (e, e.wrapping_add(1))
        } else {
            (0, 1)
        }
    }

    /// --chk-same-reads: READ `k` of QP `q` has completed; its bytes must
    /// be those of the first READ of the same remote position.
    fn compare_read(&self, q: usize, k: u64, reads: &mut SameReads) -> Result<()> {
        let mut buf = vec![0u8; self.cfg.size as usize];
        self.mrs[q].read(self.lay.local(k, true) as usize, &mut buf)?;
        let pos = (k % self.lay.positions) as usize;
        reads.compare(q, pos, k, buf).map_err(|(first, i, got, want)| {
            anyhow!(
                "READ {k} on QP 0x{:06x}: byte {i} is {got:#04x}, but READ {first} of the same bytes gave {want:#04x}",
                self.qps[q].qp_num()
            )
        })
    }

    /// --check on a bandwidth sender: messages `from..=to` of QP `q` have
    /// completed; READ data and atomic results must be right.
    fn check_completed(&self, q: usize, from: u64, to: u64, region: &[u8]) -> Result<()> {
        let size = self.cfg.size as usize;
        let mut buf = vec![0u8; size];
        for k in from..=to {
            let local = self.lay.local(k, true);
            match self.cfg.verb {
                Verb::Read => {
                    self.mrs[q].read(local as usize, &mut buf)?;
                    let pos = self.lay.remote(k) as usize;
                    if let Some(i) = (0..size).find(|&i| buf[i] != region[pos + i]) {
                        bail!(
                            "READ {k} on QP 0x{:06x}: byte {i} is {:#04x}, expected {:#04x}",
                            self.qps[q].qp_num(),
                            buf[i],
                            region[pos + i]
                        );
                    }
                }
                Verb::Atomic => {
                    let got = self.mrs[q].load_u64(local as usize)?;
                    let want = self.atomic_expected(k, region);
                    if got != want {
                        bail!(
                            "atomic {k} on QP 0x{:06x} found {got:#018x}, expected {want:#018x}",
                            self.qps[q].qp_num()
                        );
                    }
                }
                Verb::Write | Verb::Send => {}
            }
        }
        Ok(())
    }

    /// The bandwidth client: every QP keeps up to -t requests outstanding
    /// and asks for a completion every `cq_mod`-th and at its last.
    fn bw_sender(&mut self) -> Result<Report> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let nq = self.qps.len();
        let total = n as usize * nq;
        let mut scnt = vec![0u64; nq];
        let mut ccnt = vec![0u64; nq];
        // Every post and completion for the peak, or only the ends.
        let keep_all = total <= rep::PEAK_LIMIT;
        let mut posted = Vec::with_capacity(if keep_all { total } else { 1 });
        let mut completed: Vec<(u64, Duration)> = Vec::new();
        let mut done = 0usize;
        let regions = self.regions.clone();
        let mut reads = SameReads::new(nq, self.lay.positions);
        let mut w = Waiter::new(cfg.timeout);
        self.start = Instant::now();
        while done < total {
            for q in 0..nq {
                while scnt[q] < n && scnt[q] - ccnt[q] < u64::from(cfg.tx_depth) {
                    let k = scnt[q];
                    let signaled = (k + 1) % u64::from(cfg.cq_mod) == 0 || k + 1 == n;
                    let wr = self.bw_request(q, k, signaled)?;
                    if keep_all || posted.is_empty() {
                        posted.push(self.now());
                    }
                    self.qps[q]
                        .post_send(wr)
                        .with_context(|| format!("couldn't post send: scnt={k}"))?;
                    scnt[q] += 1;
                }
            }
            let what = || format!("{done} of {total} requests completed");
            self.poll(&mut w, &what)?;
            let t = self.now();
            let wcs = std::mem::take(&mut self.wcs);
            for wc in &wcs {
                self.check_wc(wc)?;
                let q = self.qp_index(wc)?;
                let k = wc.wr_id & ((1 << 48) - 1);
                if k < ccnt[q] || k >= scnt[q] {
                    bail!("completion for wr_id {:#x} out of order", wc.wr_id);
                }
                if cfg.check {
                    self.check_completed(q, ccnt[q], k, &regions[q])?;
                }
                if cfg.same_reads {
                    for j in ccnt[q]..=k {
                        self.compare_read(q, j, &mut reads)?;
                    }
                }
                done += (k + 1 - ccnt[q]) as usize;
                ccnt[q] = k + 1;
                if !keep_all {
                    completed.clear();
                }
                completed.push((done as u64 - 1, t));
            }
            self.wcs = wcs;
        }
        if cfg.same_reads {
            self.data_note = Some(reads.summary());
        }
        Ok(rep::bw_report(
            cfg.size,
            total as u64,
            &posted,
            &completed,
            cfg.unit,
        ))
    }

    /// The SEND bandwidth server: counts (and with --check verifies) what
    /// arrives, reposting receives while more are due.
    fn send_receiver(&mut self) -> Result<Report> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let nq = self.qps.len();
        let total = n * nq as u64;
        let mut rcnt = vec![0u64; nq];
        let mut posted = vec![u64::from(cfg.rx_depth).min(n); nq];
        let mut got = 0u64;
        let (mut first, mut last) = (None, Duration::ZERO);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; cfg.size as usize];
        self.start = Instant::now();
        while got < total {
            let what = || format!("{got} of {total} messages received");
            self.poll(&mut w, &what)?;
            let t = self.now();
            let wcs = std::mem::take(&mut self.wcs);
            for wc in &wcs {
                self.check_wc(wc)?;
                let q = self.qp_index(wc)?;
                if wc.queue != WorkQueue::Recv {
                    continue;
                }
                self.received(q, wc, rcnt[q], &mut buf)?;
                rcnt[q] += 1;
                got += 1;
                first.get_or_insert(t);
                last = t;
                if posted[q] < n {
                    self.post_recv(q, wc.wr_id)?;
                    posted[q] += 1;
                }
            }
            self.wcs = wcs;
        }
        Ok(rep::recv_report(
            cfg.size,
            total,
            first.unwrap_or_default(),
            last,
            cfg.unit,
        ))
    }

    /// A received message: the right length, and with --check the peer's
    /// pattern for message `seq` on that QP.
    fn received(&self, q: usize, wc: &WorkCompletion, seq: u64, buf: &mut [u8]) -> Result<()> {
        if u64::from(wc.byte_len) != self.cfg.size {
            bail!(
                "message {seq} on QP 0x{:06x}: {} bytes, expected {}",
                wc.qp_num,
                wc.byte_len,
                self.cfg.size
            );
        }
        if self.cfg.check {
            let off = self.lay.recv_off + wc.wr_id * self.lay.recv_slot;
            self.mrs[q].read(off as usize, buf)?;
            if let Err(m) = pattern::check(buf, self.role.peer(), q as u32, seq) {
                bail!(
                    "message {seq} on QP 0x{:06x}: data check failed: {m}",
                    wc.qp_num
                );
            }
        }
        Ok(())
    }

    /// --check on the server of the WRITE and atomic bandwidth tests: the
    /// buffer holds what the client's last request to each place left.
    fn check_target(&self) -> Result<String> {
        let n = self.cfg.iters;
        let size = self.cfg.size as usize;
        for (q, mr) in self.mrs.iter().enumerate() {
            let who = || format!("QP 0x{:06x}", self.qps[q].qp_num());
            match self.cfg.verb {
                Verb::Write => {
                    let mut buf = vec![0u8; size];
                    let mut want = vec![0u8; size];
                    for (p, (k, _)) in self.lay.last_writers(n).into_iter().enumerate() {
                        let off = p as u64 * self.lay.step;
                        mr.read(off as usize, &mut buf)?;
                        pattern::fill(&mut want, Role::Client, q as u32, k);
                        if buf != want {
                            let i = (0..size).find(|&i| buf[i] != want[i]).unwrap_or(0);
                            bail!(
                                "{}: the buffer at offset {off} does not hold WRITE {k}: byte {i} is {:#04x}, expected {:#04x}",
                                who(),
                                buf[i],
                                want[i]
                            );
                        }
                    }
                }
                Verb::Atomic => {
                    let region = &self.regions[q];
                    for (p, (_, visits)) in self.lay.last_writers(n).into_iter().enumerate() {
                        let off = p as u64 * self.lay.step;
                        let got = mr.load_u64(off as usize)?;
                        let want = word_at(region, off).wrapping_add(visits);
                        if got != want {
                            bail!(
                                "{}: the word at offset {off} is {got:#018x} after {visits} atomics, expected {want:#018x}",
                                who()
                            );
                        }
                    }
                }
                Verb::Read | Verb::Send => {}
            }
        }
        let positions = self.lay.positions.min(n) as usize * self.mrs.len();
        Ok(match self.cfg.verb {
            Verb::Write => format!(
                " Data check: each of {positions} positions holds the last WRITE to it"
            ),
            Verb::Atomic => format!(
                " Data check: each of {positions} words holds its first value plus the number of atomics to it (each applied exactly once)"
            ),
            Verb::Read | Verb::Send => String::new(),
        })
    }

    /// Waits for the completion of the one send outstanding.
    fn wait_send(&mut self, w: &mut Waiter, what: &dyn Fn() -> String) -> Result<()> {
        loop {
            self.poll(w, what)?;
            let wcs = std::mem::take(&mut self.wcs);
            let mut seen = false;
            for wc in &wcs {
                self.check_wc(wc)?;
                if wc.queue == WorkQueue::Send {
                    seen = true;
                } else {
                    bail!("unexpected receive completion on QP 0x{:06x}", wc.qp_num);
                }
            }
            self.wcs = wcs;
            if seen {
                return Ok(());
            }
        }
    }

    /// `ib_write_lat`: each side waits for the peer's iteration number in
    /// the last byte of its buffer, then writes its own message (its last
    /// byte the next number) into the peer's. The server writes first.
    fn write_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let peer = self.theirs[0];
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let poll_at = size - 1;
        let server = self.role == Role::Server;
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; size];
        let mut want = vec![0u8; size];
        let mut byte = [0u8; 1];
        let mut empty = Vec::new();
        self.start = Instant::now();
        while scnt < n || ccnt < n || rcnt < n {
            if rcnt < n && !(scnt < 1 && server) {
                rcnt += 1;
                loop {
                    mr.read(poll_at, &mut byte)?;
                    if byte[0] == rcnt as u8 {
                        break;
                    }
                    // An empty poll makes the device work on this thread.
                    self.cq.poll_into(0, &mut empty)?;
                    let what = || format!("waiting for the peer's WRITE {rcnt} of {n}");
                    w.idle(&what)?;
                }
                w.progressed();
                if cfg.check && size > 1 {
                    mr.read(0, &mut buf)?;
                    pattern::fill(&mut want, self.role.peer(), 0, rcnt - 1);
                    if let Some(i) = (0..size - 1).find(|&i| buf[i] != want[i]) {
                        bail!(
                            "WRITE {} from the peer: byte {i} is {:#04x}, expected {:#04x}",
                            rcnt - 1,
                            buf[i],
                            want[i]
                        );
                    }
                }
            }
            if scnt < n {
                if cfg.check {
                    pattern::fill(&mut buf, self.role, 0, scnt);
                    mr.write(src, &buf)?;
                }
                scnt += 1;
                mr.write(src + size - 1, &[scnt as u8])?;
                posted.push(self.now());
                let op = SendOp::RdmaWrite {
                    remote_addr: peer.vaddr,
                    rkey: peer.rkey,
                };
                self.qps[0]
                    .post_send(rc_wr(scnt, op, mr.sge(src, size as u32), true))
                    .with_context(|| format!("couldn't post send: scnt={scnt}"))?;
            }
            if ccnt < n {
                let what = || format!("waiting for the completion of WRITE {ccnt} of {n}");
                self.wait_send(&mut w, &what)?;
                ccnt += 1;
            }
        }
        rep::lat_stats(&posted, 2).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// `ib_read_lat`'s client: one READ at a time.
    fn read_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let peer = self.theirs[0];
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let region = self.regions[0].clone();
        let mut buf = vec![0u8; size];
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        self.start = Instant::now();
        for k in 0..n {
            posted.push(self.now());
            let op = SendOp::RdmaRead {
                remote_addr: peer.vaddr,
                rkey: peer.rkey,
            };
            self.qps[0]
                .post_send(rc_wr(k, op, mr.sge(src, size as u32), true))
                .with_context(|| format!("couldn't post send: scnt={k}"))?;
            let what = || format!("waiting for READ {k} of {n}");
            self.wait_send(&mut w, &what)?;
            if cfg.check {
                mr.read(src, &mut buf)?;
                if let Some(i) = (0..size).find(|&i| buf[i] != region[i]) {
                    bail!(
                        "READ {k}: byte {i} is {:#04x}, expected {:#04x}",
                        buf[i],
                        region[i]
                    );
                }
            }
        }
        rep::lat_stats(&posted, 1).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// `ib_send_lat`: SENDs back and forth, the client first.
    fn send_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let client = self.role == Role::Client;
        let mut c = LatCounts {
            recv_posted: u64::from(cfg.rx_depth).min(n),
            ..LatCounts::default()
        };
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; size];
        let mut rbuf = vec![0u8; size];
        self.start = Instant::now();
        while scnt < n || rcnt < n {
            if rcnt < n && !(scnt < 1 && client) {
                // The peer's answer may have come before our last send's
                // acknowledgement: it is counted as soon as it is seen.
                while c.seen <= rcnt {
                    let what = || format!("waiting for message {rcnt} of {n} from the peer");
                    self.pump(&mut w, &mut c, &mut rbuf, &what)?;
                }
                rcnt += 1;
            }
            if scnt < n {
                while c.sent < scnt {
                    let what = || format!("waiting for the completion of send {scnt} of {n}");
                    self.pump(&mut w, &mut c, &mut rbuf, &what)?;
                }
                if cfg.check {
                    pattern::fill(&mut buf, self.role, 0, scnt);
                    mr.write(src, &buf)?;
                }
                posted.push(self.now());
                self.qps[0]
                    .post_send(rc_wr(scnt, SendOp::Send, mr.sge(src, size as u32), true))
                    .with_context(|| format!("couldn't post send: scnt={scnt}"))?;
                scnt += 1;
            }
        }
        while c.sent < scnt {
            let what = || format!("waiting for the completion of the last send of {n}");
            self.pump(&mut w, &mut c, &mut rbuf, &what)?;
        }
        rep::lat_stats(&posted, 2).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// One poll of `send_lat`: counts send completions, checks and counts
    /// receives (in order: RC delivers in order) and reposts them. `buf`
    /// (the message size) holds a received message for its check.
    fn pump(
        &mut self,
        w: &mut Waiter,
        c: &mut LatCounts,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        self.poll(w, what)?;
        let wcs = std::mem::take(&mut self.wcs);
        for wc in &wcs {
            self.check_wc(wc)?;
            match wc.queue {
                WorkQueue::Send => c.sent += 1,
                WorkQueue::Recv => {
                    self.received(0, wc, c.seen, buf)?;
                    c.seen += 1;
                    if c.recv_posted < self.cfg.iters {
                        self.post_recv(0, wc.wr_id)?;
                        c.recv_posted += 1;
                    }
                }
            }
        }
        self.wcs = wcs;
        Ok(())
    }
}

/// Progress of `send_lat`.
#[derive(Debug, Default)]
struct LatCounts {
    /// Send completions.
    sent: u64,
    /// Receive completions.
    seen: u64,
    recv_posted: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn cfg(args: &[&str]) -> Result<Config> {
        let t = T::try_parse_from(std::iter::once("perf").chain(args.iter().copied()))?;
        Config::from_args(&t.a)
    }

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
    fn same_reads_compares_with_the_first_read_of_each_position() {
        let mut r = SameReads::new(2, 2);
        assert_eq!(r.compare(0, 1, 7, vec![1, 2, 3]), Ok(()));
        assert_eq!(r.compare(0, 1, 9, vec![1, 2, 3]), Ok(()));
        // Another QP and another position have references of their own.
        assert_eq!(r.compare(1, 1, 0, vec![4, 5, 6]), Ok(()));
        assert_eq!(r.compare(0, 0, 8, vec![9, 9, 9]), Ok(()));
        assert_eq!(r.compare(0, 1, 11, vec![1, 0, 3]), Err((7, 1, 0, 2)));
        assert!(r.summary().starts_with(" Data check: 5 READs"));
        assert!(r.summary().contains("(3 positions)"));
        assert!(!r.summary().contains("uniform"));
        let mut u = SameReads::new(1, 1);
        u.compare(0, 0, 0, vec![0; 8]).unwrap();
        assert!(u.summary().contains("uniform"));
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
            &["write", "-q", "33"],
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

    #[test]
    fn layout_walks_the_peer_buffer_as_perftest() {
        // ib_atomic_bw: 8-byte atomics 64 bytes apart through a 4 KiB cycle.
        let c = cfg(&["atomic", "-n", "100"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.step, l.positions), (4096, 64, 64));
        assert_eq!(l.remote(0), 0);
        assert_eq!(l.remote(63), 0xfc0);
        assert_eq!(l.remote(64), 0);
        // 100 atomics over 64 words: words 0..36 twice, the rest once.
        let lw = l.last_writers(100);
        assert_eq!(lw.len(), 64);
        assert_eq!(lw[0], (64, 2));
        assert_eq!(lw[35], (99, 2));
        assert_eq!(lw[36], (36, 1));
        assert_eq!(l.last_writers(10).len(), 10);
        // Messages over half the cycle all go to the start.
        let c = cfg(&["write", "-s", "4096"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.positions), (4096, 1));
        assert_eq!(l.last_writers(7), vec![(6, 7)]);
        let c = cfg(&["write", "-s", "65536", "--check", "-t", "4"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.src_slots, l.src_slot), (65536, 4, 65536));
        assert_eq!(l.local(5, true), 65536 + 65536);
        let c = cfg(&["send", "-s", "100", "-r", "10", "-n", "50"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.recv_slots, l.recv_slot), (10, 104));
        assert_eq!(l.total, l.recv_off + 1040);
        let c = cfg(&["write", "-s", "1000000000", "-t", "8"]).unwrap();
        assert!(Layout::new(&c, 4096, 64).is_err());
    }
}
