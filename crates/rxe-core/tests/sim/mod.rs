//! A deterministic network simulator for the transport engine, in the
//! manner of quinn-proto's `Pair`: N nodes, each an [`Endpoint`] with its own
//! [`VecMemory`] and an IPv4 address (a value only: nothing touches a
//! socket), a simulated clock, and a faulty network driven by one seed.
//!
//! Every packet an endpoint emits is wrapped in a real RoCEv2/IPv4 packet
//! (`wire::build::emit_roce_v2`, so the ICRC is real), passed through the
//! network, and at delivery decoded (`wire::frame::decode`) and checked
//! (IPv4 header checksum, `wire::icrc::verify`) as a device would before it
//! reaches `Endpoint::handle`. Time jumps to the next packet delivery or
//! endpoint deadline. Every run is bounded in simulated time and steps, and
//! panics with a description when a bound is exceeded.

#![allow(dead_code)]

pub mod net;
pub mod rng;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rxe_core::transport::{
    is_ce, AccessFlags, AddressVector, AsyncEvent, AttrMask, Endpoint, Instant, Key, PathMtu, Psn,
    QpAttr, QpCaps, QpInit, QpState, QpType, RecvMeta, RecvWr, SendData, SendOp, SendWr, Sge,
    UdDest, VecMemory, WorkCompletion, WorkQueue,
};
use rxe_core::wire::build::{emit_roce_v2, RoceV2Ip};
use rxe_core::wire::frame::{decode, LinkType};
use rxe_core::wire::{icrc, TransportRepr};
use rxe_core::Gid;

#[allow(unused_imports)]
pub use net::{Bottleneck, Fate, Faults, Filter, LogEntry, Net, NetStats, PacketInfo, Verdict};
#[allow(unused_imports)]
pub use rng::Rng;

/// Room for the largest packet: 4096 bytes of payload and every header.
const BUF_LEN: usize = 4096 + 256;

/// One simulated NIC port.
pub struct Node {
    pub ep: Endpoint,
    pub mem: VecMemory,
    /// The node's first address (GID index 0).
    pub ip: Ipv4Addr,
    /// More addresses ([`Sim::add_address`]), at GID indexes 1, 2, ...
    pub more_ips: Vec<Ipv4Addr>,
    /// Every completion, with when it was polled.
    pub wcs: Vec<(Instant, WorkCompletion)>,
    pub events: Vec<(Instant, AsyncEvent)>,
}

impl Node {
    pub fn gid(&self) -> Gid {
        Gid::from(self.ip)
    }

    /// The node's address at GID index `i`.
    pub fn ip_at(&self, i: u8) -> Option<Ipv4Addr> {
        match i {
            0 => Some(self.ip),
            _ => self.more_ips.get(usize::from(i) - 1).copied(),
        }
    }

    /// The address vector that reaches this node at its address of GID
    /// index `i`.
    pub fn av_at(&self, i: u8) -> AddressVector {
        AddressVector {
            dgid: Gid::from(self.ip_at(i).expect("no such address")),
            ..self.av()
        }
    }

    /// The address vector that reaches this node.
    pub fn av(&self) -> AddressVector {
        AddressVector {
            dgid: self.gid(),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            src_port: None,
        }
    }

    /// Completions of `qpn`'s queue `q`, in order.
    pub fn wcs_of(&self, qpn: u32, q: WorkQueue) -> Vec<WorkCompletion> {
        self.wcs
            .iter()
            .filter(|(_, w)| w.qp_num == qpn && w.queue == q)
            .map(|(_, w)| *w)
            .collect()
    }

    pub fn count_wcs(&self, qpn: u32, q: WorkQueue) -> usize {
        self.wcs
            .iter()
            .filter(|(_, w)| w.qp_num == qpn && w.queue == q)
            .count()
    }

    pub fn state(&self, qpn: u32) -> QpState {
        self.ep.query_qp(qpn).expect("query_qp").state()
    }

