//! The port's window: a bound on the RC PSNs that all of a port's QPs
//! together have sent and not yet had acknowledged.
//!
//! Why a port needs one, where a hardware NIC does not: between two
//! software devices the only queue is the receiver's socket buffer, and
//! on loopback (or any path faster than the receiving process) a send
//! never waits for room in it: the kernel delivers the datagram in the
//! sender's system call, or drops it (`UdpRcvbufErrors`). Each RC QP's own
//! window (`send::requester::MAX_UNACKED_PSNS`) bounds one QP; many QPs
//! together do not stop: 1000 QPs with four 64 KiB WRITEs each put 256 MB
//! in flight against a receive buffer of 8 MiB, and 14 % of the datagrams
//! were dropped, each one costing a NAK and a go-back-N resend
//! (docs/performance.md, "The port window"). A lossless fabric stops the sender
//! with link-level pause frames (PFC, IEEE 802.1Qbb), which RoCE relies
//! on; this is that back-pressure for a port whose link is a socket.
//!
//! Rules:
//!
//! - It holds only while the port has seen dense loss recently, unless
//!   told to hold always: a receiver that keeps up loses nothing and its
//!   senders are not held back at all. Loss is counted as sequence error
//!   NAKs received and retransmissions started; dense is more than one
//!   for every [`DENSE_LOSS`] packets sent, judged over every
//!   [`JUDGED_OVER`] packets; recently is in the last [`ENGAGED_FOR`].
//!   Held always, 1000 QPs lost a sixth of their throughput on this
//!   machine to the window alone, with nothing to gain while nothing was
//!   dropped; a few drops now and then (179 of about 900000 datagrams in
//!   one 1000-QP run, each a resend) cost less than holding the window
//!   would (docs/performance.md). The loss that
//!   engages it is usually the overflow itself: the first drops cost a
//!   resend, and the rest are prevented.
//! - The window counts, for every RC QP in RTS, SQD or SQE, the PSNs from
//!   its oldest unacknowledged one to the newest sent (`una..high`): a
//!   READ counts all its response packets, which fill this side's buffer.
//!   A QP in any other state counts nothing, so a QP that fails or is
//!   reset gives its share back at once.
//! - While the count is at the limit, a QP whose next packet is new is
//!   parked instead of sending; a retransmission (the send position behind
//!   `high`) always goes, since it fills a gap and adds nothing in flight.
//!   Responses, ACKs and CNPs never wait: they answer the peer's window.
//! - Parked QPs go back to the ready queue in the order they were parked,
//!   one for every [`UNPARK_CREDIT`] PSNs the window has free, so that an
//!   ACK that frees a few PSNs does not requeue every parked QP.
//! - Under the limit any QP may send, however much it then puts in flight
//!   (one READ may ask for more than the whole window): nothing waits for
//!   a share it can never have.
//!
//! The device sizes the limit from the socket buffer the kernel granted
//! (`Endpoint::set_port_window`); without one there is no limit.

use std::collections::VecDeque;
use std::time::Duration;

use super::time::Instant;

/// How long after the last loss the window holds (as the adaptive
/// retransmission timer's memory of loss, `send::adaptive_timer`).
pub(super) const ENGAGED_FOR: Duration = Duration::from_millis(500);
/// Loss is dense above one per this many packets sent (0.4 %).
pub(super) const DENSE_LOSS: u64 = 256;
/// Packets sent between two judgements of the loss.
pub(super) const JUDGED_OVER: u64 = 1024;

/// Free PSNs per parked QP sent back to the ready queue: one full turn of
/// a QP (`endpoint::TX_QUANTUM`).
pub(super) const UNPARK_CREDIT: u32 = 16;

/// The PSNs in flight on the port, their limit and the QPs waiting for it.
#[derive(Debug, Default)]
pub(super) struct PortWindow {
    limit: Option<u32>,
    /// Hold whether or not loss was seen.
    always: bool,
    unacked: u32,
    parked: VecDeque<u32>,
    /// The port's counts of losses and of packets sent (`note_losses`) at
    /// the last judgement, and when loss was last judged dense.
    losses: u64,
    sent: u64,
    loss_at: Option<Instant>,
}

impl PortWindow {
    pub(super) fn set_limit(&mut self, limit: Option<u32>) {
        self.limit = limit.map(|l| l.max(1));
    }

    pub(super) fn limit(&self) -> Option<u32> {
        self.limit
    }

    pub(super) fn set_always(&mut self, always: bool) {
        self.always = always;
    }

    /// The port's counts so far of losses (sequence error NAKs received,
    /// retransmissions started) and of packets sent, at `now`.
    pub(super) fn note_losses(&mut self, losses: u64, sent: u64, now: Instant) {
        if sent < self.sent || losses < self.losses {
            // The counters were reset: start again from here.
            self.losses = losses;
            self.sent = sent;
            return;
        }
        let sent_since = sent - self.sent;
        if sent_since < JUDGED_OVER {
            return;
        }
        let lost_since = losses - self.losses;
        if lost_since.saturating_mul(DENSE_LOSS) > sent_since {
            self.loss_at = Some(now);
        }
        self.losses = losses;
        self.sent = sent;
    }

