//! The CM agent of a device: one [`CmEndpoint`] driven with the device's
//! clock, fed the MADs QP1 receives and sending what it queues, its timers
//! run by a small thread that sleeps until the next deadline, a MAD
//! arriving on QP1 (the CQ's event hook) or a consumer's call. It turns
//! the endpoint's events into [`RdmaCmEvent`]s on the IDs' channels and
//! takes the IDs' QPs through RTR and RTS as the REP and RTU go by.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use rxe_cm::mad::RejectReason;
use rxe_cm::{CmConfig, CmEndpoint, CmEvent, CommId};
use rxe_core::transport::{Instant, QpAttr, QpState};
use rxe_core::Gid;

use super::channel::RdmaCmEvent;
use super::gsi::{Gsi, GsiDrop, GsiRecv};
use super::id::{CmId, IdShared};
use super::parked::ParkedRequests;
use crate::cq::NotifyKind;
use crate::device::Device;
use crate::error::{Result, VerbsError};

/// The longest the agent sleeps with no timer running: a safety net only,
/// every event that matters wakes it.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// A device's CM: its configuration until the agent starts, then the agent.
#[derive(Default)]
pub(crate) struct CmSlot {
    pub config: Option<CmConfig>,
    pub agent: Option<Arc<CmAgent>>,
}

/// Counters of QP1 itself, beside the endpoint's.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GsiCounters {
    pub recv_errors: u64,
    pub malformed: u64,
    pub send_errors: u64,
}

pub(crate) struct AgentState {
    pub ep: CmEndpoint,
    /// The ID of each connection (weak: a destroyed ID stops hearing).
    pub conns: HashMap<CommId, Weak<IdShared>>,
    /// The listening ID of each ServiceID.
    pub listeners: HashMap<u64, Weak<IdShared>>,
    /// Our GID index to answer each peer GID from.
    pub sgid_for: HashMap<Gid, u8>,
    pub gsi: GsiCounters,
    /// Requests waiting up to [`LISTEN_GRACE`](super::parked::LISTEN_GRACE) for a listener.
    parked: ParkedRequests,
    /// [`leave`] asked the thread to disconnect everything and hurry.
    leaving: bool,
    stop: bool,
}

