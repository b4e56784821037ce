//! Contexts (`ibv_open_device`, `ibv_close_device`) and the device and
//! port queries.
//!
//! A context is a real `verbs_context` (HEAD layout, `sz` 696, the
//! extension table at negative offsets, `abi_compat = UINTPTR_MAX`), so the
//! inline functions of verbs.h find `query_port` and `query_device_ex`.
//! The rxe engine (a [`rxe_verbs::Device`], which binds UDP 4791) is
//! attached at the first verb that needs it and shared by every context of
//! the process on that device; the queries answer from the probe until
//! then, so `ibv_devinfo` works beside a program that holds the port.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, TryLockError};

use rxe_verbs::{DeviceAttr, Gid, PortAttr, PortState, VerbsError};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::*;

use crate::async_events::AsyncQueue;
use crate::devices::RxeDevice;
use crate::errno::set_errno;
use crate::handles::{self, Kind};

#[repr(C)]
pub struct Context {
    pub vctx: verbs_context,
    pub dev: &'static RxeDevice,
    engine: Mutex<Option<rxe_verbs::Device>>,
    pub events: Arc<AsyncQueue>,
    handler: Mutex<Option<u64>>,
}

/// Engines attached in this process, by device name, with how many
/// contexts use each.
static ATTACHED: LazyLock<Mutex<HashMap<String, (rxe_verbs::Device, usize)>>> =
    LazyLock::new(Mutex::default);

/// The process that registered [`flush_at_exit`] (a forked child inherits
/// the registration, not the devices).
static FLUSH_PID: AtomicU32 = AtomicU32::new(0);

/// At `exit`: every attached device sends what it holds back
/// ([`rxe_verbs::Device::flush`]). A program that exits right after its
/// last poll (`ibv_rc_pingpong` once it has its last message) would
/// otherwise take with it the ACK its peer waits for, which a busy
/// poller's turn left for a post that never comes; a NIC would have sent
/// it.
extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if FLUSH_PID.load(Ordering::Relaxed) != std::process::id() {
            return;
        }
        let devs: Vec<rxe_verbs::Device> = match ATTACHED.try_lock() {
            Ok(m) => m.values().map(|(d, _)| d.clone()).collect(),
            Err(TryLockError::Poisoned(p)) => {
                p.into_inner().values().map(|(d, _)| d.clone()).collect()
            }
            // Held by a thread that exit() caught in the middle of a call.
            Err(TryLockError::WouldBlock) => return,
        };
        for d in devs {
            d.flush();
        }
    });
}

fn attach(dev: &RxeDevice) -> Result<rxe_verbs::Device, c_int> {
    let mut m = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((d, n)) = m.get_mut(&dev.name) {
        *n += 1;
        return Ok(d.clone());
    }
    match rxe_verbs::Device::add(dev.config.clone()) {
        Ok(d) => {
            // QP1 and the CM answer from the start, as on a kernel device:
            // a REQ to a program that listens on nothing is refused (REJ
            // reason 8) instead of going unanswered until it times out.
            if let Err(e) = rxe_verbs::cm::start(&d) {
                tracing::warn!(device = %dev.name, error = %e, "the CM did not start");
            }
            m.insert(dev.name.clone(), (d.clone(), 1));
            if FLUSH_PID.swap(std::process::id(), Ordering::Relaxed) != std::process::id() {
                // SAFETY: registers a function of this library, which stays
                // mapped for the process's life (libibverbs.so.1 is never
                // unloaded).
                if unsafe { libc::atexit(flush_at_exit) } != 0 {
                    tracing::debug!("atexit refused: no flush at exit");
                }
            }
            Ok(d)
        }
        Err(e) => {
            match &e {
                VerbsError::PortBusy { addr, port } => eprintln!(
                    "rxe libibverbs: {name} ({addr}:{port}) is used by another process; give this \
                     process its own address with RXE_IBV_DEVICES={name}=<another local address> \
                     (or run it with `rxe exec --ip ADDR`)",
                    name = dev.name
                ),
                other => eprintln!("rxe libibverbs: cannot start {}: {other}", dev.name),
            }
            Err(crate::errno::errno_of(&e))
        }
    }
}

fn detach(name: &str) {
    let mut m = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    let last = match m.get_mut(name) {
        Some((_, n)) => {
            *n -= 1;
            *n == 0
        }
        None => false,
    };
    if last {
        if let Some((d, _)) = m.remove(name) {
            drop(m);
            let _ = d.remove();
        }
    }
}

/// What the port queries answer from.
pub type PortView = (PortAttr, Vec<Option<Gid>>, u32);

