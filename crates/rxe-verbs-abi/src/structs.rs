//! The shared structs. Pointers to other ABI structs are typed; pointers
//! this crate does not model are `*mut c_void`. A `pthread_mutex_t` or
//! `pthread_cond_t` inside a struct is opaque bytes: all zeros is glibc's
//! static initialiser, and only rdma-core's own code ever locks them.

use core::ffi::{c_char, c_int, c_void};

/// `pthread_mutex_t` on x86_64 glibc: 40 bytes, 8-aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_mutex_opaque(pub [u8; 40]);

/// `pthread_cond_t` on x86_64 glibc: 48 bytes, 8-aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_cond_opaque(pub [u8; 48]);

#[repr(C)]
pub struct ibv_device {
    pub _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type QueryDeviceFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub type CompatQueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut c_void) -> c_int;
/// `verbs_context.query_port`: the last argument is the caller's
/// `sizeof(struct ibv_port_attr)`.
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;

/// `struct ibv_context_ops`: 32 slots; only the ones inline code of
/// verbs.h calls, and the compat query slots, are named.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<QueryDeviceFn>,
    pub _compat_query_port: Option<CompatQueryPortFn>,
    pub _compat_1: [*mut c_void; 5],
    pub alloc_mw: *mut c_void,
    pub bind_mw: *mut c_void,
    pub dealloc_mw: *mut c_void,
    pub _compat_2: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_3: [*mut c_void; 7],
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_4: [*mut c_void; 4],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_5: [*mut c_void; 4],
    pub _compat_async_event: *mut c_void,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_opaque,
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context` (HEAD, 696 bytes): 45 extension slots, `sz`,
/// then the `ibv_context` the application points at. Slot `i` is at
/// `8 * i - 368` from the context; the `VCTX_*` constants name the slots
/// rxe fills.
#[repr(C)]
pub struct verbs_context {
    pub ext: [*mut c_void; 45],
    pub sz: usize,
    pub context: ibv_context,
}

/// Offset of the embedded context inside `verbs_context`.
pub const VERBS_CONTEXT_CTX_OFFSET: usize = 368;
pub const VCTX_QUERY_PORT: usize = 6; // ctx - 320
pub const VCTX_CREATE_CQ_EX: usize = 31; // ctx - 120
pub const VCTX_QUERY_DEVICE_EX: usize = 33; // ctx - 104
pub const VCTX_CREATE_QP_EX: usize = 39; // ctx - 56

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`: `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
    pub mw_type: u32,
}

/// `struct ibv_mw_bind_info`: also the `bind_info` of a BIND_MW
/// `ibv_send_wr` (at offset 96) and of `ibv_wr_bind_mw`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind` of `ibv_bind_mw`.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_opaque,
    pub cond: pthread_cond_opaque,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// The part of `struct ibv_cq_ex` after its `ibv_cq` (at byte 128):
/// `comp_mask`, `status`, `wr_id`, then 18 function pointers
/// (`start_poll` at 144 ... `read_completion_wallclock_ns` at 280).
#[repr(C)]
pub struct CqExTail {
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub ops: [*mut c_void; 18],
}

/// `struct ibv_cq_ex` (288 bytes).
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub ex: CqExTail,
}

#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut c_void,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_opaque,
    pub cond: pthread_cond_opaque,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_opaque,
    pub cond: pthread_cond_opaque,
    pub events_completed: u32,
}

