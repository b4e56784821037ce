//! The QP state machine: which Modify QP transitions exist for each QP type,
//! which attributes each one requires and which it allows (IBTA 10.3.1 for
//! the states, 11.2.5.2 for Modify QP), plus range checks, as a pure function
//! over an immutable [`QpConfig`].
//!
//! # The transition table
//!
//! [`transition`] holds the table. Its facts come from the IBTA's list of
//! required and optional attributes per transition, as the Linux RDMA core
//! encodes it in its `qp_state_table` (drivers/infiniband/core/verbs.c),
//! which is what `ibv_modify_qp` meets on Linux. It differs from that table
//! in two places, both on the IBTA's side:
//!
//! - RESET→ERR is allowed. The IBTA lets Modify QP take a QP to Error from
//!   any state; the Linux core table leaves that one transition out (so no
//!   Linux application relies on it either way).
//! - SQE→RTS does not exist for RC. The Send Queue Error state is for UD, UC
//!   and GSI QPs; an RC QP whose send fails goes to Error (see
//!   [`QpConfig::enter_send_queue_error`]), so it is never in SQE. Linux
//!   lists the transition as valid with no attributes for every type.
//!
//! And it is stricter in one: an attribute mask with `CUR_STATE` must name
//! the state the QP is in. Linux takes the consumer's word for it and checks
//! the transition from the claimed state instead.
//!
//! # What `modify` does not check
//!
//! - That SQD→SQD happens only after the send queue has drained: whether it
//!   has is the requester's knowledge, so the engine must refuse it before
//!   calling [`modify`].
//! - P_Key table contents, GID table contents, and who may set a controlled
//!   Q_Key: those belong to the verbs layer.

use core::fmt;

use super::attr::{
    local_ack_timeout, rnr_timer, AddressVector, Attr, AttrMask, PathMtu, QpAttr, QpState, QpType,
    GSI_QKEY, MAX_FLOW_LABEL, MAX_MIN_RNR_TIMER, MAX_QPN, MAX_RETRY_CNT, MAX_RNR_RETRY, MAX_SL,
    MAX_TIMEOUT,
};
use core::time::Duration;

/// The attributes one transition requires and the ones it also accepts.
/// `STATE` is in neither set: it is always accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    pub required: AttrMask,
    pub optional: AttrMask,
}

impl Transition {
    const NOTHING: Transition = Transition {
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

/// Device limits that bound attribute values. The verbs layer fills them in
/// from its device and port; every count must be at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Ports are numbered `1..=port_count`.
    pub port_count: u8,
    /// `pkey_index` must be below this.
    pub pkey_table_len: u16,
    /// An address vector's `sgid_index` must be below this.
    pub gid_table_len: u16,
    /// The port's active MTU: `path_mtu` may not exceed it.
    pub max_path_mtu: PathMtu,
    /// Upper bound of `max_rd_atomic` (the device's `max_qp_init_rd_atom`).
    pub max_rd_atomic: u8,
    /// Upper bound of `max_dest_rd_atomic` (the device's `max_qp_rd_atom`).
    pub max_dest_rd_atomic: u8,
}

impl Default for QpCaps {
    /// One port, one P_Key (the default partition, as RoCE has), a full
    /// 256-entry GID table, path MTU up to 4096, and 128 READ/atomic requests
    /// each way.
    fn default() -> QpCaps {
        QpCaps {
            port_count: 1,
            pkey_table_len: 1,
            gid_table_len: 256,
            max_path_mtu: PathMtu::Mtu4096,
            max_rd_atomic: 128,
            max_dest_rd_atomic: 128,
        }
    }
}

/// Why Modify QP refused. The QP is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// The mask names an attribute whose field in the `QpAttr` is `None`.
    #[error("the attribute mask has {attr} but no value is given for it")]
    NoValue { attr: Attr },
    /// There is no such transition for this QP type.
    #[error("a {qp_type} QP cannot go from {from} to {to}")]
    InvalidTransition {
        qp_type: QpType,
        from: QpState,
        to: QpState,
    },
    /// The transition requires attributes that the mask does not have.
    #[error("{from} to {to} on a {qp_type} QP requires {missing}")]
    MissingRequired {
        qp_type: QpType,
        from: QpState,
        to: QpState,
        missing: AttrMask,
    },
    /// The mask has attributes that the transition does not accept.
    #[error("{from} to {to} on a {qp_type} QP does not accept {not_allowed}")]
    NotAllowed {
        qp_type: QpType,
        from: QpState,
        to: QpState,
        not_allowed: AttrMask,
    },
    /// `cur_qp_state` is not the state the QP is in.
    #[error("cur_qp_state says {claimed}, but the QP is in {actual}")]
    CurrentStateMismatch { claimed: QpState, actual: QpState },
    /// A value outside its range; `field` names it (`timeout`,
    /// `alt_path.av.flow_label`, ...).
    #[error("{attr}: {field} = {value} is outside {min}..={max}")]
    OutOfRange {
        attr: Attr,
        field: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// A GSI QP's Q_Key can only be the well-known one.
    #[error("a GSI QP's Q_Key is {:#010x}, not {qkey:#010x}", GSI_QKEY)]
    GsiQkey { qkey: u32 },
}

impl ModifyError {
    /// A short stable name for the reason (for counters and JSON output).
    pub const fn reason(&self) -> &'static str {
        match self {
            ModifyError::NoValue { .. } => "no_value",
            ModifyError::InvalidTransition { .. } => "invalid_transition",
            ModifyError::MissingRequired { .. } => "missing_required",
            ModifyError::NotAllowed { .. } => "not_allowed",
            ModifyError::CurrentStateMismatch { .. } => "cur_state_mismatch",
            ModifyError::OutOfRange { .. } => "out_of_range",
            ModifyError::GsiQkey { .. } => "gsi_qkey",
        }
    }
}