pub(crate) struct CmAgent {
    pub dev: Device,
    gsi: Gsi,
    st: Mutex<AgentState>,
    wake: Mutex<bool>,
    cond: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The device's agent, started at the first use of the CM (QP1, its PD and
/// CQ exist from then on).
pub(crate) fn agent(dev: &Device) -> Result<Arc<CmAgent>> {
    dev.0.check_live()?;
    let mut slot = dev.0.cm.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = &slot.agent {
        return Ok(a.clone());
    }
    let mut config = slot
        .config
        .clone()
        .unwrap_or_else(|| CmConfig::new(dev.0.max().node_guid));
    // Requests for unlistened services come to the agent, which holds them
    // for LISTEN_GRACE before refusing.
    config.offer_unlistened = true;
    let gsi = Gsi::create(dev)?;
    let a = Arc::new(CmAgent {
        dev: dev.clone(),
        gsi,
        st: Mutex::new(AgentState {
            ep: CmEndpoint::new(config),
            conns: HashMap::new(),
            listeners: HashMap::new(),
            sgid_for: HashMap::new(),
            gsi: GsiCounters::default(),
            parked: ParkedRequests::default(),
            leaving: false,
            stop: false,
        }),
        wake: Mutex::new(false),
        cond: Condvar::new(),
        thread: Mutex::new(None),
    });
    let weak = Arc::downgrade(&a);
    a.gsi.cq.set_event_hook(Some(Arc::new(move || {
        if let Some(a) = weak.upgrade() {
            a.notify();
        }
    })));
    let runner = a.clone();
    let t = std::thread::Builder::new()
        .name(format!("{}-cm", dev.name()))
        .spawn(move || runner.run())?;
    *a.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    tracing::info!(device = %dev.name(), "CM agent started on QP1");
    slot.agent = Some(a.clone());
    Ok(a)
}

/// The device's agent if its CM has started (never starting it).
pub(crate) fn running(dev: &Device) -> Option<Arc<CmAgent>> {
    dev.0
        .cm
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .agent
        .clone()
}

/// Starts the CM of `dev` now (QP1 and its agent) rather than at the
/// first [`super::CmId`] that uses the device: until then the device does
/// not answer CM MADs (a REQ to it goes unanswered, not rejected).
pub fn start(dev: &Device) -> Result<()> {
    agent(dev).map(|_| ())
}

/// How often [`leave`] resends the DREQs still unanswered: far above a
/// round trip on a LAN, far below the seconds of a CM's response time.
const LEAVING_RESEND: Duration = Duration::from_millis(50);

/// The process is about to exit: sends a DREQ on every connection of the
/// CM of `dev` that is still up, then waits, at most `within`, until every
/// DREQ has its DREP (or has run out of retries), resending the
/// unanswered ones every 50 ms meanwhile; returns how many are still
/// unanswered (1 if the agent's thread never took the request). The
/// kernel's CM outlives a program and does both after it has gone; this
/// CM goes with its process, so without this a connection left up, or a
/// DREQ lost on the way, would leave the peer connected for ever, waiting
/// for a disconnect that never comes. A device whose CM never started has
/// nothing to do.
///
/// The agent's thread does the sending: called from `exit`, the calling
/// thread's thread-locals (the send path's scratch buffers) are already
/// gone. The caller only takes locks and sleeps.
pub fn leave(dev: &Device, within: Duration) -> usize {
    let Some(agent) = running(dev) else { return 0 };
    let deadline = std::time::Instant::now() + within;
    {
        let mut st = agent.lock();
        // Nothing up, nothing unanswered (a program that disconnected and
        // had its DREP): leave at once, as the process would have. Its
        // other threads may still be inside calls on what it destroyed
        // (rping's CM thread, never joined): lingering lets them run on.
        if st.ep.established() == 0 && st.ep.unanswered_dreqs() == 0 {
            return 0;
        }
        st.leaving = true;
    }
    agent.notify();
    loop {
        let left = {
            let st = agent.lock();
            usize::from(st.leaving) + st.ep.unanswered_dreqs()
        };
        if left == 0 || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sets the CM's configuration (timeouts, retries) of `dev` before its
/// agent starts; refused ([`VerbsError::Busy`]) once it runs.
pub fn configure(dev: &Device, tune: impl FnOnce(&mut CmConfig)) -> Result<()> {
    dev.0.check_live()?;
    let mut slot = dev.0.cm.lock().unwrap_or_else(|e| e.into_inner());
    if slot.agent.is_some() {
        return Err(VerbsError::Busy {
            kind: crate::error::ObjectKind::Qp,
            users: 1,
            what: "the CM agent runs already",
        });
    }
    let mut c = slot
        .config
        .clone()
        .unwrap_or_else(|| CmConfig::new(dev.0.max().node_guid));
    tune(&mut c);
    slot.config = Some(c);
    Ok(())
}

impl CmAgent {
    pub fn now(&self) -> Instant {
        self.dev.0.net.clock().now()
    }

    fn lock(&self) -> MutexGuard<'_, AgentState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self) {
        *self.wake.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_one();
    }

    /// Runs a consumer's call on the endpoint, sends what it queued and
    /// lets the thread see the new deadline.
    pub fn with<R>(&self, f: impl FnOnce(&mut AgentState, Instant) -> R) -> R {
        let now = self.now();
        let mut st = self.lock();
        let r = f(&mut st, now);
        self.flush(&mut st);
        drop(st);
        self.notify();
        r
    }

    fn flush(&self, st: &mut AgentState) {
        while let Some((to, mad)) = st.ep.poll_transmit() {
            let sgid = st.sgid_for.get(&to.gid).copied().unwrap_or(0);
            if let Err(e) = self.gsi.send(to, sgid, &mad) {
                tracing::warn!(error = %e, "QP1 send failed");
                st.gsi.send_errors += 1;
            }
        }
    }

    /// The CM's counters, then QP1's, for `Device::counters`.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let st = self.lock();
        let mut v: Vec<(String, u64)> = st
            .ep
            .counters()
            .iter()
            .map(|(c, n)| (c.name().to_string(), n))
            .collect();
        v.push(("cm_gsi_recv_errors".into(), st.gsi.recv_errors));
        v.push(("cm_gsi_malformed".into(), st.gsi.malformed));
        v.push(("cm_gsi_send_errors".into(), st.gsi.send_errors));
        v
    }

    /// Stops the thread (device removal): every ID hears DeviceRemoval.
    pub fn shutdown(&self) {
        let ids: Vec<Arc<IdShared>> = {
            let mut st = self.lock();
            st.stop = true;
            let listeners: Vec<_> = st.listeners.drain().map(|(_, w)| w).collect();
            st.conns
                .drain()
                .map(|(_, w)| w)
                .chain(listeners)
                .filter_map(|w| w.upgrade())
                .collect()
        };
        self.notify();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        for id in ids {
            let id = CmId(id);
            id.push(RdmaCmEvent::DeviceRemoval { id: id.clone() });
        }
    }

    fn run(self: Arc<Self>) {
        let mut rx = Vec::new();
        loop {
            // Arm before polling, so that a MAD arriving after the poll
            // wakes the wait below.
            let _ = self.gsi.cq.req_notify(NotifyKind::NextCompletion);
            rx.clear();
            if let Err(e) = self.gsi.poll(&mut rx) {
                tracing::debug!(error = %e, "QP1 poll failed");
            }
            let now = self.now();
            let mut st = self.lock();
            if st.stop {
                return;
            }
            for r in rx.drain(..) {
                match r {
                    GsiRecv::Mad {
                        from,
                        sgid_index,
                        mad,
                    } => {
                        st.sgid_for.insert(from.gid, sgid_index);
                        st.ep.handle(now, from, &mad[..]);
                    }
                    GsiRecv::Dropped(GsiDrop::RecvError) => st.gsi.recv_errors += 1,
                    GsiRecv::Dropped(GsiDrop::Malformed) => st.gsi.malformed += 1,
                }
            }
            if st.ep.poll_timeout().is_some_and(|t| t <= now) {
                st.ep.handle_timeout(now);
            }
            if std::mem::take(&mut st.leaving) {
                let dreqs = st.ep.disconnect_all(now);
                st.ep.hurry_dreqs(now, LEAVING_RESEND);
                tracing::debug!(device = %self.dev.name(), dreqs, unanswered = st.ep.unanswered_dreqs(), "leaving: DREQs sent and hurried");
            }
            self.flush(&mut st);
            let mut events = Vec::new();
            while let Some(ev) = st.ep.poll_event() {
                events.push(ev);
            }
            let deadline = [st.ep.poll_timeout(), st.parked.next_deadline()]
                .into_iter()
                .flatten()
                .min();
            drop(st);
            let busy = !events.is_empty();
            for ev in events {
                self.deliver(ev);
            }
            self.retry_parked(now);
            if busy {
                continue;
            }
            let wait = deadline.map_or(IDLE_WAIT, |d| d.saturating_since(now).min(IDLE_WAIT));
            let mut w = self.wake.lock().unwrap_or_else(|e| e.into_inner());
            if !*w && !wait.is_zero() {
                w = self
                    .cond
                    .wait_timeout(w, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            *w = false;
        }
    }

    fn id_of(&self, comm: CommId) -> Option<CmId> {
        self.lock()
            .conns
            .get(&comm)
            .and_then(Weak::upgrade)
            .map(CmId)
    }

    /// Forgets a connection the endpoint has let go of.
    fn forget_if_gone(&self, comm: CommId) {
        let mut st = self.lock();
        if st.ep.state(comm).is_none() {
            st.conns.remove(&comm);
        }
    }

    fn deliver(&self, ev: CmEvent) {
        let comm = ev.id();
        match ev {
            CmEvent::ConnectRequest { id, from, req } => self.on_request(
                id,
                from,
                req.service_id,
                req.private_data.as_bytes(),
                Some(&req),
            ),
            CmEvent::ConnectResponse { id, rep } => {
                let Some(cm_id) = self.id_of(id) else {
                    let _ = self
                        .with(|st, now| st.ep.reject(now, id, RejectReason::ConsumerDefined, &[]));
                    return;
                };
                let private_data = rep.private_data.as_bytes().to_vec();
                cm_id.set_peer_private_data(private_data.clone());
                match cm_id.qp() {
                    Some(qp) => {
                        // librdmacm's rdma_connect with a QP: RTR and RTS
                        // with what the REP settled, then the RTU.
                        let r = self.with(|st, now| {
                            let attrs = cm_id.adjust(st.ep.qp_attrs(id)?);
                            match super::id::bring_up(&self.dev, &qp, &attrs) {
                                Ok(()) => st.ep.send_rtu(id, &[]).map_err(Into::into),
                                Err(e) => {
                                    let _ =
                                        st.ep.reject(now, id, RejectReason::ConsumerDefined, &[]);
                                    Err(e)
                                }
                            }
                        });
                        if let Err(e) = r {
                            tracing::warn!(error = %e, "connection refused after the REP");
                            cm_id.push(RdmaCmEvent::Rejected {
                                id: cm_id.clone(),
                                reason: RejectReason::ConsumerDefined.code(),
                                private_data: Vec::new(),
                            });
                        }
                    }
                    None => cm_id.push(RdmaCmEvent::ConnectResponse {
                        id: cm_id.clone(),
                        private_data,
                        peer: super::channel::PeerConnParam::of_rep(&rep),
                    }),
                }
            }
            CmEvent::Established { id } => {
                if let Some(cm_id) = self.id_of(id) {
                    let private_data = cm_id.peer_private_data();
                    cm_id.push(RdmaCmEvent::Established {
                        id: cm_id.clone(),
                        private_data,
                        ud: None,
                    });
                }
            }
            CmEvent::Rejected { id, reason, rej } => {
                if let Some(cm_id) = self.id_of(id) {
                    cm_id.push(RdmaCmEvent::Rejected {
                        id: cm_id.clone(),
                        reason: reason.code(),
                        private_data: rej.private_data.as_bytes().to_vec(),
                    });
                }
            }
            CmEvent::Unreachable { id } => {
                if let Some(cm_id) = self.id_of(id) {
                    cm_id.push(RdmaCmEvent::Unreachable {
                        id: cm_id.clone(),
                        why: super::channel::Unreachable::Timeout,
                    });
                }
            }
            CmEvent::Disconnected { id } => {
                if let Some(cm_id) = self.id_of(id) {
                    // As the kernel's CM on a DREQ: the QP stops (its work
                    // flushes) before the consumer hears of it.
                    if let Some(qp) = cm_id.qp() {
                        let _ = qp.modify(&QpAttr {
                            qp_state: Some(QpState::Error),
                            ..QpAttr::default()
                        });
                    }
                    cm_id.push(RdmaCmEvent::Disconnected { id: cm_id.clone() });
                }
            }
            CmEvent::TimewaitExit { id } => {
                if let Some(cm_id) = self.id_of(id) {
                    cm_id.push(RdmaCmEvent::TimewaitExit { id: cm_id.clone() });
                }
            }
            CmEvent::MraReceived { .. } => {}
            CmEvent::SidrRequest { id, from, req } => {
                self.on_request(id, from, req.service_id, req.private_data.as_bytes(), None)
            }
            CmEvent::SidrResponse { id, rep } => {
                if let Some(cm_id) = self.id_of(id) {
                    let ev = if rep.status == rxe_cm::mad::SidrStatus::Success {
                        RdmaCmEvent::Established {
                            id: cm_id.clone(),
                            private_data: rep.private_data.as_bytes().to_vec(),
                            ud: Some(super::channel::UdPeer {
                                qp_num: rep.qpn,
                                qkey: rep.qkey,
                            }),
                        }
                    } else {
                        RdmaCmEvent::Unreachable {
                            id: cm_id.clone(),
                            why: super::channel::Unreachable::Sidr(rep.status.code()),
                        }
                    };
                    cm_id.push(ev);
                }
            }
        }
        self.forget_if_gone(comm);
    }

    /// Parked requests whose service has a listener now go to it; those
    /// past their deadline are refused.
    fn retry_parked(&self, now: Instant) {
        let due = {
            let mut st = self.lock();
            if st.parked.is_empty() {
                return;
            }
            let st = &mut *st;
            let listeners = &st.listeners;
            st.parked.take_due(now, |sid| listeners.contains_key(&sid))
        };
        for p in due.hand_over {
            self.on_request(
                p.comm,
                p.from,
                p.service_id,
                &p.private_data,
                p.req.as_deref(),
            );
        }
        for p in due.refuse {
            self.refuse(p.comm);
        }
    }

    /// The refusal IBTA 12.6.7 and 12.11.2 give when nobody listens: REJ
    /// reason 8 (invalid ServiceID), or SIDR_REP status 1.
    fn refuse(&self, comm: CommId) {
        let _ = self.with(|st, now| st.ep.refuse_unlistened(now, comm));
    }

    /// Wakes the thread to hand parked requests to a new listener.
    pub fn listener_added(&self) {
        self.notify();
    }

    /// A REQ (with `req`) or a SIDR_REQ for `service_id`: a
    /// ConnectRequest on the listener's channel; without one it waits
    /// [`LISTEN_GRACE`](super::parked::LISTEN_GRACE) for one ([`CmAgent::retry_parked`]).
    fn on_request(
        &self,
        comm: CommId,
        from: rxe_cm::MadAddr,
        service_id: u64,
        private_data: &[u8],
        req: Option<&rxe_cm::mad::ReqRepr>,
    ) {
        let Ok(me) = agent(&self.dev) else { return };
        let listener = self
            .lock()
            .listeners
            .get(&service_id)
            .and_then(Weak::upgrade)
            .map(CmId);
        let Some(listener) = listener else {
            let now = self.now();
            self.lock()
                .parked
                .park(now, comm, from, service_id, private_data, req);
            return;
        };
        if !listener.request_queued() {
            // The backlog is full: no answer, the resend may find room.
            let _ = self.with(|st, _| st.ep.forget_request(comm));
            return;
        }
        let sgid_index = self.lock().sgid_for.get(&from.gid).copied().unwrap_or(0);
        let child = listener.child(me, comm, sgid_index, private_data);
        let user = private_data
            .get(rxe_cm::ip_cm::HEADER_LEN..)
            .unwrap_or_default()
            .to_vec();
        self.lock().conns.insert(comm, Arc::downgrade(&child.0));
        listener.push(RdmaCmEvent::ConnectRequest {
            id: child,
            listen_id: listener.clone(),
            private_data: user,
            peer: req
                .map(super::channel::PeerConnParam::of_req)
                .unwrap_or_default(),
        });
    }
}
