//! The narrow interface through which the transport touches registered
//! memory: the responder for RDMA WRITE, READ and atomics (R_Keys), the
//! requester for the local scatter/gather entries of its work requests
//! (L_Keys).
//!
//! [`MemoryAccess`] has one implementation, `RegionTable` (the
//! `region_table` module), which applies the rules below; the verbs
//! layer's MR table is that table over registered memory, `VecMemory` the
//! same table over `Vec<u8>` buffers for the transport tests and the
//! network simulator.
//!
//! A responder validates an RETH once per message with
//! [`MemoryAccess::check_rdma`], keeps the [`Region`] it gets, and copies each
//! packet's payload at increasing offsets into it with
//! [`MemoryAccess::write`] (or out of it with [`MemoryAccess::read`] for READ
//! responses). An AtomicETH is validated and executed in one call,
//! [`MemoryAccess::atomic`], which returns the original value for the
//! AtomicAckETH.
//!
//! Every address and length sum is computed with checked arithmetic: a sum
//! that overflows is [`MemError::Overflow`], never a wrap (the kernel rxe had
//! several `iova + length` overflow bugs that let a remote peer write out of
//! bounds).
//!
//! Rules and where they come from:
//!
//! - Key layout: a 32-bit L_Key/R_Key is a 24-bit index (the upper bits) and
//!   an 8-bit key portion (the low byte) that the consumer may change when the
//!   region is re-registered or re-bound, so that stale keys stop working
//!   (libibverbs `ibv_inc_rkey(3)`: "increases the 8 LSB ... same index (bits
//!   0xffffff00)"; the Linux fast-register MR interface describes the same
//!   split). The IBTA section that defines it (memory management, chapter 10)
//!   was not checked against the text.
//! - A zero-length RDMA READ or WRITE need not carry a valid R_Key or
//!   address (IBTA compliance statement C9-88, as cited by the kernel rxe
//!   responder; the text itself was not checked): see
//!   [`MemoryAccess::check_rdma`].
//! - Atomics operate on 64 bits at an 8-byte aligned virtual address (IBTA
//!   9.4.5, not checked against the text); a misaligned address is answered
//!   with NAK Invalid Request, as the kernel rxe responder does (its
//!   "misaligned atomic" error is a class C error answered with
//!   `AETH_NAK_INVALID_REQ`). Key, PD, access and bounds are checked first,
//!   alignment last, in the kernel's order.
//! - Key, PD, access-right and bounds violations are answered with NAK
//!   Remote Access Error (IBTA 9.7.5.2.x; the kernel rxe maps all of them to
//!   its R_Key violation state, which sends `AETH_NAK_REM_ACC_ERR`).
//! - SEND with Invalidate ([`MemoryAccess::invalidate`], rule in
//!   [`validate_invalidate`]) may only invalidate a region of the QP's own
//!   PD, named by its current R_Key, that was made to be invalidated
//!   remotely: a fast-registered region or a memory window (IBTA 10.6.7 and
//!   9.4.5 area, not checked against the text). Kernel rxe refuses to
//!   invalidate an MR that is not of the fast-registration type
//!   (`IB_MR_TYPE_MEM_REG`), so an `ibv_reg_mr` region can never be revoked
//!   by a peer; [`RegionInfo::remote_invalidate`] carries that type here.

use core::ops::Range;

use super::window::{is_window_key, BindError, MwBind, QpRef, WindowTable};
use crate::transport::qp::AccessFlags;
use crate::wire::aeth::NakCode;

/// An L_Key or R_Key: a 24-bit index and an 8-bit key portion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Key(u32);

impl Key {
    /// The largest index (24 bits).
    pub const MAX_INDEX: u32 = 0x00ff_ffff;

    pub const fn new(raw: u32) -> Key {
        Key(raw)
    }

    /// The key with `index` (its low 24 bits) and key portion `key`; `None`
    /// if `index` does not fit in 24 bits.
    pub const fn from_parts(index: u32, key: u8) -> Option<Key> {
        if index > Self::MAX_INDEX {
            None
        } else {
            Some(Key(index << 8 | key as u32))
        }
    }

    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The upper 24 bits: which region (table slot) the key names.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The low 8 bits: the consumer-owned key portion.
    pub const fn key(self) -> u8 {
        self.0 as u8
    }

    /// The same index with key portion `key`.
    pub const fn with_key(self, key: u8) -> Key {
        Key(self.0 & !0xff | key as u32)
    }

    /// The same index with the key portion incremented (wrapping), as
    /// `ibv_inc_rkey` does.
    pub const fn inc(self) -> Key {
        self.with_key(self.key().wrapping_add(1))
    }
}

impl From<u32> for Key {
    fn from(raw: u32) -> Key {
        Key(raw)
    }
}

impl From<Key> for u32 {
    fn from(k: Key) -> u32 {
        k.0
    }
}

