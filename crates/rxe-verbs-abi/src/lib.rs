//! The libibverbs ABI (rdma-core v44 and HEAD, x86_64), hand-written.
//!
//! Every struct that an application and `libibverbs.so.1` share is here as
//! a `#[repr(C)]` copy, with the offsets measured from the real headers
//! asserted at compile time ([`layout`](crate::CHECKED_LAYOUT)), so a
//! wrong field cannot build. `rxe-ibverbs` fills these; this crate's test
//! `layout_vs_headers` compiles a C program against the installed
//! `<infiniband/verbs.h>` and compares again.
//!
//! Where v44 and HEAD differ (`ibv_port_attr`, `ibv_qp_ex`,
//! `verbs_context`), the HEAD layout is declared: it is a superset, and
//! the library honours the caller's size arguments.

#![no_std]
#![forbid(unsafe_code)]
#![allow(non_camel_case_types)]

pub mod consts;
pub mod kern;
mod layout;
pub mod rdmacm;
mod structs;

pub use layout::CHECKED_LAYOUT;
pub use structs::*;
