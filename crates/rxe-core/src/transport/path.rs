//! Which of a connected QP's paths a received packet came by, and the
//! per-QP values the endpoint derives from its port's tables for each
//! path (the P_Keys the paths' indexes name, whether the alternate path's
//! source GID exists).
//!
//! # Decisions, with their sources
//! - **A connected QP accepts packets from its path only.** The packet's
//!   source GID must be the path's destination GID and its destination GID
//!   the GID table entry the path's `sgid_index` names. IBTA 9.6.1.5
//!   (connected services check the packet's source and destination
//!   against the QP context; not checked against the text) and kernel
//!   rxe's `check_addr()`: without it, anyone who guesses a QPN and a PSN
//!   can inject SENDs, WRITEs and READs into a connection. UD and GSI
//!   accept any source. An endpoint never given a GID table (a sans-IO
//!   test with no port) checks the source alone; a device always gives one.
//! - **An ARMED QP also accepts its alternate path, and only with MigReq
//!   set** (IBTA 17.2.8, `qp::migration`): such a packet is the peer's
//!   migration, and once it has passed the checks of that path (its
//!   P_Key against the alternate path's) this QP migrates before handling
//!   it. A duplicate counts: a requester that migrated resends from its
//!   oldest unacknowledged PSN, which the responder may already have. A MigReq packet
//!   on the primary path is an ordinary packet: a peer armed later than
//!   this QP still sends MigReq until it arms (rdmavt drops those; taking
//!   them loses nothing and spares a connection whose ends were armed by
//!   Modify QP one after the other).

use super::io::RecvMeta;
use super::qp::{AddressVector, QpCommon, QpConfig};
use crate::wire::Gid;

/// How a packet for a connected QP relates to its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PathCheck {
    /// It came by the primary path.
    Primary,
    /// It came by the armed alternate path with MigReq set: migrate.
    Migration,
    /// Neither: drop it.
    Foreign,
}

/// Checks a packet with BTH MigReq `mig_req` against connected QP `c`.
pub(super) fn check(
    c: &QpCommon,
    gids: &[Option<Gid>],
    meta: &RecvMeta,
    mig_req: bool,
) -> PathCheck {
    let a = c.config.attrs();
    // A QP receives from RTR on, and RTR requires a path (qp_state's rules).
    if a.av.is_some_and(|av| came_by(&av, gids, meta)) {
        return PathCheck::Primary;
    }
    match c.config.armed_path() {
        Some(alt) if mig_req && came_by(&alt.av, gids, meta) => PathCheck::Migration,
        _ => PathCheck::Foreign,
    }
}

/// Whether a packet came by the primary path (for what no migration may
/// start from, such as a CNP).
pub(super) fn on_primary(c: &QpCommon, gids: &[Option<Gid>], meta: &RecvMeta) -> bool {
    c.config
        .attrs()
        .av
        .is_some_and(|av| came_by(&av, gids, meta))
}

fn came_by(av: &AddressVector, gids: &[Option<Gid>], meta: &RecvMeta) -> bool {
    if meta.sgid != av.dgid {
        return false;
    }
    gids.is_empty() || gids.get(usize::from(av.sgid_index)).copied().flatten() == Some(meta.dgid)
}

/// Brings `c`'s P_Keys and alternate-path usability in line with the
/// port's tables (after Modify QP, a migration or a table change).
pub(super) fn refresh(c: &mut QpCommon, pkeys: &[u16], gids: &[Option<Gid>]) {
    c.pkey = pkey_at(pkeys, c.config.attrs().pkey_index.unwrap_or(0));
    let alt = c.config.attrs().alt_path;
    c.alt_pkey = alt.map_or(c.pkey, |p| pkey_at(pkeys, p.pkey_index));
    c.alt_usable = alt.is_some_and(|p| {
        gids.is_empty()
            || gids
                .get(usize::from(p.av.sgid_index))
                .copied()
                .flatten()
                .is_some()
    });
}

/// The P_Key a config's primary `pkey_index` names (0 if none).
pub(super) fn pkey_of(table: &[u16], config: &QpConfig) -> u16 {
    pkey_at(table, config.attrs().pkey_index.unwrap_or(0))
}

fn pkey_at(table: &[u16], index: u16) -> u16 {
    table.get(usize::from(index)).copied().unwrap_or(0)
}
