//! The transport engine, sans-IO: packets and time values in, packets and
//! deadlines out, with no sockets, threads, clocks or global state.
//!
//! So far it holds the two pieces everything else stands on:
//!
//! - [`psn`]: 24-bit packet sequence numbers, their wrap-around arithmetic,
//!   the half-space comparison that requesters and responders use, and the
//!   responder's classification of a request PSN (expected, duplicate, ahead).
//! - [`qp_attr`] and [`qp_state`]: QP types, states and attributes, and
//!   Modify QP as a pure function that enforces the IBTA table of required and
//!   optional attributes per transition, with typed errors.
//!
//! IBTA section numbers cited here refer to the InfiniBand Architecture
//! Specification Volume 1; some were taken from secondary sources and are
//! marked where they could not be checked against the text.

mod completer;
pub mod counters;
pub mod endpoint;
pub mod memory;
pub mod psn;
pub mod qp;
pub mod qp_attr;
pub mod qp_state;
pub mod requester;
pub mod responder;
pub mod time;
pub mod wr;

pub use counters::{Counter, Counters};
pub use endpoint::{pkeys_match, Endpoint, EndpointError, GSI_QPN};
pub use memory::{validate, AtomicOp, Key, MemError, MemoryAccess, Region, RegionInfo, VecMemory};
pub use psn::{classify_request, Psn, PsnOutOfRange, RequestPsn};
pub use qp::{AsyncEvent, QpCommon, QpInit, RecvMeta, Transmit};
pub use qp_attr::{
    local_ack_timeout, rnr_timer, AccessFlags, AddressVector, AltPath, Attr, AttrMask, MigState,
    PathMtu, QpAttr, QpState, QpType, GSI_QKEY,
};
pub use qp_state::{modify, transition, ModifyError, QpCaps, QpConfig, Transition};
pub use time::Instant;
pub use wr::{
    PostError, RecvWr, SendData, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
    WorkQueue,
};
