//! Queue pairs (`ibv_create_qp`, `ibv_modify_qp`, `ibv_post_send`, ...).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rxe_core::transport::{AttrMask, QpAttr, QpInit, QpState, QpType, RecvWr, SendWr};
use rxe_core::Gid;

use crate::cq::{Cq, CqShared};
use crate::engine::QpRoute;
use crate::error::{ObjectKind, Result, VerbsError};
use crate::pd::Pd;
use crate::srq::{Srq, SrqShared};

/// Posts of at most this many bytes (one packet at the largest path MTU)
/// may be corked (`Device::kick_corked`). A larger message is a batch of
/// packets already; holding it back only costs the driver a wake-up.
const CORK_MAX_LEN: u64 = 4096;

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> QpCap {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// `struct ibv_qp_init_attr`.
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub srq: Option<&'a Srq>,
    pub cap: QpCap,
    /// Every send completes, signaled or not.
    pub sq_sig_all: bool,
}

#[derive(Debug)]
struct QpShared {
    qpn: u32,
    qp_type: QpType,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    srq: Option<Arc<SrqShared>>,
    cap: QpCap,
    destroyed: AtomicBool,
}

/// A queue pair. Clones share it.
#[derive(Clone)]
pub struct Qp {
    pd: Pd,
    shared: Arc<QpShared>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &format_args!("{:#08x}", self.shared.qpn))
            .field("type", &self.shared.qp_type)
            .finish()
    }
}

/// What `ibv_query_qp` returns: the current attributes and the init ones.
#[derive(Debug, Clone)]
pub struct QpInfo {
    pub state: QpState,
    /// The current value of every attribute that has one.
    pub attr: QpAttr,
    pub qp_type: QpType,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

impl Pd {
    /// `ibv_create_qp`, in RESET. The CQs must be of this device; the SRQ,
    /// if any, too (its PD may differ, as libibverbs allows).
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        self.check_live()?;
        init.send_cq.check_live()?;
        init.recv_cq.check_live()?;
        self.same_device(&init.send_cq.dev, ObjectKind::Cq)?;
        self.same_device(&init.recv_cq.dev, ObjectKind::Cq)?;
        if let Some(s) = init.srq {
            s.check_live()?;
            self.same_device(&s.pd.dev, ObjectKind::Srq)?;
        }
        let max = self.dev.max();
        let c = init.cap;
        let too_big = |what: &str, v: u32, m: u32| {
            (v > m).then(|| VerbsError::InvalidArgument(format!("{what} {v} exceeds {m}")))
        };
        if let Some(e) = too_big("max_send_wr", c.max_send_wr, max.max_qp_wr)
            .or_else(|| too_big("max_recv_wr", c.max_recv_wr, max.max_qp_wr))
            .or_else(|| too_big("max_send_sge", c.max_send_sge, max.max_sge))
            .or_else(|| too_big("max_recv_sge", c.max_recv_sge, max.max_sge))
            .or_else(|| too_big("max_inline_data", c.max_inline_data, max.max_inline_data))
        {
            return Err(e);
        }
        // A queue of 0 entries is allowed, as kernel rxe and hardware
        // allow it: a send-only QP (qperf's rc_bw client) or a
        // receive-only one; posting to it fails as to a full queue.
        // As kernel rxe: a send WQE is large enough for max_send_sge SGEs
        // of 16 bytes, and inline data may use all of it, so the QP
        // reports that much inline room even when less was asked for
        // (ibv_rc_pingpong reads it back to decide on IBV_SEND_INLINE).
        let mut c = c;
        c.max_inline_data = c
            .max_inline_data
            .max((c.max_send_sge.max(1) * 16).min(max.max_inline_data));
        let mut e = self.dev.lock();
        if e.counts.qp >= max.max_qp {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Qp,
                max: max.max_qp,
            });
        }
        let qpn = e.ep.create_qp(QpInit {
            qp_type: init.qp_type,
            pd: self.shared.id,
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: c.max_recv_sge.max(1),
            max_inline_data: c.max_inline_data,
            sq_sig_all: init.sq_sig_all,
            srq: init.srq.map(|s| s.shared.srqn),
        })?;
        e.counts.qp += 1;
        e.routes.insert(
            qpn,
            QpRoute {
                send_cq: init.send_cq.shared.clone(),
                recv_cq: init.recv_cq.shared.clone(),
            },
        );
        self.shared.users.acquire();
        init.send_cq.shared.users.acquire();
        init.recv_cq.shared.users.acquire();
        if let Some(s) = init.srq {
            s.shared.users.acquire();
        }
        Ok(Qp {
            pd: self.clone(),
            shared: Arc::new(QpShared {
                qpn,
                qp_type: init.qp_type,
                send_cq: init.send_cq.shared.clone(),
                recv_cq: init.recv_cq.shared.clone(),
                srq: init.srq.map(|s| s.shared.clone()),
                cap: c,
                destroyed: AtomicBool::new(false),
            }),
        })
    }
}