    /// Registers `data` at `va` in PD `pd`.
    pub fn reg(&mut self, pd: u32, va: u64, data: Vec<u8>, access: AccessFlags) -> Key {
        self.mem
            .register_bytes(pd, va, data, access)
            .expect("register memory")
    }

    pub fn bytes(&self, key: Key) -> &[u8] {
        self.mem.bytes(key).expect("region")
    }
}

/// Bounds of one simulation: exceeding either is a test failure.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_time: Duration,
    pub max_steps: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_time: Duration::from_secs(600),
            max_steps: 2_000_000,
        }
    }
}

/// FNV-1a, 64 bits: a stable digest of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceHash(pub u64);

impl TraceHash {
    fn new() -> TraceHash {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn add_u64(&mut self, v: u64) {
        self.add(&v.to_le_bytes());
    }
}

pub struct Sim {
    pub now: Instant,
    pub nodes: Vec<Node>,
    pub net: Net,
    pub limits: Limits,
    pub steps: u64,
    /// Every packet's fate, when `Some` (tests that look at packets turn it on).
    pub log: Option<Vec<LogEntry>>,
    pub trace: TraceHash,
    /// A free generator for the scenario (separate from the network's).
    pub rng: Rng,
    buf: Vec<u8>,
}

/// The RecvMeta a device builds for an IPv4 packet: IPv4-mapped GIDs and a
/// GRH space of 20 zero bytes then the IPv4 header.
pub fn recv_meta(ip_header: &[u8]) -> RecvMeta {
    let src = Ipv4Addr::new(ip_header[12], ip_header[13], ip_header[14], ip_header[15]);
    let dst = Ipv4Addr::new(ip_header[16], ip_header[17], ip_header[18], ip_header[19]);
    let mut meta = RecvMeta::between(Gid::from(src), Gid::from(dst));
    meta.grh[20..40].copy_from_slice(&ip_header[..20]);
    meta.ce = is_ce(ip_header[1]);
    meta
}

/// The IPv4 header checksum is valid (sums to 0xffff).
pub fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let ihl = usize::from(h[0] & 0xf) * 4;
    if h.len() < ihl || ihl < 20 {
        return false;
    }
    let mut sum: u32 = 0;
    for w in h[..ihl].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

pub fn packet_info(from: usize, to: usize, t: &TransportRepr, payload: &[u8]) -> PacketInfo {
    PacketInfo {
        from,
        to,
        src_ip: Ipv4Addr::UNSPECIFIED,
        dst_ip: Ipv4Addr::UNSPECIFIED,
        opcode: t.bth.opcode,
        mig_req: t.bth.mig_req,
        dest_qp: t.bth.dest_qp,
        psn: t.bth.psn,
        ack_req: t.bth.ack_req,
        solicited: t.bth.solicited,
        pkey: t.bth.pkey,
        syndrome: t.ext.aeth.map(|a| a.syndrome),
        qkey: t.ext.deth.map(|d| d.qkey),
        payload_len: t.payload_len,
        reth: t.ext.reth.map(|r| (r.va, r.dma_len)),
        atomic_va: t.ext.atomic_eth.map(|a| a.va),
        tag: payload
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    }
}

impl Sim {
    /// `n` nodes at 127.0.0.1, 127.0.0.2, ..., each with an endpoint of
    /// default capabilities, and a network with `faults` driven by `seed`.
    pub fn new(seed: u64, n: usize, faults: Faults) -> Sim {
        Sim::with_caps(seed, n, faults, QpCaps::default())
    }

