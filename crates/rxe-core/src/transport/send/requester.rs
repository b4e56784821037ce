//! The requester: send work requests in, request packets out.
//!
//! It checks a work request when it is posted, queues it, and sends it as
//! path-MTU packets with consecutive 24-bit PSNs from the QP's `sq_psn`,
//! within a bounded window of unacknowledged PSNs, with at most
//! `max_rd_atomic` READs and atomics outstanding and fenced requests held
//! back until the READs and atomics before them have completed. It runs
//! the two timers of an RC QP: the transport timer (retransmit from the
//! oldest unacknowledged PSN) and the RNR wait. The completer
//! (`completer.rs`) is the other half of the same state: it handles the
//! responses and completes work requests.
//!
//! How a work request becomes packets lives in `send_queue.rs`.
//!
//! # Decisions, with their sources
//!
//! - Posting (IBTA 10.3.1 for the states; libibverbs `ibv_post_send(3)`):
//!   refused in RESET, INIT and RTR ([`PostError::BadState`]); accepted in
//!   RTS; accepted but not started in SQD (the drain finishes what was
//!   started; the rest waits for the return to RTS); accepted in SQE and
//!   ERR, where the request completes with WR_FLUSH_ERR, as kernel rxe
//!   does for ERR (its post_send refuses only states before RTS, and its
//!   completer flushes the queue of a QP in ERR). Because `post_send` only
//!   reads the QP, those flush completions appear at the next
//!   `poll_transmit` of the QP (the endpoint polls every QP that was posted to).
//! - `retry_cnt` 7 means seven retries, not "without end". The IBTA
//!   defines the Retry Count as the number of times the requester retries
//!   timeout and sequence errors before it reports an error (IBTA 1.2,
//!   12.7.38, as quoted in Open MPI's `help-mpi-btl-mvapi.txt`: "the total
//!   number of times that the sender wishes the receiver to retry timeout,
//!   packet sequence, etc. errors before posting a completion error"), and
//!   gives the value 7 a special meaning only for the RNR Retry Count
//!   (12.7.39 / 9.7.5.2.8: 7 is infinite). Kernel rxe also skips the
//!   decrement for `retry_cnt == 7` (`rxe_comp.c`, ERROR_RETRY), but the
//!   specification does not allow that reading and hardware HCAs do not
//!   have it; a cut link must end in RETRY_EXC_ERR. (The IBTA text itself
//!   could not be read here; the section numbers are those of the quote.)
//! - What counts as a retry: a transport timeout, a NAK PSN sequence error,
//!   and an implied NAK (an ACK, READ response or atomic ACK for a PSN after
//!   a READ or atomic whose response never came: the response was lost).
//!   Each costs one of `retry_cnt`; any forward progress (a PSN newly
//!   acknowledged) resets both retry counters, as kernel rxe does. A
//!   retransmission to a PSN already being retransmitted, without progress
//!   since, is not started (and not counted) twice: a duplicated NAK or a
//!   late response must not burn retries.
//! - The transport timer runs while PSNs are unacknowledged: armed when a
//!   packet goes out and none is running, re-armed on every progress,
//!   stopped when nothing is outstanding and during an RNR wait (IBTA
//!   9.7.6.1: the interval is 4.096 µs × 2^timeout, `local_ack_timeout`;
//!   timeout 0 means no timer).
//! - The timer backs off: each retry spent without progress doubles the
//!   next interval, up to 4× the nominal one ([`ACK_TIMEOUT_BACKOFF_MAX`]).
//!   The attribute is the *minimum* wait before a retransmission
//!   (`ibv_modify_qp(3)`'s "local ack timeout"; RDMAmojo: "the minimum
//!   timeout that a QP waits for ACK/NACK"), so waiting longer is allowed,
//!   and HCAs do. Why: a peer that stalls for a moment (a busy software
//!   RoCE, a VM paused by its host) goes silent for longer than 8 nominal
//!   intervals; kernel rxe hides such stalls by retrying for ever at
//!   `retry_cnt` 7. With the backoff, `retry_cnt` 7 at timeout 14 (67 ms)
//!   waits 27 intervals (1.8 s) before RETRY_EXC_ERR instead of 8 (0.54 s),
//!   while the first retransmission still comes after one interval.
//! - Completion on a local error (a bad L_Key, out of bounds): the request
//!   completes with LOC_PROT_ERR once every request before it has completed,
//!   and the QP goes to ERR (`QpCommon::fatal`, as kernel rxe's requester
//!   does for every QP type; IBTA would allow SQE for UC/UD).
//! - Atomic results are written to the 8-byte SGE in host byte order
//!   (`u64::to_ne_bytes`), so a C program reading the `uint64_t` sees the
//!   original value, as with every libibverbs provider.
//! - `max_rd_atomic` 0 is taken as 1: kernel rxe would never start a READ
//!   with 0 outstanding allowed, which hangs the queue.

use std::collections::VecDeque;

use super::segment::{
    check_sges, emit_with, gather, packet_repr, packets_for, BuildError, PacketCtx, SendWqe,
};
use crate::transport::counters::{Counter, Counters};
use crate::transport::error::PostError;
use crate::transport::io::Transmit;
use crate::transport::memory::MemoryAccess;
use crate::transport::psn::Psn;
use crate::transport::qp::{local_ack_timeout, AccessFlags, QpState, QpType};
use crate::transport::qp::{AsyncEvent, QpCommon};
use crate::transport::time::Instant;
use crate::transport::wr::{SendData, SendOp, SendWr, WcStatus, WorkCompletion, WorkQueue};

/// The most PSNs an RC requester leaves unacknowledged before it waits
/// (the IBTA bound is 2^23, 9.7.1). 128, as kernel rxe: a larger window
/// made a slow peer (kernel rxe under emulation, with 2% loss) fall into
/// go-back-N collapse, every timeout resending more than it could take
/// in one ACK timeout. A READ request counts for one packet when it is
/// sent, however many PSNs it takes.
pub(super) const MAX_UNACKED_PSNS: u32 = 128;
/// The requester asks for an ACK at least this often within long messages,
/// so that the window never waits for the end of a message.
const ACK_REQ_INTERVAL: u32 = MAX_UNACKED_PSNS / 4;
/// The longest message (IBTA 9.4: 2^31 bytes).
pub const MAX_MESSAGE_LEN: u64 = 1 << 31;
/// `rnr_retry` 7 means retry without end (IBTA 9.7.5.2.8, 12.7.39).
const RNR_RETRY_FOREVER: u8 = 7;
/// The transport timer's interval grows to at most this many times the
/// nominal `local_ack_timeout` while retries go without progress.
pub const ACK_TIMEOUT_BACKOFF_MAX: u32 = 4;

/// One QP's send side: the queue, the send position, and (shared with the
/// completer) the acknowledgement state and timers.
#[derive(Debug, Default)]
pub struct Requester {
    /// Every posted request not yet completed, oldest first.
    pub(super) sq: VecDeque<SendWqe>,
    /// Index in `sq` of the request the next packet belongs to.
    pub(super) next: usize,
    /// The packet of `sq[next]` that goes next (for a READ, the first
    /// response packet the request asks for).
    pub(super) next_pkt: u32,
    /// PSN of the next packet.
    pub(super) psn: Psn,
    /// The oldest PSN not yet acknowledged.
    pub(super) una: Psn,
    /// One past the newest PSN ever sent (a retransmission goes back, this
    /// does not).
    pub(super) high: Psn,
    /// Retries left for timeouts and sequence errors, and after RNR NAKs.
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    /// The transport timer and the RNR wait.
    pub(super) retrans_at: Option<Instant>,
    pub(super) rnr_until: Option<Instant>,
    /// READs and atomics started and not completed.
    pub(super) rd_atomic: u32,
    /// Packets sent since the last one with AckReq.
    since_ack_req: u32,
    /// The PSN the current retransmission started from, until progress.
    pub(super) rewound_to: Option<Psn>,
    /// SQ_DRAINED raised for this visit to SQD.
    sqd_notified: bool,
}

