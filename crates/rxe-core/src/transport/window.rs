//! Memory windows: a remote-access key onto part of a registered region,
//! bound, rebound and invalidated by the consumer without registering
//! memory again (IBTA 10.6.7; the section and compliance numbers below are
//! those kernel rxe's `rxe_mw.c` cites, not checked against the text).
//!
//! [`WindowTable`] holds the windows of one device (or of one
//! [`VecMemory`](super::VecMemory)) and every rule about them; the memory
//! tables that implement [`MemoryAccess`](super::MemoryAccess) embed one
//! and ask it first for any key whose index is a window's (at or above
//! [`FIRST_WINDOW_INDEX`]: windows and regions never share an index, so a
//! key alone says which it names, as in kernel rxe's separate index
//! ranges).
//!
//! Rules, with their sources:
//!
//! - Types (IBTA 10.6.7.1, 10.6.7.2): a type 1 window lives in its PD and
//!   is bound by the Bind Memory Window verb, which may rebind it at any
//!   time; a type 2 window is bound by a BIND_MW work request, must be
//!   free (not bound) to be bound (o10-37.2.30), and is freed again only
//!   by invalidation (LOCAL_INV or a peer's SEND with Invalidate). A type
//!   2A window is associated with its PD, a type 2B window also with the QP
//!   that bound it: only that QP's incoming requests may use it.
//! - A bind names the window's current R_Key, and its new R_Key differs
//!   from it only in the 8-bit key portion, which the consumer chooses
//!   (`ibv_inc_rkey`).
//! - The QP, the window and the region are of one PD (C10-72).
//! - The region grants `MW_BIND` (C10-73); a window granting remote write
//!   or atomic access needs a region with local write (C10-74); the
//!   window lies inside the region, with checked arithmetic (C10-75).
//! - A type 2 bind has a region and a non-zero length (o10-37.2.40); a
//!   type 1 bind of length 0 unbinds the window from its region.
//! - A type 1 window cannot be invalidated (o10-37.2.26); it is unbound
//!   by a zero-length bind or by deallocation.
//! - While a window is bound to a region the region cannot be deregistered
//!   or invalidated ([`WindowTable::windows_on`]; kernel rxe counts the
//!   windows of each region the same way and refuses `dereg_mr`).
//! - A remote access through a window checks the key, the state, the PD,
//!   for type 2B the QP, the window's rights and its bounds, and then
//!   the region beneath it (key, PD, bounds) without asking the region for
//!   remote rights: the window grants them.

use std::collections::HashMap;

use super::key_table::KeyTable;
use super::memory::{validate, Key, MemError, Region, RegionInfo};
use crate::transport::qp::AccessFlags;

/// Window keys have indexes from here up; regions' stay below.
pub const FIRST_WINDOW_INDEX: u32 = 0x80_0000;

/// Whether `key` names a window (by its index).
pub const fn is_window_key(key: Key) -> bool {
    key.index() >= FIRST_WINDOW_INDEX
}

/// The type of a memory window (IBTA 10.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by the Bind Memory Window verb; lives in its PD.
    Type1,
    /// Bound by a BIND_MW work request; associated with its PD.
    Type2A,
    /// Bound by a BIND_MW work request; associated with the QP that bound it.
    Type2B,
}

impl MwType {
    pub const fn is_type1(self) -> bool {
        matches!(self, MwType::Type1)
    }
}

/// The QP a memory operation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpRef {
    pub pd: u32,
    pub qpn: u32,
}

/// A bind of a memory window (`ibv_mw_bind` / the BIND_MW work request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window's current R_Key.
    pub mw_rkey: u32,
    /// Its R_Key after the bind: the same index, a new key portion.
    pub new_rkey: u32,
    /// The L_Key of the region to bind to (ignored for a zero-length
    /// type 1 bind, which unbinds).
    pub mr_lkey: u32,
    /// The window's first byte, in the region's virtual addresses.
    pub addr: u64,
    pub length: u64,
    /// The remote rights the window grants (other bits are ignored).
    pub access: AccessFlags,
    /// Posted through the Bind Memory Window verb (type 1) rather than a
    /// BIND_MW work request (type 2).
    pub verb: bool,
}

