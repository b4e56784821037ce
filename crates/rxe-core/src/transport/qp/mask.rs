//! The attributes of one Modify QP call (IBTA 11.2.5; libibverbs'
//! `struct ibv_qp_attr` and its `IBV_QP_*` mask): [`Attr`] names one,
//! [`AttrMask`] says which of them a call sets, [`QpAttr`] holds their
//! values.
//!
//! Bit values of [`AttrMask`] are those of libibverbs, so that the verbs
//! layer converts a raw mask with `from_bits` and nothing else.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

use super::attr::{AccessFlags, AddressVector, AltPath, MigState, PathMtu, QpState};
use crate::transport::psn::Psn;

/// One attribute of Modify QP: one bit of [`AttrMask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attr {
    State,
    CurState,
    EnSqdAsyncNotify,
    AccessFlags,
    PkeyIndex,
    Port,
    Qkey,
    Av,
    PathMtu,
    Timeout,
    RetryCnt,
    RnrRetry,
    RqPsn,
    MaxRdAtomic,
    AltPath,
    MinRnrTimer,
    SqPsn,
    MaxDestRdAtomic,
    PathMigState,
    DestQpn,
}

impl Attr {
    /// Every attribute, in mask-bit order.
    pub const ALL: [Attr; 20] = [
        Attr::State,
        Attr::CurState,
        Attr::EnSqdAsyncNotify,
        Attr::AccessFlags,
        Attr::PkeyIndex,
        Attr::Port,
        Attr::Qkey,
        Attr::Av,
        Attr::PathMtu,
        Attr::Timeout,
        Attr::RetryCnt,
        Attr::RnrRetry,
        Attr::RqPsn,
        Attr::MaxRdAtomic,
        Attr::AltPath,
        Attr::MinRnrTimer,
        Attr::SqPsn,
        Attr::MaxDestRdAtomic,
        Attr::PathMigState,
        Attr::DestQpn,
    ];

    /// The `IBV_QP_*` bit.
    pub const fn bit(self) -> u32 {
        match self {
            Attr::State => 1 << 0,
            Attr::CurState => 1 << 1,
            Attr::EnSqdAsyncNotify => 1 << 2,
            Attr::AccessFlags => 1 << 3,
            Attr::PkeyIndex => 1 << 4,
            Attr::Port => 1 << 5,
            Attr::Qkey => 1 << 6,
            Attr::Av => 1 << 7,
            Attr::PathMtu => 1 << 8,
            Attr::Timeout => 1 << 9,
            Attr::RetryCnt => 1 << 10,
            Attr::RnrRetry => 1 << 11,
            Attr::RqPsn => 1 << 12,
            Attr::MaxRdAtomic => 1 << 13,
            Attr::AltPath => 1 << 14,
            Attr::MinRnrTimer => 1 << 15,
            Attr::SqPsn => 1 << 16,
            Attr::MaxDestRdAtomic => 1 << 17,
            Attr::PathMigState => 1 << 18,
            // 1 << 19 is IBV_QP_CAP (resizing queues), which no transition
            // allows.
            Attr::DestQpn => 1 << 20,
        }
    }

