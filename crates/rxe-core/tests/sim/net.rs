//! The simulated network: a priority queue of packets in flight, and the
//! faults that one seeded generator decides for each packet as it is sent.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rxe_core::transport::Instant;
use rxe_core::wire::{NakCode, Opcode, Syndrome};

use super::rng::Rng;

/// What the network does to packets. Probabilities are per packet, decided
/// when it is sent, in this order: cut link, filter, drop, corrupt, ECN
/// mark, duplicate; then each copy gets its own delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// One-way delay of every packet.
    pub latency: Duration,
    /// Extra delay, uniform in `0..=jitter`, per copy.
    pub jitter: Duration,
    pub drop: f64,
    /// Probability of a second copy (which may be duplicated again, up to
    /// three copies).
    pub duplicate: f64,
    /// Probability of an extra delay uniform in `0..=reorder_delay`, which
    /// lets later packets overtake it.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Probability that one byte covered by the ICRC (and no masked byte)
    /// is flipped: the receiving device must drop it.
    pub corrupt: f64,
    /// Probability that a switch sets FECN/BECN in the BTH: the ICRC masks
    /// those bits, so the packet must still be accepted.
    pub ecn_mark: f64,
    /// From this time on, every packet is lost.
    pub cut_at: Option<Instant>,
    /// Probability that a switch marks the IP header Congestion
    /// Experienced (ECN CE, RFC 3168): the receiver answers with a CNP.
    /// 0 draws nothing from the generator, so older seeds keep their runs.
    pub ce_mark: f64,
    /// A congested switch port in front of one node.
    pub bottleneck: Option<Bottleneck>,
}

/// A switch egress port towards node `to` (or a host's receive queue in
/// front of a slower reader): packets leave it one after another at
/// `rate_mbps`, a packet that waits longer than `mark_above` in it leaves
/// marked CE, as a RED/ECN queue marks above its threshold, and one that
/// would wait longer than `drop_above` is dropped (tail drop: the queue
/// holds `rate_mbps * drop_above`; a socket's receive buffer drops so).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bottleneck {
    pub to: usize,
    pub rate_mbps: f64,
    pub mark_above: Duration,
    /// `Duration::MAX`: a FIFO without a size limit, nothing is lost.
    pub drop_above: Duration,
}

impl Faults {
    /// A perfect network with a 5 µs one-way delay.
    pub fn none() -> Faults {
        Faults {
            latency: Duration::from_micros(5),
            jitter: Duration::ZERO,
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            corrupt: 0.0,
            ecn_mark: 0.0,
            cut_at: None,
            ce_mark: 0.0,
            bottleneck: None,
        }
    }

    /// A bad network, its rates drawn from `rng`: up to 8% loss, 5%
    /// duplication, 10% reordering (up to 300 µs), 3% corruption, with
    /// delays well under the transport timeouts the tests use.
    pub fn lossy(rng: &mut Rng) -> Faults {
        Faults {
            latency: Duration::from_micros(rng.range(1, 20)),
            jitter: Duration::from_micros(rng.range(0, 20)),
            drop: rng.unit() * 0.08,
            duplicate: rng.unit() * 0.05,
            reorder: rng.unit() * 0.10,
            reorder_delay: Duration::from_micros(rng.range(10, 300)),
            corrupt: rng.unit() * 0.03,
            ecn_mark: rng.unit() * 0.05,
            cut_at: None,
            ce_mark: 0.0,
            bottleneck: None,
        }
    }
}

/// What a filter decides for one packet (before the random faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the random faults decide.
    Pass,
    Drop,
    /// Deliver it this many times (each with its own delay; no other fault).
    Copies(u8),
    /// Deliver it once, this much later than usual (no other fault).
    Delay(Duration),
}

