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
//! How a work request becomes packets lives in `segment.rs`.
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
//! - Early retransmission (`adaptive_timer`) is a second deadline beside
//!   the transport timer: once the QP has seen a loss, a few measured
//!   round trips without progress resend from the oldest unacknowledged
//!   PSN, spending no retry and leaving the transport timer as it was.
//! - Selective retransmission (`recv::reorder`, on unless the endpoint
//!   turns it off): after a NAK PSN Sequence Error the requester resends
//!   the NAK'd packet alone, with AckReq, and goes on with packets never
//!   sent. The answer decides: an acknowledgement past that packet shows a
//!   peer that held what followed; an acknowledgement of exactly that
//!   packet shows a go-back-N peer, and the requester goes back and
//!   resends the rest, and resends all at once after every later loss of
//!   that QP. A NAK for the very next PSN (a second gap reported from held
//!   packets, or a go-back-N peer's answer to the new packets after its ACK
//!   was lost) tells nothing and starts the next such resend. An early
//!   retransmission resends the oldest packet alone in the same way, and
//!   learns nothing from its answer; a transport timeout resends all. Towards a peer that holds, the window is 256 PSNs
//!   instead of 128, so that new packets keep going out while a loss is
//!   repaired. IBTA RC prescribes go-back-N for the responder (9.7.5.1.1);
//!   the requester's choice of what to resend first is its own, and both
//!   halves interoperate with a go-back-N peer (kernel rxe). Precedent:
//!   NVIDIA ConnectX's selective repeat for RoCE.
//! - Completion on a local error (a bad L_Key, out of bounds): the request
//!   completes with LOC_PROT_ERR once every request before it has completed,
//!   and the QP goes to ERR (`QpCommon::fatal`, as kernel rxe's requester
//!   does for every QP type; IBTA would allow SQE for UC/UD).
//! - Atomic results are written to the 8-byte SGE in host byte order
//!   (`u64::to_ne_bytes`), so a C program reading the `uint64_t` sees the
//!   original value, as with every libibverbs provider.
//! - Local operations (BIND_MW, LOCAL_INV, REG_MR) take no PSN and send nothing:
//!   the requester performs them when they reach the send position (after
//!   a fence, like any request), and they complete in send-queue order,
//!   once every request before them has completed (kernel rxe does the
//!   same, its completer finishing them because no ACK will come). A
//!   refused bind completes with MW_BIND_ERR, a refused invalidation or
//!   fast registration with LOC_QP_OP_ERR (kernel rxe's statuses), and the QP goes to ERR, as for
//!   every local error here.
//! - `max_rd_atomic` 0 is taken as 1: kernel rxe would never start a READ
//!   with 0 outstanding allowed, which hangs the queue.

use std::collections::VecDeque;

use super::adaptive_timer::AdaptiveTimer;
use super::segment::{
    check_sges, emit_with, gather, packet_repr, packets_for, BuildError, PacketCtx, SendWqe,
};
use crate::transport::counters::{Counter, Counters};
use crate::transport::error::PostError;
use crate::transport::io::Transmit;
use crate::transport::memory::{Key, MemoryAccess};
use crate::transport::psn::Psn;
use crate::transport::qp::{local_ack_timeout, AccessFlags, AsyncEvent, QpCommon, QpState, QpType};
use crate::transport::time::Instant;
use crate::transport::wr::{SendData, SendOp, SendWr, WcStatus, WorkCompletion, WorkQueue};

/// The most PSNs an RC requester leaves unacknowledged before it waits
/// (the IBTA bound is 2^23, 9.7.1). 128, as kernel rxe: a larger window
/// made a slow peer (kernel rxe under emulation, with 2% loss) fall into
/// go-back-N collapse, every timeout resending more than it could take
/// in one ACK timeout. A READ request counts for one packet when it is
/// sent, however many PSNs it takes.
pub(crate) const MAX_UNACKED_PSNS: u32 = 128;
/// The window towards a peer that holds what arrives after a gap
/// (`peer_holds`, `recv::reorder`): twice as many, so that while one lost
/// packet's resend is answered a second window of new packets goes out
/// (the responder holds up to `reorder::MAX_HELD`, as many), and no
/// go-back-N collapse can come of it.
pub(super) const MAX_UNACKED_PSNS_HOLDING: u32 = 2 * MAX_UNACKED_PSNS;
/// The requester asks for an ACK at least this often within long messages,
/// so that the window never waits for the end of a message.
pub(super) const ACK_REQ_INTERVAL: u32 = MAX_UNACKED_PSNS / 4;
/// The longest message (IBTA 9.4: 2^31 bytes).
pub(super) const MAX_MESSAGE_LEN: u64 = 1 << 31;
/// `rnr_retry` 7 means retry without end (IBTA 9.7.5.2.8, 12.7.39).
const RNR_RETRY_FOREVER: u8 = 7;
/// The transport timer's interval grows to at most this many times the
/// nominal `local_ack_timeout` while retries go without progress.
pub(super) const ACK_TIMEOUT_BACKOFF_MAX: u32 = 4;

