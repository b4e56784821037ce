//! `NetPort`: the sockets of one port (one per local address) and the two
//! moves of the data path: `flush` (engine -> wire) and `receive` (wire ->
//! engine), each batched, each with preallocated buffers.
//!
//! With [`Offload`] (`NetPort::with_offload`) `flush` sends runs of equal
//! packets as UDP GSO messages and `receive` splits coalesced (`UDP_GRO`)
//! datagrams into their packets (`gso` has the rules). A packet's ICRC is
//! sealed when its run is known, for the IPv4 Identification the kernel
//! will give it there, so each packet is sealed once (again only when a
//! refused or partial send changes its place in a run).
//!
//! The caller holds the engine's lock around `flush` and `receive`: the
//! application thread calls `flush` right after a post (lowest latency),
//! the driver thread calls both. The port's own buffers sit behind their
//! own mutexes, which are then never contended.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::clock::Clock;
use crate::counters::{NetCounter, NetCounters};
use crate::encap::{self, OpenOptions, RecvInfo, WireHeaders, DEFAULT_HOP_LIMIT, MIN_PACKET};
use crate::engine::Engine;
use crate::gso;
use crate::netif::ip_of_gid;
use crate::socket::{
    Offload, RoceSocket, RxBatch, RxMeta, TxBatch, GRO_SLOT_LEN, MAX_BATCH, MAX_IOV, ROCE_V2_PORT,
};
use crate::tap::PcapTap;

/// Room for the largest packet: 4096 bytes of payload, BTH and extended
/// headers (at most 40), pad and ICRC, with margin.
pub const SLOT_LEN: usize = 4096 + 256;
/// Batches read from one socket per `receive` call, at most, so that
/// sending and timers get their turn under load.
pub const MAX_RECV_BATCHES: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a queued packet goes out, beyond its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct TxSlot {
    src: Option<SocketAddr>,
    hop_limit: u8,
    traffic_class: u8,
}

#[derive(Debug)]
struct TxState {
    batch: TxBatch,
    slots: Box<[TxSlot]>,
    /// The IPv4 Identification each queued packet's ICRC was sealed for;
    /// `None`: not sealed yet.
    sealed: Box<[Option<u16>]>,
}

/// The I/O side of one port.
#[derive(Debug)]
pub struct NetPort {
    clock: Clock,
    udp_port: u16,
    options: OpenOptions,
    offload: Offload,
    /// A GSO refusal was logged (once per port).
    gso_refusal_logged: AtomicBool,
    sockets: RwLock<Vec<Arc<RoceSocket>>>,
    generation: AtomicU64,
    tx: Mutex<TxState>,
    rx: Mutex<RxBatch>,
    tap: Mutex<Option<PcapTap>>,
    tap_on: AtomicBool,
    counters: NetCounters,
    waker: Mutex<Option<Arc<mio::Waker>>>,
    unread: AtomicBool,
    send_blocked: AtomicBool,
}

impl NetPort {
    /// A port with no address yet, on UDP port 4791.
    pub fn new(clock: Clock) -> NetPort {
        NetPort::with_options(clock, ROCE_V2_PORT, OpenOptions::default())
    }

    /// A port on another UDP port (tests, or two stacks on one address) and
    /// with other receive checks.
    pub fn with_options(clock: Clock, udp_port: u16, options: OpenOptions) -> NetPort {
        NetPort {
            clock,
            udp_port,
            options,
            offload: Offload::NONE,
            gso_refusal_logged: AtomicBool::new(false),
            sockets: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            tx: Mutex::new(TxState {
                batch: TxBatch::new(MAX_BATCH, SLOT_LEN),
                slots: vec![TxSlot::default(); MAX_BATCH].into_boxed_slice(),
                sealed: vec![None; MAX_BATCH].into_boxed_slice(),
            }),
            rx: Mutex::new(RxBatch::new(MAX_BATCH, SLOT_LEN)),
            tap: Mutex::new(None),
            tap_on: AtomicBool::new(false),
            counters: NetCounters::new(),
            waker: Mutex::new(None),
            unread: AtomicBool::new(false),
            send_blocked: AtomicBool::new(false),
        }
    }

    /// The port with segmentation offloads (before any address is added:
    /// they are set up when a socket is bound). With GRO the receive slots
    /// grow to [`GRO_SLOT_LEN`] (64 of them: 4 MiB of address space, of
    /// which only the pages datagrams reach become resident).
    pub fn with_offload(mut self, offload: Offload) -> NetPort {
        self.offload = offload;
        let slot_len = if offload.gro { GRO_SLOT_LEN } else { SLOT_LEN };
        self.rx = Mutex::new(RxBatch::new(MAX_BATCH, slot_len));
        self
    }

