//! `struct rdma_cm_id` and its calls: `rdma_create_id`, `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_listen`,
//! `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`,
//! `rdma_establish`, `rdma_migrate_id`, `rdma_set_option`,
//! `rdma_destroy_id`, and the ports.
//!
//! The C struct sits first in a [`CId`] beside the Rust [`CmId`] it
//! mirrors; its fields (`verbs`, `pd`, `route`, `qp`...) are written
//! whenever a call or an event changes what they say. An ID created
//! without a channel is synchronous, as in librdmacm: it gets a channel of
//! its own and each call waits for its event ([`CId::complete`]).
//!
//! An ID is freed when it is destroyed and every event that names it has
//! been acked, so an event a program still holds never points at freed
//! memory.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use rxe_verbs::cm::{CmId, ConnParam, PortSpace};
use rxe_verbs::Gid;
use rxe_verbs_abi::consts::{IBV_QPT_RC, IBV_QPT_UD};
use rxe_verbs_abi::kern::ibv_sa_path_rec;
use rxe_verbs_abi::rdmacm::*;
use rxe_verbs_abi::{ibv_comp_channel, ibv_cq};

use super::channel::CChannel;
use super::{devices, fail, fail_cm, ret, sockaddr};
use crate::handles::{self, Kind};

/// What the C side keeps about an ID beside the Rust one.
#[derive(Default)]
pub struct IdLocal {
    /// Events handed out that name this ID and are not acked yet.
    outstanding: u32,
    destroyed: bool,
    /// The channel of a synchronous ID, freed with it.
    own_channel: Option<usize>,
    /// `rdma_create_qp` made the CQs (and their channels): destroyed with
    /// the ID.
    pub made_cqs: bool,
    /// A passive `rdma_create_ep`'s QP attributes and PD: each request's
    /// ID gets a QP made with them.
    pub ep_qp: Option<super::ep::EpQp>,
    /// The `context` of each multicast join, by group, for its event.
    pub mcast_contexts: Vec<(std::net::IpAddr, usize)>,
}

#[repr(C)]
pub struct CId {
    id: UnsafeCell<rdma_cm_id>,
    pub inner: CmId,
    path: UnsafeCell<ibv_sa_path_rec>,
    pub local: Mutex<IdLocal>,
    /// Signalled at each ack of an event naming the ID.
    acked: Condvar,
}

/// How long `rdma_destroy_id` waits for the ID's events to be acked.
const ACK_WAIT: Duration = Duration::from_secs(2);

/// The live IDs by [`CmId::key`], to find the C side of a Rust event.
static BY_KEY: LazyLock<Mutex<HashMap<usize, usize>>> = LazyLock::new(Mutex::default);

fn qp_type_for(ps: u32) -> Option<u32> {
    match ps {
        RDMA_PS_TCP => Some(IBV_QPT_RC),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Some(IBV_QPT_UD),
        _ => None,
    }
}

