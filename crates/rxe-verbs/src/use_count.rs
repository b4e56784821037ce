//! How many objects use a resource: a PD's MRs, MWs, QPs, AHs and SRQs, a
//! CQ's and an SRQ's QPs. A resource with users refuses to be destroyed
//! (EBUSY, as rdma-core's), so each dependent object takes a use when it
//! is created and gives it back when it is destroyed; this is the one
//! place that counts.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{ObjectKind, Result, VerbsError};

#[derive(Debug, Default)]
pub(crate) struct UseCount(AtomicUsize);

impl UseCount {
    pub(crate) fn new() -> UseCount {
        UseCount::default()
    }

    /// A dependent object was created.
    pub(crate) fn acquire(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// A dependent object was destroyed (never below zero).
    pub(crate) fn release(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// `Ok` if nothing uses the resource, else [`VerbsError::Busy`] naming
    /// `kind` and `what` its users are.
    pub(crate) fn check_unused(&self, kind: ObjectKind, what: &'static str) -> Result<()> {
        match self.get() {
            0 => Ok(()),
            users => Err(VerbsError::Busy { kind, users, what }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_count_up_and_down_and_never_below_zero() {
        let u = UseCount::new();
        assert!(u.check_unused(ObjectKind::Pd, "x").is_ok());
        u.acquire();
        u.acquire();
        assert!(matches!(
            u.check_unused(ObjectKind::Cq, "QPs"),
            Err(VerbsError::Busy {
                kind: ObjectKind::Cq,
                users: 2,
                what: "QPs"
            })
        ));
        u.release();
        u.release();
        u.release();
        assert_eq!(u.get(), 0);
    }
}
