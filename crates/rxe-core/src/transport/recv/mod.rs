//! The receive side of a QP, in kernel rxe's split: the responder checks and
//! executes request packets and answers them.
//!
//! - [`responder`]: the responder's state and its calls (requests in,
//!   responses out, flush), with the choices it makes beyond the IBTA
//!   rules; [`check`] (the per-transport checks of a request: RC's PSN
//!   classification and NAKs, UC's discard, UD's Q_Key), [`execute`]
//!   (SEND, WRITE, READ and atomics at the expected PSN) and [`duplicate`]
//!   (RC requests seen before) are more of its methods.
//! - [`queue`]: a QP's own receive queue and the scatter of a payload into
//!   a receive's SGEs.
//! - [`resources`]: the responder resources, the bounded table of READ and
//!   atomic requests that a duplicate is answered from.
//! - [`reorder`]: RC SEND and WRITE packets that arrived ahead of the
//!   expected PSN, held to be executed in order once the gap is filled
//!   (selective retransmission's responder half).
//! - [`srq`]: shared receive queues, which the endpoint owns and passes to
//!   the responder of each QP attached to one (`QpInit::srq`).

mod check;
mod duplicate;
mod execute;
mod queue;
pub(crate) mod reorder;
mod resources;
mod responder;
mod srq;

#[cfg(test)]
mod tests;

pub(crate) use responder::Responder;
pub use srq::{Srq, SrqAttr, SrqInit};
