//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_destroy_qp`, and the `post_send`/`post_recv` slots of the context
//! ops.

use std::ffi::{c_int, c_void};

use rxe_verbs::{Gid, InlineData, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::*;

use crate::async_events::{Element, EventCount};
use crate::conv::{self, CSendWr};
use crate::cq::Cq;
use crate::errno::{errno_of, fail, set_errno};
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::srq::Srq;

/// Most SGEs a work request may name (rxe's device limit); larger lists
/// are refused before anything is read.
const MAX_SGE: c_int = 32;

#[repr(C)]
pub struct Qp {
    pub qpx: ibv_qp_ex,
    pub inner: rxe_verbs::Qp,
    pub pd: &'static Pd,
    pub events: EventCount,
    /// Created with send ops flags: the `ibv_wr_*` interface is on.
    pub ex: bool,
    /// The `ibv_wr_*` batch being built (between wr_start and
    /// wr_complete/wr_abort).
    pub batch: std::sync::Mutex<crate::qp_ex::Batch>,
}

impl Qp {
    pub fn from_ibv(p: *const ibv_qp) -> Option<&'static Qp> {
        // SAFETY: a live Qp of ours; ibv_qp is the first field of its
        // first field.
        handles::is(p, Kind::Qp).then(|| unsafe { &*p.cast::<Qp>() })
    }

    pub(crate) fn set_state(&self, state: u32) {
        let p = &self.qpx.qp_base.state as *const u32 as *mut u32;
        // SAFETY: our own live struct's field; C reads it (as rdma-core's
        // ibv_modify_qp keeps it current).
        unsafe { p.write_volatile(state) };
    }
}

pub fn event_delivered(p: usize) {
    if let Some(q) = Qp::from_ibv(p as *const ibv_qp) {
        q.events.delivered();
    }
}

pub fn event_acked(p: usize) {
    if let Some(q) = Qp::from_ibv(p as *const ibv_qp) {
        q.events.acked(1);
    }
}

fn qp_type_of(t: u32) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        // Raw packet, XRC, driver QPs: not an rxe QP.
        _ => Err(libc::EOPNOTSUPP),
    }
}

pub(crate) fn create(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
    ex: bool,
) -> Result<*mut ibv_qp, c_int> {
    let p = Pd::from_ibv(pd).ok_or(libc::EINVAL)?;
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's init attributes.
    let a = unsafe { &mut *attr };
    let send_cq = Cq::from_ibv(a.send_cq).ok_or(libc::EINVAL)?;
    let recv_cq = Cq::from_ibv(a.recv_cq).ok_or(libc::EINVAL)?;
    let srq = if a.srq.is_null() {
        None
    } else {
        Some(Srq::from_ibv(a.srq).ok_or(libc::EINVAL)?)
    };
    let qp_type = qp_type_of(a.qp_type)?;
    let cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { a.cap.max_recv_wr },
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    let inner = p
        .inner
        .create_qp(&QpInitAttr {
            qp_type,
            send_cq: &send_cq.inner,
            recv_cq: &recv_cq.inner,
            srq: srq.map(|s| &s.inner),
            cap,
            sq_sig_all: a.sq_sig_all != 0,
        })
        .map_err(|e| errno_of(&e))?;
    // The caps the QP really has (max_inline_data may be larger), as the
    // provider writes them back.
    if let Ok(info) = inner.query() {
        a.cap = conv::cap_to_c(&info.cap);
    }
    let qpn = inner.qp_num();
    let q = Box::into_raw(Box::new(Qp {
        qpx: ibv_qp_ex {
            qp_base: ibv_qp {
                context: p.pd.context,
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle: qpn,
                qp_num: qpn,
                state: IBV_QPS_RESET,
                qp_type: a.qp_type,
                mutex: pthread_mutex_opaque([0; 40]),
                cond: pthread_cond_opaque([0; 48]),
                events_completed: 0,
            },
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            ops: if ex {
                crate::qp_ex::ops()
            } else {
                [std::ptr::null_mut(); 22]
            },
        },
        inner,
        pd: p,
        events: EventCount::default(),
        ex,
        batch: std::sync::Mutex::default(),
    }));
    p.ctx.events.add(Element::Qp, qpn, q as usize);
    handles::insert(q, Kind::Qp);
    Ok(q.cast())
}

export! {"IBVERBS_1.1" fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp, fail = std::ptr::null_mut(), {
    create(pd, qp_init_attr, false).unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}}

