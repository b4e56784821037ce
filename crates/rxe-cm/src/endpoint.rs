//! The CM of one port, sans-IO (quinn-proto's shape, like the transport's
//! `Endpoint`): MADs and time in through `handle` and `handle_timeout`,
//! MADs out through `poll_transmit`, the next deadline from
//! `poll_timeout`, what happened from `poll_event`; the consumer's calls
//! (`listen`, `connect`, `accept`, `reject`, `send_mra`, `send_rtu`,
//! `disconnect`, `sidr_request`, `sidr_reply`) change the state and queue
//! MADs. No sockets, threads or clock: a simulator drives it exactly.
//!
//! # The connection state machine (IBTA 12.9, not checked against the text)
//!
//! ```text
//! active:   connect ─REQ─► ReqSent ─MRA─► MraReqRcvd
//!                             │ REP          │ REP
//!                             ▼              ▼
//!                          RepRcvd ─send_mra─► MraRepSent
//!                             │ send_rtu (RTU)  │ send_rtu
//!                             ▼                 ▼
//! passive:  REQ ─► ReqRcvd ─send_mra─► MraReqSent
//!                     │ accept (REP)      │ accept
//!                     ▼                   ▼
//!                  RepSent ─MRA─► MraRepRcvd
//!                     │ RTU (or establish)│ RTU
//!                     ▼                   ▼
//!                  Established ─disconnect (DREQ)─► DreqSent ─DREP/DREQ/timeout─► TimeWait ─► gone
//!                     └────────── DREQ (DREP) ───────────────────────────────────► TimeWait
//! ```
//!
//! # Decisions, with their sources
//!
//! - **Timers.** A REQ, REP, DREQ or SIDR_REQ is resent when no answer
//!   came within [`response_timeout`] of the peer's CM response time and
//!   twice the packet lifetime, at most Max CM Retries times (the REQ's
//!   field; our own configuration for what we send); then the attempt
//!   fails. An MRA extends the wait by its Service Timeout plus the packet
//!   lifetime, once (Linux's CM does both the same way).
//! - **Giving up.** A REQ or REP out of retries sends a REJ with reason
//!   Timeout, its ARI our CA GUID, so that the peer can find the
//!   connection by (CA GUID, communication ID) even without our ID (IBTA
//!   12.6.7.2, not checked against the text; Linux looks the REJ up this
//!   way); the consumer gets
//!   `Unreachable`. A DREQ out of retries ends in TimeWait with
//!   `Disconnected` (Linux reports DREQ_ERROR as a disconnect).
//! - **Duplicates.** A REQ is known by (remote CA GUID, remote
//!   communication ID). Its duplicate is answered with the MRA again if we
//!   sent one, with the REP again once we accepted, with a REJ Stale
//!   Connection in TimeWait, and dropped otherwise (counted). A duplicate
//!   REP is answered with the RTU again (or our MRA again); a duplicate
//!   DREQ in TimeWait with the DREP again.
//! - **Stale connections.** A REQ from a QP (remote CA GUID, QPN) that is
//!   already connected gets a REJ Stale Connection, and the old
//!   connection is disconnected (Linux does both).
//! - **Unknown IDs.** A REP for no REQ of ours gets a REJ Invalid
//!   Communication ID; a DREQ for no connection gets a DREP (the peer may
//!   have missed our DREP after we left TimeWait); REQ for a service nobody
//!   listens on gets REJ Invalid Service ID (reason 8). Every other MAD for
//!   an unknown ID or in a state that does not expect it is dropped and
//!   counted by reason ([`CmCounter`]).
//! - **Simultaneous disconnect.** A DREQ received in DreqSent is answered
//!   with a DREP and both sides enter TimeWait; the DREP that then arrives
//!   for our own DREQ is dropped (counted as unexpected).
//! - **REJ after the REP.** A REJ received once the REP has been sent or
//!   received, even when Established (the peer's REP timed out before our
//!   RTU reached it), ends in TimeWait with `Rejected`: neither side stays
//!   half open.
//! - **TimeWait** lasts the connection's Local ACK Timeout (Linux's CM
//!   uses the same value); the ID is not reused meanwhile (IDs count up).
//! - **Transaction IDs.** Every MAD of a connection carries the REQ's
//!   TransactionID (as the kernel's do in rping.pcap); ours are
//!   `tid_high << 32 | local communication ID`. A DREP carries the DREQ's.

use std::collections::{BTreeSet, HashMap, VecDeque};

use core::time::Duration;

use rxe_core::transport::Instant;
use tracing::debug;