    /// The offloads asked for (a socket may have had to do without:
    /// `RoceSocket::gso`, `RoceSocket::gro`).
    pub fn offload(&self) -> Offload {
        self.offload
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub fn counters(&self) -> &NetCounters {
        &self.counters
    }

    /// The UDP port the sockets bind and packets go to.
    pub fn udp_port(&self) -> u16 {
        self.udp_port
    }

    /// Opens a socket on local address `ip` (a no-op if there is one; a
    /// multicast group is [`NetPort::join_group`]'s). Fails as
    /// [`RoceSocket::bind`] does: `AddrInUse`, `AddrNotAvailable` ...
    pub fn add_address(&self, ip: IpAddr) -> io::Result<()> {
        if ip.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{ip} is a multicast group, not a local address"),
            ));
        }
        {
            let mut socks = self.sockets.write().unwrap_or_else(PoisonError::into_inner);
            if socks.iter().any(|s| s.local_addr().ip() == ip) {
                return Ok(());
            }
            let s = RoceSocket::bind_with(ip, self.udp_port, self.offload)?;
            tracing::info!(
                local = %s.local_addr(),
                recv_buffer = s.recv_buffer_size(),
                send_buffer = s.send_buffer_size(),
                gso = s.gso(),
                gro = s.gro(),
                "port address added"
            );
            socks.push(Arc::new(s));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.wake_driver();
        Ok(())
    }

    /// Closes the socket on `ip`; whether there was one. Packets queued
    /// from it are dropped (counted as `sent_no_socket`).
    pub fn remove_address(&self, ip: IpAddr) -> bool {
        let removed = {
            let mut socks = self.sockets.write().unwrap_or_else(PoisonError::into_inner);
            let before = socks.len();
            socks.retain(|s| s.local_addr().ip() != ip);
            before != socks.len()
        };
        if removed {
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.wake_driver();
        }
        removed
    }

    /// Starts receiving multicast `group`: a socket bound to it, joined on
    /// the host on the interface of the port's first address of the
    /// group's family (a no-op if the port receives it already). Its
    /// datagrams reach the engine with the group as destination GID.
    pub fn join_group(&self, group: IpAddr) -> io::Result<()> {
        {
            let mut socks = self.sockets.write().unwrap_or_else(PoisonError::into_inner);
            if socks.iter().any(|s| s.local_addr().ip() == group) {
                return Ok(());
            }
            let member_of = socks
                .iter()
                .map(|s| s.local_addr().ip())
                .find(|ip| !ip.is_multicast() && ip.is_ipv4() == group.is_ipv4())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::AddrNotAvailable,
                        format!("no local address of {group}'s family to join it on"),
                    )
                })?;
            let s = RoceSocket::bind_group(group, self.udp_port, member_of)?;
            tracing::info!(%group, %member_of, "multicast group joined");
            socks.push(Arc::new(s));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.wake_driver();
        Ok(())
    }

    /// Stops receiving multicast `group` (closing its socket leaves the
    /// group on the host); whether the port was receiving it.
    pub fn leave_group(&self, group: IpAddr) -> bool {
        if !group.is_multicast() {
            return false;
        }
        let left = self.remove_address(group);
        if left {
            tracing::info!(%group, "multicast group left");
        }
        left
    }

    /// The multicast groups the port receives.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.socket_ips().filter(IpAddr::is_multicast).collect()
    }

    /// The local (unicast) addresses, in the order they were added.
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.socket_ips().filter(|ip| !ip.is_multicast()).collect()
    }

    fn socket_ips(&self) -> impl Iterator<Item = IpAddr> {
        let socks = self.sockets.read().unwrap_or_else(PoisonError::into_inner);
        socks
            .iter()
            .map(|s| s.local_addr().ip())
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The sockets (the driver registers them for readiness).
    pub fn sockets(&self) -> Vec<Arc<RoceSocket>> {
        self.sockets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Changes whenever an address is added or removed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Starts (`Some`) or stops (`None`) writing every packet to a pcap or
    /// pcapng file; returns the tap that was set, for the caller to `finish`.
    pub fn set_tap(&self, mut tap: Option<PcapTap>) -> Option<PcapTap> {
        if let Some(t) = &mut tap {
            // A pcapng capture describes the port by its addresses.
            t.set_addresses(&self.addresses());
        }
        let mut t = lock(&self.tap);
        self.tap_on.store(tap.is_some(), Ordering::Release);
        std::mem::replace(&mut *t, tap)
    }

    /// The last `receive` stopped at its bound with datagrams left: call it
    /// again before sleeping (readiness is edge-triggered).
    pub fn has_unread(&self) -> bool {
        self.unread.load(Ordering::Acquire)
    }

    /// Packets are queued because a socket's buffer was full: wait for it to
    /// become writable, then `flush`.
    pub fn has_pending_sends(&self) -> bool {
        self.send_blocked.load(Ordering::Acquire)
    }

    pub(crate) fn set_waker(&self, waker: Option<Arc<mio::Waker>>) {
        *lock(&self.waker) = waker;
    }

    fn wake_driver(&self) {
        if let Some(w) = lock(&self.waker).as_ref() {
            if let Err(e) = w.wake() {
                tracing::warn!(error = %e, "waking the driver failed");
            }
        }
    }

    fn tap(&self, headers: &WireHeaders, packet: &[u8]) {
        if !self.tap_on.load(Ordering::Acquire) {
            return;
        }
        if let Some(tap) = lock(&self.tap).as_mut() {
            if let Err(e) = tap.record(headers, packet) {
                self.counters.inc(NetCounter::TapErr);
                tracing::debug!(error = %e, "pcap tap");
            }
        }
    }

    /// Drains the engine's `poll_transmit` into the send slots, fills each
    /// packet's ICRC for the headers the kernel will write, and sends in
    /// `sendmmsg` batches from the socket of the packet's source GID to
    /// UDP port 4791 of its destination GID. When a socket's buffer is full
    /// the packets stay queued and the engine is not asked for more until
    /// they are out (see `has_pending_sends`). Calls `after_batch` at the
    /// end. Returns the packets handed to the kernel.
    pub fn flush<E: Engine + ?Sized>(&self, engine: &mut E) -> usize {
        let sent = {
            let mut tx = lock(&self.tx);
            let sockets = self.sockets.read().unwrap_or_else(PoisonError::into_inner);
            let now = self.clock.now();
            let mut sent = 0;
            let mut blocked = self.send_queued(&mut tx, &sockets, &mut sent);
            while !blocked {
                let mut engine_has_more = true;
                while let Some((i, slot)) = tx.batch.free_slot() {
                    let Some(t) = engine.poll_transmit(now, slot) else {
                        engine_has_more = false;
                        break;
                    };
                    if let Some(q) = self.stage(engine, &sockets, t, slot) {
                        tx.slots[i] = q.0;
                        tx.sealed[i] = None;
                        if !tx.batch.commit(t.len, q.1) {
                            self.counters.inc(NetCounter::SentBadLength);
                        }
                    }
                }
                blocked = self.send_queued(&mut tx, &sockets, &mut sent);
                if !engine_has_more {
                    break;
                }
            }
            if blocked {
                if !self.send_blocked.swap(true, Ordering::AcqRel) {
                    // The driver must now wait for writability.
                    self.wake_driver();
                }
            } else {
                self.send_blocked.store(false, Ordering::Release);
            }
            sent
        };
        engine.after_batch();
        sent
    }

    /// Checks one engine packet and picks its socket (its ICRC is sealed in
    /// `send_queued`, once its place in a GSO run is known); `None`
    /// (counted) drops it.
    fn stage<E: Engine + ?Sized>(
        &self,
        engine: &E,
        sockets: &[Arc<RoceSocket>],
        t: rxe_core::transport::Transmit,
        slot: &mut [u8],
    ) -> Option<(TxSlot, SocketAddr)> {
        let c = &self.counters;
        let Some(packet) = slot.get_mut(..t.len).filter(|p| p.len() >= MIN_PACKET) else {
            c.inc(NetCounter::SentBadLength);
            return None;
        };
        let Some(sgid) = engine.source_gid(t.dest.sgid_index) else {
            c.inc(NetCounter::SentNoSourceGid);
            return None;
        };
        let (src_ip, dst_ip) = (ip_of_gid(sgid), ip_of_gid(t.dest.dgid));
        if src_ip.is_ipv4() != dst_ip.is_ipv4() {
            c.inc(NetCounter::SentFamilyMismatch);
            return None;
        }
        let Some(sock) = sockets.iter().find(|s| s.local_addr().ip() == src_ip) else {
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
        let traffic_class = t.dest.traffic_class;
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
    fn send_queued(&self, tx: &mut TxState, sockets: &[Arc<RoceSocket>], sent: &mut usize) -> bool {
        let c = &self.counters;
        let mut runs: [Range<usize>; MAX_BATCH] = std::array::from_fn(|_| 0..0);
        while !tx.batch.is_empty() {
            let r = tx.batch.pending();
            let first = tx.slots[r.start];
            let mut end = r.start + 1;
            while end < r.end && tx.slots[end] == first {
                end += 1;
            }
            let Some(sock) = first
                .src
                .and_then(|src| sockets.iter().find(|s| s.local_addr() == src))
            else {
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
            // One header per run and length; packet to packet only the ID
            // changes (and the length of a shorter last one).
            let mut base: Option<WireHeaders> = None;
            for (k, i) in run.clone().enumerate() {
                let id = if v4 { gso::segment_ipv4_id(k) } else { 0 };
                if tx.sealed[i] == Some(id) {
                    continue;
                }
                let len = tx.batch.packet_len(i);
                let h = match base {
                    Some(h) if h.udp_header()[4..6] == ((len + 8) as u16).to_be_bytes() => Ok(h),
                    _ => tx
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

    /// Reads every socket in `recvmmsg` batches (at most
    /// [`MAX_RECV_BATCHES`] per socket, see `has_unread`), checks each
    /// datagram's ICRC and hands the good ones to `engine.handle`. Calls
    /// `after_batch` at the end. Returns the packets handed over.
    pub fn receive<E: Engine + ?Sized>(&self, engine: &mut E) -> usize {
        let delivered = {
            let mut rx = lock(&self.rx);
            let sockets = self.sockets.read().unwrap_or_else(PoisonError::into_inner);
            let mut delivered = 0;
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
                    let now = self.clock.now();
                    for i in 0..n {
                        let Some((m, bytes)) = rx.get(i) else {
                            continue;
                        };
                        if m.segment.is_none() || m.truncated {
                            delivered += self.deliver(engine, sock, m, bytes, now);
                            continue;
                        }
                        // Coalesced by UDP GRO: each segment is a packet
                        // of its own, with the datagram's TTL and TOS.
                        self.counters.inc(NetCounter::RcvdGroDatagrams);
                        for seg in gso::segments(bytes, m.segment) {
                            delivered += self.deliver(engine, sock, m, seg, now);
                        }
                    }
                    if n < rx.slots() {
                        break;
                    }
                    if round == MAX_RECV_BATCHES {
                        unread = true;
                    }
                }
            }
            self.unread.store(unread, Ordering::Release);
            delivered
        };
        engine.after_batch();
        delivered
    }

    fn deliver<E: Engine + ?Sized>(
        &self,
        engine: &mut E,
        sock: &RoceSocket,
        m: &RxMeta,
        bytes: &[u8],
        now: rxe_core::transport::Instant,
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
        match encap::open(bytes, &info, self.options) {
            Ok(o) => {
                self.tap(&o.headers, bytes);
                if o.ipv4_df_clear {
                    c.inc(NetCounter::RcvdIpv4NoDf);
                }
                c.inc(NetCounter::RcvdPkts);
                c.add(NetCounter::RcvdBytes, bytes.len() as u64);
                engine.handle(now, &o.meta, o.packet);
                1
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

    /// Sends a fixed list of packets to one GID.
    struct Emit(Vec<Vec<u8>>, [u8; 16]);

    impl Engine for Emit {
        fn handle(
            &mut self,
            _: rxe_core::transport::Instant,
            _: &rxe_core::transport::RecvMeta,
            _: &[u8],
        ) {
        }
        fn poll_transmit(
            &mut self,
            _: rxe_core::transport::Instant,
            buf: &mut [u8],
        ) -> Option<rxe_core::transport::Transmit> {
            let p = self.0.pop()?;
            buf[..p.len()].copy_from_slice(&p);
            Some(rxe_core::transport::Transmit {
                len: p.len(),
                dest: rxe_core::transport::AddressVector {
                    dgid: self.1,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                    sl: 0,
                    src_port: None,
                },
                src_qpn: 1,
            })
        }
        fn poll_timeout(&mut self) -> Option<rxe_core::transport::Instant> {
            None
        }
        fn handle_timeout(&mut self, _: rxe_core::transport::Instant) {}
        fn source_gid(&self, i: u8) -> Option<[u8; 16]> {
            (i == 0).then(|| crate::netif::gid_of(IpAddr::from([127, 0, 0, 170])))
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
        let mut e = Emit(packets.clone(), crate::netif::gid_of(b));
        assert_eq!(port.flush(&mut e), 4);
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