export! {"IBVERBS_1.1" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int, fail = libc::EIO, {
    let Some(q) = Qp::from_ibv(qp) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    let (qa, mask) = match conv::qp_attr_from_c(a, attr_mask as u32) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Err(e) = q.inner.modify_mask(&qa, mask) {
        return errno_of(&e);
    }
    if attr_mask as u32 & IBV_QP_STATE != 0 {
        q.set_state(a.qp_state);
    }
    0
}}

export! {"IBVERBS_1.1" fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int, fail = libc::EIO, {
    let _ = attr_mask;
    let Some(q) = Qp::from_ibv(qp) else { return libc::EINVAL };
    if attr.is_null() || init_attr.is_null() {
        return libc::EINVAL;
    }
    let info = match q.inner.query() {
        Ok(i) => i,
        Err(e) => return errno_of(&e),
    };
    let c = conv::qp_attr_to_c(&info);
    q.set_state(c.qp_state);
    let b = &q.qpx.qp_base;
    // SAFETY: the caller's out structs.
    unsafe {
        attr.write(c);
        init_attr.write(ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: conv::cap_to_c(&info.cap),
            qp_type: b.qp_type,
            sq_sig_all: info.sq_sig_all.into(),
        });
    }
    0
}}

export! {"IBVERBS_1.1" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int, fail = libc::EIO, {
    let Some(q) = Qp::from_ibv(qp) else { return libc::EINVAL };
    if let Err(e) = q.inner.destroy() {
        return errno_of(&e);
    }
    handles::remove(qp, Kind::Qp);
    q.pd.ctx.events.remove(Element::Qp, q.inner.qp_num(), qp as usize);
    // As rdma-core: wait until every async event handed out is acked.
    q.events.wait_all_acked();
    // SAFETY: Box::into_raw'd by create, no longer a live handle.
    drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
    0
}}

export! {"IBVERBS_1.1" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const [u8; 16], lid: u16) -> c_int, fail = libc::EIO, {
    // The MLID names nothing on RoCE (the kernel ignores it there too).
    let _ = lid;
    let Some(q) = Qp::from_ibv(qp) else { return libc::EINVAL };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's `union ibv_gid`, 16 bytes, any alignment.
    let mgid = unsafe { gid.read_unaligned() };
    match q.inner.attach_mcast(Gid::from(mgid)) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}}

export! {"IBVERBS_1.1" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const [u8; 16], lid: u16) -> c_int, fail = libc::EIO, {
    let _ = lid;
    let Some(q) = Qp::from_ibv(qp) else { return libc::EINVAL };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in ibv_attach_mcast.
    let mgid = unsafe { gid.read_unaligned() };
    match q.inner.detach_mcast(Gid::from(mgid)) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}}

