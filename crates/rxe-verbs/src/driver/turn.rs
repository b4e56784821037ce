//! One turn of the device, the same on every thread that drives it (the
//! driver thread, a busy poller, the driver thread's look on a poller's
//! behalf), and the one way down to the wire, [`flush`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rxe_core::transport::Instant;
use rxe_net::{NetCounter, NetPort, Outgoing};

use super::Engine;

/// When a busy poller's turn left the engine's sends for later
/// (`Sends::Poller`), in the engine clock's nanoseconds; 0: not
/// deferred. Every [`flush`] clears it.
#[derive(Debug, Default)]
pub struct Deferral(AtomicU64);

impl Deferral {
    /// Whether a turn at `now` may leave the engine's sends for later:
    /// yes, once after each flush (which it then notes, with `now`).
    fn defer_once(&self, now: Instant) -> bool {
        let at = now.as_nanos().max(1);
        self.0
            .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// When the sends now waiting were left for later, if they are.
    pub fn since(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Instant::from_nanos(t)),
        }
    }

    fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Sends what the engine has (its `poll_transmit` at `now`, each packet
/// from the address its `sgid_index` names in the engine's GID table),
/// then `after_batch` (completions to their CQs: after the ACKs are out).
/// Every send of the device goes through here, so that it ends any
/// deferral. Returns the packets handed to the kernel.
pub fn flush<E: Engine + ?Sized>(
    port: &NetPort,
    e: &mut E,
    now: Instant,
    deferral: &Deferral,
) -> usize {
    deferral.clear();
    let sent = port.flush(|buf| {
        let transmit = e.poll_transmit(now, buf)?;
        Some(Outgoing {
            source: e.source_gid(transmit.dest.sgid_index),
            transmit,
        })
    });
    e.after_batch();
    sent
}

/// What one [`turn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Packets received and handed to the engine.
    pub received: usize,
    /// The engine's next deadline.
    pub deadline: Option<Instant>,
    /// What the engine had to send was left for the next turn.
    pub sends_deferred: bool,
}

/// One engine turn, the same for the driver thread and a busy poller:
/// the datagrams waiting on the sockets into the engine, the timers that
/// are due, then what the engine has to send. The caller holds the engine
/// lock.
///
/// The engine's `after_batch` (where the verbs layer moves completions to
/// their CQs and so wakes completion-event waiters) runs once, after the
/// flush: the ACK of a received SEND is on the wire before its receiver's
/// application is woken. Delivering first (as `NetPort::receive` alone
/// does) woke the waiter while this turn still held the engine lock to send
/// the ACK, and the waiter's first verb then slept on that lock (seen with
/// `strace -f` on `ibv_rc_pingpong -e`: a futex wait and wake per message).
pub fn turn<E: Engine + ?Sized>(port: &NetPort, e: &mut E, deferral: &Deferral) -> Turn {
    poller_turn(port, e, deferral, Sends::Now, None)
}

/// A poller's turn that received more packets than this is a stream's,
/// not a ping-pong's: it sends at once (deferring there cost 6 % of 64 B
/// WRITEs to a busy-polling server, docs/performance.md).
pub(super) const DEFER_MAX_RECEIVED: usize = 2;

/// Sends a poller's turn left for its next post (see [`Sends::Look`]) are
/// sent by the thread's look once they have waited this long: a poller
/// that stopped without posting delays its peer's completions by at most
/// this and one look, far inside the ACK delay a requester's timer allows
/// for (IBTA 9.7.6.1.3; the device reports `local_ca_ack_delay` 15, 134 ms).
pub(super) const DEFER_BOUND: Duration = Duration::from_micros(500);

/// What a turn does with what the engine has to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sends {
    /// Send it (the driver thread's turn when no poller is at work, and a
    /// poller's without busy polling preferred).
    Now,
    /// A busy poller's turn with busy polling preferred: the answers to
    /// one or two received requests wait for the poller's next post or
    /// turn (`poller_turn`).
    Poller,
    /// The driver thread's look while such a poller is at work: what the
    /// poller's turn would do, on its behalf, for what arrived while it
    /// was busy elsewhere (`ib_write_lat` watches memory between its
    /// polls of the send CQ), so its answer leaves with the poller's
    /// next post and the peer, polling for that answer, finds the
    /// poller's next request with it; and sends that a poller's turn left
    /// for its post stay until they have waited [`DEFER_BOUND`]. Sending
    /// them at the look instead put the ACK on the wire alone, a moment
    /// before the post that would have carried it, once in a while: the
    /// peer then took the ACK, went back to watching memory, and its
    /// next WRITE waited for its own driver's look (a millisecond), which
    /// is where `ib_write_lat`'s 99th percentile was (570 µs).
    Look,
}

/// [`turn`], for a busy poller with busy polling preferred
/// (`Sends::Poller`), or the thread's look on its behalf (`Sends::Look`):
/// when the turn received one or two packets, one of them
/// a request (a SEND, WRITE, READ or atomic: so the engine has its ACK or
/// response to send), what the engine then has to send waits for the next
/// turn or the next post, one turn at most. An `ib_write_lat`-style loop
/// then sees the peer's WRITE one `sendmmsg` sooner, and its ACK leaves
/// with the WRITE the loop posts in answer, in one `sendmmsg` (and
/// arrives with it, in one `recvmmsg`). A turn that received only ACKs (a
/// stream's sender, whose window they open) or many packets (a stream's
/// receiver) sends at once: deferring there held data and ACKs back from
/// streams. A poller that stops polling without a post leaves the sends to
/// the thread, which looks in within [`POLLER_FRESH`] while a poller is at
/// work and sends them once they have waited [`DEFER_BOUND`], and at once
/// when the poller leaves (`poller_left`); the device's ACK
/// delay (`local_ca_ack_delay`, IBTA 9.7.6.1.3: the requester's timeout
/// allows for it) is far longer.
///
/// `polled_at` is when the caller read the clock just before: a turn that
/// receives nothing goes on at that time, without reading the clock again
/// (an empty busy poll read it four times, 7 % of a ping-pong side).
pub(super) fn poller_turn<E: Engine + ?Sized>(
    port: &NetPort,
    e: &mut E,
    deferral: &Deferral,
    sends: Sends,
    polled_at: Option<Instant>,
) -> Turn {
    let got = port.receive(|now, meta, packet| e.handle(now, meta, packet));
    let now = match polled_at {
        Some(t) if got.packets == 0 => t,
        _ => port.clock().now(),
    };
    if e.poll_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
    let answers_wait = sends != Sends::Now
        && got.requests > 0
        && got.packets <= DEFER_MAX_RECEIVED
        && deferral.defer_once(now);
    let still_waiting = sends == Sends::Look
        && deferral
            .since()
            .is_some_and(|t| now.saturating_since(t) < DEFER_BOUND);
    let sends_deferred = answers_wait || still_waiting;
    let c = port.counters();
    if answers_wait {
        c.inc(NetCounter::AnswersDeferred);
    }
    if sends == Sends::Look && got.packets > 0 {
        c.add(NetCounter::LookRcvdPkts, got.packets as u64);
    }
    if sends_deferred {
        e.after_batch();
    } else {
        flush(port, e, now, deferral);
    }
    let received = got.packets;
    Turn {
        received,
        deadline: e.poll_timeout(),
        sends_deferred,
    }
}
