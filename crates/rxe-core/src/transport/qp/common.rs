//! What one QP's requester, completer and responder share: its identity,
//! its configuration, the completions and events it has produced, and the
//! fatal-error signal. Each side keeps its own state in its own module.

use std::collections::VecDeque;

use super::attr::{PathMtu, QpState, QpType};
use super::modify::QpConfig;
use crate::transport::window::QpRef;
use crate::transport::wr::WorkCompletion;

/// What a QP is created with (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInit {
    pub qp_type: QpType,
    /// The protection domain every memory access of this QP must match.
    pub pd: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    /// Every send completes with a completion, signaled or not.
    pub sq_sig_all: bool,
    /// The shared receive queue this QP takes its receives from
    /// (`ibv_qp_init_attr.srq`), instead of a receive queue of its own;
    /// `max_recv_wr` and `max_recv_sge` are then unused. RC, UC and UD only.
    /// Receive buffers are checked in this QP's `pd`, not the SRQ's
    /// (see [`Srq`](crate::transport::Srq)).
    pub srq: Option<u32>,
}

impl QpInit {
    /// Small defaults, as a test or `ibv_rc_pingpong` would ask for.
    pub fn new(qp_type: QpType, pd: u32) -> QpInit {
        QpInit {
            qp_type,
            pd,
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
            sq_sig_all: false,
            srq: None,
        }
    }
}

/// An asynchronous event (`ibv_event_type`, the QP ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The first packet arrived in RTR (IBTA 11.6.3, `IBV_EVENT_COMM_EST`).
    CommEstablished { qpn: u32 },
    /// The QP went to ERR on its own (`IBV_EVENT_QP_FATAL`).
    QpFatal { qpn: u32 },
    /// SQD reached with nothing outstanding (`IBV_EVENT_SQ_DRAINED`).
    SqDrained { qpn: u32 },
    /// A QP attached to an SRQ is in ERR and will take no more receives from
    /// it; any receive it had taken has completed (flushed)
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`; IBTA 10.3.1 / 11.6.3, not checked
    /// against the text). Raised once per entry into ERR.
    LastWqeReached { qpn: u32 },
    /// An armed SRQ limit was reached: fewer than `srq_limit` receives
    /// remain queued; the limit is now disarmed
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`; IBTA 10.2.9.x, 11.6.3, not checked
    /// against the text).
    SrqLimitReached { srqn: u32 },
    /// The QP moved to its alternate path on its own (`IBV_EVENT_PATH_MIG`;
    /// IBTA 17.2.8, `qp::migration`).
    PathMigrated { qpn: u32 },
    /// The QP should have moved to its alternate path and could not
    /// (`IBV_EVENT_PATH_MIG_ERR`; `qp::migration`).
    PathMigError { qpn: u32 },
}

/// The part of a QP that both directions use.
#[derive(Debug, Clone)]
pub struct QpCommon {
    pub qpn: u32,
    pub init: QpInit,
    pub config: QpConfig,
    /// The P_Key at the QP's `pkey_index`, kept current by the endpoint.
    pub pkey: u16,
    /// The P_Key at the alternate path's `pkey_index`, kept current by the
    /// endpoint; the QP's after a migration.
    pub alt_pkey: u16,
    /// Whether the alternate path's source GID is in the port's table,
    /// kept current by the endpoint: a migration needs it.
    pub alt_usable: bool,
    completions: VecDeque<WorkCompletion>,
    events: VecDeque<AsyncEvent>,
    flush_pending: bool,
}

impl QpCommon {
    /// The QP as memory checks see it: its PD and number.
    pub fn mem_ref(&self) -> QpRef {
        QpRef {
            pd: self.init.pd,
            qpn: self.qpn,
        }
    }

    pub fn new(qpn: u32, init: QpInit, config: QpConfig, pkey: u16) -> QpCommon {
        QpCommon {
            qpn,
            init,
            config,
            pkey,
            alt_pkey: pkey,
            alt_usable: true,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            flush_pending: false,
        }
    }

    pub fn qp_type(&self) -> QpType {
        self.config.qp_type()
    }

    pub fn state(&self) -> QpState {
        self.config.state()
    }

    /// The path MTU in bytes; UD/GSI QPs, which have none, use the port's.
    pub fn mtu(&self) -> u32 {
        self.config
            .attrs()
            .path_mtu
            .unwrap_or(self.config.caps().max_path_mtu)
            .bytes()
    }

    pub fn path_mtu(&self) -> PathMtu {
        self.config
            .attrs()
            .path_mtu
            .unwrap_or(self.config.caps().max_path_mtu)
    }

    pub fn complete(&mut self, wc: WorkCompletion) {
        self.completions.push_back(wc);
    }

    pub fn event(&mut self, ev: AsyncEvent) {
        self.events.push_back(ev);
    }

    pub fn pop_completion(&mut self) -> Option<WorkCompletion> {
        self.completions.pop_front()
    }

    pub fn pop_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// A fatal error: the QP goes to ERR, raises QP_FATAL, and the endpoint
    /// flushes both work queues once the current call returns (IBTA 10.3.1,
    /// 11.6.2: in ERR every outstanding and later request completes with
    /// WR_FLUSH_ERR).
    pub fn fatal(&mut self) {
        if self.config.state() != QpState::Error {
            self.config.enter_error();
            self.events.push_back(AsyncEvent::QpFatal { qpn: self.qpn });
        }
        self.flush_pending = true;
    }

    /// The BTH MigReq bit of the QP's packets: an RC or UC QP's migration
    /// state says (`qp::migration`); datagram QPs, which have one path
    /// per packet, send 0 as kernel rxe does.
    pub fn sends_mig_req(&self) -> bool {
        matches!(self.qp_type(), QpType::Rc | QpType::Uc) && self.config.mig_req()
    }

    /// Moves to the armed alternate path on the QP's own initiative and
    /// raises PATH_MIG (`qp::migration`); `false` if not ARMED.
    pub fn migrate(&mut self) -> bool {
        if !self.config.migrate() {
            return false;
        }
        self.pkey = self.alt_pkey;
        self.events
            .push_back(AsyncEvent::PathMigrated { qpn: self.qpn });
        true
    }

    /// Asks for a flush of both queues (after a Modify QP to ERR).
    pub fn request_flush(&mut self) {
        self.flush_pending = true;
    }

    /// Whether a flush is due; clears the flag.
    pub fn take_flush(&mut self) -> bool {
        core::mem::take(&mut self.flush_pending)
    }
}
