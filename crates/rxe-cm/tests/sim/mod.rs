//! A small deterministic network of CM endpoints for the tests: seeded loss,
//! duplication and reordering (random delay) of MADs, a simulated clock,
//! and an "application" per node that answers the CM's events by a policy.
//! Modelled on `rxe-core/tests/sim`, reduced to what MADs need.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use core::time::Duration;

use rxe_cm::mad::{RejectReason, SidrStatus, MAD_LEN};
use rxe_cm::{AcceptParams, CmConfig, CmEndpoint, CmEvent, CommId, MadAddr, SidrReply};
use rxe_core::transport::Instant;
use rxe_core::Gid;

/// splitmix64: one line of a published generator, pinned here so a seed
/// names the same trace forever.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_0fc0_ffee)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// The network's faults, in per mille.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: u64,
    pub dup: u64,
    /// Extra random delay up to this (reorders MADs).
    pub jitter: Duration,
}

/// How a node's application answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRequest {
    Accept,
    Reject,
    /// MRA at once, accept after the delay.
    MraThenAccept(Duration),
    /// Leave it (the active side times out).
    Ignore,
}

pub struct Node {
    pub ep: CmEndpoint,
    pub gid: Gid,
    pub on_request: OnRequest,
    /// Send the RTU when the REP arrives.
    pub auto_rtu: bool,
    /// Every event, with its time.
    pub events: Vec<(Instant, CmEvent)>,
    /// The node neither sends nor receives (a dead peer).
    pub cut: bool,
    pub next_qpn: u32,
}

impl Node {
    pub fn addr(&self) -> MadAddr {
        MadAddr::gsi(self.gid)
    }
    pub fn events_of(&self, id: CommId) -> Vec<&CmEvent> {
        self.events
            .iter()
            .filter(|(_, e)| e.id() == id)
            .map(|(_, e)| e)
            .collect()
    }
}

/// A MAD on the wire: (arrival, sequence, destination node, source, bytes).
type InFlight = (Instant, u64, usize, MadAddr, Box<[u8; MAD_LEN]>);

pub struct Sim {
    pub now: Instant,
    pub rng: Rng,
    pub faults: Faults,
    pub base_delay: Duration,
    pub nodes: Vec<Node>,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    actions: BTreeSet<(Instant, u64, usize, u32)>,
    seq: u64,
    pub delivered: u64,
    pub lost: u64,
}

pub fn gid(n: u8) -> Gid {
    Gid::from(std::net::Ipv4Addr::new(127, 0, 0, n))
}

/// Timers small enough for a quick simulation: response timeout
/// 4.2 ms + 2 x 1 ms, TimeWait 2.1 ms.
pub fn sim_config(guid: u64, first_comm_id: u32) -> CmConfig {
    CmConfig {
        first_comm_id,
        packet_life_time: 8,
        cm_response_timeout: 10,
        max_cm_retries: 15,
        ca_ack_delay: 6,
        mra_service_timeout: 14,
        ..CmConfig::new(guid)
    }
}

impl Sim {
    pub fn new(seed: u64, faults: Faults, n: usize) -> Sim {
        let nodes = (0..n)
            .map(|i| Node {
                ep: CmEndpoint::new(sim_config(0x1000 + i as u64, 0x100 * (i as u32 + 1))),
                gid: gid(i as u8 + 1),
                on_request: OnRequest::Accept,
                auto_rtu: true,
                events: Vec::new(),
                cut: false,
                next_qpn: 0x11 + 0x100 * i as u32,
            })
            .collect();
        Sim {
            now: Instant::from_nanos(1_000_000),
            rng: Rng::new(seed),
            faults,
            base_delay: Duration::from_micros(100),
            nodes,
            in_flight: BinaryHeap::new(),
            actions: BTreeSet::new(),
            seq: 0,
            delivered: 0,
            lost: 0,
        }
    }

