//! `struct rdma_cm_id`: one endpoint of a connection (or a listener), in
//! librdmacm's shape. Each call checks what the ID has been through
//! (bound, address resolved, route resolved, connected) and hands the
//! protocol to the device's agent.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rxe_cm::ip_cm::{self, IpCmHeader, PortSpace};
use rxe_cm::mad::{req, sidr, RejectReason, SidrStatus};
use rxe_cm::{AcceptParams, CommId, ConnectParams, MadAddr, QpAttrs, SidrParams, SidrReply};
use rxe_core::transport::{Psn, QpAttr, QpState, QpType};

use super::agent::{agent, CmAgent};
use super::channel::{EventChannel, RdmaCmEvent};
use super::error::CmApiError;
pub(crate) use super::qp_setup::bring_up;
use super::qp_setup::{init_params, starting_psn};
use super::resolve;
use crate::connect::{self, InitParams, ReadyParams};
use rxe_core::Gid;

/// The Q_Key of the RDMA CM's UD QPs and multicast groups
/// (`RDMA_UDP_QKEY`): SIDR_REP announces it, and both sides' QPs use it.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
use crate::device::{Device, PORT};
use crate::pd::Pd;
use crate::qp::{Qp, QpInitAttr};

type Result<T> = std::result::Result<T, CmApiError>;

/// `struct rdma_conn_param`: what `connect` and `accept` put in the REQ
/// and the REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// User private data: at most 56 bytes in a REQ (after the IP CM
    /// header), 196 in a REP, 148 in a REJ.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 3 bits.
    pub retry_count: u8,
    /// 3 bits; 7 retries without end.
    pub rnr_retry_count: u8,
    /// The QP number to announce for an ID without a QP (the consumer
    /// brings its own up with [`CmId::qp_attrs`]); ignored with one.
    pub qp_num: u32,
    /// That QP uses an SRQ (the REQ's and REP's SRQ bit).
    pub srq: bool,
}

impl Default for ConnParam {
    /// The values rping uses: one READ each way, retries 7.
    fn default() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: 0,
            srq: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct IdState {
    agent: Option<Arc<CmAgent>>,
    pub(super) sgid_index: u8,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    route: Option<resolve::ResolvedRoute>,
    comm: Option<CommId>,
    pub(super) qp: Option<Qp>,
    listening: Option<u64>,
    /// The agents a wildcard listener (bound to 0.0.0.0 or ::) listens
    /// on: every device's.
    listen_agents: Vec<Arc<CmAgent>>,
    /// The ToS (`RDMA_OPTION_ID_TOS`): the path's traffic class.
    pub(super) tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's Local ACK Timeout, instead
    /// of the one the REQ and REP settle.
    ack_timeout: Option<u8>,
    /// The peer's private data of the REQ or REP, for the Established event.
    peer_private_data: Vec<u8>,
    /// The multicast groups joined (`multicast` module).
    pub(super) mcast: Vec<super::multicast::Joined>,
}

pub(crate) struct IdShared {
    /// Changed by [`CmId::migrate`].
    channel: Mutex<EventChannel>,
    ps: PortSpace,
    st: Mutex<IdState>,
    /// A listener's ConnectRequests queued and not yet taken by the
    /// application, and how many may be (`rdma_listen`'s backlog).
    pending_requests: AtomicUsize,
    backlog: AtomicUsize,
}

/// The backlog of `rdma_listen(id, 0)` or of one out of range: the
/// kernel's default (`net.rdma_ucm.max_backlog`, 1024).
pub const MAX_BACKLOG: usize = 1024;

/// An RDMA CM ID; clones name the same ID.
#[derive(Clone)]
pub struct CmId(pub(crate) Arc<IdShared>);

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("CmId")
            .field("src", &st.src)
            .field("dst", &st.dst)
            .field("comm", &st.comm)
            .finish_non_exhaustive()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// An ephemeral port for an ID bound without one (the kernel's range
/// starts at 32768; the pid and a counter keep concurrent processes apart).
fn ephemeral_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    32768 + ((std::process::id().wrapping_mul(7919).wrapping_add(n)) % 28000) as u16
}

fn agent_of(dev: &Device) -> Result<Arc<CmAgent>> {
    Ok(agent(dev)?)
}

