//! rxe-core: the packet engine (`wire`) of the rxe software RoCE NIC.
//!
//! `wire` builds and parses every header that RoCE and native InfiniBand put
//! on the wire, verifies and computes the ICRC and VCRC, and explains each
//! field in words (the `describe` tables that `rxe dissect -v` prints).
//! Everything here is pure: bytes in, bytes or values out.
//!
//! `transport` is the sans-IO transport engine that will drive QPs from
//! packets and time values; so far it has PSN arithmetic and the QP state
//! machine (Modify QP as a pure function).

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod transport;
pub mod wire;
