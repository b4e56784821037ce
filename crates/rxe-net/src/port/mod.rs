//! `NetPort`: the sockets of one port (one per local address, and one per
//! multicast group it receives; with source ports, a few send-only sockets
//! per address) and the two moves of the data path:
//! `flush` (engine -> wire, `send.rs`) and `receive` (wire -> engine,
//! `receive.rs`), each batched, each with preallocated buffers.
//!
//! With [`Offload`] (`NetPort::with_offload`) `flush` sends runs of equal
//! packets as UDP GSO messages and `receive` splits coalesced (`UDP_GRO`)
//! datagrams into their packets (`gso` has the rules). A packet's ICRC is
//! sealed when its run is known, for the IPv4 Identification the kernel
//! will give it there, so each packet is sealed once (again only when a
//! refused or partial send changes its place in a run).
//!
//! **UDP source ports** ([`NetPort::with_source_ports`]). Kernel rxe sends
//! each QP's packets from UDP source port 0xC000 + a hash of the QPN, so
//! that switches spreading flows by their 5-tuple (ECMP, LAG hashing) give
//! different QPs different paths; the destination port is always 4791
//! (RoCEv2 Annex A17.3, its UDP header; not checked against the text;
//! receivers accept any source port). A UDP socket
//! has one port, so each address gets `n` more sockets bound to ports
//! from 0xC000 up (a port in use is skipped), used for sending only: a
//! QP's packets leave from socket `hash(QPN) % n`. The ICRC covers the UDP
//! header, so a packet is sealed for the port of the socket it leaves
//! from. With `n` = 0, or if no port could be bound, everything leaves
//! from port 4791 as before.
//!
//! The port knows nothing of engines: `flush` takes packets from a
//! closure (the device's `poll_transmit`) and `receive` hands each intact
//! packet to one (the device's `handle`). The device that drives the port
//! (rxe-verbs' `driver`) holds its engine's lock around both: the
//! application thread calls `flush` right after a post (lowest latency),
//! the driver thread and busy pollers call both. The port's own buffers
//! sit behind their own mutexes, which are then never contended.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::clock::Clock;
use crate::counters::{NetCounter, NetCounters};
use crate::encap::{self, OpenOptions, RecvInfo, WireHeaders, DEFAULT_HOP_LIMIT, MIN_PACKET};
use crate::fault::{Fate, FaultState, Faults};
use crate::gso;

use crate::socket::{
    Offload, RoceSocket, RxBatch, RxMeta, TxBatch, GRO_SLOT_LEN, MAX_BATCH, MAX_IOV, ROCE_V2_PORT,
};
use crate::tap::PcapTap;
use rxe_core::transport::{CongestionConfig, RecvMeta, Transmit};
use rxe_core::Gid;

mod receive;
pub use receive::Received;
mod send;

/// Room for the largest packet: 4096 bytes of payload, BTH and extended
/// headers (at most 40), pad and ICRC, with margin.
pub const SLOT_LEN: usize = 4096 + 256;
/// The first UDP source port of the send-only sockets, as kernel rxe's
/// `RXE_ROCE_V2_SPORT` (its ports are 0xC000 + a 14-bit hash of the QPN).
pub const SOURCE_PORT_BASE: u16 = 0xc000;
/// How many source-port sockets a device opens per address by default.
pub const DEFAULT_SOURCE_PORTS: u16 = 8;
/// Batches read from one socket per `receive` call, at most, so that
/// sending and timers get their turn under load.
pub const MAX_RECV_BATCHES: usize = 8;
/// What a received datagram costs its socket's buffer beyond its payload
/// (`skb` truesize: the struct, shared info, headers, rounding), about.
const TRUESIZE_OVERHEAD: usize = 1024;
/// The smallest port window, however small the buffer: one message of a
/// few packets must be able to go.
const MIN_PORT_WINDOW: usize = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One address's send-only sockets on UDP source ports.
#[derive(Debug)]
struct SourcePorts {
    ip: IpAddr,
    sockets: Vec<Arc<RoceSocket>>,
}