fn unlisten(a: &CmAgent, sid: u64) {
    a.with(|st, _| {
        let _ = st.ep.unlisten(sid);
        st.listeners.remove(&sid);
    });
}

impl CmId {
    /// `rdma_create_id` on `channel`: RC services (`RDMA_PS_TCP`,
    /// connected with REQ/REP/RTU) or UD ones (`RDMA_PS_UDP`, resolved
    /// with SIDR_REQ/SIDR_REP).
    pub fn new(channel: &EventChannel, ps: PortSpace) -> Result<CmId> {
        if !matches!(ps, PortSpace::Tcp | PortSpace::Udp) {
            return Err(CmApiError::Unsupported(
                "a port space other than RDMA_PS_TCP and RDMA_PS_UDP",
            ));
        }
        Ok(CmId(Arc::new(IdShared {
            channel: Mutex::new(channel.clone()),
            ps,
            st: Mutex::default(),
            pending_requests: AtomicUsize::new(0),
            backlog: AtomicUsize::new(MAX_BACKLOG),
        })))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, IdState> {
        self.0.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn push(&self, ev: RdmaCmEvent) {
        self.channel().0.push(ev);
    }

    /// Counts a ConnectRequest queued for this listener; `false` (and
    /// nothing counted) if its backlog is full.
    pub(crate) fn request_queued(&self) -> bool {
        let max = self.0.backlog.load(Ordering::Relaxed);
        self.0
            .pending_requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// A ConnectRequest of this listener was taken from its channel.
    pub(crate) fn request_taken(&self) {
        let _ = self
            .0
            .pending_requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub(crate) fn qp(&self) -> Option<Qp> {
        self.lock().qp.clone()
    }

    pub(crate) fn set_peer_private_data(&self, d: Vec<u8>) {
        self.lock().peer_private_data = d;
    }

    pub(crate) fn peer_private_data(&self) -> Vec<u8> {
        self.lock().peer_private_data.clone()
    }

    /// The ID a ConnectRequest creates on the listener's channel, on the
    /// device of the agent that took the REQ.
    pub(crate) fn child(
        &self,
        agent: Arc<CmAgent>,
        comm: CommId,
        sgid_index: u8,
        private_data: &[u8],
    ) -> CmId {
        let dev = agent.dev.clone();
        let (src, tos, ack_timeout) = {
            let st = self.lock();
            (st.src, st.tos, st.ack_timeout)
        };
        let hdr = IpCmHeader::parse(private_data).ok();
        let dst = hdr.map(|h| SocketAddr::new(h.src, h.src_port));
        let src = match (hdr, src) {
            (Some(h), Some(s)) => Some(SocketAddr::new(h.dst, s.port())),
            (_, s) => s,
        };
        let route = resolve::resolve_route(&dev).ok();
        CmId(Arc::new(IdShared {
            channel: Mutex::new(self.channel()),
            ps: self.0.ps,
            st: Mutex::new(IdState {
                agent: Some(agent),
                tos,
                ack_timeout,
                sgid_index,
                src,
                dst,
                route,
                comm: Some(comm),
                peer_private_data: private_data
                    .get(ip_cm::HEADER_LEN..)
                    .unwrap_or_default()
                    .to_vec(),
                ..IdState::default()
            }),
            pending_requests: AtomicUsize::new(0),
            backlog: AtomicUsize::new(MAX_BACKLOG),
        }))
    }

    /// The device the ID is bound to, once bound or resolved (`id->verbs`).
    pub fn device(&self) -> Option<Device> {
        self.lock().agent.as_ref().map(|a| a.dev.clone())
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.lock().src
    }

    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.lock().dst
    }

    /// A number naming this ID (its clones too) while it lives, for
    /// tables kept beside it.
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn port_space(&self) -> PortSpace {
        self.0.ps
    }

    /// The QP made with [`CmId::create_qp`] (`id->qp`).
    pub fn qp_handle(&self) -> Option<Qp> {
        self.qp()
    }

    /// The channel events of this ID go to.
    pub fn channel(&self) -> EventChannel {
        self.0
            .channel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `rdma_migrate_id`: the ID's later events go to `channel` (those
    /// already queued stay where they are).
    pub fn migrate(&self, channel: &EventChannel) {
        *self.0.channel.lock().unwrap_or_else(|e| e.into_inner()) = channel.clone();
    }

    /// `RDMA_OPTION_ID_TOS`: the traffic class of the ID's path, from the
    /// next route resolved (the IP header's DSCP and ECN bits).
    pub fn set_tos(&self, tos: u8) {
        let mut st = self.lock();
        st.tos = Some(tos);
        if let Some(r) = &mut st.route {
            r.traffic_class = tos;
        }
    }

    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the Local ACK Timeout exponent
    /// (4.096 µs × 2^timeout, 5 bits) the ID's QP gets at RTS, whatever
    /// the CM messages settle, as the kernel's rdma_cm does.
    pub fn set_ack_timeout(&self, timeout: u8) {
        self.lock().ack_timeout = Some(timeout.min(31));
    }

    /// The CM's attributes with the ID's own options applied.
    pub(crate) fn adjust(&self, mut a: QpAttrs) -> QpAttrs {
        if let Some(t) = self.lock().ack_timeout {
            a.timeout = t;
        }
        a
    }

    /// The path `resolve_route` found, or an accepted connection's.
    pub fn route(&self) -> Option<resolve::ResolvedRoute> {
        self.lock().route
    }

    /// Our GID index on the ID's device (the path's source GID).
    pub fn sgid_index(&self) -> u8 {
        self.lock().sgid_index
    }

    fn attach(&self, st: &mut IdState, dev: &Device, sgid_index: u8) -> Result<()> {
        if let Some(a) = &st.agent {
            if &a.dev != dev {
                return Err(CmApiError::WrongDevice);
            }
        } else {
            st.agent = Some(agent(dev)?);
        }
        st.sgid_index = sgid_index;
        Ok(())
    }

    /// `rdma_bind_addr`: a local address of a device, and a port (0 picks
    /// one). The unspecified address (0.0.0.0 or ::) binds no device: a
    /// listener bound so hears the REQs of every device, as the kernel's
    /// wildcard listen does.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let port = if addr.port() == 0 {
            ephemeral_port()
        } else {
            addr.port()
        };
        if addr.ip().is_unspecified() {
            let mut st = self.lock();
            if st.src.is_some() {
                return Err(CmApiError::Unsupported("binding an ID twice"));
            }
            st.src = Some(SocketAddr::new(addr.ip(), port));
            return Ok(());
        }
        let (dev, idx) = resolve::device_for(addr.ip()).ok_or(CmApiError::NoDevice(addr.ip()))?;
        let mut st = self.lock();
        self.attach(&mut st, &dev, idx)?;
        st.src = Some(SocketAddr::new(addr.ip(), port));
        Ok(())
    }

    /// `rdma_resolve_addr`: picks the device and source address for `dst`
    /// (see [`resolve::resolve_addr`]); `AddrResolved` follows. The timeout
    /// is unused: nothing goes on the wire.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout: Duration,
    ) -> Result<()> {
        let bound = self.lock().src;
        let want = src
            .filter(|s| !s.ip().is_unspecified() || s.port() != 0)
            .or(bound);
        let r = resolve::resolve_addr(want.map(|s| s.ip()), dst.ip())?;
        if matches!(
            (r.src, r.dst),
            (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_))
        ) {
            return Err(CmApiError::Unsupported(
                "a source and destination of two IP versions",
            ));
        }
        {
            let mut st = self.lock();
            self.attach(&mut st, &r.device, r.sgid_index)?;
            let port = want
                .map(|s| s.port())
                .filter(|p| *p != 0)
                .unwrap_or_else(ephemeral_port);
            st.src = Some(SocketAddr::new(r.src, port));
            st.dst = Some(dst);
        }
        self.push(RdmaCmEvent::AddrResolved { id: self.clone() });
        Ok(())
    }

