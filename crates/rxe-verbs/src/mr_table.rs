//! The device's memory-region table: what the transport engine reaches
//! through [`MemoryAccess`] to check an L_Key or R_Key and copy payload.
//!
//! The keys come from rxe-core's [`KeyTable`] (a 24-bit slot index and an
//! 8-bit key portion that advances at every registration in the slot). As
//! in kernel rxe, a region's L_Key and R_Key are the same number; a region
//! that grants no remote right has no valid R_Key.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use rxe_core::transport::{
    atomic_by_copy, invalidate_key, is_window_key, validate, validate_fast_reg, AccessFlags,
    AtomicOp, Key, KeyTable, MemError, MemoryAccess, MwBind, QpRef, RegMr, Region, RegionInfo,
    WindowTable,
};

use crate::shared_buffer::RegionBytes;
#[cfg(test)]
use crate::shared_buffer::SharedBuffer;

/// One registered region: its description and its bytes.
#[derive(Debug)]
pub(crate) struct MrShared {
    pub info: RegionInfo,
    pub buf: Arc<dyn RegionBytes>,
    /// Cleared by a SEND with Invalidate: no key names the region any more.
    pub valid: AtomicBool,
    /// Cleared by deregistration: the application's handle stops working.
    pub registered: AtomicBool,
}

/// Registered regions by key, and the memory windows over them (their
/// keys in an index range of their own: rxe-core's `window` module).
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    regions: KeyTable<Arc<MrShared>>,
    windows: WindowTable,
}

impl MrTable {
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Registers `buf` at virtual address `va`; returns the region with its
    /// new key.
    pub fn register(
        &mut self,
        pd: u32,
        va: u64,
        access: AccessFlags,
        buf: Arc<dyn RegionBytes>,
    ) -> Result<Arc<MrShared>, MemError> {
        // ibv_reg_mr regions: kernel rxe lets a peer invalidate only
        // fast-registered ones, which rxe has not yet.
        self.register_as(pd, va, access, buf, false)
    }

    /// Registers `buf` as [`MrTable::register`] does; `remote_invalidate`
    /// says whether a SEND with Invalidate may invalidate it (a
    /// fast-registered region's property).
    pub fn register_as(
        &mut self,
        pd: u32,
        va: u64,
        access: AccessFlags,
        buf: Arc<dyn RegionBytes>,
        remote_invalidate: bool,
    ) -> Result<Arc<MrShared>, MemError> {
        // The region must not wrap the 64-bit address space.
        va.checked_add(buf.len() as u64).ok_or(MemError::Overflow)?;
        let key = self.regions.insert_with(|key| {
            Arc::new(MrShared {
                info: RegionInfo {
                    key,
                    pd,
                    va,
                    len: buf.len(),
                    access,
                    remote_invalidate,
                },
                buf,
                valid: AtomicBool::new(true),
                registered: AtomicBool::new(true),
            })
        })?;
        Ok(self.regions.get(key).expect("just inserted").clone())
    }

    /// The region in `key`'s slot whatever its key portion (a fast-
    /// registered region's key changes at every registration).
    pub fn by_index(&self, key: Key) -> Option<&Arc<MrShared>> {
        self.regions.by_index(key).map(|(_, mr)| mr)
    }

    /// The live region that `key` names exactly (index and key portion).
    pub fn get(&self, key: Key) -> Option<&Arc<MrShared>> {
        self.regions.get(key)
    }

    /// Removes the region that `key` names; afterwards the key fails.
    /// Refused while memory windows are bound to it (the caller checks
    /// [`MrTable::windows`]`.windows_on`).
    pub fn deregister(&mut self, key: Key) -> Option<Arc<MrShared>> {
        if self.windows.windows_on(key) > 0 {
            return None;
        }
        self.regions.remove(key)
    }

    /// The memory windows.
    pub fn windows(&self) -> &WindowTable {
        &self.windows
    }

    pub fn windows_mut(&mut self) -> &mut WindowTable {
        &mut self.windows
    }

    /// SEND with Invalidate (`remote`) or LOCAL_INV of `key`
    /// ([`invalidate_key`]'s rules): an invalidated region answers to no
    /// key until its owner deregisters it (kernel rxe moves the MR to its
    /// "free" state the same way).
    fn invalidate_key(&mut self, key: Key, qp: QpRef, remote: bool) -> Result<(), MemError> {
        let region = self
            .regions
            .by_index(key)
            .filter(|(_, mr)| mr.valid.load(Relaxed))
            .map(|(_, mr)| mr.clone());
        let info = region.as_ref().map(|mr| mr.info);
        if invalidate_key(&mut self.windows, info.as_ref(), key, qp, remote)? {
            if let Some(mr) = region {
                mr.valid.store(false, Relaxed);
            }
        }
        Ok(())
    }

    fn region(&self, key: Key) -> Result<&Arc<MrShared>, MemError> {
        self.get(key).ok_or(MemError::InvalidKey { key })
    }
}

