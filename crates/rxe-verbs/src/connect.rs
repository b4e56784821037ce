//! Bringing a QP up: RESET → INIT → RTR → RTS with the attributes each
//! transition requires (IBTA 10.3.1 for the states, 11.2.5.2 for Modify
//! QP), for RC, UC and UD.
//!
//! Every program that connects QPs writes this sequence; the values differ
//! (`ibv_rc_pingpong` uses MTU 1024, min_rnr_timer 12, timeout 14 and one
//! READ in flight; perftest negotiates the MTU and the READ depth), the
//! shape does not. So the caller passes every value and this module only
//! decides which attribute goes into which transition:
//!
//! | transition  | RC                                        | UC                 | UD       |
//! |-------------|-------------------------------------------|--------------------|----------|
//! | RESET→INIT  | P_Key index, port, access flags           | the same           | P_Key index, port, Q_Key |
//! | INIT→RTR    | AV, path MTU, dest QPN, RQ PSN, max_dest_rd_atomic, min_rnr_timer | AV, path MTU, dest QPN, RQ PSN | nothing |
//! | RTR→RTS     | SQ PSN, timeout, retry_cnt, rnr_retry, max_rd_atomic | SQ PSN | SQ PSN |
//!
//! which is exactly the set of required attributes of each transition, no
//! optional ones. The attribute sets are pure functions ([`init_attr`],
//! [`ReadyParams::rtr_attr`], [`ReadyParams::rts_attr`]) so that they can
//! be checked without a device; [`to_init`], [`to_rtr`], [`to_rts`] and
//! [`connect`] apply them.
//!
//! ```no_run
//! use rxe_verbs::connect::{self, InitParams, RcParams, ReadyParams, RemoteQp};
//! use rxe_verbs::*;
//! # fn f(qp: &Qp, peer_qpn: u32, peer_gid: Gid) -> Result<(), connect::ConnectError> {
//! let rc = RcParams::PINGPONG;
//! let remote = RemoteQp {
//!     qpn: peer_qpn,
//!     psn: Psn::new(0x200),
//!     av: AddressVector { dgid: peer_gid, hop_limit: 1, ..AddressVector::default() },
//!     path_mtu: PathMtu::Mtu1024,
//! };
//! connect::connect(
//!     qp,
//!     &InitParams::connected(AccessFlags::empty()),
//!     &ReadyParams::Rc { sq_psn: Psn::new(0x100), remote, rc },
//! )
//! # }
//! ```

use rxe_core::transport::{AccessFlags, AddressVector, PathMtu, Psn, QpAttr, QpState, QpType};

use crate::error::{Result, VerbsError};
use crate::qp::Qp;

/// What RESET→INIT sets: decided by this side alone, before it knows the
/// peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitParams {
    /// Index into the port's P_Key table.
    pub pkey_index: u16,
    /// The port, from 1.
    pub port_num: u8,
    pub service: Service,
}

/// The attribute of RESET→INIT that depends on the QP type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// RC and UC: the remote operations the QP accepts.
    Connected { access: AccessFlags },
    /// UD: the Q_Key that incoming datagrams must carry.
    Datagram { qkey: u32 },
}

impl InitParams {
    /// An RC or UC QP on port 1 with P_Key index 0.
    pub fn connected(access: AccessFlags) -> InitParams {
        InitParams {
            pkey_index: 0,
            port_num: crate::device::PORT,
            service: Service::Connected { access },
        }
    }

    /// A UD QP on port 1 with P_Key index 0.
    pub fn datagram(qkey: u32) -> InitParams {
        InitParams {
            pkey_index: 0,
            port_num: crate::device::PORT,
            service: Service::Datagram { qkey },
        }
    }

    /// The same, with another P_Key index.
    pub fn with_pkey_index(self, pkey_index: u16) -> InitParams {
        InitParams { pkey_index, ..self }
    }

    /// The same, on another port.
    pub fn with_port(self, port_num: u8) -> InitParams {
        InitParams { port_num, ..self }
    }
}

/// The remote QP of a connected QP, as the side channel described it, and
/// the path to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Its QP number (our `dest_qpn`).
    pub qpn: u32,
    /// The first PSN it sends (our `rq_psn`).
    pub psn: Psn,
    /// Where it is: its GID, our source GID index, hop limit, SL ...
    pub av: AddressVector,
    pub path_mtu: PathMtu,
}

/// What only RC sets: the READ/atomic depths and the timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcParams {
    /// Incoming READs and atomics served at once (INIT→RTR).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code this QP sends (INIT→RTR).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code (RTR→RTS).
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK (RTR→RTS).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK, 7 without end (RTR→RTS).
    pub rnr_retry: u8,
    /// Outstanding READs and atomics as requester (RTR→RTS).
    pub max_rd_atomic: u8,
}

impl RcParams {
    /// `ibv_rc_pingpong`'s: one READ or atomic each way, RNR NAK timer
    /// code 12 (0.64 ms), ACK timeout code 14 (67 ms), seven retries of
    /// each kind (7 RNR retries: without end).
    pub const PINGPONG: RcParams = RcParams {
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    };

