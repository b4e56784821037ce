//! Memory regions (`ibv_reg_mr`): memory that the device may read and
//! write, locally through L_Keys and remotely through R_Keys.
//!
//! The region owns its bytes (a [`SharedBuffer`]): registration takes the
//! application's buffer and deregistration gives it back, and in between the
//! application reads and writes it through the region ([`Mr::read`],
//! [`Mr::write`], [`Mr::fetch_add`], ...), while the device does the same
//! from its own thread. See [`crate::shared_buffer`] for why this is sound
//! without `unsafe`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rxe_core::transport::{AccessFlags, Sge};

use crate::error::{ObjectKind, Result, VerbsError};
use crate::mr_table::{self, MrShared};
use crate::pd::{Pd, PdShared};
use crate::shared_buffer::{RegionBytes, SharedBuffer};

/// A registered memory region.
#[derive(Clone)]
pub struct Mr {
    pub(crate) pd: Pd,
    pub(crate) shared: Arc<MrShared>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &format_args!("{:#010x}", self.lkey()))
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}

fn used_pd(pd: &PdShared) {
    pd.users.acquire();
}

impl Pd {
    /// Registers `data` (`ibv_reg_mr`) at the virtual address where the
    /// region keeps it. The application gets its bytes back from
    /// [`Mr::dereg`].
    pub fn reg_mr(&self, data: Vec<u8>, access: AccessFlags) -> Result<Mr> {
        self.reg(Arc::new(SharedBuffer::from_slice(&data)), None, access)
    }

    /// Registers bytes that someone else owns (`bytes`), at `iova` or, if
    /// `None`, at [`RegionBytes::base_addr`]. This is how the drop-in
    /// `libibverbs.so.1` registers an application's own memory in place;
    /// [`Mr::dereg`] then returns a copy, and the owner keeps the bytes.
    pub fn reg_mr_with(
        &self,
        bytes: Arc<dyn RegionBytes>,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Mr> {
        self.reg(bytes, iova, access)
    }

    /// Registers `len` zero bytes.
    pub fn reg_mr_zeroed(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        self.reg(Arc::new(SharedBuffer::zeroed(len)), None, access)
    }

    /// Registers `data` at the I/O virtual address `iova`
    /// (`ibv_reg_mr_iova`): remote peers address it from `iova`.
    pub fn reg_mr_iova(&self, data: Vec<u8>, iova: u64, access: AccessFlags) -> Result<Mr> {
        self.reg(
            Arc::new(SharedBuffer::from_slice(&data)),
            Some(iova),
            access,
        )
    }

    fn reg(&self, buf: Arc<dyn RegionBytes>, iova: Option<u64>, access: AccessFlags) -> Result<Mr> {
        self.check_live()?;
        // IBTA 10.6.3.1 (not checked against the text); ibv_reg_mr(3):
        // remote write or atomic access needs local write as well.
        if (access.contains(AccessFlags::REMOTE_WRITE)
            || access.contains(AccessFlags::REMOTE_ATOMIC))
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument(
                "remote write or atomic access needs LOCAL_WRITE too".into(),
            ));
        }
        // FLUSH to persistence needs persistent memory behind the region
        // (kernel rxe allows FLUSH_PERSISTENT only on pmem); rxe's regions
        // are ordinary host memory.
        if access.contains(AccessFlags::FLUSH_PERSISTENT) {
            return Err(VerbsError::InvalidArgument(
                "FLUSH_PERSISTENT: rxe's memory is not persistent".into(),
            ));
        }
        let va = iova.unwrap_or_else(|| buf.base_addr());
        let mut e = self.dev.lock();
        let max = self.dev.max().max_mr;
        if e.mem.len() >= max as usize {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Mr,
                max,
            });
        }
        let shared = mr_table::register(&mut e.mem, self.shared.id, va, access, buf, false)?;
        used_pd(&self.shared);
        Ok(Mr {
            pd: self.clone(),
            shared,
        })
    }
}

impl Mr {
    fn check_live(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        if !self.shared.registered.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Mr));
        }
        Ok(())
    }

    /// The L_Key, for local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.shared.info.key.raw()
    }

    /// The R_Key, for remote peers (the same number as the L_Key, as in
    /// kernel rxe; it works remotely only for the rights granted).
    pub fn rkey(&self) -> u32 {
        self.shared.info.key.raw()
    }

    /// The virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.shared.info.va
    }

    pub fn len(&self) -> usize {
        self.shared.info.len
    }

    pub fn is_empty(&self) -> bool {
        self.shared.info.len == 0
    }

    pub fn access(&self) -> AccessFlags {
        self.shared.info.access
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Whether a SEND with Invalidate has invalidated the region.
    pub fn is_invalidated(&self) -> bool {
        !self.shared.valid.load(Ordering::Acquire)
    }

    /// A scatter/gather entry for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr().wrapping_add(offset as u64),
            length: len,
            lkey: self.lkey(),
        }
    }

    /// Copies bytes at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_live()?;
        self.shared
            .buf
            .read(offset, dst)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))
    }

    /// Copies `src` to `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_live()?;
        self.shared
            .buf
            .write(offset, src)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check_live()?;
        self.shared
            .buf
            .fill(offset, len, value)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))
    }

    /// The whole region's bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        self.check_live()?;
        Ok(self.shared.buf.to_vec())
    }

    fn word(&self, offset: usize) -> Result<&std::sync::atomic::AtomicU64> {
        self.check_live()?;
        self.shared.buf.word(offset).ok_or_else(|| {
            VerbsError::InvalidArgument(format!("offset {offset} is not an aligned word"))
        })
    }

    /// The 64-bit word at `offset` (a multiple of 8), host byte order.
    pub fn load_u64(&self, offset: usize) -> Result<u64> {
        Ok(self.word(offset)?.load(Ordering::SeqCst))
    }

    /// Atomically adds to the word at `offset`, as a remote FETCH_ADD
    /// would; atomic with respect to remote atomics on the same word.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64> {
        Ok(self.word(offset)?.fetch_add(add, Ordering::SeqCst))
    }

    /// Atomically compares and swaps the word at `offset`; returns the
    /// value it held.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64> {
        Ok(
            match self.word(offset)?.compare_exchange(
                compare,
                swap,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// `ibv_dereg_mr`: the keys stop working at once and the bytes come
    /// back. Work requests still in flight that name the region complete
    /// with a protection or remote access error, as on hardware.
    pub fn dereg(&self) -> Result<Vec<u8>> {
        self.unregister()?;
        Ok(self.shared.buf.to_vec())
    }

    /// `ibv_dereg_mr` of a region registered with [`Pd::reg_mr_with`]:
    /// as [`Mr::dereg`], without copying the bytes out (their owner has
    /// them).
    pub fn dereg_in_place(&self) -> Result<()> {
        self.unregister()
    }

    fn unregister(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        // Kernel rxe refuses to deregister a region with windows bound.
        let windows = e.mem.windows().windows_on(self.shared.info.key);
        if windows > 0 {
            return Err(VerbsError::Busy {
                kind: ObjectKind::Mr,
                users: windows,
                what: "memory windows are bound to it",
            });
        }
        if e.mem.remove(self.shared.info.key).is_err()
            || !self.shared.registered.swap(false, Ordering::AcqRel)
        {
            return Err(VerbsError::Destroyed(ObjectKind::Mr));
        }
        self.pd.shared.users.release();
        drop(e);
        Ok(())
    }
}
