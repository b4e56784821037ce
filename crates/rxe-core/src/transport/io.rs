//! What crosses the sans-IO boundary besides the packet bytes: the
//! [`Transmit`] that `poll_transmit` returns with each packet it wrote, and
//! the [`RecvMeta`] the device hands to `Endpoint::handle` with each packet
//! it received. Both sides of a QP use them, so they live in neither.

use crate::transport::qp::AddressVector;
use crate::wire::grh;
use crate::wire::Gid;

/// A packet the engine wrote into the caller's buffer: BTH through pad,
/// then 4 zero bytes where the device puts the ICRC once it knows the IP
/// and UDP headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub len: usize,
    /// Where it goes: the QP's path (RC/UC) or the work request's (UD).
    pub dest: AddressVector,
    /// The sending QP, from which the device derives the UDP source port.
    pub src_qpn: u32,
}

/// What the device knows of a received packet beyond its transport bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Source and destination GIDs (IPv4-mapped for RoCEv2 over IPv4).
    pub sgid: Gid,
    pub dgid: Gid,
    /// The 40 bytes a UD receive buffer starts with: for IPv4, 20 zero
    /// bytes then the IPv4 header; for IPv6 (and RoCEv1) the IPv6 header or
    /// GRH (IBTA 11.4.1.2; RoCEv2 Annex A17.4.5.1).
    pub grh: [u8; grh::HEADER_LEN],
    /// The IP header's ECN field said Congestion Experienced (RFC 3168:
    /// a switch on the path was congested). The ICRC does not cover it
    /// (the TOS / traffic class is masked), so a marked packet is intact.
    pub ce: bool,
}

impl RecvMeta {
    /// Metadata for a packet between two GIDs with an all-zero GRH space.
    pub fn between(sgid: Gid, dgid: Gid) -> RecvMeta {
        RecvMeta {
            sgid,
            dgid,
            grh: [0; grh::HEADER_LEN],
            ce: false,
        }
    }
}
