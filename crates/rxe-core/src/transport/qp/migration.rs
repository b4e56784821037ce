//! Automatic path migration (IBTA 17.2.8): a connected QP holds a second,
//! alternate path and moves its traffic there when the primary fails,
//! without the application losing a message.
//!
//! This module holds the QP side of it: what Modify QP accepts for
//! `path_mig_state`, the move itself, and the BTH MigReq bit a QP sends.
//! The triggers live where the events are seen: the requester migrates
//! when its retries on the primary are spent (`send::requester`), the
//! endpoint when a packet arrives on the alternate path asking for it.
//!
//! # Decisions, with their sources
//! - **The three states** (`enum ibv_mig_state`; IBTA 17.2.8). MIGRATED:
//!   no alternate path is armed (a new QP, and every QP right after a
//!   migration). REARM: software loaded an alternate path and waits for
//!   the peer to have done the same. ARMED: the alternate path may be
//!   taken at any moment. An unset `path_mig_state` is MIGRATED, as the
//!   zeroed `ibv_qp_attr` of a program that never names it says.
//! - **MigReq says "I am migrated".** A QP sets the BTH MigReq bit in every
//!   packet while MIGRATED and clears it while REARM or ARMED (IBTA 9.2,
//!   17.2.8; the kernel's software IB drivers, rdmavt/hfi1, do the same).
//!   Kernel rxe, which never migrates, sends 0 always; no receiver looks at
//!   the bit unless it is ARMED, so either value passes with a peer that
//!   does not migrate.
//! - **REARM becomes ARMED on the peer's word.** A packet that arrives on
//!   the primary path with MigReq 0 shows that the peer has rearmed too;
//!   only then does the QP arm (as rdmavt does). Until then a stray MigReq
//!   1 from a peer still MIGRATED cannot trigger a migration. Software may
//!   also set ARMED directly (mlx4/mlx5 accept it), for two ends armed by
//!   their programs at the same time.
//! - **What software may ask** (rdmavt's Modify QP rules): REARM or ARMED
//!   only with an alternate path loaded, in this call or before
//!   ([`ModifyError::NoAlternatePath`]); not REARM while ARMED; MIGRATED
//!   while ARMED is a migration on request (IBTA 17.2.8: the consumer may
//!   force one, e.g. to move a connection off a path it plans to take
//!   down); MIGRATED while REARM is refused (there is nothing armed to
//!   move to). Loading a new alternate path while ARMED replaces it and
//!   stays ARMED.
//! - **The move**: the alternate address vector, P_Key index, port and
//!   local ACK timeout become the primary ones; the state becomes
//!   MIGRATED; the alternate path is forgotten (software loads a new one
//!   and rearms, IBTA 17.2.8), so `ibv_query_qp` shows no stale alternate.
//!   PSNs, queues and retry state carry over: a migration loses nothing.
//! - **Events**: a migration the QP makes on its own (retries spent, or a
//!   peer's MigReq on the alternate path) raises `IBV_EVENT_PATH_MIG`; one
//!   asked for by Modify QP does not (the caller knows; rdmavt does the
//!   same). `IBV_EVENT_PATH_MIG_ERR` when the requester should migrate but
//!   cannot: the alternate path's source GID is no longer in the port's
//!   table (its address was removed). The QP then fails as without one.

use super::attr::{AltPath, MigState, QpState};
use super::mask::{Attr, AttrMask, QpAttr};
use super::modify::{ModifyError, QpConfig};

impl QpConfig {
    /// The path migration state; MIGRATED when never set.
    pub fn mig_state(&self) -> MigState {
        self.attrs().path_mig_state.unwrap_or(MigState::Migrated)
    }

    /// The BTH MigReq bit this QP sends: set while MIGRATED.
    pub fn mig_req(&self) -> bool {
        self.mig_state() == MigState::Migrated
    }

    /// The armed alternate path, if the QP is ARMED.
    pub fn armed_path(&self) -> Option<&AltPath> {
        match self.mig_state() {
            MigState::Armed => self.attrs().alt_path.as_ref(),
            _ => None,
        }
    }

    /// Moves to the armed alternate path (module docs); `false` (nothing
    /// changed) when not ARMED.
    pub(crate) fn migrate(&mut self) -> bool {
        let Some(alt) = self.armed_path().copied() else {
            return false;
        };
        let a = self.attrs_mut();
        a.av = Some(alt.av);
        a.pkey_index = Some(alt.pkey_index);
        a.port_num = Some(alt.port_num);
        a.timeout = Some(alt.timeout);
        a.alt_path = None;
        a.path_mig_state = Some(MigState::Migrated);
        true
    }

    /// A packet on the primary path with MigReq 0: a QP in REARM arms.
    pub(crate) fn peer_rearmed(&mut self) {
        if self.mig_state() == MigState::Rearm && self.attrs().alt_path.is_some() {
            self.attrs_mut().path_mig_state = Some(MigState::Armed);
        }
    }
}

/// Checks a Modify QP's `path_mig_state` against the QP's current one
/// (module docs).
pub(super) fn check(current: &QpConfig, attr: &QpAttr, mask: AttrMask) -> Result<(), ModifyError> {
    let Some(to) = attr.path_mig_state.filter(|_| mask.has(Attr::PathMigState)) else {
        return Ok(());
    };
    let from = current.mig_state();
    let has_alt =
        (mask.has(Attr::AltPath) && attr.alt_path.is_some()) || current.attrs().alt_path.is_some();
    match (from, to) {
        (MigState::Armed, MigState::Rearm) | (MigState::Rearm, MigState::Migrated) => {
            Err(ModifyError::MigStateChange { from, to })
        }
        (_, MigState::Rearm | MigState::Armed) if !has_alt => Err(ModifyError::NoAlternatePath),
        _ => Ok(()),
    }
}

/// After the attributes are copied: MIGRATED asked for while ARMED is a
/// migration on request, made on `next` (which already holds any
/// alternate path this call loaded).
pub(super) fn apply(current: &QpConfig, next: &mut QpConfig, attr: &QpAttr, mask: AttrMask) {
    let asked = mask.has(Attr::PathMigState) && attr.path_mig_state == Some(MigState::Migrated);
    if asked && current.mig_state() == MigState::Armed && next.state() != QpState::Reset {
        next.attrs_mut().path_mig_state = Some(MigState::Armed);
        next.migrate();
    }
}