impl core::fmt::Display for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// No region has this key's index (or, remotely, the region has no
    /// R_Key because it grants no remote access).
    #[error("invalid key {key}")]
    InvalidKey { key: Key },
    /// A region has this index, but its key portion differs: a stale key.
    #[error("key {key} does not match the region's key portion")]
    KeyMismatch { key: Key },
    /// The region belongs to another protection domain than the QP.
    #[error("protection domain mismatch")]
    PdMismatch,
    /// The region does not grant these rights (the ones missing).
    #[error("access denied: {needed} not granted")]
    AccessDenied { needed: AccessFlags },
    /// The range is not inside the region.
    #[error("{len} bytes at {va:#x} are outside the region")]
    OutOfBounds { va: u64, len: usize },
    /// An atomic's virtual address is not 8-byte aligned.
    #[error("atomic address {va:#x} is not 8-byte aligned")]
    Misaligned { va: u64 },
    /// An address or length sum overflows.
    #[error("address or length arithmetic overflows")]
    Overflow,
    /// A SEND with Invalidate named a region that cannot be invalidated
    /// remotely (an ordinary registered region, not a fast-registered one).
    #[error("region {key} cannot be invalidated remotely")]
    NotInvalidatable { key: Key },
    /// A type 2B memory window used by another QP than the one that
    /// bound it (IBTA 10.6.7.2, not checked against the text).
    #[error("the memory window is associated with another QP")]
    QpMismatch,
    /// The region has memory windows bound to it: it can be neither
    /// deregistered nor invalidated (kernel rxe refuses both).
    #[error("memory windows are bound to region {key}")]
    Busy { key: Key },
    /// A memory window bind was refused.
    #[error("bind refused: {0}")]
    Bind(BindError),
    /// A fast registration (REG_MR) was refused; the rule it broke.
    #[error("fast registration refused: {0}")]
    FastReg(&'static str),
}

impl From<BindError> for MemError {
    fn from(e: BindError) -> MemError {
        MemError::Bind(e)
    }
}

impl MemError {
    /// The NAK code of the AETH that a responder sends for this error.
    pub const fn nak_code(self) -> NakCode {
        match self {
            MemError::Misaligned { .. }
            | MemError::NotInvalidatable { .. }
            | MemError::Busy { .. }
            | MemError::Bind(_)
            | MemError::FastReg(_) => NakCode::InvalidRequest,
            MemError::InvalidKey { .. }
            | MemError::QpMismatch
            | MemError::KeyMismatch { .. }
            | MemError::PdMismatch
            | MemError::AccessDenied { .. }
            | MemError::OutOfBounds { .. }
            | MemError::Overflow => NakCode::RemoteAccessError,
        }
    }

    /// A short stable name, for counters and logs.
    pub const fn reason(self) -> &'static str {
        match self {
            MemError::InvalidKey { .. } => "invalid_key",
            MemError::KeyMismatch { .. } => "key_mismatch",
            MemError::PdMismatch => "pd_mismatch",
            MemError::AccessDenied { .. } => "access_denied",
            MemError::OutOfBounds { .. } => "out_of_bounds",
            MemError::Misaligned { .. } => "misaligned_atomic",
            MemError::Overflow => "overflow",
            MemError::NotInvalidatable { .. } => "not_invalidatable",
            MemError::QpMismatch => "qp_mismatch",
            MemError::Busy { .. } => "windows_bound",
            MemError::Bind(_) => "bind_refused",
            MemError::FastReg(_) => "fast_reg_refused",
        }
    }
}

/// What a region is, as a memory table stores it: the input of
/// [`validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// The region's current key (L_Key; also its R_Key if it grants any
    /// remote access).
    pub key: Key,
    /// Protection domain handle.
    pub pd: u32,
    /// The virtual address of its first byte.
    pub va: u64,
    /// Its length in bytes.
    pub len: usize,
    /// The rights it grants.
    pub access: AccessFlags,
    /// May a SEND with Invalidate from a peer invalidate it? Only regions
    /// made for it: fast-registered regions (and, later, memory windows).
    /// Kernel rxe refuses remote invalidation of every other MR; the verbs
    /// layer has no fast registration yet, so its regions all say `false`.
    pub remote_invalidate: bool,
}

impl RegionInfo {
    /// Does the region have an R_Key, that is, grant any remote right?
    pub const fn has_rkey(&self) -> bool {
        self.access.bits()
            & (AccessFlags::REMOTE_READ.bits()
                | AccessFlags::REMOTE_WRITE.bits()
                | AccessFlags::REMOTE_ATOMIC.bits())
            != 0
    }
}

/// A validated range of a registered region: what [`MemoryAccess::check`]
/// returns, and what [`MemoryAccess::read`] and [`MemoryAccess::write`] take
/// with an offset into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    key: Key,
    va: u64,
    len: usize,
    /// Where `va` lies from the start of the region, in bytes.
    start: usize,
}

impl Region {
    /// The range of a zero-length RDMA operation: names no region, and
    /// admits only zero-length copies.
    pub const fn empty(va: u64) -> Region {
        Region {
            key: Key(0),
            va,
            len: 0,
            start: 0,
        }
    }

    pub const fn key(&self) -> Key {
        self.key
    }
    pub const fn va(&self) -> u64 {
        self.va
    }
    pub const fn len(&self) -> usize {
        self.len
    }
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `offset..offset + n` of this range, as byte offsets from the
    /// start of the registered region; an error if they are not inside it.
    pub fn bytes(&self, offset: usize, n: usize) -> Result<Range<usize>, MemError> {
        let end = offset.checked_add(n).ok_or(MemError::Overflow)?;
        if end > self.len {
            return Err(MemError::OutOfBounds {
                va: self.va.saturating_add(offset as u64),
                len: n,
            });
        }
        // start + len was checked against the region in `validate`.
        let lo = self.start.checked_add(offset).ok_or(MemError::Overflow)?;
        let hi = self.start.checked_add(end).ok_or(MemError::Overflow)?;
        Ok(lo..hi)
    }
}

