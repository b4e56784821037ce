//! Queue pair attribute values (IBTA 11.2.5, Modify QP; libibverbs'
//! `struct ibv_qp_attr`): QP types and states, path MTUs, migration states,
//! access flags, address vectors, the ranges of the other values, and the
//! timers that two of them encode. Which attributes one Modify QP call sets
//! is [`super::mask`].
//!
//! Bit values of [`AccessFlags`], [`QpState`], [`PathMtu`] and [`MigState`]
//! are those of libibverbs, so that the verbs layer converts raw values
//! with `from_bits`/`from_ibv` and nothing else.

use core::fmt;
use core::ops::BitOr;
use core::time::Duration;

use crate::wire::aeth::rnr_timer_micros;
use crate::wire::Gid;

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
/// alternate path (`qp::migration`).
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
    /// `IBV_ACCESS_MW_BIND`: a memory region's right to have memory
    /// windows bound to it (IBTA 10.6.7, C10-73 as cited by kernel rxe;
    /// not checked against the text). A region flag, never a QP flag:
    /// [`AccessFlags::from_bits`] refuses it, [`AccessFlags::from_mr_bits`]
    /// keeps it.
    pub const MW_BIND: AccessFlags = AccessFlags(1 << 4);
    /// `IBV_ACCESS_FLUSH_GLOBAL` (rdma-core after v44): a region that a
    /// FLUSH may ask for global visibility of (IBTA 1.5 Annex A19, not
    /// checked against the text). A region flag.
    pub const FLUSH_GLOBAL: AccessFlags = AccessFlags(1 << 8);
    /// `IBV_ACCESS_FLUSH_PERSISTENT`: a region that a FLUSH may ask for
    /// persistence of. A region flag.
    pub const FLUSH_PERSISTENT: AccessFlags = AccessFlags(1 << 9);

    const NAMES: [(AccessFlags, &'static str); 7] = [
        (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
        (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
        (AccessFlags::REMOTE_READ, "REMOTE_READ"),
        (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        (AccessFlags::MW_BIND, "MW_BIND"),
        (AccessFlags::FLUSH_GLOBAL, "FLUSH_GLOBAL"),
        (AccessFlags::FLUSH_PERSISTENT, "FLUSH_PERSISTENT"),
    ];
    const ALL_BITS: u32 = 0xf;
    const MR_BITS: u32 = 0x31f;

    /// The memory-region flags of `bits` (the four rights, `MW_BIND` and
    /// the two FLUSH rights); other bits are dropped.
    pub const fn from_mr_bits(bits: u32) -> AccessFlags {
        AccessFlags(bits & Self::MR_BITS)
    }
    /// The remote rights only (what a memory window can grant).
    pub const fn remote(self) -> AccessFlags {
        AccessFlags(self.0 & (Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0))
    }

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
    pub dgid: Gid,
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
    /// Local ACK timeout code on this path, as [`QpAttr::timeout`](super::QpAttr::timeout).
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