    /// `rdma_resolve_route`: the path MTU (the port's active MTU), hop
    /// limit and traffic class; `RouteResolved` follows.
    pub fn resolve_route(&self, _timeout: Duration) -> Result<()> {
        let dev = self.device().ok_or(CmApiError::NotReady("resolve_addr"))?;
        let mut route = resolve::resolve_route(&dev)?;
        {
            let mut st = self.lock();
            if let Some(tos) = st.tos {
                route.traffic_class = tos;
            }
            st.route = Some(route);
        }
        self.push(RdmaCmEvent::RouteResolved { id: self.clone() });
        Ok(())
    }

    /// `rdma_create_qp`: an RC QP on the ID's device, taken to INIT now
    /// (`connect` or `accept` take it through RTR and RTS), or a UD QP of
    /// an `RDMA_PS_UDP` ID, ready to send and receive at once.
    pub fn create_qp(&self, pd: &Pd, init: &QpInitAttr<'_>) -> Result<Qp> {
        let dev = self
            .device()
            .ok_or(CmApiError::NotReady("bind_addr or resolve_addr"))?;
        if pd.device() != dev {
            return Err(CmApiError::WrongDevice);
        }
        let qp = pd.create_qp(init)?;
        if let Err(e) = self.attach_qp(&qp) {
            let _ = qp.destroy();
            return Err(e);
        }
        Ok(qp)
    }

