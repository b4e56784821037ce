//! The device's memory-region table: what the transport engine reaches
//! through [`MemoryAccess`] to check an L_Key or R_Key and copy payload.
//! It is rxe-core's [`RegionTable`], where the rules live, over regions
//! whose bytes are an `Arc<dyn RegionBytes>` (a [`SharedBuffer`], or the
//! drop-in library's foreign memory); this file says how such a region is
//! made, copied and operated on atomically.
//!
//! The keys come from rxe-core's `KeyTable` (a 24-bit slot index and an
//! 8-bit key portion that advances at every registration in the slot). As
//! in kernel rxe, a region's L_Key and R_Key are the same number; a region
//! that grants no remote right has no valid R_Key.
//!
//! [`SharedBuffer`]: crate::shared_buffer::SharedBuffer

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use rxe_core::transport::{
    AccessFlags, AtomicOp, MemError, OutsideStore, RegionEntry, RegionInfo, RegionTable,
};

use crate::shared_buffer::RegionBytes;

/// One registered region: its description and its bytes, shared with the
/// application's handle ([`crate::Mr`], [`crate::FastRegMr`]), which reads
/// them without the device lock.
#[derive(Debug)]
pub(crate) struct MrShared {
    pub info: RegionInfo,
    pub buf: Arc<dyn RegionBytes>,
    /// Cleared by a SEND with Invalidate: no key names the region any more.
    pub valid: AtomicBool,
    /// Cleared by deregistration: the application's handle stops working.
    pub registered: AtomicBool,
}

/// A region as the table holds it.
#[derive(Debug)]
pub(crate) struct MrEntry(pub Arc<MrShared>);

/// Registered regions by key, and the memory windows over them (their
/// keys in an index range of their own: rxe-core's `window` module).
pub(crate) type MrTable = RegionTable<MrEntry>;

impl RegionEntry for MrEntry {
    fn info(&self) -> &RegionInfo {
        &self.0.info
    }

    fn is_valid(&self) -> bool {
        self.0.valid.load(Relaxed)
    }

    fn set_valid(&mut self, valid: bool) {
        self.0.valid.store(valid, Relaxed);
    }

    fn is_registered(&self) -> bool {
        self.0.registered.load(Relaxed)
    }

    /// A new description over the same bytes: the handles of the earlier
    /// registration keep theirs.
    fn redescribe(&mut self, info: RegionInfo) {
        self.0 = Arc::new(MrShared {
            info,
            buf: self.0.buf.clone(),
            valid: AtomicBool::new(true),
            registered: AtomicBool::new(true),
        });
    }

    fn capacity(&self) -> usize {
        self.0.buf.len()
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutsideStore> {
        self.0.buf.read(offset, dst).map_err(|_| OutsideStore)
    }

    fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), OutsideStore> {
        self.0.buf.write(offset, src).map_err(|_| OutsideStore)
    }

    /// Remote atomics on a whole aligned word are real atomic operations on
    /// the shared buffer, so they are atomic with respect to the
    /// application's own atomics on the same word ([`crate::Mr::fetch_add`]).
    /// A word that straddles two (the region's virtual address is not
    /// congruent to its buffer modulo 8) is left to the table's read and
    /// write: atomic with respect to other remote operations, which hold
    /// the device lock, but not to the application's.
    fn atomic(&mut self, offset: usize, op: AtomicOp) -> Option<u64> {
        let word = self.0.buf.word(offset)?;
        Some(match op {
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Relaxed),
            AtomicOp::CmpSwap { compare, swap } => {
                match word.compare_exchange(compare, swap, Relaxed, Relaxed) {
                    Ok(v) | Err(v) => v,
                }
            }
        })
    }
}

/// Registers `buf` at virtual address `va` in `table`; `remote_invalidate`
/// says whether a SEND with Invalidate may invalidate it (a
/// fast-registered region's property; kernel rxe lets a peer invalidate
/// no `ibv_reg_mr` region). Returns the region with its new key.
pub(crate) fn register(
    table: &mut MrTable,
    pd: u32,
    va: u64,
    access: AccessFlags,
    buf: Arc<dyn RegionBytes>,
    remote_invalidate: bool,
) -> Result<Arc<MrShared>, MemError> {
    let key = table.insert_with(va, buf.len(), |key| {
        MrEntry(Arc::new(MrShared {
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
        }))
    })?;
    table
        .get(key)
        .map(|e| e.0.clone())
        .ok_or(MemError::InvalidKey { key })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_buffer::SharedBuffer;
    use rxe_core::transport::{MemoryAccess, QpRef};

    fn q(pd: u32) -> QpRef {
        QpRef { pd, qpn: 0x11 }
    }

    /// Registers `len` zeroed bytes at `va` in `t`.
    fn reg(
        t: &mut MrTable,
        pd: u32,
        va: u64,
        access: AccessFlags,
        len: usize,
        remote_invalidate: bool,
    ) -> Result<Arc<MrShared>, MemError> {
        let buf = Arc::new(SharedBuffer::zeroed(len));
        register(t, pd, va, access, buf, remote_invalidate)
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
        let a = reg(&mut t, 1, 0x1000, all(), 64, false).unwrap();
        let k = a.info.key;
        assert_ne!(k.index(), 0, "key 0 names nothing");
        assert!(t.get(k).is_some());
        t.remove(k).unwrap();
        assert!(t.get(k).is_none());
        assert!(t.remove(k).is_err(), "twice");
        let b = reg(&mut t, 1, 0x1000, all(), 64, false).unwrap();
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
        let m = reg(&mut t, 7, 0x2000, ro, 100, false).unwrap();
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
        assert!(reg(&mut t, 7, u64::MAX - 10, ro, 100, false).is_err());
    }

    #[test]
    fn copies_atomics_and_invalidation() {
        let mut t = MrTable::default();
        let m = reg(&mut t, 1, 0x8000, all(), 64, false).unwrap();
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
        let m = reg(&mut t, 1, 0x8000, all(), 64, true).unwrap();
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
        let m = reg(&mut t, 1, 0x9004, all(), 32, false).unwrap();
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
        let m = reg(&mut t, 1, 0, AccessFlags::LOCAL_WRITE, 8, false).unwrap();
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
