//! The event channel (`rdma_create_event_channel`): a queue of CM events
//! for the IDs created on it, taken blocking ([`EventChannel::get_event`]),
//! without waiting ([`EventChannel::try_get_event`]) or as a `Future`
//! ([`EventChannel::next_event`]). A hook ([`EventChannel::set_event_hook`])
//! runs at every event queued, so that a C layer can back the channel's
//! file descriptor with an eventfd.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::id::CmId;

/// A CM event, named after librdmacm's `RDMA_CM_EVENT_*`.
#[derive(Debug, Clone)]
pub enum RdmaCmEvent {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`: the ID is bound to a device.
    AddrResolved { id: CmId },
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`: the path (MTU, hop limit) is known.
    RouteResolved { id: CmId },
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`: a new ID for an incoming
    /// connection on `listen_id`; answer with `accept` or `reject`.
    ConnectRequest {
        id: CmId,
        listen_id: CmId,
        /// The user's private data (after the IP CM header).
        private_data: Vec<u8>,
        /// What the REQ asks for.
        peer: PeerConnParam,
    },
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`: the REP arrived for an ID without
    /// a QP; [`CmId::establish`] sends the RTU.
    ConnectResponse {
        id: CmId,
        private_data: Vec<u8>,
        /// What the REP settled.
        peer: PeerConnParam,
    },
    /// `RDMA_CM_EVENT_ESTABLISHED`; for a UD service (`RDMA_PS_UDP`), the
    /// SIDR_REP's answer: the remote QP to send to and its Q_Key.
    Established {
        id: CmId,
        private_data: Vec<u8>,
        ud: Option<UdPeer>,
    },
    /// `RDMA_CM_EVENT_REJECTED`, with the REJ's reason code (IBTA 12.6.7.2:
    /// 8 is Invalid Service ID, 28 consumer defined).
    Rejected {
        id: CmId,
        reason: u16,
        private_data: Vec<u8>,
    },
    /// `RDMA_CM_EVENT_UNREACHABLE`: the REQ, REP or SIDR_REQ ran out of
    /// retries, or a SIDR_REP refused.
    Unreachable { id: CmId, why: Unreachable },
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected { id: CmId },
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`: the QP may be reused.
    TimewaitExit { id: CmId },
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval { id: CmId },
    /// `RDMA_CM_EVENT_MULTICAST_JOIN`: the ID has joined `group`; send to
    /// it through `av` to QPN `ud.qp_num` (0xFFFFFF) with `ud.qkey`.
    MulticastJoin {
        id: CmId,
        group: std::net::IpAddr,
        av: rxe_core::transport::AddressVector,
        ud: UdPeer,
    },
}

/// Why a peer is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// No answer within the retries (librdmacm's status -ETIMEDOUT).
    Timeout,
    /// The SIDR_REP's status (IBTA 12.11.2: 1 no such service, 2
    /// rejected, 3 no QP), which librdmacm gives as the status.
    Sidr(u8),
}

/// A UD service's QP, as its SIDR_REP gives it (`rdma_cm_event.param.ud`;
/// the address is the ID's destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdPeer {
    pub qp_num: u32,
    pub qkey: u32,
}

/// `rdma_cm_event.param.conn` as the peer's REQ or REP set it, seen from
/// this side: the peer's initiator depth is our responder resources and
/// the other way round (IBTA 12.7.29, 12.7.30, unchecked numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerConnParam {
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    /// The REQ's; 0 in a REP, which carries none.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The peer's QP number.
    pub qp_num: u32,
}

impl PeerConnParam {
    pub fn of_req(r: &rxe_cm::mad::ReqRepr) -> PeerConnParam {
        PeerConnParam {
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.end_to_end_flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        }
    }

    pub fn of_rep(r: &rxe_cm::mad::RepRepr) -> PeerConnParam {
        PeerConnParam {
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.end_to_end_flow_control,
            retry_count: 0,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        }
    }
}

impl RdmaCmEvent {
    /// The ID the event is about.
    pub fn id(&self) -> &CmId {
        match self {
            RdmaCmEvent::AddrResolved { id }
            | RdmaCmEvent::RouteResolved { id }
            | RdmaCmEvent::ConnectRequest { id, .. }
            | RdmaCmEvent::ConnectResponse { id, .. }
            | RdmaCmEvent::Established { id, .. }
            | RdmaCmEvent::Rejected { id, .. }
            | RdmaCmEvent::Unreachable { id, .. }
            | RdmaCmEvent::Disconnected { id }
            | RdmaCmEvent::TimewaitExit { id }
            | RdmaCmEvent::DeviceRemoval { id }
            | RdmaCmEvent::MulticastJoin { id, .. } => id,
        }
    }

    /// librdmacm's name of the event (`rdma_event_str`).
    pub fn name(&self) -> &'static str {
        match self {
            RdmaCmEvent::AddrResolved { .. } => "RDMA_CM_EVENT_ADDR_RESOLVED",
            RdmaCmEvent::RouteResolved { .. } => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            RdmaCmEvent::ConnectRequest { .. } => "RDMA_CM_EVENT_CONNECT_REQUEST",
            RdmaCmEvent::ConnectResponse { .. } => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            RdmaCmEvent::Established { .. } => "RDMA_CM_EVENT_ESTABLISHED",
            RdmaCmEvent::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
            RdmaCmEvent::Unreachable { .. } => "RDMA_CM_EVENT_UNREACHABLE",
            RdmaCmEvent::Disconnected { .. } => "RDMA_CM_EVENT_DISCONNECTED",
            RdmaCmEvent::TimewaitExit { .. } => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
            RdmaCmEvent::DeviceRemoval { .. } => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            RdmaCmEvent::MulticastJoin { .. } => "RDMA_CM_EVENT_MULTICAST_JOIN",
        }
    }
}

/// Runs at every event queued on a channel (it must not block).
pub type ChannelHook = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Queue {
    events: VecDeque<RdmaCmEvent>,
    wakers: Vec<Waker>,
}

#[derive(Default)]
pub(crate) struct ChannelShared {
    q: Mutex<Queue>,
    cond: Condvar,
    hook: Mutex<Option<ChannelHook>>,
}

impl Queue {
    /// The next event, taken by the application: a ConnectRequest leaves
    /// its listener's backlog then (as in the kernel's ucma).
    fn pop(&mut self) -> Option<RdmaCmEvent> {
        let ev = self.events.pop_front()?;
        if let RdmaCmEvent::ConnectRequest { listen_id, .. } = &ev {
            listen_id.request_taken();
        }
        Some(ev)
    }
}

impl ChannelShared {
    pub(crate) fn push(&self, ev: RdmaCmEvent) {
        tracing::debug!(event = ev.name(), "CM event");
        let wakers = {
            let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
            q.events.push_back(ev);
            std::mem::take(&mut q.wakers)
        };
        self.cond.notify_all();
        for w in wakers {
            w.wake();
        }
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h();
        }
    }
}

/// `struct rdma_event_channel`; clones name the same channel.
#[derive(Clone, Default)]
pub struct EventChannel(pub(crate) Arc<ChannelShared>);

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").finish_non_exhaustive()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> EventChannel {
        EventChannel::default()
    }

    /// The next event, without waiting.
    pub fn try_get_event(&self) -> Option<RdmaCmEvent> {
        self.0.q.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// `rdma_get_cm_event`: blocks until an event is queued.
    pub fn get_event(&self) -> RdmaCmEvent {
        let mut q = self.0.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(ev) = q.pop() {
                return ev;
            }
            q = self.0.cond.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// As [`EventChannel::get_event`], giving up after `timeout`.
    pub fn get_event_timeout(&self, timeout: Duration) -> Option<RdmaCmEvent> {
        let deadline = Instant::now() + timeout;
        let mut q = self.0.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(ev) = q.pop() {
                return Some(ev);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            q = self
                .0
                .cond
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The next event as a `Future` (any executor: it wakes the task's waker).
    pub fn next_event(&self) -> NextEvent<'_> {
        NextEvent { ch: self }
    }

    /// Calls `hook` after every event queued from now on (`None` removes it).
    pub fn set_event_hook(&self, hook: Option<ChannelHook>) {
        *self.0.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }
}

/// The future of [`EventChannel::next_event`].
pub struct NextEvent<'a> {
    ch: &'a EventChannel,
}

impl Future for NextEvent<'_> {
    type Output = RdmaCmEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RdmaCmEvent> {
        let mut q = self.ch.0.q.lock().unwrap_or_else(|e| e.into_inner());
        match q.pop() {
            Some(ev) => Poll::Ready(ev),
            None => {
                if !q.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    q.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}