impl Qp {
    fn check_live(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        if self.shared.destroyed.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Qp));
        }
        Ok(())
    }

    /// The QP number, 24 bits.
    pub fn qp_num(&self) -> u32 {
        self.shared.qpn
    }

    pub fn qp_type(&self) -> QpType {
        self.shared.qp_type
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_modify_qp` with the mask of the attributes that `attr` sets.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        self.modify_mask(attr, attr.mask())
    }

    /// `ibv_modify_qp` with an explicit mask (every attribute it names
    /// must be set in `attr`).
    pub fn modify_mask(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        // Both paths must leave from an address the port has (kernel rxe
        // checks the primary's sgid_index the same way).
        let primary = attr.av.filter(|_| mask.has(rxe_core::transport::Attr::Av));
        let alt = attr
            .alt_path
            .filter(|_| mask.has(rxe_core::transport::Attr::AltPath))
            .map(|p| p.av);
        for av in primary.iter().chain(alt.iter()) {
            if e.gid(av.sgid_index).is_none() {
                return Err(VerbsError::NoSuchGid(av.sgid_index));
            }
        }
        e.ep.modify_qp(self.shared.qpn, attr, mask)?;
        self.pd.dev.kick(e);
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpInfo> {
        self.check_live()?;
        let e = self.pd.dev.lock();
        let cfg = e.ep.query_qp(self.shared.qpn)?;
        let init = e.ep.query_qp_init(self.shared.qpn)?;
        Ok(QpInfo {
            state: cfg.state(),
            attr: *cfg.attrs(),
            qp_type: self.shared.qp_type,
            cap: self.shared.cap,
            sq_sig_all: init.sq_sig_all,
        })
    }

    /// `ibv_post_send` of one work request. Inline data must fit
    /// `max_inline_data` (checked by the engine's requester, which was
    /// created with this QP's caps); SGEs are checked against the MR table
    /// when the request is executed (a bad L_Key completes with LOC_PROT_ERR).
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        let corked =
            e.cork && wr.data.len() <= CORK_MAX_LEN && e.ep.send_in_flight(self.shared.qpn);
        e.ep.post_send(self.shared.qpn, wr)?;
        self.pd.dev.kick_after_post(e, corked);
        Ok(())
    }

    /// `ibv_post_send` of a list: posts in order and stops at the first
    /// refused request, returning its index and the error (`bad_wr`).
    pub fn post_send_list(&self, wrs: Vec<SendWr>) -> Result<(), (usize, VerbsError)> {
        self.check_live().map_err(|e| (0, e))?;
        let mut e = self.pd.dev.lock();
        let small = wrs.iter().all(|w| w.data.len() <= CORK_MAX_LEN);
        let corked = e.cork && small && e.ep.send_in_flight(self.shared.qpn);
        for (i, wr) in wrs.into_iter().enumerate() {
            if let Err(err) = e.ep.post_send(self.shared.qpn, wr) {
                self.pd.dev.kick(e);
                return Err((i, err.into()));
            }
        }
        self.pd.dev.kick_after_post(e, corked);
        Ok(())
    }

    /// `ibv_post_recv`. A QP with an SRQ takes no receives of its own.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        e.ep.post_recv(self.shared.qpn, wr)?;
        self.pd.dev.kick_after_recv(e);
        Ok(())
    }

    /// `ibv_attach_mcast`: this UD QP receives what is sent to multicast
    /// group `mgid` (an IPv4-mapped multicast address or an IPv6 one). The
    /// first QP of the device to attach makes the device join the group on
    /// the host (IGMP/MLD), so that the kernel delivers its datagrams.
    pub fn attach_mcast(&self, mgid: Gid) -> Result<()> {
        self.check_live()?;
        let qpn = self.shared.qpn;
        let mut e = self.pd.dev.lock();
        if e.ep.attach_mcast(qpn, mgid)? {
            let group = mgid.to_ip();
            if let Err(err) = self.pd.dev.net.join_group(group) {
                // Nothing half done: the attach is undone.
                let _ = e.ep.detach_mcast(qpn, mgid);
                return Err(err.into());
            }
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: the last QP of the device to leave a group makes
    /// the device leave it on the host.
    pub fn detach_mcast(&self, mgid: Gid) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        if e.ep.detach_mcast(self.shared.qpn, mgid)? {
            self.pd.dev.net.leave_group(mgid.to_ip());
        }
        Ok(())
    }

    /// `ibv_destroy_qp`: outstanding work is dropped without completions.
    /// Refused (EBUSY, as the kernel's) while the QP is attached to a
    /// multicast group.
    pub fn destroy(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        let groups = e.ep.mcast_groups_of(self.shared.qpn).len();
        if groups > 0 {
            return Err(VerbsError::Busy {
                kind: ObjectKind::Qp,
                users: groups,
                what: "multicast groups it is attached to",
            });
        }
        if self.shared.destroyed.swap(true, Ordering::AcqRel) {
            return Err(VerbsError::Destroyed(ObjectKind::Qp));
        }
        // An answer a busy poller left for its next post (an ACK the peer
        // waits for) goes before the QP that would send it is gone.
        self.pd.dev.flush_locked(&mut e);
        e.ep.destroy_qp(self.shared.qpn)?;
        e.routes.remove(&self.shared.qpn);
        e.counts.qp -= 1;
        self.pd.shared.users.release();
        self.shared.send_cq.users.release();
        self.shared.recv_cq.users.release();
        if let Some(s) = &self.shared.srq {
            s.users.release();
        }
        Ok(())
    }
}