/// What a bound window covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The region's key at bind time.
    pub mr: Key,
    pub va: u64,
    pub len: usize,
    pub access: AccessFlags,
    /// Type 2B: the QP it is associated with.
    pub qpn: Option<u32>,
}

/// One window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowInfo {
    /// Its current R_Key.
    pub key: Key,
    pub pd: u32,
    pub ty: MwType,
    /// `None`: free (type 2), or type 1 bound to nothing.
    pub binding: Option<Binding>,
}

/// Why a bind was refused; a bind error completes with `MW_BIND_ERR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("no window has R_Key {0}")]
    NoWindow(Key),
    #[error("a type 1 window is bound by the verb, a type 2 one by a work request")]
    WrongPath,
    #[error("the new R_Key changes the window's index")]
    IndexChanged,
    #[error("QP, window and region are not of one protection domain")]
    PdMismatch,
    #[error("a type 2 window must be invalidated before it is bound again")]
    StillBound,
    #[error("a type 2 window needs a region and a non-zero length")]
    ZeroLength,
    #[error("no region has L_Key {0}")]
    NoRegion(Key),
    #[error("the region does not grant MW_BIND")]
    NoMwBind,
    #[error("remote write or atomic through a window needs LOCAL_WRITE on the region")]
    NeedsLocalWrite,
    #[error("the window does not lie inside the region")]
    OutOfBounds,
    #[error("address or length arithmetic overflows")]
    Overflow,
}

/// The windows of a device.
#[derive(Debug, Clone)]
pub struct WindowTable {
    windows: KeyTable<WindowInfo>,
    /// Windows bound to each region, by the region's index.
    on_region: HashMap<u32, usize>,
}

impl Default for WindowTable {
    fn default() -> WindowTable {
        WindowTable::new()
    }
}

impl WindowTable {
    pub fn new() -> WindowTable {
        WindowTable {
            windows: KeyTable::with_first_index(FIRST_WINDOW_INDEX),
            on_region: HashMap::new(),
        }
    }

    /// How many windows exist.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// `ibv_alloc_mw`: a new, unbound window of `ty` in `pd`.
    pub fn alloc(&mut self, pd: u32, ty: MwType) -> Result<Key, MemError> {
        self.windows.insert_with(|key| WindowInfo {
            key,
            pd,
            ty,
            binding: None,
        })
    }

    /// `ibv_dealloc_mw`: the window goes, and with it its binding.
    pub fn dealloc(&mut self, key: Key) -> Result<WindowInfo, MemError> {
        let w = self
            .windows
            .remove(self.current_key(key)?)
            .ok_or(MemError::InvalidKey { key })?;
        self.release(w.binding);
        Ok(w)
    }

    /// The window with index `key.index()` whatever its key portion (a
    /// window's key changes at every bind; its owner names it by index).
    pub fn info(&self, key: Key) -> Option<&WindowInfo> {
        self.windows.by_index(key).map(|(_, w)| w)
    }

    fn current_key(&self, key: Key) -> Result<Key, MemError> {
        self.windows
            .by_index(key)
            .map(|(k, _)| k)
            .ok_or(MemError::InvalidKey { key })
    }

    /// The first byte of the window `key`'s index names, if it is bound.
    pub fn start_of(&self, key: Key) -> Option<u64> {
        self.info(key).and_then(|w| w.binding).map(|b| b.va)
    }

    /// How many windows are bound to the region `mr` names.
    pub fn windows_on(&self, mr: Key) -> usize {
        self.on_region.get(&mr.index()).copied().unwrap_or(0)
    }

