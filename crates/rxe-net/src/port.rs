//! `NetPort`: the sockets of one port (one per local address) and the two
//! moves of the data path: `flush` (engine -> wire) and `receive` (wire ->
//! engine), each batched, each with preallocated buffers.
//!
//! The caller holds the engine's lock around `flush` and `receive`: the
//! application thread calls `flush` right after a post (lowest latency),
//! the driver thread calls both. The port's own buffers sit behind their
//! own mutexes, which are then never contended.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::clock::Clock;
use crate::counters::{NetCounter, NetCounters};
use crate::encap::{self, OpenOptions, RecvInfo, WireHeaders, DEFAULT_HOP_LIMIT, MIN_PACKET};
use crate::engine::Engine;
use crate::netif::ip_of_gid;
use crate::socket::{RoceSocket, RxBatch, RxMeta, TxBatch, MAX_BATCH, ROCE_V2_PORT};
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
}

/// The I/O side of one port.
#[derive(Debug)]
pub struct NetPort {
    clock: Clock,
    udp_port: u16,
    options: OpenOptions,
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
            sockets: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            tx: Mutex::new(TxState {
                batch: TxBatch::new(MAX_BATCH, SLOT_LEN),
                slots: vec![TxSlot::default(); MAX_BATCH].into_boxed_slice(),
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
            let s = RoceSocket::bind(ip, self.udp_port)?;
            tracing::info!(
                local = %s.local_addr(),
                recv_buffer = s.recv_buffer_size(),
                send_buffer = s.send_buffer_size(),
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

    /// Checks one engine packet, picks its socket and seals its ICRC;
    /// `None` (counted) drops it.
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
        let sealed = WireHeaders::outgoing(src, dst, t.len, hop_limit, traffic_class)
            .and_then(|h| encap::seal(&h, packet));
        if let Err(e) = sealed {
            tracing::debug!(error = %e, "engine packet not sent");
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

    /// Sends what is queued, in runs of packets with the same socket, TTL and
    /// TOS. Returns whether a socket's buffer was full.
    fn send_queued(&self, tx: &mut TxState, sockets: &[Arc<RoceSocket>], sent: &mut usize) -> bool {
        let c = &self.counters;
        while !tx.batch.is_empty() {
            let r = tx.batch.pending();
            let first = tx.slots[r.start];
            let mut end = r.start + 1;
            while end < r.end && tx.slots[end] == first {
                end += 1;
            }
            let run = end - r.start;
            let Some(sock) = first
                .src
                .and_then(|src| sockets.iter().find(|s| s.local_addr() == src))
            else {
                // Its address was removed since the packet was queued.
                c.add(NetCounter::SentNoSocket, run as u64);
                tx.batch.consume(run);
                continue;
            };
            match sock.send_batch(
                &tx.batch,
                r.start..end,
                first.hop_limit,
                first.traffic_class,
            ) {
                Ok(0) => {
                    c.inc(NetCounter::SendDeferred);
                    return true;
                }
                Ok(n) => {
                    for i in r.start..r.start + n {
                        let p = tx.batch.packet(i);
                        c.add(NetCounter::SentBytes, p.len() as u64);
                        if self.tap_on.load(Ordering::Relaxed) {
                            if let Some(dst) = tx.batch.dest(i) {
                                if let Ok(h) = WireHeaders::outgoing(
                                    sock.local_addr(),
                                    dst,
                                    p.len(),
                                    first.hop_limit,
                                    first.traffic_class,
                                ) {
                                    self.tap(&h, p);
                                }
                            }
                        }
                    }
                    c.add(NetCounter::SentPkts, n as u64);
                    *sent += n;
                    tx.batch.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.inc(NetCounter::SendDeferred);
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The first packet of the run was refused (EMSGSIZE,
                    // ENETUNREACH ...): drop it, go on with the rest.
                    c.inc(NetCounter::SendErr);
                    tracing::debug!(error = %e, dest = ?tx.batch.dest(r.start), "send failed");
                    tx.batch.consume(1);
                }
            }
        }
        false
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
                        if let Some((m, bytes)) = rx.get(i) {
                            delivered += self.deliver(engine, sock, m, bytes, now);
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
        if m.truncated {
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