impl Requester {
    pub fn new() -> Requester {
        Requester::default()
    }

    /// Follows a Modify QP: the PSNs start at `sq_psn` on RTR→RTS; entering
    /// SQD arms the drained notification.
    pub fn on_modify(&mut self, common: &mut QpCommon, from: QpState) {
        match common.state() {
            QpState::Rts if from == QpState::Rtr => {
                let p = common.config.attrs().sq_psn.unwrap_or_default();
                self.psn = p;
                self.una = p;
                self.high = p;
                self.reset_retries(common);
            }
            QpState::Sqd if from != QpState::Sqd => self.sqd_notified = false,
            _ => {}
        }
        self.check_drained(common);
    }

    /// Checks `wr` against the QP (state, queue depth, type, SGEs, inline
    /// size, atomics, message size) and queues it.
    pub fn post_send(&mut self, common: &QpCommon, wr: SendWr) -> Result<(), PostError> {
        if matches!(
            common.state(),
            QpState::Reset | QpState::Init | QpState::Rtr
        ) {
            return Err(PostError::BadState);
        }
        let depth = common.init.max_send_wr;
        if self.sq.len() >= depth as usize {
            return Err(PostError::QueueFull { depth });
        }
        let len = validate(common, &wr)?;
        self.sq.push_back(SendWqe::new(wr, len));
        Ok(())
    }

    /// The next request packet, written to `buf`.
    pub fn poll_transmit(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        mem: &mut dyn MemoryAccess,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        match common.state() {
            QpState::Error | QpState::Sqe => {
                if !self.sq.is_empty() {
                    self.flush(common);
                }
                return None;
            }
            QpState::Rts | QpState::Sqd => {}
            _ => return None,
        }
        self.complete_errors(common);
        if common.state() == QpState::Error || self.rnr_until.is_some() {
            return None;
        }
        let rc = common.qp_type() == QpType::Rc;
        let Some(wqe) = self.sq.get(self.next) else {
            self.check_drained(common);
            return None;
        };
        if wqe.error.is_some() {
            return None;
        }
        if rc && self.una.distance_to(self.psn) >= MAX_UNACKED_PSNS {
            return None;
        }
        if !wqe.started {
            if common.state() == QpState::Sqd || !self.can_start(common, wqe) {
                self.check_drained(common);
                return None;
            }
            if !self.start(common, counters, mem) {
                return None;
            }
        }
        self.send_packet(common, counters, now, mem, buf)
    }

    /// The next deadline: the transport timer or the end of an RNR wait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.retrans_at, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A deadline passed: an RNR wait ends (sending resumes from the
    /// NAK'd PSN), or the transport timer fired (retransmit from the oldest
    /// unacknowledged PSN, or RETRY_EXC_ERR when the retries are spent).
    pub fn handle_timeout(&mut self, common: &mut QpCommon, counters: &mut Counters, now: Instant) {
        if self.rnr_until.is_some_and(|t| t <= now) {
            self.rnr_until = None;
        }
        if self.retrans_at.is_some_and(|t| t <= now) {
            self.retrans_at = None;
            let live = matches!(common.state(), QpState::Rts | QpState::Sqd);
            if live && self.una != self.high && self.rnr_until.is_none() {
                // A timeout always retries, even to the PSN of a
                // retransmission in progress: that one was lost too.
                self.rewound_to = None;
                self.retry_from(common, counters, self.una);
            }
        }
    }

    /// Completes every queued and outstanding request with WR_FLUSH_ERR
    /// (IBTA 10.3.1: in ERR all work requests are flushed) and stops the
    /// timers.
    pub fn flush(&mut self, common: &mut QpCommon) {
        while let Some(w) = self.sq.pop_front() {
            complete(common, &w, WcStatus::WrFlushErr);
        }
        self.next = 0;
        self.next_pkt = 0;
        self.rd_atomic = 0;
        self.retrans_at = None;
        self.rnr_until = None;
        self.rewound_to = None;
        self.una = self.psn;
        self.high = self.psn;
    }

    // ---- sending ----

    /// Whether the request at `next` may start now: a fenced request waits
    /// for every earlier READ and atomic to complete (IBTA 10.8.3.3), and
    /// at most `max_rd_atomic` READs and atomics are outstanding (IBTA
    /// 9.5, 10.2.3).
    fn can_start(&self, common: &QpCommon, wqe: &SendWqe) -> bool {
        if wqe.wr.fence && self.rd_atomic > 0 {
            return false;
        }
        if wqe.wr.op.is_read_or_atomic() {
            let max = common.config.attrs().max_rd_atomic.unwrap_or(1).max(1);
            if self.rd_atomic >= u32::from(max) {
                return false;
            }
        }
        true
    }

    /// Gives the request at `next` its PSNs after checking its local
    /// memory once; `false` if that check failed (the request then waits
    /// to complete with LOC_PROT_ERR).
    fn start(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        mem: &mut dyn MemoryAccess,
    ) -> bool {
        let mtu = common.mtu();
        let pd = common.init.pd;
        let psn = self.psn;
        let wqe = &mut self.sq[self.next];
        let needed = if wqe.wr.op.is_read_or_atomic() {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        if check_sges(&wqe.wr.data, mem, pd, needed).is_err() {
            wqe.error = Some(WcStatus::LocProtErr);
            self.complete_errors(common);
            return false;
        }
        wqe.start(psn, mtu);
        if wqe.wr.op.is_read_or_atomic() {
            wqe.rd_atomic = true;
            self.rd_atomic += 1;
        }
        if matches!(
            wqe.wr.op,
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }
        ) {
            counters.inc(Counter::RdmaSends);
        }
        true
    }

