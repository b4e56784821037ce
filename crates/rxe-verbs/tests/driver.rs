//! The port and the driver thread with a scripted engine: drops counted by
//! reason on both paths, timers fired on time without spinning, deadlines
//! notified from outside, addresses added and removed under a running
//! driver.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use rxe_core::transport::{AddressVector, Instant, RecvMeta, Transmit};
use rxe_core::Gid;
use rxe_net::encap::{seal, WireHeaders};
use rxe_net::socket::RoceSocket;
use rxe_net::{Clock, NetCounter, NetPort};
use rxe_verbs::driver::{self, Deferral, Driver, Engine};

#[derive(Default)]
struct Script {
    gids: Vec<Gid>,
    to_send: VecDeque<(Vec<u8>, Transmit)>,
    received: Vec<(RecvMeta, Vec<u8>)>,
    /// The thread that handed over each received packet.
    receivers: Vec<Option<String>>,
    deadline: Option<Instant>,
    timeouts: Vec<Instant>,
    turns: u64,
}

impl Engine for Script {
    fn handle(&mut self, _now: Instant, meta: &RecvMeta, packet: &[u8]) {
        self.received.push((*meta, packet.to_vec()));
        self.receivers
            .push(std::thread::current().name().map(str::to_string));
    }
    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (bytes, t) = self.to_send.pop_front()?;
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        Some(t)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        self.deadline
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
            self.timeouts.push(now);
        }
    }
    fn source_gid(&self, sgid_index: u8) -> Option<Gid> {
        self.gids.get(usize::from(sgid_index)).copied()
    }
    fn after_batch(&mut self) {
        self.turns += 1;
    }
}

/// What a verb's flush does: the engine's packets down the port.
fn flush(port: &NetPort, e: &mut Script) -> usize {
    driver::flush(port, e, port.clock().now(), &Deferral::default())
}

/// The port's arrivals handed to the engine, then its `after_batch`.
fn receive(port: &NetPort, e: &mut Script) -> usize {
    let got = port.receive(|now, meta, packet| e.handle(now, meta, packet));
    e.after_batch();
    got.packets
}

fn v4(c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, c, d))
}

fn transmit(len: usize, sgid_index: u8, dgid: Gid) -> Transmit {
    Transmit {
        len,
        dest: AddressVector {
            dgid,
            sgid_index,
            hop_limit: 0,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            src_port: None,
        },
        src_qpn: 0x11,
    }
}

/// A BTH-sized body with 4 zero ICRC bytes; the port does not parse it.
fn body(len: usize, tag: u8) -> Vec<u8> {
    let mut v = vec![tag; len];
    let n = v.len();
    v[n - 4..].fill(0);
    v
}