    /// The same, with `n` READs or atomics in flight each way.
    pub const fn with_rd_atomic(self, n: u8) -> RcParams {
        RcParams {
            max_dest_rd_atomic: n,
            max_rd_atomic: n,
            ..self
        }
    }
}

/// What INIT→RTR→RTS sets, by QP type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyParams {
    Rc {
        /// The first PSN this QP sends.
        sq_psn: Psn,
        remote: RemoteQp,
        rc: RcParams,
    },
    Uc {
        sq_psn: Psn,
        remote: RemoteQp,
    },
    /// A UD QP has no peer: each send names its destination.
    Ud {
        sq_psn: Psn,
    },
}

impl ReadyParams {
    /// The QP type these parameters are for.
    pub fn qp_type(&self) -> QpType {
        match self {
            ReadyParams::Rc { .. } => QpType::Rc,
            ReadyParams::Uc { .. } => QpType::Uc,
            ReadyParams::Ud { .. } => QpType::Ud,
        }
    }

    /// INIT→RTR's attributes.
    pub fn rtr_attr(&self) -> QpAttr {
        let rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..QpAttr::default()
        };
        let connected = |remote: &RemoteQp| QpAttr {
            av: Some(remote.av),
            path_mtu: Some(remote.path_mtu),
            dest_qpn: Some(remote.qpn),
            rq_psn: Some(remote.psn),
            ..rtr
        };
        match self {
            ReadyParams::Rc { remote, rc, .. } => QpAttr {
                max_dest_rd_atomic: Some(rc.max_dest_rd_atomic),
                min_rnr_timer: Some(rc.min_rnr_timer),
                ..connected(remote)
            },
            ReadyParams::Uc { remote, .. } => connected(remote),
            ReadyParams::Ud { .. } => rtr,
        }
    }

    /// RTR→RTS's attributes.
    pub fn rts_attr(&self) -> QpAttr {
        let (ReadyParams::Rc { sq_psn, .. }
        | ReadyParams::Uc { sq_psn, .. }
        | ReadyParams::Ud { sq_psn }) = *self;
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..QpAttr::default()
        };
        match self {
            ReadyParams::Rc { rc, .. } => QpAttr {
                timeout: Some(rc.timeout),
                retry_cnt: Some(rc.retry_cnt),
                rnr_retry: Some(rc.rnr_retry),
                max_rd_atomic: Some(rc.max_rd_atomic),
                ..rts
            },
            ReadyParams::Uc { .. } | ReadyParams::Ud { .. } => rts,
        }
    }
}

/// RESET→INIT's attributes.
pub fn init_attr(p: &InitParams) -> QpAttr {
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(p.pkey_index),
        port_num: Some(p.port_num),
        ..QpAttr::default()
    };
    match p.service {
        Service::Connected { access } => QpAttr {
            access_flags: Some(access),
            ..init
        },
        Service::Datagram { qkey } => QpAttr {
            qkey: Some(qkey),
            ..init
        },
    }
}

/// Refuses parameters of one QP type for a QP of another: the transition
/// would fail anyway, with a less telling error.
fn check_type(qp: &Qp, fits: bool, what: &str) -> Result<()> {
    if fits {
        Ok(())
    } else {
        Err(VerbsError::InvalidArgument(format!(
            "{what} parameters for a {} QP",
            qp.qp_type()
        )))
    }
}

/// RESET→INIT.
pub fn to_init(qp: &Qp, p: &InitParams) -> Result<()> {
    let fits = match p.service {
        Service::Connected { .. } => matches!(qp.qp_type(), QpType::Rc | QpType::Uc),
        Service::Datagram { .. } => qp.qp_type() == QpType::Ud,
    };
    let what = match p.service {
        Service::Connected { .. } => "connected (RC/UC)",
        Service::Datagram { .. } => "datagram (UD)",
    };
    check_type(qp, fits, what)?;
    qp.modify(&init_attr(p))
}

/// INIT→RTR.
pub fn to_rtr(qp: &Qp, p: &ReadyParams) -> Result<()> {
    check_type(qp, qp.qp_type() == p.qp_type(), &p.qp_type().to_string())?;
    qp.modify(&p.rtr_attr())
}

/// RTR→RTS.
pub fn to_rts(qp: &Qp, p: &ReadyParams) -> Result<()> {
    check_type(qp, qp.qp_type() == p.qp_type(), &p.qp_type().to_string())?;
    qp.modify(&p.rts_attr())
}

/// INIT→RTR→RTS, for a QP taken to INIT before the peer was known.
pub fn ready(qp: &Qp, p: &ReadyParams) -> Result<(), ConnectError> {
    to_rtr(qp, p).map_err(|e| ConnectError::at(qp, QpState::Rtr, e))?;
    to_rts(qp, p).map_err(|e| ConnectError::at(qp, QpState::Rts, e))
}

