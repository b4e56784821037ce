//! `NetPort::receive`: wire -> engine. Every socket is read in `recvmmsg`
//! batches, GRO datagrams split into their packets, each packet's ICRC
//! checked against the headers rebuilt from what the kernel reported, and
//! the good ones handed over.

use super::*;
use rxe_core::transport::Instant;
use rxe_core::wire::Opcode;

impl NetPort {
    /// Reads every socket in `recvmmsg` batches (at most
    /// [`MAX_RECV_BATCHES`] per socket, see `has_unread`), checks each
    /// datagram's ICRC and hands each good packet (BTH..ICRC) to
    /// `handle`, with when its batch was received and what the headers
    /// said of it: the engine's `handle`, as the device drives it.
    pub fn receive(&self, mut handle: impl FnMut(Instant, &RecvMeta, &[u8])) -> Received {
        let handle = &mut handle;
        {
            let mut rx = lock(&self.rx);
            let sockets = self.sockets.read().unwrap_or_else(PoisonError::into_inner);
            let mut delivered = 0;
            // The clock is read per batch; the headers kept serve across
            // batches and sockets (they are kept with what they were built
            // for, the local address included).
            let mut to = Delivery {
                now: Instant::ZERO,
                requests: 0,
                headers: None,
            };
            let mut unread = false;
            for sock in sockets.iter() {
                let mut round = 0;
                while round < MAX_RECV_BATCHES {
                    let n = match sock.recv_batch(&mut rx) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            self.counters.inc(NetCounter::RecvErr);
                            tracing::debug!(error = %e, local = %sock.local_addr(), "receive failed");
                            break;
                        }
                    };
                    round += 1;
                    if n == 0 {
                        break;
                    }
                    to.now = self.clock.now();
                    for i in 0..n {
                        let Some((m, bytes)) = rx.get(i) else {
                            continue;
                        };
                        if m.segment.is_none() || m.truncated {
                            delivered += self.deliver(handle, sock, m, bytes, &mut to);
                            continue;
                        }
                        // Coalesced by UDP GRO: each segment is a packet
                        // of its own, with the datagram's TTL and TOS.
                        self.counters.inc(NetCounter::RcvdGroDatagrams);
                        for seg in gso::segments(bytes, m.segment) {
                            delivered += self.deliver(handle, sock, m, seg, &mut to);
                        }
                    }
                    if n < rx.offered() {
                        break;
                    }
                    if round == MAX_RECV_BATCHES {
                        unread = true;
                    }
                }
            }
            self.unread.store(unread, Ordering::Release);
            Received {
                packets: delivered + self.release_held(handle),
                requests: to.requests,
            }
        }
    }

    /// Hands an intact packet to the engine, through the fault layer when
    /// there is one (`fault` module). Returns the packets handed over.
    fn hand_over(
        &self,
        handle: &mut impl FnMut(Instant, &RecvMeta, &[u8]),
        now: Instant,
        meta: &RecvMeta,
        packet: &[u8],
    ) -> usize {
        let Some(faults) = &self.faults else {
            handle(now, meta, packet);
            return 1;
        };
        let fate = lock(faults).fate();
        let c = &self.counters;
        match fate {
            Fate::Drop => {
                c.inc(NetCounter::FaultDropped);
                return 0;
            }
            Fate::Reorder => {
                let mut held = lock(&self.held);
                if held.is_none() {
                    c.inc(NetCounter::FaultReordered);
                    *held = Some((*meta, packet.to_vec()));
                    return 0;
                }
                drop(held);
                handle(now, meta, packet);
            }
            Fate::Duplicate => {
                c.inc(NetCounter::FaultDuplicated);
                handle(now, meta, packet);
                handle(now, meta, packet);
            }
            Fate::Deliver => handle(now, meta, packet),
        }
        1 + self.release_held(handle)
    }

    /// The packet held back to reorder, after the one that overtook it.
    fn release_held(&self, handle: &mut impl FnMut(Instant, &RecvMeta, &[u8])) -> usize {
        if self.faults.is_none() {
            return 0;
        }
        let Some((meta, packet)) = lock(&self.held).take() else {
            return 0;
        };
        handle(self.clock.now(), &meta, &packet);
        1
    }

    fn deliver(
        &self,
        handle: &mut impl FnMut(Instant, &RecvMeta, &[u8]),
        sock: &RoceSocket,
        m: &RxMeta,
        bytes: &[u8],
        to: &mut Delivery,
    ) -> usize {
        let c = &self.counters;
        // With GRO the receive slots hold 64 KiB; a packet longer than any
        // RoCE packet (the slot without GRO) is still cut off here.
        if m.truncated || bytes.len() > SLOT_LEN {
            c.inc(NetCounter::RcvdTruncated);
            return 0;
        }
        let Some(src) = m.src else {
            c.inc(NetCounter::RcvdNoAddress);
            return 0;
        };
        let info = RecvInfo {
            src,
            dst: sock.local_addr(),
            hop_limit: m.hop_limit,
            traffic_class: m.traffic_class,
        };
        match encap::open_after(bytes, &info, self.options, &mut to.headers) {
            Ok(o) => {
                self.tap(&o.headers, bytes);
                if o.ipv4_df_clear {
                    c.inc(NetCounter::RcvdIpv4NoDf);
                }
                c.inc(NetCounter::RcvdPkts);
                c.add(NetCounter::RcvdBytes, bytes.len() as u64);
                if o.meta.ce {
                    c.inc(NetCounter::RcvdCe);
                }
                let request = Opcode(o.packet[0])
                    .info()
                    .is_some_and(|i| i.operation.is_request());
                to.requests += usize::from(request);
                self.hand_over(handle, to.now, &o.meta, o.packet)
            }
            Err(e) => {
                c.inc(e.rx_counter());
                tracing::trace!(error = %e, %src, len = bytes.len(), "datagram dropped");
                if self.tap_on.load(Ordering::Relaxed) {
                    // Recorded with ID 0 (the ID is unknown): dissect shows
                    // why it was dropped.
                    let f = encap::HeaderFields {
                        hop_limit: m.hop_limit.unwrap_or(DEFAULT_HOP_LIMIT),
                        traffic_class: m.traffic_class.unwrap_or(0),
                        ..Default::default()
                    };
                    if let Ok(h) = WireHeaders::new(src, info.dst, bytes.len(), &f) {
                        self.tap(&h, bytes);
                    }
                }
                0
            }
        }
    }
}

/// What `deliver` needs from the receive loop around it.
struct Delivery {
    /// When the batch being delivered was received.
    now: Instant,
    /// Of the intact packets, those a requester sent.
    requests: usize,
    /// The headers of the last packet, for the next one (`deliver`).
    headers: Option<(RecvInfo, WireHeaders)>,
}

/// What one receive handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Packets, through the fault layer.
    pub packets: usize,
    /// Of the intact packets, those a requester sent (not ACKs, READ
    /// responses or ATOMIC Acknowledges).
    pub requests: usize,
}