/// Sends a 20-byte RoCE body tagged `tag` from `out` to `dst`, its ICRC
/// sealed for the headers it will have.
fn send_sealed(out: &UdpSocket, dst: SocketAddr, tag: u8) {
    let mut p = body(20, tag);
    let h = WireHeaders::outgoing(out.local_addr().unwrap(), dst, p.len(), 64, 0).unwrap();
    seal(&h, &mut p).unwrap();
    out.send_to(&p, dst).unwrap();
}

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = StdInstant::now() + Duration::from_secs(5);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(StdInstant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Held by the tests whose threads spin (busy pollers, a spinning
/// driver), so that they do not run at once and starve each other's
/// threads on a small machine; they still run beside the others.
fn spinning_alone() -> std::sync::MutexGuard<'static, ()> {
    static SPINNING: Mutex<()> = Mutex::new(());
    SPINNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// A port on `ip` with a scripted engine and its driver thread.
fn spawned(ip: IpAddr) -> (Arc<NetPort>, Arc<Mutex<Script>>, Driver) {
    let port = Arc::new(NetPort::new(Clock::new()));
    port.add_address(ip).unwrap();
    let engine = Arc::new(Mutex::new(Script::default()));
    let driver = Driver::spawn(port.clone(), engine.clone()).unwrap();
    (port, engine, driver)
}

#[test]
fn flush_counts_what_it_cannot_send() {
    let (ia, ib) = (v4(4, 1), v4(4, 2));
    let pa = NetPort::new(Clock::new());
    pa.add_address(ia).unwrap();
    pa.add_address(ia).unwrap(); // a no-op
    assert_eq!(pa.addresses(), vec![ia]);
    let pb = NetPort::new(Clock::new());
    pb.add_address(ib).unwrap();
    let mut e = Script {
        gids: vec![Gid::from(ia), Gid::from(v4(4, 9))],
        ..Default::default()
    };
    let v6 = Gid::from("::1".parse::<std::net::Ipv6Addr>().unwrap());
    e.to_send.extend([
        (body(20, 1), transmit(20, 5, Gid::from(ib))), // no such GID index
        (body(20, 2), transmit(20, 0, v6)),            // IPv4 to IPv6
        (body(8, 3), transmit(8, 0, Gid::from(ib))),   // shorter than BTH + ICRC
        (body(20, 4), transmit(20, 1, Gid::from(ib))), // no socket on 127.0.4.9
        (body(20, 5), transmit(20, 0, Gid::from(ib))), // good
        (body(9000, 6), transmit(9000, 0, Gid::from(ib))), // longer than a slot
    ]);
    assert_eq!(flush(&pa, &mut e), 1);
    assert_eq!(e.turns, 1);
    let c = pa.counters();
    assert_eq!(c.get(NetCounter::SentNoSourceGid), 1);
    assert_eq!(c.get(NetCounter::SentFamilyMismatch), 1);
    assert_eq!(c.get(NetCounter::SentBadLength), 2);
    assert_eq!(c.get(NetCounter::SentNoSocket), 1);
    assert_eq!(c.get(NetCounter::SentPkts), 1);
    assert_eq!(c.get(NetCounter::SentBytes), 20);

    let mut r = Script::default();
    until("the good packet", || {
        (receive(&pb, &mut r) > 0).then_some(())
    });
    let (meta, p) = &r.received[0];
    assert_eq!(p.len(), 20);
    assert_eq!(p[0], 5);
    assert_eq!(meta.sgid, Gid::from(ia));
    assert_eq!(meta.dgid, Gid::from(ib));
    assert_eq!(meta.grh[20 + 8], 64, "TTL 0 in the AV is sent as 64");
    assert_eq!(pb.counters().get(NetCounter::RcvdPkts), 1);
}

#[test]
fn receive_counts_what_it_drops_and_accepts_any_source_port() {
    let ib = v4(4, 3);
    let pb = NetPort::new(Clock::new());
    pb.add_address(ib).unwrap();
    let dst = SocketAddr::new(ib, 4791);
    let out = UdpSocket::bind(SocketAddr::new(v4(4, 4), 0)).unwrap();
    out.send_to(&[1, 2, 3, 4, 5], dst).unwrap();
    out.send_to(&[0x42; 40], dst).unwrap();
    let mut good = body(24, 0x11);
    let h = WireHeaders::outgoing(out.local_addr().unwrap(), dst, good.len(), 64, 0).unwrap();
    seal(&h, &mut good).unwrap();
    out.send_to(&good, dst).unwrap();
    // 9000 bytes: more than a receive slot holds.
    out.send_to(&vec![0; 9000], dst).unwrap();
    let mut r = Script::default();
    let c = pb.counters();
    until("four datagrams", || {
        receive(&pb, &mut r);
        let seen = c.get(NetCounter::RcvdPkts)
            + c.get(NetCounter::RcvdTooShort)
            + c.get(NetCounter::RcvdBadIcrc)
            + c.get(NetCounter::RcvdTruncated);
        (seen == 4).then_some(())
    });
    assert_eq!(c.get(NetCounter::RcvdTooShort), 1);
    assert_eq!(c.get(NetCounter::RcvdBadIcrc), 1);
    assert_eq!(c.get(NetCounter::RcvdTruncated), 1);
    assert_eq!(c.get(NetCounter::RcvdPkts), 1);
    assert_eq!(r.received.len(), 1);
    assert_eq!(r.received[0].1, good);
}

/// A coalesced (GRO) datagram is split into its packets: each is checked
/// alone, so a bad one is dropped and counted and its neighbours arrive,
/// and each packet's ICRC verifies with its own IPv4 ID (0, 1, 2 ... as a
/// GSO sender seals them).
#[test]
fn gro_datagrams_split_and_a_bad_segment_drops_alone() {
    use rxe_net::socket::{Offload, TxBatch};
    let ib = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 179));
    let pb = NetPort::new(Clock::new()).with_offload(Offload::BOTH);
    pb.add_address(ib).unwrap();
    assert!(pb.sockets()[0].gro());
    let dst = SocketAddr::new(ib, 4791);
    let out = RoceSocket::bind_with(v4(4, 9), 0, Offload::BOTH).unwrap();
    let mut tx = TxBatch::new(8, 256);
    let lens = [100, 100, 100, 100, 60];
    let mut sent = Vec::new();
    for (k, &len) in lens.iter().enumerate() {
        let mut p = body(len, 0x20 + k as u8);
        let f = rxe_net::encap::HeaderFields {
            ipv4_id: k as u16,
            ..Default::default()
        };
        let h = WireHeaders::new(out.local_addr(), dst, len, &f).unwrap();
        seal(&h, &mut p).unwrap();
        if k == 2 {
            p[10] ^= 1; // one bad segment
        }
        let (_, slot) = tx.free_slot().unwrap();
        slot[..len].copy_from_slice(&p);
        assert!(tx.commit(len, dst));
        sent.push(p);
    }
    let one_run = std::iter::once(0..5).collect::<Vec<_>>();
    assert_eq!(out.send_runs(&tx, &one_run, Some(100), 64, 0).unwrap(), 1);
    let mut r = Script::default();
    let c = pb.counters();
    until("five packets", || {
        receive(&pb, &mut r);
        (c.get(NetCounter::RcvdPkts) + c.get(NetCounter::RcvdBadIcrc) == 5).then_some(())
    });
    assert_eq!(c.get(NetCounter::RcvdGroDatagrams), 1, "{:?}", c.snapshot());
    assert_eq!(c.get(NetCounter::RcvdBadIcrc), 1);
    assert_eq!(c.get(NetCounter::RcvdPkts), 4);
    let got: Vec<&Vec<u8>> = r.received.iter().map(|(_, p)| p).collect();
    assert_eq!(got, [&sent[0], &sent[1], &sent[3], &sent[4]]);
    // The UD GRH space holds the ID each packet was sealed for.
    let ids: Vec<[u8; 2]> = r
        .received
        .iter()
        .map(|(m, _)| [m.grh[24], m.grh[25]])
        .collect();
    assert_eq!(ids, [[0, 0], [0, 1], [0, 3], [0, 4]]);
}