    /// Builds and accounts the packet at the send position.
    fn send_packet(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        mem: &mut dyn MemoryAccess,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let rc = common.qp_type() == QpType::Rc;
        let attrs = common.config.attrs();
        let ctx = PacketCtx {
            qp_type: common.qp_type(),
            src_qpn: common.qpn,
            pkey: common.pkey,
            dest_qpn: attrs.dest_qpn.unwrap_or(0),
            qkey: attrs.qkey.unwrap_or(0),
        };
        let pd = common.init.pd;
        let k = self.next_pkt;
        let wqe = &self.sq[self.next];
        let single = wqe.wr.op.is_read_or_atomic();
        let last = single || k + 1 >= packets_for(wqe.len, wqe.mtu);
        let window_edge = self.una.distance_to(self.psn) + 1 >= MAX_UNACKED_PSNS;
        let ack_req = last || window_edge || self.since_ack_req + 1 >= ACK_REQ_INTERVAL;
        let (repr, offset, len) = packet_repr(&ctx, wqe, k, ack_req);
        let data = &wqe.wr.data;
        let written = emit_with(&repr, buf, |dst| {
            if len == 0 {
                Ok(())
            } else {
                gather(data, offset, dst, mem, pd)
            }
        });
        let total = match written {
            Ok(n) => n,
            Err(BuildError::Mem(_)) => {
                self.sq[self.next].error = Some(WcStatus::LocProtErr);
                self.complete_errors(common);
                return None;
            }
            Err(BuildError::Wire(_)) => {
                counters.inc(Counter::SendErr);
                return None;
            }
        };
        let dest = match wqe.wr.ud {
            Some(ud) if common.qp_type().is_datagram() => ud.av,
            _ => common.config.attrs().av.unwrap_or_default(),
        };
        let after = if single {
            wqe.last_psn.next()
        } else {
            wqe.first_psn.add(k + 1)
        };
        self.since_ack_req = if ack_req { 0 } else { self.since_ack_req + 1 };
        self.psn = after;
        if last {
            self.next += 1;
            self.next_pkt = 0;
        } else {
            self.next_pkt += 1;
        }
        if rc {
            if self.una.distance_to(after) > self.una.distance_to(self.high) {
                self.high = after;
            }
            if self.retrans_at.is_none() {
                self.retrans_at = self.ack_deadline(common, now);
            }
        } else {
            // UC, UD, GSI: nothing is acknowledged; the request completes
            // once its last packet is handed over.
            self.una = after;
            self.high = after;
            if last {
                if let Some(w) = self.pop_front() {
                    complete(common, &w, WcStatus::Success);
                }
                self.check_drained(common);
            }
        }
        Some(Transmit {
            len: total,
            dest,
            src_qpn: common.qpn,
        })
    }

    // ---- shared with the completer ----

    /// When the transport timer fires if armed at `now`: the nominal
    /// interval, doubled for each retry spent since the last progress, at
    /// most [`ACK_TIMEOUT_BACKOFF_MAX`] times it.
    pub(super) fn ack_deadline(&self, common: &QpCommon, now: Instant) -> Option<Instant> {
        let a = common.config.attrs();
        let t = a.timeout.and_then(local_ack_timeout)?;
        let spent = a.retry_cnt.unwrap_or(0).saturating_sub(self.retry_left);
        let factor = (1u32 << spent.min(7)).min(ACK_TIMEOUT_BACKOFF_MAX);
        Some(now.saturating_add(t.saturating_mul(factor)))
    }

    pub(super) fn reset_retries(&mut self, common: &QpCommon) {
        let a = common.config.attrs();
        self.retry_left = a.retry_cnt.unwrap_or(0);
        self.rnr_left = a.rnr_retry.unwrap_or(0);
    }

    /// Forward progress at `now`: both retry counters start over, and the
    /// transport timer restarts if anything is still outstanding.
    pub(super) fn progress(&mut self, common: &QpCommon, now: Instant) {
        self.reset_retries(common);
        self.rewound_to = None;
        self.retrans_at = if self.una != self.high && self.rnr_until.is_none() {
            self.ack_deadline(common, now)
        } else {
            None
        };
    }

    /// Starts a retransmission from `to`, spending one retry; when none is
    /// left, the oldest request completes with RETRY_EXC_ERR and the QP
    /// goes to ERR. A retransmission to the PSN already being retried
    /// (without progress since) is not started twice.
    pub(super) fn retry_from(&mut self, common: &mut QpCommon, counters: &mut Counters, to: Psn) {
        if self.rewound_to == Some(to) {
            return;
        }
        if self.retry_left == 0 {
            counters.inc(Counter::RetryExceededErr);
            self.fail_front(common, WcStatus::RetryExcErr);
            return;
        }
        self.retry_left -= 1;
        counters.inc(Counter::CompleterRetryErr);
        self.rewind(to);
        self.rewound_to = Some(to);
    }

    /// Waits `wait` after an RNR NAK, then resends from the oldest
    /// unacknowledged PSN; RNR_RETRY_EXC_ERR when the RNR retries are spent
    /// (`rnr_retry` 7: without end).
    pub(super) fn rnr_retry(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        until: Instant,
    ) {
        let forever = common.config.attrs().rnr_retry == Some(RNR_RETRY_FOREVER);
        if !forever {
            if self.rnr_left == 0 {
                counters.inc(Counter::RetryRnrExceededErr);
                self.fail_front(common, WcStatus::RnrRetryExcErr);
                return;
            }
            self.rnr_left -= 1;
        }
        self.rnr_until = Some(until);
        self.retrans_at = None;
        self.rewind(self.una);
        // IBTA 9.7.5.2.8: after the RNR wait the requester resends from
        // the NAK'd PSN. The packets sent after it were in flight: the
        // responder drops them and may answer with a NAK PSN sequence
        // error for the same PSN (kernel rxe does). That restates this
        // rewind; it must not cost a retry, or a receiver that stays empty
        // for a few RNR rounds ends the QP with RETRY_EXC_ERR.
        self.rewound_to = Some(self.una);
    }

    /// Moves the send position back (or forward) to `to`, which lies in a
    /// started request or is the first PSN of the first request not started.
    pub(super) fn rewind(&mut self, to: Psn) {
        self.psn = to;
        self.next_pkt = 0;
        for (i, w) in self.sq.iter().enumerate() {
            if !w.started {
                self.next = i;
                return;
            }
            if w.holds(to) {
                self.next = i;
                self.next_pkt = w.first_psn.distance_to(to);
                return;
            }
        }
        self.next = self.sq.len();
    }

    /// After responses moved `una`: a send position behind it jumps to it.
    pub(super) fn fix_position(&mut self) {
        if self.psn.is_before(self.una) {
            self.rewind(self.una);
        }
    }

    /// Removes the oldest request, keeping `next` on the same request.
    pub(super) fn pop_front(&mut self) -> Option<SendWqe> {
        let w = self.sq.pop_front()?;
        self.next = self.next.saturating_sub(1);
        if w.rd_atomic {
            self.rd_atomic = self.rd_atomic.saturating_sub(1);
        }
        Some(w)
    }

    /// The oldest request completes with `status` and the QP goes to ERR;
    /// the endpoint then flushes the rest.
    pub(super) fn fail_front(&mut self, common: &mut QpCommon, status: WcStatus) {
        if let Some(w) = self.pop_front() {
            complete(common, &w, status);
        }
        self.retrans_at = None;
        self.rnr_until = None;
        common.fatal();
    }

    /// A request that failed locally completes once it is the oldest.
    pub(super) fn complete_errors(&mut self, common: &mut QpCommon) {
        if let Some(status) = self.sq.front().and_then(|w| w.error) {
            self.fail_front(common, status);
        }
    }

    /// In SQD with nothing started and not completed: raise SQ_DRAINED
    /// once, if the consumer asked for it (IBTA 10.3.1, 11.6.3).
    pub(super) fn check_drained(&mut self, common: &mut QpCommon) {
        if common.state() != QpState::Sqd || self.sqd_notified {
            return;
        }
        if self.sq.iter().any(|w| w.started) {
            return;
        }
        self.sqd_notified = true;
        if common.config.attrs().en_sqd_async_notify == Some(true) {
            common.event(AsyncEvent::SqDrained { qpn: common.qpn });
        }
    }
}

/// Adds the completion of `w` with `status`: always for an error, for a
/// success only if it was signaled or the QP signals all (IBTA 10.7.3.1,
/// as quoted in kernel rxe: an error completion is always generated).
pub(super) fn complete(common: &mut QpCommon, w: &SendWqe, status: WcStatus) {
    if status == WcStatus::Success && !w.wr.signaled && !common.init.sq_sig_all {
        return;
    }
    let mut wc = WorkCompletion::new(
        w.wr.wr_id,
        status,
        w.wr.op.wc_opcode(),
        common.qpn,
        WorkQueue::Send,
    );
    wc.byte_len = w.len;
    common.complete(wc);
}