/// Checks an access of `len` bytes at `va` with key `key` from protection
/// domain `pd` against `info`, the region that `key`'s index names. This is
/// the whole rule, for implementations of [`MemoryAccess::check`]:
///
/// 1. the key portion must match ([`MemError::KeyMismatch`]); a remote access
///    needs a region with an R_Key ([`MemError::InvalidKey`]);
/// 2. the PD must match ([`MemError::PdMismatch`]);
/// 3. the region must grant `needed` ([`MemError::AccessDenied`] with the
///    missing rights);
/// 4. `va..va + len` must lie inside the region, computed without
///    wrapping ([`MemError::Overflow`], [`MemError::OutOfBounds`]). A
///    zero-length range may sit anywhere from the first byte to one past
///    the last.
pub fn validate(
    info: &RegionInfo,
    key: Key,
    pd: u32,
    is_remote: bool,
    needed: AccessFlags,
    va: u64,
    len: usize,
) -> Result<Region, MemError> {
    if key.index() != info.key.index() {
        return Err(MemError::InvalidKey { key });
    }
    if key.key() != info.key.key() {
        return Err(MemError::KeyMismatch { key });
    }
    if is_remote && !info.has_rkey() {
        return Err(MemError::InvalidKey { key });
    }
    if pd != info.pd {
        return Err(MemError::PdMismatch);
    }
    if !info.access.contains(needed) {
        let missing = AccessFlags::from_bits_truncate(needed.bits() & !info.access.bits());
        return Err(MemError::AccessDenied { needed: missing });
    }
    let len64 = u64::try_from(len).map_err(|_| MemError::Overflow)?;
    let end = va.checked_add(len64).ok_or(MemError::Overflow)?;
    let info_len = u64::try_from(info.len).map_err(|_| MemError::Overflow)?;
    let info_end = info.va.checked_add(info_len).ok_or(MemError::Overflow)?;
    if va < info.va || end > info_end {
        return Err(MemError::OutOfBounds { va, len });
    }
    // va - info.va <= info.len, which is a usize.
    let start = usize::try_from(va - info.va).map_err(|_| MemError::Overflow)?;
    Ok(Region {
        key: info.key,
        va,
        len,
        start,
    })
}

/// Checks that a SEND with Invalidate from a QP in protection domain `pd`
/// may invalidate `info`, the region that `rkey`'s index names. The rule,
/// for implementations of [`MemoryAccess::invalidate`]:
///
/// 1. `rkey` must be the region's current R_Key: same index, same key
///    portion ([`MemError::KeyMismatch`]), and the region must have an R_Key
///    at all ([`MemError::InvalidKey`]);
/// 2. the region must belong to `pd` ([`MemError::PdMismatch`]);
/// 3. the region must be one that may be invalidated remotely
///    ([`MemError::NotInvalidatable`]).
pub fn validate_invalidate(info: &RegionInfo, rkey: Key, pd: u32) -> Result<(), MemError> {
    if rkey.index() != info.key.index() || !info.has_rkey() {
        return Err(MemError::InvalidKey { key: rkey });
    }
    if rkey.key() != info.key.key() {
        return Err(MemError::KeyMismatch { key: rkey });
    }
    if pd != info.pd {
        return Err(MemError::PdMismatch);
    }
    if !info.remote_invalidate {
        return Err(MemError::NotInvalidatable { key: rkey });
    }
    Ok(())
}

/// Checks that a LOCAL_INV work request from a QP in protection domain
/// `pd` may invalidate `info`, the region `key`'s index names: the key is
/// the region's current one, the PD is the QP's, and the region is a
/// fast-registered one (kernel rxe invalidates no other kind of region;
/// IBTA 10.6.5, not checked against the text). Windows bound to it are
/// checked by the caller.
pub fn validate_local_invalidate(info: &RegionInfo, key: Key, pd: u32) -> Result<(), MemError> {
    if key.index() != info.key.index() {
        return Err(MemError::InvalidKey { key });
    }
    if key.key() != info.key.key() {
        return Err(MemError::KeyMismatch { key });
    }
    if pd != info.pd {
        return Err(MemError::PdMismatch);
    }
    if !info.remote_invalidate {
        return Err(MemError::NotInvalidatable { key });
    }
    Ok(())
}

/// The invalidation every [`MemoryAccess`] makes, for SEND with Invalidate
/// (`remote`) and LOCAL_INV: a window's key goes to the window table; a
/// region (`region`: the one the key's index names, if it still answers
/// to keys) must pass [`validate_invalidate`] or
/// [`validate_local_invalidate`] and have no window bound to it.
/// `Ok(true)`: the caller now marks that region invalid.
pub fn invalidate_key(
    windows: &mut WindowTable,
    region: Option<&RegionInfo>,
    key: Key,
    qp: QpRef,
    remote: bool,
) -> Result<bool, MemError> {
    if is_window_key(key) {
        windows.invalidate(key, qp, remote)?;
        return Ok(false);
    }
    let info = region.ok_or(MemError::InvalidKey { key })?;
    if remote {
        validate_invalidate(info, key, qp.pd)?;
    } else {
        validate_local_invalidate(info, key, qp.pd)?;
    }
    if windows.windows_on(key) > 0 {
        return Err(MemError::Busy { key });
    }
    Ok(true)
}