    /// The name without the `IBV_QP_` prefix.
    pub const fn name(self) -> &'static str {
        match self {
            Attr::State => "STATE",
            Attr::CurState => "CUR_STATE",
            Attr::EnSqdAsyncNotify => "EN_SQD_ASYNC_NOTIFY",
            Attr::AccessFlags => "ACCESS_FLAGS",
            Attr::PkeyIndex => "PKEY_INDEX",
            Attr::Port => "PORT",
            Attr::Qkey => "QKEY",
            Attr::Av => "AV",
            Attr::PathMtu => "PATH_MTU",
            Attr::Timeout => "TIMEOUT",
            Attr::RetryCnt => "RETRY_CNT",
            Attr::RnrRetry => "RNR_RETRY",
            Attr::RqPsn => "RQ_PSN",
            Attr::MaxRdAtomic => "MAX_QP_RD_ATOMIC",
            Attr::AltPath => "ALT_PATH",
            Attr::MinRnrTimer => "MIN_RNR_TIMER",
            Attr::SqPsn => "SQ_PSN",
            Attr::MaxDestRdAtomic => "MAX_DEST_RD_ATOMIC",
            Attr::PathMigState => "PATH_MIG_STATE",
            Attr::DestQpn => "DEST_QPN",
        }
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Attr`]s: which fields of a [`QpAttr`] a Modify QP call sets
/// (`int attr_mask` of `ibv_modify_qp`, same bits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(u32);

#[allow(missing_docs)]
impl AttrMask {
    pub const STATE: AttrMask = AttrMask(Attr::State.bit());
    pub const CUR_STATE: AttrMask = AttrMask(Attr::CurState.bit());
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(Attr::EnSqdAsyncNotify.bit());
    pub const ACCESS_FLAGS: AttrMask = AttrMask(Attr::AccessFlags.bit());
    pub const PKEY_INDEX: AttrMask = AttrMask(Attr::PkeyIndex.bit());
    pub const PORT: AttrMask = AttrMask(Attr::Port.bit());
    pub const QKEY: AttrMask = AttrMask(Attr::Qkey.bit());
    pub const AV: AttrMask = AttrMask(Attr::Av.bit());
    pub const PATH_MTU: AttrMask = AttrMask(Attr::PathMtu.bit());
    pub const TIMEOUT: AttrMask = AttrMask(Attr::Timeout.bit());
    pub const RETRY_CNT: AttrMask = AttrMask(Attr::RetryCnt.bit());
    pub const RNR_RETRY: AttrMask = AttrMask(Attr::RnrRetry.bit());
    pub const RQ_PSN: AttrMask = AttrMask(Attr::RqPsn.bit());
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(Attr::MaxRdAtomic.bit());
    pub const ALT_PATH: AttrMask = AttrMask(Attr::AltPath.bit());
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(Attr::MinRnrTimer.bit());
    pub const SQ_PSN: AttrMask = AttrMask(Attr::SqPsn.bit());
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(Attr::MaxDestRdAtomic.bit());
    pub const PATH_MIG_STATE: AttrMask = AttrMask(Attr::PathMigState.bit());
    pub const DEST_QPN: AttrMask = AttrMask(Attr::DestQpn.bit());
}

impl AttrMask {
    const ALL_BITS: u32 = {
        let mut bits = 0;
        let mut i = 0;
        while i < Attr::ALL.len() {
            bits |= Attr::ALL[i].bit();
            i += 1;
        }
        bits
    };

    pub const fn empty() -> AttrMask {
        AttrMask(0)
    }
    /// Every attribute this module knows.
    pub const fn all() -> AttrMask {
        AttrMask(Self::ALL_BITS)
    }
    /// The mask of `bits`, or `None` if it has a bit this module does not
    /// model (`IBV_QP_CAP`, `IBV_QP_RATE_LIMIT`, ...): no transition allows
    /// those, and the verbs layer should report them as unsupported.
    pub const fn from_bits(bits: u32) -> Option<AttrMask> {
        if bits & !Self::ALL_BITS == 0 {
            Some(AttrMask(bits))
        } else {
            None
        }
    }
    pub const fn bits(self) -> u32 {
        self.0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub const fn has(self, attr: Attr) -> bool {
        self.0 & attr.bit() != 0
    }
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }
    pub const fn intersection(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & other.0)
    }
    /// The attributes of `self` that are not in `other`.
    pub const fn difference(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }
    pub const fn with(self, attr: Attr) -> AttrMask {
        AttrMask(self.0 | attr.bit())
    }
    pub const fn without(self, attr: Attr) -> AttrMask {
        AttrMask(self.0 & !attr.bit())
    }
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }
    /// The attributes in the set, in mask-bit order.
    pub fn iter(self) -> impl Iterator<Item = Attr> {
        Attr::ALL.into_iter().filter(move |a| self.has(*a))
    }
    /// The first attribute in mask-bit order.
    pub fn first(self) -> Option<Attr> {
        self.iter().next()
    }
}

impl From<Attr> for AttrMask {
    fn from(a: Attr) -> AttrMask {
        AttrMask(a.bit())
    }
}

impl BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        self.union(rhs)
    }
}

impl BitOrAssign for AttrMask {
    fn bitor_assign(&mut self, rhs: AttrMask) {
        *self = self.union(rhs);
    }
}

impl BitAnd for AttrMask {
    type Output = AttrMask;
    fn bitand(self, rhs: AttrMask) -> AttrMask {
        self.intersection(rhs)
    }
}

impl fmt::Debug for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AttrMask({self})")
    }
}

/// `PKEY_INDEX | PORT`, or `(none)`.
impl fmt::Display for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        for (i, a) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            f.write_str(a.name())?;
        }
        Ok(())
    }
}

/// The values of a Modify QP call (`struct ibv_qp_attr`), each optional.
///
/// The [`AttrMask`] passed with it says which fields the call sets; every
/// field it names must be `Some`. A `Some` field that the mask does not name
/// is ignored, as `ibv_modify_qp` ignores fields outside its mask.
/// [`QpAttr::mask`] gives the mask of exactly the `Some` fields, for callers
/// that build a `QpAttr` for one call.
///
/// A [`QpConfig`](super::QpConfig) keeps its current values in the
/// same struct, with `qp_state` and `cur_qp_state` unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: Option<QpState>,
    /// The state the consumer believes the QP is in (allowed only on the
    /// transitions into RTS from RTR, RTS, SQD and SQE). If it is not the
    /// QP's state, Modify QP fails.
    pub cur_qp_state: Option<QpState>,
    /// Raise an affiliated event when the send queue has drained (RTS→SQD).
    pub en_sqd_async_notify: Option<bool>,
    /// Remote operations allowed (RC, UC).
    pub access_flags: Option<AccessFlags>,
    /// Index into the port's P_Key table.
    pub pkey_index: Option<u16>,
    /// Port number, from 1.
    pub port_num: Option<u8>,
    /// Q_Key (UD, GSI).
    pub qkey: Option<u32>,
    /// Primary path (RC, UC).
    pub av: Option<AddressVector>,
    /// Path MTU (RC, UC).
    pub path_mtu: Option<PathMtu>,
    /// Local ACK timeout code, 0..=31: see [`local_ack_timeout`](super::local_ack_timeout) (RC).
    pub timeout: Option<u8>,
    /// Retries after a transport timeout or NAK sequence error, 0..=7 (RC).
    pub retry_cnt: Option<u8>,
    /// Retries after an RNR NAK, 0..=7, 7 meaning without end (RC).
    pub rnr_retry: Option<u8>,
    /// First PSN expected by the receive side (RC, UC).
    pub rq_psn: Option<Psn>,
    /// Outstanding RDMA READ and atomic requests this QP may have as
    /// requester (`max_rd_atomic`, RC).
    pub max_rd_atomic: Option<u8>,
    /// Alternate path (RC, UC).
    pub alt_path: Option<AltPath>,
    /// RNR NAK timer code the responder sends, 0..=31: see
    /// [`rnr_timer`](super::rnr_timer) (RC).
    pub min_rnr_timer: Option<u8>,
    /// First PSN of the send side.
    pub sq_psn: Option<Psn>,
    /// Incoming RDMA READ and atomic requests this QP serves at once, as
    /// responder (RC).
    pub max_dest_rd_atomic: Option<u8>,
    /// Path migration state (RC, UC).
    pub path_mig_state: Option<MigState>,
    /// Remote QP number, 24 bits (RC, UC).
    pub dest_qpn: Option<u32>,
}

impl QpAttr {
    /// Whether the field of `attr` holds a value.
    pub const fn is_set(&self, attr: Attr) -> bool {
        match attr {
            Attr::State => self.qp_state.is_some(),
            Attr::CurState => self.cur_qp_state.is_some(),
            Attr::EnSqdAsyncNotify => self.en_sqd_async_notify.is_some(),
            Attr::AccessFlags => self.access_flags.is_some(),
            Attr::PkeyIndex => self.pkey_index.is_some(),
            Attr::Port => self.port_num.is_some(),
            Attr::Qkey => self.qkey.is_some(),
            Attr::Av => self.av.is_some(),
            Attr::PathMtu => self.path_mtu.is_some(),
            Attr::Timeout => self.timeout.is_some(),
            Attr::RetryCnt => self.retry_cnt.is_some(),
            Attr::RnrRetry => self.rnr_retry.is_some(),
            Attr::RqPsn => self.rq_psn.is_some(),
            Attr::MaxRdAtomic => self.max_rd_atomic.is_some(),
            Attr::AltPath => self.alt_path.is_some(),
            Attr::MinRnrTimer => self.min_rnr_timer.is_some(),
            Attr::SqPsn => self.sq_psn.is_some(),
            Attr::MaxDestRdAtomic => self.max_dest_rd_atomic.is_some(),
            Attr::PathMigState => self.path_mig_state.is_some(),
            Attr::DestQpn => self.dest_qpn.is_some(),
        }
    }

    /// The mask of the fields that hold a value.
    pub fn mask(&self) -> AttrMask {
        Attr::ALL
            .into_iter()
            .filter(|a| self.is_set(*a))
            .fold(AttrMask::empty(), AttrMask::with)
    }

    /// Copies the field of `attr` from `src` (value or `None`).
    pub(crate) fn copy_field(&mut self, src: &QpAttr, attr: Attr) {
        match attr {
            Attr::State => self.qp_state = src.qp_state,
            Attr::CurState => self.cur_qp_state = src.cur_qp_state,
            Attr::EnSqdAsyncNotify => self.en_sqd_async_notify = src.en_sqd_async_notify,
            Attr::AccessFlags => self.access_flags = src.access_flags,
            Attr::PkeyIndex => self.pkey_index = src.pkey_index,
            Attr::Port => self.port_num = src.port_num,
            Attr::Qkey => self.qkey = src.qkey,
            Attr::Av => self.av = src.av,
            Attr::PathMtu => self.path_mtu = src.path_mtu,
            Attr::Timeout => self.timeout = src.timeout,
            Attr::RetryCnt => self.retry_cnt = src.retry_cnt,
            Attr::RnrRetry => self.rnr_retry = src.rnr_retry,
            Attr::RqPsn => self.rq_psn = src.rq_psn,
            Attr::MaxRdAtomic => self.max_rd_atomic = src.max_rd_atomic,
            Attr::AltPath => self.alt_path = src.alt_path,
            Attr::MinRnrTimer => self.min_rnr_timer = src.min_rnr_timer,
            Attr::SqPsn => self.sq_psn = src.sq_psn,
            Attr::MaxDestRdAtomic => self.max_dest_rd_atomic = src.max_dest_rd_atomic,
            Attr::PathMigState => self.path_mig_state = src.path_mig_state,
            Attr::DestQpn => self.dest_qpn = src.dest_qpn,
        }
    }
}