/// One QP's send side: the queue, the send position, and (shared with the
/// completer) the acknowledgement state and timers.
#[derive(Debug, Default)]
pub(crate) struct Requester {
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
    /// Early retransmission from measured round trips (`adaptive_timer`).
    pub(super) adaptive: AdaptiveTimer,
    /// Selective retransmission (`recv::reorder`): after a NAK PSN
    /// Sequence Error, resend only the NAK'd packet first.
    selective: bool,
    /// While a selective retransmission waits for its answer: the PSN
    /// after the NAK'd one. Once that packet is resent the send position
    /// jumps back to the newest (`high`) and new packets follow; an answer
    /// that shows the peer kept nothing after it sends the position back
    /// (`probe_answered`).
    pub(super) probe_to: Option<Psn>,
    /// Whether that resend's answer tells what the peer does with
    /// packets after a gap (a NAK's resend does; an early
    /// retransmission's does not).
    pub(super) probe_learns: bool,
    /// What the answers to such resends said of the peer: `Some(false)`
    /// once one acknowledged only the resent packet although more had
    /// been sent after it (a go-back-N responder, kernel rxe's): from then
    /// on this QP resends everything at once, as before.
    pub(super) peer_holds: Option<bool>,
    /// SQ_DRAINED raised for this visit to SQD.
    sqd_notified: bool,
}

mod completer_calls;

impl Requester {
    /// A requester; with `adaptive_retransmit` it resends early when a
    /// few measured round trips pass without an answer (`adaptive_timer`);
    /// with `selective_retransmit` it resends only the NAK'd packet after a
    /// sequence error, until the answer shows what the peer holds.
    pub(crate) fn new(adaptive_retransmit: bool, selective_retransmit: bool) -> Requester {
        Requester {
            adaptive: AdaptiveTimer::new(adaptive_retransmit),
            selective: selective_retransmit,
            ..Requester::default()
        }
    }