export! {"IBVERBS_1.6" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex, fail = std::ptr::null_mut(), {
    // Only a QP created with send ops flags has the ibv_wr_* interface.
    match Qp::from_ibv(qp) {
        Some(q) if q.ex => qp.cast(),
        _ => {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}}

export! {"IBVERBS_1.10" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int, fail = libc::EIO, {
    let _ = (qp, ece);
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.10" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int, fail = libc::EIO, {
    let _ = (qp, ece);
    libc::EOPNOTSUPP
}}

export! {"IBVERBS_1.14" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: u32, flags: u32) -> c_int, fail = 0, {
    // 0: no in-order guarantee is promised beyond the verbs rules.
    let _ = (qp, op, flags);
    0
}}

/// The SGE list of a work request, checked.
///
/// # Safety
/// `sg_list` must point to `num_sge` entries when `num_sge > 0`.
unsafe fn sges<'a>(sg_list: *const ibv_sge, num_sge: c_int) -> Option<&'a [ibv_sge]> {
    match num_sge {
        0 => Some(&[]),
        n if !(0..=MAX_SGE).contains(&n) || sg_list.is_null() => None,
        // SAFETY: the caller's list of num_sge entries (ibv_post_send(3)).
        n => Some(unsafe { std::slice::from_raw_parts(sg_list, n as usize) }),
    }
}

/// The transport's form of one C send work request (`None`: refused, EINVAL).
///
/// # Safety
/// `cur` must point to a readable `ibv_send_wr` whose SGE list and inline
/// data are as it describes (ibv_post_send(3)).
unsafe fn send_wr_of(cur: *mut ibv_send_wr, ud: bool) -> Option<SendWr> {
    // SAFETY: the caller's request (this function's contract).
    let w = unsafe { &*cur };
    // SAFETY: its SGE list as the request describes it.
    let list = unsafe { sges(w.sg_list, w.num_sge) }?;
    let mw = (w.opcode == IBV_WR_BIND_MW).then(|| {
        // bind_mw: the ibv_mw pointer, the new rkey, then the
        // ibv_mw_bind_info (offsets 80, 88, 96).
        let b = &w.bind_mw;
        let info = ibv_mw_bind_info {
            mr: b[2] as usize as *mut ibv_mr,
            addr: b[3],
            length: b[4],
            mw_access_flags: b[5] as u32,
        };
        crate::mw::bind_of(b[0] as usize as *const ibv_mw, b[1] as u32, &info)
    });
    let c = CSendWr {
        wr_id: w.wr_id,
        opcode: w.opcode,
        send_flags: w.send_flags,
        imm_data: w.imm_data,
        wr: w.wr.0,
        sges: list,
        mw: mw.flatten(),
    };
    let inline = |s: &[ibv_sge]| {
        let mut v = InlineData::new();
        for e in s {
            // SAFETY: ibv_post_send(3): an inline SGE is readable
            // application memory at post time.
            unsafe { crate::foreign::copy_in(e.addr, e.length, &mut v) };
        }
        v
    };
    conv::send_wr_from_c(&c, ud, inline, crate::ah::av_of).ok()
}

callback! {fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int, fail = libc::EIO, {
    let set_bad = |w: *mut ibv_send_wr| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = w };
        }
    };
    let Some(q) = Qp::from_ibv(qp) else {
        set_bad(wr);
        return libc::EINVAL;
    };
    let ud = q.inner.qp_type() == QpType::Ud;
    // One request, as nearly every post is: no lists to allocate.
    // SAFETY: the caller's first work request (ibv_post_send(3)).
    if !wr.is_null() && unsafe { (*wr).next }.is_null() {
        // SAFETY: the same request.
        let Some(s) = (unsafe { send_wr_of(wr, ud) }) else {
            set_bad(wr);
            return libc::EINVAL;
        };
        return match q.inner.post_send(s) {
            Ok(()) => 0,
            Err(e) => {
                set_bad(wr);
                errno_of(&e)
            }
        };
    }
    let mut ptrs: Vec<*mut ibv_send_wr> = Vec::new();
    let mut wrs: Vec<SendWr> = Vec::new();
    let mut refused: Option<*mut ibv_send_wr> = None;
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a work request of the caller's NULL-terminated list.
        match unsafe { send_wr_of(cur, ud) } {
            Some(s) => {
                wrs.push(s);
                ptrs.push(cur);
            }
            None => {
                refused = Some(cur);
                break;
            }
        }
        // SAFETY: the same request.
        cur = unsafe { (*cur).next };
    }
    // The requests before a refused one are posted, as a provider does.
    if !wrs.is_empty() {
        if let Err((i, e)) = q.inner.post_send_list(wrs) {
            set_bad(ptrs[i]);
            return errno_of(&e);
        }
    }
    match refused {
        Some(b) => {
            set_bad(b);
            libc::EINVAL
        }
        None => 0,
    }
}}

/// Posts a list of receives with `post`, stopping at the first refused.
pub(crate) fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(RecvWr) -> Result<(), rxe_verbs::VerbsError>,
) -> c_int {
    let set_bad = |w: *mut ibv_recv_wr| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = w };
        }
    };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a request of the caller's NULL-terminated list.
        let w = unsafe { &*cur };
        // SAFETY: its SGE list as described.
        let Some(list) = (unsafe { sges(w.sg_list, w.num_sge) }) else {
            set_bad(cur);
            return libc::EINVAL;
        };
        let r = RecvWr {
            wr_id: w.wr_id,
            sg_list: list
                .iter()
                .map(|s| Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                })
                .collect(),
        };
        if let Err(e) = post(r) {
            set_bad(cur);
            return errno_of(&e);
        }
        cur = w.next;
    }
    0
}

callback! {fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int, fail = libc::EIO, {
    let Some(q) = Qp::from_ibv(qp) else {
        if !bad_wr.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = wr };
        }
        return libc::EINVAL;
    };
    post_recv_list(wr, bad_wr, |r| q.inner.post_recv(r))
}}
