//! Queue pair attributes (IBTA 11.2.5, Modify QP; libibverbs'
//! `struct ibv_qp_attr` and its `IBV_QP_*` mask): the values a consumer sets
//! with Modify QP, the mask that says which of them a call sets, their ranges,
//! and the timers that two of them encode.
//!
//! Bit values of [`AttrMask`], [`AccessFlags`], [`QpState`], [`PathMtu`] and
//! [`MigState`] are those of libibverbs, so that the verbs layer converts raw
//! values with `from_bits`/`from_ibv` and nothing else.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};
use core::time::Duration;

use crate::transport::psn::Psn;
use crate::wire::aeth::rnr_timer_micros;

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Unreliable Datagram.
    Ud,
    /// The General Services Interface, QP1: a UD QP that carries management
    /// datagrams (MADs) such as those of the connection manager, with the
    /// well-known Q_Key [`GSI_QKEY`]. It is bound to its port when created.
    Gsi,
}

impl QpType {
    pub const ALL: [QpType; 4] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Gsi];

    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::Gsi => "GSI",
        }
    }

    /// UD and GSI: every message is one packet with a DETH and a Q_Key.
    pub const fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi)
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The well-known Q_Key of QP1, the GSI (IBTA chapter 13, General
/// Services): GSI datagrams carry it, and a GSI QP takes no other.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// A Q_Key with its most significant bit set is a "controlled" Q_Key: an
/// unprivileged consumer may not give one to a QP, and a UD send whose work
/// request carries one uses the QP's own Q_Key instead. Who is privileged is the verbs layer's business, not this
/// module's.
pub const fn qkey_is_controlled(qkey: u32) -> bool {
    qkey & 0x8000_0000 != 0
}

/// The states of a QP (IBTA 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created or reset: no work is processed, attributes are unset.
    Reset,
    /// Initialized: receives may be posted but are not processed, incoming
    /// packets are dropped, sends may not be posted.
    Init,
    /// Ready To Receive: the receive side works; sends may not be posted.
    Rtr,
    /// Ready To Send: fully operational.
    Rts,
    /// Send Queue Drain: requests in progress finish, no new ones start.
    Sqd,
    /// Send Queue Error (UD, UC and GSI only; an RC QP goes to Error
    /// instead): a send completed in error, the receive side still works.
    Sqe,
    /// Error: all work requests are flushed.
    Error,
}

