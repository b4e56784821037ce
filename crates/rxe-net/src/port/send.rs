//! `NetPort::flush`: engine -> wire. Packets are staged in the send slots
//! (socket chosen, ICRC sealed for the IPv4 ID each will get), formed into
//! GSO runs where the socket can, and sent with `sendmmsg`.

use super::*;
use rxe_core::transport::{data_traffic_class, ECN_ECT0, ECN_MASK};
use rxe_core::wire::Opcode;

impl NetPort {
    /// Takes packets from `next` into the send slots until it has none
    /// (or a socket's buffer is full), fills each packet's ICRC for the
    /// headers the kernel will write, and sends in `sendmmsg` batches from
    /// the socket of the packet's source GID to UDP port 4791 of its
    /// destination GID. `next` is the engine's `poll_transmit` as the
    /// device drives it: it writes one packet (BTH..ICRC, the ICRC left
    /// zero) into the slot it is given and says where it goes. When a
    /// socket's buffer is full the packets stay queued and `next` is not
    /// called again until they are out (see `has_pending_sends`). Returns
    /// the packets handed to the kernel.
    pub fn flush(&self, mut next: impl FnMut(&mut [u8]) -> Option<Outgoing>) -> usize {
        let mut tx = lock(&self.tx);
        // Nothing queued and nothing to send (every empty busy poll):
        // found without the socket tables' locks, a third of this call's
        // own cost in an empty poll (`perf annotate`). Else the packet
        // waits in its free slot, which stays the same until a commit.
        let mut polled = None;
        if tx.batch.is_empty() {
            if let Some((_, slot)) = tx.batch.free_slot() {
                match next(slot) {
                    Some(t) => polled = Some(t),
                    None => {
                        self.send_blocked.store(false, Ordering::Release);
                        return 0;
                    }
                }
            }
        }
        let sockets = self.sockets.read().unwrap_or_else(PoisonError::into_inner);
        let src_sockets = self
            .src_sockets
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let sockets = Sockets {
            main: &sockets,
            by_port: &src_sockets,
        };
        let mut sent = 0;
        let mut blocked = self.send_queued(&mut tx, &sockets, &mut sent);
        while !blocked {
            let mut more = true;
            while let Some((i, slot)) = tx.batch.free_slot() {
                let Some(out) = polled.take().or_else(|| next(slot)) else {
                    more = false;
                    break;
                };
                if let Some(q) = self.stage(&sockets, out, slot) {
                    tx.slots[i] = q.0;
                    tx.sealed[i] = None;
                    if !tx.batch.commit(out.transmit.len, q.1) {
                        self.counters.inc(NetCounter::SentBadLength);
                    }
                }
            }
            blocked = self.send_queued(&mut tx, &sockets, &mut sent);
            if !more {
                break;
            }
        }
        if blocked {
            if !self.send_blocked.swap(true, Ordering::AcqRel) {
                // Whoever drives the port must now wait for writability.
                self.wake_driver();
            }
        } else {
            self.send_blocked.store(false, Ordering::Release);
        }
        sent
    }

