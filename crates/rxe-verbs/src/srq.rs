//! Shared receive queues (`ibv_create_srq`): one pool of receive buffers
//! for many QPs, with a low-water mark (the limit) that raises an event when
//! the pool runs low.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rxe_core::transport::RecvWr;
use rxe_core::transport::{SrqAttr, SrqInit};

use crate::error::{ObjectKind, Result, VerbsError};
use crate::pd::Pd;

/// `struct ibv_srq_init_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    /// 0: not armed.
    pub srq_limit: u32,
}

impl Default for SrqInitAttr {
    fn default() -> SrqInitAttr {
        SrqInitAttr {
            max_wr: 128,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

#[derive(Debug)]
pub(crate) struct SrqShared {
    pub srqn: u32,
    /// QPs attached to it.
    pub(crate) users: crate::use_count::UseCount,
    pub destroyed: AtomicBool,
}

/// A shared receive queue. Clones share it.
#[derive(Clone)]
pub struct Srq {
    pub(crate) pd: Pd,
    pub(crate) shared: Arc<SrqShared>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.shared.srqn)
            .finish()
    }
}

impl Pd {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<Srq> {
        self.check_live()?;
        let max = self.dev.max();
        if attr.max_wr == 0 || attr.max_wr > max.max_srq_wr {
            return Err(VerbsError::InvalidArgument(format!(
                "SRQ max_wr must be 1 to {}",
                max.max_srq_wr
            )));
        }
        if attr.max_sge == 0 || attr.max_sge > max.max_srq_sge {
            return Err(VerbsError::InvalidArgument(format!(
                "SRQ max_sge must be 1 to {}",
                max.max_srq_sge
            )));
        }
        let mut e = self.dev.lock();
        if e.counts.srq >= max.max_srq {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Srq,
                max: max.max_srq,
            });
        }
        let srqn = e.ep.create_srq(SrqInit {
            pd: self.shared.id,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })?;
        e.counts.srq += 1;
        self.shared.users.acquire();
        Ok(Srq {
            pd: self.clone(),
            shared: Arc::new(SrqShared {
                srqn,
                users: crate::use_count::UseCount::new(),
                destroyed: AtomicBool::new(false),
            }),
        })
    }
}

impl Srq {
    pub(crate) fn check_live(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        if self.shared.destroyed.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Srq));
        }
        Ok(())
    }

    pub fn srq_num(&self) -> u32 {
        self.shared.srqn
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        e.ep.post_srq_recv(self.shared.srqn, wr)?;
        self.pd.dev.kick_after_recv(e);
        Ok(())
    }

    /// `ibv_modify_srq`: resize (`max_wr`) and/or arm the limit.
    pub fn modify(&self, max_wr: Option<u32>, srq_limit: Option<u32>) -> Result<()> {
        self.check_live()?;
        if let Some(m) = max_wr {
            let max = self.pd.dev.max().max_srq_wr;
            if m == 0 || m > max {
                return Err(VerbsError::InvalidArgument(format!(
                    "SRQ max_wr must be 1 to {max}"
                )));
            }
        }
        let mut e = self.pd.dev.lock();
        e.ep.modify_srq(self.shared.srqn, max_wr, srq_limit)?;
        Ok(())
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr> {
        self.check_live()?;
        Ok(self.pd.dev.lock().ep.query_srq(self.shared.srqn)?)
    }

    /// `ibv_destroy_srq`: refused while QPs are attached.
    pub fn destroy(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        self.shared
            .users
            .check_unused(ObjectKind::Srq, "QPs take their receives from it")?;
        e.ep.destroy_srq(self.shared.srqn)?;
        self.shared.destroyed.store(true, Ordering::Release);
        e.counts.srq -= 1;
        self.pd.shared.users.release();
        Ok(())
    }
}