    /// Sends what every node has queued through the faulty network.
    fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some((to, mad)) = self.nodes[i].ep.poll_transmit() {
                if self.nodes[i].cut {
                    self.lost += 1;
                    continue;
                }
                let Some(dst) = self.nodes.iter().position(|n| n.gid == to.gid) else {
                    self.lost += 1;
                    continue;
                };
                let from = self.nodes[i].addr();
                let copies = if self.rng.chance(self.faults.dup) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    if self.rng.chance(self.faults.loss) {
                        self.lost += 1;
                        continue;
                    }
                    let jitter = self
                        .rng
                        .below(u64::try_from(self.faults.jitter.as_nanos()).unwrap_or(0) + 1);
                    let at = self
                        .now
                        .saturating_add(self.base_delay + Duration::from_nanos(jitter));
                    self.seq += 1;
                    self.in_flight
                        .push(Reverse((at, self.seq, dst, from, Box::new(mad))));
                }
            }
        }
    }

    /// Lets each node's application answer its new events.
    fn apps(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some(ev) = self.nodes[i].ep.poll_event() {
                let now = self.now;
                match &ev {
                    CmEvent::ConnectRequest { id, .. } => match self.nodes[i].on_request {
                        OnRequest::Accept => self.accept(i, *id).unwrap(),
                        OnRequest::Reject => {
                            self.nodes[i]
                                .ep
                                .reject(now, *id, RejectReason::ConsumerDefined, b"no thanks")
                                .unwrap();
                        }
                        OnRequest::MraThenAccept(d) => {
                            self.nodes[i].ep.send_mra(*id, &[]).unwrap();
                            self.seq += 1;
                            self.actions
                                .insert((now.saturating_add(d), self.seq, i, id.0));
                        }
                        OnRequest::Ignore => {}
                    },
                    CmEvent::ConnectResponse { id, .. } if self.nodes[i].auto_rtu => {
                        self.nodes[i].ep.send_rtu(*id, &[]).unwrap();
                    }
                    CmEvent::SidrRequest { id, .. } => {
                        let qpn = self.nodes[i].next_qpn;
                        let r = SidrReply {
                            status: SidrStatus::Success,
                            qpn,
                            qkey: 0x1111_1111,
                            private_data: vec![7],
                        };
                        self.nodes[i].ep.sidr_reply(now, *id, r).unwrap();
                    }
                    _ => {}
                }
                self.nodes[i].events.push((now, ev));
            }
        }
    }

    fn accept(&mut self, i: usize, id: CommId) -> Result<(), rxe_cm::CmError> {
        let qpn = self.nodes[i].next_qpn;
        self.nodes[i].next_qpn += 1;
        let psn = (self.rng.next_u64() & 0xff_ffff) as u32;
        let now = self.now;
        self.nodes[i]
            .ep
            .accept(now, id, AcceptParams::new(qpn, psn))
    }

    /// Runs until nothing is in flight and no timer or action is left, or
    /// until `limit` (simulated time from now). Returns whether it went quiet.
    pub fn run_for(&mut self, limit: Duration) -> bool {
        let end = self.now.saturating_add(limit);
        loop {
            self.apps();
            self.flush();
            let next_msg = self.in_flight.peek().map(|Reverse(x)| x.0);
            let next_timer = self.nodes.iter().filter_map(|n| n.ep.poll_timeout()).min();
            let next_action = self.actions.first().map(|a| a.0);
            let Some(next) = [next_msg, next_timer, next_action]
                .into_iter()
                .flatten()
                .min()
            else {
                return true;
            };
            if next > end {
                self.now = end;
                return false;
            }
            self.now = self.now.max(next);
            while let Some(Reverse((at, ..))) = self.in_flight.peek() {
                if *at > self.now {
                    break;
                }
                let Reverse((_, _, dst, from, mad)) = self.in_flight.pop().unwrap();
                if self.nodes[dst].cut {
                    self.lost += 1;
                    continue;
                }
                self.delivered += 1;
                let now = self.now;
                self.nodes[dst].ep.handle(now, from, &mad[..]);
            }
            while let Some(&(at, s, i, id)) = self.actions.first() {
                if at > self.now {
                    break;
                }
                self.actions.remove(&(at, s, i, id));
                // The request may be gone meanwhile (the active side gave up).
                let _ = self.accept(i, CommId(id));
            }
            let now = self.now;
            for n in &mut self.nodes {
                if n.ep.poll_timeout().is_some_and(|t| t <= now) {
                    n.ep.handle_timeout(now);
                }
            }
        }
    }
}
