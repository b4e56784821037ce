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

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use rxe_core::transport::responder::GRH_LEN;
use rxe_core::transport::Psn;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Ah, AhAttr, Cq, Device, InitParams, Mr, NotifyKind,
    PathMtu, Pd, Qp, QpCap, QpInitAttr, QpType, RcParams, ReadyParams, RecvWr, RemoteQp, SendData,
    SendOp, SendWr, Srq, SrqInitAttr, Target, UdDest, VerbsError, WcStatus, WorkCompletion,
};

use crate::handshake::{self, Dest, SRQ_MESSAGES};
use crate::pattern::{self, Role};
use crate::place::{self, Place};
use crate::report;
use crate::side_channel::{accept, connect_to, random_psn};

/// The Q_Key both sides of `ibv_ud_pingpong` use.
pub const UD_QKEY: u32 = 0x1111_1111;
/// `srq_pingpong` has room for this many QPs (and always sends this many
/// descriptions).
pub const MAX_SRQ_QP: u32 = SRQ_MESSAGES as u32;
/// How long a side keeps its device after the last completion, so that
/// the acknowledgements of the peer's last messages leave before the UDP
/// port closes (an RC peer with retry_cnt 7 retransmits forever).
const LINGER: Duration = Duration::from_millis(100);

/// The RC attributes of ibv_rc_pingpong and ibv_srq_pingpong: one READ
/// or atomic each way, RNR NAK timer code 12 (0.64 ms), ACK timeout code
/// 14 (67 ms), seven retries of each kind (7 RNR retries: without end).
const TOOLS_RC: RcParams = RcParams {
    max_dest_rd_atomic: 1,
    min_rnr_timer: 12,
    timeout: 14,
    retry_cnt: 7,
    rnr_retry: 7,
    max_rd_atomic: 1,
};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

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
    place: Place,
    /// At the end, print the device's nonzero counters on one line, as
    /// `rdma statistic show` does (duplicates re-acknowledged, NAKs, drops
    /// by reason ...).
    #[arg(long)]
    counters: bool,
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
enum Check {
    Off,
    /// `-c`: the peer (rxe) fills each message with its pattern.
    Pattern,
    /// `--chk-echo`: the peer (the real tool) sends back our last message.
    Echo,
}

/// The validated settings of one run.
#[derive(Debug, Clone)]
struct Config {
    kind: Kind,
    host: Option<String>,
    port: u16,
    size: usize,
    mtu: PathMtu,
    rx_depth: u32,
    iters: u64,
    sl: u8,
    events: bool,
    check: Check,
    num_qp: u32,
    timeout: Option<Duration>,
    gid_idx: Option<u8>,
}