/// `struct ibv_qp_ex` (HEAD, 360 bytes): the QP, then `comp_mask`,
/// `wr_id`, `wr_flags` and 22 function pointers (`wr_atomic_cmp_swp` at
/// 184 ... `wr_flush` at 352).
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub ops: [*mut c_void; 22],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` / `wr.atomic` / `wr.ud` of `ibv_send_wr`, as four words:
/// rdma `{remote_addr: w[0], rkey: w[1] low 32}`; atomic `{remote_addr:
/// w[0], compare_add: w[1], swap: w[2], rkey: w[3] low 32}`; ud `{ah:
/// w[0], remote_qpn: w[1] low 32, remote_qkey: w[1] high 32}`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_wr(pub [u64; 4]);

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    /// `imm_data` (big-endian) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// `bind_mw` / `tso`.
    pub bind_mw: [u64; 6],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (big-endian) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_port_attr` (HEAD, 56 bytes; v44 applications pass 52).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub active_speed_ex: u32,
}

/// What the exported `ibv_query_port@IBVERBS_1.1` writes: the first 48
/// bytes of `ibv_port_attr` (`_compat_ibv_port_attr`).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` (400 bytes): `orig_attr`, `comp_mask`, and
/// the extended capabilities, which rxe reports as zero except
/// `phys_port_cnt_ex` (at byte 396).
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub _ext: [u32; 40],
    pub phys_port_cnt_ex: u32,
}

/// 8-aligned: `union ibv_gid` holds two `__be64`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// 8-aligned: `union ibv_gid` holds two `__be64`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_int,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_async_event`: `element` is a union of `cq`, `qp`, `srq`
/// pointers and `port_num` (an int).
#[repr(C)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: u32,
}

macro_rules! layout {
    ($t:ty, $size:expr $(, $f:ident = $off:expr)* $(,)?) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($t, $f) == $off);)*
    };
}