#[test]
fn driver_fires_timers_on_time_without_spinning() {
    let port = Arc::new(NetPort::new(Clock::new()));
    port.add_address(v4(5, 1)).unwrap();
    let clock = port.clock();
    let engine = Arc::new(Mutex::new(Script {
        deadline: Some(clock.now().saturating_add(Duration::from_millis(30))),
        ..Default::default()
    }));
    let driver = Driver::spawn(port.clone(), engine.clone()).unwrap();
    let waker = driver.waker();
    std::thread::sleep(Duration::from_millis(150));
    {
        let e = engine.lock().unwrap();
        assert_eq!(e.timeouts.len(), 1);
        assert!(e.timeouts[0] >= Instant::from_nanos(30_000_000));
        // Idle: a few turns, not a spin.
        assert!(e.turns < 40, "{} turns in 150 ms", e.turns);
    }

    // The driver sleeps at most a tick (25 ms): a deadline before that
    // wakes it.
    let set = clock.now().saturating_add(Duration::from_millis(10));
    engine.lock().unwrap().deadline = Some(set);
    waker.notify_deadline(Some(set));
    until("the notified timer", || {
        (engine.lock().unwrap().timeouts.len() == 2).then_some(())
    });
    let fired = engine.lock().unwrap().timeouts[1];
    assert!(fired >= set);
    assert!(fired.saturating_since(set) < Duration::from_millis(500));

    // While it sleeps until an early deadline, a later one does not wake it.
    let early = clock.now().saturating_add(Duration::from_millis(300));
    engine.lock().unwrap().deadline = Some(early);
    waker.notify_deadline(Some(early));
    std::thread::sleep(Duration::from_millis(30));
    let turns = engine.lock().unwrap().turns;
    // Fifty later deadlines: only the driver's own ticks (one every
    // TICK, at most two `after_batch` calls each) may turn it, not the fifty
    // notifications.
    let start = StdInstant::now();
    for _ in 0..50 {
        waker.notify_deadline(Some(early.saturating_add(Duration::from_secs(1))));
        waker.notify_deadline(None);
        std::thread::sleep(Duration::from_millis(1));
    }
    let ticks = (start.elapsed().as_millis() / driver::TICK.as_millis()) as u64 + 2;
    let woken = engine.lock().unwrap().turns - turns;
    assert!(
        woken <= 2 * ticks && woken < 100,
        "{woken} turns in {ticks} ticks: woken for later deadlines"
    );
    driver.stop();
}

