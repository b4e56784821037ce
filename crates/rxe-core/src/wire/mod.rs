//! The packet engine: RoCE and InfiniBand headers as zero-copy views over
//! bytes (`Bth<T>`, `Reth<T>` ...) and validated owned values (`BthRepr`,
//! `RethRepr` ...) with `parse` and `emit`, in the style of smoltcp's `wire`.

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod build;
pub mod deth;
pub mod dissect;
pub mod error;
pub mod feth;
pub mod field;
pub mod frame;
pub mod gid;
pub mod grh;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ip_udp;
pub mod lrh;
pub mod netfields;
pub mod opcode;
pub mod packet;
pub mod rdeth;
pub mod reth;
pub mod vcrc;
mod view;
pub mod xrceth;

pub use aeth::{Aeth, AethRepr, NakCode, Syndrome};
pub use atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr};
pub use deth::{Deth, DethRepr};
pub use error::{Error, ErrorKind, Layer, Result};
pub use feth::{Feth, FethRepr};
pub use field::{Describe, FieldSpec, FieldValue};
pub use gid::Gid;
pub use grh::{Grh, GrhRepr};
pub use icrc::IcrcScope;
pub use ieth::{Ieth, IethRepr};
pub use immdt::{ImmDt, ImmDtRepr};
pub use lrh::{Lnh, Lrh, LrhRepr};
pub use opcode::{ExtHeader, Opcode, OpcodeInfo, Operation, PayloadRule, Position, Transport};
pub use packet::{pad_for, ExtReprs, TransportPacket, TransportRepr};
pub use rdeth::{Rdeth, RdethRepr};
pub use reth::{Reth, RethRepr};
pub use xrceth::{Xrceth, XrcethRepr};
