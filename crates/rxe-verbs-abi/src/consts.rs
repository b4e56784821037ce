//! Enum values of `<infiniband/verbs.h>` (checked: `abi/enums.txt`).

pub const IBV_NODE_CA: i32 = 1;
pub const IBV_TRANSPORT_IB: i32 = 0;

pub const IBV_WC_SEND: u32 = 0;
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_COMP_SWAP: u32 = 3;
pub const IBV_WC_FETCH_ADD: u32 = 4;
pub const IBV_WC_BIND_MW: u32 = 5;
pub const IBV_WC_LOCAL_INV: u32 = 6;
/// rdma-core after v44 (v44 leaves 8 free for it, as the kernel's
/// `IB_UVERBS_WC_FLUSH`).
pub const IBV_WC_FLUSH: u32 = 8;
pub const IBV_WC_ATOMIC_WRITE: u32 = 9;
pub const IBV_WC_RECV: u32 = 128;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;

pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const IBV_WR_LOCAL_INV: u32 = 7;
pub const IBV_WR_BIND_MW: u32 = 8;
pub const IBV_WR_ATOMIC_WRITE: u32 = 15;
pub const IBV_WR_SEND_WITH_INV: u32 = 9;

pub const IBV_SEND_FENCE: u32 = 1;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_SOLICITED: u32 = 4;
pub const IBV_SEND_INLINE: u32 = 8;

pub const IBV_WC_GRH: u32 = 1;
pub const IBV_WC_WITH_IMM: u32 = 2;
pub const IBV_WC_WITH_INV: u32 = 8;

pub const IBV_MW_TYPE_1: u32 = 1;
pub const IBV_MW_TYPE_2: u32 = 2;
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 2;
pub const IBV_ACCESS_REMOTE_READ: u32 = 4;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 8;
pub const IBV_ACCESS_MW_BIND: u32 = 16;
pub const IBV_ACCESS_ZERO_BASED: u32 = 32;
pub const IBV_ACCESS_ON_DEMAND: u32 = 64;
pub const IBV_ACCESS_RELAXED_ORDERING: u32 = 1 << 20;
/// rdma-core after v44.
pub const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
pub const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// Bits a provider may ignore (`IBV_ACCESS_OPTIONAL_RANGE`).
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;

pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_ERR: u32 = 6;

pub const IBV_QP_STATE: u32 = 1;
pub const IBV_QP_CUR_STATE: u32 = 2;
pub const IBV_QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
pub const IBV_QP_PORT: u32 = 1 << 5;
pub const IBV_QP_QKEY: u32 = 1 << 6;
pub const IBV_QP_AV: u32 = 1 << 7;
pub const IBV_QP_PATH_MTU: u32 = 1 << 8;
pub const IBV_QP_TIMEOUT: u32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: u32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: u32 = 1 << 11;
pub const IBV_QP_RQ_PSN: u32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const IBV_QP_SQ_PSN: u32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
pub const IBV_QP_DEST_QPN: u32 = 1 << 20;
pub const IBV_QP_CAP: u32 = 1 << 19;
pub const IBV_QP_RATE_LIMIT: u32 = 1 << 25;

pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PATH_MIG: u32 = 6;
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_PORT_ERR: u32 = 10;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
pub const IBV_EVENT_GID_CHANGE: u32 = 18;

pub const IBV_QP_INIT_ATTR_PD: u32 = 1;

pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `ibv_gid_type_sysfs` (driver.h), what `ibv_query_gid_type` returns.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

pub const IBV_FORK_UNNEEDED: u32 = 2;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_ATOMIC_HCA: u32 = 1;

pub const IBV_PORT_DOWN: u32 = 1;
pub const IBV_PORT_ACTIVE: u32 = 4;

/// `ibv_rereg_mr`'s error for bad input.
pub const IBV_REREG_MR_ERR_INPUT: i32 = -1;