    /// Checks one packet and picks its socket (its ICRC is sealed in
    /// `send_queued`, once its place in a GSO run is known); `None`
    /// (counted) drops it.
    fn stage(
        &self,
        sockets: &Sockets<'_>,
        out: Outgoing,
        slot: &mut [u8],
    ) -> Option<(TxSlot, SocketAddr)> {
        let c = &self.counters;
        let t = out.transmit;
        let Some(packet) = slot.get_mut(..t.len).filter(|p| p.len() >= MIN_PACKET) else {
            c.inc(NetCounter::SentBadLength);
            return None;
        };
        let Some(sgid) = out.source else {
            c.inc(NetCounter::SentNoSourceGid);
            return None;
        };
        let (src_ip, dst_ip) = (sgid.to_ip(), t.dest.dgid.to_ip());
        if src_ip.is_ipv4() != dst_ip.is_ipv4() {
            c.inc(NetCounter::SentFamilyMismatch);
            return None;
        }
        let Some(sock) = sockets.for_qp(src_ip, t.src_qpn) else {
            c.inc(NetCounter::SentNoSocket);
            return None;
        };
        let src = sock.local_addr();
        let dst = match (dst_ip, src) {
            // A link-local peer is reached through the source's interface.
            (IpAddr::V6(d), SocketAddr::V6(s)) if d.is_unicast_link_local() => {
                SocketAddr::V6(SocketAddrV6::new(d, self.udp_port, 0, s.scope_id()))
            }
            _ => SocketAddr::new(dst_ip, self.udp_port),
        };
        // TTL 0 would be refused by the kernel (and dropped by the first
        // hop): an address vector's 0 means "not set" here.
        let hop_limit = match t.dest.hop_limit {
            0 => DEFAULT_HOP_LIMIT,
            h => h,
        };
        // ECN (rxe-core's congestion module): a CNP leaves with its own
        // DSCP and not ECN-capable; every other packet ECT(0) when on.
        let traffic_class = if packet[0] == Opcode::CNP.0 {
            c.inc(NetCounter::SentCnps);
            self.cnp_traffic_class.load(Ordering::Relaxed)
        } else {
            let tc = data_traffic_class(self.ect.load(Ordering::Relaxed), t.dest.traffic_class);
            if tc & ECN_MASK == ECN_ECT0 {
                c.inc(NetCounter::SentEct);
            }
            tc
        };
        // What `WireHeaders::new` would refuse (sealing builds them later):
        // more than one UDP datagram carries. The families agree (above).
        let max = if src.is_ipv4() { 65_507 } else { 65_527 };
        if packet.len() > max {
            tracing::debug!(
                len = packet.len(),
                "engine packet longer than a datagram: not sent"
            );
            c.inc(NetCounter::SentBadLength);
            return None;
        }
        Some((
            TxSlot {
                src: Some(src),
                hop_limit,
                traffic_class,
            },
            dst,
        ))
    }

    /// Sends what is queued: packets with the same socket, TTL and TOS in
    /// one `sendmmsg`, as GSO runs where the socket has GSO. Returns
    /// whether a socket's buffer was full.
    fn send_queued(&self, tx: &mut TxState, sockets: &Sockets<'_>, sent: &mut usize) -> bool {
        if tx.batch.is_empty() {
            // Every empty busy poll comes here: it builds nothing.
            return false;
        }
        let c = &self.counters;
        let mut runs: [Range<usize>; MAX_BATCH] = std::array::from_fn(|_| 0..0);
        while !tx.batch.is_empty() {
            let r = tx.batch.pending();
            let first = tx.slots[r.start];
            let mut end = r.start + 1;
            while end < r.end && tx.slots[end] == first {
                end += 1;
            }
            let Some(sock) = first.src.and_then(|src| sockets.at(src)) else {
                // Its address was removed since the packet was queued.
                let run = end - r.start;
                c.add(NetCounter::SentNoSocket, run as u64);
                tx.batch.consume(run);
                continue;
            };
            let (n_runs, segment) = form_runs(&tx.batch, r.start..end, sock.gso(), &mut runs);
            if !self.seal_runs(tx, sock, &first, &runs[..n_runs]) {
                // Sealing refused the first packet (never: `stage` checked
                // it); drop it rather than loop.
                c.inc(NetCounter::SentBadLength);
                tx.batch.consume(1);
                continue;
            }
            let segment = segment.and_then(|s| u16::try_from(s).ok());
            match sock.send_runs(
                &tx.batch,
                &runs[..n_runs],
                segment,
                first.hop_limit,
                first.traffic_class,
            ) {
                Ok(0) => {
                    c.inc(NetCounter::SendDeferred);
                    return true;
                }
                Ok(m) => {
                    let mut packets = 0;
                    for run in &runs[..m] {
                        if run.len() > 1 {
                            c.inc(NetCounter::SentGsoMsgs);
                        }
                        for i in run.clone() {
                            c.add(NetCounter::SentBytes, tx.batch.packet_len(i) as u64);
                            self.tap_sent(tx, sock, &first, i);
                        }
                        packets += run.len();
                    }
                    c.add(NetCounter::SentPkts, packets as u64);
                    *sent += packets;
                    tx.batch.consume(packets);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.inc(NetCounter::SendDeferred);
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if segment.is_some()
                        && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) =>
                {
                    // The kernel (or the route's device) refuses UDP GSO:
                    // this socket sends one datagram per packet from now
                    // on; the packets are resealed for ID 0 next round.
                    if sock.disable_gso() {
                        c.inc(NetCounter::GsoFallback);
                    }
                    if !self.gso_refusal_logged.swap(true, Ordering::Relaxed) {
                        tracing::warn!(error = %e, local = %sock.local_addr(), "UDP GSO refused: sending one datagram per packet");
                    }
                }
                Err(e) => {
                    // The first message was refused (EMSGSIZE, ENETUNREACH
                    // ...): drop its packets, go on with the rest.
                    let run = runs[0].len().max(1);
                    c.add(NetCounter::SendErr, run as u64);
                    tracing::debug!(error = %e, dest = ?tx.batch.dest(r.start), "send failed");
                    tx.batch.consume(run);
                }
            }
        }
        false
    }

