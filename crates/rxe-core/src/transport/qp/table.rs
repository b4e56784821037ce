//! The Modify QP transition table: which transitions exist for each QP
//! type and which attributes each one requires and which it allows (IBTA
//! 10.3.1 for the states, 11.2.5.2 for Modify QP). [`modify`](super::modify())
//! checks a call against it.
//!
//! Its facts come from the IBTA's list of required and optional attributes
//! per transition, as the Linux RDMA core encodes it in its
//! `qp_state_table` (drivers/infiniband/core/verbs.c), which is what
//! `ibv_modify_qp` meets on Linux. It differs from that table
//! in two places, both on the IBTA's side:
//!
//! - RESET→ERR is allowed. The IBTA lets Modify QP take a QP to Error from
//!   any state; the Linux core table leaves that one transition out (so no
//!   Linux application relies on it either way).
//! - SQE→RTS does not exist for RC. The Send Queue Error state is for UD, UC
//!   and GSI QPs; an RC QP whose send fails goes to Error (see
//!   [`QpConfig::enter_send_queue_error`](super::QpConfig::enter_send_queue_error)), so it is never in SQE. Linux
//!   lists the transition as valid with no attributes for every type.
//!
//! And it is stricter in one: an attribute mask with `CUR_STATE` must name
//! the state the QP is in. Linux takes the consumer's word for it and checks
//! the transition from the claimed state instead.

use super::attr::{QpState, QpType};
use super::mask::AttrMask;

/// The attributes one transition requires and the ones it also accepts.
/// `STATE` is in neither set: it is always accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    pub required: AttrMask,
    pub optional: AttrMask,
}

impl Transition {
    pub(super) const NOTHING: Transition = Transition {
        required: AttrMask::empty(),
        optional: AttrMask::empty(),
    };

    /// Everything a mask may hold on this transition.
    pub fn allowed(&self) -> AttrMask {
        self.required | self.optional | AttrMask::STATE
    }
}

/// The Modify QP transition `from` → `to` for a QP of type `qp_type`, or
/// `None` if there is none. See the module documentation for the source.
pub fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<Transition> {
    use AttrMask as M;
    use QpState::*;
    use QpType::*;

    let t = |required: AttrMask, optional: AttrMask| Some(Transition { required, optional });
    let opt = |optional: AttrMask| t(M::empty(), optional);

    match (from, to) {
        // Any state may be reset or put in error, with no other attribute.
        (_, Reset) | (_, Error) => Some(Transition::NOTHING),

        (Reset, Init) => match qp_type {
            Rc | Uc => t(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, M::empty()),
            Ud => t(M::PKEY_INDEX | M::PORT | M::QKEY, M::empty()),
            // QP1 is bound to its port when it is created.
            Gsi => t(M::PKEY_INDEX | M::QKEY, M::empty()),
        },

        (Init, Init) => match qp_type {
            Rc | Uc => opt(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            Ud => opt(M::PKEY_INDEX | M::PORT | M::QKEY),
            Gsi => opt(M::PKEY_INDEX | M::QKEY),
        },

        (Init, Rtr) => {
            let uc = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            let connected_opt = M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX;
            match qp_type {
                Rc => t(uc | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER, connected_opt),
                Uc => t(uc, connected_opt),
                Ud | Gsi => opt(M::PKEY_INDEX | M::QKEY),
            }
        }

        (Rtr, Rts) => match qp_type {
            Rc => t(
                M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
            ),
            Uc => t(
                M::SQ_PSN,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
            ),
            Ud | Gsi => t(M::SQ_PSN, M::CUR_STATE | M::QKEY),
        },

        // Changing attributes while running, and resuming after a drain.
        (Rts, Rts) | (Sqd, Rts) => match qp_type {
            Rc => opt(M::CUR_STATE
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE),
            Uc => opt(M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE),
            Ud | Gsi => opt(M::CUR_STATE | M::QKEY),
        },

        (Rts, Sqd) => opt(M::EN_SQD_ASYNC_NOTIFY),

        // With the send queue drained, most of the path may be changed.
        (Sqd, Sqd) => match qp_type {
            Rc => opt(M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE),
            Uc => opt(M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE),
            Ud | Gsi => opt(M::PKEY_INDEX | M::QKEY),
        },

        // Recovering from a send error; RC has no SQE state.
        (Sqe, Rts) => match qp_type {
            Rc => None,
            Uc => opt(M::CUR_STATE | M::ACCESS_FLAGS),
            Ud | Gsi => opt(M::CUR_STATE | M::QKEY),
        },

        _ => None,
    }
}
