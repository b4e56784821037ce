//! Which pointers are live objects of ours, and of which kind, so that a
//! stale or foreign handle from C is refused (EINVAL/NULL) instead of
//! dereferenced.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Context,
    Pd,
    Mr,
    Mw,
    Cq,
    Channel,
    Qp,
    Srq,
    Ah,
    /// `struct rdma_event_channel` (librdmacm).
    CmChannel,
    /// `struct rdma_cm_id` (librdmacm).
    CmId,
    /// `struct rdma_cm_event` handed out and not acked (librdmacm).
    CmEvent,
}

static LIVE: LazyLock<RwLock<HashMap<usize, Kind>>> = LazyLock::new(RwLock::default);

pub fn insert<T>(p: *const T, kind: Kind) {
    LIVE.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p as usize, kind);
}

/// Forgets `p`; returns whether it was live as `kind`.
pub fn remove<T>(p: *const T, kind: Kind) -> bool {
    let mut m = LIVE.write().unwrap_or_else(|e| e.into_inner());
    if m.get(&(p as usize)) == Some(&kind) {
        m.remove(&(p as usize));
        true
    } else {
        false
    }
}

pub fn is<T>(p: *const T, kind: Kind) -> bool {
    !p.is_null()
        && LIVE
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(p as usize))
            == Some(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_checked() {
        let x = 5u8;
        let p = &x as *const u8;
        assert!(!is(p, Kind::Pd));
        insert(p, Kind::Pd);
        assert!(is(p, Kind::Pd));
        assert!(!is(p, Kind::Qp), "wrong kind");
        assert!(!remove(p, Kind::Qp));
        assert!(remove(p, Kind::Pd));
        assert!(!is(p, Kind::Pd));
        assert!(!is(std::ptr::null::<u8>(), Kind::Pd));
    }
}