impl Config {
    fn from_args(a: &Args) -> Result<Config> {
        if a.ib_port != rxe_verbs::PORT {
            bail!(
                "invalid --ib-port {}: an rxe device has port 1 only",
                a.ib_port
            );
        }
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
            (_, Some(m)) => PathMtu::from_bytes(m)
                .ok_or_else(|| anyhow!("invalid MTU {m}: use 256, 512, 1024, 2048 or 4096"))?,
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
        let timeout = match a.timeout {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => bail!("invalid timeout {t}: a positive number of seconds"),
        };
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

    fn role(&self) -> Role {
        if self.host.is_some() {
            Role::Client
        } else {
            Role::Server
        }
    }

    fn qp_type(&self) -> QpType {
        match self.kind {
            Kind::Rc | Kind::Srq => QpType::Rc,
            Kind::Uc => QpType::Uc,
            Kind::Ud => QpType::Ud,
        }
    }

    /// Bytes of one receive buffer.
    fn recv_len(&self) -> usize {
        self.size + if self.kind == Kind::Ud { GRH_LEN } else { 0 }
    }

    /// How many descriptions go each way in the handshake.
    fn messages(&self) -> usize {
        if self.kind == Kind::Srq {
            SRQ_MESSAGES
        } else {
            1
        }
    }
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let cfg = Config::from_args(args)?;
    let target = match args.place.target() {
        Some(t) => t,
        None => match &cfg.host {
            // The address this host reaches the server from.
            Some(h) => Target::Address(place::source_address_for(h)?),
            None => Target::Interface(place::default_interface()?),
        },
    };
    let dev = place::add_device(&target)?;
    let result = Pingpong::new(&dev, &target, cfg).and_then(|mut p| p.run());
    if result.is_ok() {
        std::thread::sleep(LINGER);
    }
    place::remove_device(dev, args.counters);
    result.map(|()| ExitCode::SUCCESS)
}

/// Per-QP progress: the tool's `pending` bits, and message counts that
/// number the patterns.
#[derive(Debug, Default, Clone, Copy)]
struct QpProgress {
    pending: u64,
    sent: u64,
    received: u64,
}

struct Pingpong {
    cfg: Config,
    role: Role,
    cq: Cq,
    mr: Mr,
    pd: Pd,
    srq: Option<Srq>,
    qps: Vec<Qp>,
    by_qpn: HashMap<u32, usize>,
    ah: Option<Ah>,
    gid_idx: u8,
    mine: Vec<Dest>,
    theirs: Vec<Dest>,
    /// Receive buffer slots not posted.
    free_slots: Vec<usize>,
    /// Receives posted (`routs`).
    posted: u32,
    progress: Vec<QpProgress>,
    scratch: Vec<u8>,
}

impl Pingpong {
    fn new(dev: &Device, target: &Target, cfg: Config) -> Result<Pingpong> {
        let port = dev.query_port(rxe_verbs::PORT)?;
        if cfg.kind == Kind::Ud && cfg.size > port.active_mtu.bytes() as usize {
            bail!(
                "requested size {} is larger than the port MTU ({})",
                cfg.size,
                port.active_mtu.bytes()
            );
        }
        let gid_idx = match cfg.gid_idx {
            Some(g) => g,
            None => place::default_gid_index(dev, target)?,
        };
        let gid = dev
            .query_gid(rxe_verbs::PORT, gid_idx)
            .with_context(|| format!("cannot read the GID of index {gid_idx}"))?;
        let pd = dev.alloc_pd()?;
        // Receive slots, then one send buffer per QP. The tools' buffer is
        // filled with 0x7b bytes; so is ours until -c writes patterns.
        let recv_len = cfg.recv_len();
        let len = recv_len * cfg.rx_depth as usize + cfg.size * cfg.num_qp as usize;
        let mr = pd.reg_mr(vec![0x7b; len], AccessFlags::LOCAL_WRITE)?;
        let cq = dev.create_cq(cfg.rx_depth + cfg.num_qp)?;
        let srq = if cfg.kind == Kind::Srq {
            Some(pd.create_srq(&SrqInitAttr {
                max_wr: cfg.rx_depth,
                max_sge: 1,
                srq_limit: 0,
            })?)
        } else {
            None
        };
        let mut qps = Vec::new();
        for _ in 0..cfg.num_qp {
            let qp = pd.create_qp(&QpInitAttr {
                qp_type: cfg.qp_type(),
                send_cq: &cq,
                recv_cq: &cq,
                srq: srq.as_ref(),
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: if srq.is_some() { 0 } else { cfg.rx_depth },
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })?;
            let init = if cfg.kind == Kind::Ud {
                InitParams::datagram(UD_QKEY)
            } else {
                InitParams::connected(AccessFlags::empty())
            };
            connect::to_init(&qp, &init).context("cannot move the QP to INIT")?;
            qps.push(qp);
        }
        let by_qpn = qps
            .iter()
            .enumerate()
            .map(|(i, q)| (q.qp_num(), i))
            .collect();
        let mine = qps
            .iter()
            .map(|q| Dest {
                lid: port.lid,
                qpn: q.qp_num(),
                psn: random_psn(u64::from(q.qp_num())),
                gid,
            })
            .collect();
        let role = cfg.role();
        let progress = vec![QpProgress::default(); qps.len()];
        let scratch = vec![0u8; recv_len];
        Ok(Pingpong {
            free_slots: (0..cfg.rx_depth as usize).rev().collect(),
            posted: 0,
            cfg,
            role,
            cq,
            mr,
            pd,
            srq,
            qps,
            by_qpn,
            ah: None,
            gid_idx,
            mine,
            theirs: Vec::new(),
            progress,
            scratch,
        })
    }

