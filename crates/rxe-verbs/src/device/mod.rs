//! A device: one software RoCE NIC with one port, on a network interface or
//! on one local address (`rdma link add rxe0 type rxe netdev eth0`).
//!
//! The device owns its transport engine (behind one lock), its UDP sockets
//! and the driver thread that feeds them to the engine, a monitor thread
//! that keeps the GID table and the port state in step with the host's
//! addresses, and the thread that delivers asynchronous events.

use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rxe_core::transport::{CongestionConfig, Endpoint, PathMtu, QpCaps};
use rxe_core::Gid;
use rxe_net::{Clock, NetPort, Offload, PcapTap};

use crate::driver::{Driver, DriverWaker, Engine as _};

use crate::attr::{DeviceAttr, GidEntry, GidType, LinkLayer, PortAttr, PortState};
use crate::client::{ClientData, ClientId};
use crate::engine::DeviceEngine;
use crate::error::{Result, VerbsError};
use crate::event::{AsyncEvent, EventHub};
use crate::registry;

mod config;
mod discovery;

pub use config::{DeviceConfig, Probe, Target};

/// At most this many posts in a row are corked ([`Device::kick_corked`]):
/// a batch of that many packets is past where batching gains more.
const CORK_MAX: u32 = 32;
/// Corked packets leave at the latest this long after the first post
/// corked: about one loopback round trip, so a program that posts and then
/// stops polling waits no longer for them than for an ACK.
const CORK_DELAY: Duration = Duration::from_micros(20);
use discovery::{discover, node_guid, port_attr, qpn_start, Discovered};

/// The device's only port.
pub const PORT: u8 = 1;
/// GID table size: one entry per address of the interface.
pub const GID_TABLE_LEN: u16 = 32;
/// How often the monitor looks at the host's addresses.
const MONITOR_PERIOD: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
struct PortInfo {
    state: PortState,
    netdev: String,
    netdev_mtu: u32,
}

pub(crate) struct DeviceShared {
    pub name: String,
    target: Target,
    attr: DeviceAttr,
    pub(crate) engine: Arc<Mutex<DeviceEngine>>,
    pub(crate) net: Arc<NetPort>,
    driver: Mutex<Option<Driver>>,
    waker: DriverWaker,
    pub(crate) events: EventHub,
    client_data: Mutex<HashMap<ClientId, ClientData>>,
    removed: AtomicBool,
    port: Mutex<PortInfo>,
    monitor: Mutex<Option<JoinHandle<()>>>,
    /// The CM: its configuration, then its agent on QP1 (made at first use).
    pub(crate) cm: Mutex<crate::cm::agent::CmSlot>,
}

/// A handle to a device; clones name the same device.
#[derive(Clone)]
pub struct Device(pub(crate) Arc<DeviceShared>);

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.0.name)
            .field("target", &self.0.target)
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn bind_error(e: std::io::Error, ip: IpAddr) -> VerbsError {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => VerbsError::PortBusy {
            addr: ip,
            port: rxe_core::wire::frame::ROCE_V2_PORT,
        },
        std::io::ErrorKind::AddrNotAvailable => VerbsError::AddressNotLocal(ip),
        _ => VerbsError::Io(e),
    }
}

