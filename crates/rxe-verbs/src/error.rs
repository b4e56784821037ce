//! Every way a verbs call can fail. Each variant says what was wrong, so
//! that a caller can act on it (as an errno from libibverbs would, but
//! typed).

use rxe_core::transport::{EndpointError, MemError, ModifyError, PostError};

/// Which kind of object an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Pd,
    Ah,
    Mr,
    Cq,
    Qp,
    Srq,
    Mw,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjectKind::Pd => "PD",
            ObjectKind::Ah => "AH",
            ObjectKind::Mr => "MR",
            ObjectKind::Cq => "CQ",
            ObjectKind::Qp => "QP",
            ObjectKind::Srq => "SRQ",
            ObjectKind::Mw => "MW",
        })
    }
}

/// Why a verbs call failed. Nothing was changed by a failed call.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("device {0} has been removed")]
    DeviceRemoved(String),
    #[error("no device named {0}")]
    NoSuchDevice(String),
    #[error("a device named {0} exists already")]
    NameInUse(String),
    #[error("{0} is not an address of this host")]
    AddressNotLocal(std::net::IpAddr),
    #[error("no network interface named {0}")]
    NoSuchInterface(String),
    #[error("interface {0} has no usable IP address")]
    NoAddress(String),
    #[error("a device on a list of addresses needs at least one")]
    NoAddresses,
    #[error("UDP port {port} on {addr} is busy (another RoCE device or program holds it)")]
    PortBusy { addr: std::net::IpAddr, port: u16 },
    #[error("network I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Opening or writing a packet capture (`Device::set_capture`) failed.
    /// Boxed, so that this API names no capture crate's type.
    #[error("capture: {0}")]
    Capture(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    #[error("this {0} has been destroyed")]
    Destroyed(ObjectKind),
    #[error("the {kind} is still in use by {users} other object(s) ({what})")]
    Busy {
        kind: ObjectKind,
        users: usize,
        what: &'static str,
    },
    #[error("the {0} belongs to another device")]
    WrongDevice(ObjectKind),
    #[error("the {a} and the {b} belong to different protection domains")]
    PdMismatch { a: ObjectKind, b: ObjectKind },
    #[error("device limit reached: at most {max} {kind}s")]
    LimitReached { kind: ObjectKind, max: u32 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("port {0} does not exist (this device has port 1)")]
    NoSuchPort(u8),
    #[error("GID index {0} is empty or out of range")]
    NoSuchGid(u8),
    #[error("P_Key index {0} is out of range")]
    NoSuchPkey(u16),
    #[error("the completion queue overran: completions were lost and the CQ is in error")]
    CqOverrun,
    #[error("waiting for a completion event timed out")]
    Timeout,
    #[error(transparent)]
    Post(#[from] PostError),
    #[error(transparent)]
    Modify(#[from] ModifyError),
    #[error(transparent)]
    Endpoint(EndpointError),
    #[error("memory registration: {0}")]
    Memory(#[from] MemError),
}

pub type Result<T, E = VerbsError> = std::result::Result<T, E>;

impl From<EndpointError> for VerbsError {
    /// A refused Modify QP is reported as [`VerbsError::Modify`], whichever
    /// layer found it.
    fn from(e: EndpointError) -> VerbsError {
        match e {
            EndpointError::Modify(m) => VerbsError::Modify(m),
            other => VerbsError::Endpoint(other),
        }
    }
}

impl From<rxe_pcap::CaptureError> for VerbsError {
    fn from(e: rxe_pcap::CaptureError) -> Self {
        VerbsError::Capture(Box::new(e))
    }
}
