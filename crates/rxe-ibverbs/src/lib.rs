//! A drop-in `libibverbs.so.1`: rdma-core's public ABI (the structs of
//! `<infiniband/verbs.h>`, the `IBVERBS_1.x` symbol versions) implemented
//! over an rxe device ([`rxe_verbs::Device`]) that runs inside the
//! program's own process. Unmodified programs (ibv_devinfo, the
//! ibv_*_pingpong examples, perftest) then use RDMA over UDP with no
//! kernel module, no root and no `/dev/infiniband`.
//!
//! Run a program with `rxe exec -- PROGRAM`, or set `RXE_IBV_DEVICES` and
//! put this library first (`LD_LIBRARY_PATH` or `LD_PRELOAD`); see
//! docs/ibverbs.md.
//!
//! Layout of the crate, one job per file: [`exports`] (the export macro and
//! its panic guard), [`devices`] (configuration, probing, the device list),
//! [`context`] (contexts, queries, attaching the engine), [`pd`], [`mr`]
//! and [`foreign`] (the application's memory, the only module that reads
//! and writes it), [`channel`] and [`cq`], [`qp`] and [`conv`] (the C <->
//! Rust conversions), [`srq`], [`ah`], [`async_events`], [`compat`]
//! (sysfs, strings, rates, kernel-struct copies, what rxe does not have).
//! The ABI layer only calls [`rxe_verbs`], so a daemon can later take the
//! engine without changing it. `librdmacm.so.1` (not here yet) is to
//! reach the device through one entry point of this library
//! (`__rxe_cm_ops_v1`).
//!
//! `unsafe` is allowed in this crate because it is an FFI boundary: every
//! pointer comes from C. Each block says why it is sound (`// SAFETY:`).

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc)]

#[macro_use]
pub mod exports;
pub mod ah;
pub mod async_events;
pub mod channel;
pub mod compat;
pub mod context;
pub mod conv;
pub mod cq;
pub mod cq_ex;
pub mod devices;
pub mod errno;
pub mod foreign;
mod handles;
pub mod log;
pub mod mr;
pub mod mw;
pub mod newer;
pub mod pd;
pub mod qp;
pub mod qp_ex;
pub mod rdmacm;
pub mod srq;