/// The post-time checks of `ibv_post_send` (libibverbs; IBTA 10.8, 11.4.1.1):
/// returns the message length.
fn validate(common: &QpCommon, wr: &SendWr) -> Result<u32, PostError> {
    let qp_type = common.qp_type();
    let op = wr.op;
    let allowed = match qp_type {
        QpType::Rc => true,
        QpType::Uc => matches!(
            op,
            SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::RdmaWrite { .. }
                | SendOp::RdmaWriteWithImm { .. }
        ),
        QpType::Ud | QpType::Gsi => matches!(op, SendOp::Send | SendOp::SendWithImm { .. }),
    };
    if !allowed {
        return Err(PostError::OpNotSupported);
    }
    if qp_type.is_datagram() && wr.ud.is_none() {
        return Err(PostError::MissingUdDest);
    }
    match &wr.data {
        SendData::Sges(s) if s.len() > common.init.max_send_sge as usize => {
            return Err(PostError::TooManySges {
                given: s.len(),
                max: common.init.max_send_sge,
            })
        }
        SendData::Inline(b) if b.len() > common.init.max_inline_data as usize => {
            return Err(PostError::InlineTooLarge {
                given: b.len(),
                max: common.init.max_inline_data,
            })
        }
        SendData::Inline(_) if op.is_atomic() => return Err(PostError::BadAtomic),
        // READ data lands in registered memory: inline makes no sense.
        SendData::Inline(_) if op.is_read_or_atomic() => return Err(PostError::OpNotSupported),
        _ => {}
    }
    if let SendOp::CmpSwap { remote_addr, .. } | SendOp::FetchAdd { remote_addr, .. } = op {
        let one_8_byte_sge =
            matches!(&wr.data, SendData::Sges(s) if s.len() == 1 && s[0].length == 8);
        if !one_8_byte_sge || remote_addr % 8 != 0 {
            return Err(PostError::BadAtomic);
        }
    }
    let len = wr.data.len();
    if len > MAX_MESSAGE_LEN {
        return Err(PostError::MessageTooLarge {
            len,
            max: MAX_MESSAGE_LEN,
        });
    }
    if qp_type.is_datagram() && len > u64::from(common.mtu()) {
        return Err(PostError::MessageTooLarge {
            len,
            max: u64::from(common.mtu()),
        });
    }
    Ok(len as u32)
}

/// A test rig: one QP's requester driven the way the endpoint drives it,
/// with registered memory and a simulated clock. Shared with the
/// completer's tests.
#[cfg(test)]
pub(super) mod rig {
    use super::*;
    use crate::transport::memory::{Key, VecMemory};
    use crate::transport::qp::QpInit;
    use crate::transport::qp::{modify, QpCaps, QpConfig};
    use crate::transport::qp::{AddressVector, PathMtu, QpAttr};
    use crate::transport::wr::{Sge, UdDest};
    use crate::wire::{
        AethRepr, AtomicAckEthRepr, BthRepr, ExtReprs, Opcode, Syndrome, TransportPacket,
        TransportRepr,
    };
    use core::time::Duration;

    /// Virtual address of the source buffer (bytes `i as u8`) and of the
    /// LOCAL_WRITE destination buffer.
    pub const SRC_VA: u64 = 0x10_0000;
    pub const DST_VA: u64 = 0x20_0000;
    pub const BUF_LEN: usize = 1 << 18;
    pub const DEST_QPN: u32 = 0x22;

    /// RTS attributes of an RC QP.
    #[derive(Debug, Clone, Copy)]
    pub struct Rts {
        pub sq_psn: u32,
        pub mtu: PathMtu,
        pub timeout: u8,
        pub retry_cnt: u8,
        pub rnr_retry: u8,
        pub max_rd_atomic: u8,
    }

    impl Default for Rts {
        fn default() -> Rts {
            Rts {
                sq_psn: 100,
                mtu: PathMtu::Mtu256,
                timeout: 14,
                retry_cnt: 3,
                rnr_retry: 2,
                max_rd_atomic: 4,
            }
        }
    }

    pub struct Rig {
        pub req: Requester,
        pub common: QpCommon,
        pub counters: Counters,
        pub mem: VecMemory,
        pub now: Instant,
        pub src: Key,
        pub dst: Key,
        pub wcs: Vec<WorkCompletion>,
        pub events: Vec<AsyncEvent>,
    }

    fn step(c: &QpConfig, attr: QpAttr) -> QpConfig {
        modify(c, &attr, attr.mask()).expect("transition")
    }

    impl Rig {
        pub fn new(qp_type: QpType, rts: Rts) -> Rig {
            Rig::with_init(QpInit::new(qp_type, 1), rts)
        }

        pub fn rc() -> Rig {
            Rig::new(QpType::Rc, Rts::default())
        }

        pub fn with_init(init: QpInit, rts: Rts) -> Rig {
            let qp_type = init.qp_type;
            let caps = QpCaps::default();
            let mut config = if qp_type == QpType::Gsi {
                QpConfig::new_gsi(1, caps).unwrap()
            } else {
                QpConfig::new(qp_type, caps)
            };
            let datagram = qp_type.is_datagram();
            config = step(
                &config,
                QpAttr {
                    qp_state: Some(QpState::Init),
                    pkey_index: Some(0),
                    port_num: (qp_type != QpType::Gsi).then_some(1),
                    access_flags: (!datagram).then_some(AccessFlags::all()),
                    qkey: match qp_type {
                        QpType::Ud => Some(0x1111_1111),
                        QpType::Gsi => Some(crate::transport::GSI_QKEY),
                        _ => None,
                    },
                    ..Default::default()
                },
            );
            config = step(
                &config,
                QpAttr {
                    qp_state: Some(QpState::Rtr),
                    av: (!datagram).then(AddressVector::default),
                    path_mtu: (!datagram).then_some(rts.mtu),
                    dest_qpn: (!datagram).then_some(DEST_QPN),
                    rq_psn: (!datagram).then_some(Psn::new(7)),
                    max_dest_rd_atomic: (qp_type == QpType::Rc).then_some(4),
                    min_rnr_timer: (qp_type == QpType::Rc).then_some(12),
                    ..Default::default()
                },
            );
            let mut common = QpCommon::new(0x11, init, config, 0xffff);
            let mut req = Requester::new();
            let rc = qp_type == QpType::Rc;
            common.config = step(
                &common.config,
                QpAttr {
                    qp_state: Some(QpState::Rts),
                    sq_psn: Some(Psn::new(rts.sq_psn)),
                    timeout: rc.then_some(rts.timeout),
                    retry_cnt: rc.then_some(rts.retry_cnt),
                    rnr_retry: rc.then_some(rts.rnr_retry),
                    max_rd_atomic: rc.then_some(rts.max_rd_atomic),
                    ..Default::default()
                },
            );
            req.on_modify(&mut common, QpState::Rtr);
            let mut mem = VecMemory::new();
            let bytes: Vec<u8> = (0..BUF_LEN).map(|i| (i % 251) as u8).collect();
            let src = mem
                .register_bytes(1, SRC_VA, bytes, AccessFlags::empty())
                .unwrap();
            let dst = mem
                .register(1, DST_VA, BUF_LEN, AccessFlags::LOCAL_WRITE)
                .unwrap();
            Rig {
                req,
                common,
                counters: Counters::new(),
                mem,
                now: Instant::ZERO,
                src,
                dst,
                wcs: Vec::new(),
                events: Vec::new(),
            }
        }

