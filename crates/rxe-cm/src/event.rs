//! What the CM endpoint tells its consumer, and the parameters of its calls.

use crate::mad::{
    PathRepr, RejRepr, RejectReason, RepRepr, ReqRepr, SidrRepRepr, SidrReqRepr, SidrStatus,
};
use crate::qp_attrs::ConnQpType;
use rxe_core::Gid;

/// A connection (or SIDR request), named by its Local Communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(pub u32);

/// Where a MAD comes from or goes to: a port's GID and a QP on it (QP1,
/// the GSI, for every CM MAD; the QP1 agent adds Q_Key 0x80010000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MadAddr {
    pub gid: Gid,
    pub qpn: u32,
}

impl MadAddr {
    /// The GSI (QP1) of the port with `gid`.
    pub const fn gsi(gid: Gid) -> MadAddr {
        MadAddr {
            gid,
            qpn: crate::GSI_QPN,
        }
    }
}

/// A CM event, in the order the protocol produced them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// Passive side: a REQ for a service we listen on. Answer with
    /// `accept`, `reject` or `send_mra`.
    ConnectRequest {
        id: CommId,
        from: MadAddr,
        req: Box<ReqRepr>,
    },
    /// Active side: the REP arrived. Answer with `send_rtu` (or `reject`, `send_mra`).
    ConnectResponse { id: CommId, rep: Box<RepRepr> },
    /// The connection is up (active: RTU sent; passive: RTU received, or `establish`).
    Established { id: CommId },
    /// The peer refused (or gave up with reason Timeout).
    Rejected {
        id: CommId,
        reason: RejectReason,
        rej: Box<RejRepr>,
    },
    /// Our REQ or REP ran out of retries; a REJ with reason Timeout was sent.
    Unreachable { id: CommId },
    /// The peer acknowledged our message and asked for more time.
    MraReceived { id: CommId },
    /// The connection is down (the peer's DREQ, the DREP to ours, or our
    /// DREQ ran out of retries). TimeWait follows.
    Disconnected { id: CommId },
    /// TimeWait is over; the ID is gone.
    TimewaitExit { id: CommId },
    /// A SIDR_REQ for a service we listen on: answer with `sidr_reply`.
    SidrRequest {
        id: CommId,
        from: MadAddr,
        req: Box<SidrReqRepr>,
    },
    /// The SIDR_REP to our SIDR_REQ.
    SidrResponse { id: CommId, rep: Box<SidrRepRepr> },
}

impl CmEvent {
    pub fn id(&self) -> CommId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::MraReceived { id }
            | CmEvent::Disconnected { id }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::SidrResponse { id, .. } => *id,
        }
    }
}

/// What `connect` puts in the REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    pub service_id: u64,
    pub qp_type: ConnQpType,
    pub qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 3 bits.
    pub retry_count: u8,
    /// 3 bits; 7 is forever.
    pub rnr_retry_count: u8,
    /// IBTA MTU code, 1..=5.
    pub path_mtu: u8,
    pub pkey: u16,
    pub srq: bool,
    /// The primary path; its Local ACK Timeout is filled in by the endpoint
    /// from its packet lifetime and CA ACK delay.
    pub path: PathRepr,
    /// At most 92 bytes (the IP CM header and 56 bytes of user data, for rdma_cm).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// An RC connection from `local_gid` to `remote_gid` with the values
    /// Linux's rdma_cm sends (rping.pcap frame 1): responder resources and
    /// initiator depth 1, retry and RNR retry 7, MTU 1024, the default
    /// P_Key, permissive LIDs, hop limit 64.
    pub fn rc(
        service_id: u64,
        qpn: u32,
        starting_psn: u32,
        local_gid: Gid,
        remote_gid: Gid,
    ) -> Self {
        ConnectParams {
            service_id,
            qp_type: ConnQpType::Rc,
            qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            pkey: 0xffff,
            srq: false,
            path: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid,
                remote_gid,
                hop_limit: 64,
                ..PathRepr::default()
            },
            private_data: Vec::new(),
        }
    }
}

/// What `accept` puts in the REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    pub qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    pub fn new(qpn: u32, starting_psn: u32) -> Self {
        AcceptParams {
            qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// What `sidr_request` puts in the SIDR_REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    pub to: MadAddr,
    pub service_id: u64,
    pub pkey: u16,
    /// At most 216 bytes.
    pub private_data: Vec<u8>,
}

/// What `sidr_reply` puts in the SIDR_REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReply {
    pub status: SidrStatus,
    pub qpn: u32,
    pub qkey: u32,
    /// At most 136 bytes.
    pub private_data: Vec<u8>,
}
