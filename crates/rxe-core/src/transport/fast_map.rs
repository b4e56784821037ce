//! The hash maps that every packet looks into: QPs and SRQs by number,
//! deadlines by QPN, the port window by destination GID, multicast groups
//! by GID (and, in rxe-verbs, the completion routes by QPN).
//!
//! # Decisions, with their sources
//!
//! - foldhash's `fast::RandomState`, not std's SipHash: every key in these
//!   maps is put there by this side (a QPN or SRQ number it allocated, a
//!   destination it sends to, a group it joined); a peer only chooses what
//!   is looked up, and a lookup inserts nothing. So what SipHash defends
//!   against (a peer growing a map with colliding keys) cannot happen
//!   here, while its cost was measured on every packet: with SipHash,
//!   `hash_one` and `DefaultHasher::write` were 6 % of the sender's CPU
//!   and 4 % of the receiver's in a 64-byte WRITE stream (`perf record`
//!   on `rxe perf write -s 64`, docs/performance.md). foldhash still seeds
//!   each map at random (its "minimal DoS resistance", README of foldhash
//!   0.2), so the layout differs from process to process.

use std::collections::HashMap;

/// A `HashMap` with foldhash's per-map random seed (see the module docs).
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