impl Context {
    pub fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }

    /// Our context behind a C pointer, if it is a live one.
    pub fn from_ibv(p: *const ibv_context) -> Option<&'static Context> {
        if !handles::is(p, Kind::Context) {
            return None;
        }
        // SAFETY: a live context of ours: the ibv_context sits at
        // VERBS_CONTEXT_CTX_OFFSET inside verbs_context, the first field of
        // the repr(C) Context, which lives until ibv_close_device.
        Some(unsafe {
            &*(p as *const u8)
                .sub(VERBS_CONTEXT_CTX_OFFSET)
                .cast::<Context>()
        })
    }

    /// The engine, attached now if it is not yet (this binds the port).
    pub fn device(&self) -> Result<rxe_verbs::Device, c_int> {
        let mut g = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = &*g {
            return Ok(d.clone());
        }
        let d = attach(self.dev)?;
        let ev = self.events.clone();
        let id = d.register_event_handler(move |e| ev.raise(e));
        *self.handler.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
        *g = Some(d.clone());
        Ok(d)
    }

    fn attached(&self) -> Option<rxe_verbs::Device> {
        self.engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn device_attr(&self) -> Option<DeviceAttr> {
        if let Some(d) = self.attached() {
            return d.query_device().ok();
        }
        let p = self.dev.probe.lock().unwrap_or_else(|e| e.into_inner());
        p.as_ref().map(|p| p.attr.clone())
    }

    /// The port, its GID table (index -> GID, holes as None) and the
    /// interface index.
    pub fn port(&self) -> Option<PortView> {
        let ifindex = self
            .dev
            .probe
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|p| p.ifindex)
            .unwrap_or(0);
        if let Some(d) = self.attached() {
            let p = d.query_port(rxe_verbs::PORT).ok()?;
            let mut gids = vec![None; p.gid_tbl_len as usize];
            for g in d.gid_table(rxe_verbs::PORT).ok()? {
                if let Some(slot) = gids.get_mut(g.index as usize) {
                    *slot = Some(g.gid);
                }
            }
            return Some((p, gids, ifindex));
        }
        let probe = self.dev.refresh()?;
        let mut gids: Vec<Option<Gid>> = probe.gids.iter().copied().map(Some).collect();
        gids.resize(probe.port.gid_tbl_len as usize, None);
        Some((probe.port, gids, ifindex))
    }
}