impl CId {
    pub fn from_c(p: *const rdma_cm_id) -> Option<&'static CId> {
        // SAFETY: a live ID of ours; rdma_cm_id is its first field.
        handles::is(p, Kind::CmId).then(|| unsafe { &*p.cast::<CId>() })
    }

    /// The C struct (written only by this library's calls, on the
    /// program's threads, as librdmacm does).
    pub fn c(&self) -> *mut rdma_cm_id {
        self.id.get()
    }

    /// The C side of a Rust ID, while it lives.
    pub fn of(inner: &CmId) -> Option<&'static CId> {
        let p = *BY_KEY
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&inner.key())?;
        CId::from_c(p as *const rdma_cm_id)
    }

    fn create(
        inner: CmId,
        channel: *mut rdma_event_channel,
        own_channel: Option<usize>,
        context: *mut c_void,
        ps: u32,
        qp_type: u32,
    ) -> &'static CId {
        let key = inner.key();
        let p = Box::into_raw(Box::new(CId {
            id: UnsafeCell::new(rdma_cm_id {
                verbs: std::ptr::null_mut(),
                channel,
                context,
                qp: std::ptr::null_mut(),
                route: rdma_route {
                    addr: rdma_addr::default(),
                    path_rec: std::ptr::null_mut(),
                    num_paths: 0,
                },
                ps,
                port_num: 0,
                event: std::ptr::null_mut(),
                send_cq_channel: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq_channel: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                pd: std::ptr::null_mut(),
                qp_type,
            }),
            inner,
            path: UnsafeCell::new(ibv_sa_path_rec::default()),
            local: Mutex::new(IdLocal {
                own_channel,
                ..IdLocal::default()
            }),
            acked: Condvar::new(),
        }));
        handles::insert(p, Kind::CmId);
        BY_KEY
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, p as usize);
        // SAFETY: just made, freed only by `free`.
        let id = unsafe { &*p };
        id.refresh();
        id
    }

    /// The ID of a ConnectRequest, on the listener's channel (or, for a
    /// synchronous listener, synchronous itself with its own channel),
    /// with the listener's context.
    pub fn new_child(child: CmId, listener: &CId) -> Option<&'static CId> {
        // SAFETY: the listener's own C struct.
        let l = unsafe { &*listener.c() };
        let (channel, own) = if listener.is_sync() {
            let ch = CChannel::create().ok()?;
            // SAFETY: just made.
            child.migrate(unsafe { &(*ch).inner });
            // SAFETY: as above.
            (unsafe { (*ch).c() }, Some(ch as usize))
        } else {
            (l.channel, None)
        };
        Some(CId::create(child, channel, own, l.context, l.ps, l.qp_type))
    }

    pub fn is_sync(&self) -> bool {
        self.lock().own_channel.is_some()
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, IdLocal> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ID's channel, from its C field (`rdma_migrate_id` changes it).
    pub fn channel(&self) -> Option<&'static CChannel> {
        // SAFETY: our own C struct.
        CChannel::from_c(unsafe { (*self.c()).channel })
    }

    /// Writes the C fields from the Rust ID: device, PD, addresses, GIDs,
    /// path.
    pub fn refresh(&self) {
        let c = self.c();
        // SAFETY: our own C struct; the program reads it, only this
        // library's calls write it.
        let id = unsafe { &mut *c };
        if let Some(dev) = self.inner.device() {
            if let Some(ctx) = devices::context_for(&dev) {
                id.verbs = ctx;
                id.port_num = rxe_verbs::PORT;
                if id.pd.is_null() {
                    id.pd = devices::pd_for(&dev).unwrap_or(std::ptr::null_mut());
                }
            }
        }
        let src = self.inner.local_addr();
        let dst = self.inner.remote_addr();
        if let Some(s) = src {
            id.route.addr.src = sockaddr::storage(&s);
            id.route.addr.ibaddr.sgid = Gid::from(s.ip()).into();
        }
        if let Some(d) = dst {
            id.route.addr.dst = sockaddr::storage(&d);
            id.route.addr.ibaddr.dgid = Gid::from(d.ip()).into();
        }
        id.route.addr.ibaddr.pkey = 0xffffu16.to_be();
        if let (Some(r), Some(d)) = (self.inner.route(), dst) {
            // SAFETY: our own path record, pointed to by `route.path_rec`.
            let path = unsafe { &mut *self.path.get() };
            *path = ibv_sa_path_rec {
                dgid: Gid::from(d.ip()).into(),
                sgid: src.map_or(Gid::ZERO, |s| Gid::from(s.ip())).into(),
                hop_limit: r.hop_limit,
                traffic_class: r.traffic_class,
                reversible: 1,
                numb_path: 1,
                pkey: 0xffffu16.to_be(),
                // "Exactly" this MTU (IBTA 15.2.5.16 selector 2).
                mtu_selector: 2,
                mtu: r.path_mtu as u8 + 1,
                ..ibv_sa_path_rec::default()
            };
            id.route.path_rec = path;
            id.route.num_paths = 1;
        }
    }

    /// An event naming this ID was handed out.
    pub fn hold(&self) {
        self.lock().outstanding += 1;
    }

    /// An event naming the ID at `p` was acked: the ID is freed if it was
    /// destroyed and this was its last.
    ///
    /// # Safety
    /// `p` is an ID this library made and has not freed (an outstanding
    /// event keeps it).
    pub unsafe fn release(p: *const CId) {
        // SAFETY: kept alive by the event being acked.
        let id = unsafe { &*p };
        let free = {
            let mut l = id.lock();
            l.outstanding = l.outstanding.saturating_sub(1);
            id.acked.notify_all();
            l.destroyed && l.outstanding == 0
        };
        if free {
            // SAFETY: destroyed and no event names it any more.
            unsafe { CId::free(p.cast_mut()) };
        }
    }

    /// # Safety
    /// `p` is destroyed (out of the tables) and nothing names it.
    unsafe fn free(p: *mut CId) {
        // SAFETY: Box::into_raw'd by `create`.
        let id = unsafe { Box::from_raw(p) };
        let own = id.lock().own_channel.take();
        if let Some(ch) = own {
            // SAFETY: the ID's own channel, made for it.
            unsafe { CChannel::destroy(ch as *mut CChannel) };
        }
    }

    /// A synchronous ID's wait for the event of its last call: the event
    /// is kept in `id->event` (the previous one acked), and an error event
    /// becomes the errno librdmacm gives.
    pub fn complete(&self) -> Result<(), c_int> {
        let ch = self.channel().ok_or(libc::EINVAL)?;
        self.ack_kept_event();
        let e = ch.next()?;
        // SAFETY: our own C struct; `e` is a live event.
        unsafe { (*self.c()).event = e };
        // SAFETY: just handed to us.
        let ev = unsafe { &*e };
        match ev.event {
            event::REJECTED => Err(libc::ECONNREFUSED),
            event::ADDR_ERROR
            | event::ROUTE_ERROR
            | event::CONNECT_ERROR
            | event::UNREACHABLE
            | event::DEVICE_REMOVAL => Err(if ev.status < 0 {
                -ev.status
            } else {
                libc::ETIMEDOUT
            }),
            _ if ev.status != 0 => Err(ev.status.abs()),
            _ => Ok(()),
        }
    }

    /// Acks the event a synchronous call left in `id->event`.
    pub fn ack_kept_event(&self) {
        // SAFETY: our own C struct.
        let e = unsafe { std::mem::replace(&mut (*self.c()).event, std::ptr::null_mut()) };
        if !e.is_null() {
            // SAFETY: an event of ours not acked yet.
            unsafe { super::channel::rdma_ack_cm_event(e) };
        }
    }

    /// Waits for the call's event if the ID is synchronous.
    pub fn finish(&self) -> Result<(), c_int> {
        if self.is_sync() {
            self.complete()
        } else {
            Ok(())
        }
    }
}

