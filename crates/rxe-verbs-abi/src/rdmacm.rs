//! The librdmacm ABI (`<rdma/rdma_cma.h>`, rdma-core v44 = HEAD for these
//! structs, x86_64): the structs a program and `librdmacm.so.1` share, the
//! event, port-space and option values, and the offsets measured from the
//! real header asserted (and compared again with the installed header by
//! `tests/layout_vs_headers.rs`).

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};

use crate::kern::ibv_sa_path_rec;
use crate::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_srq};

/// `struct sockaddr_storage`: 128 bytes, 8-aligned; the family is the
/// first `u16`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct sockaddr_storage_opaque(pub [u8; 128]);

impl Default for sockaddr_storage_opaque {
    fn default() -> Self {
        sockaddr_storage_opaque([0; 128])
    }
}

/// `struct rdma_ib_addr`: the GIDs and P_Key of the path.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct rdma_ib_addr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    /// Big-endian.
    pub pkey: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_addr {
    pub src: sockaddr_storage_opaque,
    pub dst: sockaddr_storage_opaque,
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Ignored when accepting.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// This and `qp_num`: only for an ID without a QP.
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
    pub arg: u64,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut c_void,
    pub ai_dst_addr: *mut c_void,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut c_void,
}

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
    pub const ADDRINFO_RESOLVED: u32 = 16;
    pub const ADDRINFO_ERROR: u32 = 17;
    pub const USER: u32 = 18;
    pub const INTERNAL: u32 = 19;
}

/// `enum rdma_port_space`.
pub const RDMA_PS_IPOIB: u32 = 0x0002;
pub const RDMA_PS_TCP: u32 = 0x0106;
pub const RDMA_PS_UDP: u32 = 0x0111;
pub const RDMA_PS_IB: u32 = 0x013f;
/// The Q_Key of RDMA CM UD QPs and multicast groups.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `rdma_getaddrinfo` hint flags.
pub const RAI_PASSIVE: c_int = 0x01;
pub const RAI_NUMERICHOST: c_int = 0x02;
pub const RAI_NOROUTE: c_int = 0x04;
pub const RAI_FAMILY: c_int = 0x08;
pub const RAI_SA: c_int = 0x10;
pub const RAI_DNS: c_int = 0x20;

/// `rdma_set_option` levels and names.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `RDMA_MAX_RESP_RES`, `RDMA_MAX_INIT_DEPTH`: "as many as the device has".
pub const RDMA_MAX_RESP_RES: u8 = 0xff;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

const _: () = assert!(size_of::<rdma_event_channel>() == 4);
const _: () = assert!(size_of::<rdma_cm_id>() == 416);
const _: () = assert!(offset_of!(rdma_cm_id, verbs) == 0);
const _: () = assert!(offset_of!(rdma_cm_id, channel) == 8);
const _: () = assert!(offset_of!(rdma_cm_id, context) == 16);
const _: () = assert!(offset_of!(rdma_cm_id, qp) == 24);
const _: () = assert!(offset_of!(rdma_cm_id, route) == 32);
const _: () = assert!(offset_of!(rdma_cm_id, ps) == 344);
const _: () = assert!(offset_of!(rdma_cm_id, port_num) == 348);
const _: () = assert!(offset_of!(rdma_cm_id, event) == 352);
const _: () = assert!(offset_of!(rdma_cm_id, send_cq_channel) == 360);
const _: () = assert!(offset_of!(rdma_cm_id, send_cq) == 368);
const _: () = assert!(offset_of!(rdma_cm_id, recv_cq_channel) == 376);
const _: () = assert!(offset_of!(rdma_cm_id, recv_cq) == 384);
const _: () = assert!(offset_of!(rdma_cm_id, srq) == 392);
const _: () = assert!(offset_of!(rdma_cm_id, pd) == 400);
const _: () = assert!(offset_of!(rdma_cm_id, qp_type) == 408);
const _: () = assert!(size_of::<rdma_route>() == 312);
const _: () = assert!(offset_of!(rdma_route, path_rec) == 296);
const _: () = assert!(offset_of!(rdma_route, num_paths) == 304);
const _: () = assert!(size_of::<rdma_addr>() == 296);
const _: () = assert!(offset_of!(rdma_addr, dst) == 128);
const _: () = assert!(offset_of!(rdma_addr, ibaddr) == 256);
const _: () = assert!(size_of::<rdma_cm_event>() == 80);
const _: () = assert!(offset_of!(rdma_cm_event, id) == 0);
const _: () = assert!(offset_of!(rdma_cm_event, listen_id) == 8);
const _: () = assert!(offset_of!(rdma_cm_event, event) == 16);
const _: () = assert!(offset_of!(rdma_cm_event, status) == 20);
const _: () = assert!(offset_of!(rdma_cm_event, param) == 24);
const _: () = assert!(size_of::<rdma_cm_event_param>() == 56);
const _: () = assert!(size_of::<rdma_conn_param>() == 24);
const _: () = assert!(offset_of!(rdma_conn_param, qp_num) == 16);
const _: () = assert!(size_of::<rdma_ud_param>() == 56);
const _: () = assert!(offset_of!(rdma_ud_param, ah_attr) == 16);
const _: () = assert!(offset_of!(rdma_ud_param, qp_num) == 48);
const _: () = assert!(size_of::<rdma_addrinfo>() == 96);
const _: () = assert!(offset_of!(rdma_addrinfo, ai_src_addr) == 24);
const _: () = assert!(offset_of!(rdma_addrinfo, ai_next) == 88);