/// A QP's type, state, device limits and current attribute values: what
/// Modify QP reads and produces. It changes only through [`modify`] and the
/// engine's own transitions ([`QpConfig::enter_error`],
/// [`QpConfig::enter_send_queue_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpConfig {
    qp_type: QpType,
    state: QpState,
    caps: QpCaps,
    /// Current values; `qp_state` and `cur_qp_state` stay `None`.
    attrs: QpAttr,
}

impl QpConfig {
    /// A new QP in RESET with no attributes set. A GSI QP made this way has
    /// no port: use [`QpConfig::new_gsi`].
    pub fn new(qp_type: QpType, caps: QpCaps) -> QpConfig {
        QpConfig {
            qp_type,
            state: QpState::Reset,
            caps,
            attrs: QpAttr::default(),
        }
    }

    /// A new GSI QP (QP1) of port `port_num`, in RESET.
    pub fn new_gsi(port_num: u8, caps: QpCaps) -> Result<QpConfig, ModifyError> {
        check_port(Attr::Port, "port_num", port_num, &caps)?;
        let mut c = QpConfig::new(QpType::Gsi, caps);
        c.attrs.port_num = Some(port_num);
        Ok(c)
    }

    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    pub fn state(&self) -> QpState {
        self.state
    }

    pub fn caps(&self) -> &QpCaps {
        &self.caps
    }

    /// The current attribute values (`None` where never set since the last
    /// reset). Every attribute that the transitions taken so far required is
    /// `Some`: an RC QP in RTS has its path MTU, PSNs, timeout and so on.
    pub fn attrs(&self) -> &QpAttr {
        &self.attrs
    }

    /// The transport timer interval from the QP's `timeout`; `None` when
    /// unset or 0 (no timer).
    pub fn ack_timeout(&self) -> Option<Duration> {
        self.attrs.timeout.and_then(local_ack_timeout)
    }

    /// The wait that the QP's RNR NAKs ask for, from `min_rnr_timer`.
    pub fn min_rnr_wait(&self) -> Option<Duration> {
        self.attrs.min_rnr_timer.map(rnr_timer)
    }

    /// The engine's transition on a fatal error (from any state): the QP
    /// goes to ERR and keeps its attributes.
    pub fn enter_error(&mut self) {
        self.state = QpState::Error;
    }

    /// The engine's transition when a send completes in error in RTS or SQD:
    /// a UD, UC or GSI QP goes to SQE, from which Modify QP can return it to
    /// RTS; an RC QP has no SQE state and goes to ERR. In other states
    /// nothing changes. Returns the new state.
    pub fn enter_send_queue_error(&mut self) -> QpState {
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.state = match self.qp_type {
                QpType::Rc => QpState::Error,
                QpType::Uc | QpType::Ud | QpType::Gsi => QpState::Sqe,
            };
        }
        self.state
    }

    #[cfg(test)]
    pub(crate) fn forced(qp_type: QpType, state: QpState) -> QpConfig {
        QpConfig {
            state,
            ..QpConfig::new(qp_type, QpCaps::default())
        }
    }
}

impl fmt::Display for QpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} QP in {}", self.qp_type, self.state)
    }
}

/// Modify QP as a pure function: checks that `mask` and the values of `attr`
/// that it selects make a valid change of `current`, and returns the changed
/// configuration; on error `current` is untouched.
///
/// Without `STATE` in the mask the QP stays in its state, which must then
/// allow a transition to itself (INIT, RTS, SQD, and RESET and ERR with no
/// other attribute). Fields of `attr` outside `mask` are ignored.
///
/// Checks, in this order, each reported by the first that fails: every
/// masked field has a value; the transition exists for this QP type; the
/// mask has every required attribute; the mask has no attribute the
/// transition does not accept; `cur_qp_state` (if masked) is the QP's state;
/// every value is in range.
///
/// Moving to RESET clears every attribute (a GSI QP keeps its port), so that
/// nothing from before the reset survives into the next RESET→INIT.
pub fn modify(current: &QpConfig, attr: &QpAttr, mask: AttrMask) -> Result<QpConfig, ModifyError> {
    if let Some(missing) = mask.iter().find(|a| !attr.is_set(*a)) {
        return Err(ModifyError::NoValue { attr: missing });
    }

    let qp_type = current.qp_type;
    let from = current.state;
    let to = match (mask.has(Attr::State), attr.qp_state) {
        (true, Some(s)) => s,
        _ => from,
    };

    let rule = transition(qp_type, from, to).ok_or(ModifyError::InvalidTransition {
        qp_type,
        from,
        to,
    })?;
    let missing = rule.required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyError::MissingRequired {
            qp_type,
            from,
            to,
            missing,
        });
    }
    let not_allowed = mask.difference(rule.allowed());
    if !not_allowed.is_empty() {
        return Err(ModifyError::NotAllowed {
            qp_type,
            from,
            to,
            not_allowed,
        });
    }
    if let (true, Some(claimed)) = (mask.has(Attr::CurState), attr.cur_qp_state) {
        if claimed != from {
            return Err(ModifyError::CurrentStateMismatch {
                claimed,
                actual: from,
            });
        }
    }
    for a in mask.iter() {
        check_range(qp_type, &current.caps, attr, a)?;
    }

    let mut next = current.clone();
    next.state = to;
    if to == QpState::Reset {
        let port = current.attrs.port_num;
        next.attrs = QpAttr::default();
        if qp_type == QpType::Gsi {
            next.attrs.port_num = port;
        }
    } else {
        for a in mask
            .difference(AttrMask::STATE | AttrMask::CUR_STATE)
            .iter()
        {
            next.attrs.copy_field(attr, a);
        }
    }
    Ok(next)
}