/// A packet for [`NetPort::flush`]: what the engine's `poll_transmit`
/// wrote into the slot it was given (BTH..ICRC, the ICRC left zero), and
/// the GID its `sgid_index` names in the device's table, the address it
/// leaves from (`None`: the table has no such entry; the packet is dropped
/// and counted, `sent_no_source_gid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing {
    pub transmit: Transmit,
    pub source: Option<Gid>,
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
    /// Send-only sockets per address on UDP source ports (module docs),
    /// grouped by address so that a packet finds its QP's at once.
    source_ports: u16,
    src_sockets: RwLock<Vec<SourcePorts>>,
    generation: AtomicU64,
    tx: Mutex<TxState>,
    rx: Mutex<RxBatch>,
    tap: Mutex<Option<PcapTap>>,
    tap_on: AtomicBool,
    counters: NetCounters,
    waker: Mutex<Option<Arc<mio::Waker>>>,
    unread: AtomicBool,
    send_blocked: AtomicBool,
    /// The congestion settings' IP half (`set_congestion`): whether data
    /// packets go out ECT(0).
    ect: AtomicBool,
    /// The IP TOS / traffic class of CNPs.
    cnp_traffic_class: AtomicU8,
    /// The seeded fault layer on the receive path (`fault` module), and
    /// the packet it holds back to reorder.
    faults: Option<Mutex<FaultState>>,
    held: Mutex<Option<(RecvMeta, Vec<u8>)>>,
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
            source_ports: 0,
            src_sockets: RwLock::new(Vec::new()),
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
            ect: AtomicBool::new(CongestionConfig::default().ecn),
            cnp_traffic_class: AtomicU8::new(CongestionConfig::default().cnp_traffic_class()),
            faults: None,
            held: Mutex::new(None),
        }
    }

    /// Drops, duplicates and reorders received packets at the rates of
    /// `faults` (the `fault` module; for tests and benchmarks).
    pub fn with_faults(mut self, faults: Option<Faults>) -> NetPort {
        self.faults = faults.map(|f| Mutex::new(FaultState::new(f)));
        self
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

    /// Each address added from now on also gets `n` send-only sockets on
    /// UDP source ports from [`SOURCE_PORT_BASE`] up (module docs); 0: all
    /// packets leave from the RoCEv2 port.
    pub fn with_source_ports(mut self, n: u16) -> NetPort {
        self.source_ports = n;
        self
    }

    /// The IP-level half of congestion control (rxe-core's `congestion`
    /// module has the decisions): data packets leave ECT(0) when `cc.ecn`,
    /// CNPs leave non-ECT with `cc.cnp_dscp`. The engine's half (CNPs,
    /// DCQCN) is set on the endpoint.
    pub fn set_congestion(&self, cc: &CongestionConfig) {
        self.ect.store(cc.ecn, Ordering::Relaxed);
        self.cnp_traffic_class
            .store(cc.cnp_traffic_class(), Ordering::Relaxed);
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
            let sockets = self.bind_source_ports(ip);
            if !sockets.is_empty() {
                self.src_sockets
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(SourcePorts { ip, sockets });
            }
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.wake_driver();
        Ok(())
    }

    /// Up to `source_ports` send sockets on `ip`, on the first free ports
    /// from [`SOURCE_PORT_BASE`] (at most four tries per socket wanted).
    fn bind_source_ports(&self, ip: IpAddr) -> Vec<Arc<RoceSocket>> {
        let want = usize::from(self.source_ports);
        let mut out = Vec::with_capacity(want);
        let ports = (SOURCE_PORT_BASE..=u16::MAX).take(want * 4);
        for port in ports {
            if out.len() == want {
                break;
            }
            match RoceSocket::bind_with(ip, port, self.offload) {
                Ok(s) => out.push(Arc::new(s)),
                Err(e) => tracing::debug!(%ip, port, error = %e, "source port not bound"),
            }
        }
        if out.len() < want {
            tracing::info!(%ip, bound = out.len(), want, "fewer UDP source ports than asked");
        }
        out
    }

    /// Closes the socket on `ip` (and its source-port sockets); whether
    /// there was one. Packets queued
    /// from it are dropped (counted as `sent_no_socket`).
    pub fn remove_address(&self, ip: IpAddr) -> bool {
        let removed = {
            let mut socks = self.sockets.write().unwrap_or_else(PoisonError::into_inner);
            let before = socks.len();
            socks.retain(|s| s.local_addr().ip() != ip);
            self.src_sockets
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|g| g.ip != ip);
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

    /// The port window (`rxe_core::transport::Endpoint::set_port_window`)
    /// that fits a receive buffer like this port's smallest, for packets
    /// of `mtu` payload bytes: the RC PSNs that the device's QPs together
    /// may have in flight to one peer. A peer on this host (loopback: the case where a
    /// send never waits) has the same buffer; the kernel charges each
    /// datagram's full buffer size (`truesize`: the payload, the headers,
    /// and about 1 KiB of bookkeeping) against the buffer as it reports it,
    /// and half of it is left for the peer's other senders and ACKs. `None`
    /// without a socket.
    pub fn port_window(&self, mtu: u32) -> Option<u32> {
        let buffer = self.sockets().iter().map(|s| s.recv_buffer_size()).min()?;
        let per_packet = mtu as usize + TRUESIZE_OVERHEAD;
        Some(((buffer / 2) / per_packet).clamp(MIN_PORT_WINDOW, u32::MAX as usize) as u32)
    }

    /// The send-only sockets on UDP source ports (the driver waits for
    /// them to become writable when a send was deferred).
    pub fn source_sockets(&self) -> Vec<Arc<RoceSocket>> {
        self.src_sockets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|g| g.sockets.iter().cloned())
            .collect()
    }

    /// The UDP source ports the port's packets leave from, by address
    /// (empty: port 4791 only).
    pub fn source_ports(&self) -> Vec<SocketAddr> {
        self.source_sockets()
            .iter()
            .map(|s| s.local_addr())
            .collect()
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

    /// The waker of the thread that drives the port (its driver): woken
    /// when an address comes or goes and when a send found a socket's
    /// buffer full, so that it registers for what it must wait for.
    pub fn set_waker(&self, waker: Option<Arc<mio::Waker>>) {
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
}