    pub fn with_caps(seed: u64, n: usize, faults: Faults, caps: QpCaps) -> Sim {
        let mut root = Rng::new(seed);
        let net_rng = root.fork();
        let nodes = (0..n)
            .map(|i| {
                let ip = Ipv4Addr::new(127, 0, 0, (i + 1) as u8);
                let mut ep = Endpoint::new(caps);
                // One GID, as a device on one address has: connected QPs
                // then check both ends of every packet's path.
                ep.set_gid_table(vec![Some(Gid::from(ip))]);
                Node {
                    ep,
                    mem: VecMemory::new(),
                    ip,
                    more_ips: Vec::new(),
                    wcs: Vec::new(),
                    events: Vec::new(),
                }
            })
            .collect();
        Sim {
            now: Instant::ZERO,
            nodes,
            net: Net::new(net_rng, faults),
            limits: Limits::default(),
            steps: 0,
            log: None,
            trace: TraceHash::new(),
            rng: root.fork(),
            buf: vec![0; BUF_LEN],
        }
    }

    pub fn enable_log(&mut self) {
        self.log = Some(Vec::new());
    }

    pub fn log(&self) -> &[LogEntry] {
        self.log.as_deref().unwrap_or(&[])
    }

    /// The PSNs of the sequence-error NAKs sent, in order (needs the log).
    pub fn sent_seq_naks(&self) -> Vec<u32> {
        self.log()
            .iter()
            .filter(|e| e.fate == Fate::Sent && e.info.is_seq_nak())
            .map(|e| e.info.psn)
            .collect()
    }

    pub fn set_filter(&mut self, f: impl FnMut(Instant, &PacketInfo) -> Verdict + 'static) {
        self.net.filter = Some(Box::new(f));
    }

    fn record(&mut self, fate: Fate, info: PacketInfo) {
        self.trace.add_u64(self.now.as_nanos());
        self.trace
            .add(&[fate as u8, info.from as u8, info.to as u8, info.opcode.0]);
        self.trace.add_u64(u64::from(info.psn));
        if let Some(log) = self.log.as_mut() {
            log.push(LogEntry {
                at: self.now,
                fate,
                info,
            });
        }
    }

