//! The transport engine, sans-IO: packets and time values in, packets and
//! deadlines out, with no sockets, threads, clocks or global state.
//!
//! # Layout
//!
//! The folders follow kernel rxe's split of a QP into a requester, a
//! completer and a responder; the files beside them are what every part
//! uses.
//!
//! - `endpoint`: the engine of one port (quinn-proto's shape: `handle`,
//!   `poll_transmit`, `poll_timeout`, `handle_timeout`): QPs and SRQs by
//!   number, the checks common to every QP, the routing of requests to the
//!   responder and of responses to the completer.
//! - `qp`: what a QP is apart from its two directions: attribute values,
//!   the Modify QP mask, the IBTA transition table, Modify QP as a pure
//!   function, and the state both directions share (`QpCommon`).
//! - `send`: the requester (work requests to request packets:
//!   segmentation, PSNs, the window, timers, RNR waits) and the completer
//!   (responses to completions).
//! - `recv`: the responder (request packets checked, executed and
//!   answered, duplicates included), the receive queue, the responder
//!   resources and the shared receive queues.
//! - `memory`: keys, regions and the memory trait the engine reads and
//!   writes through, with its checks; `region_table`: its one
//!   implementation, generic over how a region holds its bytes
//!   (`vec_memory`: over `Vec<u8>`; rxe-verbs: over registered memory).
//! - `psn`: 24-bit packet sequence numbers, their wrap-around arithmetic,
//!   the half-space comparison that requesters and responders use, and the
//!   responder's classification of a request PSN (expected, duplicate, ahead).
//! - `port_window`: the bound on the RC PSNs a port's QPs have in flight
//!   together to one destination, the back-pressure a socket buffer needs.
//! - `congestion`: ECN and the CNPs of the notification point, per port;
//!   `dcqcn`: the reaction point's rate state machine (DCQCN), per QP.
//! - `wr`: work requests and work completions; `io`: what crosses the
//!   sans-IO boundary with a packet (`Transmit`, `RecvMeta`); `time`: the
//!   engine's `Instant`; `counters`: every refused packet, by reason;
//!   `error`: the errors of the endpoint's calls; `fast_map`: the hash
//!   maps every packet looks into.
//!
//! Other crates use the re-exports below (`rxe_core::transport::Endpoint`,
//! ...); the modules themselves are private to the crate.
//!
//! # Tests
//!
//! One rule: a folder's tests are in its `tests.rs` (`#[cfg(test)] mod
//! tests;` in its `mod.rs`), so that each file of the folder reads without
//! them; a file directly in `transport/` keeps its tests inline at its end.
//! `endpoint.rs` is that rule's one exception, with its tests in
//! `endpoint_tests.rs` beside it: it stays a single file at its path, and
//! its tests are longer than its code. Unit tests build their packets with
//! `test_packet`. The crate's `tests/` drive whole engines over a simulated
//! network.
//!
//! IBTA section numbers cited here refer to the InfiniBand Architecture
//! Specification Volume 1; some were taken from secondary sources and are
//! marked where they could not be checked against the text.
//!
//! # Conventions the requester, completer and responder share
//!
//! - Sans-IO: no sockets, threads, clocks, globals, no `unsafe`. Time arrives as `time::Instant`. No allocation per packet on the hot path where avoidable (payload is copied once: memory -> caller's buf, or packet -> memory).
//! - Packets are written by `poll_transmit` into the caller's `buf` as BTH..pad followed by 4 zero ICRC bytes (use `TransportRepr::emit`, which zeroes the ICRC slot; return `Transmit { len, dest, src_qpn }` with `dest` = the QP's `attrs().av` for RC/UC, `wr.ud.av` for UD). Received packets arrive already parsed and ICRC-checked; the endpoint has already checked QPN, transport type, QP state (RTR/RTS/SQD/SQE) and P_Key.
//! - PSNs: 24-bit (`Psn`). The requester starts at `sq_psn` (on entering RTS), the responder expects `rq_psn` (on entering RTR). Every request packet takes one PSN, except an RDMA READ request, which takes as many PSNs as its response has packets: ceil(len / MTU), at least 1 (IBTA 9.7.2); the READ response packets carry PSNs p, p+1, ... where p is the request's PSN. An atomic takes 1 PSN; its ATOMIC Acknowledge carries the request's PSN.
//! - Opcodes: a message of L bytes with path MTU M: L <= M (incl. 0) -> ONLY; otherwise FIRST (M bytes), MIDDLE (M bytes)..., LAST (1..=M bytes). RETH on WRITE FIRST/ONLY (va, rkey, DMA length = whole message length); ImmDt on LAST/ONLY with immediate; IETH on SEND LAST/ONLY with invalidate. READ request: RETH (va, rkey, total length). READ responses: FIRST/LAST/ONLY carry an AETH, MIDDLE none. UD: SEND ONLY (with immediate) with DETH { qkey (wr's remote_qkey, or the QP's own qkey when the wr's has the high bit set, IBTA 10.2.5), src_qp }, message <= MTU. BTH: pkey = `common.pkey`, dest_qp = attrs().dest_qpn (RC/UC) or wr.ud.remote_qpn, SE on the last packet of a solicited SEND/WRITE-with-imm, pad count from the payload length (TransportRepr::new sets it).
//! - AckReq (BTH A bit): the requester sets it on the last packet of every RC request message (and on READ/atomic requests), and may set it more often to bound its window. The responder answers AckReq and the last packet of each message; it MAY coalesce otherwise.
//! - ACK: opcode RC Acknowledge, BTH PSN = the PSN of the newest packet being acknowledged (it acknowledges every PSN up to and including it), AETH syndrome `Syndrome::Ack { credits: 31 }` (credits invalid, as kernel rxe), AETH MSN = number of completed request messages mod 2^24 (IBTA 9.7.5.1.3). READ responses and ATOMIC ACKs also act as ACKs for everything before them (implicit acknowledgement, IBTA 9.7.5.1.2?).
//! - NAK: `Syndrome::Nak(code)`: PSN sequence error -> BTH PSN = the responder's expected PSN (the requester retransmits from there); invalid request, remote access error, remote operational error -> BTH PSN = the PSN of the offending packet, and the requester completes that WR with REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR, then the QP goes to ERR (`common.fatal()`), which flushes the rest with WR_FLUSH_ERR. The responder also goes to ERR after sending a NAK for invalid request / remote access / remote op error (IBTA 9.7.5.2.x class B/C errors) — RC only.
//! - RNR NAK: `Syndrome::RnrNak { timer: min_rnr_timer }`, BTH PSN = the PSN of the SEND (or WRITE with immediate) packet that found no receive WQE; the responder does not advance its expected PSN. The requester waits `rnr_timer(code)` then resends from that PSN, up to `rnr_retry` times (7 = without end); when exhausted: RNR_RETRY_EXC_ERR, QP to ERR.
//! - Duplicates (responder): a request PSN behind the expected PSN (`classify_request`) is a duplicate: SEND/WRITE -> re-ACK with the PSN of the newest packet acknowledged so far (do not deliver twice); READ -> re-execute the READ from the resent request's RETH (VA and length as sent, which may be the remaining part) and respond with PSNs from the duplicate's PSN; atomic -> answer from the saved result of that PSN (a bounded table of max_dest_rd_atomic entries), NEVER execute twice. Ahead of expected (`OutOfSequence`): NAK PSN sequence error once, then drop silently until the expected PSN arrives (IBTA 9.7.5.1.1, C9-112?).
//! - UC: no ACKs, no retransmits; the responder drops a message with a missing packet whole (PSN gap -> discard until the next FIRST/ONLY), sender completes after its last packet is sent.
//! - Timers: retransmit interval = `local_ack_timeout(timeout)` (None = no timer); on expiry retransmit from the oldest unacknowledged PSN, up to `retry_cnt` times (7 is seven, not without end; each retry without progress doubles the next interval, up to 4x: see `requester`); exhausted -> RETRY_EXC_ERR and QP to ERR.
//! - Completions: send WRs complete in order (signaled only, or every one if `init.sq_sig_all`; errors always), with `WorkQueue::Send`; receives with `WorkQueue::Recv`, byte_len, imm_data, invalidated_rkey, src_qp (UD), grh=true and the 40-byte `meta.grh` copied into the first 40 bytes of the receive buffer for UD (byte_len includes those 40), pkey_index. Flush: every outstanding WR completes with WR_FLUSH_ERR (opcode as posted, recv opcode `WcOpcode::Recv`).