    fn release(&mut self, binding: Option<Binding>) {
        if let Some(b) = binding {
            if let Some(n) = self.on_region.get_mut(&b.mr.index()) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.on_region.remove(&b.mr.index());
                }
            }
        }
    }

    /// Binds a window for `qp`. `region` is the region `bind.mr_lkey`
    /// names, if any (with its current key: a stale L_Key finds none).
    /// Returns the window's new R_Key. An error leaves the window as it
    /// was.
    pub fn bind(
        &mut self,
        bind: &MwBind,
        qp: QpRef,
        region: Option<&RegionInfo>,
    ) -> Result<Key, BindError> {
        let mw_rkey = Key::new(bind.mw_rkey);
        let new_key = Key::new(bind.new_rkey);
        let w = *self
            .windows
            .get(mw_rkey)
            .ok_or(BindError::NoWindow(mw_rkey))?;
        if w.ty.is_type1() != bind.verb {
            return Err(BindError::WrongPath);
        }
        if new_key.index() != mw_rkey.index() {
            return Err(BindError::IndexChanged);
        }
        // C10-72.
        if w.pd != qp.pd {
            return Err(BindError::PdMismatch);
        }
        // o10-37.2.30.
        if !w.ty.is_type1() && w.binding.is_some() {
            return Err(BindError::StillBound);
        }
        let binding = if w.ty.is_type1() && bind.length == 0 {
            // A zero-length type 1 bind: bound to nothing.
            None
        } else {
            // o10-37.2.40.
            if bind.length == 0 {
                return Err(BindError::ZeroLength);
            }
            let mr_key = Key::new(bind.mr_lkey);
            let r = region
                .filter(|r| r.key == mr_key)
                .ok_or(BindError::NoRegion(mr_key))?;
            Some(check_bind_region(bind, qp, &w, r)?)
        };
        let key = w.key.with_key(new_key.key());
        self.release(w.binding);
        if let Some(b) = binding {
            *self.on_region.entry(b.mr.index()).or_insert(0) += 1;
        }
        self.windows.rekey(w.key, key.key());
        if let Some(e) = self.windows.get_mut(key) {
            e.key = key;
            e.binding = binding;
        }
        Ok(key)
    }

    /// Invalidates the type 2 window `rkey` names: by LOCAL_INV
    /// (`remote` false) or a peer's SEND with Invalidate (`remote` true),
    /// from `qp`. Afterwards the window is free and no key reaches memory
    /// through it.
    pub fn invalidate(&mut self, rkey: Key, qp: QpRef, remote: bool) -> Result<(), MemError> {
        let w = self.lookup(rkey)?;
        if w.binding.is_none() {
            return Err(MemError::InvalidKey { key: rkey });
        }
        // o10-37.2.26.
        if w.ty.is_type1() {
            return Err(MemError::NotInvalidatable { key: rkey });
        }
        if w.pd != qp.pd {
            return Err(MemError::PdMismatch);
        }
        // A peer reaches a type 2B window only through its QP.
        if remote && w.binding.and_then(|b| b.qpn).is_some_and(|q| q != qp.qpn) {
            return Err(MemError::QpMismatch);
        }
        let old = w.binding;
        if let Some(e) = self.windows.get_mut(rkey) {
            e.binding = None;
        }
        self.release(old);
        Ok(())
    }

    fn lookup(&self, key: Key) -> Result<WindowInfo, MemError> {
        match self.windows.by_index(key) {
            None => Err(MemError::InvalidKey { key }),
            Some((k, _)) if k != key => Err(MemError::KeyMismatch { key }),
            Some((_, w)) => Ok(*w),
        }
    }

    /// A remote access of `len` bytes at `va` through window `rkey` from
    /// `qp`, needing `needed`: the window's checks, then `region` (the
    /// region the window is bound to, as `mr_of` finds it by key) without
    /// remote rights asked of it. Returns the region's range.
    pub fn check_remote<'a>(
        &self,
        rkey: Key,
        qp: QpRef,
        needed: AccessFlags,
        va: u64,
        len: usize,
        mr_of: impl FnOnce(Key) -> Option<&'a RegionInfo>,
    ) -> Result<Region, MemError> {
        let w = self.lookup(rkey)?;
        let b = w.binding.ok_or(MemError::InvalidKey { key: rkey })?;
        if w.pd != qp.pd {
            return Err(MemError::PdMismatch);
        }
        if b.qpn.is_some_and(|q| q != qp.qpn) {
            return Err(MemError::QpMismatch);
        }
        if !b.access.contains(needed) {
            let missing = AccessFlags::from_bits_truncate(needed.bits() & !b.access.bits());
            return Err(MemError::AccessDenied { needed: missing });
        }
        let len64 = u64::try_from(len).map_err(|_| MemError::Overflow)?;
        let end = va.checked_add(len64).ok_or(MemError::Overflow)?;
        let wlen = u64::try_from(b.len).map_err(|_| MemError::Overflow)?;
        let wend = b.va.checked_add(wlen).ok_or(MemError::Overflow)?;
        if va < b.va || end > wend {
            return Err(MemError::OutOfBounds { va, len });
        }
        let mr = mr_of(b.mr).ok_or(MemError::InvalidKey { key: rkey })?;
        validate(mr, b.mr, qp.pd, false, AccessFlags::empty(), va, len)
    }
}

