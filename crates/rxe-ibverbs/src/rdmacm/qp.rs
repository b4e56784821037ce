//! The QP of an ID: `rdma_create_qp`, `rdma_create_qp_ex`,
//! `rdma_destroy_qp`, `rdma_init_qp_attr`, and the ID's SRQ
//! (`rdma_create_srq`, `rdma_destroy_srq`).
//!
//! As librdmacm: a NULL PD means the ID's (its device's shared PD); NULL
//! CQs are made for the ID, each with its own completion channel
//! (`id->send_cq`, `id->recv_cq`, rdma_server and rdma_client poll those),
//! and destroyed with the QP; the QP is taken to INIT at once, and
//! through RTR and RTS by the connection (see [`rxe_verbs::cm::CmId`]).

use std::ffi::{c_int, c_void};

use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::rdmacm::rdma_cm_id;
use rxe_verbs_abi::*;

use super::id::CId;
use super::{fail, ret};
use crate::qp::Qp;

/// CQs for the ID where the attributes name none: `send` and `recv`
/// entries (0: that one is given).
fn make_cqs(c: &CId, send: u32, recv: u32) -> Result<(), c_int> {
    // SAFETY: our own C struct.
    let id = unsafe { &mut *c.c() };
    let make = |n: u32| -> Result<(*mut ibv_cq, *mut ibv_comp_channel), c_int> {
        // SAFETY: the ID's context, a live one of ours.
        let ch = unsafe { crate::channel::ibv_create_comp_channel(id.verbs) };
        if ch.is_null() {
            return Err(crate::errno::last_errno());
        }
        let cq = crate::cq::create(id.verbs, n.max(1) as c_int, c.c().cast(), ch, 0);
        if cq.is_null() {
            let e = crate::errno::last_errno();
            // SAFETY: the channel just made, unused.
            unsafe { crate::channel::ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok((cq, ch))
    };
    if recv > 0 {
        let (cq, ch) = make(recv)?;
        id.recv_cq = cq;
        id.recv_cq_channel = ch;
        c.lock().made_cqs = true;
    }
    if send > 0 {
        let (cq, ch) = make(send)?;
        id.send_cq = cq;
        id.send_cq_channel = ch;
        c.lock().made_cqs = true;
    }
    Ok(())
}

/// `rdma_create_qp_ex`, or the errno.
pub fn create_qp_ex(c: &CId, a: &mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    // SAFETY: our own C struct.
    let id = unsafe { &mut *c.c() };
    if !id.qp.is_null() || id.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        a.pd = id.pd;
    } else if crate::pd::Pd::from_ibv(a.pd).map(|p| p.pd.context) != Some(id.verbs) {
        return Err(libc::EINVAL);
    }
    if a.pd.is_null() {
        return Err(libc::EINVAL);
    }
    if (!id.send_cq.is_null() && !a.send_cq.is_null() && id.send_cq != a.send_cq)
        || (!id.recv_cq.is_null() && !a.recv_cq.is_null() && id.recv_cq != a.recv_cq)
    {
        return Err(libc::EINVAL);
    }
    let want_send = if a.send_cq.is_null() && id.send_cq.is_null() {
        a.cap.max_send_wr
    } else {
        0
    };
    let want_recv = if a.recv_cq.is_null() && id.recv_cq.is_null() {
        a.cap.max_recv_wr
    } else {
        0
    };
    make_cqs(c, want_send, want_recv)?;
    if a.send_cq.is_null() {
        a.send_cq = id.send_cq;
    }
    if a.recv_cq.is_null() {
        a.recv_cq = id.recv_cq;
    }
    if a.srq.is_null() {
        a.srq = id.srq;
    }
    // SAFETY: the ID's context and the caller's attributes.
    let q = unsafe { crate::qp_ex::vctx_create_qp_ex(id.verbs, a) };
    let undo_cqs = |c: &CId| {
        if std::mem::take(&mut c.lock().made_cqs) {
            super::id::destroy_made_cqs(c);
        }
    };
    let Some(qp) = Qp::from_ibv(q) else {
        let e = crate::errno::last_errno();
        undo_cqs(c);
        return Err(e);
    };
    if let Err(e) = c.inner.attach_qp(&qp.inner) {
        // SAFETY: the QP just made, not handed out.
        unsafe { crate::qp::ibv_destroy_qp(q) };
        undo_cqs(c);
        return Err(super::errno_of(&e));
    }
    qp.set_state(IBV_QPS_INIT);
    id.qp = q;
    id.pd = a.pd;
    Ok(())
}

export! {"RDMACM_1.0" fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    if qp_init_attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    ret(create_qp_ex(c, unsafe { &mut *qp_init_attr }))
}}

