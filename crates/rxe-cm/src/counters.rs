//! Per-reason counters of the CM endpoint, in the manner of the transport's
//! (`rxe_core::transport::counters`): every MAD refused is counted under
//! the reason it was refused for, and every answer the state machine gives
//! without a consumer's call is counted too.

use core::fmt;

use crate::mad::MadError;

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// One counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CmCounter {
            $( $(#[$doc])* $variant, )*
        }

        impl CmCounter {
            /// Every counter, in printing order.
            pub const ALL: &'static [CmCounter] = &[$(CmCounter::$variant,)*];
            pub const COUNT: usize = CmCounter::ALL.len();

            /// The stable name printed for the counter.
            pub const fn name(self) -> &'static str {
                match self {
                    $( CmCounter::$variant => $name, )*
                }
            }
        }
    };
}

counters! {
    /// MADs handed to `handle`.
    RcvdMads => "cm_rcvd_mads",
    /// MADs given out by `poll_transmit` (first sends and resends).
    SentMads => "cm_sent_mads",
    /// Resends after a response timeout.
    Retransmits => "cm_retransmits",
    /// Connection attempts, disconnects and SIDR requests that ran out of retries.
    Timeouts => "cm_timeouts",
    /// Dropped: fewer than 256 bytes.
    DropTruncated => "cm_drop_truncated",
    /// Dropped: a header field (version, class, method) or message code not accepted.
    DropBadField => "cm_drop_bad_field",
    /// Dropped: an attribute that is not a CM message this endpoint handles (LAP, APR, ...).
    DropUnknownAttribute => "cm_drop_unknown_attribute",
    /// Dropped: names a local communication ID that does not exist.
    DropUnknownCommId => "cm_drop_unknown_comm_id",
    /// Dropped: the remote communication ID does not match the connection's.
    DropWrongRemoteCommId => "cm_drop_wrong_remote_comm_id",
    /// Dropped: a message the connection's state does not expect.
    DropWrongState => "cm_drop_wrong_state",
    /// Dropped: a duplicate REQ after the connection is up (or one whose
    /// MRA could not be sent).
    DropDuplicateReq => "cm_drop_duplicate_req",
    /// Dropped: a REQ or SIDR_REQ whose listener's backlog was full (the
    /// requester's resend may find room).
    DropBacklogFull => "cm_drop_backlog_full",
    /// Dropped: a duplicate REP in a state that has no answer for it.
    DropDuplicateRep => "cm_drop_duplicate_rep",
    /// Dropped: a duplicate RTU.
    DropDuplicateRtu => "cm_drop_duplicate_rtu",
    /// Dropped: a DREP that answers no DREQ of ours (late, or simultaneous disconnect).
    DropUnexpectedDrep => "cm_drop_unexpected_drep",
    /// Dropped: a DREQ whose Remote QPN is not the connection's local QP.
    DropDreqWrongQpn => "cm_drop_dreq_wrong_qpn",
    /// Dropped: a REJ for no connection.
    DropUnknownRej => "cm_drop_unknown_rej",
    /// Dropped: an MRA of a message that is not outstanding.
    DropUnexpectedMra => "cm_drop_unexpected_mra",
    /// Dropped: a SIDR_REP for no outstanding SIDR_REQ.
    DropUnknownSidrRep => "cm_drop_unknown_sidr_rep",
    /// Dropped: a duplicate SIDR_REQ while the consumer decides.
    DropDuplicateSidrReq => "cm_drop_duplicate_sidr_req",
    /// Answered: REJ Invalid ServiceID to a REQ nobody listens for.
    RejInvalidServiceId => "cm_rej_invalid_service_id",
    /// Answered: REJ Stale Connection (a REQ for a connection in TimeWait, or for a connected QP).
    RejStaleConn => "cm_rej_stale_conn",
    /// Answered: REJ Invalid Communication ID to a REP for no REQ of ours.
    RejInvalidCommId => "cm_rej_invalid_comm_id",
    /// Answered: REJ to a REQ with a transport type or MTU this endpoint does not take.
    RejInvalidReq => "cm_rej_invalid_req",
    /// Answered: DREP to a DREQ for no connection.
    DrepUnknown => "cm_drep_unknown",
    /// Answered: the REP again, to a duplicate REQ.
    DupReqRepResent => "cm_dup_req_rep_resent",
    /// Answered: the MRA again, to a duplicate REQ or REP.
    DupMraResent => "cm_dup_mra_resent",
    /// Answered: a first MRA, to a duplicate REQ or REP while the consumer
    /// had not answered the first yet.
    DupMraSent => "cm_dup_mra_sent",
    /// Answered: the RTU again, to a duplicate REP.
    DupRepRtuResent => "cm_dup_rep_rtu_resent",
    /// Answered: the DREP again, to a duplicate DREQ.
    DupDreqDrepResent => "cm_dup_dreq_drep_resent",
    /// Answered: the SIDR_REP again, to a duplicate SIDR_REQ.
    DupSidrRepResent => "cm_dup_sidr_rep_resent",
    /// Answered: SIDR_REP "ServiceID not supported" to a SIDR_REQ nobody listens for.
    SidrUnsupported => "cm_sidr_unsupported",
}

impl CmCounter {
    /// The drop counter of a parse error.
    pub fn for_error(e: &MadError) -> CmCounter {
        match e {
            MadError::Truncated { .. } => CmCounter::DropTruncated,
            MadError::BadField { .. } | MadError::PrivateDataTooLong { .. } => {
                CmCounter::DropBadField
            }
            MadError::UnknownAttribute { .. } => CmCounter::DropUnknownAttribute,
        }
    }
}

/// The counters of one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmCounters([u64; CmCounter::COUNT]);

impl Default for CmCounters {
    fn default() -> Self {
        CmCounters([0; CmCounter::COUNT])
    }
}

impl CmCounters {
    pub fn get(&self, c: CmCounter) -> u64 {
        self.0[c as usize]
    }
    pub(crate) fn bump(&mut self, c: CmCounter) {
        self.0[c as usize] = self.0[c as usize].saturating_add(1);
    }
    /// Every counter with its value, in printing order.
    pub fn iter(&self) -> impl Iterator<Item = (CmCounter, u64)> + '_ {
        CmCounter::ALL.iter().map(|&c| (c, self.get(c)))
    }
    /// The sum of the drop counters.
    pub fn dropped(&self) -> u64 {
        self.iter()
            .filter(|(c, _)| c.name().starts_with("cm_drop_"))
            .map(|(_, v)| v)
            .sum()
    }
}

impl fmt::Display for CmCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (c, v) in self.iter() {
            writeln!(f, "{:<32} {v}", c.name())?;
        }
        Ok(())
    }
}