    /// The QP of the ID (`id->qp`) made by the caller on the ID's device,
    /// as `rdma_create_qp` does after it creates one: taken to INIT now,
    /// through RTR and RTS by `connect` or `accept`.
    pub fn attach_qp(&self, qp: &Qp) -> Result<()> {
        if let Some(dev) = self.device() {
            if qp.pd().device() != dev {
                return Err(CmApiError::WrongDevice);
            }
        }
        match (self.0.ps, qp.qp_type()) {
            (PortSpace::Tcp, QpType::Rc) => connect::to_init(qp, &init_params(true))?,
            // A UD QP of the RDMA CM is ready at once, with the port
            // space's Q_Key (librdmacm's RDMA_UDP_QKEY).
            (PortSpace::Udp, QpType::Ud) => connect::connect(
                qp,
                &InitParams::datagram(RDMA_UDP_QKEY),
                &ReadyParams::Ud {
                    sq_psn: Psn::new(starting_psn(qp.qp_num())),
                },
            )?,
            (PortSpace::Tcp, _) => {
                return Err(CmApiError::Unsupported("an RDMA_PS_TCP QP other than RC"))
            }
            _ => return Err(CmApiError::Unsupported("an RDMA_PS_UDP QP other than UD")),
        }
        self.lock().qp = Some(qp.clone());
        Ok(())
    }

    /// Forgets the ID's QP (`rdma_destroy_qp`: the caller destroys it).
    /// The multicast groups the ID's joins attached it to are detached
    /// first, so that it can be destroyed (the kernel would refuse with
    /// EBUSY and leak the QP); the ID stays joined, and a later leave has
    /// no QP to detach.
    pub fn detach_qp(&self) -> Option<Qp> {
        let (qp, groups) = {
            let mut st = self.lock();
            let groups: Vec<IpAddr> = st
                .mcast
                .iter_mut()
                .filter(|j| j.attached)
                .map(|j| {
                    j.attached = false;
                    j.group
                })
                .collect();
            (st.qp.take(), groups)
        };
        if let Some(q) = &qp {
            for g in groups {
                if let Err(e) = q.detach_mcast(Gid::from(g)) {
                    tracing::debug!(group = %g, error = %e, "detaching the ID's QP");
                }
            }
        }
        qp
    }

