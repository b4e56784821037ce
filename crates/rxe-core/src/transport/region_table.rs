//! [`RegionTable`]: the one implementation of [`MemoryAccess`], over any
//! kind of region bytes. The verbs layer's MR table (over the application's
//! registered memory) and [`VecMemory`](super::VecMemory) (over `Vec<u8>`,
//! for tests, the simulator and tools) are this table with different
//! entries, so the rules of the `memory` module are applied here once:
//! key lookup in a [`KeyTable`], valid and invalidated regions, PD, rights
//! and bounds through [`validate`], memory windows through the
//! [`WindowTable`], REG_MR, BIND_MW and atomics.

use super::key_table::KeyTable;
use super::memory::*;
use super::window::{is_window_key, MwBind, QpRef, WindowTable};
use crate::transport::qp::AccessFlags;

/// A copy reached outside the bytes behind a region (a store shorter than
/// the region's description says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("outside the region's bytes")]
pub struct OutsideStore;

/// One registered region as a [`RegionTable`] keeps it: its description,
/// whether it answers to keys, and its bytes. The table calls `read` and
/// `write` once per packet, with offsets it has already checked.
pub trait RegionEntry {
    /// The region's key, PD, address, length and rights.
    fn info(&self) -> &RegionInfo;

    /// Whether a key names the region: cleared by invalidation (SEND with
    /// Invalidate, LOCAL_INV), and for a region allocated for fast
    /// registration until a REG_MR registers it.
    fn is_valid(&self) -> bool;

    fn set_valid(&mut self, valid: bool);

    /// Whether the region's owner still holds it: a region being
    /// deregistered takes no REG_MR and no window. Always so unless the
    /// owner can let go of it apart from the table.
    fn is_registered(&self) -> bool {
        true
    }

    /// REG_MR: the region now has the description `info` over the same
    /// bytes, and is valid.
    fn redescribe(&mut self, info: RegionInfo);

    /// Bytes behind the region (what a REG_MR may map at most).
    fn capacity(&self) -> usize;

    /// Copies the bytes at `offset` of the store into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutsideStore>;

    /// Copies `src` to `offset` of the store.
    fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), OutsideStore>;

    /// Performs `op` as one atomic operation on the 8 bytes at `offset`
    /// (8-byte aligned in the region's address space) and returns the
    /// original value, if the store can; `None` and the table reads,
    /// applies and writes back ([`atomic_by_copy`]).
    fn atomic(&mut self, offset: usize, op: AtomicOp) -> Option<u64> {
        let _ = (offset, op);
        None
    }
}

/// Registered regions by key, and the memory windows over them (their keys
/// in an index range of their own: the `window` module).
#[derive(Debug, Clone)]
pub struct RegionTable<E> {
    regions: KeyTable<E>,
    windows: WindowTable,
}

impl<E> Default for RegionTable<E> {
    fn default() -> RegionTable<E> {
        RegionTable {
            regions: KeyTable::default(),
            windows: WindowTable::default(),
        }
    }
}

impl<E: RegionEntry> RegionTable<E> {
    pub fn new() -> RegionTable<E> {
        RegionTable::default()
    }

    /// Regions registered.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Registers the entry `make` builds with the region's new key, for a
    /// region of `len` bytes at `va`. Errors with [`MemError::Overflow`] if
    /// `va + len` wraps (a region must not wrap the 64-bit address space)
    /// or the table is full (2^24 - 1 regions).
    pub fn insert_with(
        &mut self,
        va: u64,
        len: usize,
        make: impl FnOnce(Key) -> E,
    ) -> Result<Key, MemError> {
        let len64 = u64::try_from(len).map_err(|_| MemError::Overflow)?;
        va.checked_add(len64).ok_or(MemError::Overflow)?;
        self.regions.insert_with(make)
    }

    /// The region in `key`'s slot whatever its key portion (a fast-
    /// registered region's key changes at every registration).
    pub fn by_index(&self, key: Key) -> Option<&E> {
        self.regions.by_index(key).map(|(_, e)| e)
    }

    /// The region that `key` names exactly (index and key portion).
    pub fn get(&self, key: Key) -> Option<&E> {
        self.regions.get(key)
    }

    /// The region that `key` names, telling an unknown key
    /// ([`MemError::InvalidKey`]) from a stale one ([`MemError::KeyMismatch`]).
    pub fn entry(&self, key: Key) -> Result<&E, MemError> {
        match self.regions.by_index(key) {
            None => Err(MemError::InvalidKey { key }),
            Some((k, _)) if k != key => Err(MemError::KeyMismatch { key }),
            Some((_, e)) => Ok(e),
        }
    }

    /// The region that `key` names, to change; errors as
    /// [`RegionTable::entry`].
    pub fn entry_mut(&mut self, key: Key) -> Result<&mut E, MemError> {
        match self.regions.by_index_mut(key) {
            None => Err(MemError::InvalidKey { key }),
            Some((k, _)) if k != key => Err(MemError::KeyMismatch { key }),
            Some((_, e)) => Ok(e),
        }
    }