/// `rdma_create_qp`, or the errno; the caps the QP got are written back.
pub fn create_qp(c: &CId, pd: *mut ibv_pd, a: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let mut ex = ibv_qp_init_attr_ex {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd,
        xrcd: std::ptr::null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: std::ptr::null_mut(),
        rx_hash_conf: [0; 3],
        source_qpn: 0,
        send_ops_flags: 0,
    };
    create_qp_ex(c, &mut ex)?;
    a.cap = ex.cap;
    Ok(())
}

export! {"RDMACM_1.0" fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    if qp_init_attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    ret(create_qp(c, pd, unsafe { &mut *qp_init_attr }))
}}

/// `rdma_destroy_qp`: the QP, and the CQs made for it.
pub fn destroy_qp(c: &CId) {
    // SAFETY: our own C struct.
    let id = unsafe { &mut *c.c() };
    let q = std::mem::replace(&mut id.qp, std::ptr::null_mut());
    c.inner.detach_qp();
    if !q.is_null() {
        // SAFETY: the ID's QP, made by rdma_create_qp.
        unsafe { crate::qp::ibv_destroy_qp(q) };
    }
    if std::mem::take(&mut c.lock().made_cqs) {
        super::id::destroy_made_cqs(c);
    }
}

export! {"RDMACM_1.0" fn rdma_destroy_qp(id: *mut rdma_cm_id) -> (), fail = (), {
    if let Some(c) = CId::from_c(id) {
        destroy_qp(c);
    }
}}

/// `rdma_init_qp_attr`: the attributes (and mask) that take a QP of
/// this connection to the state asked for in `qp_attr->qp_state`, for a
/// program that brings its own QP up (`rping -q`).
fn init_qp_attr(c: &CId, out: &mut ibv_qp_attr) -> Result<c_int, c_int> {
    let want = out.qp_state;
    *out = ibv_qp_attr {
        qp_state: want,
        ..ibv_qp_attr::default()
    };
    let access = (IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC) as c_int;
    match want {
        IBV_QPS_INIT => {
            out.pkey_index = 0;
            out.port_num = rxe_verbs::PORT;
            out.qp_access_flags = access;
            Ok((IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) as c_int)
        }
        IBV_QPS_RTR | IBV_QPS_RTS => {
            let a = c.inner.qp_attrs().map_err(|e| super::errno_of(&e))?;
            if want == IBV_QPS_RTR {
                out.path_mtu = u32::from(a.path_mtu);
                out.dest_qp_num = a.dest_qpn;
                out.rq_psn = a.rq_psn;
                out.max_dest_rd_atomic = a.max_dest_rd_atomic;
                out.min_rnr_timer = a.min_rnr_timer;
                out.ah_attr = ibv_ah_attr {
                    grh: ibv_global_route {
                        dgid: a.path.dgid.into(),
                        flow_label: a.path.flow_label,
                        sgid_index: c.inner.sgid_index(),
                        hop_limit: a.path.hop_limit,
                        traffic_class: a.path.traffic_class,
                    },
                    sl: a.path.sl,
                    is_global: 1,
                    port_num: rxe_verbs::PORT,
                    ..ibv_ah_attr::default()
                };
                Ok((IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER) as c_int)
            } else {
                out.sq_psn = a.sq_psn;
                out.timeout = a.timeout;
                out.retry_cnt = a.retry_cnt;
                out.rnr_retry = a.rnr_retry;
                out.max_rd_atomic = a.max_rd_atomic;
                Ok((IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC) as c_int)
            }
        }
        _ => Err(libc::EINVAL),
    }
}

export! {"RDMACM_1.2" fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    if qp_attr.is_null() || qp_attr_mask.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attribute struct.
    match init_qp_attr(c, unsafe { &mut *qp_attr }) {
        Ok(mask) => {
            // SAFETY: the caller's out pointer.
            unsafe { *qp_attr_mask = mask };
            0
        }
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int, fail = -1, {
    let Some(c) = CId::from_c(id) else { return fail(libc::EINVAL) };
    // SAFETY: our own C struct.
    let cid = unsafe { &mut *c.c() };
    if !cid.srq.is_null() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    let pd = if pd.is_null() { cid.pd } else { pd };
    // SAFETY: a PD (checked by the callee) and the caller's attributes.
    let srq = unsafe { crate::srq::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    cid.srq = srq;
    0
}}

export! {"RDMACM_1.0" fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int, fail = -1, {
    // Extended SRQs (XRC, tag matching): rxe has neither.
    let _ = (id, attr);
    fail(libc::EOPNOTSUPP)
}}

export! {"RDMACM_1.0" fn rdma_destroy_srq(id: *mut rdma_cm_id) -> (), fail = (), {
    let Some(c) = CId::from_c(id) else { return };
    // SAFETY: our own C struct.
    let cid = unsafe { &mut *c.c() };
    let srq = std::mem::replace(&mut cid.srq, std::ptr::null_mut());
    if !srq.is_null() {
        // SAFETY: the ID's SRQ, made by rdma_create_srq.
        unsafe { crate::srq::ibv_destroy_srq(srq) };
    }
}}