        pub fn mtu(&self) -> usize {
            self.common.mtu() as usize
        }

        /// The source bytes `off..off + len`.
        pub fn src_bytes(&self, off: usize, len: usize) -> Vec<u8> {
            self.mem.bytes(self.src).unwrap()[off..off + len].to_vec()
        }

        pub fn dst_bytes(&self, off: usize, len: usize) -> Vec<u8> {
            self.mem.bytes(self.dst).unwrap()[off..off + len].to_vec()
        }

        pub fn src_sge(&self, off: u64, len: u32) -> Sge {
            Sge {
                addr: SRC_VA + off,
                length: len,
                lkey: self.src.raw(),
            }
        }

        pub fn dst_sge(&self, off: u64, len: u32) -> Sge {
            Sge {
                addr: DST_VA + off,
                length: len,
                lkey: self.dst.raw(),
            }
        }

        /// A signaled work request `wr_id` of `op` over `sges`.
        pub fn wr(&self, wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWr {
            let ud = self.common.qp_type().is_datagram().then_some(UdDest {
                av: AddressVector {
                    hop_limit: 9,
                    ..Default::default()
                },
                remote_qpn: 0x33,
                remote_qkey: 0x4444,
            });
            SendWr {
                wr_id,
                op,
                data: SendData::Sges(sges),
                signaled: true,
                fence: false,
                solicited: false,
                ud,
            }
        }

        pub fn post(&mut self, wr: SendWr) -> Result<(), PostError> {
            let r = self.req.post_send(&self.common, wr);
            self.after();
            r
        }

        /// What the endpoint does after every call.
        pub fn after(&mut self) {
            if self.common.take_flush() {
                self.req.flush(&mut self.common);
            }
            while let Some(wc) = self.common.pop_completion() {
                self.wcs.push(wc);
            }
            while let Some(ev) = self.common.pop_event() {
                self.events.push(ev);
            }
        }

        /// The next packet the requester sends, as bytes.
        pub fn tx(&mut self) -> Option<Vec<u8>> {
            let mut buf = vec![0u8; 4096 + 128];
            let t = self.req.poll_transmit(
                &mut self.common,
                &mut self.counters,
                self.now,
                &mut self.mem,
                &mut buf,
            );
            self.after();
            let t = t?;
            assert_eq!(t.src_qpn, 0x11);
            buf.truncate(t.len);
            Some(buf)
        }

        /// Every packet the requester sends now.
        pub fn drain(&mut self) -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            while let Some(p) = self.tx() {
                out.push(p);
                assert!(out.len() < 100_000, "requester never stops");
            }
            out
        }

        pub fn rx(&mut self, bytes: &[u8]) {
            let pkt = TransportRepr::parse(bytes).expect("a response that parses");
            self.req.handle_response(
                &mut self.common,
                &mut self.counters,
                self.now,
                &pkt,
                &mut self.mem,
            );
            self.after();
        }

        /// Moves the clock to `t`, firing the timers due.
        pub fn advance_to(&mut self, t: Instant) {
            self.now = t;
            if self.req.poll_timeout().is_some_and(|d| d <= t) {
                self.req
                    .handle_timeout(&mut self.common, &mut self.counters, t);
                self.after();
            }
        }

        pub fn advance(&mut self, d: Duration) {
            self.advance_to(self.now.saturating_add(d));
        }

        /// Fires the next timer, moving the clock to it.
        pub fn fire(&mut self) -> Instant {
            let t = self.req.poll_timeout().expect("a timer is running");
            self.advance_to(t);
            t
        }

        pub fn take_wcs(&mut self) -> Vec<(u64, WcStatus)> {
            self.wcs.drain(..).map(|w| (w.wr_id, w.status)).collect()
        }
    }