    /// Removes the region `key` names; afterwards the key fails. Refused
    /// while memory windows are bound to it ([`MemError::Busy`]; kernel rxe
    /// refuses to deregister such a region too).
    pub fn remove(&mut self, key: Key) -> Result<E, MemError> {
        self.entry(key)?;
        if self.windows.windows_on(key) > 0 {
            return Err(MemError::Busy { key });
        }
        self.regions.remove(key).ok_or(MemError::InvalidKey { key })
    }

    /// The memory windows.
    pub fn windows(&self) -> &WindowTable {
        &self.windows
    }

    /// The memory windows, to allocate and deallocate.
    pub fn windows_mut(&mut self) -> &mut WindowTable {
        &mut self.windows
    }

    /// SEND with Invalidate (`remote`) or LOCAL_INV of `key`
    /// ([`invalidate_key`]'s rules): an invalidated region answers to no
    /// key until its owner deregisters it (kernel rxe moves the MR to its
    /// "free" state the same way).
    fn invalidate_key(&mut self, key: Key, qp: QpRef, remote: bool) -> Result<(), MemError> {
        let region = self
            .by_index(key)
            .filter(|e| e.is_valid())
            .map(|e| *e.info());
        if invalidate_key(&mut self.windows, region.as_ref(), key, qp, remote)? {
            if let Some(e) = self.regions.get_mut(key) {
                e.set_valid(false);
            }
        }
        Ok(())
    }
}

/// Where a copy of `len` bytes at `offset` into `region` went outside the
/// bytes behind it.
fn outside(region: &Region, offset: usize, len: usize) -> MemError {
    MemError::OutOfBounds {
        va: region.va().saturating_add(offset as u64),
        len,
    }
}

impl<E: RegionEntry> MemoryAccess for RegionTable<E> {
    fn check(
        &self,
        key: Key,
        pd: u32,
        is_remote: bool,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        // The slot's region whatever the key portion: `validate` tells a
        // stale key (a mismatch) from an unknown one.
        let e = self
            .by_index(key)
            .filter(|e| e.is_valid())
            .ok_or(MemError::InvalidKey { key })?;
        validate(e.info(), key, pd, is_remote, needed, va, len)
    }

    // A copy is checked against the range first, so that an offset past
    // it fails even for zero bytes; the region is looked up by its exact
    // key, so a region deregistered since the check (its slot perhaps
    // reused) fails with a key mismatch.
    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let r = region.bytes(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.entry(region.key())?
            .read(r.start, dst)
            .map_err(|_| outside(region, offset, dst.len()))
    }

    fn write(&mut self, region: &Region, offset: usize, src: &[u8]) -> Result<(), MemError> {
        let r = region.bytes(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.entry_mut(region.key())?
            .write(r.start, src)
            .map_err(|_| outside(region, offset, src.len()))
    }

    fn invalidate(&mut self, rkey: Key, qp: QpRef) -> Result<(), MemError> {
        self.invalidate_key(rkey, qp, true)
    }

    fn local_invalidate(&mut self, key: Key, qp: QpRef) -> Result<(), MemError> {
        self.invalidate_key(key, qp, false)
    }

    fn check_whole(&self, key: Key, qp: QpRef, needed: AccessFlags) -> Result<Region, MemError> {
        let start = if is_window_key(key) {
            self.windows.start_of(key)
        } else {
            self.by_index(key).map(|e| e.info().va)
        };
        let va = start.ok_or(MemError::InvalidKey { key })?;
        self.check_remote(key, qp, needed, va, 0)
    }

    /// REG_MR: the region gets its new key, address, length and rights
    /// (a new description over the same bytes) and answers to accesses.
    fn reg_mr(&mut self, req: &RegMr, qp: QpRef) -> Result<Key, MemError> {
        let key = Key::new(req.key);
        let e = self
            .by_index(key)
            .filter(|e| e.is_registered())
            .ok_or(MemError::InvalidKey { key })?;
        let info = validate_fast_reg(e.info(), e.is_valid(), e.capacity(), req, qp.pd)?;
        let new = self
            .regions
            .rekey(key, info.key.key())
            .ok_or(MemError::InvalidKey { key })?;
        if let Some(e) = self.regions.get_mut(new) {
            e.redescribe(info);
        }
        Ok(new)
    }

    fn bind_mw(&mut self, bind: &MwBind, qp: QpRef) -> Result<Key, MemError> {
        let region = self
            .get(Key::new(bind.mr_lkey))
            .filter(|e| e.is_valid() && e.is_registered())
            .map(|e| *e.info());
        Ok(self.windows.bind(bind, qp, region.as_ref())?)
    }

    fn check_remote(
        &self,
        key: Key,
        qp: QpRef,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        if !is_window_key(key) {
            return self.check(key, qp.pd, true, needed, va, len);
        }
        self.windows.check_remote(key, qp, needed, va, len, |mr| {
            self.get(mr).filter(|e| e.is_valid()).map(|e| e.info())
        })
    }

    fn atomic(&mut self, rkey: Key, qp: QpRef, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let region = self.check_remote(rkey, qp, AccessFlags::REMOTE_ATOMIC, va, 8)?;
        if va % 8 != 0 {
            return Err(MemError::Misaligned { va });
        }
        let r = region.bytes(0, 8)?;
        match self.entry_mut(region.key())?.atomic(r.start, op) {
            Some(old) => Ok(old),
            None => atomic_by_copy(self, &region, op),
        }
    }
}
