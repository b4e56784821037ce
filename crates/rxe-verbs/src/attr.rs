//! What `ibv_query_device` and `ibv_query_port` report: the device's limits
//! and identity, the port's state, MTUs and tables.

use rxe_core::transport::PathMtu;
use rxe_core::Gid;

/// `ibv_atomic_cap`: how atomics of this device relate to the CPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    None,
    /// Atomic with respect to other operations of this device
    /// (`IBV_ATOMIC_HCA`), which is what rxe guarantees. Remote atomics on
    /// aligned words are also atomic with the application's own
    /// [`crate::Mr::fetch_add`] and [`crate::Mr::compare_swap`].
    Hca,
    Glob,
}

/// Device capability flags (`IBV_DEVICE_*` bits that rxe has).
pub mod device_cap {
    // The bit numbers of verbs.h's enum ibv_device_cap_flags.
    pub const BAD_PKEY_CNTR: u32 = 1 << 1;
    pub const BAD_QKEY_CNTR: u32 = 1 << 2;
    /// Automatic path migration (rxe-core's `qp::migration`).
    pub const AUTO_PATH_MIG: u32 = 1 << 4;
    pub const SHUTDOWN_PORT: u32 = 1 << 8;
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    pub const SRQ_RESIZE: u32 = 1 << 13;
    pub const N_NOTIFY_CQ: u32 = 1 << 14;
    pub const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
    pub const MEM_WINDOW: u32 = 1 << 17;
    pub const MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;

    /// Name of each flag, for `rxe info -v`.
    pub const NAMES: [(u32, &str); 12] = [
        (BAD_PKEY_CNTR, "BAD_PKEY_CNTR"),
        (BAD_QKEY_CNTR, "BAD_QKEY_CNTR"),
        (AUTO_PATH_MIG, "AUTO_PATH_MIG"),
        (SHUTDOWN_PORT, "SHUTDOWN_PORT"),
        (SYS_IMAGE_GUID, "SYS_IMAGE_GUID"),
        (RC_RNR_NAK_GEN, "RC_RNR_NAK_GEN"),
        (SRQ_RESIZE, "SRQ_RESIZE"),
        (N_NOTIFY_CQ, "N_NOTIFY_CQ"),
        (MEM_MGT_EXTENSIONS, "MEM_MGT_EXTENSIONS"),
        (MEM_WINDOW, "MEM_WINDOW"),
        (MEM_WINDOW_TYPE_2A, "MEM_WINDOW_TYPE_2A"),
        (MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B"),
    ];
}

/// `struct ibv_device_attr`, the fields that mean something for rxe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: String,
    /// EUI-64 made from the interface's MAC address (big-endian value).
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    /// Memory windows (`ibv_alloc_mw`).
    pub max_mw: u32,
    pub max_pd: u32,
    /// Incoming READ/atomic requests one QP serves at once
    /// (`max_dest_rd_atomic` upper bound).
    pub max_qp_rd_atom: u8,
    /// Outstanding READ/atomic requests one QP may issue
    /// (`max_rd_atomic` upper bound).
    pub max_qp_init_rd_atom: u8,
    pub max_res_rd_atom: u32,
    pub atomic_cap: AtomicCap,
    pub max_ah: u32,
    /// Multicast groups, QPs per group, attachments in all.
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// The largest inline payload of a send work request.
    pub max_inline_data: u32,
    /// The largest message (IBTA: 2^31 bytes).
    pub max_msg_sz: u32,
}

impl DeviceAttr {
    /// rxe's limits: of the same order as kernel rxe's, chosen so that one
    /// process can hold them.
    pub fn rxe(node_guid: u64) -> DeviceAttr {
        DeviceAttr {
            fw_ver: format!("rxe {}", env!("CARGO_PKG_VERSION")),
            node_guid,
            sys_image_guid: node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            // Kernel rxe reports 0xffffff: "no registered vendor".
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: 0x1_0000,
            max_qp_wr: 0x4000,
            device_cap_flags: device_cap::BAD_PKEY_CNTR
                | device_cap::BAD_QKEY_CNTR
                | device_cap::AUTO_PATH_MIG
                | device_cap::SHUTDOWN_PORT
                | device_cap::SYS_IMAGE_GUID
                | device_cap::RC_RNR_NAK_GEN
                | device_cap::SRQ_RESIZE
                | device_cap::N_NOTIFY_CQ
                | device_cap::MEM_WINDOW
                | device_cap::MEM_WINDOW_TYPE_2A
                | device_cap::MEM_WINDOW_TYPE_2B,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 0x4000,
            max_cqe: (1 << 15) - 1,
            max_mr: 0x4_0000,
            // Kernel rxe's limit too.
            max_mw: 0x1_0000,
            max_pd: 0x7ffc,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_res_rd_atom: 0x3f000,
            atomic_cap: AtomicCap::Hca,
            max_ah: 0x7ffc,
            max_mcast_grp: rxe_core::transport::MAX_MCAST_GROUPS as u32,
            max_mcast_qp_attach: rxe_core::transport::MAX_MCAST_QPS_PER_GROUP as u32,
            max_total_mcast_qp_attach: rxe_core::transport::MAX_MCAST_TOTAL_ATTACHES as u32,
            max_srq: 0x4000,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            max_inline_data: 400,
            max_msg_sz: 0x8000_0000,
        }
    }
}

/// `ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// No usable address (the interface is down or its address went away).
    Down,
    Active,
}

impl PortState {
    /// The name `ibv_devinfo` prints.
    pub fn ibv_name(self) -> &'static str {
        match self {
            PortState::Down => "PORT_DOWN (1)",
            PortState::Active => "PORT_ACTIVE (4)",
        }
    }
}

/// One entry of the GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GidEntry {
    pub index: u8,
    pub gid: Gid,
    /// Always RoCEv2: rxe speaks only RoCEv2.
    pub gid_type: GidType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    RoceV2,
}

/// `struct ibv_port_attr`, the fields that mean something for rxe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: PathMtu,
    /// The largest IB MTU whose RoCE packet fits the interface's MTU.
    pub active_mtu: PathMtu,
    /// The interface's own MTU, in bytes.
    pub netdev_mtu: u32,
    pub gid_tbl_len: u16,
    pub pkey_tbl_len: u16,
    pub max_msg_sz: u32,
    pub lid: u16,
    pub sm_lid: u16,
    /// `IBV_WIDTH_*`: 1 for 1X.
    pub active_width: u8,
    /// `IBV_SPEED_*`: 1 for 2.5 Gb/s (SDR). A software device has no lane
    /// speed; kernel rxe derives one from the Ethernet link, which loopback
    /// does not have.
    pub active_speed: u8,
    pub link_layer: LinkLayer,
    /// Name of the network interface the port is on.
    pub netdev: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    Ethernet,
}