impl QpState {
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Error => "ERR",
        }
    }

    /// The `enum ibv_qp_state` value.
    pub const fn as_ibv(self) -> u8 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqd => 4,
            QpState::Sqe => 5,
            QpState::Error => 6,
        }
    }

    pub const fn from_ibv(v: u8) -> Option<QpState> {
        match v {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::Rtr),
            3 => Some(QpState::Rts),
            4 => Some(QpState::Sqd),
            5 => Some(QpState::Sqe),
            6 => Some(QpState::Error),
            _ => None,
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Path MTU: the largest payload of one packet (IBTA 9.4; RoCE uses the same
/// five sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathMtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

impl PathMtu {
    pub const ALL: [PathMtu; 5] = [
        PathMtu::Mtu256,
        PathMtu::Mtu512,
        PathMtu::Mtu1024,
        PathMtu::Mtu2048,
        PathMtu::Mtu4096,
    ];

    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            PathMtu::Mtu256 => 256,
            PathMtu::Mtu512 => 512,
            PathMtu::Mtu1024 => 1024,
            PathMtu::Mtu2048 => 2048,
            PathMtu::Mtu4096 => 4096,
        }
    }

    /// The MTU of exactly `bytes`, or `None` if it is not one of the five.
    pub const fn from_bytes(bytes: u32) -> Option<PathMtu> {
        match bytes {
            256 => Some(PathMtu::Mtu256),
            512 => Some(PathMtu::Mtu512),
            1024 => Some(PathMtu::Mtu1024),
            2048 => Some(PathMtu::Mtu2048),
            4096 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }

    /// The `enum ibv_mtu` value (1 for 256 up to 5 for 4096; also the
    /// encoding IBTA uses for MTU fields).
    pub const fn as_ibv(self) -> u8 {
        match self {
            PathMtu::Mtu256 => 1,
            PathMtu::Mtu512 => 2,
            PathMtu::Mtu1024 => 3,
            PathMtu::Mtu2048 => 4,
            PathMtu::Mtu4096 => 5,
        }
    }

    pub const fn from_ibv(v: u8) -> Option<PathMtu> {
        match v {
            1 => Some(PathMtu::Mtu256),
            2 => Some(PathMtu::Mtu512),
            3 => Some(PathMtu::Mtu1024),
            4 => Some(PathMtu::Mtu2048),
            5 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }
}

impl fmt::Display for PathMtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// Path migration state (IBTA 17.2.8), for automatic path migration to the
/// alternate path. Stored and reported; rxe does not migrate paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MigState {
    Migrated,
    Rearm,
    Armed,
}

impl MigState {
    /// The `enum ibv_mig_state` value.
    pub const fn as_ibv(self) -> u8 {
        match self {
            MigState::Migrated => 0,
            MigState::Rearm => 1,
            MigState::Armed => 2,
        }
    }

    pub const fn from_ibv(v: u8) -> Option<MigState> {
        match v {
            0 => Some(MigState::Migrated),
            1 => Some(MigState::Rearm),
            2 => Some(MigState::Armed),
            _ => None,
        }
    }
}

/// The remote operations a QP's responder accepts (`qp_access_flags`; same
/// bits as `IBV_ACCESS_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// `IBV_ACCESS_LOCAL_WRITE`. Means nothing for a QP, but applications
    /// routinely pass it in `qp_access_flags`, so it is accepted.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1 << 0);
    /// Accept RDMA WRITE requests.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(1 << 1);
    /// Accept RDMA READ requests.
    pub const REMOTE_READ: AccessFlags = AccessFlags(1 << 2);
    /// Accept atomic requests.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(1 << 3);

    const NAMES: [(AccessFlags, &'static str); 4] = [
        (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
        (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
        (AccessFlags::REMOTE_READ, "REMOTE_READ"),
        (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
    ];
    const ALL_BITS: u32 = 0xf;

    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }
    pub const fn all() -> AccessFlags {
        AccessFlags(Self::ALL_BITS)
    }
    /// The flags of `bits`, or `None` if it has a bit that is not one of
    /// these four (`IBV_ACCESS_MW_BIND` and the others are memory-region
    /// flags, not QP flags).
    pub const fn from_bits(bits: u32) -> Option<AccessFlags> {
        if bits & !Self::ALL_BITS == 0 {
            Some(AccessFlags(bits))
        } else {
            None
        }
    }
    /// The known flags of `bits`; other bits are dropped.
    pub const fn from_bits_truncate(bits: u32) -> AccessFlags {
        AccessFlags(bits & Self::ALL_BITS)
    }
    pub const fn bits(self) -> u32 {
        self.0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn union(self, other: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | other.0)
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        self.union(rhs)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessFlags({self})")
    }
}

impl fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                write!(f, "{sep}{name}")?;
                sep = " | ";
            }
        }
        if sep.is_empty() {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

/// Where a connected QP sends, or the path of a UD destination: the fields
/// of a GRH (on RoCEv2, of the IP header that stands in for it) and the
/// UDP source port hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AddressVector {
    /// Destination GID; for RoCEv2 over IPv4 the IPv4-mapped IPv6 address.
    pub dgid: [u8; 16],
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// IPv6 hop limit / IPv4 TTL.
    pub hop_limit: u8,
    /// IPv6 traffic class / IPv4 TOS (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv6 flow label, 20 bits.
    pub flow_label: u32,
    /// Service level, 4 bits (on RoCE mapped to a priority, if at all).
    pub sl: u8,
    /// UDP source port to use; `None` lets the engine derive one from the
    /// QPN for ECMP entropy, as kernel rxe does.
    pub src_port: Option<u16>,
}

/// The largest flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0xf_ffff;
/// The largest service level (4 bits).
pub const MAX_SL: u8 = 15;

/// The alternate path of a connected QP (IBTA 17.2.8): `alt_ah_attr`,
/// `alt_pkey_index`, `alt_port_num` and `alt_timeout` of `ibv_qp_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AltPath {
    pub av: AddressVector,
    pub pkey_index: u16,
    pub port_num: u8,
    /// Local ACK timeout code on this path, as [`QpAttr::timeout`].
    pub timeout: u8,
}