/// Every (struct, C field, offset) of `<rdma/rdma_cma.h>` this module
/// relies on, and the sizes (field ""), for the test that compares them
/// with the installed header (`tests/layout_vs_headers.rs`). The asserts
/// above tie the same numbers to the Rust structs.
pub const RDMACM_CHECKED_LAYOUT: &[(&str, &str, usize)] = &[
    ("rdma_event_channel", "", 4),
    ("rdma_event_channel", "fd", 0),
    ("rdma_cm_id", "", 416),
    ("rdma_cm_id", "verbs", 0),
    ("rdma_cm_id", "channel", 8),
    ("rdma_cm_id", "context", 16),
    ("rdma_cm_id", "qp", 24),
    ("rdma_cm_id", "route", 32),
    ("rdma_cm_id", "ps", 344),
    ("rdma_cm_id", "port_num", 348),
    ("rdma_cm_id", "event", 352),
    ("rdma_cm_id", "send_cq_channel", 360),
    ("rdma_cm_id", "send_cq", 368),
    ("rdma_cm_id", "recv_cq_channel", 376),
    ("rdma_cm_id", "recv_cq", 384),
    ("rdma_cm_id", "srq", 392),
    ("rdma_cm_id", "pd", 400),
    ("rdma_cm_id", "qp_type", 408),
    ("rdma_route", "", 312),
    ("rdma_route", "addr", 0),
    ("rdma_route", "path_rec", 296),
    ("rdma_route", "num_paths", 304),
    ("rdma_addr", "", 296),
    ("rdma_addr", "src_addr", 0),
    ("rdma_addr", "dst_addr", 128),
    ("rdma_addr", "addr", 256),
    ("rdma_ib_addr", "", 40),
    ("rdma_ib_addr", "dgid", 16),
    ("rdma_ib_addr", "pkey", 32),
    ("rdma_cm_event", "", 80),
    ("rdma_cm_event", "id", 0),
    ("rdma_cm_event", "listen_id", 8),
    ("rdma_cm_event", "event", 16),
    ("rdma_cm_event", "status", 20),
    ("rdma_cm_event", "param", 24),
    ("rdma_conn_param", "", 24),
    ("rdma_conn_param", "private_data_len", 8),
    ("rdma_conn_param", "responder_resources", 9),
    ("rdma_conn_param", "initiator_depth", 10),
    ("rdma_conn_param", "flow_control", 11),
    ("rdma_conn_param", "retry_count", 12),
    ("rdma_conn_param", "rnr_retry_count", 13),
    ("rdma_conn_param", "srq", 14),
    ("rdma_conn_param", "qp_num", 16),
    ("rdma_ud_param", "", 56),
    ("rdma_ud_param", "private_data_len", 8),
    ("rdma_ud_param", "ah_attr", 16),
    ("rdma_ud_param", "qp_num", 48),
    ("rdma_ud_param", "qkey", 52),
    ("rdma_addrinfo", "", 96),
    ("rdma_addrinfo", "ai_qp_type", 8),
    ("rdma_addrinfo", "ai_port_space", 12),
    ("rdma_addrinfo", "ai_src_len", 16),
    ("rdma_addrinfo", "ai_dst_len", 20),
    ("rdma_addrinfo", "ai_src_addr", 24),
    ("rdma_addrinfo", "ai_dst_addr", 32),
    ("rdma_addrinfo", "ai_src_canonname", 40),
    ("rdma_addrinfo", "ai_dst_canonname", 48),
    ("rdma_addrinfo", "ai_route_len", 56),
    ("rdma_addrinfo", "ai_route", 64),
    ("rdma_addrinfo", "ai_connect_len", 72),
    ("rdma_addrinfo", "ai_connect", 80),
    ("rdma_addrinfo", "ai_next", 88),
    ("rdma_cm_join_mc_attr_ex", "", 16),
    ("rdma_cm_join_mc_attr_ex", "addr", 8),
    ("ibv_sa_path_rec", "", 64),
];

const _: () = assert!(size_of::<rdma_ib_addr>() == 40);
const _: () = assert!(offset_of!(rdma_ib_addr, dgid) == 16);
const _: () = assert!(offset_of!(rdma_ib_addr, pkey) == 32);
const _: () = assert!(offset_of!(rdma_conn_param, private_data_len) == 8);
const _: () = assert!(offset_of!(rdma_conn_param, srq) == 14);
const _: () = assert!(offset_of!(rdma_ud_param, qkey) == 52);
const _: () = assert!(offset_of!(rdma_addrinfo, ai_route_len) == 56);
const _: () = assert!(offset_of!(rdma_addrinfo, ai_connect) == 80);
const _: () = assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16);
const _: () = assert!(offset_of!(rdma_cm_join_mc_attr_ex, addr) == 8);