/// `rdma_create_id`, or the errno.
pub fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
) -> Result<&'static CId, c_int> {
    let qp_type = qp_type_for(ps).ok_or(libc::EINVAL)?;
    let port_space = PortSpace::from_code(ps as u16);
    let (ch, own) = if channel.is_null() {
        let ch = CChannel::create()?;
        // SAFETY: just made.
        (unsafe { &*ch }, Some(ch as usize))
    } else {
        (CChannel::from_c(channel).ok_or(libc::EINVAL)?, None)
    };
    let inner = match CmId::new(&ch.inner, port_space) {
        Ok(i) => i,
        Err(e) => {
            if let Some(p) = own {
                // SAFETY: made above, unused.
                unsafe { CChannel::destroy(p as *mut CChannel) };
            }
            return Err(super::errno_of(&e));
        }
    };
    Ok(CId::create(inner, ch.c(), own, context, ps, qp_type))
}

export! {"RDMACM_1.0" fn rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: u32) -> c_int, fail = -1, {
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    match create_id(channel, context, ps) {
        Ok(c) => {
            // SAFETY: the caller's out pointer.
            unsafe { *id = c.c() };
            0
        }
        Err(e) => fail(e),
    }
}}

/// Destroys the CQs and channels `rdma_create_qp` made for the ID.
pub(crate) fn destroy_made_cqs(c: &CId) {
    // SAFETY: our own C struct.
    let id = unsafe { &mut *c.c() };
    let cqs: [(*mut ibv_cq, *mut ibv_comp_channel); 2] = [
        (id.send_cq, id.send_cq_channel),
        (id.recv_cq, id.recv_cq_channel),
    ];
    for (cq, ch) in cqs {
        if !cq.is_null() {
            // SAFETY: a CQ of ours this library made.
            unsafe { crate::cq::ibv_destroy_cq(cq) };
        }
        if !ch.is_null() {
            // SAFETY: its channel, now unused.
            unsafe { crate::channel::ibv_destroy_comp_channel(ch) };
        }
    }
    id.send_cq = std::ptr::null_mut();
    id.recv_cq = std::ptr::null_mut();
    id.send_cq_channel = std::ptr::null_mut();
    id.recv_cq_channel = std::ptr::null_mut();
}

