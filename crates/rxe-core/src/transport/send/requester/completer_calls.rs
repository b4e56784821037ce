//! The requester's calls the completer makes as responses arrive: the
//! transport timer's deadline and its retries, go-back-N (`retry_from`,
//! `rewind`), RNR waits, and taking finished requests off the send queue
//! (`pop_front`, `fail_front`, the SQ-drained event).

use super::*;

impl Requester {
    /// When the transport timer fires if armed at `now`: the nominal
    /// interval, doubled for each retry spent since the last progress, at
    /// most [`ACK_TIMEOUT_BACKOFF_MAX`] times it.
    pub(in crate::transport::send) fn ack_deadline(
        &self,
        common: &QpCommon,
        now: Instant,
    ) -> Option<Instant> {
        let a = common.config.attrs();
        let t = a.timeout.and_then(local_ack_timeout)?;
        let spent = a.retry_cnt.unwrap_or(0).saturating_sub(self.retry_left);
        let factor = (1u32 << spent.min(7)).min(ACK_TIMEOUT_BACKOFF_MAX);
        Some(now.saturating_add(t.saturating_mul(factor)))
    }

    pub(in crate::transport::send) fn reset_retries(&mut self, common: &QpCommon) {
        let a = common.config.attrs();
        self.retry_left = a.retry_cnt.unwrap_or(0);
        self.rnr_left = a.rnr_retry.unwrap_or(0);
    }

    /// Forward progress at `now`: both retry counters start over, and the
    /// transport timer restarts if anything is still outstanding.
    pub(in crate::transport::send) fn progress(&mut self, common: &QpCommon, now: Instant) {
        self.reset_retries(common);
        self.rewound_to = None;
        self.probe_answered();
        let outstanding = self.una != self.high && self.rnr_until.is_none();
        self.retrans_at = if outstanding {
            self.ack_deadline(common, now)
        } else {
            None
        };
        let nominal = self.nominal_timeout(common);
        self.adaptive
            .on_progress(self.una, now, nominal, outstanding);
    }

    /// Starts a retransmission from `to`, spending one retry; when none is
    /// left, an ARMED QP migrates and retransmits on its alternate path,
    /// any other's oldest request completes with RETRY_EXC_ERR and the QP
    /// goes to ERR. A retransmission to the PSN already being retried
    /// (without progress since) is not started twice.
    pub(in crate::transport::send) fn retry_from(
        &mut self,
        common: &mut QpCommon,
        counters: &mut Counters,
        now: Instant,
        to: Psn,
    ) {
        if self.rewound_to == Some(to) {
            return;
        }
        self.adaptive.on_loss(now);
        if self.retry_left == 0 {
            if !self.migrate(common, counters) {
                counters.inc(Counter::RetryExceededErr);
                self.fail_front(common, WcStatus::RetryExcErr);
                return;
            }
        } else {
            self.retry_left -= 1;
        }
        counters.inc(Counter::CompleterRetryErr);
        self.rewind(to);
        self.rewound_to = Some(to);
    }

    /// After a NAK PSN Sequence Error for `to`, with the send position
    /// moved back to it: if packets after `to` had been sent and the peer
    /// has not shown that it discards them, resend only `to` (with AckReq)
    /// and go on with new packets (`probe_to`); its answer says whether
    /// the others must follow (`probe_answered`). A lost answer is
    /// repaired by the timers, which resend from `to` again.
    pub(in crate::transport::send) fn probe(&mut self, counters: &mut Counters, to: Psn) {
        if self.peer_holds != Some(false) {
            self.start_probe(counters, to, true);
        }
    }

    /// The early retransmission timer fired with the send position moved
    /// back to `una`: resend only that packet, whatever the peer is (a
    /// timer that fired for a slow peer, not a loss, then costs one
    /// duplicate instead of a window; a lost NAK's gap is filled as well).
    /// Its answer teaches nothing about the peer: acknowledgements of the
    /// packets already in flight may overtake it.
    pub(in crate::transport::send) fn probe_oldest(&mut self, counters: &mut Counters) {
        self.start_probe(counters, self.una, false);
    }

    fn start_probe(&mut self, counters: &mut Counters, to: Psn, learns: bool) {
        let more_sent = to.next().is_before(self.high);
        if self.selective && more_sent && self.psn == to {
            self.probe_to = Some(to.next());
            self.probe_learns = learns;
            // An early retransmission is counted as one already.
            if learns {
                counters.inc(Counter::SelectiveRetransmit);
            }
        }
    }

