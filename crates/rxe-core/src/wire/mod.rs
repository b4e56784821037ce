//! The packet engine: RoCE and InfiniBand headers as zero-copy views over
//! bytes (`Bth<T>`, `Reth<T>` ...) and validated owned values (`BthRepr`,
//! `RethRepr` ...) with `parse` and `emit`, in the style of smoltcp's `wire`.

pub mod bth;
pub mod error;
pub mod field;
pub mod opcode;

pub use bth::{Bth, BthRepr};
pub use error::{Error, ErrorKind, Layer, Result};
pub use field::{Describe, FieldSpec, FieldValue};
pub use opcode::{ExtHeader, Opcode, OpcodeInfo, Operation, PayloadRule, Position, Transport};
