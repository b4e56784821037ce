//! The send side of a QP, in kernel rxe's split: the requester turns work
//! requests into request packets, the completer turns the responses into
//! completions.
//!
//! - [`requester`]: the send queue, PSNs, the window, fences,
//!   `max_rd_atomic`, the retransmit timer and RNR waits.
//! - [`adaptive_timer`]: early retransmission from measured round trips.
//! - [`segment`]: how one work request becomes packets (opcodes, extended
//!   headers, gather from memory).
//! - [`completer`]: ACKs, NAKs, RNR NAKs, READ responses and atomic ACKs,
//!   as more methods of [`Requester`].

mod adaptive_timer;
mod completer;
mod requester;
mod segment;

#[cfg(test)]
mod tests;

pub(crate) use requester::Requester;
pub(crate) use requester::MAX_UNACKED_PSNS;