    fn node_of(&self, ip: Ipv4Addr) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.ip == ip || n.more_ips.contains(&ip))
    }

    /// Gives node `n` one more address, at the next GID index, as a device
    /// bound to several addresses has.
    pub fn add_address(&mut self, n: usize, ip: Ipv4Addr) {
        let node = &mut self.nodes[n];
        node.more_ips.push(ip);
        let table = std::iter::once(node.ip)
            .chain(node.more_ips.iter().copied())
            .map(|ip| Some(Gid::from(ip)))
            .collect();
        node.ep.set_gid_table(table);
    }

    /// Sends transport bytes (BTH .. 4 zero ICRC bytes, as `poll_transmit`
    /// writes them) from node `from` to the node with `dest`'s GID. Used for
    /// every packet an endpoint emits, and by tests that inject their own.
    pub fn send_transport(
        &mut self,
        from: usize,
        dest: &AddressVector,
        src_qpn: u32,
        tbytes: &[u8],
    ) {
        let pkt = match TransportRepr::parse(tbytes) {
            Ok(p) => p,
            Err(e) => panic!(
                "t={:?} node {from} QP {src_qpn:#x} emitted a packet that does not parse: {e}: {:02x?}",
                self.now, tbytes
            ),
        };
        // The source is the sender's address that the path's GID index
        // names, as a device picks its socket.
        let src_ip = self.nodes[from]
            .ip_at(dest.sgid_index)
            .unwrap_or(self.nodes[from].ip);
        let dst_ip = match dest.dgid.to_ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        };
        let to = dst_ip.and_then(|ip| self.node_of(ip));
        let mut info = packet_info(from, to.unwrap_or(usize::MAX), &pkt.repr, pkt.payload);
        info.src_ip = src_ip;
        info.dst_ip = dst_ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
        let Some(to) = to else {
            self.net.stats.no_route += 1;
            self.record(Fate::NoRoute, info);
            return;
        };
        // kernel rxe: 0xC000 plus a hash of the QPN.
        let hash = (src_qpn ^ (src_qpn >> 14)) & 0x3fff;
        let ip = RoceV2Ip {
            traffic_class: dest.traffic_class,
            hop_limit: if dest.hop_limit == 0 {
                64
            } else {
                dest.hop_limit
            },
            ..RoceV2Ip::new(
                IpAddr::V4(src_ip),
                IpAddr::V4(info.dst_ip),
                dest.src_port.unwrap_or(0xc000 | hash as u16),
            )
        };
        let mut wire = vec![0u8; net::BTH_AT + tbytes.len()];
        let n = emit_roce_v2(&ip, &pkt.repr, pkt.payload, &mut wire)
            .unwrap_or_else(|e| panic!("emit_roce_v2: {e}"));
        assert_eq!(n, wire.len(), "re-emitted packet has another length");
        // The engine's bytes and the re-emitted ones agree up to the ICRC.
        assert_eq!(
            &wire[net::BTH_AT..n - 4],
            &tbytes[..tbytes.len() - 4],
            "packet does not survive parse+emit unchanged"
        );
        self.trace.add(&wire);
        self.record(Fate::Sent, info);
        if let Some(fate) = self.net.send(self.now, from, to, wire, info) {
            self.record(fate, info);
        }
    }

    /// Hands every due packet to its node; true if any was due.
    fn deliver_due(&mut self) -> bool {
        let mut any = false;
        while let Some(p) = self.net.pop_due(self.now) {
            any = true;
            self.steps += 1;
            let frame = match decode(LinkType::RawIp, &p.bytes) {
                Ok(Some(f)) => f,
                Ok(None) | Err(_) => {
                    self.net.stats.malformed += 1;
                    self.record(Fate::Malformed, p.info);
                    continue;
                }
            };
            let iph = frame.ip.expect("RoCEv2 has an IP header");
            if !ipv4_checksum_ok(iph) {
                self.net.stats.malformed += 1;
                self.record(Fate::Malformed, p.info);
                continue;
            }
            if icrc::verify(&frame.icrc_scope(), frame.transport).is_err() {
                self.net.stats.bad_icrc += 1;
                self.record(Fate::BadIcrc, p.info);
                continue;
            }
            let meta = recv_meta(iph);
            self.net.stats.delivered += 1;
            self.record(Fate::Delivered, p.info);
            let node = &mut self.nodes[p.to];
            node.ep
                .handle(self.now, &meta, frame.transport, &mut node.mem);
        }
        any
    }

    /// Fires due timers, drains every node's transmit queue, collects
    /// completions and events. True if anything happened.
    fn pump_nodes(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            if node.ep.poll_timeout().is_some_and(|t| t <= self.now) {
                node.ep.handle_timeout(self.now);
                any = true;
            }
            loop {
                let node = &mut self.nodes[i];
                let Some(t) = node
                    .ep
                    .poll_transmit(self.now, &mut node.mem, &mut self.buf)
                else {
                    break;
                };
                any = true;
                self.steps += 1;
                self.check_limits("sending");
                assert!(
                    t.len <= self.buf.len() && t.len >= 16,
                    "Transmit.len {} out of range",
                    t.len
                );
                let tbytes = self.buf[..t.len].to_vec();
                assert_eq!(
                    &tbytes[t.len - 4..],
                    &[0, 0, 0, 0],
                    "the engine must leave the ICRC slot zero"
                );
                self.send_transport(i, &t.dest, t.src_qpn, &tbytes);
            }
            self.collect(i);
        }
        any
    }

    fn collect(&mut self, i: usize) {
        let now = self.now;
        let node = &mut self.nodes[i];
        while let Some(wc) = node.ep.poll_completion() {
            self.trace.add_u64(now.as_nanos());
            self.trace.add_u64(wc.wr_id);
            self.trace.add(&[wc.status as u8, wc.opcode as u8]);
            node.wcs.push((now, wc));
        }
        while let Some(ev) = node.ep.poll_event() {
            node.events.push((now, ev));
        }
    }

    /// Collects completions of every node (after a test's direct calls).
    pub fn collect_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.collect(i);
        }
    }

    fn check_limits(&self, doing: &str) {
        let t = Duration::from_nanos(self.now.as_nanos());
        if t > self.limits.max_time || self.steps > self.limits.max_steps {
            panic!(
                "simulation bound exceeded while {doing}: t = {t:?} (max {:?}), steps = {} (max {}), \
                 {} packets in flight, net {:?}",
                self.limits.max_time,
                self.steps,
                self.limits.max_steps,
                self.net.in_flight(),
                self.net.stats
            );
        }
    }

    /// The next time something is due: a delivery or a deadline.
    pub fn next_event(&self) -> Option<Instant> {
        let timers = self.nodes.iter().filter_map(|n| n.ep.poll_timeout());
        self.net.next_delivery().into_iter().chain(timers).min()
    }

    /// Does everything due now, repeatedly, until nothing more is.
    pub fn settle_now(&mut self) {
        loop {
            let a = self.pump_nodes();
            let b = self.deliver_due();
            self.steps += 1;
            self.check_limits("working");
            if !a && !b {
                break;
            }
        }
    }

    /// Advances to the next event (or returns false when there is none).
    fn advance(&mut self, until: Option<Instant>) -> bool {
        self.settle_now();
        let Some(next) = self.next_event() else {
            return false;
        };
        if until.is_some_and(|u| next > u) {
            return false;
        }
        // Deadlines in the past are due now (the engine may report one).
        if next > self.now {
            self.now = next;
        }
        self.check_limits("advancing time");
        true
    }

    /// Runs until `done` holds; panics if the simulation goes idle first or
    /// a bound is exceeded. `what` names the condition in the message.
    pub fn run_until(&mut self, what: &str, mut done: impl FnMut(&Sim) -> bool) {
        loop {
            self.settle_now();
            if done(self) {
                return;
            }
            if !self.advance(None) {
                self.settle_now();
                if done(self) {
                    return;
                }
                panic!(
                    "simulation went idle at t = {:?} before: {what}; net {:?}",
                    Duration::from_nanos(self.now.as_nanos()),
                    self.net.stats
                );
            }
        }
    }

    /// Runs until nothing is in flight and no timer is set.
    pub fn run_until_idle(&mut self) {
        while self.advance(None) {}
        self.settle_now();
    }

    /// Runs for `d` of simulated time (ending exactly at now + d).
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now.saturating_add(d);
        while self.advance(Some(end)) {}
        if self.now < end {
            self.now = end;
        }
        self.settle_now();
    }

    /// Prints the packet log when `RXE_SIM_DUMP` is set (for debugging a
    /// seed).
    pub fn dump(&self) {
        if std::env::var_os("RXE_SIM_DUMP").is_none() {
            return;
        }
        for e in self.log() {
            let i = &e.info;
            eprintln!(
                "{:>12} {:?} {}->{} {} qp {:#x} psn {:#08x}{} len {} {:?}{}",
                e.at.as_nanos(),
                e.fate,
                i.from,
                i.to,
                i.opcode,
                i.dest_qp,
                i.psn,
                if i.ack_req { " A" } else { "" },
                i.payload_len,
                i.syndrome,
                i.reth
                    .map(|(va, l)| format!(" reth {va:#x}+{l}"))
                    .unwrap_or_default()
            );
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for (t, w) in &node.wcs {
                eprintln!("{:>12} node {n} {:?}", t.as_nanos(), w);
            }
        }
    }

    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now.as_nanos())
    }
}