    /// `rdma_connect`: sends the REQ. With a QP, the REP takes it to RTR
    /// and RTS and the RTU follows by itself (then `Established`); without
    /// one, `ConnectResponse` comes and [`CmId::establish`] answers it.
    pub fn connect(&self, p: &ConnParam) -> Result<()> {
        let (agent, src, dst, route, sgid_index, qp) = {
            let st = self.lock();
            if st.comm.is_some() {
                return Err(CmApiError::Unsupported("connecting an ID twice"));
            }
            let agent = st
                .agent
                .clone()
                .ok_or(CmApiError::NotReady("resolve_addr"))?;
            let dst = st.dst.ok_or(CmApiError::NotReady("resolve_addr"))?;
            let src = st.src.ok_or(CmApiError::NotReady("resolve_addr"))?;
            let route = st.route.ok_or(CmApiError::NotReady("resolve_route"))?;
            (agent, src, dst, route, st.sgid_index, st.qp.clone())
        };
        let qpn = qp.as_ref().map_or(p.qp_num, |q| q.qp_num());
        let hdr = IpCmHeader {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let remote_gid = Gid::from(dst.ip());
        let local_gid = Gid::from(src.ip());
        let weak = Arc::downgrade(&self.0);
        if self.0.ps == PortSpace::Udp {
            // UD: a SIDR_REQ asks the service for its QPN and Q_Key
            // (IBTA 12.11); the SIDR_REP ends it in `Established`.
            let sp = SidrParams {
                to: MadAddr::gsi(remote_gid),
                service_id: ip_cm::service_id(self.0.ps, dst.port()),
                pkey: agent.dev.query_pkey(PORT, 0).unwrap_or(0xffff),
                private_data: hdr.with_user_data(&p.private_data, sidr::REQ_PRIVATE_DATA_LEN)?,
            };
            let comm = agent.with(|st, now| {
                let comm = st.ep.sidr_request(now, sp)?;
                st.conns.insert(comm, weak);
                st.sgid_for.insert(remote_gid, sgid_index);
                Ok::<_, CmApiError>(comm)
            })?;
            self.lock().comm = Some(comm);
            return Ok(());
        }
        let private_data = hdr.with_user_data(&p.private_data, req::PRIVATE_DATA_LEN)?;
        let mut cp = ConnectParams::rc(
            ip_cm::service_id(self.0.ps, dst.port()),
            qpn,
            starting_psn(qpn),
            local_gid,
            remote_gid,
        );
        cp.responder_resources = p.responder_resources;
        cp.initiator_depth = p.initiator_depth;
        cp.retry_count = p.retry_count;
        cp.rnr_retry_count = p.rnr_retry_count;
        cp.srq = p.srq;
        cp.path_mtu = route.path_mtu as u8 + 1;
        cp.path.hop_limit = route.hop_limit;
        cp.path.traffic_class = route.traffic_class;
        cp.pkey = agent.dev.query_pkey(PORT, 0).unwrap_or(0xffff);
        cp.private_data = private_data;
        let comm = agent.with(|st, now| {
            let comm = st.ep.connect(now, cp)?;
            st.conns.insert(comm, weak);
            st.sgid_for.insert(remote_gid, sgid_index);
            Ok::<_, CmApiError>(comm)
        })?;
        self.lock().comm = Some(comm);
        Ok(())
    }

    /// `rdma_listen`: REQs for the bound port become `ConnectRequest`s,
    /// at most `backlog` of them waiting to be taken from the channel (0,
    /// negative or above `MAX_BACKLOG`: that); a request beyond is left
    /// unanswered, so that its resend may find room, as in the kernel. A
    /// wildcard-bound ID listens on every device there is now.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        let backlog = usize::try_from(backlog)
            .ok()
            .filter(|b| (1..=MAX_BACKLOG).contains(b))
            .unwrap_or(MAX_BACKLOG);
        self.0.backlog.store(backlog, Ordering::Relaxed);
        let (agent, src) = {
            let st = self.lock();
            if st.listening.is_some() {
                return Err(CmApiError::Unsupported("listening twice"));
            }
            (
                st.agent.clone(),
                st.src.ok_or(CmApiError::NotReady("bind_addr"))?,
            )
        };
        let agents = match agent {
            Some(a) => vec![a],
            None => crate::registry::devices()
                .iter()
                .map(agent_of)
                .collect::<std::result::Result<Vec<_>, _>>()?,
        };
        if agents.is_empty() {
            return Err(CmApiError::NoDevice(src.ip()));
        }
        let sid = ip_cm::service_id(self.0.ps, src.port());
        let weak = Arc::downgrade(&self.0);
        let mut done = Vec::new();
        for a in &agents {
            let r = a.with(|st, _| {
                st.ep.listen(sid)?;
                st.listeners.insert(sid, weak.clone());
                Ok::<_, CmApiError>(())
            });
            if let Err(e) = r {
                for d in done {
                    unlisten(d, sid);
                }
                return Err(e);
            }
            a.listener_added();
            done.push(a);
        }
        let mut st = self.lock();
        st.listening = Some(sid);
        st.listen_agents = agents;
        tracing::info!(service_id = format_args!("{sid:#018x}"), addr = %src, "CM listening");
        Ok(())
    }

    fn conn(&self) -> Result<(Arc<CmAgent>, CommId)> {
        let st = self.lock();
        match (&st.agent, st.comm) {
            (Some(a), Some(c)) => Ok((a.clone(), c)),
            _ => Err(CmApiError::NotReady("connect or a ConnectRequest")),
        }
    }