mod congestion;
mod counters;
mod dcqcn;
mod endpoint;
mod error;
mod fast_map;
mod io;
mod key_table;
mod memory;
mod multicast;
mod path;
mod port_window;
mod psn;
mod qp;
mod recv;
mod region_table;
mod send;
#[cfg(test)]
mod test_packet;
mod time;
mod vec_memory;
mod window;
mod wr;

pub use congestion::{
    data_traffic_class, is_ce, CongestionConfig, DEFAULT_CNP_DSCP, DEFAULT_CNP_PRIO,
    DEFAULT_MIN_TIME_BETWEEN_CNPS, ECN_CE, ECN_ECT0, ECN_MASK,
};
pub use counters::{Counter, Counters};
pub use dcqcn::{CnpEffect, Dcqcn, DcqcnParams, MAX_REPLAY_EVENTS, PACING_SLACK};
pub use endpoint::{pkeys_match, Endpoint, GSI_QPN};
pub use error::{EndpointError, PostError};
pub use fast_map::FastMap;
pub use io::{RecvMeta, Transmit};
pub use key_table::KeyTable;
pub use memory::{
    atomic_by_copy, invalidate_key, validate, validate_fast_reg, validate_invalidate,
    validate_local_invalidate, AtomicOp, Key, MemError, MemoryAccess, RegMr, Region, RegionInfo,
};
pub use multicast::{
    is_multicast_gid, McastError, McastGroups, MAX_GROUPS as MAX_MCAST_GROUPS,
    MAX_QPS_PER_GROUP as MAX_MCAST_QPS_PER_GROUP, MAX_TOTAL_ATTACHES as MAX_MCAST_TOTAL_ATTACHES,
    MULTICAST_QPN,
};
pub use psn::{classify_request, Psn, PsnOutOfRange, RequestPsn};
pub use qp::{
    local_ack_timeout, modify, qkey_is_controlled, rnr_timer, transition, AccessFlags,
    AddressVector, AltPath, AsyncEvent, Attr, AttrMask, MigState, ModifyError, PathMtu, QpAttr,
    QpCaps, QpCommon, QpConfig, QpInit, QpState, QpType, Transition, GSI_QKEY, MAX_FLOW_LABEL,
    MAX_MIN_RNR_TIMER, MAX_QPN, MAX_RETRY_CNT, MAX_RNR_RETRY, MAX_SL, MAX_TIMEOUT,
};
pub use recv::{Srq, SrqAttr, SrqInit};
pub use region_table::{OutsideStore, RegionEntry, RegionTable};
pub use time::Instant;
pub use vec_memory::{VecMemory, VecRegion};
pub use window::{
    is_window_key, BindError, Binding, MwBind, MwType, QpRef, WindowInfo, WindowTable,
    FIRST_WINDOW_INDEX,
};
pub use wr::{
    InlineData, RecvWr, SendData, SendOp, SendWr, Sge, SgeList, UdDest, WcOpcode, WcStatus,
    WorkCompletion, WorkQueue,
};
