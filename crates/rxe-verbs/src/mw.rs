//! Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`): a
//! remote key onto part of a registered region, bound and invalidated
//! without registering memory again. The rules live in rxe-core's
//! `window` module ([`rxe_core::transport::WindowTable`]); this is the
//! handle.
//!
//! A type 1 window is bound with [`Mw::bind`] (the Bind Memory Window
//! verb, which rdma-core also runs through the QP's send queue: its
//! completion, `WcOpcode::BindMw`, comes on the send CQ). A type 2 window
//! is bound with a `SendOp::BindMw` work request that [`Mw::bind_op`]
//! builds, and freed by `SendOp::LocalInv` or a peer's SEND with
//! Invalidate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rxe_core::transport::{AccessFlags, Key, MwBind, MwType, SendData, SendOp, SendWr};

use crate::error::{ObjectKind, Result, VerbsError};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;

#[derive(Debug)]
struct MwShared {
    /// The window's key as allocated: its index names it for good.
    key: Key,
    ty: MwType,
    deallocated: AtomicBool,
}

/// A memory window. Clones share it.
#[derive(Clone)]
pub struct Mw {
    pd: Pd,
    shared: Arc<MwShared>,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("rkey", &format_args!("{:#010x}", self.rkey()))
            .field("type", &self.shared.ty)
            .finish()
    }
}

impl Pd {
    /// `ibv_alloc_mw`: a new, unbound window of type `ty` in this PD.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw> {
        self.check_live()?;
        let mut e = self.dev.lock();
        let max = self.dev.max().max_mw;
        if e.mem.windows().len() >= max as usize {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Mw,
                max,
            });
        }
        let key = e.mem.windows_mut().alloc(self.shared.id, ty)?;
        self.shared.users.acquire();
        drop(e);
        Ok(Mw {
            pd: self.clone(),
            shared: Arc::new(MwShared {
                key,
                ty,
                deallocated: AtomicBool::new(false),
            }),
        })
    }
}

impl Mw {
    fn check_live(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        if self.shared.deallocated.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Mw));
        }
        Ok(())
    }

    /// The window's current R_Key (its key portion changes at every bind).
    pub fn rkey(&self) -> u32 {
        let e = self.pd.dev.lock();
        e.mem
            .windows()
            .info(self.shared.key)
            .map_or(self.shared.key, |w| w.key)
            .raw()
    }

    pub fn mw_type(&self) -> MwType {
        self.shared.ty
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The region the window is bound to (its key), if any.
    pub fn bound_to(&self) -> Option<u32> {
        let e = self.pd.dev.lock();
        e.mem
            .windows()
            .info(self.shared.key)
            .and_then(|w| w.binding)
            .map(|b| b.mr.raw())
    }

    /// The BIND_MW operation that binds this (type 2) window to `length`
    /// bytes of `mr` at virtual address `addr` with `access`, giving it the
    /// R_Key `new_rkey` (the current one with another key portion,
    /// `ibv_inc_rkey`). Post it in a [`SendWr`] on a QP of the window's PD.
    pub fn bind_op(
        &self,
        new_rkey: u32,
        mr: &Mr,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> SendOp {
        SendOp::BindMw(MwBind {
            mw_rkey: self.rkey(),
            new_rkey,
            mr_lkey: mr.lkey(),
            addr,
            length,
            access,
            verb: false,
        })
    }

    /// `ibv_bind_mw` for a type 1 window: posts the bind on `qp`'s send
    /// queue (its completion, with `wr_id`, comes on the send CQ if
    /// `signaled` or on error) and returns the window's new R_Key, the
    /// current one with the key portion incremented, as rdma-core does.
    /// `mr` `None` or `length` 0 unbinds the window.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &self,
        qp: &Qp,
        wr_id: u64,
        mr: Option<&Mr>,
        addr: u64,
        length: u64,
        access: AccessFlags,
        signaled: bool,
    ) -> Result<u32> {
        self.check_live()?;
        if !self.shared.ty.is_type1() {
            return Err(VerbsError::InvalidArgument(
                "ibv_bind_mw binds type 1 windows; a type 2 window is bound by a BIND_MW work request".into(),
            ));
        }
        let current = Key::new(self.rkey());
        let new = current.inc();
        let (mr_lkey, length) = match mr {
            Some(m) if length > 0 => (m.lkey(), length),
            _ => (0, 0),
        };
        let wr = SendWr {
            wr_id,
            op: SendOp::BindMw(MwBind {
                mw_rkey: current.raw(),
                new_rkey: new.raw(),
                mr_lkey,
                addr,
                length,
                access,
                verb: true,
            }),
            data: SendData::Sges(Vec::new()),
            signaled,
            fence: false,
            solicited: false,
            ud: None,
        };
        qp.post_send(wr)?;
        Ok(new.raw())
    }

    /// `ibv_dealloc_mw`: the window goes, unbinding it from its region.
    pub fn dealloc(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.pd.dev.lock();
        if self.shared.deallocated.swap(true, Ordering::AcqRel) {
            return Err(VerbsError::Destroyed(ObjectKind::Mw));
        }
        e.mem.windows_mut().dealloc(self.shared.key)?;
        self.pd.shared.users.release();
        Ok(())
    }
}