#[test]
fn driver_follows_addresses_added_and_removed() {
    let (i1, i2) = (v4(6, 1), v4(6, 2));
    let (port, engine, driver) = spawned(i1);
    let out = UdpSocket::bind(SocketAddr::new(v4(6, 9), 0)).unwrap();
    let send = |to: IpAddr, tag: u8| {
        let dst = SocketAddr::new(to, 4791);
        let mut p = body(20, tag);
        let h = WireHeaders::outgoing(out.local_addr().unwrap(), dst, p.len(), 64, 0).unwrap();
        seal(&h, &mut p).unwrap();
        out.send_to(&p, dst).unwrap();
    };
    send(i1, 1);
    until("a packet on the first address", || {
        (engine.lock().unwrap().received.len() == 1).then_some(())
    });
    port.add_address(i2).unwrap();
    send(i2, 2);
    until("a packet on the added address", || {
        (engine.lock().unwrap().received.len() == 2).then_some(())
    });
    assert_eq!(engine.lock().unwrap().received[1].0.dgid, Gid::from(i2));
    assert!(port.remove_address(i2));
    assert!(!port.remove_address(i2));
    assert_eq!(port.addresses(), vec![i1]);
    // Once the driver lets go of it, the socket is closed and the address
    // can be bound again.
    let again = until("the removed socket to close", || {
        RoceSocket::bind(i2, 4791).ok()
    });
    drop(again);
    drop(driver); // stops and joins
    assert_eq!(Arc::strong_count(&engine), 1);
}

