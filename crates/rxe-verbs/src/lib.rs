//! rxe-verbs: the verbs frontend of rxe, a software RoCEv2 NIC.
//!
//! The names follow libibverbs and the kernel verbs so that an RDMA
//! programmer finds their way: a [`Device`] (added on an interface or one
//! local address, like `rdma link add`) has one port with a GID table and a
//! P_Key table; [`Pd`]s hold [`Mr`]s, [`Ah`]s, [`Qp`]s and [`Srq`]s; QPs
//! complete into [`Cq`]s; asynchronous events go to handlers; clients hear
//! of every device coming and going.
//!
//! ```no_run
//! use rxe_verbs::*;
//! let dev = Device::add(DeviceConfig::on_address("127.0.0.1".parse().unwrap()))?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(64)?;
//! let mr = pd.reg_mr_zeroed(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let qp = pd.create_qp(&QpInitAttr {
//!     qp_type: QpType::Rc,
//!     send_cq: &cq,
//!     recv_cq: &cq,
//!     srq: None,
//!     cap: QpCap::default(),
//!     sq_sig_all: false,
//! })?;
//! # let _ = (mr, qp);
//! # Ok::<(), VerbsError>(())
//! ```
//!
//! Objects live until they are destroyed (or their device is removed);
//! dropping a handle does not destroy anything, as in C. Destroying an
//! object that others use is refused with [`VerbsError::Busy`].

#![forbid(unsafe_code)]

pub mod ah;
pub mod attr;
pub mod client;
pub mod cm;
pub mod connect;
pub mod cq;
pub mod device;
pub mod driver;
mod engine;
pub mod error;
pub mod event;
pub mod fast_reg;
pub mod mr;
mod mr_table;
pub mod mw;
pub mod pd;
pub mod qp;
mod registry;
pub mod rsocket;
pub mod shared_buffer;
pub mod spin_wait;
pub mod srq;
mod use_count;

pub use ah::{ah_attr_from_wc, Ah, AhAttr};
pub use attr::{AtomicCap, DeviceAttr, GidEntry, GidType, LinkLayer, PortAttr, PortState};
pub use client::{register_client, Client, ClientData, ClientId, ClientRegistration};
pub use connect::{ConnectError, InitParams, RcParams, ReadyParams, RemoteQp};
pub use cq::{Cq, NotifyKind};
pub use device::{Device, DeviceConfig, Target, PORT};
pub use error::{ObjectKind, Result, VerbsError};
pub use event::AsyncEvent;
pub use fast_reg::FastRegMr;
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::{Qp, QpCap, QpInfo, QpInitAttr};
pub use registry::{device_by_name, devices};
pub use spin_wait::SpinWait;
pub use srq::{Srq, SrqInitAttr};

pub use rxe_core::transport::{
    AccessFlags, AddressVector, AltPath, AttrMask, CongestionConfig, DcqcnParams, InlineData,
    MigState, MwBind, MwType, PathMtu, PostError, Psn, QpAttr, QpState, QpType, RecvWr, RegMr,
    SendData, SendOp, SendWr, Sge, SgeList, UdDest, WcOpcode, WcStatus, WorkCompletion, WorkQueue,
};
pub use rxe_core::Gid;
