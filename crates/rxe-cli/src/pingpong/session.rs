//! One run: the verbs objects, the TCP handshake, the QPs brought up with
//! the tools' attributes, and the closing lines.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rxe_core::transport::Psn;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Ah, AhAttr, Cq, Device, InitParams, Mr, NotifyKind, Pd,
    Qp, QpCap, QpInitAttr, RcParams, ReadyParams, RemoteQp, Srq, SrqInitAttr, Target,
};

use super::config::{Config, Kind};
use super::exchange::{RECV_WRID, SEND_WRID};
use super::handshake::{self, Dest};
use super::report;
use crate::pattern::Role;
use crate::place;
use crate::side_channel::{accept, check_peer_gids, connect_to, random_psn};

/// The Q_Key both sides of `ibv_ud_pingpong` use.
pub(super) const UD_QKEY: u32 = 0x1111_1111;

/// The RC attributes of ibv_rc_pingpong and ibv_srq_pingpong.
const TOOLS_RC: RcParams = RcParams::PINGPONG;

/// Per-QP progress: the tool's `pending` bits, and message counts that
/// number the patterns.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct QpProgress {
    pub(super) pending: u64,
    pub(super) sent: u64,
    pub(super) received: u64,
}

pub(super) struct Pingpong {
    pub(super) cfg: Config,
    pub(super) role: Role,
    pub(super) cq: Cq,
    pub(super) mr: Mr,
    pub(super) pd: Pd,
    pub(super) srq: Option<Srq>,
    pub(super) qps: Vec<Qp>,
    pub(super) by_qpn: HashMap<u32, usize>,
    pub(super) ah: Option<Ah>,
    pub(super) gid_idx: u8,
    pub(super) mine: Vec<Dest>,
    pub(super) theirs: Vec<Dest>,
    /// Receive buffer slots not posted.
    pub(super) free_slots: Vec<usize>,
    /// Receives posted (`routs`).
    pub(super) posted: u32,
    pub(super) progress: Vec<QpProgress>,
    pub(super) scratch: Vec<u8>,
}

impl Pingpong {
    pub(super) fn new(dev: &Device, target: &Target, cfg: Config) -> Result<Pingpong> {
        let port = dev.query_port(rxe_verbs::PORT)?;
        if cfg.kind == Kind::Ud && cfg.size > port.active_mtu.bytes() as usize {
            bail!(
                "requested size {} is larger than the port MTU ({})",
                cfg.size,
                port.active_mtu.bytes()
            );
        }
        let (gid_idx, gid) = place::local_gid(dev, target, cfg.gid_idx)?;
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

    pub(super) fn run(&mut self) -> Result<()> {
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
        check_peer_gids(
            self.mine[0].gid,
            self.gid_idx,
            real.iter().map(|d| d.gid),
            "-g",
        )?;
        Ok(real)
    }

    /// RTR and RTS with the tools' attributes (and for UD the AH).
    pub(super) fn connect(&mut self) -> Result<()> {
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
}

fn bind_listener(port: u16) -> Result<TcpListener> {
    // The tools bind the wildcard address (AI_PASSIVE), IPv4 first.
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .with_context(|| format!("couldn't listen to port {port}"))
}