fn device_attr_c(a: &DeviceAttr) -> ibv_device_attr {
    let mut fw = [0 as std::ffi::c_char; 64];
    for (d, b) in fw.iter_mut().zip(a.fw_ver.bytes().take(63)) {
        *d = b as std::ffi::c_char;
    }
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    ibv_device_attr {
        fw_ver: fw,
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: i(a.max_qp),
        max_qp_wr: i(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: i(a.max_sge),
        max_sge_rd: i(a.max_sge_rd),
        max_cq: i(a.max_cq),
        max_cqe: i(a.max_cqe),
        max_mr: i(a.max_mr),
        max_pd: i(a.max_pd),
        max_qp_rd_atom: a.max_qp_rd_atom.into(),
        max_ee_rd_atom: 0,
        max_res_rd_atom: i(a.max_res_rd_atom),
        max_qp_init_rd_atom: a.max_qp_init_rd_atom.into(),
        max_ee_init_rd_atom: 0,
        atomic_cap: match a.atomic_cap {
            rxe_verbs::AtomicCap::None => 0,
            rxe_verbs::AtomicCap::Hca => IBV_ATOMIC_HCA,
            rxe_verbs::AtomicCap::Glob => 2,
        },
        max_ee: 0,
        max_rdd: 0,
        max_mw: i(a.max_mw),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: i(a.max_mcast_grp),
        max_mcast_qp_attach: i(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: i(a.max_total_mcast_qp_attach),
        max_ah: i(a.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: i(a.max_srq),
        max_srq_wr: i(a.max_srq_wr),
        max_srq_sge: i(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// Kernel rxe's port capabilities (CM supported) plus the IP-based GIDs
/// bit the RDMA core sets for RoCE ports, and automatic path migration
/// (`IBV_PORT_AUTO_MIGR_SUP`), which kernel rxe does not have.
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 26) | (1 << 5);

fn port_attr_c(p: &PortAttr) -> ibv_port_attr {
    let active = p.state == PortState::Active;
    ibv_port_attr {
        state: if active {
            IBV_PORT_ACTIVE
        } else {
            IBV_PORT_DOWN
        },
        max_mtu: p.max_mtu.as_ibv().into(),
        active_mtu: p.active_mtu.as_ibv().into(),
        gid_tbl_len: p.gid_tbl_len.into(),
        port_cap_flags: PORT_CAP_FLAGS,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: p.active_width,
        active_speed: p.active_speed,
        // LINK_UP (5) or DISABLED (3), as `rxe info -v` prints.
        phys_state: if active { 5 } else { 3 },
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
        active_speed_ex: 0,
    }
}

/// Writes the port's attributes into `len` bytes at `out`.
unsafe fn write_port(ctx: &Context, port: u8, out: *mut u8, len: usize) -> c_int {
    if out.is_null() {
        return libc::EINVAL;
    }
    if port != rxe_verbs::PORT {
        return libc::EINVAL;
    }
    let Some((p, _, _)) = ctx.port() else {
        return libc::ENODEV;
    };
    let a = port_attr_c(&p);
    let n = len.min(std::mem::size_of::<ibv_port_attr>());
    // SAFETY: the caller gives `len` writable bytes at out; we write at
    // most that, from a local of at least n bytes.
    unsafe {
        std::ptr::write_bytes(out, 0, len);
        std::ptr::copy_nonoverlapping((&a as *const ibv_port_attr).cast::<u8>(), out, n);
    }
    0
}

callback! {fn vctx_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr, len: usize) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    // SAFETY: attr has `len` bytes (the caller's sizeof).
    unsafe { write_port(ctx, port, attr.cast(), len) }
}}

callback! {fn compat_query_port(context: *mut ibv_context, port: u8, attr: *mut c_void) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    // SAFETY: the compat struct is 48 bytes.
    unsafe { write_port(ctx, port, attr.cast(), COMPAT_PORT_ATTR_LEN) }
}}

callback! {fn vctx_query_device_ex(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex, attr_size: usize) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    // SAFETY: input is NULL or the caller's struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let Some(a) = ctx.device_attr() else { return libc::ENODEV };
    let ex = ibv_device_attr_ex {
        orig_attr: device_attr_c(&a),
        comp_mask: 0,
        _ext: [0; 40],
        phys_port_cnt_ex: a.phys_port_cnt.into(),
    };
    let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
    // SAFETY: attr has attr_size writable bytes; we write at most that.
    unsafe {
        std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
        std::ptr::copy_nonoverlapping((&ex as *const ibv_device_attr_ex).cast::<u8>(), attr.cast::<u8>(), n);
    }
    0
}}

callback! {fn compat_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int, fail = libc::EIO, {
    query_device(context, attr)
}}

fn query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    let Some(ctx) = Context::from_ibv(context) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let Some(a) = ctx.device_attr() else {
        return libc::ENODEV;
    };
    // SAFETY: attr points to a caller's ibv_device_attr.
    unsafe { attr.write(device_attr_c(&a)) };
    0
}

fn new_context(dev: &'static RxeDevice) -> std::io::Result<*mut Context> {
    let events = AsyncQueue::new()?;
    let comp_vectors = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as c_int;
    let mut ext = [std::ptr::null_mut::<c_void>(); 45];
    ext[VCTX_QUERY_PORT] = vctx_query_port as *mut c_void;
    ext[VCTX_QUERY_DEVICE_EX] = vctx_query_device_ex as *mut c_void;
    ext[VCTX_CREATE_QP_EX] = crate::qp_ex::vctx_create_qp_ex as *mut c_void;
    ext[VCTX_CREATE_CQ_EX] = crate::cq_ex::vctx_create_cq_ex as *mut c_void;
    let ops = ibv_context_ops {
        _compat_query_device: Some(compat_query_device),
        _compat_query_port: Some(compat_query_port),
        _compat_1: [std::ptr::null_mut(); 5],
        alloc_mw: crate::mw::alloc_mw as *mut c_void,
        bind_mw: crate::mw::bind_mw as *mut c_void,
        dealloc_mw: crate::mw::dealloc_mw as *mut c_void,
        _compat_2: std::ptr::null_mut(),
        poll_cq: Some(crate::cq::poll_cq),
        req_notify_cq: Some(crate::cq::req_notify_cq),
        _compat_3: [std::ptr::null_mut(); 7],
        post_srq_recv: Some(crate::srq::post_srq_recv),
        _compat_4: [std::ptr::null_mut(); 4],
        post_send: Some(crate::qp::post_send),
        post_recv: Some(crate::qp::post_recv),
        _compat_5: [std::ptr::null_mut(); 4],
        _compat_async_event: std::ptr::null_mut(),
    };
    let c = Box::new(Context {
        vctx: verbs_context {
            ext,
            sz: std::mem::size_of::<verbs_context>(),
            context: ibv_context {
                device: dev.ibv(),
                ops,
                // No kernel command fd, as rdma-core's sysfs-less devices.
                cmd_fd: -1,
                async_fd: events.fd,
                num_comp_vectors: comp_vectors,
                // All zeros is PTHREAD_MUTEX_INITIALIZER on glibc.
                mutex: pthread_mutex_opaque([0; 40]),
                // __VERBS_ABI_IS_EXTENDED: the extension table is valid.
                abi_compat: usize::MAX as *mut c_void,
            },
        },
        dev,
        engine: Mutex::new(None),
        events,
        handler: Mutex::new(None),
    });
    Ok(Box::into_raw(c))
}