use crate::counters::{CmCounter, CmCounters};
use crate::event::{AcceptParams, CmEvent, CommId, ConnectParams, MadAddr, SidrParams, SidrReply};
use crate::mad::{
    self, CmMad, CmMessage, DrepRepr, DreqRepr, MessageMraed, MessageRejected, MraRepr,
    PrivateData, RejRepr, RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr,
    SidrStatus, MAD_LEN,
};
use crate::qp_attrs::{self, ConnQpType, QpAttrs};
use crate::timer::{ack_timeout, exp_duration, response_timeout};

/// Configuration of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// This CA's GUID (REQ/REP Local CA GUID, REJ Timeout ARI).
    pub local_ca_guid: u64,
    /// The high 32 bits of our TransactionIDs (a MAD agent's number).
    pub tid_high: u32,
    /// The first Local Communication ID handed out (never 0).
    pub first_comm_id: u32,
    /// PacketLifeTime exponent of the network. Linux's rdma_cm uses 18 on
    /// RoCE (`CMA_IBOE_PACKET_LIFETIME`; the REQ of rping.pcap has Local
    /// ACK Timeout 0x13 = 18 + 1).
    pub packet_life_time: u8,
    /// Our CM's response time, sent as the REQ's Remote and Local CM
    /// Response Timeouts (rdma_cm: 20, `CMA_CM_RESPONSE_TIMEOUT`).
    pub cm_response_timeout: u8,
    /// How often we resend (rdma_cm: 15, `CMA_MAX_CM_RETRIES`).
    pub max_cm_retries: u8,
    /// This CA's ACK delay, sent as the REP's Target ACK Delay (rping.pcap: 15).
    pub ca_ack_delay: u8,
    /// The Service Timeout of the MRAs we send (rdma_cm: 24, `CMA_CM_MRA_SETTING`).
    pub mra_service_timeout: u8,
}

impl CmConfig {
    /// The values Linux's rdma_cm uses on RoCE.
    pub fn new(local_ca_guid: u64) -> Self {
        CmConfig {
            local_ca_guid,
            tid_high: 0,
            first_comm_id: 1,
            packet_life_time: 18,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            ca_ack_delay: 15,
            mra_service_timeout: 24,
        }
    }
}

/// Where a connection (or SIDR request) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    ReqSent,
    MraReqRcvd,
    RepRcvd,
    MraRepSent,
    ReqRcvd,
    MraReqSent,
    RepSent,
    MraRepRcvd,
    Established,
    DreqSent,
    TimeWait,
    SidrReqSent,
    SidrReqRcvd,
    SidrRepSent,
}

impl CmState {
    /// Whether both QP numbers are known (the REP was sent or received).
    fn rep_exchanged(self) -> bool {
        matches!(
            self,
            CmState::RepRcvd
                | CmState::MraRepSent
                | CmState::RepSent
                | CmState::MraRepRcvd
                | CmState::Established
                | CmState::DreqSent
        )
    }
}

/// Why a consumer's call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    #[error("no connection with ID {0:?}")]
    NoSuchId(CommId),
    #[error("{call} is not allowed on {id:?} in state {state:?}")]
    WrongState {
        id: CommId,
        state: CmState,
        call: &'static str,
    },
    #[error("ServiceID {0:#018x} is listened on already")]
    AlreadyListening(u64),
    #[error("ServiceID {0:#018x} is not listened on")]
    NotListening(u64),
    #[error("path MTU code {0} is not 1..=5")]
    BadMtu(u8),
    #[error(transparent)]
    Mad(#[from] mad::MadError),
    #[error("no free communication ID")]
    OutOfIds,
}

/// One connection or SIDR request.
#[derive(Debug)]
struct Conn {
    state: CmState,
    active: bool,
    tid: u64,
    peer: MadAddr,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    req: Option<Box<ReqRepr>>,
    rep: Option<Box<RepRepr>>,
    /// The message awaiting an answer, resent at `deadline`.
    pending: Option<Box<[u8; MAD_LEN]>>,
    retries_left: u8,
    /// One try's wait.
    retry_timeout: Duration,
    deadline: Option<Instant>,
    /// Our last answer, sent again to a duplicate.
    answer: Option<Box<[u8; MAD_LEN]>>,
    timewait: Duration,
    /// SIDR, passive side: (requester's GID, Request ID).
    sidr_key: Option<([u8; 16], u32)>,
    /// SIDR, passive side: the ServiceID asked for, echoed in the SIDR_REP.
    service_id: u64,
}

impl Conn {
    fn new(state: CmState, active: bool, tid: u64, peer: MadAddr, timewait: Duration) -> Conn {
        Conn {
            state,
            active,
            tid,
            peer,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            req: None,
            rep: None,
            pending: None,
            retries_left: 0,
            retry_timeout: Duration::ZERO,
            deadline: None,
            answer: None,
            timewait,
            sidr_key: None,
            service_id: 0,
        }
    }
}