    /// `rdma_accept` on the ID of a `ConnectRequest`: the QP goes to RTR
    /// and RTS with what the REQ and our REP settle, then the REP is sent;
    /// `Established` follows the RTU.
    pub fn accept(&self, p: &ConnParam) -> Result<()> {
        let (agent, comm) = self.conn()?;
        let qp = self.qp();
        let qpn = qp.as_ref().map_or(p.qp_num, |q| q.qp_num());
        if self.0.ps == PortSpace::Udp {
            // UD: the SIDR_REP with our QPN and Q_Key; nothing follows on
            // this side (librdmacm reports no Established for it).
            let reply = SidrReply {
                status: SidrStatus::Success,
                qpn,
                qkey: RDMA_UDP_QKEY,
                private_data: p.private_data.clone(),
            };
            agent.with(|st, now| st.ep.sidr_reply(now, comm, reply))?;
            return Ok(());
        }
        let mut ap = AcceptParams::new(qpn, starting_psn(qpn));
        ap.responder_resources = p.responder_resources;
        ap.initiator_depth = p.initiator_depth;
        ap.rnr_retry_count = p.rnr_retry_count;
        ap.srq = p.srq;
        ap.private_data = p.private_data.clone();
        let dev = agent.dev.clone();
        agent.with(|st, now| {
            st.ep.accept(now, comm, ap)?;
            let Some(qp) = &qp else {
                // The consumer brings its QP up itself (rdma_init_qp_attr).
                return Ok(());
            };
            let attrs = self.adjust(st.ep.qp_attrs(comm)?);
            // The REP is queued, not sent: the QP is ready before the
            // peer can send to it.
            if let Err(e) = bring_up(&dev, qp, &attrs) {
                let _ = st.ep.reject(now, comm, RejectReason::ConsumerDefined, &[]);
                return Err(e);
            }
            Ok(())
        })
    }

    /// `rdma_reject` on the ID of a `ConnectRequest` (REJ reason 28,
    /// consumer defined, as librdmacm sends).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let (agent, comm) = self.conn()?;
        if self.0.ps == PortSpace::Udp {
            let reply = SidrReply {
                status: SidrStatus::Rejected,
                qpn: 0,
                qkey: 0,
                private_data: private_data.to_vec(),
            };
            agent.with(|st, now| st.ep.sidr_reply(now, comm, reply))?;
            return Ok(());
        }
        agent.with(|st, now| {
            st.ep
                .reject(now, comm, RejectReason::ConsumerDefined, private_data)
        })?;
        Ok(())
    }

    /// `rdma_establish`: the RTU for a `ConnectResponse` (an ID without a QP).
    pub fn establish(&self) -> Result<()> {
        let (agent, comm) = self.conn()?;
        agent.with(|st, _| st.ep.send_rtu(comm, &[]))?;
        Ok(())
    }

    /// The attributes the REQ and REP settled (`rdma_init_qp_attr`), for
    /// a consumer that brings its own QP up.
    pub fn qp_attrs(&self) -> Result<QpAttrs> {
        let (agent, comm) = self.conn()?;
        Ok(self.adjust(agent.with(|st, _| st.ep.qp_attrs(comm))?))
    }

    /// `rdma_disconnect`: the QP goes to Error (its work flushes) and a
    /// DREQ goes out; `Disconnected` follows the DREP.
    pub fn disconnect(&self) -> Result<()> {
        let (agent, comm) = self.conn()?;
        if let Some(qp) = self.qp() {
            let _ = qp.modify(&QpAttr {
                qp_state: Some(QpState::Error),
                ..QpAttr::default()
            });
        }
        agent.with(|st, now| st.ep.disconnect(now, comm, &[]))?;
        Ok(())
    }

    /// `rdma_destroy_id`: stops listening, and the ID hears no more events
    /// (a connection still up is disconnected first).
    pub fn destroy(&self) -> Result<()> {
        self.leave_all_multicast();
        let (agent, comm, listening, listen_agents) = {
            let mut st = self.lock();
            (
                st.agent.clone(),
                st.comm.take(),
                st.listening.take(),
                std::mem::take(&mut st.listen_agents),
            )
        };
        if let Some(sid) = listening {
            for a in &listen_agents {
                unlisten(a, sid);
            }
        }
        if let (Some(agent), Some(c)) = (agent, comm) {
            agent.with(|st, now| {
                let _ = st.ep.disconnect(now, c, &[]);
                st.conns.remove(&c);
            });
        }
        Ok(())
    }
}
