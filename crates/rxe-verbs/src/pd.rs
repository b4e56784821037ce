//! Protection domains (`ibv_alloc_pd`): the boundary that keeps one
//! application's QPs away from another's memory. A QP reaches only the
//! memory regions of its own PD, for its local scatter/gather lists and for
//! remote requests alike (IBTA 10.2.3, 10.6.3).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::device::{Device, DeviceShared};
use crate::error::{ObjectKind, Result, VerbsError};

#[derive(Debug)]
pub(crate) struct PdShared {
    pub id: u32,
    /// MRs, QPs, AHs and SRQs allocated in it.
    pub(crate) users: crate::use_count::UseCount,
    pub destroyed: AtomicBool,
}

impl PdShared {
    pub fn new(id: u32) -> PdShared {
        PdShared {
            id,
            users: crate::use_count::UseCount::new(),
            destroyed: AtomicBool::new(false),
        }
    }
}

/// A protection domain. Handles are cheap clones of one PD.
#[derive(Clone)]
pub struct Pd {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) shared: Arc<PdShared>,
}

impl Device {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        self.0.check_live()?;
        let mut e = self.0.lock();
        if e.counts.pd >= self.0.max().max_pd {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Pd,
                max: self.0.max().max_pd,
            });
        }
        e.counts.pd += 1;
        let id = e.alloc_id();
        Ok(Pd {
            dev: self.0.clone(),
            shared: Arc::new(PdShared::new(id)),
        })
    }
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("id", &self.shared.id).finish()
    }
}

impl Pd {
    /// The PD's handle number on its device.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    pub fn device(&self) -> Device {
        Device(self.dev.clone())
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        self.dev.check_live()?;
        if self.shared.destroyed.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Pd));
        }
        Ok(())
    }

    /// Checks that `other` is of the same device as this PD.
    pub(crate) fn same_device(&self, other: &Arc<DeviceShared>, kind: ObjectKind) -> Result<()> {
        if Arc::ptr_eq(&self.dev, other) {
            Ok(())
        } else {
            Err(VerbsError::WrongDevice(kind))
        }
    }

    /// `ibv_dealloc_pd`: refused with [`VerbsError::Busy`] while MRs, MWs, QPs,
    /// AHs or SRQs still use the PD.
    pub fn dealloc(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.dev.lock();
        self.shared.users.check_unused(
            ObjectKind::Pd,
            "MRs, MWs, QPs, AHs or SRQs are allocated in it",
        )?;
        if self.shared.destroyed.swap(true, Ordering::AcqRel) {
            return Err(VerbsError::Destroyed(ObjectKind::Pd));
        }
        e.counts.pd -= 1;
        Ok(())
    }
}