    fn run(&mut self) -> Result<()> {
        let n = self.post_recvs(self.cfg.rx_depth)?;
        if n < self.cfg.rx_depth {
            bail!("could not post the receives ({n})");
        }
        if self.cfg.events {
            self.cq.req_notify(NotifyKind::NextCompletion)?;
        }
        let ud = self.cfg.kind == Kind::Ud;
        let mut stdout = std::io::stdout();
        match self.cfg.host.clone() {
            None => {
                // Listen before telling the world: a client started on the
                // strength of our first line finds us.
                let listener = bind_listener(self.cfg.port)?;
                for d in &self.mine {
                    writeln!(stdout, "{}", report::local_line(d, ud))?;
                }
                stdout.flush()?;
                let mut conn = accept(&listener, self.cfg.timeout)?;
                drop(listener);
                conn.set_read_timeout(self.cfg.timeout)?;
                let theirs = handshake::read_dests(&mut conn, self.cfg.messages())
                    .context("couldn't read the client's address")?;
                self.theirs = self.check_peer(theirs)?;
                self.connect()
                    .context("couldn't connect to the remote QP")?;
                handshake::server_reply(&mut conn, &self.mine, self.cfg.messages())
                    .context("couldn't send/receive the local address")?;
            }
            Some(host) => {
                for d in &self.mine {
                    writeln!(stdout, "{}", report::local_line(d, ud))?;
                }
                stdout.flush()?;
                let mut conn = connect_to(&host, self.cfg.port, self.cfg.timeout)?;
                conn.set_read_timeout(self.cfg.timeout)?;
                let theirs = handshake::client_exchange(&mut conn, &self.mine, self.cfg.messages())
                    .context("couldn't read/write the remote address")?;
                drop(conn);
                self.theirs = self.check_peer(theirs)?;
            }
        }
        for d in &self.theirs {
            writeln!(stdout, "{}", report::remote_line(d))?;
        }
        stdout.flush()?;
        if self.role == Role::Client {
            self.connect()?;
        }

        for p in &mut self.progress {
            p.pending = RECV_WRID;
        }
        if self.role == Role::Client {
            for i in 0..self.qps.len() {
                self.post_send(i)?;
                self.progress[i].pending |= SEND_WRID;
            }
        }
        let start = Instant::now();
        self.exchange()?;
        let micros = start.elapsed().as_micros() as u64;
        let [a, b] = report::result_lines(self.cfg.size as u64, self.cfg.iters, micros);
        writeln!(stdout, "{a}")?;
        writeln!(stdout, "{b}")?;
        stdout.flush()?;
        Ok(())
    }

    /// Keeps the descriptions of the peer's real QPs, refusing what this
    /// side cannot connect to.
    fn check_peer(&self, theirs: Vec<Dest>) -> Result<Vec<Dest>> {
        let real: Vec<Dest> = theirs.into_iter().filter(|d| !d.is_null()).collect();
        if real.len() != self.qps.len() {
            bail!(
                "the peer has {} QP(s) and this side {}: give both the same -q",
                real.len(),
                self.qps.len()
            );
        }
        if real.iter().any(|d| d.gid == [0; 16]) {
            bail!("the peer sent no GID: RoCE needs one, run the peer with -g <gid index>");
        }
        let mine_v4 = rxe_verbs::ip_of_gid(self.mine[0].gid).is_ipv4();
        if real
            .iter()
            .any(|d| rxe_verbs::ip_of_gid(d.gid).is_ipv4() != mine_v4)
        {
            bail!(
                "the peer's GID is of the other IP family than ours (-g {})",
                self.gid_idx
            );
        }
        Ok(real)
    }

    /// RTR and RTS with the tools' attributes (and for UD the AH).
    fn connect(&mut self) -> Result<()> {
        for (i, qp) in self.qps.iter().enumerate() {
            let peer = self.theirs[i];
            let my_psn = Psn::new(self.mine[i].psn);
            let av = AddressVector {
                dgid: peer.gid,
                sgid_index: self.gid_idx,
                hop_limit: 1,
                sl: self.cfg.sl,
                ..AddressVector::default()
            };
            let remote = RemoteQp {
                qpn: peer.qpn,
                psn: Psn::new(peer.psn),
                av,
                path_mtu: self.cfg.mtu,
            };
            let ready = match self.cfg.kind {
                Kind::Rc | Kind::Srq => ReadyParams::Rc {
                    sq_psn: my_psn,
                    remote,
                    rc: TOOLS_RC,
                },
                Kind::Uc => ReadyParams::Uc {
                    sq_psn: my_psn,
                    remote,
                },
                Kind::Ud => ReadyParams::Ud { sq_psn: my_psn },
            };
            connect::to_rtr(qp, &ready).context("failed to modify QP to RTR")?;
            connect::to_rts(qp, &ready).context("failed to modify QP to RTS")?;
            if self.cfg.kind == Kind::Ud {
                self.ah = Some(
                    self.pd
                        .create_ah(&AhAttr {
                            dgid: peer.gid,
                            sgid_index: self.gid_idx,
                            hop_limit: 1,
                            sl: self.cfg.sl,
                            port_num: rxe_verbs::PORT,
                            ..AhAttr::default()
                        })
                        .context("failed to create AH")?,
                );
            }
        }
        Ok(())
    }