    pub fn parse(bytes: &[u8]) -> TransportPacket<'_> {
        TransportRepr::parse(bytes).expect("a packet that parses")
    }

    pub fn psn_of(bytes: &[u8]) -> u32 {
        parse(bytes).repr.bth.psn
    }

    fn response(opcode: Opcode, psn: u32, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: false,
            psn,
        };
        let t = TransportRepr::new(bth, ext, payload.len());
        let mut buf = vec![0; t.buffer_len().unwrap()];
        t.emit(&mut buf, payload).unwrap();
        buf
    }

    fn aeth(syndrome: Syndrome) -> ExtReprs {
        ExtReprs {
            aeth: Some(AethRepr { syndrome, msn: 0 }),
            ..Default::default()
        }
    }

    /// An RC Acknowledge with `syndrome` for `psn`.
    pub fn ack_with(psn: u32, syndrome: Syndrome) -> Vec<u8> {
        response(Opcode::RC_ACKNOWLEDGE, psn & 0xff_ffff, aeth(syndrome), &[])
    }

    pub fn ack(psn: u32) -> Vec<u8> {
        ack_with(psn, Syndrome::ACK_CREDITS_INVALID)
    }

    /// A READ response packet of `opcode` (FIRST/MIDDLE/LAST/ONLY).
    pub fn read_resp(opcode: Opcode, psn: u32, payload: &[u8]) -> Vec<u8> {
        let ext = if opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            ExtReprs::default()
        } else {
            aeth(Syndrome::ACK_CREDITS_INVALID)
        };
        response(opcode, psn & 0xff_ffff, ext, payload)
    }

    pub fn atomic_ack(psn: u32, orig: u64) -> Vec<u8> {
        let mut ext = aeth(Syndrome::ACK_CREDITS_INVALID);
        ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: orig });
        response(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn & 0xff_ffff, ext, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::rig::*;
    use super::*;
    use crate::transport::qp::modify;
    use crate::transport::qp::QpInit;
    use crate::transport::qp::{PathMtu, QpAttr};
    use crate::wire::{Opcode, Position, Syndrome};
    use core::time::Duration;

    const M: usize = 256;
    const SIZES: [usize; 6] = [0, 1, M - 1, M, M + 1, 3 * M];

    fn ops() -> [SendOp; 5] {
        [
            SendOp::Send,
            SendOp::SendWithImm { imm: 0xdead_beef },
            SendOp::SendWithInv { rkey: 0x1234 },
            SendOp::RdmaWrite {
                remote_addr: 0x9000,
                rkey: 0x77,
            },
            SendOp::RdmaWriteWithImm {
                remote_addr: 0x9000,
                rkey: 0x77,
                imm: 5,
            },
        ]
    }

    /// SEND and WRITE, every flavour and size: opcodes, headers, PSNs,
    /// AckReq, SE and payload bytes, then completion by one ACK.
    #[test]
    fn segmentation_of_sends_and_writes() {
        for op in ops() {
            for len in SIZES {
                for solicited in [false, true] {
                    let mut r = Rig::rc();
                    let mut wr = r.wr(1, op, vec![r.src_sge(3, len as u32)]);
                    wr.solicited = solicited;
                    r.post(wr).unwrap();
                    let pkts = r.drain();
                    let n = len.div_ceil(M).max(1);
                    assert_eq!(pkts.len(), n, "{op:?} {len}");
                    let mut payload = Vec::new();
                    for (i, b) in pkts.iter().enumerate() {
                        let p = parse(b);
                        let (first, last) = (i == 0, i + 1 == n);
                        assert_eq!(p.repr.bth.psn, 100 + i as u32);
                        assert_eq!(p.repr.bth.dest_qp, DEST_QPN);
                        assert_eq!(p.repr.bth.pkey, 0xffff);
                        assert_eq!(p.repr.bth.ack_req, last, "AckReq on the last only");
                        let want_pos = match (first, last) {
                            (true, true) => Position::Only,
                            (true, false) => Position::First,
                            (false, false) => Position::Middle,
                            (false, true) => Position::Last,
                        };
                        assert_eq!(p.info.position, Some(want_pos), "{op:?} {len} #{i}");
                        let is_write = matches!(
                            op,
                            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. }
                        );
                        assert_eq!(p.repr.ext.reth.is_some(), is_write && first);
                        if let Some(reth) = p.repr.ext.reth {
                            assert_eq!(
                                (reth.va, reth.rkey, reth.dma_len),
                                (0x9000, 0x77, len as u32)
                            );
                        }
                        let imm = matches!(
                            op,
                            SendOp::SendWithImm { .. } | SendOp::RdmaWriteWithImm { .. }
                        );
                        assert_eq!(p.repr.ext.immdt.is_some(), imm && last);
                        assert_eq!(p.info.immediate, imm && last);
                        assert_eq!(
                            p.repr.ext.ieth.map(|h| h.rkey),
                            (last && matches!(op, SendOp::SendWithInv { .. })).then_some(0x1234)
                        );
                        let se_op = !matches!(op, SendOp::RdmaWrite { .. });
                        assert_eq!(p.repr.bth.solicited, solicited && se_op && last);
                        assert_eq!(p.payload.len(), if last { len - (n - 1) * M } else { M });
                        payload.extend_from_slice(p.payload);
                        // The packet is exactly what the wire engine emits.
                        let mut again = vec![0u8; b.len()];
                        p.repr.emit(&mut again, p.payload).unwrap();
                        assert_eq!(&again, b);
                    }
                    assert_eq!(payload, r.src_bytes(3, len));
                    assert!(r.take_wcs().is_empty());
                    r.rx(&ack(100 + n as u32 - 1));
                    assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
                    assert_eq!(r.req.poll_timeout(), None, "timer stops when all is acked");
                }
            }
        }
    }

    #[test]
    fn gather_across_sges_and_inline() {
        let mut r = Rig::rc();
        let sges = vec![r.src_sge(0, 100), r.src_sge(1000, 0), r.src_sge(500, 300)];
        r.post(r.wr(1, SendOp::Send, sges)).unwrap();
        let mut wr = r.wr(2, SendOp::Send, vec![]);
        wr.data = SendData::Inline(vec![9; 200]);
        r.post(wr).unwrap();
        let pkts = r.drain();
        let mut got = Vec::new();
        for b in &pkts[..2] {
            got.extend_from_slice(parse(b).payload);
        }
        let mut want = r.src_bytes(0, 100);
        want.extend(r.src_bytes(500, 300));
        assert_eq!(got, want);
        assert_eq!(parse(&pkts[2]).payload, &[9; 200][..]);
        assert_eq!(psn_of(&pkts[2]), 102);
    }

    #[test]
    fn read_and_atomic_requests() {
        for len in SIZES {
            let mut r = Rig::rc();
            let op = SendOp::RdmaRead {
                remote_addr: 0xa000,
                rkey: 0x55,
            };
            r.post(r.wr(1, op, vec![r.dst_sge(0, len as u32)])).unwrap();
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            let pkts = r.drain();
            assert_eq!(pkts.len(), 2);
            let p = parse(&pkts[0]);
            assert_eq!(p.repr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
            assert!(p.repr.bth.ack_req);
            let reth = p.repr.ext.reth.unwrap();
            assert_eq!(
                (reth.va, reth.rkey, reth.dma_len),
                (0xa000, 0x55, len as u32)
            );
            assert!(p.payload.is_empty());
            // The READ takes one PSN per response packet.
            assert_eq!(psn_of(&pkts[1]), 100 + len.div_ceil(M).max(1) as u32);
        }
        let mut r = Rig::rc();
        let cs = SendOp::CmpSwap {
            remote_addr: 0x10,
            rkey: 9,
            compare: 1,
            swap: 2,
        };
        let fa = SendOp::FetchAdd {
            remote_addr: 0x18,
            rkey: 9,
            add: 3,
        };
        r.post(r.wr(1, cs, vec![r.dst_sge(0, 8)])).unwrap();
        r.post(r.wr(2, fa, vec![r.dst_sge(8, 8)])).unwrap();
        let pkts = r.drain();
        let (a, b) = (parse(&pkts[0]), parse(&pkts[1]));
        assert_eq!(a.repr.bth.opcode, Opcode::RC_COMPARE_SWAP);
        let e = a.repr.ext.atomic_eth.unwrap();
        assert_eq!((e.va, e.rkey, e.swap_add, e.compare), (0x10, 9, 2, 1));
        assert_eq!(b.repr.bth.opcode, Opcode::RC_FETCH_ADD);
        let e = b.repr.ext.atomic_eth.unwrap();
        assert_eq!((e.va, e.swap_add, e.compare), (0x18, 3, 0));
        assert_eq!((a.repr.bth.psn, b.repr.bth.psn), (100, 101));
        assert!(a.repr.bth.ack_req && b.repr.bth.ack_req);
    }

    #[test]
    fn psn_wraps_at_2_pow_24() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                sq_psn: 0xff_fffe,
                ..Rts::default()
            },
        );
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 3 * M as u32)]))
            .unwrap();
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        };
        r.post(r.wr(2, read, vec![r.dst_sge(0, 2 * M as u32)]))
            .unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 1, 3]);
        // An ACK after the wrap completes the SEND.
        r.rx(&ack(0));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        // A stale ACK from before the wrap is a duplicate.
        r.rx(&ack(0xff_ffff));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 1);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 1, &[1; M]));
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, &[2; M]));
        r.rx(&ack(3));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
    }

    #[test]
    fn ud_and_gsi_sends() {
        for qp_type in [QpType::Ud, QpType::Gsi] {
            let mut r = Rig::new(qp_type, Rts::default());
            let mtu = r.mtu();
            assert_eq!(mtu, 4096, "UD uses the port MTU");
            let mut wr = r.wr(1, SendOp::SendWithImm { imm: 7 }, vec![r.src_sge(0, 100)]);
            wr.solicited = true;
            r.post(wr).unwrap();
            // A controlled Q_Key (high bit) means the QP's own.
            let mut wr = r.wr(2, SendOp::Send, vec![r.src_sge(0, mtu as u32)]);
            wr.ud.as_mut().unwrap().remote_qkey = 0x8000_0000;
            r.post(wr).unwrap();
            let mut buf = vec![0u8; 4200];
            let t = r
                .req
                .poll_transmit(&mut r.common, &mut r.counters, r.now, &mut r.mem, &mut buf)
                .unwrap();
            assert_eq!(t.dest.hop_limit, 9, "the work request's address");
            r.after();
            let p = parse(&buf[..t.len]);
            assert_eq!(p.repr.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
            assert_eq!(p.repr.bth.dest_qp, 0x33);
            assert!(p.repr.bth.solicited && !p.repr.bth.ack_req);
            let deth = p.repr.ext.deth.unwrap();
            assert_eq!((deth.qkey, deth.src_qp), (0x4444, 0x11));
            // Completed as soon as it was handed over.
            assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
            let b = r.tx().unwrap();
            let p = parse(&b);
            assert_eq!(p.repr.bth.opcode, Opcode::UD_SEND_ONLY);
            let own = if qp_type == QpType::Ud {
                0x1111_1111
            } else {
                crate::transport::GSI_QKEY
            };
            assert_eq!(p.repr.ext.deth.unwrap().qkey, own);
            assert_eq!(p.payload.len(), mtu);
            assert_eq!(r.take_wcs(), [(2, WcStatus::Success)]);
            assert_eq!(r.req.poll_timeout(), None, "no timers without ACKs");
        }
    }

    #[test]
    fn uc_completes_after_its_last_packet() {
        let mut r = Rig::new(QpType::Uc, Rts::default());
        let write = SendOp::RdmaWriteWithImm {
            remote_addr: 0,
            rkey: 1,
            imm: 2,
        };
        r.post(r.wr(1, write, vec![r.src_sge(0, 2 * M as u32 + 1)]))
            .unwrap();
        let a = r.tx().unwrap();
        assert_eq!(parse(&a).repr.bth.opcode, Opcode::UC_RDMA_WRITE_FIRST);
        assert!(!parse(&a).repr.bth.ack_req);
        assert!(r.take_wcs().is_empty());
        let rest = r.drain();
        let ops: Vec<_> = rest.iter().map(|b| parse(b).repr.bth.opcode).collect();
        assert_eq!(
            ops,
            [
                Opcode::UC_RDMA_WRITE_MIDDLE,
                Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE
            ]
        );
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn post_errors() {
        let mut r = Rig::rc();
        let send = |r: &Rig, sges| r.wr(1, SendOp::Send, sges);
        // Queue depth counts requests not yet completed.
        let mut small = Rig::with_init(
            QpInit {
                max_send_wr: 2,
                ..QpInit::new(QpType::Rc, 1)
            },
            Rts::default(),
        );
        small.post(send(&small, vec![])).unwrap();
        small.post(send(&small, vec![])).unwrap();
        assert_eq!(
            small.post(send(&small, vec![])),
            Err(PostError::QueueFull { depth: 2 })
        );
        let five = vec![r.src_sge(0, 1); 5];
        assert_eq!(
            r.post(send(&r, five)),
            Err(PostError::TooManySges { given: 5, max: 4 })
        );
        let mut wr = send(&r, vec![]);
        wr.data = SendData::Inline(vec![0; 257]);
        assert_eq!(
            r.post(wr),
            Err(PostError::InlineTooLarge {
                given: 257,
                max: 256
            })
        );
        // Atomics: one 8-byte SGE, 8-byte aligned address.
        let fa = |addr| SendOp::FetchAdd {
            remote_addr: addr,
            rkey: 1,
            add: 1,
        };
        for (op, sges) in [
            (fa(4), vec![r.dst_sge(0, 8)]),
            (fa(8), vec![r.dst_sge(0, 4)]),
            (fa(8), vec![r.dst_sge(0, 4), r.dst_sge(4, 4)]),
        ] {
            assert_eq!(r.post(r.wr(1, op, sges)), Err(PostError::BadAtomic));
        }
        // 2^31 bytes at most.
        let big = vec![r.src_sge(0, u32::MAX), r.src_sge(0, 1)];
        assert!(matches!(
            r.post(send(&r, big)),
            Err(PostError::MessageTooLarge {
                max: MAX_MESSAGE_LEN,
                ..
            })
        ));
        assert_eq!(r.req.sq.len(), 0, "nothing refused was queued");

        // UC: no READ, no atomics, no invalidate.
        let uc = Rig::new(QpType::Uc, Rts::default());
        for op in [
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            fa(0),
            SendOp::SendWithInv { rkey: 0 },
        ] {
            assert_eq!(
                uc.req
                    .clone_check(&uc.common, uc.wr(1, op, vec![uc.dst_sge(0, 8)])),
                Err(PostError::OpNotSupported)
            );
        }
        // UD: SENDs only, a destination, at most one MTU.
        let mut ud = Rig::new(QpType::Ud, Rts::default());
        let w = ud.wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        );
        assert_eq!(ud.post(w), Err(PostError::OpNotSupported));
        let mut w = ud.wr(1, SendOp::Send, vec![]);
        w.ud = None;
        assert_eq!(ud.post(w), Err(PostError::MissingUdDest));
        let w = ud.wr(1, SendOp::Send, vec![ud.src_sge(0, 4097)]);
        assert_eq!(
            ud.post(w),
            Err(PostError::MessageTooLarge {
                len: 4097,
                max: 4096
            })
        );

        // Not before RTS.
        let mut common = r.common.clone();
        common.config = modify(
            &common.config,
            &QpAttr {
                qp_state: Some(QpState::Reset),
                ..Default::default()
            },
            QpAttr {
                qp_state: Some(QpState::Reset),
                ..Default::default()
            }
            .mask(),
        )
        .unwrap();
        assert_eq!(
            Requester::new().post_send(&common, send(&r, vec![])),
            Err(PostError::BadState)
        );
    }

    impl Requester {
        fn clone_check(&self, common: &QpCommon, wr: SendWr) -> Result<u32, PostError> {
            validate(common, &wr)
        }
    }

    #[test]
    fn posts_in_err_are_flushed() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.drain();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        r.common.fatal();
        r.after();
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(r.events, [AsyncEvent::QpFatal { qpn: 0x11 }]);
        let mut wr = r.wr(3, SendOp::Send, vec![]);
        wr.signaled = false;
        r.post(wr).unwrap();
        assert!(r.tx().is_none());
        assert_eq!(
            r.take_wcs(),
            [(3, WcStatus::WrFlushErr)],
            "errors always complete"
        );
    }

    #[test]
    fn bad_lkey_is_a_local_protection_error_in_order() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 10)]))
            .unwrap();
        let mut bad = r.src_sge(0, 10);
        bad.lkey ^= 1;
        r.post(r.wr(2, SendOp::Send, vec![bad])).unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 1);
        // The bad one waits for the one before it.
        assert!(r.take_wcs().is_empty());
        r.rx(&ack(100));
        assert_eq!(
            r.take_wcs(),
            [
                (1, WcStatus::Success),
                (2, WcStatus::LocProtErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(r.common.state(), QpState::Error);
        // Out of bounds of the region, and READ into memory without
        // LOCAL_WRITE, fail the same way.
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(BUF_LEN as u64 - 4, 8)]))
            .unwrap();
        assert!(r.tx().is_none());
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
        let mut r = Rig::rc();
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 0,
        };
        r.post(r.wr(1, read, vec![r.src_sge(0, 8)])).unwrap();
        assert!(r.tx().is_none());
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
    }

    #[test]
    fn unsignaled_successes_are_silent_unless_sq_sig_all() {
        for sig_all in [false, true] {
            let mut r = Rig::with_init(
                QpInit {
                    sq_sig_all: sig_all,
                    ..QpInit::new(QpType::Rc, 1)
                },
                Rts::default(),
            );
            let mut wr = r.wr(1, SendOp::Send, vec![]);
            wr.signaled = false;
            r.post(wr).unwrap();
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            r.drain();
            r.rx(&ack(101));
            let want: &[(u64, WcStatus)] = if sig_all {
                &[(1, WcStatus::Success), (2, WcStatus::Success)]
            } else {
                &[(2, WcStatus::Success)]
            };
            assert_eq!(r.take_wcs(), want);
        }
    }

    /// A cut link: retransmissions at every timeout, from the oldest
    /// unacknowledged PSN, then RETRY_EXC_ERR after exactly `retry_cnt`
    /// retries, in simulated time.
    #[test]
    fn retry_exceeded_after_exactly_retry_cnt_retries() {
        for retry_cnt in [0u8, 1, 3, 7] {
            let mut r = Rig::new(
                QpType::Rc,
                Rts {
                    retry_cnt,
                    timeout: 10,
                    ..Rts::default()
                },
            );
            let t = local_ack_timeout(10).unwrap();
            r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 2 * M as u32)]))
                .unwrap();
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            assert_eq!(r.drain().len(), 3);
            // The first packet is acknowledged; the rest is lost for ever.
            r.rx(&ack(100));
            // The intervals back off: 1, 2, 4, 4, ... times the nominal one.
            let interval = |spent: u32| t * (1u32 << spent).min(ACK_TIMEOUT_BACKOFF_MAX);
            let mut retries = 0;
            let mut due = Instant::ZERO.saturating_add(interval(0));
            loop {
                let at = r.fire();
                assert_eq!(at, due);
                if r.common.state() == QpState::Error {
                    break;
                }
                retries += 1;
                due = due.saturating_add(interval(retries));
                let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
                assert_eq!(psns, [101, 102], "resent from the oldest unacked");
            }
            assert_eq!(retries, u32::from(retry_cnt));
            // retry_cnt 7: 1 + 2 + 4 × 6 = 27 nominal intervals in all.
            let total: u32 = (0..=u32::from(retry_cnt))
                .map(|i| (1u32 << i).min(ACK_TIMEOUT_BACKOFF_MAX))
                .sum();
            assert_eq!(r.now, Instant::ZERO.saturating_add(t * total));
            if retry_cnt == 7 {
                assert_eq!(total, 27);
            }
            assert_eq!(
                r.take_wcs(),
                [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
            );
            assert_eq!(r.counters.get(Counter::RetryExceededErr), 1);
            assert_eq!(
                r.counters.get(Counter::CompleterRetryErr),
                u64::from(retry_cnt)
            );
            assert_eq!(r.req.poll_timeout(), None);
        }
    }

    #[test]
    fn progress_resets_the_retry_count() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                ..Rts::default()
            },
        );
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 3 * M as u32)]))
            .unwrap();
        r.drain();
        for acked in 100..102 {
            r.fire();
            r.drain();
            r.rx(&ack(acked));
        }
        r.fire();
        assert_eq!(r.drain().len(), 1);
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
    }

    /// The backed-off interval returns to the nominal one at progress.
    #[test]
    fn progress_ends_the_timer_backoff() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 7,
                timeout: 10,
                ..Rts::default()
            },
        );
        let t = local_ack_timeout(10).unwrap();
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 3 * M as u32)]))
            .unwrap();
        r.drain();
        let first = r.fire();
        r.drain();
        let second = r.fire();
        r.drain();
        assert_eq!(second, first.saturating_add(t * 2), "one retry spent: 2x");
        let third = r.fire();
        r.drain();
        assert_eq!(third, second.saturating_add(t * 4), "two spent: 4x");
        r.rx(&ack(100));
        let after = r.req.poll_timeout().expect("PSNs 101..102 outstanding");
        assert_eq!(after, r.now.saturating_add(t), "progress: nominal again");
    }

    #[test]
    fn no_timer_with_timeout_zero() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                timeout: 0,
                ..Rts::default()
            },
        );
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.drain();
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn window_bounds_unacknowledged_psns() {
        let mut r = Rig::with_init(
            QpInit {
                max_send_wr: 4096,
                ..QpInit::new(QpType::Rc, 1)
            },
            Rts::default(),
        );
        for i in 0..1000 {
            r.post(r.wr(i, SendOp::Send, vec![])).unwrap();
        }
        let pkts = r.drain();
        assert_eq!(pkts.len(), MAX_UNACKED_PSNS as usize);
        r.rx(&ack(100 + 9));
        assert_eq!(r.drain().len(), 10);
    }

    #[test]
    fn ack_req_within_long_messages() {
        let mut r = Rig::rc();
        let len = (ACK_REQ_INTERVAL as usize * 2 + 5) * M;
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, len as u32)]))
            .unwrap();
        let asks: Vec<usize> = r
            .drain()
            .iter()
            .enumerate()
            .filter(|(_, b)| parse(b).repr.bth.ack_req)
            .map(|(i, _)| i)
            .collect();
        let k = ACK_REQ_INTERVAL as usize;
        assert_eq!(asks, [k - 1, 2 * k - 1, 2 * k + 4]);
    }

    #[test]
    fn max_rd_atomic_and_fence() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                max_rd_atomic: 2,
                ..Rts::default()
            },
        );
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        };
        for i in 0..3 {
            r.post(r.wr(i, read, vec![r.dst_sge(0, 4)])).unwrap();
        }
        let mut fenced = r.wr(3, SendOp::Send, vec![]);
        fenced.fence = true;
        r.post(fenced).unwrap();
        assert_eq!(r.drain().len(), 2, "two READs outstanding at most");
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[1; 4]));
        let third = r.drain();
        assert_eq!(third.len(), 1);
        assert_eq!(psn_of(&third[0]), 102);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 101, &[1; 4]));
        assert!(r.drain().is_empty(), "the fence waits for the last READ");
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 102, &[1; 4]));
        let sent = r.drain();
        assert_eq!(sent.len(), 1);
        assert_eq!(parse(&sent[0]).repr.bth.opcode, Opcode::RC_SEND_ONLY);
    }

    #[test]
    fn sqd_stops_new_requests_and_reports_drained_once() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 2 * M as u32)]))
            .unwrap();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        assert!(r.tx().is_some());
        let sqd = QpAttr {
            qp_state: Some(QpState::Sqd),
            en_sqd_async_notify: Some(true),
            ..Default::default()
        };
        r.common.config = modify(&r.common.config, &sqd, sqd.mask()).unwrap();
        r.req.on_modify(&mut r.common, QpState::Rts);
        r.after();
        // The started request finishes; the next does not start.
        assert_eq!(r.drain().len(), 1);
        assert!(r.events.is_empty());
        r.rx(&ack(101));
        assert_eq!(r.events, [AsyncEvent::SqDrained { qpn: 0x11 }]);
        assert!(r.drain().is_empty());
        r.rx(&ack(101));
        assert_eq!(r.events.len(), 1, "once");
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        };
        r.common.config = modify(&r.common.config, &rts, rts.mask()).unwrap();
        r.req.on_modify(&mut r.common, QpState::Sqd);
        let sent = r.drain();
        assert_eq!(sent.len(), 1);
        assert_eq!(psn_of(&sent[0]), 102);
    }

    #[test]
    fn path_mtu_4096_segments() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                mtu: PathMtu::Mtu4096,
                ..Rts::default()
            },
        );
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(0, 4097)]))
            .unwrap();
        let pkts = r.drain();
        assert_eq!(pkts.len(), 2);
        assert_eq!(parse(&pkts[1]).payload.len(), 1);
        assert!(r.take_wcs().is_empty());
        r.advance(Duration::from_secs(1));
        assert_eq!(r.drain().len(), 2, "timeout resends both");
        let _ = Syndrome::ACK_CREDITS_INVALID;
    }
}