/// A thread that busy-polls takes the driver's turns while the driver
/// thread runs too: every datagram arrives once, whichever of them reads
/// it, and none is stranded when the poller stops.
#[test]
fn busy_polling_and_the_driver_share_the_turns() {
    let _alone = spinning_alone();
    let me = v4(7, 1);
    let (port, engine, driver) = spawned(me);
    let waker = driver.waker();
    let out = UdpSocket::bind(SocketAddr::new(v4(7, 9), 0)).unwrap();
    let dst = SocketAddr::new(me, 4791);
    let send = |tag: u8| send_sealed(&out, dst, tag);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let took = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let poller = {
        let (port, engine, waker, stop, took) = (
            port.clone(),
            engine.clone(),
            waker.clone(),
            stop.clone(),
            took.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if waker.busy_poll(&port, &*engine) {
                    took.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
        })
    };
    for i in 0..200u32 {
        send(i as u8);
        if i % 16 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    until("200 datagrams", || {
        (engine.lock().unwrap().received.len() >= 200).then_some(())
    });
    // On a loaded machine the poller may not have run yet: it must get a
    // turn beside the driver, however late.
    until("the poller to take a turn", || {
        (took.load(std::sync::atomic::Ordering::Relaxed) > 0).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    // The poller is gone: the driver alone still receives.
    send(0xFF);
    until("a datagram after the poller stopped", || {
        (engine.lock().unwrap().received.len() == 201).then_some(())
    });
    let e = engine.lock().unwrap();
    let mut tags: Vec<u8> = e.received.iter().map(|(_, p)| p[p.len() - 5]).collect();
    assert_eq!(e.received.len(), 201, "each datagram exactly once");
    drop(e);
    tags.sort_unstable();
    let want: Vec<u8> = (0..200u8).chain([0xFF]).collect();
    assert_eq!(tags, want);
    driver.stop();
}

/// With busy polling preferred, a poller at work receives what arrives
/// (the driver thread stops watching the socket), and once it stops, the
/// driver thread receives again: nothing is stranded. (That the driver is
/// not woken per packet shows in `rxe perf write --lat`, see
/// docs/performance.md, not in a timed test.)
#[test]
fn preferred_busy_polling_leaves_arrivals_to_the_poller_until_it_stops() {
    let _alone = spinning_alone();
    // A poller that the scheduler leaves out for a millisecond is not at
    // work, and the driver receives instead: on a loaded machine that can
    // take one attempt's majority, so the share is asked of one of three
    // (each on addresses of its own). Nothing is ever stranded, in any.
    let shares: Vec<usize> = (0..3)
        .map(|k| preferred_busy_polling_attempt(v4(8, 30 + k), v4(8, 40 + k)))
        .take_while(|&by_poller| by_poller < 50)
        .collect();
    assert!(
        shares.len() < 3,
        "the poller received {shares:?} of 100 in three attempts"
    );
}

/// One attempt of the test above: how many of 100 datagrams the poller
/// received; panics if a datagram is lost or the driver does not take
/// over once the poller stops.
fn preferred_busy_polling_attempt(me: IpAddr, from: IpAddr) -> usize {
    let (port, engine, driver) = spawned(me);
    let waker = driver.waker();
    waker.set_prefer_busy_poll(true);
    let out = UdpSocket::bind(SocketAddr::new(from, 0)).unwrap();
    let dst = SocketAddr::new(me, 4791);
    let send = |tag: u8| send_sealed(&out, dst, tag);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (port, engine, waker, stop) =
            (port.clone(), engine.clone(), waker.clone(), stop.clone());
        std::thread::Builder::new()
            .name("poller".into())
            .spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    waker.busy_poll(&port, &*engine);
                    std::thread::yield_now();
                }
            })
            .unwrap()
    };
    // Long enough for the driver to see the poller (it looks at least
    // every TICK).
    std::thread::sleep(Duration::from_millis(60));
    for i in 0..100u8 {
        send(i);
        std::thread::sleep(Duration::from_micros(300));
    }
    until("100 datagrams", || {
        (engine.lock().unwrap().received.len() >= 100).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    // The driver still turns once a millisecond to look for the poller,
    // and may find a datagram then; most are the poller's.
    let by_poller = engine
        .lock()
        .unwrap()
        .receivers
        .iter()
        .filter(|n| n.as_deref() == Some("poller"))
        .count();
    // The poller is gone: the driver watches the socket again.
    send(0xFF);
    until("a datagram after the poller stopped", || {
        (engine.lock().unwrap().received.len() == 101).then_some(())
    });
    assert_eq!(
        engine.lock().unwrap().receivers[100].as_deref(),
        Some("rxe-driver")
    );
    driver.stop();
    by_poller
}

/// A poller that keeps finding completions (`poller_busy`, no turn of its
/// own) counts as at work, so the driver stops watching the socket, but
/// still turns at its looks for the poller: what arrives meanwhile is
/// received, by the driver, and not stranded until the poller's next
/// empty poll.
#[test]
fn a_poller_finding_completions_strands_nothing() {
    let _alone = spinning_alone();
    let me = v4(8, 2);
    let (port, engine, driver) = spawned(me);
    let waker = driver.waker();
    waker.set_prefer_busy_poll(true);
    let out = UdpSocket::bind(SocketAddr::new(v4(8, 10), 0)).unwrap();
    let dst = SocketAddr::new(me, 4791);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (port, waker, stop) = (port.clone(), waker.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                waker.poller_busy(port.clock().now());
                std::thread::yield_now();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(60));
    for i in 0..20u8 {
        send_sealed(&out, dst, i);
    }
    until("20 datagrams while the poller is busy", || {
        (engine.lock().unwrap().received.len() == 20).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    let e = engine.lock().unwrap();
    assert!(e
        .receivers
        .iter()
        .all(|n| n.as_deref() == Some("rxe-driver")));
    drop(e);
    driver.stop();
}

/// With source ports each QP's packets leave from one of the address's
/// send-only sockets (ports from 0xC000), the same one for every packet of
/// the QP, each sealed for the port it leaves from; the sockets go with
/// their address.
#[test]
fn each_qp_leaves_from_its_own_source_port() {
    let (ia, ib) = (v4(4, 20), v4(4, 21));
    let pa = NetPort::new(Clock::new()).with_source_ports(4);
    pa.add_address(ia).unwrap();
    let ports: Vec<u16> = pa.source_ports().iter().map(|a| a.port()).collect();
    assert_eq!(ports.len(), 4, "{ports:?}");
    assert!(pa.source_ports().iter().all(|a| a.ip() == ia));
    assert!(
        ports.iter().all(|p| *p >= rxe_net::SOURCE_PORT_BASE),
        "{ports:?}"
    );
    assert_eq!(
        pa.addresses(),
        vec![ia],
        "the source ports are no addresses"
    );
    let rx = UdpSocket::bind(SocketAddr::new(ib, 4791)).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut e = Script {
        gids: vec![Gid::from(ia)],
        ..Default::default()
    };
    let qpns: Vec<u32> = (0x11..0x21).collect();
    for round in 0..2u8 {
        for (k, &q) in qpns.iter().enumerate() {
            let mut t = transmit(24, 0, Gid::from(ib));
            t.src_qpn = q;
            // The body says which QP sent it.
            e.to_send.push_back((body(24, k as u8 + 16 * round), t));
        }
    }
    assert_eq!(flush(&pa, &mut e), 2 * qpns.len());
    let mut port_of = std::collections::HashMap::new();
    let mut buf = [0u8; 64];
    for i in 0..2 * qpns.len() {
        let (n, from) = rx.recv_from(&mut buf).expect("a datagram");
        assert_eq!(from.ip(), ia);
        assert!(ports.contains(&from.port()), "{from} is not a source port");
        // The ICRC was computed over this source port.
        let mut resealed = buf[..n].to_vec();
        resealed[n - 4..].fill(0);
        let h = WireHeaders::outgoing(from, rx.local_addr().unwrap(), n, 64, 0).unwrap();
        seal(&h, &mut resealed).unwrap();
        assert_eq!(resealed, buf[..n], "packet {i}: ICRC not sealed for {from}");
        let q = qpns[usize::from(buf[0]) % qpns.len()];
        let first = *port_of.entry(q).or_insert(from.port());
        assert_eq!(first, from.port(), "QP {q:#x} changed its source port");
    }
    let distinct: std::collections::HashSet<_> = port_of.values().collect();
    assert!(
        distinct.len() >= 3,
        "16 QPs on {} of 4 ports",
        distinct.len()
    );
    assert!(pa.remove_address(ia));
    assert!(pa.source_ports().is_empty());
}

/// With no application thread polling (a WRITE target's application waits
/// elsewhere), the driver stays awake a little after each arrival instead
/// of sleeping until the next one wakes it, then sleeps again; with a
/// poller at work it never spins (the poller receives for itself).
#[test]
fn the_driver_spins_a_little_after_traffic_only_when_nobody_polls() {
    let _alone = spinning_alone();
    let me = v4(8, 20);
    let (port, engine, driver) = spawned(me);
    let out = UdpSocket::bind(SocketAddr::new(v4(8, 29), 0)).unwrap();
    let dst = SocketAddr::new(me, 4791);
    let spins = || port.counters().get(NetCounter::DriverSpinTurns);
    let received = || engine.lock().unwrap().received.len();

    // Idle: no spin.
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(spins(), 0);
    // A packet: the turn that took it is followed by turns awake (at least
    // the one right after it, in the same loop).
    send_sealed(&out, dst, 1);
    until("the packet", || (received() == 1).then_some(()));
    until("a turn awake", || (spins() > 0).then_some(()));
    // Then it sleeps again: over 100 ms, only its ticks (one every 25 ms,
    // at most two turns each) and no spinning.
    std::thread::sleep(Duration::from_millis(20));
    let (spun, turns) = (spins(), engine.lock().unwrap().turns);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(spins(), spun, "still spinning 20 ms after the last packet");
    let idle = engine.lock().unwrap().turns - turns;
    assert!(idle < 20, "{idle} turns in 100 ms of quiet");

    // A poller at work: arrivals leave the driver asleep.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (port, engine, waker, stop) =
            (port.clone(), engine.clone(), driver.waker(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                waker.busy_poll(&port, &*engine);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(5));
    let spun = spins();
    for tag in 2..12 {
        send_sealed(&out, dst, tag);
        std::thread::sleep(Duration::from_millis(1));
    }
    until("ten more packets", || (received() == 11).then_some(()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    assert_eq!(spins(), spun, "spun while a poller was at work");
    driver.stop();
}