impl Device {
    /// Adds a device (`rdma link add`). Fails if the address is not local
    /// ([`VerbsError::AddressNotLocal`]), its port 4791 is busy
    /// ([`VerbsError::PortBusy`]), or the interface does not exist or has
    /// no address.
    pub fn add(config: DeviceConfig) -> Result<Device> {
        let _ops = registry::ops_lock();
        let name = match &config.name {
            Some(n) if registry::name_taken(n) => return Err(VerbsError::NameInUse(n.clone())),
            Some(n) => n.clone(),
            None => registry::free_name(),
        };
        let Discovered {
            addrs,
            netdev,
            mtu: netdev_mtu,
            mac,
            ..
        } = match discover(&config.target) {
            Some(d) => d,
            None => return Err(config::missing(&config.target)),
        };
        if let Target::Address(ip) = config.target {
            if addrs.is_empty() && netdev.is_empty() {
                // No interface holds it; binding tells for sure below.
                tracing::debug!(%ip, "no interface found for the address");
            }
        }
        let clock = Clock::new();
        let offload = if config.gso {
            Offload::BOTH
        } else {
            Offload::NONE
        };
        let net = Arc::new(
            NetPort::new(clock)
                .with_offload(offload)
                .with_source_ports(config.source_ports)
                .with_faults(config.faults),
        );
        net.set_congestion(&config.congestion);
        let bind: Vec<IpAddr> = match &config.target {
            Target::Address(ip) => vec![*ip],
            Target::Addresses(v) if v.is_empty() => return Err(config::missing(&config.target)),
            Target::Addresses(v) => v.clone(),
            Target::Interface(n) => {
                if addrs.is_empty() {
                    return Err(VerbsError::NoAddress(n.clone()));
                }
                addrs.clone()
            }
        };
        for ip in &bind {
            net.add_address(*ip).map_err(|e| bind_error(e, *ip))?;
        }
        if let Some(path) = &config.capture {
            net.set_tap(Some(PcapTap::create(path)?));
        }
        let active_mtu = rxe_net::netif::mtu_to_ib(if netdev_mtu == 0 { 1500 } else { netdev_mtu });
        let attr = DeviceAttr::rxe(node_guid(mac, bind.first().copied()));
        let caps = QpCaps {
            port_count: 1,
            pkey_table_len: 1,
            gid_table_len: GID_TABLE_LEN,
            max_path_mtu: active_mtu,
            max_rd_atomic: attr.max_qp_init_rd_atom,
            max_dest_rd_atomic: attr.max_qp_rd_atom,
        };
        let events = EventHub::new(&name)?;
        let mut ep = Endpoint::new(caps);
        ep.set_next_qpn(qpn_start(&name));
        ep.set_gid_table(bind.iter().map(|ip| Some(Gid::from(*ip))).collect());
        ep.set_congestion(config.congestion);
        ep.set_adaptive_retransmit(config.adaptive_retransmit);
        ep.set_selective_retransmit(config.selective_retransmit);
        // Many QPs together must not overflow a peer's socket buffer
        // (`transport::port_window`).
        let port_window = net.port_window(active_mtu.bytes());
        ep.set_port_window(port_window);
        let mut engine = DeviceEngine::new(ep, events.sender());
        engine.cork = config.cork;
        let engine = Arc::new(Mutex::new(engine));
        let driver = Driver::spawn(net.clone(), engine.clone())?;
        let waker = driver.waker();
        let shared = Arc::new(DeviceShared {
            name: name.clone(),
            target: config.target.clone(),
            attr,
            engine,
            net,
            driver: Mutex::new(Some(driver)),
            waker,
            events,
            client_data: Mutex::default(),
            removed: AtomicBool::new(false),
            port: Mutex::new(PortInfo {
                state: PortState::Active,
                netdev,
                netdev_mtu,
            }),
            monitor: Mutex::new(None),
            cm: Mutex::default(),
        });
        let weak = Arc::downgrade(&shared);
        let monitor = std::thread::Builder::new()
            .name(format!("{name}-monitor"))
            .spawn(move || loop {
                std::thread::sleep(MONITOR_PERIOD);
                let Some(dev) = weak.upgrade() else { return };
                if dev.removed.load(Ordering::Acquire) {
                    return;
                }
                dev.refresh_addresses();
            })?;
        *shared.monitor.lock().unwrap() = Some(monitor);
        tracing::info!(device = %name, addrs = ?bind, mtu = %active_mtu, ?port_window, "device added");
        shared.set_prefer_busy_poll(config.prefer_busy_poll);
        registry::insert_device(shared.clone());
        Ok(Device(shared))
    }

    /// Prefers busy polling on this device, or not (on unless the device
    /// was added with [`DeviceConfig::prefer_busy_poll`] off, which
    /// `RXE_PREFER_BUSY_POLL=0` in the environment does): while a thread
    /// keeps polling one of its CQs, arrivals are left to that thread and
    /// do not wake the driver thread, which only looks in now and then for
    /// what the poller missed (a program that watches memory between its
    /// polls, as `ib_write_lat` does). docs/performance.md has the
    /// measurements.
    pub fn set_prefer_busy_poll(&self, on: bool) {
        self.0.set_prefer_busy_poll(on);
    }