export! {"IBVERBS_1.1" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context, fail = std::ptr::null_mut(), {
    let Some(dev) = crate::devices::from_ibv(device) else {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    if dev.probe.lock().unwrap_or_else(|e| e.into_inner()).is_none() && dev.refresh().is_none() {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    }
    match new_context(dev) {
        Ok(c) => {
            // SAFETY: just allocated.
            let p = unsafe { (*c).ibv() };
            handles::insert(p, Kind::Context);
            p
        }
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            std::ptr::null_mut()
        }
    }
}}

export! {"IBVERBS_1.1" fn ibv_close_device(context: *mut ibv_context) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    if !handles::remove(context, Kind::Context) {
        return libc::EINVAL;
    }
    if let Some(d) = ctx.engine.lock().unwrap_or_else(|e| e.into_inner()).take() {
        if let Some(id) = ctx.handler.lock().unwrap_or_else(|e| e.into_inner()).take() {
            d.unregister_event_handler(id);
        }
        detach(&ctx.dev.name);
    }
    // SAFETY: the context was Box::into_raw'd by ibv_open_device and is
    // no longer reachable through the handle table.
    drop(unsafe { Box::from_raw(ctx as *const Context as *mut Context) });
    0
}}

export! {"IBVERBS_1.1" fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int, fail = libc::EIO, {
    query_device(context, device_attr)
}}

export! {"IBVERBS_1.1" fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut c_void) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    // SAFETY: the exported compat function writes the 48-byte struct.
    unsafe { write_port(ctx, port_num, port_attr.cast(), COMPAT_PORT_ATTR_LEN) }
}}

/// The GID at `index`: `Ok(None)` for an empty slot inside the table.
fn gid_at(ctx: &Context, port: u8, index: c_int) -> Result<(Option<Gid>, u32), c_int> {
    if port != rxe_verbs::PORT || index < 0 {
        return Err(libc::EINVAL);
    }
    let (_, gids, ifindex) = ctx.port().ok_or(libc::ENODEV)?;
    match gids.get(index as usize) {
        Some(g) => Ok((*g, ifindex)),
        None => Err(libc::EINVAL),
    }
}

export! {"IBVERBS_1.1" fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut [u8; 16]) -> c_int, fail = -1, {
    let Some(ctx) = Context::from_ibv(context) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if gid.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    match gid_at(ctx, port_num, index) {
        // An empty entry inside the table is a zero GID and success, as
        // rdma-core turns ENODATA into (perftest walks the whole table).
        Ok((g, _)) => {
            // SAFETY: gid points to 16 writable bytes (union ibv_gid).
            unsafe { *gid = g.unwrap_or_default().into() };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}}

/// `ibv_query_gid_type`, rdma-core's private helper that ibv_devinfo
/// imports: one body under the v34 name and the later private names.
#[export_name = "__rxe_ibv_query_gid_type"]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    crate::exports::guard(
        "ibv_query_gid_type",
        || {
            let Some(ctx) = Context::from_ibv(context) else {
                return libc::EINVAL;
            };
            if gid_type.is_null() {
                return libc::EINVAL;
            }
            match gid_at(ctx, port_num, index.min(i32::MAX as u32) as c_int) {
                Ok((g, _)) => {
                    let t = if g.is_some() {
                        IBV_GID_TYPE_SYSFS_ROCE_V2
                    } else {
                        IBV_GID_TYPE_SYSFS_IB_ROCE_V1
                    };
                    // SAFETY: gid_type is the caller's writable u32.
                    unsafe { *gid_type = t };
                    0
                }
                Err(e) => e,
            }
        },
        || libc::EIO,
    )
}
#[cfg(not(test))]
core::arch::global_asm!(
    ".symver __rxe_ibv_query_gid_type, ibv_query_gid_type@@IBVERBS_PRIVATE_34",
    ".symver __rxe_ibv_query_gid_type, ibv_query_gid_type@IBVERBS_PRIVATE_57",
    ".symver __rxe_ibv_query_gid_type, ibv_query_gid_type@IBVERBS_PRIVATE_59",
    ".symver __rxe_ibv_query_gid_type, ibv_query_gid_type@IBVERBS_PRIVATE_64",
    ".symver __rxe_ibv_query_gid_type, ibv_query_gid_type@IBVERBS_PRIVATE_65",
);

