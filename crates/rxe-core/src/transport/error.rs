//! The errors of the engine's calls, in one place: what a post refuses
//! ([`PostError`]) and what the other endpoint calls refuse
//! ([`EndpointError`]). The shared receive queues return `EndpointError`
//! too, so the SRQ code and the endpoint both depend on this module and not
//! on each other.
//!
//! Errors that belong to one piece of the engine stay with it, so that this
//! module depends on nothing but them: `ModifyError` with the Modify QP
//! rules (`qp`, which `EndpointError::Modify` carries), `MemError` with the
//! memory trait, `PsnOutOfRange` with `Psn`.

use crate::transport::multicast::McastError;
use crate::transport::qp::{ModifyError, QpType};

/// Why a post was refused; nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("no QP with number {0:#x}")]
    NoSuchQp(u32),
    #[error("the QP's state does not accept this post")]
    BadState,
    #[error("the work queue is full ({depth} entries)")]
    QueueFull { depth: u32 },
    #[error("{given} scatter/gather entries, at most {max}")]
    TooManySges { given: usize, max: u32 },
    #[error("{given} bytes of inline data, at most {max}")]
    InlineTooLarge { given: usize, max: u32 },
    #[error("the operation is not supported on this QP type")]
    OpNotSupported,
    #[error("a UD send needs a destination (wr.ud)")]
    MissingUdDest,
    #[error("message of {len} bytes exceeds the limit of {max}")]
    MessageTooLarge { len: u64, max: u64 },
    #[error("an atomic needs exactly one 8-byte SGE and an 8-byte aligned address")]
    BadAtomic,
    #[error("a FLUSH carries no data, a placement type (global visibility, persistence or both) and a selectivity level (range or region)")]
    BadFlush,
    #[error("no SRQ with number {0:#x}")]
    NoSuchSrq(u32),
    #[error("the QP takes its receives from an SRQ: post them there")]
    QpHasSrq,
}

/// Why an endpoint call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("no QP with number {0:#x}")]
    NoSuchQp(u32),
    #[error("the GSI QP (QP1) exists already")]
    GsiExists,
    #[error("no free QP number")]
    OutOfQpns,
    #[error(transparent)]
    Modify(#[from] ModifyError),
    #[error("no SRQ with number {0:#x}")]
    NoSuchSrq(u32),
    #[error("SRQ {srqn:#x} is used by {qps} QP(s)")]
    SrqInUse { srqn: u32, qps: usize },
    #[error("max_wr is smaller than the number of receives queued on the SRQ")]
    SrqResize,
    #[error("SRQ limit {srq_limit} is larger than max_wr {max_wr}")]
    SrqLimitTooLarge { srq_limit: u32, max_wr: u32 },
    #[error("invalid SRQ attribute: {0}")]
    InvalidSrqAttr(&'static str),
    #[error("a {0} QP cannot use a shared receive queue")]
    SrqNotSupported(QpType),
    #[error("no free SRQ number")]
    OutOfSrqns,
    #[error("only UD QPs join multicast groups, not {0}")]
    McastNotUd(QpType),
    #[error("multicast: {0}")]
    Mcast(#[from] McastError),
    #[error("QP {0:#x} is still attached to a multicast group")]
    McastAttached(u32),
}
