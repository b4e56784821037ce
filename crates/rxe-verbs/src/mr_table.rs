//! The device's memory-region table: what the transport engine reaches
//! through [`MemoryAccess`] to check an L_Key or R_Key and copy payload.
//!
//! A key's upper 24 bits index a slot (index 0 is never used, so key 0 names
//! nothing); its low 8 bits are the key portion, which the slot advances at
//! every registration so that a key of an earlier registration in the same
//! slot fails with a key mismatch (IBTA 10.6.3.x, the consumer-owned key
//! portion; `ibv_inc_rkey(3)`). As in kernel rxe, a region's L_Key and
//! R_Key are the same number; a region that grants no remote right has no
//! valid R_Key.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use rxe_core::transport::{
    validate, AccessFlags, AtomicOp, Key, MemError, MemoryAccess, Region, RegionInfo,
};

use crate::shared_buffer::SharedBuffer;

/// One registered region: its description and its bytes.
#[derive(Debug)]
pub(crate) struct MrShared {
    pub info: RegionInfo,
    pub buf: SharedBuffer,
    /// Cleared by a SEND with Invalidate: no key names the region any more.
    pub valid: AtomicBool,
    /// Cleared by deregistration: the application's handle stops working.
    pub registered: AtomicBool,
}

#[derive(Debug, Default)]
struct Slot {
    next_key: u8,
    mr: Option<Arc<MrShared>>,
}

/// Registered regions by key index.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    slots: Vec<Slot>,
    free: Vec<usize>,
    live: usize,
}

impl MrTable {
    pub fn len(&self) -> usize {
        self.live
    }

    /// Registers `buf` at virtual address `va`; returns the region with its
    /// new key.
    pub fn register(
        &mut self,
        pd: u32,
        va: u64,
        access: AccessFlags,
        buf: SharedBuffer,
    ) -> Result<Arc<MrShared>, MemError> {
        // The region must not wrap the 64-bit address space.
        va.checked_add(buf.len() as u64).ok_or(MemError::Overflow)?;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                if self.slots.len() >= Key::MAX_INDEX as usize {
                    return Err(MemError::Overflow);
                }
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[slot];
        let key = Key::from_parts(slot as u32 + 1, s.next_key).ok_or(MemError::Overflow)?;
        s.next_key = s.next_key.wrapping_add(1);
        let mr = Arc::new(MrShared {
            info: RegionInfo {
                key,
                pd,
                va,
                len: buf.len(),
                access,
            },
            buf,
            valid: AtomicBool::new(true),
            registered: AtomicBool::new(true),
        });
        s.mr = Some(mr.clone());
        self.live += 1;
        Ok(mr)
    }

    fn slot_of(&self, key: Key) -> Option<usize> {
        (key.index() as usize).checked_sub(1)
    }

    /// The live region that `key` names exactly (index and key portion).
    pub fn get(&self, key: Key) -> Option<&Arc<MrShared>> {
        let mr = self.slots.get(self.slot_of(key)?)?.mr.as_ref()?;
        (mr.info.key == key).then_some(mr)
    }

    /// Removes the region that `key` names; afterwards the key fails.
    pub fn deregister(&mut self, key: Key) -> Option<Arc<MrShared>> {
        let slot = self.slot_of(key)?;
        let s = self.slots.get_mut(slot)?;
        if s.mr.as_ref()?.info.key != key {
            return None;
        }
        self.free.push(slot);
        self.live -= 1;
        s.mr.take()
    }

    /// SEND with Invalidate (IBTA 10.6.5, not checked against the text):
    /// the region that `rkey` names, if it belongs to `pd` and has an R_Key,
    /// stops answering to any key, locally or remotely, until its owner
    /// deregisters it (kernel rxe moves the MR to its "free" state the same
    /// way). Returns whether a region was invalidated.
    pub fn invalidate(&mut self, rkey: Key, pd: u32) -> bool {
        match self.get(rkey) {
            Some(mr) if mr.info.pd == pd && mr.info.has_rkey() => {
                mr.valid.store(false, Relaxed);
                true
            }
            _ => false,
        }
    }

    fn region(&self, key: Key) -> Result<&Arc<MrShared>, MemError> {
        self.get(key).ok_or(MemError::InvalidKey { key })
    }
}

impl MemoryAccess for MrTable {
    fn check(
        &self,
        key: Key,
        pd: u32,
        is_remote: bool,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        let slot = self
            .slot_of(key)
            .and_then(|s| self.slots.get(s))
            .and_then(|s| s.mr.as_ref())
            .filter(|mr| mr.valid.load(Relaxed))
            .ok_or(MemError::InvalidKey { key })?;
        validate(&slot.info, key, pd, is_remote, needed, va, len)
    }

    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        if dst.is_empty() {
            return Ok(());
        }
        let mr = self.region(region.key())?;
        let r = region.bytes(offset, dst.len())?;
        mr.buf.read(r.start, dst).map_err(|_| MemError::OutOfBounds {
            va: region.va(),
            len: dst.len(),
        })
    }

    fn write(&mut self, region: &Region, offset: usize, src: &[u8]) -> Result<(), MemError> {
        if src.is_empty() {
            return Ok(());
        }
        let mr = self.region(region.key())?;
        let r = region.bytes(offset, src.len())?;
        mr.buf.write(r.start, src).map_err(|_| MemError::OutOfBounds {
            va: region.va(),
            len: src.len(),
        })
    }

    /// Remote atomics on a whole aligned word are real atomic operations on
    /// the shared buffer, so they are atomic with respect to the
    /// application's own atomics on the same word ([`crate::Mr::fetch_add`]).
    fn atomic(&mut self, rkey: Key, pd: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let region = self.check(rkey, pd, true, AccessFlags::REMOTE_ATOMIC, va, 8)?;
        if va % 8 != 0 {
            return Err(MemError::Misaligned { va });
        }
        let mr = self.region(region.key())?;
        let r = region.bytes(0, 8)?;
        if let Some(word) = mr.buf.word(r.start) {
            let old = match op {
                AtomicOp::FetchAdd { add } => word.fetch_add(add, Relaxed),
                AtomicOp::CmpSwap { compare, swap } => {
                    match word.compare_exchange(compare, swap, Relaxed, Relaxed) {
                        Ok(v) | Err(v) => v,
                    }
                }
            };
            return Ok(old);
        }
        // The region's virtual address is not congruent to its buffer
        // modulo 8: the word straddles two; fall back to read and write
        // (atomic with respect to other remote operations, which hold the
        // device lock, but not to the application's).
        let mut b = [0u8; 8];
        self.read(&region, 0, &mut b)?;
        let old = u64::from_ne_bytes(b);
        let new = op.apply(old);
        if new != old {
            self.write(&region, 0, &new.to_ne_bytes())?;
        }
        Ok(old)
    }
}