/// The CM of one port.
#[derive(Debug)]
pub struct CmEndpoint {
    config: CmConfig,
    next_id: u32,
    conns: HashMap<u32, Conn>,
    /// Passive connections by (remote CA GUID, remote communication ID).
    by_remote: HashMap<(u64, u32), u32>,
    /// Connections by (remote CA GUID, remote QPN), once the REP is out.
    by_remote_qpn: HashMap<(u64, u32), u32>,
    sidr_by_remote: HashMap<([u8; 16], u32), u32>,
    listeners: BTreeSet<u64>,
    timers: BTreeSet<(Instant, u32)>,
    out: VecDeque<(MadAddr, Box<[u8; MAD_LEN]>)>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

impl CmEndpoint {
    pub fn new(config: CmConfig) -> CmEndpoint {
        let next_id = config.first_comm_id.max(1);
        CmEndpoint {
            config,
            next_id,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            by_remote_qpn: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listeners: BTreeSet::new(),
            timers: BTreeSet::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    pub fn config(&self) -> &CmConfig {
        &self.config
    }
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }
    /// The state of a connection, `None` once it is gone.
    pub fn state(&self, id: CommId) -> Option<CmState> {
        self.conns.get(&id.0).map(|c| c.state)
    }
    /// How many connections and SIDR requests exist (TimeWait included).
    pub fn len(&self) -> usize {
        self.conns.len()
    }
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    // ---- sans-IO calls ----

    /// The next MAD to send, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(MadAddr, [u8; MAD_LEN])> {
        self.out.pop_front().map(|(to, m)| (to, *m))
    }
    /// The next deadline, if any timer runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, id));
            if let Some(c) = self.conns.get_mut(&id) {
                c.deadline = None;
            }
            self.on_timer(now, id);
        }
    }

    /// A MAD received on QP1 from `from`.
    pub fn handle(&mut self, now: Instant, from: MadAddr, bytes: &[u8]) {
        self.counters.bump(CmCounter::RcvdMads);
        let mad = match CmMad::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, "CM MAD dropped");
                self.counters.bump(CmCounter::for_error(&e));
                return;
            }
        };
        let tid = mad.header.transaction_id;
        match mad.message {
            CmMessage::Req(r) => self.on_req(now, from, tid, r),
            CmMessage::Mra(m) => self.on_mra(now, m),
            CmMessage::Rej(r) => self.on_rej(now, r),
            CmMessage::Rep(r) => self.on_rep(from, tid, r),
            CmMessage::Rtu(r) => self.on_rtu(r),
            CmMessage::Dreq(d) => self.on_dreq(now, from, tid, d),
            CmMessage::Drep(d) => self.on_drep(now, d),
            CmMessage::SidrReq(s) => self.on_sidr_req(from, tid, s),
            CmMessage::SidrRep(s) => self.on_sidr_rep(s),
        }
    }

    // ---- consumer calls ----

    /// Accept REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.remove(&service_id) {
            return Err(CmError::NotListening(service_id));
        }
        Ok(())
    }

    /// Sends a REQ; the answer arrives as `ConnectResponse`, `Rejected` or `Unreachable`.
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<CommId, CmError> {
        if !(1..=5).contains(&p.path_mtu) {
            return Err(CmError::BadMtu(p.path_mtu));
        }
        let private_data = PrivateData::from_slice("REQ", &p.private_data)?;
        let id = self.alloc_id()?;
        let cfg = &self.config;
        let mut path = p.path;
        path.local_ack_timeout = ack_timeout(cfg.ca_ack_delay, cfg.packet_life_time);
        let req = ReqRepr {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: cfg.local_ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            transport_service_type: match p.qp_type {
                ConnQpType::Rc => mad::req::TST_RC,
                ConnQpType::Uc => mad::req::TST_UC,
            },
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: p.retry_count & 7,
            pkey: p.pkey,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            max_cm_retries: cfg.max_cm_retries & 0xf,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: path,
            alternate_path: Default::default(),
            private_data,
        };
        let tid = (u64::from(cfg.tid_high) << 32) | u64::from(id);
        let peer = MadAddr::gsi(path.remote_gid);
        let timewait = exp_duration(path.local_ack_timeout);
        let retry_timeout = response_timeout(cfg.cm_response_timeout, cfg.packet_life_time);
        let retries = cfg.max_cm_retries;
        let bytes = CmMad::send(tid, CmMessage::Req(req.clone())).to_bytes();
        let mut c = Conn::new(CmState::ReqSent, true, tid, peer, timewait);
        c.local_qpn = req.local_qpn;
        c.req = Some(Box::new(req));
        self.conns.insert(id, c);
        self.send_pending(now, id, bytes, retries, retry_timeout);
        Ok(CommId(id))
    }

    /// Passive side: accepts a ConnectRequest with a REP.
    pub fn accept(&mut self, now: Instant, id: CommId, p: AcceptParams) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("REP", &p.private_data)?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "accept",
            });
        }
        let Some(req) = c.req.as_deref() else {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "accept",
            });
        };
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.config.ca_ack_delay & 0x1f,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            srq: p.srq,
            local_ca_guid: self.config.local_ca_guid,
            private_data,
        };
        // The REP waits for the RTU as long as the active side said it needs
        // to answer (its Local CM Response Timeout), as often as it allows.
        let retry_timeout =
            response_timeout(req.local_cm_response_timeout, self.config.packet_life_time);
        let retries = req.max_cm_retries;
        let key = (c.remote_ca_guid, c.remote_qpn);
        let bytes = CmMad::send(c.tid, CmMessage::Rep(rep.clone())).to_bytes();
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.local_qpn = rep.local_qpn;
        c.rep = Some(Box::new(rep));
        c.state = CmState::RepSent;
        c.answer = Some(Box::new(bytes));
        self.by_remote_qpn.insert(key, id.0);
        self.send_pending(now, id.0, bytes, retries, retry_timeout);
        Ok(())
    }

    /// Active side: confirms the REP with an RTU; the connection is up.
    pub fn send_rtu(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("RTU", private_data)?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "send_rtu",
            });
        }
        let rtu = RtuRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Rtu(rtu)).to_bytes();
        let (peer, key) = (c.peer, (c.remote_ca_guid, c.remote_qpn));
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.state = CmState::Established;
        c.answer = Some(Box::new(bytes));
        self.by_remote_qpn.insert(key, id.0);
        self.push(peer, bytes);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Passive side: the QP received a packet before the RTU arrived, so
    /// the active side is up and the connection is established (the
    /// communication-established event of the verbs; not checked against
    /// the text).
    pub fn establish(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "establish",
            });
        }
        self.cancel_timer(id.0);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::Established;
            c.pending = None;
        }
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Refuses a ConnectRequest (or, active side, a ConnectResponse) with a REJ.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CommId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("REJ", private_data)?;
        let c = self.conn(id)?;
        let message_rejected = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRejected::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRejected::Rep,
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "reject",
                })
            }
        };
        let rej = RejRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_rejected,
            reject_info_length: 0,
            reason,
            ari: [0; mad::rej::ARI_LEN],
            private_data,
        };
        let (peer, tid) = (c.peer, c.tid);
        self.push(peer, CmMad::send(tid, CmMessage::Rej(rej)).to_bytes());
        if message_rejected == MessageRejected::Req {
            self.free(id.0);
        } else {
            self.enter_timewait(now, id.0);
        }
        Ok(())
    }

    /// Asks the peer for more time with an MRA of its REQ (passive) or REP (active).
    pub fn send_mra(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("MRA", private_data)?;
        let c = self.conn(id)?;
        let (message_mraed, next) = match c.state {
            CmState::ReqRcvd => (MessageMraed::Req, CmState::MraReqSent),
            CmState::RepRcvd => (MessageMraed::Rep, CmState::MraRepSent),
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "send_mra",
                })
            }
        };
        let mra = MraRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_mraed,
            service_timeout: self.config.mra_service_timeout & 0x1f,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Mra(mra)).to_bytes();
        let peer = c.peer;
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.state = next;
        c.answer = Some(Box::new(bytes));
        self.push(peer, bytes);
        Ok(())
    }

    /// Ends a connection with a DREQ. A no-op while already disconnecting.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CommId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("DREQ", private_data)?;
        let c = self.conn(id)?;
        match c.state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {}
            CmState::DreqSent | CmState::TimeWait => return Ok(()),
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "disconnect",
                })
            }
        }
        let dreq = DreqRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Dreq(dreq)).to_bytes();
        let retry_timeout = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        );
        let retries = self.config.max_cm_retries;
        self.cancel_timer(id.0);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::DreqSent;
        }
        self.send_pending(now, id.0, bytes, retries, retry_timeout);
        Ok(())
    }

    /// The attributes for the QP's INIT, RTR and RTS transitions, once both
    /// the REQ and the REP are known.
    pub fn qp_attrs(&self, id: CommId) -> Result<QpAttrs, CmError> {
        let c = self.conn(id)?;
        match (c.req.as_deref(), c.rep.as_deref()) {
            (Some(req), Some(rep)) if c.active => Ok(qp_attrs::active(req, rep)),
            (Some(req), Some(rep)) => Ok(qp_attrs::passive(req, rep)),
            _ => Err(CmError::WrongState {
                id,
                state: c.state,
                call: "qp_attrs",
            }),
        }
    }

    /// Sends a SIDR_REQ; the answer arrives as `SidrResponse` or `Unreachable`.
    pub fn sidr_request(&mut self, now: Instant, p: SidrParams) -> Result<CommId, CmError> {
        let private_data = PrivateData::from_slice("SIDR_REQ", &p.private_data)?;
        let id = self.alloc_id()?;
        let tid = (u64::from(self.config.tid_high) << 32) | u64::from(id);
        let req = SidrReqRepr {
            request_id: id,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data,
        };
        let bytes = CmMad::send(tid, CmMessage::SidrReq(req)).to_bytes();
        let retry_timeout = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        );
        let retries = self.config.max_cm_retries;
        self.conns.insert(
            id,
            Conn::new(CmState::SidrReqSent, true, tid, p.to, Duration::ZERO),
        );
        self.send_pending(now, id, bytes, retries, retry_timeout);
        Ok(CommId(id))
    }

    /// Answers a SidrRequest.
    pub fn sidr_reply(&mut self, now: Instant, id: CommId, r: SidrReply) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("SIDR_REP", &r.private_data)?;
        let c = self.conn(id)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "sidr_reply",
            });
        }
        let service_id = c.service_id;
        let rep = SidrRepRepr {
            request_id: c.remote_comm_id,
            status: r.status,
            additional_info_length: 0,
            qpn: r.qpn & 0xff_ffff,
            service_id,
            qkey: r.qkey,
            class_port_info: [0; mad::sidr::REP_INFO_LEN],
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::SidrRep(rep)).to_bytes();
        let peer = c.peer;
        // Keep the answer while the requester may still resend its SIDR_REQ.
        let keep = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        )
        .saturating_mul(u32::from(self.config.max_cm_retries) + 1);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::SidrRepSent;
            c.answer = Some(Box::new(bytes));
        }
        self.push(peer, bytes);
        self.set_timer(id.0, now.saturating_add(keep));
        Ok(())
    }

    // ---- received messages ----

    fn on_req(&mut self, now: Instant, from: MadAddr, tid: u64, r: ReqRepr) {
        if let Some(&lid) = self.by_remote.get(&(r.local_ca_guid, r.local_comm_id)) {
            let Some(c) = self.conns.get(&lid) else {
                return;
            };
            match c.state {
                CmState::MraReqSent => self.resend_answer(lid, CmCounter::DupMraResent),
                CmState::RepSent | CmState::MraRepRcvd => {
                    self.resend_answer(lid, CmCounter::DupReqRepResent)
                }
                CmState::TimeWait => {
                    self.counters.bump(CmCounter::RejStaleConn);
                    self.send_rej(
                        from,
                        tid,
                        lid,
                        r.local_comm_id,
                        MessageRejected::Req,
                        RejectReason::StaleConn,
                    );
                }
                _ => self.drop_mad(CmCounter::DropDuplicateReq, "REQ"),
            }
            return;
        }
        if let Some(&lid) = self.by_remote_qpn.get(&(r.local_ca_guid, r.local_qpn)) {
            // A new REQ from a QP we think is connected: the old connection is stale.
            self.counters.bump(CmCounter::RejStaleConn);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::StaleConn,
            );
            if self
                .conns
                .get(&lid)
                .is_some_and(|c| c.state == CmState::Established)
            {
                let _ = self.disconnect(now, CommId(lid), &[]);
            }
            return;
        }
        if !self.listeners.contains(&r.service_id) {
            self.counters.bump(CmCounter::RejInvalidServiceId);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::InvalidServiceId,
            );
            return;
        }
        let bad = if r.transport_service_type > mad::req::TST_UC {
            Some(RejectReason::InvalidTransportType)
        } else if mad::meaning::mtu_bytes(r.path_mtu).is_none() {
            Some(RejectReason::InvalidMtu)
        } else {
            None
        };
        if let Some(reason) = bad {
            self.counters.bump(CmCounter::RejInvalidReq);
            self.send_rej(from, tid, 0, r.local_comm_id, MessageRejected::Req, reason);
            return;
        }
        let Ok(id) = self.alloc_id() else {
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::NoResources,
            );
            return;
        };
        let mut c = Conn::new(
            CmState::ReqRcvd,
            false,
            tid,
            from,
            exp_duration(r.primary_path.local_ack_timeout),
        );
        c.remote_comm_id = r.local_comm_id;
        c.remote_ca_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        let req = Box::new(r);
        c.req = Some(req.clone());
        self.by_remote
            .insert((c.remote_ca_guid, c.remote_comm_id), id);
        self.conns.insert(id, c);
        self.events.push_back(CmEvent::ConnectRequest {
            id: CommId(id),
            from,
            req,
        });
    }

    fn on_rep(&mut self, from: MadAddr, tid: u64, r: RepRepr) {
        let Some(c) = self
            .conns
            .get(&r.remote_comm_id)
            .filter(|c| c.active && c.req.is_some())
        else {
            self.counters.bump(CmCounter::RejInvalidCommId);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Rep,
                RejectReason::InvalidCommId,
            );
            return;
        };
        let id = r.remote_comm_id;
        let same = c.remote_comm_id == r.local_comm_id;
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.cancel_timer(id);
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                c.remote_comm_id = r.local_comm_id;
                c.remote_ca_guid = r.local_ca_guid;
                c.remote_qpn = r.local_qpn;
                c.pending = None;
                c.state = CmState::RepRcvd;
                let rep = Box::new(r);
                c.rep = Some(rep.clone());
                self.events.push_back(CmEvent::ConnectResponse {
                    id: CommId(id),
                    rep,
                });
            }
            _ if !same => self.drop_mad(CmCounter::DropWrongRemoteCommId, "REP"),
            CmState::RepRcvd => self.drop_mad(CmCounter::DropDuplicateRep, "REP"),
            CmState::MraRepSent => self.resend_answer(id, CmCounter::DupMraResent),
            CmState::Established => self.resend_answer(id, CmCounter::DupRepRtuResent),
            _ => self.drop_mad(CmCounter::DropWrongState, "REP"),
        }
    }

    fn on_rtu(&mut self, r: RtuRepr) {
        let id = r.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| !c.active) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "RTU");
        };
        if c.remote_comm_id != r.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "RTU");
        }
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                self.cancel_timer(id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::Established;
                    c.pending = None;
                }
                self.events
                    .push_back(CmEvent::Established { id: CommId(id) });
            }
            CmState::Established => self.drop_mad(CmCounter::DropDuplicateRtu, "RTU"),
            _ => self.drop_mad(CmCounter::DropWrongState, "RTU"),
        }
    }

    fn on_mra(&mut self, now: Instant, m: MraRepr) {
        let id = m.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "MRA");
        };
        // Before the REP the active side does not know the peer's ID yet.
        if c.remote_comm_id != 0 && c.remote_comm_id != m.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "MRA");
        }
        let next = match (m.message_mraed, c.state) {
            (MessageMraed::Req, CmState::ReqSent | CmState::MraReqRcvd) => CmState::MraReqRcvd,
            (MessageMraed::Rep, CmState::RepSent | CmState::MraRepRcvd) => CmState::MraRepRcvd,
            _ => return self.drop_mad(CmCounter::DropUnexpectedMra, "MRA"),
        };
        let first = c.state != next;
        // Wait the Service Timeout plus the packet lifetime before resending.
        let extra = exp_duration(m.service_timeout)
            .saturating_add(exp_duration(self.config.packet_life_time));
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = next;
        }
        self.set_timer(id, now.saturating_add(extra));
        if first {
            self.events
                .push_back(CmEvent::MraReceived { id: CommId(id) });
        }
    }

    fn on_rej(&mut self, now: Instant, r: RejRepr) {
        let id = if r.remote_comm_id != 0 {
            Some(r.remote_comm_id)
        } else if r.reason == RejectReason::Timeout {
            // A REJ Timeout from an active side that never learned our ID:
            // found by its CA GUID (the ARI) and its communication ID.
            let mut g = [0u8; 8];
            g.copy_from_slice(&r.ari[..8]);
            self.by_remote
                .get(&(u64::from_be_bytes(g), r.local_comm_id))
                .copied()
        } else {
            None
        };
        let Some((id, c)) = id.and_then(|id| self.conns.get(&id).map(|c| (id, c))) else {
            return self.drop_mad(CmCounter::DropUnknownRej, "REJ");
        };
        if c.remote_comm_id != 0 && r.local_comm_id != 0 && c.remote_comm_id != r.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "REJ");
        }
        let state = c.state;
        let event = CmEvent::Rejected {
            id: CommId(id),
            reason: r.reason,
            rej: Box::new(r),
        };
        match state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::ReqRcvd | CmState::MraReqSent => {
                self.free(id);
                self.events.push_back(event);
            }
            s if s.rep_exchanged() && s != CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(event);
            }
            _ => self.drop_mad(CmCounter::DropWrongState, "REJ"),
        }
    }

    fn on_dreq(&mut self, now: Instant, from: MadAddr, tid: u64, d: DreqRepr) {
        let id = d.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| c.req.is_some()) else {
            // No such connection (any more): answer, so the peer can leave.
            self.counters.bump(CmCounter::DrepUnknown);
            let drep = DrepRepr {
                local_comm_id: id,
                remote_comm_id: d.local_comm_id,
                private_data: PrivateData::default(),
            };
            self.push(from, CmMad::send(tid, CmMessage::Drep(drep)).to_bytes());
            return;
        };
        if c.remote_comm_id != d.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "DREQ");
        }
        if c.local_qpn != d.remote_qpn_eecn {
            return self.drop_mad(CmCounter::DropDreqWrongQpn, "DREQ");
        }
        let drep = DrepRepr {
            local_comm_id: id,
            remote_comm_id: d.local_comm_id,
            private_data: PrivateData::default(),
        };
        let bytes = CmMad::send(tid, CmMessage::Drep(drep)).to_bytes();
        let peer = c.peer;
        match c.state {
            s if s.rep_exchanged() => {
                self.push(peer, bytes);
                self.enter_timewait(now, id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.answer = Some(Box::new(bytes));
                }
                self.events
                    .push_back(CmEvent::Disconnected { id: CommId(id) });
            }
            CmState::TimeWait => {
                self.counters.bump(CmCounter::DupDreqDrepResent);
                self.push(peer, bytes);
            }
            _ => self.drop_mad(CmCounter::DropWrongState, "DREQ"),
        }
    }

    fn on_drep(&mut self, now: Instant, d: DrepRepr) {
        let id = d.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "DREP");
        };
        if c.remote_comm_id != d.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "DREP");
        }
        if c.state != CmState::DreqSent {
            return self.drop_mad(CmCounter::DropUnexpectedDrep, "DREP");
        }
        self.enter_timewait(now, id);
        self.events
            .push_back(CmEvent::Disconnected { id: CommId(id) });
    }

    fn on_sidr_req(&mut self, from: MadAddr, tid: u64, s: SidrReqRepr) {
        if let Some(&lid) = self.sidr_by_remote.get(&(from.gid, s.request_id)) {
            match self.conns.get(&lid).map(|c| c.state) {
                Some(CmState::SidrRepSent) => self.resend_answer(lid, CmCounter::DupSidrRepResent),
                _ => self.drop_mad(CmCounter::DropDuplicateSidrReq, "SIDR_REQ"),
            }
            return;
        }
        if !self.listeners.contains(&s.service_id) {
            self.counters.bump(CmCounter::SidrUnsupported);
            let rep = SidrRepRepr {
                request_id: s.request_id,
                status: SidrStatus::ServiceIdNotSupported,
                additional_info_length: 0,
                qpn: 0,
                service_id: s.service_id,
                qkey: 0,
                class_port_info: [0; mad::sidr::REP_INFO_LEN],
                private_data: PrivateData::default(),
            };
            self.push(from, CmMad::send(tid, CmMessage::SidrRep(rep)).to_bytes());
            return;
        }
        let Ok(id) = self.alloc_id() else {
            return;
        };
        let mut c = Conn::new(CmState::SidrReqRcvd, false, tid, from, Duration::ZERO);
        c.remote_comm_id = s.request_id;
        c.sidr_key = Some((from.gid, s.request_id));
        c.service_id = s.service_id;
        self.sidr_by_remote.insert((from.gid, s.request_id), id);
        let req = Box::new(s);
        self.conns.insert(id, c);
        self.events.push_back(CmEvent::SidrRequest {
            id: CommId(id),
            from,
            req,
        });
    }

    fn on_sidr_rep(&mut self, s: SidrRepRepr) {
        let id = s.request_id;
        if self.conns.get(&id).map(|c| c.state) != Some(CmState::SidrReqSent) {
            return self.drop_mad(CmCounter::DropUnknownSidrRep, "SIDR_REP");
        }
        self.free(id);
        self.events.push_back(CmEvent::SidrResponse {
            id: CommId(id),
            rep: Box::new(s),
        });
    }

    // ---- timers ----

    fn on_timer(&mut self, now: Instant, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let state = c.state;
        match state {
            CmState::TimeWait => {
                self.free(id);
                self.events
                    .push_back(CmEvent::TimewaitExit { id: CommId(id) });
            }
            CmState::SidrRepSent => self.free(id),
            _ => {
                let Some(bytes) = c.pending.as_deref().copied() else {
                    return;
                };
                let (peer, tid, remote, wait) = (c.peer, c.tid, c.remote_comm_id, c.retry_timeout);
                if c.retries_left > 0 {
                    c.retries_left -= 1;
                    self.counters.bump(CmCounter::Retransmits);
                    self.push(peer, bytes);
                    self.set_timer(id, now.saturating_add(wait));
                    return;
                }
                c.pending = None;
                self.counters.bump(CmCounter::Timeouts);
                match state {
                    CmState::ReqSent
                    | CmState::MraReqRcvd
                    | CmState::RepSent
                    | CmState::MraRepRcvd => {
                        self.send_timeout_rej(peer, tid, id, remote);
                        if state.rep_exchanged() {
                            self.enter_timewait(now, id);
                        } else {
                            self.free(id);
                        }
                        self.events
                            .push_back(CmEvent::Unreachable { id: CommId(id) });
                    }
                    CmState::DreqSent => {
                        self.enter_timewait(now, id);
                        self.events
                            .push_back(CmEvent::Disconnected { id: CommId(id) });
                    }
                    CmState::SidrReqSent => {
                        self.free(id);
                        self.events
                            .push_back(CmEvent::Unreachable { id: CommId(id) });
                    }
                    _ => {}
                }
            }
        }
    }

    // ---- helpers ----

    fn conn(&self, id: CommId) -> Result<&Conn, CmError> {
        self.conns.get(&id.0).ok_or(CmError::NoSuchId(id))
    }

    fn alloc_id(&mut self) -> Result<u32, CmError> {
        for _ in 0..=self.conns.len() {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return Ok(id);
            }
        }
        Err(CmError::OutOfIds)
    }

    fn push(&mut self, to: MadAddr, bytes: [u8; MAD_LEN]) {
        self.counters.bump(CmCounter::SentMads);
        self.out.push_back((to, Box::new(bytes)));
    }

    fn drop_mad(&mut self, c: CmCounter, what: &'static str) {
        debug!(message = what, reason = c.name(), "CM MAD dropped");
        self.counters.bump(c);
    }

    fn send_pending(
        &mut self,
        now: Instant,
        id: u32,
        bytes: [u8; MAD_LEN],
        retries: u8,
        wait: Duration,
    ) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.pending = Some(Box::new(bytes));
        c.retries_left = retries;
        c.retry_timeout = wait;
        let peer = c.peer;
        self.push(peer, bytes);
        self.set_timer(id, now.saturating_add(wait));
    }

    fn resend_answer(&mut self, id: u32, counter: CmCounter) {
        let Some((peer, Some(bytes))) = self
            .conns
            .get(&id)
            .map(|c| (c.peer, c.answer.as_deref().copied()))
        else {
            return self.drop_mad(CmCounter::DropWrongState, "duplicate");
        };
        self.counters.bump(counter);
        self.push(peer, bytes);
    }

    fn send_rej(
        &mut self,
        to: MadAddr,
        tid: u64,
        local: u32,
        remote: u32,
        message_rejected: MessageRejected,
        reason: RejectReason,
    ) {
        let rej = RejRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected,
            reject_info_length: 0,
            reason,
            ari: [0; mad::rej::ARI_LEN],
            private_data: PrivateData::default(),
        };
        self.push(to, CmMad::send(tid, CmMessage::Rej(rej)).to_bytes());
    }

    fn send_timeout_rej(&mut self, to: MadAddr, tid: u64, local: u32, remote: u32) {
        let mut ari = [0u8; mad::rej::ARI_LEN];
        ari[..8].copy_from_slice(&self.config.local_ca_guid.to_be_bytes());
        let rej = RejRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: MessageRejected::Other,
            reject_info_length: 8,
            reason: RejectReason::Timeout,
            ari,
            private_data: PrivateData::default(),
        };
        self.push(to, CmMad::send(tid, CmMessage::Rej(rej)).to_bytes());
    }

    fn set_timer(&mut self, id: u32, at: Instant) {
        self.cancel_timer(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.deadline = Some(at);
            self.timers.insert((at, id));
        }
    }

    fn cancel_timer(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if let Some(t) = c.deadline.take() {
                self.timers.remove(&(t, id));
            }
        }
    }

    fn enter_timewait(&mut self, now: Instant, id: u32) {
        self.cancel_timer(id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::TimeWait;
        c.pending = None;
        let wait = c.timewait;
        self.set_timer(id, now.saturating_add(wait));
    }

    fn free(&mut self, id: u32) {
        self.cancel_timer(id);
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        let key = (c.remote_ca_guid, c.remote_comm_id);
        if self.by_remote.get(&key) == Some(&id) {
            self.by_remote.remove(&key);
        }
        let key = (c.remote_ca_guid, c.remote_qpn);
        if self.by_remote_qpn.get(&key) == Some(&id) {
            self.by_remote_qpn.remove(&key);
        }
        if let Some(k) = c.sidr_key {
            self.sidr_by_remote.remove(&k);
        }
    }
}