    /// Whether the limit holds at `now`.
    pub(super) fn engaged(&self, now: Instant) -> bool {
        self.limit.is_some()
            && (self.always
                || self
                    .loss_at
                    .is_some_and(|t| now.saturating_since(t) < ENGAGED_FOR))
    }

    /// PSNs sent and unacknowledged, over all QPs.
    pub(super) fn unacked(&self) -> u32 {
        self.unacked
    }

    /// A QP's count changed from `*counted` to `now`.
    pub(super) fn account(&mut self, counted: &mut u32, now: u32) {
        self.unacked = self.unacked.saturating_sub(*counted).saturating_add(now);
        *counted = now;
    }

    /// Whether new packets must wait at `now`.
    pub(super) fn full(&self, now: Instant) -> bool {
        self.engaged(now) && self.limit.is_some_and(|l| self.unacked >= l)
    }

    pub(super) fn park(&mut self, qpn: u32) {
        self.parked.push_back(qpn);
    }

    /// The parked QPs that may go back to the ready queue at `now` (all
    /// of them once the window no longer holds).
    pub(super) fn unpark(&mut self, now: Instant) -> impl Iterator<Item = u32> + '_ {
        let free = match self.limit {
            Some(l) if self.engaged(now) => l.saturating_sub(self.unacked),
            _ => u32::MAX,
        };
        let n = (free.div_ceil(UNPARK_CREDIT) as usize).min(self.parked.len());
        self.parked.drain(..n)
    }

    /// A destroyed QP leaves the queue (its count is given back by
    /// `account` to zero).
    pub(super) fn forget(&mut self, qpn: u32) {
        self.parked.retain(|q| *q != qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant::from_nanos(1_000);

    #[test]
    fn counts_follow_each_qp_and_the_limit_holds_new_packets_only_at_it() {
        let mut w = PortWindow::default();
        w.set_limit(Some(100));
        w.set_always(true);
        let (mut a, mut b) = (0, 0);
        w.account(&mut a, 60);
        assert!(!w.full(T0));
        w.account(&mut b, 40);
        assert!(w.full(T0));
        w.account(&mut a, 10);
        assert_eq!(w.unacked(), 50);
        assert!(!w.full(T0));
        w.account(&mut b, 0);
        w.account(&mut a, 0);
        assert_eq!(w.unacked(), 0);
    }

    #[test]
    fn no_limit_never_fills() {
        let mut w = PortWindow::default();
        let mut a = 0;
        w.set_always(true);
        w.account(&mut a, u32::MAX);
        assert!(!w.full(T0));
        assert_eq!(w.limit(), None);
    }

    #[test]
    fn by_default_it_holds_only_for_a_while_after_dense_loss() {
        let mut w = PortWindow::default();
        w.set_limit(Some(10));
        let mut a = 0;
        w.account(&mut a, 50);
        w.park(7);
        w.note_losses(0, JUDGED_OVER, T0);
        assert!(!w.full(T0), "no loss yet");
        // Sparse: 4 in 1024 packets is not more than 1 in 256.
        w.note_losses(4, 2 * JUDGED_OVER, T0);
        assert!(!w.full(T0), "sparse loss");
        // Not judged before JUDGED_OVER more packets.
        w.note_losses(100, 3 * JUDGED_OVER - 1, T0);
        assert!(!w.full(T0));
        w.note_losses(100, 3 * JUDGED_OVER, T0);
        assert!(w.full(T0), "dense loss");
        assert_eq!(w.unpark(T0).count(), 0);
        let later = T0.saturating_add(ENGAGED_FOR);
        w.note_losses(100, 5 * JUDGED_OVER, later);
        assert!(!w.full(later), "no dense loss for ENGAGED_FOR");
        // Counters reset to zero: no judgement of the difference.
        w.note_losses(0, 0, later);
        w.note_losses(3, JUDGED_OVER, later);
        assert!(!w.full(later));
        assert_eq!(w.unpark(later).collect::<Vec<_>>(), vec![7]);
    }

    #[test]
    fn parked_qps_return_in_order_one_per_credit_of_free_window() {
        let mut w = PortWindow::default();
        w.set_limit(Some(100));
        w.set_always(true);
        let mut a = 0;
        w.account(&mut a, 100);
        for q in 1..=10 {
            w.park(q);
        }
        assert_eq!(w.unpark(T0).count(), 0, "a full window frees none");
        w.account(&mut a, 80); // 20 free: two credits
        assert_eq!(w.unpark(T0).collect::<Vec<_>>(), vec![1, 2]);
        w.forget(4);
        w.account(&mut a, 0);
        assert_eq!(w.unpark(T0).collect::<Vec<_>>(), vec![3, 5, 6, 7, 8, 9, 10]);
    }
}
