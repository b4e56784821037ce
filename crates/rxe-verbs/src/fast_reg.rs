//! Fast registration (the kernel's `ib_alloc_mr` and `IB_WR_REG_MR`;
//! libibverbs has no user-space equivalent, so this is in the verbs API
//! only): a region allocated once with room for `capacity` bytes, then
//! registered, invalidated and registered again by work requests on a QP,
//! each time at an address, length, rights and key portion of the
//! consumer's choice, without a registration verb in between.
//!
//! The region's bytes are its own ([`FastRegMr::write`] fills them), the
//! way the pages of a kernel page list are the MR's; a REG_MR maps the
//! first `length` of them at `iova`. It starts free and answers to no
//! key; LOCAL_INV or a peer's SEND with Invalidate makes it free again
//! (it is of the kind a peer may invalidate). The rules are rxe-core's
//! `validate_fast_reg`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rxe_core::transport::{AccessFlags, Key, RegMr, SendOp};

use crate::error::{ObjectKind, Result, VerbsError};
use crate::mr_table::{self, MrShared};
use crate::pd::Pd;
use crate::shared_buffer::SharedBuffer;

/// A region allocated for fast registration. Clones share it.
#[derive(Clone)]
pub struct FastRegMr {
    pd: Pd,
    /// Its first description (the slot, and the bytes).
    first: Arc<MrShared>,
}

impl std::fmt::Debug for FastRegMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastRegMr")
            .field("lkey", &format_args!("{:#010x}", self.lkey()))
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Pd {
    /// `ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, ...)`: a free region with room
    /// for `capacity` bytes, to be registered by REG_MR work requests.
    pub fn alloc_mr(&self, capacity: usize) -> Result<FastRegMr> {
        self.check_live()?;
        let mut e = self.dev.lock();
        let max = self.dev.max().max_mr;
        if e.mem.len() >= max as usize {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Mr,
                max,
            });
        }
        let buf = Arc::new(SharedBuffer::zeroed(capacity));
        let first = mr_table::register(
            &mut e.mem,
            self.shared.id,
            0,
            AccessFlags::empty(),
            buf,
            true,
        )?;
        // Free until a REG_MR registers it.
        first.valid.store(false, Ordering::Release);
        self.shared.users.acquire();
        Ok(FastRegMr {
            pd: self.clone(),
            first,
        })
    }
}

impl FastRegMr {
    /// The region's current description (its key changes at every
    /// registration).
    fn current(&self) -> Option<Arc<MrShared>> {
        let e = self.pd.dev.lock();
        e.mem.by_index(self.first.info.key).map(|m| m.0.clone())
    }

    fn check_live(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        if !self.first.registered.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Mr));
        }
        Ok(())
    }

    /// The current L_Key (also the R_Key).
    pub fn lkey(&self) -> u32 {
        self.current()
            .map_or(self.first.info.key, |m| m.info.key)
            .raw()
    }

    pub fn rkey(&self) -> u32 {
        self.lkey()
    }

    /// The registration in force, if any.
    fn registration(&self) -> Option<Arc<MrShared>> {
        self.current().filter(|m| m.valid.load(Ordering::Acquire))
    }

    /// Where the registration maps the region (0 while it is free).
    pub fn iova(&self) -> u64 {
        self.registration().map_or(0, |m| m.info.va)
    }

    /// The registered length (0 while the region is free).
    pub fn len(&self) -> usize {
        self.registration().map_or(0, |m| m.info.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rights of the current registration (none while free).
    pub fn access(&self) -> AccessFlags {
        self.registration()
            .map_or(AccessFlags::empty(), |m| m.info.access)
    }

    /// The bytes the region was allocated with.
    pub fn capacity(&self) -> usize {
        self.first.buf.len()
    }

    /// Whether a registration is in force (not free, not invalidated).
    pub fn is_registered(&self) -> bool {
        self.registration().is_some()
    }

    /// The REG_MR operation that registers the first `length` bytes of the
    /// region at `iova` with `access` under key `new_key` (the current key
    /// with another key portion: `ib_update_fast_reg_key`). Post it in a
    /// `SendWr` on a QP of the region's PD.
    pub fn reg_op(&self, new_key: u32, iova: u64, length: u64, access: AccessFlags) -> SendOp {
        SendOp::RegMr(RegMr {
            key: self.lkey(),
            new_key,
            iova,
            length,
            access,
        })
    }

    /// The current key with its key portion incremented.
    pub fn next_key(&self) -> u32 {
        Key::new(self.lkey()).inc().raw()
    }

    /// Copies bytes at `offset` of the region's buffer into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_live()?;
        self.first
            .buf
            .read(offset, dst)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))
    }

    /// Copies `src` to `offset` of the region's buffer.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_live()?;
        self.first
            .buf
            .write(offset, src)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))
    }

    /// `ib_dereg_mr`: refused while memory windows are bound to it.
    pub fn dereg(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        let key = e
            .mem
            .by_index(self.first.info.key)
            .map(|m| m.0.info.key)
            .ok_or(VerbsError::Destroyed(ObjectKind::Mr))?;
        let windows = e.mem.windows().windows_on(key);
        if windows > 0 {
            return Err(VerbsError::Busy {
                kind: ObjectKind::Mr,
                users: windows,
                what: "memory windows are bound to it",
            });
        }
        let gone = e
            .mem
            .remove(key)
            .map_err(|_| VerbsError::Destroyed(ObjectKind::Mr))?;
        gone.0.registered.store(false, Ordering::Release);
        self.first.registered.store(false, Ordering::Release);
        self.pd.shared.users.release();
        Ok(())
    }
}
