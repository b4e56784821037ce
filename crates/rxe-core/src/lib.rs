//! rxe-core: the packet engine (`wire`) of the rxe software RoCE NIC.
//!
//! `wire` builds and parses every header that RoCE and native InfiniBand put
//! on the wire, verifies and computes the ICRC and VCRC, and explains each
//! field in words (the `describe` tables that `rxe dissect -v` prints).
//! Everything here is pure: bytes in, bytes or values out.
//!
//! `transport` is the sans-IO transport engine: an `Endpoint` drives the
//! QPs of one port (requester, completer and responder, kernel rxe's split)
//! from packets and time values, with no sockets, threads or clock.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod transport;
pub mod wire;

pub use wire::Gid;