// ---------------------------------------------------------------------------
// QP helpers

/// The attributes of a connected QP pair.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    pub qp_type: QpType,
    pub pd: u32,
    pub mtu: PathMtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// As requester: at most this many READ/atomics outstanding.
    pub max_rd_atomic: u8,
    /// As responder.
    pub max_dest_rd_atomic: u8,
    pub access: AccessFlags,
    /// Start PSN of a's send queue (= b's rq_psn) and of b's.
    pub psn_a: Psn,
    pub psn_b: Psn,
    pub pkey_index_a: u16,
    pub pkey_index_b: u16,
    pub init: QpInit,
}

impl ConnOpts {
    pub fn new(qp_type: QpType) -> ConnOpts {
        ConnOpts {
            qp_type,
            pd: 1,
            mtu: PathMtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: AccessFlags::all(),
            psn_a: Psn::new(0x10),
            psn_b: Psn::new(0x20),
            pkey_index_a: 0,
            pkey_index_b: 0,
            init: QpInit::new(qp_type, 1),
        }
    }

    /// Random start PSNs, 40% of them within 64 of 2^24 so that the run
    /// wraps.
    pub fn random_psns(mut self, rng: &mut Rng) -> ConnOpts {
        self.psn_a = random_psn(rng);
        self.psn_b = random_psn(rng);
        self
    }
}