    /// `una` moved: a selective retransmission's answer came if it reached
    /// the probe's end. Beyond it, the peer held what followed; exactly at
    /// it, it discarded them: go back and resend them now (go-back-N),
    /// and from now on resend all at once.
    fn probe_answered(&mut self) {
        let Some(cap) = self.probe_to else { return };
        if self.una.is_before(cap) {
            return;
        }
        self.probe_to = None;
        if self.una == cap {
            if self.probe_learns {
                self.peer_holds = Some(false);
            }
            if cap.is_before(self.psn) {
                self.rewind(cap);
                // The NAK the packets sent since draw restates this.
                self.rewound_to = Some(cap);
            }
        } else if self.peer_holds.is_none() && self.probe_learns {
            self.peer_holds = Some(true);
        }
    }

    /// A NAK PSN Sequence Error for `p` came: if it names the end of a
    /// selective retransmission still unanswered, the resent packet filled
    /// its gap and the peer reports the next one: most likely a peer that
    /// held packets after a second loss, but also a go-back-N one whose
    /// ACK of the resent packet was lost, answering the new packets sent
    /// since. So nothing is learnt: the probe ends here, before the NAK's
    /// implied acknowledgement reaches its end (which would read as "held
    /// nothing"), and the NAK starts the next one, whose answer tells.
    pub(in crate::transport::send) fn probe_nakd(&mut self, p: Psn) {
        if self.probe_to == Some(p) {
            self.probe_to = None;
        }
    }

    /// Retries spent on the primary path: an ARMED QP moves to its
    /// alternate path (IBTA 17.2.8, `qp::migration`) and starts its
    /// retries over there, with the alternate path's timeout; `false` when
    /// it has no armed path, or cannot use it (PATH_MIG_ERR), and fails.
    fn migrate(&mut self, common: &mut QpCommon, counters: &mut Counters) -> bool {
        if common.config.armed_path().is_none() {
            return false;
        }
        if !common.alt_usable {
            counters.inc(Counter::PathMigErr);
            common.event(AsyncEvent::PathMigError { qpn: common.qpn });
            return false;
        }
        common.migrate();
        counters.inc(Counter::PathMigrated);
        self.reset_retries(common);
        true
    }

    /// Waits `wait` after an RNR NAK, then resends from the oldest
    /// unacknowledged PSN; RNR_RETRY_EXC_ERR when the RNR retries are spent
    /// (`rnr_retry` 7: without end).
    pub(in crate::transport::send) fn rnr_retry(
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
        self.probe_to = None;
        self.retrans_at = None;
        self.adaptive.stop();
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
    pub(in crate::transport::send) fn rewind(&mut self, to: Psn) {
        // Karn: what is sent again no longer times a round trip.
        self.adaptive.forget_sample();
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
    pub(in crate::transport::send) fn fix_position(&mut self) {
        if self.psn.is_before(self.una) {
            self.rewind(self.una);
        }
    }

    /// Removes the oldest request, keeping `next` on the same request.
    pub(in crate::transport::send) fn pop_front(&mut self) -> Option<SendWqe> {
        let w = self.sq.pop_front()?;
        self.next = self.next.saturating_sub(1);
        if w.rd_atomic {
            self.rd_atomic = self.rd_atomic.saturating_sub(1);
        }
        Some(w)
    }

    /// The oldest request completes with `status` and the QP goes to ERR;
    /// the endpoint then flushes the rest.
    pub(in crate::transport::send) fn fail_front(
        &mut self,
        common: &mut QpCommon,
        status: WcStatus,
    ) {
        if let Some(w) = self.pop_front() {
            complete(common, &w, status);
        }
        self.retrans_at = None;
        self.rnr_until = None;
        self.adaptive.stop();
        common.fatal();
    }

    /// A request that failed locally completes once it is the oldest.
    pub(in crate::transport::send) fn complete_errors(&mut self, common: &mut QpCommon) {
        if let Some(status) = self.sq.front().and_then(|w| w.error) {
            self.fail_front(common, status);
        }
    }

    /// In SQD with nothing started and not completed: raise SQ_DRAINED
    /// once, if the consumer asked for it (IBTA 10.3.1, 11.6.3).
    pub(in crate::transport::send) fn check_drained(&mut self, common: &mut QpCommon) {
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