    /// Seals every packet of `runs` for the IPv4 Identification it will
    /// leave with (packet `k` of a run: `k`; IPv6: none), unless it was
    /// sealed for that already. `false`: the first could not be sealed.
    fn seal_runs(
        &self,
        tx: &mut TxState,
        sock: &RoceSocket,
        q: &TxSlot,
        runs: &[Range<usize>],
    ) -> bool {
        let v4 = sock.local_addr().is_ipv4();
        for run in runs {
            // One header per run; packet to packet only the ID changes
            // (and the length of a shorter last one, patched in).
            let mut base: Option<WireHeaders> = None;
            for (k, i) in run.clone().enumerate() {
                let id = if v4 { gso::segment_ipv4_id(k) } else { 0 };
                if tx.sealed[i] == Some(id) {
                    continue;
                }
                let len = tx.batch.packet_len(i);
                let h = match base {
                    Some(h) if h.carries(len) => Ok(h),
                    // A run goes to one destination from one socket.
                    Some(h) => h.with_payload_len(len),
                    None => tx
                        .batch
                        .dest(i)
                        .ok_or(encap::EncapError::TooShort { len })
                        .and_then(|dst| {
                            WireHeaders::outgoing(
                                sock.local_addr(),
                                dst,
                                len,
                                q.hop_limit,
                                q.traffic_class,
                            )
                        }),
                };
                let ok = h.and_then(|h| {
                    base = Some(h);
                    encap::seal(&h.with_ipv4_id(id), tx.batch.packet_mut(i))
                });
                if ok.is_err() && i == runs[0].start {
                    return false;
                }
                tx.sealed[i] = ok.is_ok().then_some(id);
            }
        }
        true
    }

    /// Records sent packet `i` in the tap, with the ID it was sealed for.
    fn tap_sent(&self, tx: &TxState, sock: &RoceSocket, q: &TxSlot, i: usize) {
        if !self.tap_on.load(Ordering::Relaxed) {
            return;
        }
        let (Some(dst), Some(id)) = (tx.batch.dest(i), tx.sealed[i]) else {
            return;
        };
        let p = tx.batch.packet(i);
        let f = encap::HeaderFields {
            hop_limit: q.hop_limit,
            traffic_class: q.traffic_class,
            ipv4_id: id,
            ..Default::default()
        };
        if let Ok(h) = WireHeaders::new(sock.local_addr(), dst, p.len(), &f) {
            self.tap(&h, p);
        }
    }
}

/// The sockets a packet can leave from: one per address on port 4791, and
/// the send-only ones on source ports (`port` module docs).
struct Sockets<'a> {
    main: &'a [Arc<RoceSocket>],
    by_port: &'a [SourcePorts],
}