    /// Follows a Modify QP: the PSNs start at `sq_psn` on RTR→RTS; entering
    /// SQD arms the drained notification.
    pub(crate) fn on_modify(&mut self, common: &mut QpCommon, from: QpState) {
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
    pub(crate) fn post_send(&mut self, common: &QpCommon, wr: SendWr) -> Result<(), PostError> {
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
    pub(crate) fn poll_transmit(
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
        loop {
            let Some(wqe) = self.sq.get(self.next) else {
                self.check_drained(common);
                return None;
            };
            if wqe.error.is_some() {
                return None;
            }
            if rc && self.una.distance_to(self.psn) >= self.window() {
                return None;
            }
            if wqe.started && wqe.wr.op.is_local() {
                // A retransmission passes a local operation performed
                // already: it is never performed twice.
                self.next += 1;
                continue;
            }
            if !wqe.started {
                if common.state() == QpState::Sqd || !self.can_start(common, wqe) {
                    self.check_drained(common);
                    return None;
                }
                if wqe.wr.op.is_local() {
                    if !self.run_local(common, mem) {
                        return None;
                    }
                    continue;
                }
                if !self.start(common, counters, mem) {
                    return None;
                }
            }
            return self.send_packet(common, counters, now, mem, buf);
        }
    }

    /// Performs the local operation at the send position (it takes no
    /// PSN); `false` if it was refused (it then waits to complete with its
    /// error status, and the QP goes to ERR).
    fn run_local(&mut self, common: &mut QpCommon, mem: &mut dyn MemoryAccess) -> bool {
        let qp = common.mem_ref();
        let wqe = &mut self.sq[self.next];
        let result = match wqe.wr.op {
            SendOp::BindMw(bind) => mem
                .bind_mw(&bind, qp)
                .map(|_| ())
                .map_err(|e| (e, WcStatus::MwBindErr)),
            SendOp::LocalInv { key } => mem
                .local_invalidate(Key::new(key), qp)
                .map_err(|e| (e, WcStatus::LocQpOpErr)),
            SendOp::RegMr(req) => mem
                .reg_mr(&req, qp)
                .map(|_| ())
                .map_err(|e| (e, WcStatus::LocQpOpErr)),
            _ => Ok(()),
        };
        wqe.started = true;
        wqe.first_psn = self.psn;
        wqe.last_psn = self.psn;
        if let Err((_why, status)) = result {
            wqe.error = Some(status);
            self.complete_errors(common);
            return false;
        }
        self.next += 1;
        self.complete_local_front(common);
        true
    }

    /// Completes the local operations that have been performed and are now
    /// the oldest requests: nothing else will complete them.
    pub(super) fn complete_local_front(&mut self, common: &mut QpCommon) {
        while self
            .sq
            .front()
            .is_some_and(|w| w.wr.op.is_local() && w.started && w.error.is_none())
            && self.next > 0
        {
            if let Some(w) = self.pop_front() {
                complete(common, &w, WcStatus::Success);
            }
        }
    }

    /// PSNs that may be outstanding: [`MAX_UNACKED_PSNS`], or twice that
    /// towards a peer that holds packets after a gap.
    fn window(&self) -> u32 {
        if self.peer_holds == Some(true) {
            MAX_UNACKED_PSNS_HOLDING
        } else {
            MAX_UNACKED_PSNS
        }
    }

    /// Whether PSNs are sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> bool {
        self.una != self.high
    }

    /// The PSNs this QP holds in the port's window (`port_window`): sent
    /// and unacknowledged, for an RC QP that can still be answered (RTS,
    /// SQD, SQE); `None` for any other QP, which holds no place there.
    pub(crate) fn port_window_share(&self, common: &QpCommon) -> Option<u32> {
        let live = matches!(common.state(), QpState::Rts | QpState::Sqd | QpState::Sqe);
        (live && common.qp_type() == QpType::Rc).then(|| self.una.distance_to(self.high))
    }

    /// Whether a request waits whose next packet would be a new one (not
    /// a retransmission, whose PSN is behind the newest sent).
    pub(crate) fn has_new_packet(&self) -> bool {
        self.psn == self.high && self.next < self.sq.len()
    }

    /// The next deadline: the transport timer, an early retransmission
    /// or the end of an RNR wait.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [self.retrans_at, self.adaptive.due(), self.rnr_until]
            .into_iter()
            .flatten()
            .min()
    }

    /// A deadline passed: an RNR wait ends (sending resumes from the
    /// NAK'd PSN), or the transport timer fired (retransmit from the oldest
    /// unacknowledged PSN, or RETRY_EXC_ERR when the retries are spent).
    pub(crate) fn handle_timeout(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
    ) {
        if self.rnr_until.is_some_and(|t| t <= now) {
            self.rnr_until = None;
        }
        let live = matches!(common.state(), QpState::Rts | QpState::Sqd);
        let waiting = live && self.una != self.high && self.rnr_until.is_none();
        if self.retrans_at.is_some_and(|t| t <= now) {
            self.retrans_at = None;
            if waiting {
                // A timeout always retries, even to the PSN of a
                // retransmission in progress: that one was lost too. It
                // resends everything (go-back-N), as IBTA 9.7.6.1 says,
                // whatever a selective retransmission still waited for.
                self.rewound_to = None;
                self.probe_to = None;
                self.retry_from(common, counters, now, self.una);
                // The early deadline starts over with the round this sends
                // (`on_sent`), rather than firing on top of it.
                self.adaptive.stop();
                return;
            }
        }
        if self.adaptive.fire(now, self.nominal_timeout(common)) && waiting {
            // Resend from the oldest unacknowledged PSN, spending no retry
            // (`adaptive_timer`); a NAK for that PSN, in flight from
            // before, then restates this rewind.
            counters.inc(Counter::AdaptiveRetransmit);
            self.rewind(self.una);
            self.rewound_to = Some(self.una);
            self.probe_oldest(counters);
        }
    }

    /// The QP's `local_ack_timeout`, without backoff; `None`: no timer.
    pub(super) fn nominal_timeout(&self, common: &QpCommon) -> Option<core::time::Duration> {
        common.config.attrs().timeout.and_then(local_ack_timeout)
    }