/// Largest local ACK timeout code (5 bits).
pub const MAX_TIMEOUT: u8 = 31;
/// Largest transport retry count (3 bits).
pub const MAX_RETRY_CNT: u8 = 7;
/// Largest RNR retry count (3 bits); 7 means "retry without end", as
/// libibverbs documents it.
pub const MAX_RNR_RETRY: u8 = 7;
/// Largest RNR timer code (5 bits), the encoding of the AETH RNR NAK timer.
pub const MAX_MIN_RNR_TIMER: u8 = 31;
/// Largest QP number (24 bits).
pub const MAX_QPN: u32 = 0xff_ffff;

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
    /// Local ACK timeout code, 0..=31: see [`local_ack_timeout`] (RC).
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
    /// [`rnr_timer`] (RC).
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

/// The transport timer interval that a local ACK timeout code asks for:
/// 4.096 µs × 2^`code` (IBTA 9.7.6.1.3, section as cited by the brief and
/// unverified; the formula is the one kernel rxe and rdma-core document).
/// Code 0 means the timer never fires: `None`. Only the low 5 bits of `code`
/// are used, as in the QP context; Modify QP rejects larger codes.
///
/// Code 14, what `ibv_rc_pingpong` sets, gives 67.108864 ms; code 31 gives
/// about 2.4 hours.
pub const fn local_ack_timeout(code: u8) -> Option<Duration> {
    let code = code & 0x1f;
    if code == 0 {
        None
    } else {
        Some(Duration::from_nanos(4096u64 << code))
    }
}