    /// One busy-poll turn on the caller's thread: what the device has
    /// received into the engine, due timers, then what it has to send,
    /// as an empty [`crate::Cq::poll`] does. Does nothing (returns
    /// `false`) if another thread is in the engine or the device is gone.
    /// A thread about to sleep for a completion event calls it in a short
    /// spin first ([`crate::SpinWait`]).
    pub fn busy_poll(&self) -> bool {
        self.0.check_live().is_ok() && self.0.waker.busy_poll(&self.0.net, &self.0.engine)
    }

    /// Sends now what the device holds back: the answers a busy poller's
    /// turn left for its next post (busy polling preferred), and posts
    /// still corked. They leave on their own within a millisecond or two;
    /// a program that stops right after its last poll (`ibv_rc_pingpong`
    /// exits once it has its last message, whose ACK its peer still waits
    /// for) sends them here. Destroying a QP, removing the device, and a
    /// drop-in program's exit do it.
    pub fn flush(&self) {
        if self.0.check_live().is_ok() {
            self.0.kick(self.0.lock());
        }
    }

    /// Tells the device that the thread which called [`Device::busy_poll`]
    /// stops polling and will sleep: with busy polling preferred
    /// ([`Device::set_prefer_busy_poll`]) the driver thread watches the
    /// sockets again at once.
    pub fn busy_poll_ended(&self) {
        self.0.waker.poller_left();
    }