/// Every (struct, field, offset) this crate asserts, and the sizes, for
/// the test that compares them with the installed C headers. The sizes are
/// HEAD's where v44 differs.
pub const CHECKED_LAYOUT: &[(&str, &str, usize)] = &[
    ("ibv_device", "", 664),
    ("ibv_device", "node_type", 16),
    ("ibv_device", "transport_type", 20),
    ("ibv_device", "name", 24),
    ("ibv_device", "dev_name", 88),
    ("ibv_device", "dev_path", 152),
    ("ibv_device", "ibdev_path", 408),
    ("ibv_context_ops", "", 256),
    ("ibv_context_ops", "_compat_query_device", 0),
    ("ibv_context_ops", "_compat_query_port", 8),
    ("ibv_context_ops", "alloc_mw", 56),
    ("ibv_context_ops", "poll_cq", 88),
    ("ibv_context_ops", "req_notify_cq", 96),
    ("ibv_context_ops", "post_srq_recv", 160),
    ("ibv_context_ops", "post_send", 200),
    ("ibv_context_ops", "post_recv", 208),
    ("ibv_context_ops", "_compat_async_event", 248),
    ("ibv_context", "", 328),
    ("ibv_context", "ops", 8),
    ("ibv_context", "cmd_fd", 264),
    ("ibv_context", "async_fd", 268),
    ("ibv_context", "num_comp_vectors", 272),
    ("ibv_context", "mutex", 280),
    ("ibv_context", "abi_compat", 320),
    ("ibv_pd", "", 16),
    ("ibv_pd", "handle", 8),
    ("ibv_mr", "", 48),
    ("ibv_mr", "addr", 16),
    ("ibv_mr", "length", 24),
    ("ibv_mr", "handle", 32),
    ("ibv_mr", "lkey", 36),
    ("ibv_mr", "rkey", 40),
    ("ibv_mw", "", 32),
    ("ibv_mw", "pd", 8),
    ("ibv_mw", "rkey", 16),
    ("ibv_mw", "handle", 20),
    ("ibv_mw", "type", 24),
    ("ibv_mw_bind_info", "", 32),
    ("ibv_mw_bind_info", "addr", 8),
    ("ibv_mw_bind_info", "length", 16),
    ("ibv_mw_bind_info", "mw_access_flags", 24),
    ("ibv_mw_bind", "", 48),
    ("ibv_mw_bind", "send_flags", 8),
    ("ibv_mw_bind", "bind_info", 16),
    ("ibv_ah", "", 24),
    ("ibv_ah", "handle", 16),
    ("ibv_comp_channel", "", 16),
    ("ibv_comp_channel", "fd", 8),
    ("ibv_comp_channel", "refcnt", 12),
    ("ibv_cq", "", 128),
    ("ibv_cq", "channel", 8),
    ("ibv_cq", "cq_context", 16),
    ("ibv_cq", "handle", 24),
    ("ibv_cq", "cqe", 28),
    ("ibv_cq", "mutex", 32),
    ("ibv_cq", "cond", 72),
    ("ibv_cq", "comp_events_completed", 120),
    ("ibv_cq", "async_events_completed", 124),
    ("ibv_cq_ex", "", 288),
    ("ibv_cq_ex", "comp_mask", 128),
    ("ibv_cq_ex", "status", 132),
    ("ibv_cq_ex", "wr_id", 136),
    ("ibv_cq_ex", "start_poll", 144),
    ("ibv_cq_ex", "read_dlid_path_bits", 240),
    ("ibv_cq_ex", "read_completion_wallclock_ns", 280),
    ("ibv_cq_init_attr_ex", "", 56),
    ("ibv_cq_init_attr_ex", "channel", 16),
    ("ibv_cq_init_attr_ex", "comp_vector", 24),
    ("ibv_cq_init_attr_ex", "wc_flags", 32),
    ("ibv_cq_init_attr_ex", "comp_mask", 40),
    ("ibv_cq_init_attr_ex", "flags", 44),
    ("ibv_cq_init_attr_ex", "parent_domain", 48),
    ("ibv_srq", "", 128),
    ("ibv_srq", "srq_context", 8),
    ("ibv_srq", "pd", 16),
    ("ibv_srq", "handle", 24),
    ("ibv_srq", "events_completed", 120),
    ("ibv_qp", "", 160),
    ("ibv_qp", "send_cq", 24),
    ("ibv_qp", "recv_cq", 32),
    ("ibv_qp", "srq", 40),
    ("ibv_qp", "handle", 48),
    ("ibv_qp", "qp_num", 52),
    ("ibv_qp", "state", 56),
    ("ibv_qp", "qp_type", 60),
    ("ibv_qp", "events_completed", 152),
    ("ibv_qp_ex", "comp_mask", 160),
    ("ibv_qp_ex", "wr_id", 168),
    ("ibv_qp_ex", "wr_flags", 176),
    ("ibv_sge", "", 16),
    ("ibv_sge", "length", 8),
    ("ibv_sge", "lkey", 12),
    ("ibv_send_wr", "", 128),
    ("ibv_send_wr", "next", 8),
    ("ibv_send_wr", "sg_list", 16),
    ("ibv_send_wr", "num_sge", 24),
    ("ibv_send_wr", "opcode", 28),
    ("ibv_send_wr", "send_flags", 32),
    ("ibv_send_wr", "imm_data", 36),
    ("ibv_send_wr", "wr", 40),
    ("ibv_recv_wr", "", 32),
    ("ibv_recv_wr", "num_sge", 24),
    ("ibv_wc", "", 48),
    ("ibv_wc", "status", 8),
    ("ibv_wc", "opcode", 12),
    ("ibv_wc", "vendor_err", 16),
    ("ibv_wc", "byte_len", 20),
    ("ibv_wc", "imm_data", 24),
    ("ibv_wc", "qp_num", 28),
    ("ibv_wc", "src_qp", 32),
    ("ibv_wc", "wc_flags", 36),
    ("ibv_wc", "pkey_index", 40),
    ("ibv_wc", "slid", 42),
    ("ibv_wc", "sl", 44),
    ("ibv_wc", "dlid_path_bits", 45),
    ("ibv_port_attr", "state", 0),
    ("ibv_port_attr", "max_msg_sz", 20),
    ("ibv_port_attr", "pkey_tbl_len", 32),
    ("ibv_port_attr", "lid", 34),
    ("ibv_port_attr", "max_vl_num", 39),
    ("ibv_port_attr", "active_width", 43),
    ("ibv_port_attr", "active_speed", 44),
    ("ibv_port_attr", "phys_state", 45),
    ("ibv_port_attr", "link_layer", 46),
    ("ibv_port_attr", "flags", 47),
    ("ibv_port_attr", "port_cap_flags2", 48),
    ("ibv_device_attr", "", 232),
    ("ibv_device_attr", "node_guid", 64),
    ("ibv_device_attr", "max_mr_size", 80),
    ("ibv_device_attr", "vendor_id", 96),
    ("ibv_device_attr", "max_qp", 108),
    ("ibv_device_attr", "device_cap_flags", 116),
    ("ibv_device_attr", "max_qp_rd_atom", 144),
    ("ibv_device_attr", "max_qp_init_rd_atom", 156),
    ("ibv_device_attr", "atomic_cap", 164),
    ("ibv_device_attr", "max_ah", 200),
    ("ibv_device_attr", "max_srq", 212),
    ("ibv_device_attr", "max_srq_sge", 220),
    ("ibv_device_attr", "max_pkeys", 224),
    ("ibv_device_attr", "local_ca_ack_delay", 226),
    ("ibv_device_attr", "phys_port_cnt", 227),
    ("ibv_device_attr_ex", "", 400),
    ("ibv_device_attr_ex", "comp_mask", 232),
    ("ibv_device_attr_ex", "phys_port_cnt_ex", 396),
    ("ibv_gid_entry", "", 32),
    ("ibv_gid_entry", "gid_index", 16),
    ("ibv_gid_entry", "port_num", 20),
    ("ibv_gid_entry", "gid_type", 24),
    ("ibv_gid_entry", "ndev_ifindex", 28),
    ("ibv_global_route", "", 24),
    ("ibv_global_route", "flow_label", 16),
    ("ibv_global_route", "sgid_index", 20),
    ("ibv_global_route", "hop_limit", 21),
    ("ibv_global_route", "traffic_class", 22),
    ("ibv_ah_attr", "", 32),
    ("ibv_ah_attr", "dlid", 24),
    ("ibv_ah_attr", "sl", 26),
    ("ibv_ah_attr", "static_rate", 28),
    ("ibv_ah_attr", "is_global", 29),
    ("ibv_ah_attr", "port_num", 30),
    ("ibv_qp_init_attr", "", 64),
    ("ibv_qp_init_attr", "cap", 32),
    ("ibv_qp_init_attr", "qp_type", 52),
    ("ibv_qp_init_attr", "sq_sig_all", 56),
    ("ibv_qp_init_attr_ex", "", 136),
    ("ibv_qp_init_attr_ex", "comp_mask", 60),
    ("ibv_qp_init_attr_ex", "pd", 64),
    ("ibv_qp_init_attr_ex", "create_flags", 80),
    ("ibv_qp_init_attr_ex", "source_qpn", 120),
    ("ibv_qp_init_attr_ex", "send_ops_flags", 128),
    ("ibv_qp_attr", "", 144),
    ("ibv_qp_attr", "qkey", 16),
    ("ibv_qp_attr", "dest_qp_num", 28),
    ("ibv_qp_attr", "qp_access_flags", 32),
    ("ibv_qp_attr", "cap", 36),
    ("ibv_qp_attr", "ah_attr", 56),
    ("ibv_qp_attr", "alt_ah_attr", 88),
    ("ibv_qp_attr", "pkey_index", 120),
    ("ibv_qp_attr", "en_sqd_async_notify", 124),
    ("ibv_qp_attr", "max_rd_atomic", 126),
    ("ibv_qp_attr", "max_dest_rd_atomic", 127),
    ("ibv_qp_attr", "min_rnr_timer", 128),
    ("ibv_qp_attr", "port_num", 129),
    ("ibv_qp_attr", "timeout", 130),
    ("ibv_qp_attr", "retry_cnt", 131),
    ("ibv_qp_attr", "rnr_retry", 132),
    ("ibv_qp_attr", "alt_timeout", 134),
    ("ibv_qp_attr", "rate_limit", 136),
    ("ibv_srq_init_attr", "", 24),
    ("ibv_srq_init_attr", "attr", 8),
    ("ibv_async_event", "", 16),
    ("ibv_async_event", "event_type", 8),
];

