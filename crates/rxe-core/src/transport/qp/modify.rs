//! The QP state machine: Modify QP as a pure function over an immutable
//! [`QpConfig`] (IBTA 10.3.1 for the states, 11.2.5.2 for Modify QP). It
//! checks the call against the transition table ([`super::table`]), then
//! each value against its range and the device's limits ([`QpCaps`]).
//!
//! # What `modify` does not check
//!
//! - That SQD→SQD happens only after the send queue has drained: whether it
//!   has is the requester's knowledge, so the engine must refuse it before
//!   calling [`modify`].
//! - P_Key table contents, GID table contents, and who may set a controlled
//!   Q_Key: those belong to the verbs layer.

use core::fmt;
use core::time::Duration;

use super::attr::{
    local_ack_timeout, rnr_timer, AddressVector, MigState, PathMtu, QpState, QpType, GSI_QKEY,
    MAX_FLOW_LABEL, MAX_MIN_RNR_TIMER, MAX_QPN, MAX_RETRY_CNT, MAX_RNR_RETRY, MAX_SL, MAX_TIMEOUT,
};
use super::mask::{Attr, AttrMask, QpAttr};
use super::migration;
use super::table::transition;

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
    /// REARM or ARMED asked for with no alternate path loaded
    /// (`qp::migration`).
    #[error("path_mig_state REARM or ARMED needs an alternate path (ALT_PATH)")]
    NoAlternatePath,
    /// A path migration state change that is not allowed (`qp::migration`).
    #[error("path_mig_state cannot go from {from:?} to {to:?}")]
    MigStateChange { from: MigState, to: MigState },
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
            ModifyError::NoAlternatePath => "no_alt_path",
            ModifyError::MigStateChange { .. } => "mig_state_change",
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
    pub(super) caps: QpCaps,
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

    /// For the engine's own changes (`qp::migration`), never Modify QP's.
    pub(super) fn attrs_mut(&mut self) -> &mut QpAttr {
        &mut self.attrs
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
    migration::check(current, attr, mask)?;

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
        migration::apply(current, &mut next, attr, mask);
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