    /// Removes the device (`rdma link delete`): clients' `remove` callbacks
    /// run first, then a `DeviceFatal` event; its threads stop and its
    /// sockets close. Every handle of it, and of its objects, fails with
    /// [`VerbsError::DeviceRemoved`] afterwards.
    pub fn remove(&self) -> Result<()> {
        let _ops = registry::ops_lock();
        self.0.check_live()?;
        registry::remove_device(&self.0);
        self.0.removed.store(true, Ordering::Release);
        self.0.events.raise(AsyncEvent::DeviceFatal);
        let cm = self
            .0
            .cm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .agent
            .take();
        if let Some(agent) = cm {
            agent.shutdown();
        }
        // What a poller left for its next post goes now: there is none.
        self.0.kick(self.0.lock());
        if let Some(d) = self.0.driver.lock().unwrap().take() {
            d.stop();
        }
        for ip in self.0.net.addresses() {
            self.0.net.remove_address(ip);
        }
        self.0.lock().close_events();
        self.0.events.shutdown();
        if let Some(m) = self.0.monitor.lock().unwrap().take() {
            let _ = m.join();
        }
        tracing::info!(device = %self.0.name, "device removed");
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn target(&self) -> &Target {
        &self.0.target
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.0.check_live()?;
        Ok(self.0.attr.clone())
    }

    fn check_port(&self, port: u8) -> Result<()> {
        self.0.check_live()?;
        if port != PORT {
            return Err(VerbsError::NoSuchPort(port));
        }
        Ok(())
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        let p = self.0.port.lock().unwrap().clone();
        Ok(port_attr(p.state, p.netdev_mtu, p.netdev, &self.0.attr))
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u8) -> Result<Gid> {
        self.check_port(port)?;
        self.0.lock().gid(index).ok_or(VerbsError::NoSuchGid(index))
    }

    /// The valid entries of the GID table.
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        self.check_port(port)?;
        Ok(self
            .0
            .lock()
            .gids()
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                g.map(|gid| GidEntry {
                    index: i as u8,
                    gid,
                    gid_type: GidType::RoceV2,
                })
            })
            .collect())
    }

    /// `ibv_find_gid_index` / `ib_find_gid`: the port and index of `gid`.
    pub fn find_gid(&self, gid: &Gid) -> Option<(u8, u8)> {
        self.0.check_live().ok()?;
        let e = self.0.lock();
        e.gids()
            .iter()
            .position(|g| g.as_ref() == Some(gid))
            .map(|i| (PORT, i as u8))
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.check_port(port)?;
        self.0
            .lock()
            .ep
            .pkey_table()
            .get(index as usize)
            .copied()
            .ok_or(VerbsError::NoSuchPkey(index))
    }

    /// The whole P_Key table.
    pub fn pkey_table(&self, port: u8) -> Result<Vec<u16>> {
        self.check_port(port)?;
        Ok(self.0.lock().ep.pkey_table().to_vec())
    }

    /// `ib_find_pkey`: the index of `pkey` (an exact match, or the same
    /// partition with the other membership if no exact one).
    pub fn find_pkey(&self, port: u8, pkey: u16) -> Option<u16> {
        self.check_port(port).ok()?;
        let e = self.0.lock();
        let t = e.ep.pkey_table();
        t.iter()
            .position(|k| *k == pkey)
            .or_else(|| t.iter().position(|k| k & 0x7fff == pkey & 0x7fff))
            .map(|i| i as u16)
    }

    /// Replaces the P_Key table (on a real port the subnet manager sets
    /// it; RoCE has none, so the administrator does). At most
    /// `max_pkeys` entries, none 0 or 0x8000 (invalid partitions).
    pub fn set_pkey_table(&self, port: u8, table: Vec<u16>) -> Result<()> {
        self.check_port(port)?;
        if table.is_empty() || table.len() > self.0.attr.max_pkeys as usize {
            return Err(VerbsError::InvalidArgument(format!(
                "a P_Key table has 1 to {} entries, not {}",
                self.0.attr.max_pkeys,
                table.len()
            )));
        }
        if let Some(bad) = table.iter().find(|k| *k & 0x7fff == 0) {
            return Err(VerbsError::InvalidArgument(format!(
                "P_Key {bad:#06x} names no partition"
            )));
        }
        self.0.lock().ep.set_pkey_table(table);
        Ok(())
    }

    /// Calls `f` for every asynchronous event from now on
    /// (`ib_register_event_handler`); returns an id for
    /// [`Device::unregister_event_handler`].
    pub fn register_event_handler(&self, f: impl Fn(&AsyncEvent) + Send + Sync + 'static) -> u64 {
        self.0.events.register(Arc::new(f))
    }

    pub fn unregister_event_handler(&self, id: u64) -> bool {
        self.0.events.unregister(id)
    }

    /// Stores a client's data on this device (`ib_set_client_data`).
    pub fn set_client_data(&self, client: ClientId, data: ClientData) {
        self.0.client_data.lock().unwrap().insert(client, data);
    }

    /// Runs `f` with a client's data on this device (`ib_get_client_data`).
    pub fn with_client_data<R>(
        &self,
        client: ClientId,
        f: impl FnOnce(Option<&mut (dyn Any + Send)>) -> R,
    ) -> R {
        let mut m = self.0.client_data.lock().unwrap();
        f(m.get_mut(&client).map(|b| &mut **b))
    }

    /// Counters: the transport engine's (named as kernel rxe's
    /// `rdma statistic` shows them), the network layer's, then the CM's
    /// and QP1's once the CM runs (`cm_*`).
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .0
            .lock()
            .ep
            .counters()
            .iter_counters()
            .map(|(c, v)| (c.name().to_string(), v))
            .collect();
        out.extend(
            self.0
                .net
                .counters()
                .snapshot()
                .into_iter()
                .map(|(n, v)| (format!("net_{n}"), v)),
        );
        if let Some(agent) = crate::cm::agent::running(self) {
            out.extend(agent.counters());
        }
        out
    }

    /// The DCQCN sending rate of QP `qp_num` in Mb/s while congestion
    /// control limits it (after a CNP, until it recovers); `None` at line
    /// rate or for no such QP.
    pub fn qp_rate_mbps(&self, qp_num: u32) -> Option<f64> {
        let now = self.0.net.clock().now();
        self.0.lock().ep.qp_rate_mbps(qp_num, now)
    }

    /// The congestion control settings the device was added with.
    pub fn congestion(&self) -> CongestionConfig {
        *self.0.lock().ep.congestion()
    }

    /// One counter by name (as in [`Device::counters`]).
    pub fn counter(&self, name: &str) -> u64 {
        self.counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or(0)
    }

    /// Starts (or with `None` stops) writing every packet to a pcap file.
    pub fn set_capture(&self, path: Option<&std::path::Path>) -> Result<()> {
        self.0.check_live()?;
        let tap = match path {
            Some(p) => Some(PcapTap::create(p)?),
            None => None,
        };
        self.0.net.set_tap(tap);
        Ok(())
    }

    /// Re-reads the host's addresses now instead of at the next monitor
    /// tick.
    pub fn refresh(&self) {
        self.0.refresh_addresses();
    }
}