    fn slot_offset(&self, slot: usize) -> usize {
        slot * self.cfg.recv_len()
    }

    fn send_offset(&self, qp_index: usize) -> usize {
        self.cfg.recv_len() * self.cfg.rx_depth as usize + qp_index * self.cfg.size
    }

    /// Posts up to `n` receives (to the SRQ or the one QP); returns how many.
    fn post_recvs(&mut self, n: u32) -> Result<u32> {
        let mut done = 0;
        while done < n {
            let Some(slot) = self.free_slots.pop() else {
                break;
            };
            let wr = RecvWr {
                wr_id: (slot as u64) << 2 | RECV_WRID,
                sg_list: vec![self
                    .mr
                    .sge(self.slot_offset(slot), self.cfg.recv_len() as u32)],
            };
            let r = match &self.srq {
                Some(s) => s.post_recv(wr),
                None => self.qps[0].post_recv(wr),
            };
            if let Err(e) = r {
                self.free_slots.push(slot);
                if done == 0 {
                    return Err(e).context("couldn't post receive");
                }
                break;
            }
            done += 1;
            self.posted += 1;
        }
        Ok(done)
    }

    fn post_send(&mut self, i: usize) -> Result<()> {
        let off = self.send_offset(i);
        if self.cfg.check != Check::Off {
            let seq = self.progress[i].sent;
            let buf = &mut self.scratch[..self.cfg.size];
            pattern::fill(buf, self.role, i as u32, seq);
            self.mr.write(off, buf)?;
        }
        let ud = match (&self.ah, self.cfg.kind) {
            (Some(ah), Kind::Ud) => Some(ah.ud_dest(self.theirs[i].qpn, UD_QKEY)),
            _ => None::<UdDest>,
        };
        self.qps[i]
            .post_send(SendWr {
                wr_id: (i as u64) << 2 | SEND_WRID,
                op: SendOp::Send,
                data: SendData::Sges(vec![self.mr.sge(off, self.cfg.size as u32)]),
                signaled: true,
                fence: false,
                solicited: false,
                ud,
            })
            .context("couldn't post send")?;
        self.progress[i].sent += 1;
        Ok(())
    }

