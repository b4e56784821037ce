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
//! - **Slow consumers.** While our consumer has not answered a REQ (or,
//!   active, a REP: `ConnectResponse` without a QP), a duplicate of it
//!   gets an MRA with Service Timeout [`CmConfig::mra_service_timeout`]
//!   (24: about 67 s), and the peer waits that long instead of giving up
//!   after its retries (IBTA 12.6.6, the MRA; the number not checked
//!   against the text). This is what Linux's rdma_cm does: it marks each
//!   REQ it hands a consumer as MRA'd with a delay flag, which sends the
//!   MRA only when a duplicate comes (so rping.pcap, with a quick accept,
//!   has none).
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
//! - **Leaving.** A consumer that goes away with its CM (a process
//!   exiting, where the kernel's CM would stay) calls `disconnect_all`,
//!   as the kernel does for each ID still connected when a program's file
//!   closes, and `hurry_dreqs`: the DREQs then go again every few tens of
//!   ms, within their retries, while it waits for the DREPs. The kernel
//!   instead cancels the resend of a DREQ whose ID is destroyed; a peer
//!   whose only DREQ was lost waits for ever.
//! - **TimeWait** lasts the connection's Local ACK Timeout (Linux's CM
//!   uses the same value); the ID is not reused meanwhile (IDs count up).
//! - **Transaction IDs.** Every MAD of a connection carries the REQ's
//!   TransactionID (as the kernel's do in rping.pcap); ours are
//!   `tid_high << 32 | local communication ID`. A DREP carries the DREQ's.

use std::collections::{BTreeSet, HashMap, VecDeque};

use core::time::Duration;

use rxe_core::transport::Instant;
use rxe_core::Gid;
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

mod calls;
mod receive;

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
    /// Offer REQs and SIDR_REQs for ServiceIDs nobody listens on to the
    /// consumer too (as `ConnectRequest`/`SidrRequest`), which then
    /// accepts or refuses them itself, instead of the endpoint refusing
    /// them at once (REJ reason 8, SIDR status 1). A consumer that may
    /// start listening a moment after the request uses it.
    pub offer_unlistened: bool,
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
            offer_unlistened: false,
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
    sidr_key: Option<(Gid, u32)>,
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
    sidr_by_remote: HashMap<(Gid, u32), u32>,
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