pub fn random_psn(rng: &mut Rng) -> Psn {
    if rng.chance(0.4) {
        Psn::new(0xff_ffff - rng.below(64) as u32)
    } else {
        Psn::new(rng.below(1 << 24) as u32)
    }
}

/// Brings QP `qpn` of node `n` from RESET to RTS, connected to `dest_qpn` at
/// node `peer`.
#[allow(clippy::too_many_arguments)]
pub fn bring_up(
    sim: &mut Sim,
    n: usize,
    qpn: u32,
    peer: usize,
    dest_qpn: u32,
    o: &ConnOpts,
    sq_psn: Psn,
    rq_psn: Psn,
    pkey_index: u16,
) {
    let av = sim.nodes[peer].av();
    let ep = &mut sim.nodes[n].ep;
    let rc = o.qp_type == QpType::Rc;
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(pkey_index),
        port_num: Some(1),
        access_flags: Some(o.access),
        ..Default::default()
    };
    ep.modify_qp(qpn, &init, init.mask()).expect("RESET->INIT");
    let mut rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        av: Some(av),
        path_mtu: Some(o.mtu),
        dest_qpn: Some(dest_qpn),
        rq_psn: Some(rq_psn),
        ..Default::default()
    };
    if rc {
        rtr.max_dest_rd_atomic = Some(o.max_dest_rd_atomic);
        rtr.min_rnr_timer = Some(o.min_rnr_timer);
    }
    ep.modify_qp(qpn, &rtr, rtr.mask()).expect("INIT->RTR");
    let mut rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        ..Default::default()
    };
    if rc {
        rts.timeout = Some(o.timeout);
        rts.retry_cnt = Some(o.retry_cnt);
        rts.rnr_retry = Some(o.rnr_retry);
        rts.max_rd_atomic = Some(o.max_rd_atomic);
    }
    ep.modify_qp(qpn, &rts, rts.mask()).expect("RTR->RTS");
    assert_eq!(ep.query_qp(qpn).unwrap().state(), QpState::Rts);
}

/// Creates a connected RC or UC pair between nodes `a` and `b`.
pub fn connect(sim: &mut Sim, a: usize, b: usize, o: &ConnOpts) -> (u32, u32) {
    let mut init = o.init;
    init.qp_type = o.qp_type;
    init.pd = o.pd;
    let qa = sim.nodes[a].ep.create_qp(init).expect("create_qp");
    let qb = sim.nodes[b].ep.create_qp(init).expect("create_qp");
    bring_up(sim, a, qa, b, qb, o, o.psn_a, o.psn_b, o.pkey_index_a);
    bring_up(sim, b, qb, a, qa, o, o.psn_b, o.psn_a, o.pkey_index_b);
    (qa, qb)
}