/// `rdma_destroy_id` (also `rdma_destroy_ep`'s last step).
pub fn destroy(c: &'static CId) {
    let _ = c.inner.destroy();
    c.ack_kept_event();
    // As librdmacm's, wait until the events handed out for the ID are
    // acked: a program whose event thread is still handling one (rping's
    // cm_thread, with DISCONNECTED) is then back in rdma_get_cm_event
    // before the program goes on to destroy the channel. Bounded, where
    // librdmacm waits for ever: after ACK_WAIT the ID is freed at its last
    // ack instead.
    {
        let deadline = Instant::now() + ACK_WAIT;
        let mut l = c.lock();
        while l.outstanding > 0 {
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(
                    events = l.outstanding,
                    "rdma_destroy_id: events not acked, going on"
                );
                break;
            }
            l = c
                .acked
                .wait_timeout(l, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    if std::mem::take(&mut c.lock().made_cqs) {
        destroy_made_cqs(c);
    }
    handles::remove(c.c(), Kind::CmId);
    BY_KEY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&c.inner.key());
    let free = {
        let mut l = c.lock();
        l.destroyed = true;
        l.outstanding == 0
    };
    if free {
        // SAFETY: out of the tables, and no event names it.
        unsafe { CId::free(c as *const CId as *mut CId) };
    }
}

export! {"RDMACM_1.0" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    destroy(c);
    0
}}

export! {"RDMACM_1.0" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut c_void) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    // SAFETY: the caller's socket address.
    let a = match unsafe { sockaddr::read(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    match c.inner.bind_addr(a) {
        Ok(()) => {
            c.refresh();
            0
        }
        Err(e) => fail_cm(&e),
    }
}}

/// `rdma_resolve_addr`, or the errno.
///
/// # Safety
/// `src` is NULL or a socket address, `dst` a socket address.
pub unsafe fn resolve_addr(
    c: &CId,
    src: *const c_void,
    dst: *const c_void,
    timeout_ms: c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller's socket addresses (src may be NULL).
    let src = if src.is_null() {
        None
    } else {
        Some(unsafe { sockaddr::read(src) }?)
    };
    // SAFETY: as above.
    let dst = unsafe { sockaddr::read(dst) }?;
    let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
    c.inner
        .resolve_addr(src, dst, timeout)
        .map_err(|e| super::errno_of(&e))?;
    c.refresh();
    c.finish()
}

export! {"RDMACM_1.0" fn rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut c_void, dst_addr: *mut c_void, timeout_ms: c_int) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    // SAFETY: the caller's socket addresses.
    ret(unsafe { resolve_addr(c, src_addr, dst_addr, timeout_ms) })
}}

/// `rdma_resolve_route`, or the errno.
pub fn resolve_route(c: &CId, timeout_ms: c_int) -> Result<(), c_int> {
    c.inner
        .resolve_route(Duration::from_millis(timeout_ms.max(0) as u64))
        .map_err(|e| super::errno_of(&e))?;
    c.refresh();
    c.finish()
}

export! {"RDMACM_1.0" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    ret(resolve_route(c, timeout_ms))
}}

export! {"RDMACM_1.0" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    match c.inner.listen(backlog) {
        Ok(()) => 0,
        Err(e) => fail_cm(&e),
    }
}}

/// A C `rdma_conn_param` (NULL: librdmacm's defaults) as the Rust one,
/// the counts clamped to what the device has (`RDMA_MAX_RESP_RES` and
/// `RDMA_MAX_INIT_DEPTH` ask for that much).
fn conn_param(c: &CId, p: *const rdma_conn_param) -> Result<ConnParam, c_int> {
    let max = c
        .inner
        .device()
        .and_then(|d| d.query_device().ok())
        .map_or(1, |a| a.max_qp_rd_atom);
    if p.is_null() {
        return Ok(ConnParam {
            responder_resources: max,
            initiator_depth: max,
            ..ConnParam::default()
        });
    }
    // SAFETY: the caller's parameters.
    let p = unsafe { &*p };
    let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's private data, of the length it gives.
        unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), usize::from(p.private_data_len))
        }
        .to_vec()
    };
    Ok(ConnParam {
        private_data,
        responder_resources: p.responder_resources.min(max),
        initiator_depth: p.initiator_depth.min(max),
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        qp_num: p.qp_num & 0xff_ffff,
        srq: p.srq != 0,
    })
}

