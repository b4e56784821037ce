//! [`VecMemory`]: a small, safe [`MemoryAccess`] over `Vec<u8>` buffers,
//! for the transport tests, the network simulator and tools (the verbs
//! layer has its own, over the application's registered memory). It keeps
//! the same rules as any implementation must (`memory` module docs).

use super::key_table::KeyTable;
use super::memory::*;
use super::window::{is_window_key, MwBind, QpRef, WindowTable};
use crate::transport::qp::AccessFlags;

/// Registered memory backed by `Vec<u8>` buffers, one per region, each with
/// its own key, PD, base virtual address and rights, in a [`KeyTable`]: a
/// key of an earlier registration in a reused slot fails with
/// [`MemError::KeyMismatch`].
#[derive(Debug, Clone, Default)]
pub struct VecMemory {
    regions: KeyTable<Entry>,
    windows: WindowTable,
}

#[derive(Debug, Clone)]
struct Entry {
    info: RegionInfo,
    data: Vec<u8>,
    /// Cleared by a SEND with Invalidate: no key names the region any more.
    valid: bool,
}

impl VecMemory {
    pub fn new() -> VecMemory {
        VecMemory::default()
    }

    /// Registers `len` zero bytes at virtual address `va`. Errors with
    /// [`MemError::Overflow`] if `va + len` overflows or the table is full
    /// (2^24 - 1 regions).
    pub fn register(
        &mut self,
        pd: u32,
        va: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Key, MemError> {
        self.register_bytes(pd, va, vec![0; len], access)
    }

    /// Registers `data` at virtual address `va` as an ordinary region
    /// (`ibv_reg_mr`: a peer cannot invalidate it); errors as
    /// [`VecMemory::register`].
    pub fn register_bytes(
        &mut self,
        pd: u32,
        va: u64,
        data: Vec<u8>,
        access: AccessFlags,
    ) -> Result<Key, MemError> {
        self.insert(pd, va, data, access, false)
    }

    /// Registers `len` zero bytes at `va` as a region that a SEND with
    /// Invalidate may invalidate, the way a fast-registered region is;
    /// errors as [`VecMemory::register`].
    pub fn register_invalidatable(
        &mut self,
        pd: u32,
        va: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Key, MemError> {
        self.insert(pd, va, vec![0; len], access, true)
    }

    fn insert(
        &mut self,
        pd: u32,
        va: u64,
        data: Vec<u8>,
        access: AccessFlags,
        remote_invalidate: bool,
    ) -> Result<Key, MemError> {
        let len64 = u64::try_from(data.len()).map_err(|_| MemError::Overflow)?;
        va.checked_add(len64).ok_or(MemError::Overflow)?;
        self.regions.insert_with(|key| {
            let info = RegionInfo {
                key,
                pd,
                va,
                len: data.len(),
                access,
                remote_invalidate,
            };
            Entry {
                info,
                data,
                valid: true,
            }
        })
    }

    /// Allocates `capacity` zero bytes as a region for fast registration
    /// (`ib_alloc_mr`): free, answering to no access, until a REG_MR work
    /// request registers it ([`MemoryAccess::reg_mr`]).
    pub fn alloc_fast(&mut self, pd: u32, capacity: usize) -> Result<Key, MemError> {
        let key = self.insert(pd, 0, vec![0; capacity], AccessFlags::empty(), true)?;
        if let Some(e) = self.regions.get_mut(key) {
            e.valid = false;
        }
        Ok(key)
    }

    /// Removes the region `key` names, returning its bytes; refused while
    /// memory windows are bound to it ([`MemError::Busy`]).
    pub fn deregister(&mut self, key: Key) -> Result<Vec<u8>, MemError> {
        self.entry(key)?;
        if self.windows.windows_on(key) > 0 {
            return Err(MemError::Busy { key });
        }
        let e = self
            .regions
            .remove(key)
            .ok_or(MemError::InvalidKey { key })?;
        Ok(e.data)
    }

    /// The region `key` names.
    pub fn info(&self, key: Key) -> Result<&RegionInfo, MemError> {
        self.entry(key).map(|e| &e.info)
    }

    /// Whether a SEND with Invalidate has invalidated the region `key`
    /// names.
    pub fn is_invalidated(&self, key: Key) -> Result<bool, MemError> {
        self.entry(key).map(|e| !e.valid)
    }

    /// The bytes of the region `key` names.
    pub fn bytes(&self, key: Key) -> Result<&[u8], MemError> {
        self.entry(key).map(|e| e.data.as_slice())
    }

    /// The bytes of the region `key` names, for a test to fill.
    pub fn bytes_mut(&mut self, key: Key) -> Result<&mut [u8], MemError> {
        self.entry(key)?;
        match self.regions.get_mut(key) {
            Some(e) => Ok(e.data.as_mut_slice()),
            None => Err(MemError::InvalidKey { key }),
        }
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
    /// ([`invalidate_key`]'s rules).
    fn invalidate_key(&mut self, key: Key, qp: QpRef, remote: bool) -> Result<(), MemError> {
        let region = self
            .regions
            .by_index(key)
            .filter(|(_, e)| e.valid)
            .map(|(_, e)| e.info);
        if invalidate_key(&mut self.windows, region.as_ref(), key, qp, remote)? {
            if let Some(e) = self.regions.get_mut(key) {
                e.valid = false;
            }
        }
        Ok(())
    }

    /// The region `key` names, telling an unknown key from a key mismatch.
    fn entry(&self, key: Key) -> Result<&Entry, MemError> {
        match self.regions.by_index(key) {
            None => Err(MemError::InvalidKey { key }),
            Some((k, _)) if k != key => Err(MemError::KeyMismatch { key }),
            Some((_, e)) => Ok(e),
        }
    }
}

impl MemoryAccess for VecMemory {
    fn check(
        &self,
        key: Key,
        pd: u32,
        is_remote: bool,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        let e = self.entry(key)?;
        if !e.valid {
            return Err(MemError::InvalidKey { key });
        }
        validate(&e.info, key, pd, is_remote, needed, va, len)
    }

    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let range = region.bytes(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let data = &self.entry(region.key())?.data;
        let src = data.get(range).ok_or(MemError::OutOfBounds {
            va: region.va().saturating_add(offset as u64),
            len: dst.len(),
        })?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn write(&mut self, region: &Region, offset: usize, src: &[u8]) -> Result<(), MemError> {
        let range = region.bytes(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let data = self.bytes_mut(region.key())?;
        let dst = data.get_mut(range).ok_or(MemError::OutOfBounds {
            va: region.va().saturating_add(offset as u64),
            len: src.len(),
        })?;
        dst.copy_from_slice(src);
        Ok(())
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
            self.regions.by_index(key).map(|(_, e)| e.info.va)
        };
        let va = start.ok_or(MemError::InvalidKey { key })?;
        self.check_remote(key, qp, needed, va, 0)
    }

    fn reg_mr(&mut self, req: &RegMr, qp: QpRef) -> Result<Key, MemError> {
        let key = Key::new(req.key);
        let (_, e) = self
            .regions
            .by_index(key)
            .ok_or(MemError::InvalidKey { key })?;
        let info = validate_fast_reg(&e.info, e.valid, e.data.len(), req, qp.pd)?;
        let new = self
            .regions
            .rekey(key, info.key.key())
            .ok_or(MemError::InvalidKey { key })?;
        if let Some(e) = self.regions.get_mut(new) {
            e.info = info;
            e.valid = true;
        }
        Ok(new)
    }

    fn bind_mw(&mut self, bind: &MwBind, qp: QpRef) -> Result<Key, MemError> {
        let mr = Key::new(bind.mr_lkey);
        let region = self.regions.get(mr).filter(|e| e.valid).map(|e| e.info);
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
            self.regions.get(mr).filter(|e| e.valid).map(|e| &e.info)
        })
    }
}