impl Sockets<'_> {
    /// The socket QP `qpn`'s packets leave `ip` from: one of the address's
    /// source-port sockets chosen by a hash of the QPN, else its port-4791
    /// socket. Every packet of a QP leaves from the same port, so its
    /// packets stay in order on any path a switch picks for them.
    fn for_qp(&self, ip: IpAddr, qpn: u32) -> Option<&Arc<RoceSocket>> {
        match self.by_port.iter().find(|g| g.ip == ip) {
            Some(g) => qp_hash(qpn)
                .checked_rem(g.sockets.len())
                .and_then(|i| g.sockets.get(i)),
            None => self.main.iter().find(|s| s.local_addr().ip() == ip),
        }
    }

    /// The socket bound to `addr`.
    fn at(&self, addr: SocketAddr) -> Option<&Arc<RoceSocket>> {
        let own = self
            .by_port
            .iter()
            .filter(|g| g.ip == addr.ip())
            .flat_map(|g| g.sockets.iter());
        self.main.iter().chain(own).find(|s| s.local_addr() == addr)
    }
}

/// A QPN's 14-bit hash (Fibonacci hashing, as the kernel's `hash_32`), so
/// that consecutive QPNs spread over the source ports.
fn qp_hash(qpn: u32) -> usize {
    (qpn.wrapping_mul(0x61c8_8647) >> 18) as usize
}