/// RESET→INIT→RTR→RTS.
pub fn connect(qp: &Qp, init: &InitParams, p: &ReadyParams) -> Result<(), ConnectError> {
    to_init(qp, init).map_err(|e| ConnectError::at(qp, QpState::Init, e))?;
    ready(qp, p)
}

/// A bring-up that stopped: which transition failed, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot move QP {qpn:#08x} to {to}: {source}")]
pub struct ConnectError {
    pub qpn: u32,
    /// The state the QP was to go to (it stays in the one before).
    pub to: QpState,
    #[source]
    pub source: VerbsError,
}

impl ConnectError {
    fn at(qp: &Qp, to: QpState, source: VerbsError) -> ConnectError {
        ConnectError {
            qpn: qp.qp_num(),
            to,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::transport::{modify, QpCaps, QpConfig};
    use rxe_core::Gid;

    fn remote() -> RemoteQp {
        RemoteQp {
            qpn: 0x12,
            psn: Psn::new(0x200),
            av: AddressVector {
                dgid: Gid::from([0xfe; 16]),
                sgid_index: 1,
                hop_limit: 64,
                sl: 3,
                ..AddressVector::default()
            },
            path_mtu: PathMtu::Mtu2048,
        }
    }

    fn rc() -> RcParams {
        RcParams {
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            max_rd_atomic: 2,
        }
    }

    #[test]
    fn init_sets_access_or_qkey() {
        let a = init_attr(&InitParams::connected(AccessFlags::REMOTE_READ).with_pkey_index(2));
        assert_eq!(
            a,
            QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(2),
                port_num: Some(1),
                access_flags: Some(AccessFlags::REMOTE_READ),
                ..QpAttr::default()
            }
        );
        let a = init_attr(&InitParams::datagram(0x1111_1111).with_port(1));
        assert_eq!(
            a,
            QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(1),
                qkey: Some(0x1111_1111),
                ..QpAttr::default()
            }
        );
    }

    #[test]
    fn rc_sets_the_peer_the_depths_and_the_timers() {
        let p = ReadyParams::Rc {
            sq_psn: Psn::new(0x100),
            remote: remote(),
            rc: rc(),
        };
        assert_eq!(
            p.rtr_attr(),
            QpAttr {
                qp_state: Some(QpState::Rtr),
                av: Some(remote().av),
                path_mtu: Some(PathMtu::Mtu2048),
                dest_qpn: Some(0x12),
                rq_psn: Some(Psn::new(0x200)),
                max_dest_rd_atomic: Some(4),
                min_rnr_timer: Some(12),
                ..QpAttr::default()
            }
        );
        assert_eq!(
            p.rts_attr(),
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(0x100)),
                timeout: Some(14),
                retry_cnt: Some(7),
                rnr_retry: Some(6),
                max_rd_atomic: Some(2),
                ..QpAttr::default()
            }
        );
    }

    #[test]
    fn uc_and_ud_set_only_what_they_need() {
        let p = ReadyParams::Uc {
            sq_psn: Psn::new(5),
            remote: remote(),
        };
        let rtr = p.rtr_attr();
        assert_eq!((rtr.dest_qpn, rtr.max_dest_rd_atomic), (Some(0x12), None));
        assert_eq!(rtr.min_rnr_timer, None);
        let rts = p.rts_attr();
        assert_eq!((rts.sq_psn, rts.timeout), (Some(Psn::new(5)), None));
        assert_eq!(
            (rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic),
            (None, None, None)
        );
        let p = ReadyParams::Ud {
            sq_psn: Psn::new(9),
        };
        assert_eq!(
            p.rtr_attr(),
            QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            }
        );
        assert_eq!(
            p.rts_attr(),
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(9)),
                ..QpAttr::default()
            }
        );
    }

    /// The attribute sets are the transitions' required ones, so the
    /// state machine of rxe-core takes each in turn.
    #[test]
    fn the_state_machine_accepts_each_step() {
        let cases = [
            (
                QpType::Rc,
                InitParams::connected(AccessFlags::REMOTE_WRITE),
                ReadyParams::Rc {
                    sq_psn: Psn::new(1),
                    remote: remote(),
                    rc: rc(),
                },
            ),
            (
                QpType::Uc,
                InitParams::connected(AccessFlags::empty()),
                ReadyParams::Uc {
                    sq_psn: Psn::new(1),
                    remote: remote(),
                },
            ),
            (
                QpType::Ud,
                InitParams::datagram(7),
                ReadyParams::Ud {
                    sq_psn: Psn::new(1),
                },
            ),
        ];
        for (qp_type, init, ready) in cases {
            let mut cfg = QpConfig::new(qp_type, QpCaps::default());
            for (attr, want) in [
                (init_attr(&init), QpState::Init),
                (ready.rtr_attr(), QpState::Rtr),
                (ready.rts_attr(), QpState::Rts),
            ] {
                cfg = modify(&cfg, &attr, attr.mask())
                    .unwrap_or_else(|e| panic!("{qp_type:?} to {want:?}: {e}"));
                assert_eq!(cfg.state(), want, "{qp_type:?}");
            }
        }
    }
}