    /// Waits for completions: on an event with `-e`, else by polling.
    fn next_completions(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<()> {
        out.clear();
        let stuck = || {
            let secs = self.cfg.timeout.unwrap_or_default().as_secs_f64();
            match self.cfg.kind {
                Kind::Uc | Kind::Ud => anyhow!(
                    "no completion for {secs:.1} s: the peer stopped or is gone (same -n on both sides?), or a packet was lost ({} does not retransmit)",
                    self.cfg.qp_type()
                ),
                Kind::Rc | Kind::Srq => anyhow!(
                    "no completion for {secs:.1} s: the peer stopped or is gone (same -n on both sides?)"
                ),
            }
        };
        if self.cfg.events {
            match self.cq.wait(self.cfg.timeout) {
                Ok(()) => {}
                Err(VerbsError::Timeout) => return Err(stuck()),
                Err(e) => return Err(e).context("failed to get a CQ event"),
            }
            self.cq.req_notify(NotifyKind::NextCompletion)?;
            self.cq.poll_into(max, out).context("poll CQ failed")?;
            return Ok(());
        }
        // Busy polling, as the tools do, but yielding the CPU at every
        // empty poll: the device's own threads need it to make progress
        // (measured on 2 CPUs: 1-byte RC round trips took 3x longer when
        // yielding only every 64 polls).
        let since = Instant::now();
        let mut polls = 0u32;
        loop {
            if self.cq.poll_into(max, out).context("poll CQ failed")? > 0 {
                return Ok(());
            }
            std::thread::yield_now();
            polls = polls.wrapping_add(1);
            if polls % 256 == 0 {
                if let Some(t) = self.cfg.timeout {
                    if since.elapsed() > t {
                        return Err(stuck());
                    }
                }
            }
        }
    }

    /// The tools' loop: count sends and receives, refill receives when
    /// they run low, and send again on a QP once its last send and receive
    /// have both completed.
    fn exchange(&mut self) -> Result<()> {
        let iters = self.cfg.iters;
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        let max = if self.cfg.kind == Kind::Srq {
            (self.cfg.rx_depth + self.cfg.num_qp) as usize
        } else {
            2
        };
        let low = if self.cfg.kind == Kind::Srq {
            self.cfg.num_qp
        } else {
            1
        };
        let mut wcs = Vec::with_capacity(max);
        while rcnt < iters || scnt < iters {
            self.next_completions(max, &mut wcs)?;
            for wc in wcs.iter() {
                if wc.status != WcStatus::Success {
                    bail!(
                        "Failed status {} ({}) for wr_id {}",
                        report::wc_status_str(wc.status as u32),
                        wc.status as u32,
                        wc.wr_id
                    );
                }
                let qi = *self
                    .by_qpn
                    .get(&wc.qp_num)
                    .ok_or_else(|| anyhow!("Couldn't find QPN {:06x}", wc.qp_num))?;
                let kind = wc.wr_id & 3;
                match kind {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        let slot = (wc.wr_id >> 2) as usize;
                        if self.cfg.check != Check::Off {
                            self.verify(wc, qi, slot)?;
                        }
                        self.progress[qi].received += 1;
                        self.free_slots.push(slot);
                        self.posted -= 1;
                        if self.posted <= low {
                            let want = self.cfg.rx_depth - self.posted;
                            self.post_recvs(want)?;
                            if self.posted < self.cfg.rx_depth {
                                bail!("Couldn't post receive ({})", self.posted);
                            }
                        }
                        rcnt += 1;
                    }
                    _ => bail!("Completion for unknown wr_id {}", wc.wr_id),
                }
                self.progress[qi].pending &= !kind;
                if scnt < iters && self.progress[qi].pending == 0 {
                    self.post_send(qi)?;
                    self.progress[qi].pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(())
    }

    /// `-c`: the message is the peer's next on this QP, whole and intact.
    /// `--chk-echo`: it is our own message before it, sent back.
    fn verify(&mut self, wc: &WorkCompletion, qi: usize, slot: usize) -> Result<()> {
        let seq = self.progress[qi].received;
        let ud = self.cfg.kind == Kind::Ud;
        let want = self.cfg.recv_len();
        let what = || {
            format!(
                "message {seq} from the {} on QP 0x{:06x}",
                match self.role.peer() {
                    Role::Client => "client",
                    Role::Server => "server",
                },
                self.qps[qi].qp_num()
            )
        };
        if wc.byte_len as usize != want {
            bail!("{}: {} bytes, expected {want}", what(), wc.byte_len);
        }
        if ud {
            if !wc.grh {
                bail!("{}: no GRH", what());
            }
            if wc.src_qp != self.theirs[qi].qpn {
                bail!(
                    "{}: from QP 0x{:06x}, expected 0x{:06x}",
                    what(),
                    wc.src_qp,
                    self.theirs[qi].qpn
                );
            }
        }
        // Whose pattern, of which of its messages, this one must be.
        let (from, of) = match (self.cfg.check, self.role) {
            (Check::Echo, Role::Client) => (self.role, seq),
            // A client tool's first message is its initial buffer; then
            // it sends back our message 0, 1, ...
            (Check::Echo, Role::Server) if seq == 0 => return Ok(()),
            (Check::Echo, Role::Server) => (self.role, seq - 1),
            _ => (self.role.peer(), seq),
        };
        let off = self.slot_offset(slot) + if ud { GRH_LEN } else { 0 };
        let buf = &mut self.scratch[..self.cfg.size];
        self.mr.read(off, buf)?;
        if let Err(m) = pattern::check(buf, from, qi as u32, of) {
            let whose = if self.cfg.check == Check::Echo {
                format!(" (expected our message {of} sent back)")
            } else {
                String::new()
            };
            bail!("{}: data check failed{whose}: {m}", what());
        }
        Ok(())
    }
}

fn bind_listener(port: u16) -> Result<TcpListener> {
    // The tools bind the wildcard address (AI_PASSIVE), IPv4 first.
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .with_context(|| format!("couldn't listen to port {port}"))
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
        let t = T::try_parse_from(std::iter::once("pp").chain(args.iter().copied()))?;
        Config::from_args(&t.a)
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