/// Splits the pending packets `range` (one socket, TTL and TOS) into the
/// messages of one `sendmmsg` (into `runs`; returns how many, and the
/// `UDP_SEGMENT` size they share, `None` for plain datagrams). With `gso`
/// a message is a run of `gso::run_len`; one `sendmmsg` carries one
/// control message for all, so runs of another segment size, and a single
/// packet longer than the segment size (which would be cut), wait for the
/// next call. Without `gso` every packet is its own message.
fn form_runs(
    batch: &TxBatch,
    range: Range<usize>,
    gso: bool,
    runs: &mut [Range<usize>; MAX_BATCH],
) -> (usize, Option<usize>) {
    let mut n = 0;
    let mut used = 0;
    let mut segment: Option<usize> = None;
    // The longest single packet so far: a segment size chosen later must
    // not cut it.
    let mut longest_single = 0;
    let mut at = range.start;
    while at < range.end && n < MAX_BATCH {
        let len = if gso {
            let k = (range.end - at).min(MAX_BATCH);
            gso::run_len(
                k,
                |j| batch.packet_len(at + j),
                |j| batch.same_dest(at, at + j),
            )
        } else {
            1
        }
        .max(1);
        if used + len > MAX_IOV {
            break;
        }
        let size = batch.packet_len(at);
        if gso {
            match segment {
                None if len > 1 => {
                    if size < longest_single {
                        break;
                    }
                    segment = Some(size);
                }
                None => longest_single = longest_single.max(size),
                Some(s) if len > 1 && size != s => break,
                Some(s) if len == 1 && size > s => break,
                Some(_) => {}
            }
        }
        runs[n] = at..at + len;
        n += 1;
        used += len;
        at += len;
    }
    (n, segment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::Gid;

    fn batch(lens: &[(usize, u8)]) -> TxBatch {
        let mut b = TxBatch::new(lens.len().max(1), 2048);
        for &(len, d) in lens {
            b.free_slot().unwrap();
            let dest = SocketAddr::new(IpAddr::from([127, 0, 0, d]), ROCE_V2_PORT);
            assert!(b.commit(len, dest));
        }
        b
    }

    fn runs(lens: &[(usize, u8)], gso: bool) -> (Vec<Range<usize>>, Option<usize>) {
        let b = batch(lens);
        let mut r: [Range<usize>; MAX_BATCH] = std::array::from_fn(|_| 0..0);
        let (n, seg) = form_runs(&b, b.pending(), gso, &mut r);
        (r[..n].to_vec(), seg)
    }

    #[test]
    // A list of one range is meant: the messages of one call.
    #[allow(clippy::single_range_in_vec_init)]
    fn one_sendmmsg_takes_runs_of_one_segment_size() {
        // Without GSO: a message per packet, no segment size.
        assert_eq!(runs(&[(100, 1); 3], false), (vec![0..1, 1..2, 2..3], None));
        // A run, a shorter last, then singles no longer than the segment.
        let l = [(100, 1), (100, 1), (40, 1), (100, 2), (30, 3)];
        assert_eq!(runs(&l, true), (vec![0..3, 3..4, 4..5], Some(100)));
        // Another segment size waits for the next call.
        let l = [(100, 1), (100, 1), (200, 1), (200, 1)];
        assert_eq!(runs(&l, true), (vec![0..2], Some(100)));
        // A single packet longer than the segment size would be cut: it waits.
        let l = [(100, 1), (100, 1), (150, 2)];
        assert_eq!(runs(&l, true), (vec![0..2], Some(100)));
        // Singles first, then a run whose segment is shorter than one of them.
        let l = [(150, 2), (100, 1), (100, 1)];
        assert_eq!(runs(&l, true), (vec![0..1], None));
        let l = [(50, 2), (100, 1), (100, 1)];
        assert_eq!(runs(&l, true), (vec![0..1, 1..3], Some(100)));
        // Only singles (every destination differs): plain datagrams.
        let l = [(100, 1), (100, 2), (100, 3)];
        assert_eq!(runs(&l, true), (vec![0..1, 1..2, 2..3], None));
    }

    /// Hands out a fixed list of packets to one GID, as an engine would.
    fn emit(mut packets: Vec<Vec<u8>>, dgid: Gid) -> impl FnMut(&mut [u8]) -> Option<Outgoing> {
        move |buf| {
            let p = packets.pop()?;
            buf[..p.len()].copy_from_slice(&p);
            Some(Outgoing {
                transmit: rxe_core::transport::Transmit {
                    len: p.len(),
                    dest: rxe_core::transport::AddressVector {
                        dgid,
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                        flow_label: 0,
                        sl: 0,
                        src_port: None,
                    },
                    src_qpn: 1,
                },
                source: Some(Gid::from(IpAddr::from([127, 0, 0, 170]))),
            })
        }
    }

    /// A kernel that refuses UDP_SEGMENT: here Linux's EINVAL for GSO on a
    /// socket with SO_NO_CHECK. The port turns GSO off for the socket,
    /// counts it, reseals the run's packets for ID 0 and sends them one
    /// datagram each.
    #[test]
    fn refused_gso_falls_back_to_plain_datagrams() {
        let (a, b) = (
            IpAddr::from([127, 0, 0, 170]),
            IpAddr::from([127, 0, 0, 171]),
        );
        let port = NetPort::with_options(Clock::new(), 47911, OpenOptions::default())
            .with_offload(Offload::BOTH);
        port.add_address(a).unwrap();
        let sock = port.sockets()[0].clone();
        crate::socket::setsockopt_int(
            std::os::fd::AsFd::as_fd(&*sock),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            1,
        )
        .unwrap();
        let rx = RoceSocket::bind(b, 47911).unwrap();
        let packets: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 100]).collect();
        assert_eq!(port.flush(emit(packets.clone(), Gid::from(b))), 4);
        let c = port.counters();
        assert_eq!(c.get(NetCounter::GsoFallback), 1, "{:?}", c.snapshot());
        assert_eq!(c.get(NetCounter::SentGsoMsgs), 0);
        assert_eq!(c.get(NetCounter::SendErr), 0);
        assert!(!sock.gso());
        let mut batch = RxBatch::new(8, 256);
        let mut got = 0;
        for _ in 0..200 {
            let n = rx.recv_batch(&mut batch).unwrap();
            for i in 0..n {
                let (m, bytes) = batch.get(i).unwrap();
                assert_eq!(bytes.len(), 100);
                // Sealed for ID 0, what a plain datagram carries.
                let h = WireHeaders::outgoing(m.src.unwrap(), rx.local_addr(), 100, 64, 0).unwrap();
                rxe_core::wire::icrc::verify(&h.icrc_scope(), bytes).unwrap();
                got += 1;
            }
            if got == 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, 4);
    }
}