/// The transport fields of a packet, for filters and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub from: usize,
    pub to: usize,
    /// The IP source and destination (a node may have several addresses).
    pub src_ip: std::net::Ipv4Addr,
    pub dst_ip: std::net::Ipv4Addr,
    pub opcode: Opcode,
    /// The BTH MigReq bit.
    pub mig_req: bool,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub pkey: u16,
    /// The AETH syndrome of acknowledgements and READ responses.
    pub syndrome: Option<Syndrome>,
    /// The Q_Key of a datagram.
    pub qkey: Option<u32>,
    pub payload_len: usize,
    /// RETH virtual address and DMA length (WRITE FIRST/ONLY, READ request).
    pub reth: Option<(u64, u32)>,
    /// The first 4 payload bytes (little-endian), for tests that number
    /// their messages there.
    pub tag: Option<u32>,
    /// AtomicETH virtual address.
    pub atomic_va: Option<u64>,
}

impl PacketInfo {
    /// A NAK for a PSN sequence error (IBTA 9.7.5.2.8).
    pub fn is_seq_nak(&self) -> bool {
        self.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError))
    }
}

/// What happened to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Handed to the network (one entry per packet a node sent).
    Sent,
    /// Handed to the receiving endpoint's `handle`.
    Delivered,
    LostCut,
    LostFilter,
    LostRandom,
    /// Dropped by the receiving device: the ICRC did not match.
    BadIcrc,
    /// Dropped by the receiving device: the IP/UDP headers did not decode
    /// (or the IPv4 header checksum failed).
    Malformed,
    /// No node has the destination address.
    NoRoute,
}

/// One line of the packet log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEntry {
    pub at: Instant,
    pub fate: Fate,
    pub info: PacketInfo,
}

