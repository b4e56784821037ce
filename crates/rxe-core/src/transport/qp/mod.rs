//! What a QP is, apart from its two directions: its attributes, the Modify
//! QP rules that change them, and the state both the send side and the
//! receive side of one QP read and write.
//!
//! - [`attr`]: QP types, states, path MTUs, access flags, address vectors,
//!   the attribute limits and the two timers that attributes encode.
//! - [`modify`]: Modify QP as a pure function over an immutable
//!   [`QpConfig`], with the IBTA table of transitions and of required and
//!   optional attributes per transition.
//! - [`common`]: [`QpInit`], [`QpCommon`] (identity, configuration,
//!   completions, events, the fatal-error signal) and [`AsyncEvent`].

mod attr;
mod common;
mod modify;

pub use attr::{
    local_ack_timeout, qkey_is_controlled, rnr_timer, AccessFlags, AddressVector, AltPath, Attr,
    AttrMask, MigState, PathMtu, QpAttr, QpState, QpType, GSI_QKEY, MAX_FLOW_LABEL,
    MAX_MIN_RNR_TIMER, MAX_QPN, MAX_RETRY_CNT, MAX_RNR_RETRY, MAX_SL, MAX_TIMEOUT,
};
pub use common::{AsyncEvent, QpCommon, QpInit};
pub use modify::{modify, transition, ModifyError, QpCaps, QpConfig, Transition};
