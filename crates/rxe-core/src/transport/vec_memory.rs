//! [`VecMemory`]: the [`RegionTable`] over `Vec<u8>` buffers, for the
//! transport tests, the network simulator and tools (the verbs layer has
//! the same table over the application's registered memory). The rules are
//! the table's; this file only says how a `Vec<u8>` region is made and
//! copied.

use super::memory::*;
use super::region_table::{OutsideStore, RegionEntry, RegionTable};
use crate::transport::qp::AccessFlags;

/// Registered memory backed by `Vec<u8>` buffers, one per region, each with
/// its own key, PD, base virtual address and rights, in a
/// [`KeyTable`](super::KeyTable): a key of an earlier registration in a
/// reused slot fails with [`MemError::KeyMismatch`].
pub type VecMemory = RegionTable<VecRegion>;

/// A region of a [`VecMemory`]: its description and its own bytes.
#[derive(Debug, Clone)]
pub struct VecRegion {
    info: RegionInfo,
    data: Vec<u8>,
    /// Cleared by a SEND with Invalidate: no key names the region any more.
    valid: bool,
}

impl RegionEntry for VecRegion {
    fn info(&self) -> &RegionInfo {
        &self.info
    }

    fn is_valid(&self) -> bool {
        self.valid
    }

    fn set_valid(&mut self, valid: bool) {
        self.valid = valid;
    }

    fn redescribe(&mut self, info: RegionInfo) {
        self.info = info;
        self.valid = true;
    }

    fn capacity(&self) -> usize {
        self.data.len()
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutsideStore> {
        let end = offset.checked_add(dst.len()).ok_or(OutsideStore)?;
        dst.copy_from_slice(self.data.get(offset..end).ok_or(OutsideStore)?);
        Ok(())
    }

    fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), OutsideStore> {
        let end = offset.checked_add(src.len()).ok_or(OutsideStore)?;
        self.data
            .get_mut(offset..end)
            .ok_or(OutsideStore)?
            .copy_from_slice(src);
        Ok(())
    }
}

impl RegionTable<VecRegion> {
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
        self.insert_with(va, data.len(), |key| VecRegion {
            info: RegionInfo {
                key,
                pd,
                va,
                len: data.len(),
                access,
                remote_invalidate,
            },
            data,
            valid: true,
        })
    }

    /// Allocates `capacity` zero bytes as a region for fast registration
    /// (`ib_alloc_mr`): free, answering to no access, until a REG_MR work
    /// request registers it ([`MemoryAccess::reg_mr`]).
    pub fn alloc_fast(&mut self, pd: u32, capacity: usize) -> Result<Key, MemError> {
        let key = self.insert(pd, 0, vec![0; capacity], AccessFlags::empty(), true)?;
        self.entry_mut(key)?.valid = false;
        Ok(key)
    }

    /// Removes the region `key` names, returning its bytes; refused while
    /// memory windows are bound to it ([`MemError::Busy`]).
    pub fn deregister(&mut self, key: Key) -> Result<Vec<u8>, MemError> {
        self.remove(key).map(|e| e.data)
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
        self.entry_mut(key).map(|e| e.data.as_mut_slice())
    }
}