    /// Completes every queued and outstanding request with WR_FLUSH_ERR
    /// (IBTA 10.3.1: in ERR all work requests are flushed) and stops the
    /// timers.
    pub(crate) fn flush(&mut self, common: &mut QpCommon) {
        while let Some(w) = self.sq.pop_front() {
            complete(common, &w, WcStatus::WrFlushErr);
        }
        self.next = 0;
        self.next_pkt = 0;
        self.rd_atomic = 0;
        self.retrans_at = None;
        self.rnr_until = None;
        self.rewound_to = None;
        self.adaptive.stop();
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
        let needed = if wqe.wr.op.writes_locally() {
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
            mig_req: common.sends_mig_req(),
            dest_qpn: attrs.dest_qpn.unwrap_or(0),
            qkey: attrs.qkey.unwrap_or(0),
        };
        let pd = common.init.pd;
        let k = self.next_pkt;
        let wqe = &self.sq[self.next];
        let single = wqe.wr.op.is_read_or_atomic();
        let read = matches!(wqe.wr.op, SendOp::RdmaRead { .. });
        let sent_psn = self.psn;
        let last = single || k + 1 >= packets_for(wqe.len, wqe.mtu);
        let window_edge = self.una.distance_to(self.psn) + 1 >= self.window();
        // A selective retransmission's packet asks for the answer it waits
        // for (`probe`).
        let probing = self.probe_to == Some(self.psn.next());
        let ack_req = last || window_edge || probing || self.since_ack_req + 1 >= ACK_REQ_INTERVAL;
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
        if probing {
            // The answer to wait for is the acknowledgement of all this
            // request's PSNs (a READ takes more than one).
            self.probe_to = Some(after);
            if after.is_before(self.high) {
                // The NAK'd packet is resent: on with what was never sent.
                self.rewind(self.high);
            }
        }
        if rc {
            let fresh = self.una.distance_to(after) > self.una.distance_to(self.high);
            if fresh {
                self.high = after;
            }
            let timed = fresh && ack_req && !read;
            let nominal = self.nominal_timeout(common);
            self.adaptive.on_sent(sent_psn, timed, now, nominal);
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
                self.complete_local_front(common);
                self.check_drained(common);
            }
        }
        Some(Transmit {
            len: total,
            dest,
            src_qpn: common.qpn,
        })
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
pub(super) fn validate(common: &QpCommon, wr: &SendWr) -> Result<u32, PostError> {
    let qp_type = common.qp_type();
    let op = wr.op;
    if op.is_local() {
        // IBTA 10.8.2 (not checked against the text): memory operations
        // on the send queue of any QP but QP1; they carry no data.
        if qp_type == QpType::Gsi {
            return Err(PostError::OpNotSupported);
        }
        return Ok(0);
    }
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
        d @ (SendData::Sges(_) | SendData::Sge(_))
            if d.sge_list().len() > common.init.max_send_sge as usize =>
        {
            return Err(PostError::TooManySges {
                given: d.sge_list().len(),
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
        SendData::Inline(_) if op.writes_locally() => return Err(PostError::OpNotSupported),
        _ => {}
    }
    match op {
        // IBTA 1.5 ATOMIC WRITE: 8 bytes at an 8-byte aligned address.
        SendOp::AtomicWrite { remote_addr, .. } if wr.data.len() != 8 || remote_addr % 8 != 0 => {
            return Err(PostError::BadAtomic);
        }
        // FLUSH: no data; a placement type of known bits, not none; a
        // selectivity level of range or region (Annex A19.4.1, not checked
        // against the text).
        SendOp::Flush {
            placement,
            selectivity,
            ..
        } => {
            let plt = crate::wire::feth::PLT_GLOBAL_VISIBILITY | crate::wire::feth::PLT_PERSISTENCE;
            if !wr.data.is_empty()
                || placement == 0
                || placement & !plt != 0
                || selectivity > crate::wire::feth::SEL_MEMORY_REGION
            {
                return Err(PostError::BadFlush);
            }
        }
        _ => {}
    }
    if let SendOp::CmpSwap { remote_addr, .. } | SendOp::FetchAdd { remote_addr, .. } = op {
        let one_8_byte_sge = matches!(wr.data.sge_list(), [s] if s.length == 8);
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