layout!(
    ibv_device,
    664,
    node_type = 16,
    transport_type = 20,
    name = 24,
    dev_name = 88,
    dev_path = 152,
    ibdev_path = 408
);
layout!(
    ibv_context_ops,
    256,
    _compat_query_device = 0,
    _compat_query_port = 8,
    alloc_mw = 56,
    bind_mw = 64,
    dealloc_mw = 72,
    poll_cq = 88,
    req_notify_cq = 96,
    post_srq_recv = 160,
    post_send = 200,
    post_recv = 208,
    _compat_async_event = 248,
);
layout!(
    ibv_context,
    328,
    ops = 8,
    cmd_fd = 264,
    async_fd = 268,
    num_comp_vectors = 272,
    mutex = 280,
    abi_compat = 320
);
layout!(
    verbs_context,
    696,
    sz = 360,
    context = VERBS_CONTEXT_CTX_OFFSET
);
layout!(ibv_pd, 16, handle = 8);
layout!(
    ibv_mr,
    48,
    pd = 8,
    addr = 16,
    length = 24,
    handle = 32,
    lkey = 36,
    rkey = 40
);
layout!(ibv_mw, 32, pd = 8, rkey = 16, handle = 20, mw_type = 24);
layout!(
    ibv_mw_bind_info,
    32,
    mr = 0,
    addr = 8,
    length = 16,
    mw_access_flags = 24
);
layout!(ibv_mw_bind, 48, wr_id = 0, send_flags = 8, bind_info = 16);
layout!(ibv_ah, 24, pd = 8, handle = 16);
layout!(ibv_comp_channel, 16, fd = 8, refcnt = 12);
layout!(
    ibv_cq,
    128,
    channel = 8,
    cq_context = 16,
    handle = 24,
    cqe = 28,
    mutex = 32,
    cond = 72,
    comp_events_completed = 120,
    async_events_completed = 124,
);
layout!(
    ibv_srq,
    128,
    srq_context = 8,
    pd = 16,
    handle = 24,
    mutex = 32,
    cond = 72,
    events_completed = 120
);
layout!(
    ibv_qp,
    160,
    qp_context = 8,
    pd = 16,
    send_cq = 24,
    recv_cq = 32,
    srq = 40,
    handle = 48,
    qp_num = 52,
    state = 56,
    qp_type = 60,
    mutex = 64,
    cond = 104,
    events_completed = 152,
);
layout!(
    ibv_qp_ex,
    360,
    comp_mask = 160,
    wr_id = 168,
    wr_flags = 176,
    ops = 184
);
layout!(ibv_sge, 16, length = 8, lkey = 12);
layout!(
    ibv_send_wr,
    128,
    next = 8,
    sg_list = 16,
    num_sge = 24,
    opcode = 28,
    send_flags = 32,
    imm_data = 36,
    wr = 40,
    remote_srqn = 72,
    bind_mw = 80,
);
layout!(ibv_recv_wr, 32, next = 8, sg_list = 16, num_sge = 24);
layout!(
    ibv_wc,
    48,
    status = 8,
    opcode = 12,
    vendor_err = 16,
    byte_len = 20,
    imm_data = 24,
    qp_num = 28,
    src_qp = 32,
    wc_flags = 36,
    pkey_index = 40,
    slid = 42,
    sl = 44,
    dlid_path_bits = 45,
);
layout!(
    ibv_port_attr,
    56,
    max_mtu = 4,
    active_mtu = 8,
    gid_tbl_len = 12,
    port_cap_flags = 16,
    max_msg_sz = 20,
    bad_pkey_cntr = 24,
    qkey_viol_cntr = 28,
    pkey_tbl_len = 32,
    lid = 34,
    sm_lid = 36,
    lmc = 38,
    max_vl_num = 39,
    sm_sl = 40,
    subnet_timeout = 41,
    init_type_reply = 42,
    active_width = 43,
    active_speed = 44,
    phys_state = 45,
    link_layer = 46,
    flags = 47,
    port_cap_flags2 = 48,
    active_speed_ex = 52,
);
layout!(
    ibv_device_attr,
    232,
    node_guid = 64,
    sys_image_guid = 72,
    max_mr_size = 80,
    page_size_cap = 88,
    vendor_id = 96,
    vendor_part_id = 100,
    hw_ver = 104,
    max_qp = 108,
    max_qp_wr = 112,
    device_cap_flags = 116,
    max_sge = 120,
    max_sge_rd = 124,
    max_cq = 128,
    max_cqe = 132,
    max_mr = 136,
    max_pd = 140,
    max_qp_rd_atom = 144,
    max_ee_rd_atom = 148,
    max_res_rd_atom = 152,
    max_qp_init_rd_atom = 156,
    max_ee_init_rd_atom = 160,
    atomic_cap = 164,
    max_ah = 200,
    max_srq = 212,
    max_srq_wr = 216,
    max_srq_sge = 220,
    max_pkeys = 224,
    local_ca_ack_delay = 226,
    phys_port_cnt = 227,
);
layout!(
    ibv_device_attr_ex,
    400,
    comp_mask = 232,
    phys_port_cnt_ex = 396
);
layout!(
    ibv_gid_entry,
    32,
    gid_index = 16,
    port_num = 20,
    gid_type = 24,
    ndev_ifindex = 28
);
layout!(
    ibv_global_route,
    24,
    flow_label = 16,
    sgid_index = 20,
    hop_limit = 21,
    traffic_class = 22
);
layout!(
    ibv_ah_attr,
    32,
    dlid = 24,
    sl = 26,
    src_path_bits = 27,
    static_rate = 28,
    is_global = 29,
    port_num = 30
);
layout!(ibv_qp_cap, 20, max_inline_data = 16);
layout!(
    ibv_qp_init_attr,
    64,
    send_cq = 8,
    recv_cq = 16,
    srq = 24,
    cap = 32,
    qp_type = 52,
    sq_sig_all = 56
);
layout!(
    ibv_qp_init_attr_ex,
    136,
    cap = 32,
    qp_type = 52,
    sq_sig_all = 56,
    comp_mask = 60,
    pd = 64,
    xrcd = 72,
    create_flags = 80,
    max_tso_header = 84,
    rwq_ind_tbl = 88,
    rx_hash_conf = 96,
    source_qpn = 120,
    send_ops_flags = 128,
);
layout!(
    ibv_qp_attr,
    144,
    cur_qp_state = 4,
    path_mtu = 8,
    path_mig_state = 12,
    qkey = 16,
    rq_psn = 20,
    sq_psn = 24,
    dest_qp_num = 28,
    qp_access_flags = 32,
    cap = 36,
    ah_attr = 56,
    alt_ah_attr = 88,
    pkey_index = 120,
    alt_pkey_index = 122,
    en_sqd_async_notify = 124,
    sq_draining = 125,
    max_rd_atomic = 126,
    max_dest_rd_atomic = 127,
    min_rnr_timer = 128,
    port_num = 129,
    timeout = 130,
    retry_cnt = 131,
    rnr_retry = 132,
    alt_port_num = 133,
    alt_timeout = 134,
    rate_limit = 136,
);
layout!(ibv_srq_attr, 12, max_sge = 4, srq_limit = 8);
layout!(ibv_srq_init_attr, 24, attr = 8);
layout!(ibv_async_event, 16, event_type = 8);
