//! What a QP is, apart from its two directions: its attributes, the Modify
//! QP rules that change them, and the state both the send side and the
//! receive side of one QP read and write.
//!
//! - [`attr`]: QP types, states, path MTUs, access flags, address vectors,
//!   the attribute limits and the two timers that attributes encode.
//! - [`mask`]: the attributes of one Modify QP call ([`QpAttr`]) and the
//!   mask that says which of them it sets.
//! - [`table`]: the IBTA table of transitions and of the attributes each
//!   one requires and allows.
//! - [`modify`](mod@modify): Modify QP as a pure function over an immutable
//!   [`QpConfig`]: the table, then the range checks.
//! - [`migration`]: automatic path migration: the `path_mig_state` rules,
//!   the move to the alternate path, the MigReq bit.
//! - [`common`]: [`QpInit`], [`QpCommon`] (identity, configuration,
//!   completions, events, the fatal-error signal) and [`AsyncEvent`].

mod attr;
mod common;
mod mask;
mod migration;
mod modify;
mod table;

#[cfg(test)]
mod tests;

pub use attr::{
    local_ack_timeout, qkey_is_controlled, rnr_timer, AccessFlags, AddressVector, AltPath,
    MigState, PathMtu, QpState, QpType, GSI_QKEY, MAX_FLOW_LABEL, MAX_MIN_RNR_TIMER, MAX_QPN,
    MAX_RETRY_CNT, MAX_RNR_RETRY, MAX_SL, MAX_TIMEOUT,
};
pub use common::{AsyncEvent, QpCommon, QpInit};
pub use mask::{Attr, AttrMask, QpAttr};
pub use modify::{modify, ModifyError, QpCaps, QpConfig};
pub use table::{transition, Transition};