/// The region-side checks of a bind (C10-72 to C10-75).
fn check_bind_region(
    bind: &MwBind,
    qp: QpRef,
    w: &WindowInfo,
    r: &RegionInfo,
) -> Result<Binding, BindError> {
    if r.pd != qp.pd {
        return Err(BindError::PdMismatch);
    }
    if !r.access.contains(AccessFlags::MW_BIND) {
        return Err(BindError::NoMwBind);
    }
    let access = bind.access.remote();
    let writes = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_ATOMIC.bits();
    if access.bits() & writes != 0 && !r.access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(BindError::NeedsLocalWrite);
    }
    let end = bind
        .addr
        .checked_add(bind.length)
        .ok_or(BindError::Overflow)?;
    let rlen = u64::try_from(r.len).map_err(|_| BindError::Overflow)?;
    let rend = r.va.checked_add(rlen).ok_or(BindError::Overflow)?;
    if bind.addr < r.va || end > rend {
        return Err(BindError::OutOfBounds);
    }
    let len = usize::try_from(bind.length).map_err(|_| BindError::Overflow)?;
    Ok(Binding {
        mr: r.key,
        va: bind.addr,
        len,
        access,
        qpn: (w.ty == MwType::Type2B).then_some(qp.qpn),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PD: u32 = 3;
    const QP: QpRef = QpRef { pd: PD, qpn: 0x11 };
    const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
    const RR: AccessFlags = AccessFlags::REMOTE_READ;
    const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

    fn region(access: AccessFlags) -> RegionInfo {
        RegionInfo {
            key: Key::from_parts(5, 9).unwrap(),
            pd: PD,
            va: 0x1000,
            len: 0x100,
            access,
            remote_invalidate: false,
        }
    }

    fn bind_of(mw: Key, r: &RegionInfo, addr: u64, length: u64, verb: bool) -> MwBind {
        MwBind {
            mw_rkey: mw.raw(),
            new_rkey: mw.inc().raw(),
            mr_lkey: r.key.raw(),
            addr,
            length,
            access: RW | RR,
            verb,
        }
    }

    #[test]
    fn type2b_bind_access_invalidate_rebind() {
        let mut t = WindowTable::new();
        let r = region(LW | AccessFlags::MW_BIND);
        let mw = t.alloc(PD, MwType::Type2B).unwrap();
        assert!(is_window_key(mw));
        let b = bind_of(mw, &r, 0x1010, 0x20, false);
        let k = t.bind(&b, QP, Some(&r)).unwrap();
        assert_eq!((k.index(), k.key()), (mw.index(), mw.key().wrapping_add(1)));
        assert_eq!(t.windows_on(r.key), 1);
        let mr_of = |_| Some(&r);
        // Inside, at both edges; then one byte past either.
        let reg = t.check_remote(k, QP, RW, 0x1010, 0x20, mr_of).unwrap();
        assert_eq!((reg.key(), reg.len()), (r.key, 0x20));
        let past = t.check_remote(k, QP, RW, 0x1011, 0x20, mr_of);
        assert!(matches!(past, Err(MemError::OutOfBounds { .. })));
        let before = t.check_remote(k, QP, RW, 0x100f, 1, mr_of);
        assert!(matches!(before, Err(MemError::OutOfBounds { .. })));
        // The old key, another QP (2B), a right not granted.
        assert_eq!(
            t.check_remote(mw, QP, RW, 0x1010, 1, mr_of),
            Err(MemError::KeyMismatch { key: mw })
        );
        let other = QpRef { pd: PD, qpn: 0x12 };
        assert_eq!(
            t.check_remote(k, other, RW, 0x1010, 1, mr_of),
            Err(MemError::QpMismatch)
        );
        assert_eq!(
            t.check_remote(k, QP, AccessFlags::REMOTE_ATOMIC, 0x1010, 8, mr_of),
            Err(MemError::AccessDenied {
                needed: AccessFlags::REMOTE_ATOMIC
            })
        );
        // Bound: a second bind is refused until invalidation.
        let again = bind_of(k, &r, 0x1000, 8, false);
        assert_eq!(t.bind(&again, QP, Some(&r)), Err(BindError::StillBound));
        assert_eq!(t.invalidate(k, QP, false), Ok(()));
        assert_eq!(t.windows_on(r.key), 0);
        assert_eq!(
            t.check_remote(k, QP, RW, 0x1010, 1, mr_of),
            Err(MemError::InvalidKey { key: k })
        );
        assert_eq!(
            t.invalidate(k, QP, false),
            Err(MemError::InvalidKey { key: k })
        );
        let k2 = t.bind(&again, QP, Some(&r)).unwrap();
        assert_ne!(k2, k);
        assert!(t.check_remote(k2, QP, RR, 0x1000, 8, mr_of).is_ok());
        t.dealloc(k2).unwrap();
        assert_eq!(t.windows_on(r.key), 0);
        assert!(t.is_empty());
    }

    #[test]
    fn bind_rules() {
        let mut t = WindowTable::new();
        let ok = region(LW | AccessFlags::MW_BIND);
        let mw = t.alloc(PD, MwType::Type2A).unwrap();
        let b = |addr, length| bind_of(mw, &ok, addr, length, false);
        let bind = |t: &mut WindowTable, b: &MwBind, r: &RegionInfo| t.bind(b, QP, Some(r));
        assert_eq!(
            bind(&mut t, &bind_of(mw, &ok, 0x1000, 1, true), &ok),
            Err(BindError::WrongPath)
        );
        let mut moved = b(0x1000, 1);
        moved.new_rkey = Key::from_parts(mw.index() + 1, 0).unwrap().raw();
        assert_eq!(bind(&mut t, &moved, &ok), Err(BindError::IndexChanged));
        let other_pd = QpRef { pd: PD + 1, qpn: 1 };
        assert_eq!(
            t.bind(&b(0x1000, 1), other_pd, Some(&ok)),
            Err(BindError::PdMismatch)
        );
        assert_eq!(bind(&mut t, &b(0x1000, 0), &ok), Err(BindError::ZeroLength));
        assert_eq!(
            bind(&mut t, &b(0x1000, 1), &region(LW | RW)),
            Err(BindError::NoMwBind)
        );
        assert_eq!(
            bind(&mut t, &b(0x1000, 1), &region(AccessFlags::MW_BIND)),
            Err(BindError::NeedsLocalWrite)
        );
        assert_eq!(
            bind(&mut t, &b(0x10ff, 2), &ok),
            Err(BindError::OutOfBounds)
        );
        assert_eq!(bind(&mut t, &b(0xfff, 1), &ok), Err(BindError::OutOfBounds));
        assert_eq!(bind(&mut t, &b(u64::MAX, 2), &ok), Err(BindError::Overflow));
        assert_eq!(
            t.bind(&b(0x1000, 1), QP, None),
            Err(BindError::NoRegion(ok.key))
        );
        // Read-only windows on a region without local write are fine.
        let mut ro = b(0x1000, 0x100);
        ro.access = RR;
        let k = bind(&mut t, &ro, &region(AccessFlags::MW_BIND)).unwrap();
        // Every refusal above left the window as it was: unbound, old key.
        assert_eq!(k.key(), mw.key().wrapping_add(1));
        // 2A: any QP of the PD may use it.
        let other_qp = QpRef { pd: PD, qpn: 99 };
        assert!(t
            .check_remote(k, other_qp, RR, 0x1000, 0x100, |_| Some(&ok))
            .is_ok());
        assert_eq!(
            t.check_remote(k, other_pd, RR, 0x1000, 1, |_| Some(&ok)),
            Err(MemError::PdMismatch)
        );
        assert!(t
            .bind(&bind_of(k, &ok, 0x1000, 1, false), QP, None)
            .is_err());
    }

    #[test]
    fn type1_rebinds_unbinds_and_is_not_invalidated() {
        let mut t = WindowTable::new();
        let r = region(LW | AccessFlags::MW_BIND);
        let mw = t.alloc(PD, MwType::Type1).unwrap();
        assert_eq!(
            t.bind(&bind_of(mw, &r, 0x1000, 8, false), QP, Some(&r)),
            Err(BindError::WrongPath)
        );
        let k1 = t
            .bind(&bind_of(mw, &r, 0x1000, 8, true), QP, Some(&r))
            .unwrap();
        // Rebinding a bound type 1 window is allowed.
        let k2 = t
            .bind(&bind_of(k1, &r, 0x1040, 16, true), QP, Some(&r))
            .unwrap();
        assert_eq!(t.windows_on(r.key), 1, "counted once");
        let other_qp = QpRef { pd: PD, qpn: 5 };
        assert!(t
            .check_remote(k2, other_qp, RW, 0x1040, 16, |_| Some(&r))
            .is_ok());
        assert_eq!(
            t.invalidate(k2, QP, false),
            Err(MemError::NotInvalidatable { key: k2 })
        );
        // Zero length: bound to nothing, the region is free again.
        let k3 = t.bind(&bind_of(k2, &r, 0, 0, true), QP, None).unwrap();
        assert_eq!(t.windows_on(r.key), 0);
        assert_eq!(
            t.check_remote(k3, QP, RW, 0x1040, 1, |_| Some(&r)),
            Err(MemError::InvalidKey { key: k3 })
        );
    }

    #[test]
    fn dealloc_releases_the_region() {
        let mut t = WindowTable::new();
        let r = region(LW | AccessFlags::MW_BIND);
        let mw = t.alloc(PD, MwType::Type1).unwrap();
        let mw2 = t.alloc(PD, MwType::Type2A).unwrap();
        t.bind(&bind_of(mw, &r, 0x1000, 8, true), QP, Some(&r))
            .unwrap();
        t.bind(&bind_of(mw2, &r, 0x1000, 8, false), QP, Some(&r))
            .unwrap();
        assert_eq!(t.windows_on(r.key), 2);
        // Named by index: the owner's old key still finds it.
        t.dealloc(mw).unwrap();
        assert_eq!(t.windows_on(r.key), 1);
        assert!(t.dealloc(mw).is_err());
        t.dealloc(mw2).unwrap();
        assert_eq!(t.windows_on(r.key), 0);
    }
}