/// A fast registration (the REG_MR work request, `IB_WR_REG_MR` in the
/// kernel's verbs): maps a region allocated for it to `length` bytes at
/// `iova` with `access`, under the key `new_key` (its own index, a key
/// portion the consumer picks: `ib_update_fast_reg_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegMr {
    /// The region's current L_Key.
    pub key: u32,
    pub new_key: u32,
    pub iova: u64,
    pub length: u64,
    pub access: AccessFlags,
}

/// Checks a fast registration of `info` (the region `req.key`'s index
/// names, `valid` its state, `capacity` the bytes it was allocated with)
/// for a QP of `pd`, and returns what the region becomes. The rules (kernel
/// rxe's `rxe_reg_fast_mr` for behaviour; IBTA 10.6.3.x, memory
/// management extensions, not checked against the text):
///
/// 1. the region was allocated for fast registration and is free (not
///    registered, or invalidated since);
/// 2. `req.key` is its current key and `req.new_key` keeps its index;
/// 3. the QP's PD is the region's;
/// 4. `length` fits in what the region was allocated with, and
///    `iova + length` does not wrap;
/// 5. remote write or atomic access needs local write (as for any region).
pub fn validate_fast_reg(
    info: &RegionInfo,
    valid: bool,
    capacity: usize,
    req: &RegMr,
    pd: u32,
) -> Result<RegionInfo, MemError> {
    let key = Key::new(req.key);
    let new = Key::new(req.new_key);
    if !info.remote_invalidate {
        return Err(MemError::FastReg(
            "the region was not allocated for fast registration",
        ));
    }
    if valid {
        return Err(MemError::FastReg(
            "the region is registered: invalidate it first",
        ));
    }
    if key != info.key {
        return Err(MemError::KeyMismatch { key });
    }
    if new.index() != key.index() {
        return Err(MemError::FastReg("the new key changes the region's index"));
    }
    if pd != info.pd {
        return Err(MemError::PdMismatch);
    }
    let len = usize::try_from(req.length).map_err(|_| MemError::Overflow)?;
    if len > capacity {
        return Err(MemError::FastReg(
            "longer than the region was allocated for",
        ));
    }
    req.iova.checked_add(req.length).ok_or(MemError::Overflow)?;
    let a = req.access;
    if (a.contains(AccessFlags::REMOTE_WRITE) || a.contains(AccessFlags::REMOTE_ATOMIC))
        && !a.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(MemError::FastReg(
            "remote write or atomic access needs local write",
        ));
    }
    Ok(RegionInfo {
        key: new,
        va: req.iova,
        len,
        access: a,
        ..*info
    })
}

/// A 64-bit atomic operation (IBTA 9.4.5): compare-and-swap or fetch-and-add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Write `swap` if the value equals `compare`.
    CmpSwap { compare: u64, swap: u64 },
    /// Add `add`, wrapping.
    FetchAdd { add: u64 },
}

impl AtomicOp {
    /// The value the target holds after the operation, given `old`.
    pub const fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CmpSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        }
    }
}