impl MemoryAccess for MrTable {
    /// SEND with Invalidate: the region that `rkey` names, if
    /// [`validate_invalidate`] allows it, stops answering to any key,
    /// locally or remotely, until its owner deregisters it; a type 2
    /// window becomes free. The responder calls this before it makes the
    /// receive completion.
    fn invalidate(&mut self, rkey: Key, qp: QpRef) -> Result<(), MemError> {
        self.invalidate_key(rkey, qp, true)
    }

    fn local_invalidate(&mut self, key: Key, qp: QpRef) -> Result<(), MemError> {
        self.invalidate_key(key, qp, false)
    }

    /// REG_MR: the region gets its new key, address, length and rights
    /// (a new description over the same bytes) and answers to accesses.
    fn reg_mr(&mut self, req: &RegMr, qp: QpRef) -> Result<Key, MemError> {
        let key = Key::new(req.key);
        let mr = self
            .regions
            .by_index(key)
            .map(|(_, mr)| mr.clone())
            .filter(|mr| mr.registered.load(Relaxed))
            .ok_or(MemError::InvalidKey { key })?;
        let info = validate_fast_reg(&mr.info, mr.valid.load(Relaxed), mr.buf.len(), req, qp.pd)?;
        let new = self
            .regions
            .rekey(key, info.key.key())
            .ok_or(MemError::InvalidKey { key })?;
        if let Some(e) = self.regions.get_mut(new) {
            *e = Arc::new(MrShared {
                info,
                buf: mr.buf.clone(),
                valid: AtomicBool::new(true),
                registered: AtomicBool::new(true),
            });
        }
        Ok(new)
    }

