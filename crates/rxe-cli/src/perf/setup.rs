//! The verbs objects of a run (the CQ, and per QP its memory region and
//! its QP) and their bring-up with perftest's attributes.

use std::time::Instant;

use anyhow::{Context, Result};
use rxe_core::transport::Psn;
use rxe_core::Gid;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Cq, Device, InitParams, Mr, PathMtu, Qp, QpCap,
    QpInitAttr, QpType, RcParams, ReadyParams, RemoteQp, WorkCompletion,
};

use super::checks::target_pattern;
use super::config::Config;
use super::handshake::{Keys, Verb};
use super::layout::Layout;
use crate::pattern::Role;
use crate::side_channel::{check_peer_gids, random_psn, PeerGidError};

/// perftest's `MIN_RNR_TIMER`.
const MIN_RNR_TIMER: u8 = 12;

pub(super) struct Perf<'a> {
    pub(super) cfg: &'a Config,
    pub(super) role: Role,
    pub(super) lay: Layout,
    pub(super) mtu: PathMtu,
    pub(super) gid_index: u8,
    /// The most READs and atomics our device lets a QP have outstanding.
    pub(super) max_init_rd: u8,
    pub(super) cq: Cq,
    pub(super) qps: Vec<Qp>,
    pub(super) mrs: Vec<Mr>,
    pub(super) mine: Vec<Keys>,
    pub(super) theirs: Vec<Keys>,
    /// With --check in READ and atomic tests: what each QP's target
    /// region holds before the run (the server writes it, the client
    /// expects it).
    pub(super) regions: Vec<Vec<u8>>,
    pub(super) start: Instant,
    pub(super) wcs: Vec<WorkCompletion>,
    /// What a data check found, printed under the table.
    pub(super) data_note: Option<String>,
}

impl<'a> Perf<'a> {
    /// The CQ, and per QP its memory region and QP (in INIT) and the keys
    /// describing them. `out_reads`: (what we announce, what our device
    /// allows as a requester).
    pub(super) fn new(
        dev: &Device,
        cfg: &'a Config,
        lay: Layout,
        mtu: PathMtu,
        (gid_index, gid): (u8, Gid),
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
    pub(super) fn check_peer(&self, theirs: &[Keys]) -> Result<()> {
        let gids = theirs.iter().map(|k| k.gid);
        check_peer_gids(self.mine[0].gid, self.gid_index, gids, "-x").map_err(|e| match e {
            // perftest's words for it.
            PeerGidError::OtherFamily { .. } => {
                anyhow::Error::new(e).context("found incompatibility issue with GID types")
            }
            PeerGidError::Missing { .. } => e.into(),
        })
    }

    /// RTR and RTS with perftest's attributes.
    pub(super) fn connect(&mut self) -> Result<()> {
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
    pub(super) fn prepare(&mut self) -> Result<()> {
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
}