/// Registered memory as the transport sees it.
pub trait MemoryAccess {
    /// Validates an access of `len` bytes at `va` through `key` from a QP in
    /// protection domain `pd`: `is_remote` for an R_Key from the wire, not for
    /// an L_Key of a local SGE; `needed` the rights the access needs (none for
    /// a local read). Implementations look up the region by `key.index()` and
    /// apply [`validate`].
    fn check(
        &self,
        key: Key,
        pd: u32,
        is_remote: bool,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError>;

    /// Copies `dst.len()` bytes at `offset` into `region` to `dst`. Errors if
    /// they are not inside `region` (an offset past its end, even for zero
    /// bytes) or its key no longer names a region; a zero-length copy
    /// inside it succeeds without looking the region up.
    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError>;

    /// Copies `src` to `offset` bytes into `region`; errors as [`read`].
    ///
    /// [`read`]: MemoryAccess::read
    fn write(&mut self, region: &Region, offset: usize, src: &[u8]) -> Result<(), MemError>;

    /// SEND with Invalidate: invalidates what `rkey` names for `qp`: a
    /// region, if [`validate_invalidate`] allows it and no window is bound
    /// to it (afterwards no key names the region, locally or remotely,
    /// until its owner deregisters it), or a type 2 memory window
    /// ([`WindowTable::invalidate`](super::window::WindowTable::invalidate)). An error leaves everything as it was.
    fn invalidate(&mut self, rkey: Key, qp: QpRef) -> Result<(), MemError>;

    /// LOCAL_INV: invalidates what `key` names for `qp`, as
    /// [`MemoryAccess::invalidate`] does, with the rule for local
    /// invalidation of a region ([`validate_local_invalidate`]).
    fn local_invalidate(&mut self, key: Key, qp: QpRef) -> Result<(), MemError>;

    /// Binds a memory window ([`WindowTable::bind`](super::window::WindowTable::bind)) for `qp`; returns
    /// its new R_Key.
    fn bind_mw(&mut self, bind: &MwBind, qp: QpRef) -> Result<Key, MemError>;

    /// REG_MR: registers a region allocated for fast registration, if
    /// [`validate_fast_reg`] allows it; returns its new key.
    fn reg_mr(&mut self, req: &RegMr, qp: QpRef) -> Result<Key, MemError>;

    /// Validates a remote access (an R_Key from the wire) by `qp`: as
    /// [`MemoryAccess::check`] with `is_remote`, for a region; through the
    /// window for a memory window's key.
    fn check_remote(
        &self,
        key: Key,
        qp: QpRef,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        self.check(key, qp.pd, true, needed, va, len)
    }

    /// Validates a remote access by `qp` to the whole region (or window)
    /// `key` names, needing `needed`: a FLUSH of selectivity "memory
    /// region", whose RETH address and length do not count. Returns the
    /// empty range at the region's first byte.
    fn check_whole(&self, key: Key, qp: QpRef, needed: AccessFlags) -> Result<Region, MemError>;

    /// Validates the RETH of an RDMA WRITE or READ (`needed` is
    /// `REMOTE_WRITE` or `REMOTE_READ`). A zero DMA length needs no valid
    /// R_Key or address (C9-88): it gets [`Region::empty`] without a lookup.
    fn check_rdma(
        &self,
        rkey: Key,
        qp: QpRef,
        needed: AccessFlags,
        va: u64,
        dma_len: u32,
    ) -> Result<Region, MemError> {
        if dma_len == 0 {
            return Ok(Region::empty(va));
        }
        let len = usize::try_from(dma_len).map_err(|_| MemError::Overflow)?;
        self.check_remote(rkey, qp, needed, va, len)
    }

    /// Validates an AtomicETH and performs `op` on the 8 bytes at `va`
    /// (host byte order), returning the original value. Key, PD, the
    /// `REMOTE_ATOMIC` right and bounds are checked first, then the 8-byte
    /// alignment of `va`.
    fn atomic(&mut self, rkey: Key, qp: QpRef, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let region = self.check_remote(rkey, qp, AccessFlags::REMOTE_ATOMIC, va, 8)?;
        if va % 8 != 0 {
            return Err(MemError::Misaligned { va });
        }
        atomic_by_copy(self, &region, op)
    }
}

/// Performs `op` on the 8 bytes at the start of a checked `region` by
/// reading, applying and writing back: atomic with respect to other
/// operations of the same engine (which run one at a time), not to anyone
/// else touching the memory. Returns the original value.
pub fn atomic_by_copy<M: MemoryAccess + ?Sized>(
    mem: &mut M,
    region: &Region,
    op: AtomicOp,
) -> Result<u64, MemError> {
    let mut buf = [0u8; 8];
    mem.read(region, 0, &mut buf)?;
    let old = u64::from_ne_bytes(buf);
    let new = op.apply(old);
    if new != old {
        mem.write(region, 0, &new.to_ne_bytes())?;
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    // The rules are tested through the implementation they all share.
    use crate::transport::vec_memory::VecMemory;
    use proptest::prelude::*;

    const PD: u32 = 7;
    const BASE: u64 = 0x1000;
    const LEN: usize = 64;
    const ALL: AccessFlags = AccessFlags::all();
    const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
    const RR: AccessFlags = AccessFlags::REMOTE_READ;
    const RA: AccessFlags = AccessFlags::REMOTE_ATOMIC;
    const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

    fn qp(pd: u32) -> QpRef {
        QpRef { pd, qpn: 0x11 }
    }

    fn mem(access: AccessFlags) -> (VecMemory, Key) {
        let mut m = VecMemory::new();
        let data = (0..LEN as u8).collect();
        let k = m.register_bytes(PD, BASE, data, access).unwrap();
        (m, k)
    }

    #[test]
    fn key_parts() {
        let k = Key::from_parts(0x12_3456, 0x78).unwrap();
        assert_eq!(k.raw(), 0x1234_5678);
        assert_eq!(k.index(), 0x12_3456);
        assert_eq!(k.key(), 0x78);
        assert_eq!(k.with_key(0xff).raw(), 0x1234_56ff);
        assert_eq!(k.with_key(0xff).inc().raw(), 0x1234_5600);
        assert_eq!(Key::from_parts(0x100_0000, 0), None);
        assert_eq!(Key::from(0xdead_beef).index(), 0xde_adbe);
        assert_eq!(k.to_string(), "0x12345678");
    }

    #[test]
    fn nak_codes() {
        let k = Key::new(0x100);
        for e in [
            MemError::InvalidKey { key: k },
            MemError::KeyMismatch { key: k },
            MemError::PdMismatch,
            MemError::AccessDenied { needed: RW },
            MemError::OutOfBounds { va: 0, len: 1 },
            MemError::Overflow,
        ] {
            assert_eq!(e.nak_code(), NakCode::RemoteAccessError, "{e}");
        }
        assert_eq!(
            MemError::Misaligned { va: 4 }.nak_code(),
            NakCode::InvalidRequest
        );
        assert_eq!(
            MemError::NotInvalidatable { key: k }.nak_code(),
            NakCode::InvalidRequest
        );
    }

    #[test]
    fn remote_invalidation_rule() {
        let mut m = VecMemory::new();
        let fast = m.register_invalidatable(PD, BASE, LEN, ALL).unwrap();
        let plain = m.register(PD, BASE, LEN, ALL).unwrap();
        let local = m.register_invalidatable(PD, BASE, LEN, LW).unwrap();
        let info = |m: &VecMemory, k| *m.info(k).unwrap();
        assert_eq!(validate_invalidate(&info(&m, fast), fast, PD), Ok(()));
        assert_eq!(
            validate_invalidate(&info(&m, plain), plain, PD),
            Err(MemError::NotInvalidatable { key: plain })
        );
        assert_eq!(
            validate_invalidate(&info(&m, fast), fast, PD + 1),
            Err(MemError::PdMismatch)
        );
        assert_eq!(
            validate_invalidate(&info(&m, fast), fast.inc(), PD),
            Err(MemError::KeyMismatch { key: fast.inc() })
        );
        // No remote right, no R_Key to name it by.
        assert_eq!(
            validate_invalidate(&info(&m, local), local, PD),
            Err(MemError::InvalidKey { key: local })
        );
        // Through the table: invalidated once, then no key works.
        assert_eq!(
            m.invalidate(plain, qp(PD)),
            Err(MemError::NotInvalidatable { key: plain })
        );
        assert_eq!(m.invalidate(fast, qp(PD)), Ok(()));
        assert_eq!(m.is_invalidated(fast), Ok(true));
        assert_eq!(
            m.check(fast, PD, true, RW, BASE, 1),
            Err(MemError::InvalidKey { key: fast })
        );
        assert_eq!(
            m.invalidate(fast, qp(PD)),
            Err(MemError::InvalidKey { key: fast })
        );
        assert_eq!(m.is_invalidated(plain), Ok(false));
    }

    #[test]
    fn fast_registration_rules() {
        let mut m = VecMemory::new();
        let fr = m.alloc_fast(PD, 64).unwrap();
        let plain = m.register(PD, BASE, LEN, ALL).unwrap();
        let q = qp(PD);
        let req = |key: Key, new: Key, length: u64, access| RegMr {
            key: key.raw(),
            new_key: new.raw(),
            iova: BASE,
            length,
            access,
        };
        // Free: no key reaches it.
        assert!(m.check(fr, PD, false, AccessFlags::empty(), 0, 1).is_err());
        let refused = |m: &mut VecMemory, r: RegMr| m.reg_mr(&r, q).unwrap_err();
        assert!(matches!(
            refused(&mut m, req(plain, plain.inc(), 8, RW | LW)),
            MemError::FastReg(_)
        ));
        assert!(matches!(
            refused(&mut m, req(fr, fr.inc(), 65, RW | LW)),
            MemError::FastReg(_)
        ));
        assert!(matches!(
            refused(&mut m, req(fr, fr.inc(), 8, RW)),
            MemError::FastReg(_)
        ));
        let moved = Key::from_parts(fr.index() + 1, 0).unwrap();
        assert!(matches!(
            refused(&mut m, req(fr, moved, 8, RW | LW)),
            MemError::FastReg(_)
        ));
        assert_eq!(
            refused(&mut m, req(fr.inc(), fr.inc(), 8, RW | LW)),
            MemError::KeyMismatch { key: fr.inc() }
        );
        assert_eq!(
            m.reg_mr(&req(fr, fr.inc(), 8, RW | LW), qp(PD + 1)),
            Err(MemError::PdMismatch)
        );
        let mut wraps = req(fr, fr.inc(), 8, RW | LW);
        wraps.iova = u64::MAX - 3;
        assert_eq!(refused(&mut m, wraps), MemError::Overflow);
        // Registered: reachable through the new key only, within its
        // length; registered again only after an invalidation.
        let k = m.reg_mr(&req(fr, fr.inc(), 32, RW | LW), q).unwrap();
        assert_eq!((k.index(), k.key()), (fr.index(), fr.key().wrapping_add(1)));
        assert!(m.check_rdma(k, q, RW, BASE, 32).is_ok());
        assert!(m.check_rdma(k, q, RW, BASE, 33).is_err());
        assert!(m.check_rdma(fr, q, RW, BASE, 1).is_err());
        assert!(matches!(
            refused(&mut m, req(k, k.inc(), 8, RW | LW)),
            MemError::FastReg(_)
        ));
        assert_eq!(m.local_invalidate(k, q), Ok(()));
        assert!(m.check_rdma(k, q, RW, BASE, 1).is_err());
        let k2 = m.reg_mr(&req(k, k.inc(), 64, RW | LW), q).unwrap();
        assert!(m.check_rdma(k2, q, RW, BASE, 64).is_ok());
        // A peer may invalidate it too.
        assert_eq!(m.invalidate(k2, q), Ok(()));
        assert_eq!(m.is_invalidated(k2), Ok(true));
    }

    #[test]
    fn key_errors() {
        let (m, k) = mem(ALL);
        assert_eq!(
            m.check(k.inc(), PD, true, RW, BASE, 1),
            Err(MemError::KeyMismatch { key: k.inc() })
        );
        let unknown = Key::from_parts(k.index() + 1, k.key()).unwrap();
        assert_eq!(
            m.check(unknown, PD, true, RW, BASE, 1),
            Err(MemError::InvalidKey { key: unknown })
        );
        assert_eq!(
            m.check(Key::new(0), PD, true, RW, BASE, 1),
            Err(MemError::InvalidKey { key: Key::new(0) })
        );
    }

    #[test]
    fn reregistration_changes_key_portion() {
        let (mut m, k) = mem(ALL);
        m.deregister(k).unwrap();
        assert_eq!(
            m.check(k, PD, true, RW, BASE, 1),
            Err(MemError::InvalidKey { key: k })
        );
        let k2 = m.register(PD, BASE, LEN, ALL).unwrap();
        assert_eq!(k2.index(), k.index());
        assert_ne!(k2.key(), k.key());
        assert_eq!(
            m.check(k, PD, true, RW, BASE, 1),
            Err(MemError::KeyMismatch { key: k })
        );
        assert!(m.check(k2, PD, true, RW, BASE, 1).is_ok());
    }

    #[test]
    fn stale_region_is_refused_on_copy() {
        let (mut m, k) = mem(ALL);
        let r = m.check(k, PD, true, RW, BASE, 8).unwrap();
        m.deregister(k).unwrap();
        m.register(PD, BASE, LEN, ALL).unwrap();
        assert_eq!(
            m.write(&r, 0, &[1; 8]),
            Err(MemError::KeyMismatch { key: k })
        );
        assert_eq!(
            m.read(&r, 0, &mut [0; 8]),
            Err(MemError::KeyMismatch { key: k })
        );
    }

    #[test]
    fn pd_mismatch() {
        let (m, k) = mem(ALL);
        assert_eq!(
            m.check(k, PD + 1, true, RW, BASE, 1),
            Err(MemError::PdMismatch)
        );
        assert_eq!(
            m.check(k, PD + 1, false, AccessFlags::empty(), BASE, 1),
            Err(MemError::PdMismatch)
        );
    }

    #[test]
    fn each_missing_right() {
        for flag in [LW, RW, RR, RA] {
            let granted = AccessFlags::from_bits_truncate(ALL.bits() & !flag.bits());
            let (m, k) = mem(granted);
            let remote = flag != LW;
            assert_eq!(
                m.check(k, PD, remote, flag, BASE, 8),
                Err(MemError::AccessDenied { needed: flag }),
                "{flag}"
            );
            assert!(m.check(k, PD, remote, granted, BASE, 8).is_ok());
        }
        // The missing rights are reported, not all of `needed`.
        let (m, k) = mem(RR);
        assert_eq!(
            m.check(k, PD, true, RR | RW, BASE, 8),
            Err(MemError::AccessDenied { needed: RW })
        );
    }

    #[test]
    fn no_rkey_without_remote_rights() {
        let (m, k) = mem(LW);
        assert_eq!(
            m.check(k, PD, true, AccessFlags::empty(), BASE, 1),
            Err(MemError::InvalidKey { key: k })
        );
        // Locally it is fine: a local read needs no right.
        assert!(m.check(k, PD, false, AccessFlags::empty(), BASE, 1).is_ok());
        assert!(m.check(k, PD, false, LW, BASE, 1).is_ok());
    }

    #[test]
    fn bounds_at_both_ends() {
        let (m, k) = mem(ALL);
        let end = BASE + LEN as u64;
        assert!(m.check(k, PD, true, RR, BASE, LEN).is_ok());
        assert_eq!(
            m.check(k, PD, true, RR, BASE - 1, 1),
            Err(MemError::OutOfBounds {
                va: BASE - 1,
                len: 1
            })
        );
        assert_eq!(
            m.check(k, PD, true, RR, BASE, LEN + 1),
            Err(MemError::OutOfBounds {
                va: BASE,
                len: LEN + 1
            })
        );
        assert_eq!(
            m.check(k, PD, true, RR, end - 1, 2),
            Err(MemError::OutOfBounds {
                va: end - 1,
                len: 2
            })
        );
        assert_eq!(
            m.check(k, PD, true, RR, end, 1),
            Err(MemError::OutOfBounds { va: end, len: 1 })
        );
        // Zero length: allowed from the first byte to one past the last.
        let r = m.check(k, PD, true, RR, end, 0).unwrap();
        assert!(r.is_empty());
        assert_eq!(m.read(&r, 0, &mut []), Ok(()));
        assert!(m.check(k, PD, true, RR, BASE, 0).is_ok());
        assert_eq!(
            m.check(k, PD, true, RR, end + 1, 0),
            Err(MemError::OutOfBounds {
                va: end + 1,
                len: 0
            })
        );
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let mut m = VecMemory::new();
        let k = m.register(PD, u64::MAX - 15, 15, ALL).unwrap();
        assert_eq!(
            m.check(k, PD, true, RW, u64::MAX - 1, 2),
            Err(MemError::Overflow)
        );
        assert_eq!(
            m.check(k, PD, true, RW, u64::MAX, usize::MAX),
            Err(MemError::Overflow)
        );
        assert_eq!(
            m.register(PD, u64::MAX - 15, 17, ALL),
            Err(MemError::Overflow)
        );
        let r = m.check(k, PD, true, RW, u64::MAX - 15, 15).unwrap();
        assert_eq!(m.write(&r, usize::MAX, &[1]), Err(MemError::Overflow));
        assert_eq!(
            m.write(&r, 14, &[1, 2]).unwrap_err().nak_code(),
            NakCode::RemoteAccessError
        );
        assert_eq!(m.write(&r, 14, &[9]), Ok(()));
        assert_eq!(m.bytes(k).unwrap()[14], 9);
    }

    #[test]
    fn rdma_write_at_increasing_offsets_then_read() {
        let (mut m, k) = mem(ALL);
        let r = m.check_rdma(k, qp(PD), RW, BASE + 8, 24).unwrap();
        for (i, chunk) in [[0xa1u8; 8], [0xb2; 8], [0xc3; 8]].iter().enumerate() {
            m.write(&r, i * 8, chunk).unwrap();
        }
        assert_eq!(
            m.write(&r, 24, &[0]),
            Err(MemError::OutOfBounds {
                va: BASE + 32,
                len: 1
            })
        );
        let b = m.bytes(k).unwrap();
        assert_eq!(&b[..8], &(0..8).collect::<Vec<u8>>()[..]);
        assert_eq!(&b[8..16], &[0xa1; 8]);
        assert_eq!(&b[24..32], &[0xc3; 8]);
        assert_eq!(b[32], 32);
        let rr = m.check_rdma(k, qp(PD), RR, BASE + 12, 8).unwrap();
        let mut out = [0; 8];
        m.read(&rr, 0, &mut out).unwrap();
        assert_eq!(out, [0xa1, 0xa1, 0xa1, 0xa1, 0xb2, 0xb2, 0xb2, 0xb2]);
    }

    #[test]
    fn zero_length_rdma_needs_no_valid_rkey() {
        let (mut m, _) = mem(ALL);
        let r = m
            .check_rdma(Key::new(0xbad), qp(PD + 1), RW, u64::MAX, 0)
            .unwrap();
        assert_eq!(r, Region::empty(u64::MAX));
        assert_eq!(m.write(&r, 0, &[]), Ok(()));
        assert!(m.write(&r, 0, &[1]).is_err());
        assert!(matches!(
            m.check_rdma(Key::new(0xbad), qp(PD), RW, BASE, 1),
            Err(MemError::InvalidKey { .. })
        ));
    }

    #[test]
    fn atomics() {
        let (mut m, k) = mem(ALL);
        m.bytes_mut(k).unwrap()[8..16].copy_from_slice(&5u64.to_ne_bytes());
        let va = BASE + 8;
        let cs = |compare, swap| AtomicOp::CmpSwap { compare, swap };
        assert_eq!(m.atomic(k, qp(PD), va, cs(4, 9)), Ok(5));
        assert_eq!(m.atomic(k, qp(PD), va, cs(5, 9)), Ok(5));
        assert_eq!(
            m.atomic(k, qp(PD), va, AtomicOp::FetchAdd { add: 3 }),
            Ok(9)
        );
        assert_eq!(
            m.atomic(k, qp(PD), va, AtomicOp::FetchAdd { add: u64::MAX }),
            Ok(12)
        );
        assert_eq!(
            m.bytes(k).unwrap()[8..16],
            11u64.to_ne_bytes(),
            "fetch-add wraps"
        );
        // The last 8 bytes are in bounds; one more is not.
        assert!(m.atomic(k, qp(PD), BASE + 56, cs(0, 0)).is_ok());
        assert!(matches!(
            m.atomic(k, qp(PD), BASE + 64, cs(0, 0)),
            Err(MemError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn atomic_errors() {
        let (mut m, k) = mem(ALL);
        let op = AtomicOp::FetchAdd { add: 1 };
        for off in 1..8 {
            let e = m.atomic(k, qp(PD), BASE + off, op).unwrap_err();
            assert_eq!(e, MemError::Misaligned { va: BASE + off });
            assert_eq!(e.nak_code(), NakCode::InvalidRequest);
        }
        assert_eq!(
            m.bytes(k).unwrap(),
            &(0..LEN as u8).collect::<Vec<u8>>()[..]
        );
        // Key errors come before alignment.
        assert_eq!(
            m.atomic(k, qp(PD + 1), BASE + 1, op),
            Err(MemError::PdMismatch)
        );
        let (mut m, k) = mem(RR | RW | LW);
        assert_eq!(
            m.atomic(k, qp(PD), BASE, op),
            Err(MemError::AccessDenied { needed: RA })
        );
    }

    proptest! {
        #[test]
        fn any_range_round_trips_or_errors(
            va in prop_oneof![BASE - 16..BASE + 2 * LEN as u64, any::<u64>()],
            len in prop_oneof![0usize..2 * LEN, any::<usize>()],
            fill in any::<u8>(),
        ) {
            let (mut m, k) = mem(ALL);
            let inside = va >= BASE
                && (va - BASE) as u128 + len as u128 <= LEN as u128;
            match m.check(k, PD, true, RW | RR, va, len) {
                Ok(r) => {
                    prop_assert!(inside);
                    prop_assert_eq!(r.len(), len);
                    let src = vec![fill; len];
                    m.write(&r, 0, &src).unwrap();
                    let mut dst = vec![!fill; len];
                    m.read(&r, 0, &mut dst).unwrap();
                    prop_assert_eq!(dst, src);
                    let lo = (va - BASE) as usize;
                    prop_assert!(m.bytes(k).unwrap()[lo..lo + len].iter().all(|&b| b == fill));
                    prop_assert!(m.write(&r, len, &[0]).is_err());
                }
                Err(e) => {
                    prop_assert!(!inside);
                    let bounds_error = matches!(e, MemError::OutOfBounds { .. } | MemError::Overflow);
                    prop_assert!(bounds_error, "unexpected {:?}", e);
                }
            }
        }

        #[test]
        fn copies_at_any_offset_stay_inside(off in any::<usize>(), n in 0usize..100) {
            let (mut m, k) = mem(ALL);
            let r = m.check(k, PD, true, RW, BASE + 8, 32).unwrap();
            let ok = off.checked_add(n).is_some_and(|e| e <= 32);
            prop_assert_eq!(m.write(&r, off, &vec![1; n]).is_ok(), ok);
            prop_assert_eq!(m.read(&r, off, &mut vec![0; n]).is_ok(), ok);
            let b = m.bytes(k).unwrap();
            prop_assert!(b[..8].iter().enumerate().all(|(i, &x)| x == i as u8));
            prop_assert!(b[40..].iter().enumerate().all(|(i, &x)| x == 40 + i as u8));
        }
    }
}
