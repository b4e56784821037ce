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

pub mod ip_cm;
pub mod mad;
