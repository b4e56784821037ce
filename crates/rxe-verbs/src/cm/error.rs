//! Why a CM call was refused.

use std::net::IpAddr;

/// The errors of [`super::CmId`]'s calls.
#[derive(Debug, thiserror::Error)]
pub enum CmApiError {
    #[error(transparent)]
    Verbs(#[from] crate::error::VerbsError),
    #[error(transparent)]
    Connect(#[from] crate::connect::ConnectError),
    #[error(transparent)]
    Cm(#[from] rxe_cm::CmError),
    #[error(transparent)]
    IpCm(#[from] rxe_cm::ip_cm::IpCmError),
    #[error("no rxe device for {0}")]
    NoDevice(IpAddr),
    #[error("{0} first")]
    NotReady(&'static str),
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    #[error("the QP is on another device than the ID")]
    WrongDevice,
    #[error("{0} is not a multicast address")]
    NotMulticast(IpAddr),
    #[error("the ID has joined {0} already")]
    AlreadyJoined(IpAddr),
    #[error("the ID has not joined {0}")]
    NotJoined(IpAddr),
}