/// `rdma_connect`, or the errno.
pub fn connect(c: &CId, p: *const rdma_conn_param) -> Result<(), c_int> {
    let cp = conn_param(c, p)?;
    c.inner.connect(&cp).map_err(|e| super::errno_of(&e))?;
    c.finish()
}

export! {"RDMACM_1.0" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    ret(connect(c, conn_param))
}}

/// `rdma_accept`, or the errno.
pub fn accept(c: &CId, p: *const rdma_conn_param) -> Result<(), c_int> {
    let cp = conn_param(c, p)?;
    c.inner.accept(&cp).map_err(|e| super::errno_of(&e))?;
    c.finish()
}

export! {"RDMACM_1.0" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    ret(accept(c, conn_param))
}}

export! {"RDMACM_1.0" fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    let data = if private_data.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller's private data, of the length it gives.
        unsafe { std::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(private_data_len)) }
    };
    match c.inner.reject(data) {
        Ok(()) => 0,
        Err(e) => fail_cm(&e),
    }
}}

export! {"RDMACM_1.0" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    match c.inner.disconnect() {
        Ok(()) => 0,
        Err(e) => fail_cm(&e),
    }
}}

export! {"RDMACM_1.2" fn rdma_establish(id: *mut rdma_cm_id) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    match c.inner.establish() {
        Ok(()) => 0,
        Err(e) => fail_cm(&e),
    }
}}

export! {"RDMACM_1.0" fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> c_int, fail = -1, {
    // The QP's "communication established" (IBV_EVENT_COMM_EST, 6): data
    // came before the RTU; the CM's own RTU handling is what moves the
    // connection on, so there is nothing more to do.
    let _ = event;
    if CId::from_c(id).is_none() {
        return fail(libc::EINVAL);
    }
    0
}}

export! {"RDMACM_1.0" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    let (ch, own) = if channel.is_null() {
        match CChannel::create() {
            // SAFETY: just made.
            Ok(p) => (unsafe { &*p }, Some(p as usize)),
            Err(e) => return fail(e),
        }
    } else {
        match CChannel::from_c(channel) {
            Some(ch) => (ch, None),
            None => return fail(libc::EINVAL),
        }
    };
    c.ack_kept_event();
    c.inner.migrate(&ch.inner);
    // SAFETY: our own C struct.
    unsafe { (*c.c()).channel = ch.c() };
    let old = std::mem::replace(&mut c.lock().own_channel, own);
    if let Some(p) = old {
        // SAFETY: the ID's former own channel, no longer named.
        unsafe { CChannel::destroy(p as *mut CChannel) };
    }
    0
}}

export! {"RDMACM_1.0" fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    if optval.is_null() {
        return fail(libc::EINVAL);
    }
    match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen == 1 => {
            // SAFETY: one byte, as the length says.
            c.inner.set_tos(unsafe { *optval.cast::<u8>() });
            c.refresh();
            0
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => {
            // SAFETY: one byte, as the length says.
            c.inner.set_ack_timeout(unsafe { *optval.cast::<u8>() });
            0
        }
        // Port reuse and address-family binding: the ID's port is its
        // ServiceID, and a wildcard listener hears both families; there is
        // nothing to change, but the value must be an int.
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY)
            if optlen == std::mem::size_of::<c_int>() => 0,
        (
            RDMA_OPTION_ID,
            RDMA_OPTION_ID_TOS
            | RDMA_OPTION_ID_REUSEADDR
            | RDMA_OPTION_ID_AFONLY
            | RDMA_OPTION_ID_ACK_TIMEOUT,
        ) => {
            fail(libc::EINVAL)
        }
        // IB path records: RoCEv2 resolves none.
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => fail(libc::EOPNOTSUPP),
        _ => fail(libc::ENOSYS),
    }
}}

fn port_of(a: Option<SocketAddr>) -> u16 {
    a.map_or(0, |a| a.port()).to_be()
}

export! {"RDMACM_1.0" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16, fail = 0, {
    CId::from_c(id).map_or(0, |c| port_of(c.inner.local_addr()))
}}

export! {"RDMACM_1.0" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16, fail = 0, {
    CId::from_c(id).map_or(0, |c| port_of(c.inner.remote_addr()))
}}
