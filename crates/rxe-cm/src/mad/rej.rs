//! REJ, Reject (attribute 0x0012; IBTA 12.6.7, not checked against the
//! text): refuses a REQ or a REP, or ends a connection attempt that timed
//! out, with a reason code, up to 72 bytes of Additional Rejection
//! Information (ARI) and 148 bytes of private data.
//!
//! ```text
//!  0 Local Communication ID   4 Remote Communication ID
//!  8 Message REJected (2) resv (6) | Reject Info Length (7) resv (1)
//! 10 Reason (16)             12 ARI (72)         84 PrivateData (148)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const PRIVATE_DATA_LEN: usize = 148;
/// Bytes of Additional Rejection Information.
pub const ARI_LEN: usize = 72;

cm_message! {
    /// A zero-copy view of a REJ.
    Rej, name: "REJ",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's identifier (0 if it has none)"),
        remote_comm_id / set_remote_comm_id: u32 = ("Remote Communication ID", "remote_comm_id", 32, 32, "the rejected message's Local Communication ID"),
        message_rejected / set_message_rejected: u8 = ("Message REJected", "message_rejected", 64, 2, "0 REQ, 1 REP, 2 no message (a timeout or an error later)"),
        resv_66 / set_resv_66: u8 = ("Reserved", "resv_66", 66, 6, "reserved"),
        reject_info_length / set_reject_info_length: u8 = ("Reject Info Length", "reject_info_length", 72, 7, "bytes of the ARI that are meant"),
        resv_79 / set_resv_79: u8 = ("Reserved", "resv_79", 79, 1, "reserved"),
        reason / set_reason: u16 = ("Reason", "reason", 80, 16, "why (IBTA reason code)"),
    ],
    blobs: [
        ari / ari_mut = ("Additional Rejection Information", "ari", 12, 72, "details for the reason (a GUID, a path field ...)"),
        private_data / private_data_mut = ("PrivateData", "private_data", 84, 148, "consumer data"),
    ],
}

/// Which message a REJ refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageRejected {
    Req = 0,
    Rep = 1,
    /// Neither: a timeout or an error after the REP.
    Other = 2,
}

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, )*) => {
        /// REJ reason codes (IBTA 12.6.7.2, Table 112; not checked against
        /// the text: the numbers are the ones Linux's CM uses).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum RejectReason {
            $( $(#[$doc])* $variant, )*
            /// A code this table does not name.
            Other(u16),
        }

        impl RejectReason {
            pub const fn code(self) -> u16 {
                match self {
                    $( RejectReason::$variant => $code, )*
                    RejectReason::Other(c) => c,
                }
            }

            pub const fn from_code(code: u16) -> RejectReason {
                match code {
                    $( $code => RejectReason::$variant, )*
                    c => RejectReason::Other(c),
                }
            }

            /// The reason's name in words, `None` for an unknown code.
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $( RejectReason::$variant => Some(stringify!($variant)), )*
                    RejectReason::Other(_) => None,
                }
            }
        }
    };
}

reasons! {
    NoQp = 1,
    NoEec = 2,
    NoResources = 3,
    /// The sender's timer ran out (ARI: its CA GUID).
    Timeout = 4,
    Unsupported = 5,
    InvalidCommId = 6,
    InvalidCommInstance = 7,
    /// Nobody listens on the REQ's ServiceID.
    InvalidServiceId = 8,
    InvalidTransportType = 9,
    /// The REQ names a QP or communication already connected or in TimeWait.
    StaleConn = 10,
    RdcNotExist = 11,
    InvalidGid = 12,
    InvalidLid = 13,
    InvalidSl = 14,
    InvalidTrafficClass = 15,
    InvalidHopLimit = 16,
    InvalidPacketRate = 17,
    InvalidAltGid = 18,
    InvalidAltLid = 19,
    InvalidAltSl = 20,
    InvalidAltTrafficClass = 21,
    InvalidAltHopLimit = 22,
    InvalidAltPacketRate = 23,
    PortCmRedirect = 24,
    PortRedirect = 25,
    InvalidMtu = 26,
    InsufficientRespResources = 27,
    /// The consumer refused (rdma_reject).
    ConsumerDefined = 28,
    InvalidRnrRetry = 29,
    DuplicateLocalCommId = 30,
    InvalidClassVersion = 31,
    InvalidFlowLabel = 32,
    InvalidAltFlowLabel = 33,
    VendorOptionNotSupported = 35,
}

/// A REJ as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MessageRejected,
    /// 7 bits; at most [`ARI_LEN`] is meaningful.
    pub reject_info_length: u8,
    pub reason: RejectReason,
    pub ari: [u8; ARI_LEN],
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl RejRepr {
    /// Reads a REJ; Message REJected 3 is reserved and refused. An ARI
    /// length over 72 is kept as carried (the ARI itself is always 72 bytes).
    pub fn parse<T: AsRef<[u8]>>(v: &Rej<T>) -> Result<Self, MadError> {
        require_data("REJ", v.buffer.as_ref())?;
        let message_rejected = match v.message_rejected() {
            0 => MessageRejected::Req,
            1 => MessageRejected::Rep,
            2 => MessageRejected::Other,
            x => {
                return Err(MadError::BadField {
                    message: "REJ",
                    field: "Message REJected",
                    value: x.into(),
                })
            }
        };
        let mut ari = [0u8; ARI_LEN];
        let a = v.ari();
        ari[..a.len().min(ARI_LEN)].copy_from_slice(&a[..a.len().min(ARI_LEN)]);
        Ok(RejRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_rejected,
            reject_info_length: v.reject_info_length(),
            reason: RejectReason::from_code(v.reason()),
            ari,
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rej<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_rejected(self.message_rejected as u8);
        v.set_reject_info_length(self.reject_info_length & 0x7f);
        v.set_reason(self.reason.code());
        let a = v.ari_mut();
        let n = a.len().min(ARI_LEN);
        a[..n].copy_from_slice(&self.ari[..n]);
        let pd = v.private_data_mut();
        let n = pd.len().min(PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::field::{assert_fields_isolated, assert_layout};
    use super::*;

    #[test]
    fn layout() {
        assert_layout::<Rej<&[u8]>>();
        assert_fields_isolated::<Rej<&[u8]>>();
    }

    #[test]
    fn reason_codes_round_trip() {
        for c in 0..=40u16 {
            assert_eq!(RejectReason::from_code(c).code(), c);
        }
        assert_eq!(RejectReason::InvalidServiceId.code(), 8);
        assert_eq!(RejectReason::StaleConn.code(), 10);
        assert_eq!(RejectReason::ConsumerDefined.code(), 28);
        assert_eq!(RejectReason::from_code(34), RejectReason::Other(34));
    }
}
