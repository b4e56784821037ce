//! The RDMA connection manager on a device, in librdmacm's shape.
//!
//! - [`gsi`](self) QP1 of the device (created at the first use of the CM);
//! - the agent: the sans-IO `rxe_cm::CmEndpoint` driven with the device's
//!   clock and QP1, its timers on a small thread;
//! - [`resolve`]: IP → GID, device and source address, path MTU;
//! - multicast: `rdma_join_multicast` and `rdma_leave_multicast`, local
//!   on RoCE (no subnet administrator);
//! - [`CmId`] and [`EventChannel`]: `rdma_create_id`, `rdma_resolve_addr`,
//!   `rdma_connect`, `rdma_listen`, `rdma_accept`, `rdma_get_cm_event`...
//!
//! How the pieces fit is in `docs/rdma-cm.md` ("The agent and the API").

pub(crate) mod agent;
mod channel;
mod error;
mod gsi;
mod id;
mod multicast;
mod parked;
mod qp_setup;
pub mod resolve;

pub use agent::{configure, leave, start};
pub use channel::{
    ChannelHook, EventChannel, NextEvent, PeerConnParam, RdmaCmEvent, UdPeer, Unreachable,
};
pub use error::CmApiError;
pub use id::{CmId, ConnParam, RDMA_UDP_QKEY};
pub use rxe_cm::ip_cm::PortSpace;
pub use rxe_cm::CmConfig;