    fn bind_mw(&mut self, bind: &MwBind, qp: QpRef) -> Result<Key, MemError> {
        let region = self
            .regions
            .get(Key::new(bind.mr_lkey))
            .filter(|mr| mr.valid.load(Relaxed) && mr.registered.load(Relaxed))
            .map(|mr| mr.info);
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
            self.regions
                .get(mr)
                .filter(|m| m.valid.load(Relaxed))
                .map(|m| &m.info)
        })
    }

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
        let (_, mr) = self
            .regions
            .by_index(key)
            .filter(|(_, mr)| mr.valid.load(Relaxed))
            .ok_or(MemError::InvalidKey { key })?;
        validate(&mr.info, key, pd, is_remote, needed, va, len)
    }

    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        if dst.is_empty() {
            return Ok(());
        }
        let mr = self.region(region.key())?;
        let r = region.bytes(offset, dst.len())?;
        mr.buf
            .read(r.start, dst)
            .map_err(|_| MemError::OutOfBounds {
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
        mr.buf
            .write(r.start, src)
            .map_err(|_| MemError::OutOfBounds {
                va: region.va(),
                len: src.len(),
            })
    }

    /// Remote atomics on a whole aligned word are real atomic operations on
    /// the shared buffer, so they are atomic with respect to the
    /// application's own atomics on the same word ([`crate::Mr::fetch_add`]).
    fn check_whole(&self, key: Key, qp: QpRef, needed: AccessFlags) -> Result<Region, MemError> {
        let start = if is_window_key(key) {
            self.windows.start_of(key)
        } else {
            self.regions.by_index(key).map(|(_, mr)| mr.info.va)
        };
        let va = start.ok_or(MemError::InvalidKey { key })?;
        self.check_remote(key, qp, needed, va, 0)
    }

    fn atomic(&mut self, rkey: Key, qp: QpRef, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let region = self.check_remote(rkey, qp, AccessFlags::REMOTE_ATOMIC, va, 8)?;
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
        atomic_by_copy(self, &region, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pd: u32) -> QpRef {
        QpRef { pd, qpn: 0x11 }
    }

    fn all() -> AccessFlags {
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC
    }

    #[test]
    fn keys_name_slots_and_change_on_reregistration() {
        let mut t = MrTable::default();
        let a = t
            .register(1, 0x1000, all(), Arc::new(SharedBuffer::zeroed(64)))
            .unwrap();
        let k = a.info.key;
        assert_ne!(k.index(), 0, "key 0 names nothing");
        assert!(t.get(k).is_some());
        t.deregister(k).unwrap();
        assert!(t.get(k).is_none());
        assert!(t.deregister(k).is_none(), "twice");
        let b = t
            .register(1, 0x1000, all(), Arc::new(SharedBuffer::zeroed(64)))
            .unwrap();
        assert_eq!(b.info.key.index(), k.index(), "slot reused");
        assert_ne!(b.info.key, k, "with a new key portion");
        let e = t
            .check(k, 1, true, AccessFlags::REMOTE_WRITE, 0x1000, 8)
            .unwrap_err();
        assert!(matches!(e, MemError::KeyMismatch { .. }), "{e:?}");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn checks_pd_rights_bounds_and_wrapping() {
        let mut t = MrTable::default();
        let ro = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        let m = t
            .register(7, 0x2000, ro, Arc::new(SharedBuffer::zeroed(100)))
            .unwrap();
        let k = m.info.key;
        assert!(t
            .check(k, 7, true, AccessFlags::REMOTE_READ, 0x2000, 100)
            .is_ok());
        assert_eq!(
            t.check(k, 8, true, AccessFlags::REMOTE_READ, 0x2000, 1),
            Err(MemError::PdMismatch)
        );
        assert!(matches!(
            t.check(k, 7, true, AccessFlags::REMOTE_WRITE, 0x2000, 1),
            Err(MemError::AccessDenied { .. })
        ));
        assert!(matches!(
            t.check(k, 7, true, AccessFlags::REMOTE_READ, 0x2000 + 1, 100),
            Err(MemError::OutOfBounds { .. })
        ));
        assert_eq!(
            t.check(k, 7, true, AccessFlags::REMOTE_READ, u64::MAX, 2),
            Err(MemError::Overflow)
        );
        assert!(t
            .register(7, u64::MAX - 10, ro, Arc::new(SharedBuffer::zeroed(100)))
            .is_err());
    }

    #[test]
    fn copies_atomics_and_invalidation() {
        let mut t = MrTable::default();
        let m = t
            .register(1, 0x8000, all(), Arc::new(SharedBuffer::zeroed(64)))
            .unwrap();
        let k = m.info.key;
        let r = t
            .check(k, 1, true, AccessFlags::REMOTE_WRITE, 0x8010, 16)
            .unwrap();
        t.write(&r, 0, &[9; 16]).unwrap();
        let mut out = [0u8; 16];
        t.read(&r, 0, &mut out).unwrap();
        assert_eq!(out, [9; 16]);
        assert!(t.write(&r, 1, &[0; 16]).is_err(), "past the checked range");
        m.buf.write(32, &10u64.to_ne_bytes()).unwrap();
        assert_eq!(
            t.atomic(k, q(1), 0x8020, AtomicOp::FetchAdd { add: 5 }),
            Ok(10)
        );
        assert_eq!(
            t.atomic(
                k,
                q(1),
                0x8020,
                AtomicOp::CmpSwap {
                    compare: 15,
                    swap: 1
                }
            ),
            Ok(15)
        );
        assert_eq!(m.buf.word(32).unwrap().load(Relaxed), 1);
        assert!(matches!(
            t.atomic(k, q(1), 0x8021, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::Misaligned { .. })
        ));
        // An ordinary region cannot be invalidated remotely.
        assert_eq!(
            t.invalidate(k, q(1)),
            Err(MemError::NotInvalidatable { key: k })
        );
        assert!(t
            .check(k, 1, false, AccessFlags::empty(), 0x8000, 1)
            .is_ok());
    }

    #[test]
    fn invalidation_of_a_region_made_for_it() {
        let mut t = MrTable::default();
        let m = t
            .register_as(1, 0x8000, all(), Arc::new(SharedBuffer::zeroed(64)), true)
            .unwrap();
        let k = m.info.key;
        // The same PD and the current key portion, then no key works.
        assert_eq!(t.invalidate(k, q(2)), Err(MemError::PdMismatch));
        assert_eq!(
            t.invalidate(k.inc(), q(1)),
            Err(MemError::KeyMismatch { key: k.inc() })
        );
        assert_eq!(t.invalidate(k, q(1)), Ok(()));
        assert!(!m.valid.load(Relaxed));
        assert!(matches!(
            t.check(k, 1, false, AccessFlags::empty(), 0x8000, 1),
            Err(MemError::InvalidKey { .. })
        ));
        assert!(t.invalidate(k, q(1)).is_err(), "invalidated once");
    }

    #[test]
    fn atomics_on_a_word_that_straddles_two_fall_back_to_copying() {
        let mut t = MrTable::default();
        // va 0x9004 at buffer offset 0: the aligned va 0x9008 is offset 4.
        let m = t
            .register(1, 0x9004, all(), Arc::new(SharedBuffer::zeroed(32)))
            .unwrap();
        m.buf.write(4, &40u64.to_ne_bytes()).unwrap();
        assert!(m.buf.word(4).is_none());
        assert_eq!(
            t.atomic(m.info.key, q(1), 0x9008, AtomicOp::FetchAdd { add: 2 }),
            Ok(40)
        );
        let mut b = [0u8; 8];
        m.buf.read(4, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 42);
    }

    #[test]
    fn a_region_without_remote_rights_has_no_rkey() {
        let mut t = MrTable::default();
        let m = t
            .register(
                1,
                0,
                AccessFlags::LOCAL_WRITE,
                Arc::new(SharedBuffer::zeroed(8)),
            )
            .unwrap();
        assert!(t
            .check(m.info.key, 1, false, AccessFlags::LOCAL_WRITE, 0, 8)
            .is_ok());
        assert!(matches!(
            t.check(m.info.key, 1, true, AccessFlags::empty(), 0, 8),
            Err(MemError::InvalidKey { .. })
        ));
        assert!(
            t.invalidate(m.info.key, q(1)).is_err(),
            "nothing to invalidate remotely"
        );
    }
}