fn out_of_range(attr: Attr, field: &'static str, value: u64, min: u64, max: u64) -> ModifyError {
    ModifyError::OutOfRange {
        attr,
        field,
        value,
        min,
        max,
    }
}

fn check_max(attr: Attr, field: &'static str, value: u64, max: u64) -> Result<(), ModifyError> {
    if value > max {
        Err(out_of_range(attr, field, value, 0, max))
    } else {
        Ok(())
    }
}

/// `value` must index a table of `len` entries.
fn check_index(attr: Attr, field: &'static str, value: u64, len: u64) -> Result<(), ModifyError> {
    if value >= len {
        Err(out_of_range(attr, field, value, 0, len.saturating_sub(1)))
    } else {
        Ok(())
    }
}

fn check_port(attr: Attr, field: &'static str, port: u8, caps: &QpCaps) -> Result<(), ModifyError> {
    if port == 0 || port > caps.port_count {
        Err(out_of_range(
            attr,
            field,
            u64::from(port),
            1,
            u64::from(caps.port_count),
        ))
    } else {
        Ok(())
    }
}

fn check_av(
    attr: Attr,
    fields: [&'static str; 3],
    av: &AddressVector,
    caps: &QpCaps,
) -> Result<(), ModifyError> {
    check_index(
        attr,
        fields[0],
        u64::from(av.sgid_index),
        u64::from(caps.gid_table_len),
    )?;
    check_max(
        attr,
        fields[1],
        u64::from(av.flow_label),
        u64::from(MAX_FLOW_LABEL),
    )?;
    check_max(attr, fields[2], u64::from(av.sl), u64::from(MAX_SL))
}

/// Checks the value of one masked attribute (which `modify` has checked is
/// present). Values whose type cannot be out of range pass.
fn check_range(
    qp_type: QpType,
    caps: &QpCaps,
    attr: &QpAttr,
    which: Attr,
) -> Result<(), ModifyError> {
    let v = |x: Option<u8>| u64::from(x.unwrap_or(0));
    match which {
        Attr::PkeyIndex => check_index(
            which,
            "pkey_index",
            u64::from(attr.pkey_index.unwrap_or(0)),
            u64::from(caps.pkey_table_len),
        ),
        Attr::Port => check_port(which, "port_num", attr.port_num.unwrap_or(0), caps),
        Attr::Qkey => match attr.qkey {
            Some(qkey) if qp_type == QpType::Gsi && qkey != GSI_QKEY => {
                Err(ModifyError::GsiQkey { qkey })
            }
            _ => Ok(()),
        },
        Attr::Av => match &attr.av {
            Some(av) => check_av(which, ["av.sgid_index", "av.flow_label", "av.sl"], av, caps),
            None => Ok(()),
        },
        Attr::PathMtu => match attr.path_mtu {
            Some(mtu) if mtu > caps.max_path_mtu => Err(out_of_range(
                which,
                "path_mtu",
                u64::from(mtu.bytes()),
                u64::from(PathMtu::Mtu256.bytes()),
                u64::from(caps.max_path_mtu.bytes()),
            )),
            _ => Ok(()),
        },
        Attr::Timeout => check_max(which, "timeout", v(attr.timeout), u64::from(MAX_TIMEOUT)),
        Attr::RetryCnt => check_max(
            which,
            "retry_cnt",
            v(attr.retry_cnt),
            u64::from(MAX_RETRY_CNT),
        ),
        Attr::RnrRetry => check_max(
            which,
            "rnr_retry",
            v(attr.rnr_retry),
            u64::from(MAX_RNR_RETRY),
        ),
        Attr::MinRnrTimer => check_max(
            which,
            "min_rnr_timer",
            v(attr.min_rnr_timer),
            u64::from(MAX_MIN_RNR_TIMER),
        ),
        Attr::MaxRdAtomic => check_max(
            which,
            "max_rd_atomic",
            v(attr.max_rd_atomic),
            u64::from(caps.max_rd_atomic),
        ),
        Attr::MaxDestRdAtomic => check_max(
            which,
            "max_dest_rd_atomic",
            v(attr.max_dest_rd_atomic),
            u64::from(caps.max_dest_rd_atomic),
        ),
        Attr::DestQpn => check_max(
            which,
            "dest_qpn",
            u64::from(attr.dest_qpn.unwrap_or(0)),
            u64::from(MAX_QPN),
        ),
        Attr::AltPath => match &attr.alt_path {
            Some(alt) => {
                check_av(
                    which,
                    [
                        "alt_path.av.sgid_index",
                        "alt_path.av.flow_label",
                        "alt_path.av.sl",
                    ],
                    &alt.av,
                    caps,
                )?;
                check_index(
                    which,
                    "alt_path.pkey_index",
                    u64::from(alt.pkey_index),
                    u64::from(caps.pkey_table_len),
                )?;
                check_port(which, "alt_path.port_num", alt.port_num, caps)?;
                check_max(
                    which,
                    "alt_path.timeout",
                    u64::from(alt.timeout),
                    u64::from(MAX_TIMEOUT),
                )
            }
            None => Ok(()),
        },
        // Typed so that every value is valid: states, flags, PSNs (24 bits
        // by construction), the SQD notification flag, the migration state.
        Attr::State
        | Attr::CurState
        | Attr::EnSqdAsyncNotify
        | Attr::AccessFlags
        | Attr::RqPsn
        | Attr::SqPsn
        | Attr::PathMigState => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::psn::Psn;
    use crate::transport::qp::{AccessFlags, AltPath, MigState};
    use proptest::prelude::*;
    use QpState::*;
    use QpType::*;

    type M = AttrMask;

    /// The table again, transcribed separately from the same source, so that
    /// a slip in one of the two copies shows: (type, from, to, required,
    /// optional). Transitions to RESET and ERR are added below for every
    /// (type, from) with nothing required or optional.
    fn expected_rows() -> Vec<(QpType, QpState, QpState, AttrMask, AttrMask)> {
        let none = M::empty();
        let mut rows = Vec::new();
        for ty in QpType::ALL {
            let (r2i, i2i) = match ty {
                Rc | Uc => (
                    M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
                    M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
                ),
                Ud => (
                    M::PKEY_INDEX | M::PORT | M::QKEY,
                    M::PKEY_INDEX | M::PORT | M::QKEY,
                ),
                Gsi => (M::PKEY_INDEX | M::QKEY, M::PKEY_INDEX | M::QKEY),
            };
            rows.push((ty, Reset, Init, r2i, none));
            rows.push((ty, Init, Init, none, i2i));
        }
        // INIT -> RTR
        rows.push((
            Rc,
            Init,
            Rtr,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ));
        rows.push((
            Uc,
            Init,
            Rtr,
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ));
        rows.push((Ud, Init, Rtr, none, M::PKEY_INDEX | M::QKEY));
        rows.push((Gsi, Init, Rtr, none, M::PKEY_INDEX | M::QKEY));
        // RTR -> RTS
        rows.push((
            Rc,
            Rtr,
            Rts,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ));
        rows.push((
            Uc,
            Rtr,
            Rts,
            M::SQ_PSN,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
        ));
        rows.push((Ud, Rtr, Rts, M::SQ_PSN, M::CUR_STATE | M::QKEY));
        rows.push((Gsi, Rtr, Rts, M::SQ_PSN, M::CUR_STATE | M::QKEY));
        // RTS -> RTS and SQD -> RTS
        for from in [Rts, Sqd] {
            rows.push((
                Rc,
                from,
                Rts,
                none,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            ));
            rows.push((
                Uc,
                from,
                Rts,
                none,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
            ));
            rows.push((Ud, from, Rts, none, M::CUR_STATE | M::QKEY));
            rows.push((Gsi, from, Rts, none, M::CUR_STATE | M::QKEY));
        }
        // RTS -> SQD
        for ty in QpType::ALL {
            rows.push((ty, Rts, Sqd, none, M::EN_SQD_ASYNC_NOTIFY));
        }
        // SQD -> SQD
        rows.push((
            Rc,
            Sqd,
            Sqd,
            none,
            M::PORT
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
                | M::PATH_MIG_STATE,
        ));
        rows.push((
            Uc,
            Sqd,
            Sqd,
            none,
            M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
        ));
        rows.push((Ud, Sqd, Sqd, none, M::PKEY_INDEX | M::QKEY));
        rows.push((Gsi, Sqd, Sqd, none, M::PKEY_INDEX | M::QKEY));
        // SQE -> RTS (not RC)
        rows.push((Uc, Sqe, Rts, none, M::CUR_STATE | M::ACCESS_FLAGS));
        rows.push((Ud, Sqe, Rts, none, M::CUR_STATE | M::QKEY));
        rows.push((Gsi, Sqe, Rts, none, M::CUR_STATE | M::QKEY));
        // Any state -> RESET, ERR
        for ty in QpType::ALL {
            for from in QpState::ALL {
                rows.push((ty, from, Reset, none, none));
                rows.push((ty, from, Error, none, none));
            }
        }
        rows
    }

    fn expected(ty: QpType, from: QpState, to: QpState) -> Option<Transition> {
        let rows = expected_rows();
        let mut hits = rows
            .iter()
            .filter(|r| r.0 == ty && r.1 == from && r.2 == to);
        let hit = hits.next().map(|r| Transition {
            required: r.3,
            optional: r.4,
        });
        assert!(hits.next().is_none(), "duplicate row {ty} {from}->{to}");
        hit
    }

    fn av(last: u8) -> AddressVector {
        let mut dgid = [0u8; 16];
        dgid[10] = 0xff;
        dgid[11] = 0xff;
        dgid[12..].copy_from_slice(&[192, 168, 0, last]);
        AddressVector {
            dgid,
            sgid_index: 1,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            src_port: None,
        }
    }

    /// Every field set to a valid value for `ty`, claiming state `cur`.
    fn full_attr(ty: QpType, to: QpState, cur: QpState) -> QpAttr {
        QpAttr {
            qp_state: Some(to),
            cur_qp_state: Some(cur),
            en_sqd_async_notify: Some(true),
            access_flags: Some(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(if ty == Gsi { GSI_QKEY } else { 0x1111_1111 }),
            av: Some(av(2)),
            path_mtu: Some(PathMtu::Mtu1024),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            rq_psn: Some(Psn::new(0x2f6a4c)),
            max_rd_atomic: Some(1),
            alt_path: Some(AltPath {
                av: av(3),
                pkey_index: 0,
                port_num: 1,
                timeout: 14,
            }),
            min_rnr_timer: Some(12),
            sq_psn: Some(Psn::new(0x123456)),
            max_dest_rd_atomic: Some(1),
            path_mig_state: Some(MigState::Migrated),
            dest_qpn: Some(0x11),
        }
    }

    fn step(cfg: &QpConfig, to: QpState) -> QpConfig {
        let rule = transition(cfg.qp_type(), cfg.state(), to).unwrap();
        let attr = full_attr(cfg.qp_type(), to, cfg.state());
        modify(cfg, &attr, rule.required | M::STATE).unwrap()
    }

    fn fresh(ty: QpType) -> QpConfig {
        match ty {
            Gsi => QpConfig::new_gsi(1, QpCaps::default()).unwrap(),
            _ => QpConfig::new(ty, QpCaps::default()),
        }
    }

    /// A QP of type `ty` brought into `state` the way a real one gets there.
    /// An RC QP never reaches SQE, so that one is forced.
    fn config_in(ty: QpType, state: QpState) -> QpConfig {
        let c = fresh(ty);
        let rts = || step(&step(&step(&c, Init), Rtr), Rts);
        match state {
            Reset => c,
            Init => step(&c, Init),
            Rtr => step(&step(&c, Init), Rtr),
            Rts => rts(),
            Sqd => step(&rts(), Sqd),
            Sqe if ty == Rc => QpConfig::forced(Rc, Sqe),
            Sqe => {
                let mut q = rts();
                assert_eq!(q.enter_send_queue_error(), Sqe);
                q
            }
            Error => step(&rts(), Error),
        }
    }

    #[test]
    fn table_matches_transcription_for_every_pair() {
        let mut legal = 0;
        for ty in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    let want = expected(ty, from, to);
                    assert_eq!(transition(ty, from, to), want, "{ty} {from}->{to}");
                    legal += usize::from(want.is_some());
                }
            }
        }
        // 23 transitions per type, less SQE->RTS for RC.
        assert_eq!(legal, 4 * 23 - 1);
    }

    /// Every (type, from, to): illegal ones fail whatever the mask, legal
    /// ones succeed with exactly the required set, fail for each required
    /// attribute left out and for each attribute not accepted, and succeed
    /// with each optional one added.
    #[test]
    fn every_pair_of_states_for_every_type() {
        let mut checked = 0;
        for ty in QpType::ALL {
            for from in QpState::ALL {
                let cfg = config_in(ty, from);
                assert_eq!(cfg.state(), from);
                for to in QpState::ALL {
                    checked += 1;
                    let attr = full_attr(ty, to, from);
                    let ctx = format!("{ty} {from}->{to}");
                    let Some(rule) = transition(ty, from, to) else {
                        let want = ModifyError::InvalidTransition {
                            qp_type: ty,
                            from,
                            to,
                        };
                        for mask in [M::STATE, AttrMask::all()] {
                            assert_eq!(modify(&cfg, &attr, mask), Err(want), "{ctx}");
                        }
                        continue;
                    };

                    let base = rule.required | M::STATE;
                    let ok = modify(&cfg, &attr, base).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    assert_eq!(ok.state(), to, "{ctx}");
                    assert_eq!(ok.qp_type(), ty);

                    for r in rule.required.iter() {
                        assert_eq!(
                            modify(&cfg, &attr, base.without(r)),
                            Err(ModifyError::MissingRequired {
                                qp_type: ty,
                                from,
                                to,
                                missing: r.into(),
                            }),
                            "{ctx} without {r}"
                        );
                    }
                    for a in AttrMask::all().difference(rule.allowed()).iter() {
                        assert_eq!(
                            modify(&cfg, &attr, base.with(a)),
                            Err(ModifyError::NotAllowed {
                                qp_type: ty,
                                from,
                                to,
                                not_allowed: a.into(),
                            }),
                            "{ctx} with {a}"
                        );
                    }
                    for o in rule.optional.iter() {
                        let r = modify(&cfg, &attr, base.with(o));
                        assert_eq!(r.map(|c| c.state()), Ok(to), "{ctx} with {o}");
                    }
                    let all = modify(&cfg, &attr, base | rule.optional).unwrap();
                    assert_eq!(all.state(), to);
                }
            }
        }
        assert_eq!(checked, 4 * 7 * 7);
    }

    #[test]
    fn brief_examples() {
        let r = transition(Rc, Reset, Init).unwrap();
        assert_eq!(r.required, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        let r = transition(Ud, Reset, Init).unwrap();
        assert_eq!(r.required, M::PKEY_INDEX | M::PORT | M::QKEY);
        let r = transition(Rc, Init, Rtr).unwrap();
        assert_eq!(
            r.required,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        let r = transition(Rc, Rtr, Rts).unwrap();
        assert_eq!(
            r.required,
            M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
        );
        for ty in QpType::ALL {
            for from in QpState::ALL {
                assert_eq!(transition(ty, from, Reset), Some(Transition::NOTHING));
                assert_eq!(transition(ty, from, Error), Some(Transition::NOTHING));
            }
        }
    }

    #[test]
    fn rc_pingpong_sequence() {
        // What ibv_rc_pingpong does, with its values.
        let q = QpConfig::new(Rc, QpCaps::default());
        let init = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(AccessFlags::empty()),
            ..QpAttr::default()
        };
        let q = modify(&q, &init, init.mask()).unwrap();
        let rtr = QpAttr {
            qp_state: Some(Rtr),
            path_mtu: Some(PathMtu::Mtu1024),
            dest_qpn: Some(0x11),
            rq_psn: Some(Psn::new(0x2f6a4c)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            av: Some(av(2)),
            ..QpAttr::default()
        };
        let q = modify(&q, &rtr, rtr.mask()).unwrap();
        let rts = QpAttr {
            qp_state: Some(Rts),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            sq_psn: Some(Psn::new(0x0abcde)),
            max_rd_atomic: Some(1),
            ..QpAttr::default()
        };
        let q = modify(&q, &rts, rts.mask()).unwrap();
        assert_eq!(q.state(), Rts);
        let a = q.attrs();
        assert_eq!(a.path_mtu, Some(PathMtu::Mtu1024));
        assert_eq!(a.rq_psn, Some(Psn::new(0x2f6a4c)));
        assert_eq!(a.sq_psn, Some(Psn::new(0x0abcde)));
        assert_eq!(a.dest_qpn, Some(0x11));
        assert_eq!(a.qp_state, None);
        assert_eq!(q.ack_timeout(), Some(Duration::from_nanos(67_108_864)));
        assert_eq!(q.min_rnr_wait(), Some(Duration::from_micros(640)));
        assert_eq!(q.to_string(), "RC QP in RTS");
    }

    #[test]
    fn ud_pingpong_sequence() {
        let q = QpConfig::new(Ud, QpCaps::default());
        let init = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        let q = modify(&q, &init, init.mask()).unwrap();
        let rtr = QpAttr {
            qp_state: Some(Rtr),
            ..QpAttr::default()
        };
        let q = modify(&q, &rtr, rtr.mask()).unwrap();
        let rts = QpAttr {
            qp_state: Some(Rts),
            sq_psn: Some(Psn::new(7)),
            ..QpAttr::default()
        };
        let q = modify(&q, &rts, rts.mask()).unwrap();
        assert_eq!(q.state(), Rts);
        assert_eq!(q.attrs().qkey, Some(0x1111_1111));
        assert_eq!(q.ack_timeout(), None);
    }

    #[test]
    fn gsi_takes_only_the_well_known_qkey() {
        let q = QpConfig::new_gsi(1, QpCaps::default()).unwrap();
        assert_eq!(q.attrs().port_num, Some(1));
        let mut a = QpAttr {
            qp_state: Some(Init),
            pkey_index: Some(0),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(e, ModifyError::GsiQkey { qkey: 0x1111_1111 });
        assert_eq!(
            e.to_string(),
            "a GSI QP's Q_Key is 0x80010000, not 0x11111111"
        );
        a.qkey = Some(GSI_QKEY);
        assert_eq!(modify(&q, &a, a.mask()).unwrap().state(), Init);
        // The port is not an attribute of GSI's RESET->INIT.
        a.port_num = Some(1);
        assert_eq!(
            modify(&q, &a, a.mask()).unwrap_err().reason(),
            "not_allowed"
        );
        assert_eq!(
            QpConfig::new_gsi(2, QpCaps::default()),
            Err(ModifyError::OutOfRange {
                attr: Attr::Port,
                field: "port_num",
                value: 2,
                min: 1,
                max: 1
            })
        );
    }

    #[test]
    fn without_state_the_qp_stays() {
        let q = config_in(Rc, Rts);
        let a = QpAttr {
            min_rnr_timer: Some(20),
            ..QpAttr::default()
        };
        let q2 = modify(&q, &a, a.mask()).unwrap();
        assert_eq!(q2.state(), Rts);
        assert_eq!(q2.attrs().min_rnr_timer, Some(20));
        // RTR has no transition to itself.
        let r = config_in(Rc, Rtr);
        assert_eq!(
            modify(&r, &a, a.mask()),
            Err(ModifyError::InvalidTransition {
                qp_type: Rc,
                from: Rtr,
                to: Rtr
            })
        );
        // RESET to itself with nothing: fine, and nothing changes.
        let z = config_in(Uc, Reset);
        assert_eq!(modify(&z, &QpAttr::default(), M::empty()), Ok(z.clone()));
    }

    #[test]
    fn masked_fields_need_values_and_unmasked_ones_are_ignored() {
        let q = config_in(Rc, Reset);
        let a = QpAttr {
            qp_state: Some(Init),
            port_num: Some(1),
            access_flags: Some(AccessFlags::empty()),
            ..QpAttr::default()
        };
        assert_eq!(
            modify(&q, &a, a.mask() | M::PKEY_INDEX),
            Err(ModifyError::NoValue {
                attr: Attr::PkeyIndex
            })
        );
        assert_eq!(
            modify(&q, &QpAttr::default(), M::STATE),
            Err(ModifyError::NoValue { attr: Attr::State })
        );
        // A value outside the mask (here an out-of-range timeout) is ignored.
        let b = QpAttr {
            pkey_index: Some(0),
            timeout: Some(200),
            ..a
        };
        let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        let q2 = modify(&q, &b, mask).unwrap();
        assert_eq!(q2.attrs().timeout, None);
    }

    #[test]
    fn cur_state_must_match() {
        let q = config_in(Ud, Sqe);
        let mut a = QpAttr {
            qp_state: Some(Rts),
            cur_qp_state: Some(Sqe),
            ..QpAttr::default()
        };
        assert_eq!(modify(&q, &a, a.mask()).unwrap().state(), Rts);
        a.cur_qp_state = Some(Rts);
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(
            e,
            ModifyError::CurrentStateMismatch {
                claimed: Rts,
                actual: Sqe
            }
        );
        assert_eq!(e.to_string(), "cur_qp_state says RTS, but the QP is in SQE");
        // CUR_STATE is accepted only on transitions into RTS.
        let r = config_in(Ud, Reset);
        let b = QpAttr {
            cur_qp_state: Some(Reset),
            ..full_attr(Ud, Init, Reset)
        };
        assert_eq!(
            modify(
                &r,
                &b,
                M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY | M::CUR_STATE
            )
            .unwrap_err()
            .reason(),
            "not_allowed"
        );
    }

    #[test]
    fn error_reports_every_missing_attribute() {
        let q = config_in(Rc, Init);
        let a = QpAttr {
            qp_state: Some(Rtr),
            path_mtu: Some(PathMtu::Mtu1024),
            ..QpAttr::default()
        };
        let e = modify(&q, &a, a.mask()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "INIT to RTR on a RC QP requires AV | RQ_PSN | MIN_RNR_TIMER | \
             MAX_DEST_RD_ATOMIC | DEST_QPN"
        );
        let b = QpAttr {
            qkey: Some(5),
            ..full_attr(Rc, Rtr, Init)
        };
        let e = modify(&q, &b, b.mask()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "INIT to RTR on a RC QP does not accept CUR_STATE | EN_SQD_ASYNC_NOTIFY | \
             PORT | QKEY | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN | \
             PATH_MIG_STATE"
        );
    }

    /// (type, from, to, the change, attribute, field): each change is one
    /// past the edge of its range.
    #[allow(clippy::type_complexity)]
    fn range_cases() -> Vec<(
        QpType,
        QpState,
        QpState,
        fn(&mut QpAttr),
        Attr,
        &'static str,
    )> {
        vec![
            (
                Rc,
                Reset,
                Init,
                |a| a.pkey_index = Some(1),
                Attr::PkeyIndex,
                "pkey_index",
            ),
            (
                Rc,
                Reset,
                Init,
                |a| a.port_num = Some(0),
                Attr::Port,
                "port_num",
            ),
            (
                Ud,
                Reset,
                Init,
                |a| a.port_num = Some(2),
                Attr::Port,
                "port_num",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().sgid_index = 255,
                Attr::Av,
                "av.sgid_index",
            ),
            (
                Uc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().flow_label = 0x10_0000,
                Attr::Av,
                "av.flow_label",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.av.as_mut().unwrap().sl = 16,
                Attr::Av,
                "av.sl",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.dest_qpn = Some(0x100_0000),
                Attr::DestQpn,
                "dest_qpn",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.min_rnr_timer = Some(32),
                Attr::MinRnrTimer,
                "min_rnr_timer",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.max_dest_rd_atomic = Some(129),
                Attr::MaxDestRdAtomic,
                "max_dest_rd_atomic",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.path_mtu = Some(PathMtu::Mtu4096),
                Attr::PathMtu,
                "path_mtu",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.timeout = Some(32),
                Attr::Timeout,
                "timeout",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.retry_cnt = Some(8),
                Attr::RetryCnt,
                "retry_cnt",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.rnr_retry = Some(8),
                Attr::RnrRetry,
                "rnr_retry",
            ),
            (
                Rc,
                Rtr,
                Rts,
                |a| a.max_rd_atomic = Some(129),
                Attr::MaxRdAtomic,
                "max_rd_atomic",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.min_rnr_timer = Some(255),
                Attr::MinRnrTimer,
                "min_rnr_timer",
            ),
            (
                Rc,
                Sqd,
                Sqd,
                |a| a.timeout = Some(32),
                Attr::Timeout,
                "timeout",
            ),
            (
                Rc,
                Sqd,
                Sqd,
                |a| a.port_num = Some(9),
                Attr::Port,
                "port_num",
            ),
            (
                Rc,
                Init,
                Rtr,
                |a| a.alt_path.as_mut().unwrap().timeout = 32,
                Attr::AltPath,
                "alt_path.timeout",
            ),
            (
                Uc,
                Init,
                Rtr,
                |a| a.alt_path.as_mut().unwrap().port_num = 0,
                Attr::AltPath,
                "alt_path.port_num",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.alt_path.as_mut().unwrap().pkey_index = 3,
                Attr::AltPath,
                "alt_path.pkey_index",
            ),
            (
                Rc,
                Rts,
                Rts,
                |a| a.alt_path.as_mut().unwrap().av.sl = 200,
                Attr::AltPath,
                "alt_path.av.sl",
            ),
        ]
    }

    #[test]
    fn out_of_range_values() {
        // Caps with a smaller path MTU, so that 4096 is out of range.
        let caps = QpCaps {
            max_path_mtu: PathMtu::Mtu2048,
            gid_table_len: 16,
            ..QpCaps::default()
        };
        for (ty, from, to, change, attr, field) in range_cases() {
            let mut cfg = config_in(ty, from);
            cfg.caps = caps;
            let rule = transition(ty, from, to).unwrap();
            let good = full_attr(ty, to, from);
            let mask = rule.required | M::STATE | attr.into();
            assert!(
                modify(&cfg, &good, mask).is_ok(),
                "{ty} {from}->{to} {field}"
            );
            let mut bad = good;
            change(&mut bad);
            let before = cfg.clone();
            match modify(&cfg, &bad, mask) {
                Err(ModifyError::OutOfRange {
                    attr: a, field: f, ..
                }) => {
                    assert_eq!((a, f), (attr, field), "{ty} {from}->{to}");
                }
                other => panic!("{ty} {from}->{to} {field}: {other:?}"),
            }
            assert_eq!(cfg, before);
        }
    }

    #[test]
    fn range_edges_are_inclusive() {
        let cfg = config_in(Rc, Rtr);
        let rule = transition(Rc, Rtr, Rts).unwrap();
        let a = QpAttr {
            timeout: Some(31),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(128),
            ..full_attr(Rc, Rts, Rtr)
        };
        assert!(modify(&cfg, &a, rule.required | M::STATE).is_ok());
        let b = QpAttr {
            timeout: Some(0),
            retry_cnt: Some(0),
            rnr_retry: Some(0),
            max_rd_atomic: Some(0),
            ..a
        };
        let q = modify(&cfg, &b, rule.required | M::STATE).unwrap();
        assert_eq!(q.ack_timeout(), None);

        let e = modify(
            &cfg,
            &QpAttr {
                timeout: Some(32),
                ..a
            },
            rule.required | M::STATE,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "TIMEOUT: timeout = 32 is outside 0..=31");
        assert_eq!(e.reason(), "out_of_range");

        let init = config_in(Rc, Init);
        let r = transition(Rc, Init, Rtr).unwrap();
        let c = QpAttr {
            dest_qpn: Some(MAX_QPN),
            min_rnr_timer: Some(31),
            ..full_attr(Rc, Rtr, Init)
        };
        for mtu in PathMtu::ALL {
            let d = QpAttr {
                path_mtu: Some(mtu),
                ..c
            };
            assert!(modify(&init, &d, r.required | M::STATE).is_ok(), "{mtu}");
        }
    }

    #[test]
    fn reset_clears_attributes_and_error_keeps_them() {
        let q = config_in(Rc, Rts);
        assert!(q.attrs().path_mtu.is_some());
        let to_err = modify(&q, &full_attr(Rc, Error, Rts), M::STATE).unwrap();
        assert_eq!(to_err.state(), Error);
        assert_eq!(to_err.attrs(), q.attrs());
        let reset = modify(&to_err, &full_attr(Rc, Reset, Error), M::STATE).unwrap();
        assert_eq!(reset, QpConfig::new(Rc, QpCaps::default()));

        let g = config_in(Gsi, Rts);
        let g = modify(&g, &full_attr(Gsi, Reset, Rts), M::STATE).unwrap();
        assert_eq!(g, QpConfig::new_gsi(1, QpCaps::default()).unwrap());
        // And back up again from scratch.
        assert_eq!(step(&step(&g, Init), Rtr).state(), Rtr);
    }

    #[test]
    fn errors_leave_the_config_unchanged() {
        let q = config_in(Uc, Init);
        let before = q.clone();
        let mut a = full_attr(Uc, Rtr, Init);
        a.av.as_mut().unwrap().sl = 99;
        let _ = modify(&q, &a, a.mask()).unwrap_err();
        let _ = modify(&q, &a, M::STATE).unwrap_err();
        let _ = modify(
            &q,
            &a,
            M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
        )
        .unwrap_err();
        assert_eq!(q, before);
    }

    #[test]
    fn engine_transitions() {
        let mut rc = config_in(Rc, Rts);
        assert_eq!(rc.enter_send_queue_error(), Error);
        let mut uc = config_in(Uc, Sqd);
        assert_eq!(uc.enter_send_queue_error(), Sqe);
        let mut ud = config_in(Ud, Rtr);
        assert_eq!(ud.enter_send_queue_error(), Rtr);
        ud.enter_error();
        assert_eq!(ud.state(), Error);
        assert!(ud.attrs().qkey.is_some());
        // From SQE a UD QP resumes.
        let sqe = config_in(Ud, Sqe);
        let back = modify(&sqe, &full_attr(Ud, Rts, Sqe), M::STATE).unwrap();
        assert_eq!(back.state(), Rts);
    }

    #[test]
    fn sqd_notification_is_stored() {
        let q = config_in(Rc, Rts);
        let a = QpAttr {
            qp_state: Some(Sqd),
            en_sqd_async_notify: Some(true),
            ..QpAttr::default()
        };
        let d = modify(&q, &a, a.mask()).unwrap();
        assert_eq!(d.state(), Sqd);
        assert_eq!(d.attrs().en_sqd_async_notify, Some(true));
    }

    #[test]
    fn error_messages() {
        let e = ModifyError::InvalidTransition {
            qp_type: Rc,
            from: Sqe,
            to: Rts,
        };
        assert_eq!(e.to_string(), "a RC QP cannot go from SQE to RTS");
        assert_eq!(
            ModifyError::NoValue { attr: Attr::Qkey }.to_string(),
            "the attribute mask has QKEY but no value is given for it"
        );
    }

    fn qp_type() -> impl Strategy<Value = QpType> {
        prop::sample::select(QpType::ALL.to_vec())
    }
    fn qp_state() -> impl Strategy<Value = QpState> {
        prop::sample::select(QpState::ALL.to_vec())
    }

    proptest! {
        /// With valid values, `modify` succeeds exactly when the mask fits
        /// the table, and then changes the masked fields and nothing else.
        #[test]
        fn outcome_follows_the_table(
            ty in qp_type(),
            from in qp_state(),
            to in qp_state(),
            bits in any::<u32>(),
        ) {
            let cfg = config_in(ty, from);
            let mask = AttrMask::from_bits(bits & AttrMask::all().bits()).unwrap();
            let attr = full_attr(ty, to, from);
            let target = if mask.has(Attr::State) { to } else { from };
            let result = modify(&cfg, &attr, mask);
            match transition(ty, from, target) {
                None => prop_assert_eq!(
                    result,
                    Err(ModifyError::InvalidTransition { qp_type: ty, from, to: target })
                ),
                Some(rule) => {
                    let fits = mask.contains(rule.required)
                        && rule.allowed().contains(mask);
                    prop_assert_eq!(result.is_ok(), fits, "{:?}", result);
                    if let Ok(next) = result {
                        prop_assert_eq!(next.state(), target);
                        if target != Reset {
                            for a in Attr::ALL {
                                if a == Attr::State || a == Attr::CurState {
                                    continue;
                                }
                                let mut want = *cfg.attrs();
                                if mask.has(a) {
                                    want.copy_field(&attr, a);
                                }
                                let mut got = *cfg.attrs();
                                got.copy_field(next.attrs(), a);
                                prop_assert_eq!(got, want, "{}", a);
                            }
                        }
                    }
                }
            }
        }
    }
}
