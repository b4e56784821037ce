//! The port's window: a bound on the RC PSNs that a port's QPs together
//! have sent to one destination and not yet had acknowledged.
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
//!   told to hold always, or unless the limit is below one RC QP's own
//!   window ([`MAX_UNACKED_PSNS`]): a receiver that keeps up loses nothing
//!   and its senders are not held back at all. Loss is counted as sequence error
//!   NAKs received and retransmissions started; dense is more than one
//!   for every [`DENSE_LOSS`] packets sent, judged over every
//!   [`JUDGED_OVER`] packets; recently is in the last [`ENGAGED_FOR`].
//!   Held always, 1000 QPs lost a sixth of their throughput on this
//!   machine to the window alone, with nothing to gain while nothing was
//!   dropped; a few drops now and then (179 of about 900000 datagrams in
//!   one 1000-QP run, each a resend) cost less than holding the window
//!   would (docs/performance.md). The loss that
//!   engages it is usually the overflow itself: the first drops cost a
//!   resend, and the rest are prevented. A limit below one QP's window
//!   means a small buffer (an unprivileged process under Debian's default
//!   `net.core.rmem_max` gets 416 KiB, a limit of 41 PSNs at MTU 4096),
//!   which one QP's burst overflows: the window then holds from the start.
//!   So measured (docs/performance.md, "The port window"): no loss, and
//!   6 % more throughput, where waiting for loss cost 64 to 312
//!   sequence-error NAKs per run.
//! - The window counts, for every RC QP in RTS, SQD or SQE, the PSNs from
//!   its oldest unacknowledged one to the newest sent (`una..high`): a
//!   READ counts all its response packets, which fill this side's buffer.
//!   A QP in any other state counts nothing, so a QP that fails or is
//!   reset gives its share back at once.
//! - There is one window per destination GID, each with the whole limit:
//!   the buffer it stands for is the peer's. So a peer that never
//!   acknowledges (a hostile one, or one that died) holds only its own
//!   window, and the QPs to every other peer go on; in one window for the
//!   port, its QPs' unacknowledged PSNs would stop them all until their
//!   retries ran out.
//! - While the count is at the limit, a QP whose next packet is new is
//!   parked instead of sending; a retransmission (the send position behind
//!   `high`) always goes, since it fills a gap and adds nothing in flight.
//!   Responses, ACKs and CNPs never wait: they answer the peer's window.
//! - Parked QPs go back to the ready queue in the order they were parked,
//!   one for every [`UNPARK_CREDIT`] PSNs their destination's window has
//!   free, so that an ACK that frees a few PSNs does not requeue every
//!   parked QP.
//! - Under the limit any QP may send, however much it then puts in flight
//!   (one READ may ask for more than the whole window): nothing waits for
//!   a share it can never have.
//!
//! The device sizes the limit from the socket buffer the kernel granted
//! (`Endpoint::set_port_window`); without one there is no limit.

use std::collections::VecDeque;
use std::time::Duration;

use super::fast_map::FastMap;
use super::send::MAX_UNACKED_PSNS;
use super::time::Instant;
use crate::wire::Gid;

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

/// A QP's place in the window: the destination it is counted against
/// (and that destination's slot, so that the count per packet needs no
/// lookup) and its PSNs in flight there. A live RC QP holds one, with 0
/// PSNs when all are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    gid: Gid,
    slot: usize,
    psns: u32,
}

/// The PSNs in flight towards each destination, the limit, and the QPs
/// waiting for it.
#[derive(Debug, Default)]
pub(super) struct PortWindow {
    limit: Option<u32>,
    /// Hold whether or not loss was seen.
    always: bool,
    /// Per destination, by slot; a slot is free (in `free`) when no QP
    /// holds a share in it and none waits there.
    dests: Vec<DestWindow>,
    index: FastMap<Gid, usize>,
    free: Vec<usize>,
    /// Slots with parked QPs, each once.
    waiting: VecDeque<usize>,
    /// PSNs in flight over all destinations.
    total: u32,
    /// The port's counts of losses and of packets sent (`note_losses`) at
    /// the last judgement, and when loss was last judged dense.
    losses: u64,
    sent: u64,
    loss_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct DestWindow {
    gid: Gid,
    unacked: u32,
    /// QPs holding a share here.
    holders: u32,
    parked: VecDeque<u32>,
}

impl PortWindow {
    pub(super) fn set_limit(&mut self, limit: Option<u32>) {
        self.limit = limit.map(|l| l.max(1));
    }

    /// Whether the limit is below one RC QP's own window, so that a single
    /// QP's burst may overflow the buffer it stands for.
    fn small(&self) -> bool {
        self.limit.is_some_and(|l| l < MAX_UNACKED_PSNS)
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
                || self.small()
                || self
                    .loss_at
                    .is_some_and(|t| now.saturating_since(t) < ENGAGED_FOR))
    }

