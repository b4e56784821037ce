//! A seeded, lossy RoCEv2 relay between two devices on loopback: the fault
//! layer of the soak test (this machine's kernel has no netem and no
//! nftables, so the faults are made in user space).
//!
//! Device A talks to the relay's address `a_side`, device B to `b_side`,
//! each as if it were the peer: A's QPs are connected to `a_side`'s GID,
//! B's to `b_side`'s. A datagram from A to `a_side` leaves `b_side` for B,
//! and one from B to `b_side` leaves `a_side` for A, so every packet
//! arrives from the address its QP is connected to (the connected-path
//! check holds). The addresses are in the IP/UDP headers the ICRC covers,
//! so the relay checks each datagram's ICRC and seals it again for its new
//! headers with the device's own code (`rxe_net::encap`).
//!
//! Faults, each decided by a seeded xorshift generator (the same seed gives
//! the same decisions for the same packet order): drop with probability
//! `loss`, and send twice with probability `duplicate`. Counts of what it
//! did are kept for the test to report.

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rxe_net::encap::{self, OpenOptions, RecvInfo, WireHeaders};
use rxe_net::socket::{RoceSocket, RxBatch};

/// The RoCEv2 UDP port.
const PORT: u16 = 4791;

/// What the relay does to the packets it forwards.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a forwarded datagram is sent twice.
    pub duplicate: f64,
    pub seed: u64,
}

/// What the relay did so far.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub forwarded: AtomicU64,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    /// Datagrams whose ICRC did not check (never forwarded).
    pub bad_icrc: AtomicU64,
}

/// A running relay; dropping it stops its thread.
pub struct LossyRelay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<RelayStats>,
}

/// xorshift64*: small, seeded, good enough for fault decisions.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl LossyRelay {
    /// Relays between `a` (device A's address) and `b` (device B's), on the
    /// relay's own addresses `a_side` (what A sends to) and `b_side` (what
    /// B sends to); all four are IPv4 loopback addresses.
    pub fn start(
        a: IpAddr,
        b: IpAddr,
        a_side: IpAddr,
        b_side: IpAddr,
        faults: Faults,
    ) -> std::io::Result<LossyRelay> {
        // The device's own socket setup (DF set, so the kernel writes IPv4
        // ID 0, which the ICRC is sealed with).
        let sa = RoceSocket::bind(a_side, PORT)?;
        let sb = RoceSocket::bind(b_side, PORT)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(RelayStats::default());
        let (st, stt) = (stop.clone(), stats.clone());
        let a = SocketAddr::new(a, PORT);
        let b = SocketAddr::new(b, PORT);
        let thread = std::thread::Builder::new()
            .name("lossy-relay".into())
            .spawn(move || relay(sa, sb, a, b, faults, &st, &stt))?;
        Ok(LossyRelay {
            stop,
            thread: Some(thread),
            stats,
        })
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One thread, two non-blocking sockets served in turn, a batch each;
/// a short sleep when both were idle.
fn relay(
    sa: RoceSocket,
    sb: RoceSocket,
    a: SocketAddr,
    b: SocketAddr,
    f: Faults,
    stop: &AtomicBool,
    stats: &RelayStats,
) {
    let mut rng = Rng(f.seed | 1);
    let mut rx = RxBatch::new(64, 9000);
    let mut pkt = Vec::with_capacity(9000);
    while !stop.load(Relaxed) {
        let mut idle = true;
        for (from_sock, to_sock, from, to) in [(&sa, &sb, a, b), (&sb, &sa, b, a)] {
            let Ok(n) = from_sock.recv_batch(&mut rx) else {
                continue;
            };
            idle &= n == 0;
            for i in 0..n {
                let Some((meta, data)) = rx.get(i) else {
                    continue;
                };
                if meta.src != Some(from) || meta.truncated {
                    continue;
                }
                pkt.clear();
                pkt.extend_from_slice(data);
                let here = from_sock.local_addr();
                let there = to_sock.local_addr();
                forward(
                    &mut pkt,
                    (from, here),
                    (there, to),
                    to_sock,
                    &f,
                    &mut rng,
                    stats,
                );
            }
        }
        if idle {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

fn forward(
    pkt: &mut [u8],
    (src, here): (SocketAddr, SocketAddr),
    (there, to): (SocketAddr, SocketAddr),
    out: &RoceSocket,
    f: &Faults,
    rng: &mut Rng,
    stats: &RelayStats,
) {
    let info = RecvInfo {
        src,
        dst: here,
        hop_limit: None,
        traffic_class: None,
    };
    if encap::open(pkt, &info, OpenOptions::default()).is_err() {
        stats.bad_icrc.fetch_add(1, Relaxed);
        return;
    }
    if rng.next_f64() < f.loss {
        stats.dropped.fetch_add(1, Relaxed);
        return;
    }
    let Ok(h) = WireHeaders::outgoing(there, to, pkt.len(), 64, 0) else {
        return;
    };
    if encap::seal(&h, pkt).is_err() {
        return;
    }
    let times = if rng.next_f64() < f.duplicate { 2 } else { 1 };
    for _ in 0..times {
        let _ = out.send_to(pkt, to);
    }
    stats.forwarded.fetch_add(1, Relaxed);
    if times == 2 {
        stats.duplicated.fetch_add(1, Relaxed);
    }
}
