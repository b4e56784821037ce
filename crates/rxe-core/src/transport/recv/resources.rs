//! The responder's memory of the RDMA READ and atomic requests it executed,
//! so that it can answer their duplicates (IBTA 9.7.5.1.1; the per-QP
//! "responder resources" that `max_dest_rd_atomic` counts, IBTA 11.2.5):
//! a READ is re-executed from the duplicate's RETH within the range of the
//! original, an atomic is answered with the value saved when it ran and is
//! never executed twice.
//!
//! The table is bounded by `max_dest_rd_atomic` entries (at least one); a
//! new entry replaces the oldest. A requester may have at most
//! `max_rd_atomic <= max_dest_rd_atomic` READ/atomic requests outstanding, so
//! the request whose response it still waits for is always among the
//! newest `max_dest_rd_atomic` ones.

use std::collections::VecDeque;

use crate::transport::psn::Psn;

/// What was saved of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Saved {
    /// An RDMA READ: its PSN range (`npkts` PSNs from `first`) and RETH.
    Read {
        first: Psn,
        npkts: u32,
        rkey: u32,
        va: u64,
        len: u32,
    },
    /// An atomic and the original value its ATOMIC Acknowledge carried.
    Atomic { psn: Psn, orig: u64 },
    /// An ATOMIC WRITE or FLUSH, answered by an empty READ response: a
    /// duplicate gets the same answer and is not executed again.
    Zero { psn: Psn },
}

/// One saved request with the MSN its response carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub saved: Saved,
    pub msn: u32,
}

impl Entry {
    /// Whether a request with PSN `psn` is (part of) this one.
    fn covers(&self, psn: Psn) -> bool {
        match self.saved {
            Saved::Read { first, npkts, .. } => psn.in_range(first, first.add(npkts.max(1))),
            Saved::Atomic { psn: p, .. } | Saved::Zero { psn: p } => p == psn,
        }
    }
}

/// The bounded table of saved READ and atomic requests.
#[derive(Debug, Clone)]
pub(super) struct Resources {
    entries: VecDeque<Entry>,
    cap: usize,
}

impl Default for Resources {
    fn default() -> Self {
        Resources::new(1)
    }
}

impl Resources {
    /// A table of `cap` entries (at least one).
    pub(super) fn new(cap: usize) -> Resources {
        Resources {
            entries: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Changes the bound (Modify QP of `max_dest_rd_atomic`), dropping the
    /// oldest entries that no longer fit.
    pub(super) fn set_capacity(&mut self, cap: usize) {
        self.cap = cap.max(1);
        while self.entries.len() > self.cap {
            self.entries.pop_front();
        }
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.cap
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Saves a request, forgetting the oldest if the table is full.
    pub(super) fn push(&mut self, entry: Entry) {
        if self.entries.len() >= self.cap {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    /// The saved request that PSN `psn` belongs to, newest first.
    pub(super) fn find(&self, psn: Psn) -> Option<Entry> {
        self.entries.iter().rev().find(|e| e.covers(psn)).copied()
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}