/// Creates a UD (or GSI) QP in RTS with Q_Key `qkey`.
pub fn create_ud(
    sim: &mut Sim,
    n: usize,
    qp_type: QpType,
    pd: u32,
    qkey: u32,
    pkey_index: u16,
) -> u32 {
    let ep = &mut sim.nodes[n].ep;
    let qpn = ep.create_qp(QpInit::new(qp_type, pd)).expect("create_qp");
    let mut init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(pkey_index),
        qkey: Some(qkey),
        ..Default::default()
    };
    if qp_type == QpType::Ud {
        init.port_num = Some(1);
    }
    ep.modify_qp(qpn, &init, init.mask()).expect("RESET->INIT");
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        ..Default::default()
    };
    ep.modify_qp(qpn, &rtr, rtr.mask()).expect("INIT->RTR");
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(sim.rng.below(1 << 24) as u32)),
        ..Default::default()
    };
    ep.modify_qp(qpn, &rts, rts.mask()).expect("RTR->RTS");
    qpn
}

/// Moves a QP to ERR by Modify QP.
pub fn to_error(sim: &mut Sim, n: usize, qpn: u32) {
    let a = QpAttr {
        qp_state: Some(QpState::Error),
        ..Default::default()
    };
    sim.nodes[n]
        .ep
        .modify_qp(qpn, &a, AttrMask::STATE)
        .expect("->ERR");
}

// ---------------------------------------------------------------------------
// Work request helpers

pub fn sge(addr: u64, length: u32, lkey: Key) -> Sge {
    Sge {
        addr,
        length,
        lkey: lkey.raw(),
    }
}

pub fn send_wr(wr_id: u64, op: SendOp, data: SendData) -> SendWr {
    SendWr {
        wr_id,
        op,
        data,
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

pub fn ud_wr(wr_id: u64, dest: UdDest, imm: Option<u32>, data: SendData) -> SendWr {
    SendWr {
        ud: Some(dest),
        ..send_wr(
            wr_id,
            match imm {
                Some(imm) => SendOp::SendWithImm { imm },
                None => SendOp::Send,
            },
            data,
        )
    }
}

pub fn recv_wr(wr_id: u64, sg_list: Vec<Sge>) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: sg_list.into(),
    }
}

/// Splits `len` bytes into up to `max` consecutive pieces at random points.
pub fn split(rng: &mut Rng, len: usize, max: usize) -> Vec<usize> {
    let k = rng.usize(1, max.max(1));
    let mut cuts: Vec<usize> = (1..k).map(|_| rng.usize(0, len)).collect();
    cuts.push(0);
    cuts.push(len);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| w[1] - w[0]).collect()
}

// ---------------------------------------------------------------------------
// Running a scenario over many seeds

/// How many seeds a scenario runs: `RXE_SIM_SEEDS` or `default`.
pub fn seed_count(default: u64) -> u64 {
    std::env::var("RXE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `f` for seeds `0..seed_count(default)` (or only `RXE_SIM_SEED` when
/// set), catching panics so that one report lists every failing seed.
pub fn for_seeds(name: &str, default: u64, mut f: impl FnMut(u64)) {
    let seeds: Vec<u64> = match std::env::var("RXE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (0..seed_count(default)).collect(),
    };
    let started = std::time::Instant::now();
    let mut failures: Vec<(u64, String)> = Vec::new();
    for &seed in &seeds {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push((seed, msg));
            if failures.len() >= 10 {
                break;
            }
        }
    }
    eprintln!(
        "{name}: {} seeds in {:.2?}, {} failed",
        seeds.len(),
        started.elapsed(),
        failures.len()
    );
    if !failures.is_empty() {
        let list: Vec<u64> = failures.iter().map(|f| f.0).collect();
        panic!(
            "{name}: {} seed(s) failed (stopped after 10): {list:?}; rerun one with RXE_SIM_SEED=<seed>.\n\
             first failure (seed {}): {}",
            failures.len(),
            failures[0].0,
            failures[0].1
        );
    }
}