    /// PSNs sent and unacknowledged, over all QPs and destinations.
    pub(super) fn unacked(&self) -> u32 {
        self.total
    }

    /// A QP's count is now `now`: its PSNs in flight towards a destination,
    /// or `None` (not a live RC QP). Its destination may have changed
    /// (path migration).
    pub(super) fn account(&mut self, share: &mut Option<Share>, now: Option<(Gid, u32)>) {
        if let (Some(s), Some((gid, psns))) = (share.as_mut(), now) {
            if s.gid == gid {
                // The usual case, once per packet and ACK: no lookup.
                let d = &mut self.dests[s.slot];
                d.unacked = d.unacked.saturating_sub(s.psns).saturating_add(psns);
                self.total = self.total.saturating_sub(s.psns).saturating_add(psns);
                s.psns = psns;
                return;
            }
        }
        if let Some(s) = share.take() {
            let d = &mut self.dests[s.slot];
            d.unacked = d.unacked.saturating_sub(s.psns);
            d.holders -= 1;
            self.total = self.total.saturating_sub(s.psns);
            self.free_if_unused(s.slot);
        }
        if let Some((gid, psns)) = now {
            let slot = self.slot_for(gid);
            let d = &mut self.dests[slot];
            d.unacked = d.unacked.saturating_add(psns);
            d.holders += 1;
            self.total = self.total.saturating_add(psns);
            *share = Some(Share { gid, slot, psns });
        }
    }

