//! The IBTA Communication Manager for rxe: what `rdma_connect`,
//! `rdma_listen` and `rdma_accept` speak on QP1.
//!
//! - [`mad`]: the CM's management datagrams as zero-copy views with field
//!   tables (for `rxe dissect`) and owned `Repr`s with `parse`/`emit`;
//! - [`ip_cm`]: the RDMA IP CM service (ServiceIDs of port spaces, the
//!   addressing header in the REQ's private data);
//! - [`endpoint`]: the connection state machines, sans-IO in quinn-proto's
//!   shape (`handle`, `poll_transmit`, `poll_timeout`, `handle_timeout`,
//!   `poll_event`), with no sockets, threads or clock.
//!
//! The protocol is explained in `docs/rdma-cm.md`.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod counters;
pub mod endpoint;
pub mod event;
pub mod ip_cm;
pub mod mad;
pub mod qp_attrs;
pub mod timer;

pub use counters::{CmCounter, CmCounters};
pub use endpoint::{CmConfig, CmEndpoint, CmError, CmState};
pub use event::{AcceptParams, CmEvent, CommId, ConnectParams, MadAddr, SidrParams, SidrReply};
pub use qp_attrs::{ConnQpType, PathAttrs, QpAttrs};

/// The QPN of the general services interface, where CM MADs go (IBTA 3.5.1,
/// not checked against the text).
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (not checked against the text; every MAD of
/// rping.pcap carries it).
pub const GSI_QKEY: u32 = 0x8001_0000;