/// The wait that an RNR timer code names (`min_rnr_timer`, and the timer
/// field of an RNR NAK's AETH): the same table as
/// [`wire::aeth::rnr_timer_micros`](crate::wire::aeth::rnr_timer_micros),
/// as a `Duration`. Code 0 is the longest wait (655.36 ms).
pub const fn rnr_timer(code: u8) -> Duration {
    Duration::from_micros(rnr_timer_micros(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mask_bits_are_the_libibverbs_ones() {
        // enum ibv_qp_attr_mask, as in <infiniband/verbs.h>.
        let expect: [(AttrMask, u32); 20] = [
            (AttrMask::STATE, 1),
            (AttrMask::CUR_STATE, 2),
            (AttrMask::EN_SQD_ASYNC_NOTIFY, 4),
            (AttrMask::ACCESS_FLAGS, 8),
            (AttrMask::PKEY_INDEX, 16),
            (AttrMask::PORT, 32),
            (AttrMask::QKEY, 64),
            (AttrMask::AV, 128),
            (AttrMask::PATH_MTU, 256),
            (AttrMask::TIMEOUT, 512),
            (AttrMask::RETRY_CNT, 1024),
            (AttrMask::RNR_RETRY, 2048),
            (AttrMask::RQ_PSN, 4096),
            (AttrMask::MAX_QP_RD_ATOMIC, 8192),
            (AttrMask::ALT_PATH, 16384),
            (AttrMask::MIN_RNR_TIMER, 32768),
            (AttrMask::SQ_PSN, 65536),
            (AttrMask::MAX_DEST_RD_ATOMIC, 131072),
            (AttrMask::PATH_MIG_STATE, 262144),
            (AttrMask::DEST_QPN, 1048576),
        ];
        for (i, (m, bits)) in expect.into_iter().enumerate() {
            assert_eq!(m.bits(), bits, "{m}");
            assert_eq!(AttrMask::from(Attr::ALL[i]), m);
        }
        assert_eq!(AttrMask::all().len(), 20);
        // IBV_QP_CAP and IBV_QP_RATE_LIMIT are not modelled.
        assert_eq!(AttrMask::from_bits(1 << 19), None);
        assert_eq!(AttrMask::from_bits(1 << 25), None);
        assert_eq!(
            AttrMask::from_bits(0x31),
            Some(AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT)
        );
    }

    #[test]
    fn mask_set_operations_and_display() {
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT;
        assert_eq!(m.to_string(), "STATE | PKEY_INDEX | PORT");
        assert_eq!(format!("{:?}", AttrMask::empty()), "AttrMask((none))");
        assert!(m.contains(AttrMask::PORT | AttrMask::STATE));
        assert!(!m.contains(AttrMask::QKEY));
        assert_eq!(
            m.difference(AttrMask::STATE),
            AttrMask::PKEY_INDEX | AttrMask::PORT
        );
        assert_eq!(m & AttrMask::PORT, AttrMask::PORT);
        assert_eq!(
            m.without(Attr::Port).with(Attr::Qkey).first(),
            Some(Attr::State)
        );
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [Attr::State, Attr::PkeyIndex, Attr::Port]
        );
        let mut n = AttrMask::empty();
        n |= AttrMask::AV;
        assert_eq!(n.len(), 1);
        assert_eq!(n.first(), Some(Attr::Av));
        assert_eq!(AttrMask::empty().first(), None);
    }

    #[test]
    fn access_flags() {
        assert_eq!(
            AccessFlags::from_bits(0xe),
            Some(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        );
        assert_eq!(AccessFlags::from_bits(0x10), None); // IBV_ACCESS_MW_BIND
        assert_eq!(AccessFlags::from_bits_truncate(0x17).bits(), 0x7);
        assert_eq!(
            AccessFlags::all().to_string(),
            "LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC"
        );
        assert_eq!(AccessFlags::empty().to_string(), "(none)");
        assert!(AccessFlags::all().contains(AccessFlags::REMOTE_READ));
        assert!(!AccessFlags::REMOTE_WRITE.contains(AccessFlags::REMOTE_READ));
        assert!(AccessFlags::default().is_empty());
    }

    #[test]
    fn enum_conversions_round_trip() {
        for s in QpState::ALL {
            assert_eq!(QpState::from_ibv(s.as_ibv()), Some(s));
        }
        assert_eq!(QpState::from_ibv(7), None);
        for m in PathMtu::ALL {
            assert_eq!(PathMtu::from_ibv(m.as_ibv()), Some(m));
            assert_eq!(PathMtu::from_bytes(m.bytes()), Some(m));
        }
        assert_eq!(PathMtu::from_ibv(0), None);
        assert_eq!(PathMtu::from_ibv(6), None);
        assert_eq!(PathMtu::from_bytes(1500), None);
        assert_eq!(PathMtu::Mtu1024.to_string(), "1024");
        for v in 0..3 {
            assert_eq!(MigState::from_ibv(v).unwrap().as_ibv(), v);
        }
        assert_eq!(MigState::from_ibv(3), None);
        assert_eq!(QpType::Gsi.to_string(), "GSI");
        assert!(QpType::Gsi.is_datagram() && QpType::Ud.is_datagram());
        assert!(!QpType::Rc.is_datagram() && !QpType::Uc.is_datagram());
    }

    #[test]
    fn qkeys() {
        assert!(qkey_is_controlled(GSI_QKEY));
        assert!(!qkey_is_controlled(0x1111_1111));
    }

    #[test]
    fn attr_mask_follows_set_fields() {
        let a = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(0x1111_1111),
            ..QpAttr::default()
        };
        assert_eq!(
            a.mask(),
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY
        );
        assert_eq!(QpAttr::default().mask(), AttrMask::empty());
    }

    #[test]
    fn ack_timeout_values() {
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(1), Some(Duration::from_nanos(8192)));
        // ibv_rc_pingpong's timeout 14: 4.096 us * 16384.
        assert_eq!(
            local_ack_timeout(14),
            Some(Duration::from_nanos(67_108_864))
        );
        assert_eq!(
            local_ack_timeout(31),
            Some(Duration::from_nanos(4096u64 << 31))
        );
        assert_eq!(local_ack_timeout(31).unwrap().as_secs(), 8796);
        assert_eq!(local_ack_timeout(32 + 14), local_ack_timeout(14));
    }

    #[test]
    fn rnr_timer_values() {
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        // ibv_rc_pingpong's min_rnr_timer 12.
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }

    proptest! {
        #[test]
        fn ack_timeout_doubles(code in 1u8..31) {
            let t = local_ack_timeout(code).unwrap();
            prop_assert_eq!(local_ack_timeout(code + 1).unwrap(), t * 2);
            prop_assert_eq!(t.as_nanos(), 4096u128 << code);
        }

        #[test]
        fn mask_from_bits_round_trips(bits in any::<u32>()) {
            match AttrMask::from_bits(bits) {
                Some(m) => {
                    prop_assert_eq!(m.bits(), bits);
                    let rebuilt = m.iter().fold(AttrMask::empty(), AttrMask::with);
                    prop_assert_eq!(rebuilt, m);
                }
                None => prop_assert!(bits & !AttrMask::all().bits() != 0),
            }
        }
    }
}