    fn slot_for(&mut self, gid: Gid) -> usize {
        if let Some(&slot) = self.index.get(&gid) {
            return slot;
        }
        let d = DestWindow {
            gid,
            ..DestWindow::default()
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.dests[slot] = d;
                slot
            }
            None => {
                self.dests.push(d);
                self.dests.len() - 1
            }
        };
        self.index.insert(gid, slot);
        slot
    }

    fn free_if_unused(&mut self, slot: usize) {
        let d = &self.dests[slot];
        if d.holders == 0 && d.parked.is_empty() {
            self.index.remove(&d.gid);
            self.free.push(slot);
        }
    }

    /// Whether new packets of the QP holding `share` must wait at `now`.
    pub(super) fn full(&self, share: &Option<Share>, now: Instant) -> bool {
        let (Some(limit), Some(s)) = (self.limit, share) else {
            return false;
        };
        self.engaged(now) && self.dests[s.slot].unacked >= limit
    }

    /// QP `qpn`, holding `share`, waits for its destination's window.
    pub(super) fn park(&mut self, share: &Option<Share>, qpn: u32) {
        let Some(s) = share else { return };
        let d = &mut self.dests[s.slot];
        if d.parked.is_empty() {
            self.waiting.push_back(s.slot);
        }
        d.parked.push_back(qpn);
    }

    /// Hands `release` the parked QPs that may go back to the ready queue
    /// at `now`: per destination, one for every [`UNPARK_CREDIT`] PSNs
    /// free, in the order they were parked (all of them once the window
    /// no longer holds).
    pub(super) fn unpark(&mut self, now: Instant, mut release: impl FnMut(u32)) {
        if self.waiting.is_empty() {
            return;
        }
        let engaged = self.engaged(now);
        for _ in 0..self.waiting.len() {
            let Some(slot) = self.waiting.pop_front() else {
                break;
            };
            let d = &mut self.dests[slot];
            let free = match self.limit {
                Some(l) if engaged => l.saturating_sub(d.unacked),
                _ => u32::MAX,
            };
            let n = (free.div_ceil(UNPARK_CREDIT) as usize).min(d.parked.len());
            d.parked.drain(..n).for_each(&mut release);
            if d.parked.is_empty() {
                self.free_if_unused(slot);
            } else {
                self.waiting.push_back(slot);
            }
        }
    }

    /// A destroyed QP leaves the queue it waits in (its share is given
    /// back by `account` to `None`).
    pub(super) fn forget(&mut self, qpn: u32) {
        for slot in 0..self.dests.len() {
            let d = &mut self.dests[slot];
            if d.parked.contains(&qpn) {
                d.parked.retain(|q| *q != qpn);
                if d.parked.is_empty() {
                    self.waiting.retain(|s| *s != slot);
                    self.free_if_unused(slot);
                }
            }
        }
    }

    /// Destinations with a slot in use (tests: nothing is left behind).
    #[cfg(test)]
    fn destinations(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant::from_nanos(1_000);

    fn gid(n: u8) -> Gid {
        Gid::from(std::net::Ipv4Addr::new(10, 0, 0, n))
    }

    fn released(w: &mut PortWindow, now: Instant) -> Vec<u32> {
        let mut v = Vec::new();
        w.unpark(now, |q| v.push(q));
        v
    }

    #[test]
    fn counts_follow_each_qp_per_destination_and_the_limit_holds_only_there() {
        let mut w = PortWindow::default();
        w.set_limit(Some(100));
        w.set_always(true);
        let (mut a, mut b, mut c) = (None, None, None);
        w.account(&mut a, Some((gid(1), 60)));
        assert!(!w.full(&a, T0));
        w.account(&mut b, Some((gid(1), 40)));
        assert!(w.full(&a, T0) && w.full(&b, T0));
        // Another destination has its own window.
        w.account(&mut c, Some((gid(2), 10)));
        assert!(!w.full(&c, T0));
        assert_eq!(w.unacked(), 110);
        w.account(&mut a, Some((gid(1), 10)));
        assert!(!w.full(&a, T0));
        // A share that moves (path migration) leaves its old destination.
        w.account(&mut b, Some((gid(2), 95)));
        assert!(w.full(&c, T0) && !w.full(&a, T0));
        // All acknowledged: the QPs keep their places, with nothing.
        for s in [&mut a, &mut b, &mut c] {
            let gid = s.map(|s| s.gid).unwrap();
            w.account(s, Some((gid, 0)));
        }
        assert_eq!((w.unacked(), w.destinations()), (0, 2));
        for s in [&mut a, &mut b, &mut c] {
            w.account(s, None);
        }
        assert_eq!(w.destinations(), 0, "no slot left in use");
        // A freed slot is used again.
        w.account(&mut a, Some((gid(3), 1)));
        assert_eq!(w.dests.len(), 2);
    }

    #[test]
    fn no_limit_never_fills() {
        let mut w = PortWindow::default();
        let mut a = None;
        w.set_always(true);
        w.account(&mut a, Some((gid(1), u32::MAX)));
        assert!(!w.full(&a, T0));
        assert_eq!(w.limit(), None);
    }

    #[test]
    fn by_default_it_holds_only_for_a_while_after_dense_loss() {
        let mut w = PortWindow::default();
        w.set_limit(Some(MAX_UNACKED_PSNS));
        let mut a = None;
        w.account(&mut a, Some((gid(1), 2 * MAX_UNACKED_PSNS)));
        w.park(&a, 7);
        w.note_losses(0, JUDGED_OVER, T0);
        assert!(!w.full(&a, T0), "no loss yet");
        // Sparse: 4 in 1024 packets is not more than 1 in 256.
        w.note_losses(4, 2 * JUDGED_OVER, T0);
        assert!(!w.full(&a, T0), "sparse loss");
        // Not judged before JUDGED_OVER more packets.
        w.note_losses(100, 3 * JUDGED_OVER - 1, T0);
        assert!(!w.full(&a, T0));
        w.note_losses(100, 3 * JUDGED_OVER, T0);
        assert!(w.full(&a, T0), "dense loss");
        assert!(released(&mut w, T0).is_empty());
        let later = T0.saturating_add(ENGAGED_FOR);
        w.note_losses(100, 5 * JUDGED_OVER, later);
        assert!(!w.full(&a, later), "no dense loss for ENGAGED_FOR");
        assert_eq!(released(&mut w, later), vec![7]);
        // Counters reset to zero: no judgement of the difference.
        w.note_losses(0, 0, later);
        w.note_losses(3, JUDGED_OVER, later);
        assert!(!w.full(&a, later));
    }

    #[test]
    fn a_limit_below_one_qps_window_holds_from_the_start() {
        let mut w = PortWindow::default();
        w.set_limit(Some(MAX_UNACKED_PSNS - 1));
        let mut a = None;
        w.account(&mut a, Some((gid(1), MAX_UNACKED_PSNS - 1)));
        assert!(w.full(&a, T0), "no loss needed");
        w.set_limit(Some(MAX_UNACKED_PSNS));
        w.account(&mut a, Some((gid(1), MAX_UNACKED_PSNS)));
        assert!(!w.full(&a, T0), "at one window it waits for loss");
    }

    #[test]
    fn parked_qps_return_in_order_one_per_credit_of_their_destinations_window() {
        let mut w = PortWindow::default();
        w.set_limit(Some(100));
        w.set_always(true);
        let (mut a, mut b) = (None, None);
        w.account(&mut a, Some((gid(1), 100)));
        w.account(&mut b, Some((gid(2), 100)));
        for q in 1..=10 {
            w.park(&a, q);
        }
        w.park(&b, 20);
        assert!(released(&mut w, T0).is_empty(), "full windows free none");
        w.account(&mut a, Some((gid(1), 80))); // 20 free: two credits
        assert_eq!(released(&mut w, T0), vec![1, 2]);
        w.forget(4);
        w.account(&mut a, None);
        assert_eq!(released(&mut w, T0), vec![3, 5, 6, 7, 8, 9, 10]);
        w.account(&mut b, Some((gid(2), 99)));
        assert_eq!(released(&mut w, T0), vec![20]);
        assert!(w.waiting.is_empty());
        w.account(&mut b, None);
        assert_eq!(w.destinations(), 0);
    }
}