fn gid_entry(g: Gid, index: u32, ifindex: u32) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: g.into(),
        gid_index: index,
        port_num: rxe_verbs::PORT.into(),
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ifindex,
    }
}

unsafe fn write_entry(e: &ibv_gid_entry, out: *mut u8, entry_size: usize) {
    let n = entry_size.min(std::mem::size_of::<ibv_gid_entry>());
    // SAFETY: the caller gives entry_size writable bytes at out.
    unsafe {
        std::ptr::write_bytes(out, 0, entry_size);
        std::ptr::copy_nonoverlapping((e as *const ibv_gid_entry).cast::<u8>(), out, n);
    }
}

export! {"IBVERBS_1.11" fn _ibv_query_gid_ex(context: *mut ibv_context, port_num: u32, gid_index: u32, entry: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int, fail = libc::EIO, {
    let Some(ctx) = Context::from_ibv(context) else { return libc::EINVAL };
    if flags != 0 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() || port_num > 255 {
        return libc::EINVAL;
    }
    match gid_at(ctx, port_num as u8, gid_index.min(i32::MAX as u32) as c_int) {
        Ok((Some(g), ifindex)) => {
            // SAFETY: entry has entry_size bytes.
            unsafe { write_entry(&gid_entry(g, gid_index, ifindex), entry.cast(), entry_size) };
            0
        }
        // rdma-core: an empty entry is ENODATA here.
        Ok((None, _)) => libc::ENODATA,
        Err(e) => e,
    }
}}

export! {"IBVERBS_1.11" fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, entry_size: usize) -> isize, fail = -(libc::EIO as isize), {
    let Some(ctx) = Context::from_ibv(context) else { return -(libc::EINVAL as isize) };
    if flags != 0 || entries.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return -(libc::EINVAL as isize);
    }
    let Some((_, gids, ifindex)) = ctx.port() else { return -(libc::ENODEV as isize) };
    let valid: Vec<(usize, Gid)> = gids.iter().enumerate().filter_map(|(i, g)| g.map(|g| (i, g))).collect();
    if valid.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (n, (i, g)) in valid.iter().enumerate() {
        // SAFETY: entries has max_entries slots of entry_size bytes, and
        // n < max_entries.
        unsafe { write_entry(&gid_entry(*g, *i as u32, ifindex), entries.cast::<u8>().add(n * entry_size), entry_size) };
    }
    valid.len() as isize
}}

export! {"IBVERBS_1.1" fn ibv_query_pkey(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int, fail = -1, {
    let Some(ctx) = Context::from_ibv(context) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if pkey.is_null() || port_num != rxe_verbs::PORT || index < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let value = match ctx.attached() {
        Some(d) => d.query_pkey(port_num, index as u16).ok(),
        // Before the engine exists, the default table: the full member
        // default partition at index 0.
        None => (index == 0).then_some(0xffff),
    };
    match value {
        Some(v) => {
            // SAFETY: pkey is the caller's __be16.
            unsafe { *pkey = v.to_be() };
            0
        }
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}}

export! {"IBVERBS_1.5" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int, fail = -1, {
    let Some(ctx) = Context::from_ibv(context) else { return -1 };
    let pkey = u16::from_be(pkey);
    match ctx.attached() {
        Some(d) => d.find_pkey(port_num, pkey).map(c_int::from).unwrap_or(-1),
        None => if port_num == rxe_verbs::PORT && pkey == 0xffff { 0 } else { -1 },
    }
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_attributes_convert() {
        let a = DeviceAttr::rxe(0x0200_7fff_fe00_0001);
        let c = device_attr_c(&a);
        assert_eq!(u64::from_be(c.node_guid), a.node_guid);
        assert_eq!(c.vendor_id, 0xffffff);
        assert_eq!(c.max_qp_rd_atom, 128);
        assert_eq!(c.atomic_cap, IBV_ATOMIC_HCA);
        assert_eq!(c.phys_port_cnt, 1);
        assert_eq!(
            c.fw_ver[..4].iter().map(|b| *b as u8).collect::<Vec<_>>(),
            b"rxe "
        );
    }
}