/// Counts of what the network did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost_cut: u64,
    pub lost_filter: u64,
    pub lost_random: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub ecn_marked: u64,
    /// IP headers marked CE (randomly or by the bottleneck).
    pub ce_marked: u64,
    /// The longest wait in the bottleneck's queue.
    pub max_queue_delay: Duration,
    /// Dropped by the bottleneck's full queue.
    pub lost_queue: u64,
    pub bad_icrc: u64,
    pub malformed: u64,
    pub no_route: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub struct InFlight {
    pub at: Instant,
    /// Send order, to break ties deterministically.
    pub seq: u64,
    pub from: usize,
    pub to: usize,
    /// The whole IPv4 packet.
    pub bytes: Vec<u8>,
    pub info: PacketInfo,
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

pub type Filter = Box<dyn FnMut(Instant, &PacketInfo) -> Verdict>;

/// Offset of the BTH in the IPv4 packets the simulator builds (20-byte
/// IPv4 header without options, 8-byte UDP header).
pub const BTH_AT: usize = 28;

pub struct Net {
    pub faults: Faults,
    pub rng: Rng,
    pub stats: NetStats,
    pub filter: Option<Filter>,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// When the bottleneck's port has sent what it holds.
    busy_until: Instant,
}

/// Sets the ECN field of an IPv4 header to CE and fixes its checksum.
pub fn mark_ce(ip: &mut [u8]) {
    ip[1] |= 0b11;
    ip[10] = 0;
    ip[11] = 0;
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let mut sum: u32 = 0;
    for w in ip[..ihl].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

impl Net {
    pub fn new(rng: Rng, faults: Faults) -> Net {
        Net {
            faults,
            rng,
            stats: NetStats::default(),
            filter: None,
            queue: BinaryHeap::new(),
            seq: 0,
            busy_until: Instant::ZERO,
        }
    }

    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse(p)| p.at)
    }

    /// The next packet due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<InFlight> {
        if self.next_delivery()? <= now {
            self.queue.pop().map(|Reverse(p)| p)
        } else {
            None
        }
    }

    fn delay(&mut self, extra: Duration) -> Duration {
        let f = self.faults;
        let mut d = f.latency + extra;
        if !f.jitter.is_zero() {
            d += Duration::from_nanos(self.rng.range(0, f.jitter.as_nanos() as u64));
        }
        if self.rng.chance(f.reorder) {
            self.stats.reordered += 1;
            d += Duration::from_nanos(self.rng.range(0, f.reorder_delay.as_nanos() as u64));
        }
        d
    }

    fn enqueue(
        &mut self,
        now: Instant,
        d: Duration,
        from: usize,
        to: usize,
        bytes: Vec<u8>,
        info: PacketInfo,
    ) {
        self.seq += 1;
        self.queue.push(Reverse(InFlight {
            at: now.saturating_add(d),
            seq: self.seq,
            from,
            to,
            bytes,
            info,
        }));
    }

    /// Sends `bytes` (a whole IPv4 packet) from node `from` to node `to`;
    /// returns the fate when it is lost at once.
    pub fn send(
        &mut self,
        now: Instant,
        from: usize,
        to: usize,
        mut bytes: Vec<u8>,
        info: PacketInfo,
    ) -> Option<Fate> {
        self.stats.sent += 1;
        if self.faults.cut_at.is_some_and(|t| now >= t) {
            self.stats.lost_cut += 1;
            return Some(Fate::LostCut);
        }
        let verdict = match self.filter.as_mut() {
            Some(f) => f(now, &info),
            None => Verdict::Pass,
        };
        match verdict {
            Verdict::Drop => {
                self.stats.lost_filter += 1;
                return Some(Fate::LostFilter);
            }
            Verdict::Copies(n) => {
                for _ in 0..n {
                    let d = self.faults.latency;
                    self.enqueue(now, d, from, to, bytes.clone(), info);
                }
                if n == 0 {
                    self.stats.lost_filter += 1;
                    return Some(Fate::LostFilter);
                }
                return None;
            }
            Verdict::Delay(extra) => {
                let d = self.faults.latency + extra;
                self.enqueue(now, d, from, to, bytes, info);
                return None;
            }
            Verdict::Pass => {}
        }
        let f = self.faults;
        if self.rng.chance(f.drop) {
            self.stats.lost_random += 1;
            return Some(Fate::LostRandom);
        }
        if self.rng.chance(f.corrupt) {
            self.stats.corrupted += 1;
            // A byte the ICRC covers and does not mask: from the BTH on,
            // except BTH byte 4 (FECN, BECN, reserved).
            let span = bytes.len() - BTH_AT - 1;
            let mut at = BTH_AT + self.rng.below(span as u64) as usize;
            if at >= BTH_AT + 4 {
                at += 1;
            }
            let bit = 1u8 << self.rng.below(8);
            bytes[at] ^= bit;
        }
        if self.rng.chance(f.ecn_mark) {
            self.stats.ecn_marked += 1;
            bytes[BTH_AT + 4] |= 0xc0;
        }
        if f.ce_mark > 0.0 && self.rng.chance(f.ce_mark) {
            self.stats.ce_marked += 1;
            mark_ce(&mut bytes);
        }
        if let Some(b) = f.bottleneck.filter(|b| b.to == to) {
            // Serialized behind what the port holds; marked if it waited
            // too long. Its delay after the port is the usual one.
            let start = self.busy_until.max(now);
            let wait = start.saturating_since(now);
            if wait > b.drop_above {
                self.stats.lost_queue += 1;
                return None;
            }
            let ns = (bytes.len() as f64 * 8_000.0 / b.rate_mbps).ceil() as u64;
            let leave = start.saturating_add(Duration::from_nanos(ns));
            self.busy_until = leave;
            self.stats.max_queue_delay = self.stats.max_queue_delay.max(wait);
            if wait > b.mark_above {
                self.stats.ce_marked += 1;
                mark_ce(&mut bytes);
            }
            let d = leave.saturating_since(now) + self.faults.latency;
            self.enqueue(now, d, from, to, bytes, info);
            return None;
        }
        let mut copies = 1;
        while copies < 3 && self.rng.chance(f.duplicate) {
            copies += 1;
            self.stats.duplicated += 1;
        }
        for _ in 0..copies {
            let d = self.delay(Duration::ZERO);
            self.enqueue(now, d, from, to, bytes.clone(), info);
        }
        None
    }
}