impl DeviceShared {
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.removed.load(Ordering::Acquire) {
            Err(VerbsError::DeviceRemoved(self.name.clone()))
        } else {
            Ok(())
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, DeviceEngine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a verb that may have queued packets or timers: send what is
    /// ready now (on the caller's thread, for latency), deliver
    /// completions, and tell the driver the next deadline.
    pub(crate) fn kick(&self, mut e: MutexGuard<'_, DeviceEngine>) {
        e.corked = 0;
        e.dispatch();
        self.flush_locked(&mut e);
        let deadline = e.poll_timeout();
        drop(e);
        self.waker.notify_deadline(deadline);
        // The driver may have skipped a turn while we held the lock.
        self.waker.after_unlock();
    }

    /// Sends what the engine has now, on this thread (the device's one
    /// way down to the wire: `driver::flush`).
    pub(crate) fn flush_locked(&self, e: &mut MutexGuard<'_, DeviceEngine>) -> usize {
        self.waker.flush(&self.net, &mut **e)
    }

    /// After a posted receive: deliver completions (one posted in ERR is
    /// flushed at once, IBTA 10.3.1), without sending. A receive never
    /// makes a packet: a message that found none was answered by an RNR
    /// NAK already, and its requester sends it again. Sending here would
    /// put a busy poller's deferred ACK (`NetPort::defer_sends_once`) on
    /// the wire alone, just before the post that answers the message it
    /// acknowledges could carry it in one GSO message (a ping-pong over
    /// SEND reposts its receive first).
    pub(crate) fn kick_after_recv(&self, mut e: MutexGuard<'_, DeviceEngine>) {
        e.dispatch();
        drop(e);
        // The driver may have skipped a turn while we held the lock.
        self.waker.after_unlock();
    }

    /// After a post: [`Device::kick`], or with `corked` (a small post to an
    /// RC QP that already had packets in flight) leave
    /// the new packets queued (corked), so that consecutive posts go out
    /// together in one batch (one GSO send of same-size packets) instead of
    /// one system call each. They leave at the first of: the next turn
    /// that takes the responses already coming (driver thread or busy
    /// poll), [`CORK_MAX`] corked posts, or [`CORK_DELAY`] after the
    /// batch's first corked post, for which the driver is given a
    /// deadline. A post to an idle QP is never
    /// corked: the latency path is [`Device::kick`]. (Linux TCP's
    /// autocorking makes the same bet: while earlier data is still queued,
    /// a small write waits a little.)
    pub(crate) fn kick_after_post(&self, e: MutexGuard<'_, DeviceEngine>, corked: bool) {
        if corked {
            self.kick_corked(e);
        } else {
            self.kick(e);
        }
    }

    fn kick_corked(&self, mut e: MutexGuard<'_, DeviceEngine>) {
        e.corked += 1;
        if e.corked >= CORK_MAX {
            return self.kick(e);
        }
        if e.corked > 1 {
            // The batch's first corked post (`corked` counts from the last
            // flush, `DeviceEngine::after_batch`) gave the driver its
            // deadline, which stands for this post's packets too (they
            // leave with the batch), or found a poller at work, whose turn
            // sends them or whose absence the thread notices within
            // POLLER_FRESH. A corked post makes no earlier timer: its
            // packets are not sent yet. So no clock read here (4 % of a
            // 64-byte WRITE sender, `perf record`).
            drop(e);
            self.waker.after_unlock();
            return;
        }
        let now = self.net.clock().now();
        let cork_end = now.saturating_add(CORK_DELAY);
        let deadline = e.poll_timeout().map_or(cork_end, |d| d.min(cork_end));
        drop(e);
        // With busy polling preferred and a poller at work, its next turn
        // sends the batch, and the driver thread looks in within
        // POLLER_FRESH should it stop: waking the thread for the cork's
        // deadline would cost a context switch per batch and share the
        // engine with it (1.0-1.1 against 0.57-0.79 M msg/s of 64-byte
        // WRITEs, docs/performance.md).
        if !self.waker.poller_at_work(now) {
            self.waker.notify_deadline(Some(deadline));
        }
        self.waker.after_unlock();
    }

    /// Prefer busy polling, as `SO_PREFER_BUSY_POLL` does for a socket:
    /// while a thread keeps polling a CQ of the device, the driver thread
    /// stops watching the sockets and the poller receives what arrives
    /// (no wake-up of the driver per packet); the driver looks in now and
    /// then for what the poller missed (see
    /// `crate::driver::DriverWaker::set_prefer_busy_poll`).
    pub(crate) fn set_prefer_busy_poll(&self, on: bool) {
        self.waker.set_prefer_busy_poll(on);
    }

    /// Busy-poll progress (as NAPI busy polling does for sockets): a
    /// thread that polls an empty CQ takes the driver's turn itself
    /// (receive, due timers, transmit: `driver::turn`), if nobody
    /// else is in the engine at this moment, instead of waiting for the
    /// driver thread to be scheduled. On a loaded machine that wait is a
    /// scheduler time slice, milliseconds.
    pub(crate) fn progress(&self) {
        self.waker.busy_poll(&self.net, &self.engine);
    }

    /// A poll of a CQ of this device found completions.
    pub(crate) fn poller_busy(&self) {
        self.waker.poller_busy(self.net.clock().now());
    }

    pub(crate) fn take_client_data(&self, id: ClientId) -> Option<ClientData> {
        self.client_data.lock().unwrap().remove(&id)
    }

    pub(crate) fn max(&self) -> &DeviceAttr {
        &self.attr
    }

    /// Brings the sockets, the GID table and the port state in line with
    /// the host's addresses, raising `GidChange`, `PortErr` and
    /// `PortActive` as they change.
    fn refresh_addresses(&self) {
        if self.removed.load(Ordering::Acquire) {
            return;
        }
        let (want, netdev, mtu) = match discover(&self.target) {
            Some(d) => (d.addrs, d.netdev, d.mtu),
            None => (vec![], String::new(), 0),
        };
        let have = self.net.addresses();
        let mut changed = false;
        for ip in have.iter().filter(|ip| !want.contains(ip)) {
            self.net.remove_address(*ip);
            let mut e = self.lock();
            let g = Gid::from(*ip);
            let mut gids = e.gids().to_vec();
            for slot in gids.iter_mut().filter(|s| **s == Some(g)) {
                *slot = None;
            }
            e.ep.set_gid_table(gids);
            changed = true;
        }
        for ip in want.iter().filter(|ip| !have.contains(ip)) {
            if let Err(err) = self.net.add_address(*ip) {
                tracing::warn!(%ip, %err, "cannot bind a new address");
                continue;
            }
            let mut e = self.lock();
            let g = Some(Gid::from(*ip));
            let mut gids = e.gids().to_vec();
            match gids.iter().position(|s| s.is_none()) {
                Some(i) => gids[i] = g,
                None if gids.len() < GID_TABLE_LEN as usize => gids.push(g),
                None => tracing::warn!(%ip, "GID table full"),
            }
            e.ep.set_gid_table(gids);
            changed = true;
        }
        let now_active = !self.net.addresses().is_empty();
        let mut p = self.port.lock().unwrap();
        if !netdev.is_empty() {
            p.netdev = netdev;
            p.netdev_mtu = mtu;
        }
        let was_active = p.state == PortState::Active;
        p.state = if now_active {
            PortState::Active
        } else {
            PortState::Down
        };
        drop(p);
        if changed {
            self.events.raise(AsyncEvent::GidChange { port: PORT });
        }
        match (was_active, now_active) {
            (true, false) => self.events.raise(AsyncEvent::PortErr { port: PORT }),
            (false, true) => self.events.raise(AsyncEvent::PortActive { port: PORT }),
            _ => {}
        }
    }
}
