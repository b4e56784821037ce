//! Completion queues (`ibv_create_cq`, `ibv_destroy_cq`, and the
//! `poll_cq`/`req_notify_cq` slots of the context ops that verbs.h's inline
//! functions call).

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rxe_verbs::{NotifyKind, WorkCompletion};
use rxe_verbs_abi::*;

use crate::async_events::{Element, EventCount};
use crate::channel::{Channel, ChannelShared};
use crate::context::Context;
use crate::errno::{errno_of, set_errno};
use crate::handles::{self, Kind};

/// Every CQ is an `ibv_cq_ex` (the `ibv_start_poll` interface works on
/// any of them; `ibv_create_cq_ex` is the way to ask for it).
#[repr(C)]
pub struct Cq {
    pub cq: ibv_cq,
    pub ex: CqExTail,
    /// The completion `ibv_start_poll`/`ibv_next_poll` last took.
    pub current: std::sync::Mutex<ibv_wc>,
    pub inner: rxe_verbs::Cq,
    pub ctx: &'static Context,
    channel: Option<(&'static Channel, Arc<ChannelShared>)>,
    pub comp: EventCount,
    pub async_ev: EventCount,
}

impl Cq {
    pub fn from_ibv(p: *const ibv_cq) -> Option<&'static Cq> {
        // SAFETY: a live Cq of ours; ibv_cq is its first field.
        handles::is(p, Kind::Cq).then(|| unsafe { &*p.cast::<Cq>() })
    }
}

/// A completion event of the CQ at `p` was handed out: count it; returns
/// its `cq_context`.
pub fn comp_event_delivered(p: usize) -> Option<*mut c_void> {
    let cq = Cq::from_ibv(p as *const ibv_cq)?;
    cq.comp.delivered();
    Some(cq.cq.cq_context)
}

pub fn async_event_delivered(p: usize) {
    if let Some(cq) = Cq::from_ibv(p as *const ibv_cq) {
        cq.async_ev.delivered();
    }
}

pub fn async_event_acked(p: usize) {
    if let Some(cq) = Cq::from_ibv(p as *const ibv_cq) {
        cq.async_ev.acked(1);
    }
}

export! {"IBVERBS_1.1" fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq, fail = std::ptr::null_mut(), {
    create(context, cqe, cq_context, channel, comp_vector)
}}

/// `ibv_create_cq` (also behind `ibv_create_cq_ex`): NULL and errno on
/// failure.
pub(crate) fn create(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let fail = |e: c_int| {
        set_errno(e);
        std::ptr::null_mut()
    };
    let Some(ctx) = Context::from_ibv(context) else {
        return fail(libc::EINVAL);
    };
    if cqe <= 0 || comp_vector < 0 || comp_vector >= ctx.vctx.context.num_comp_vectors {
        return fail(libc::EINVAL);
    }
    let ch = if channel.is_null() {
        None
    } else {
        match Channel::from_ibv(channel) {
            Some(c) => Some((c, c.shared.clone())),
            None => return fail(libc::EINVAL),
        }
    };
    let dev = match ctx.device() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let inner = match dev.create_cq(cqe as u32) {
        Ok(c) => c,
        Err(e) => return fail(errno_of(&e)),
    };
    let id = inner.id();
    let p = Box::into_raw(Box::new(Cq {
        cq: ibv_cq {
            context,
            channel,
            cq_context,
            handle: id,
            cqe,
            mutex: pthread_mutex_opaque([0; 40]),
            cond: pthread_cond_opaque([0; 48]),
            comp_events_completed: 0,
            async_events_completed: 0,
        },
        ex: CqExTail {
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            ops: crate::cq_ex::ops(),
        },
        current: std::sync::Mutex::new(ibv_wc::default()),
        inner,
        ctx,
        channel: ch,
        comp: EventCount::default(),
        async_ev: EventCount::default(),
    }));
    // SAFETY: just allocated.
    let cq = unsafe { &*p };
    if let Some((c, shared)) = &cq.channel {
        c.add_user(1);
        shared.add_device(dev.clone());
        let shared = shared.clone();
        let at = p as usize;
        cq.inner
            .set_event_hook(Some(Arc::new(move || shared.push(at))));
    }
    ctx.events.add(Element::Cq, id, p as usize);
    handles::insert(p, Kind::Cq);
    p.cast()
}

export! {"IBVERBS_1.1" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int, fail = libc::EIO, {
    let Some(c) = Cq::from_ibv(cq) else { return libc::EINVAL };
    if let Err(e) = c.inner.destroy() {
        return crate::errno::fail(&e);
    }
    handles::remove(cq, Kind::Cq);
    c.inner.set_event_hook(None);
    c.ctx.events.remove(Element::Cq, c.inner.id(), cq as usize);
    if let Some((ch, shared)) = &c.channel {
        shared.purge(cq as usize);
        shared.remove_device(&c.inner.device());
        ch.add_user(-1);
    }
    // rdma-core waits until every event handed out is acknowledged.
    c.comp.wait_all_acked();
    c.async_ev.wait_all_acked();
    // SAFETY: Box::into_raw'd by ibv_create_cq, no longer a live handle.
    drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
    0
}}

export! {"IBVERBS_1.1" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) -> (), fail = (), {
    if let Some(c) = Cq::from_ibv(cq) {
        c.comp.acked(nevents.into());
    }
}}

export! {"IBVERBS_1.1" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int, fail = libc::EIO, {
    let _ = (cq, cqe);
    libc::EOPNOTSUPP
}}

thread_local! {
    static SCRATCH: RefCell<Vec<WorkCompletion>> = const { RefCell::new(Vec::new()) };
}

callback! {fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int, fail = -1, {
    let Some(c) = Cq::from_ibv(cq) else { return -1 };
    if num_entries <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -1;
    }
    SCRATCH.with(|s| {
        let mut v = s.borrow_mut();
        v.clear();
        match c.inner.poll_into(num_entries as usize, &mut v) {
            Ok(n) => {
                for (i, w) in v.iter().enumerate() {
                    // SAFETY: the caller's array has num_entries entries
                    // and n <= num_entries.
                    unsafe { wc.add(i).write(crate::conv::wc_to_c(w)) };
                }
                n as c_int
            }
            Err(_) => -1,
        }
    })
}}

callback! {fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int, fail = libc::EIO, {
    let Some(c) = Cq::from_ibv(cq) else { return libc::EINVAL };
    let kind = if solicited_only != 0 { NotifyKind::SolicitedOnly } else { NotifyKind::NextCompletion };
    match c.inner.req_notify(kind) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}}
