//! The engine of one port, sans-IO (quinn-proto's shape): QPs by number,
//! the P_Key table, the counters, and the four calls a driver makes:
//! `handle` a received packet, `poll_transmit` for packets to send,
//! `poll_timeout` for the next deadline and `handle_timeout` when it passes.
//!
//! The endpoint checks what is common to every QP (a packet that parses,
//! a QP that exists and is in a state that receives, a transport that
//! matches the QP type, a P_Key that matches) and routes requests to the
//! QP's responder and responses to its completer. Every packet it refuses
//! is counted by reason.
//!
//! It also owns the port's shared receive queues ([`Srq`]): SRQs by
//! number, each counting the QPs attached to it. A request for a QP
//! attached to an SRQ reaches the responder with that SRQ (one more map
//! lookup for that packet, by the number the QP names; no scan).
//!
//! Congestion control (`congestion`, `dcqcn`) is applied here, around the
//! QP's two sides: a CE-marked packet queues a CNP that `poll_transmit`
//! sends before anything else of the QP; a CNP for a QP feeds its DCQCN
//! state, which then paces the requester: `poll_transmit` skips the
//! requester of a QP whose next packet is not due, and the QP's deadline
//! (`poll_timeout`) becomes the time it is. A QP that never got a CNP has
//! no DCQCN state and pays one `Option` check per packet.
//!
//! A QP's responses go before its requests, except a lone positive ACK:
//! it waits for the requests the QP sends in the same turn, and goes in
//! the turn's last slot at the latest, so it is never held past
//! `TX_QUANTUM - 1` packets. The order of an ACK and a request of one QP
//! is free: they belong to the two directions' separate PSN streams (IBTA
//! 9.5 orders requests among themselves and responses among themselves).
//! Placed after them, the ACK (20 bytes) can end the GSO run of the
//! requests to the same peer (the kernel cuts every segment but the last
//! at one size), where before them it was a datagram of its own: the
//! answer a ping-pong posts and the ACK of the message it answers leave
//! and arrive as one datagram.

use std::collections::{BTreeSet, VecDeque};

use super::congestion::{emit_cnp, CongestionConfig, Notifier};
use super::counters::{Counter, Counters};
use super::dcqcn::Dcqcn;
use super::error::{EndpointError, PostError};
use super::fast_map::FastMap;
use super::io::{RecvMeta, Transmit};
use super::memory::MemoryAccess;
use super::multicast::{McastGroups, MULTICAST_QPN};
use super::path::{self, pkey_of, PathCheck};
use super::port_window::{PortWindow, Share};
use super::psn::Psn;
use super::qp::{
    modify, AsyncEvent, AttrMask, QpAttr, QpCaps, QpCommon, QpConfig, QpInit, QpState, QpType,
};
use super::recv::reorder::ReorderBuffer;
use super::recv::{Responder, Srq, SrqAttr, SrqInit};
use super::send::Requester;
use super::time::Instant;
use super::wr::{RecvWr, SendWr, WorkCompletion};
use crate::wire::{Gid, Operation, Transport, TransportPacket, TransportRepr};

/// The QPN of the general services interface (IBTA 3.5.1).
pub const GSI_QPN: u32 = 1;
/// The first QPN handed to an ordinary QP (0 and 1 are special).
const FIRST_QPN: u32 = 0x11;
/// QPNs are 24 bits.
const QPN_MASK: u32 = 0xff_ffff;
/// SRQ numbers are 24 bits, like QPNs (the XRC SRQ number that the XRCETH
/// carries is a 24-bit field; not checked against the text); the first is 1.
const SRQN_MASK: u32 = 0xff_ffff;
const FIRST_SRQN: u32 = 1;
/// Packets a QP sends in a row before the next QP's turn. The device sends
/// consecutive packets from one socket to one destination as one GSO run
/// (a QP has one source port), so QPs taking turns packet by packet made
/// each packet a system call of its own once several QPs were busy; 16 is
/// a 64 KiB message at MTU 4096, a full run (15 packets) and one more.
const TX_QUANTUM: u32 = 16;

/// Whether two P_Keys match (IBTA 10.9.3): the same partition (low 15
/// bits, never 0) and at least one of them a full member (bit 15).
pub const fn pkeys_match(a: u16, b: u16) -> bool {
    let same = a & 0x7fff == b & 0x7fff && a & 0x7fff != 0;
    same && (a | b) & 0x8000 != 0
}

/// One QP: what both sides share, and each side's state.
#[derive(Debug)]
struct Qp {
    common: QpCommon,
    req: Requester,
    resp: Responder,
    /// Whether the QP is in the endpoint's `ready` queue, so that queueing
    /// it does not search the queue.
    queued: bool,
    /// The notification point's state (CNPs owed to the peer).
    np: Notifier,
    /// The reaction point's rate state, from the QP's first CNP on.
    rp: Option<Box<Dcqcn>>,
    /// Rate reductions of `rp` already added to the endpoint's counters.
    rp_counted: u64,
    /// The requester is held back by pacing until then.
    pace_wait: Option<Instant>,
    /// RC requests that came ahead of the expected PSN (`recv::reorder`),
    /// if the QP holds them (`Endpoint::set_selective_retransmit`).
    held: ReorderBuffer,
    holds_ahead: bool,
    /// Its PSNs counted in the port's window (`port_window`), and where.
    window_share: Option<Share>,
    /// Waiting in the port window's queue.
    parked: bool,
}

mod reorder_calls;

impl Qp {
    fn new(common: QpCommon, adaptive_retransmit: bool, selective_retransmit: bool) -> Qp {
        Qp {
            common,
            req: Requester::new(adaptive_retransmit, selective_retransmit),
            resp: Responder::new(),
            queued: false,
            np: Notifier::default(),
            rp: None,
            rp_counted: 0,
            pace_wait: None,
            held: ReorderBuffer::default(),
            holds_ahead: selective_retransmit,
            window_share: None,
            parked: false,
        }
    }
}

/// The transport engine of one port.
#[derive(Debug)]
pub struct Endpoint {
    caps: QpCaps,
    pkey_table: Vec<u16>,
    /// The port's GID table, by index (an empty entry is `None`): a
    /// connected QP's source GID is the entry its path names.
    gid_table: Vec<Option<Gid>>,
    qps: FastMap<u32, Qp>,
    next_qpn: u32,
    srqs: FastMap<u32, Srq>,
    next_srqn: u32,
    counters: Counters,
    /// QPs that may have something to send, in round-robin order.
    ready: VecDeque<u32>,
    /// The QP at the head of `ready` and the packets it has sent in its
    /// turn (at most `TX_QUANTUM`).
    turn: Option<(u32, u32)>,
    /// (deadline, QPN) of every QP with a timer running.
    timers: BTreeSet<(Instant, u32)>,
    /// Each QP's entry in `timers`.
    deadline: FastMap<u32, Instant>,
    completions: VecDeque<WorkCompletion>,
    events: VecDeque<AsyncEvent>,
    /// Multicast GID -> the UD QPs attached to it.
    mcast: McastGroups,
    /// ECN, CNPs and DCQCN.
    cc: CongestionConfig,
    /// RC requesters resend early from measured round trips
    /// (`send::adaptive_timer`).
    adaptive_retransmit: bool,
    /// RC QPs retransmit selectively: the responder holds packets that
    /// come ahead of a gap, the requester resends only the NAK'd packet
    /// first (`recv::reorder`).
    selective_retransmit: bool,
    /// Bytes all QPs' reorder buffers hold (at most `reorder_calls::MAX_HELD_BYTES`).
    held_bytes: usize,
    /// RC PSNs in flight per destination, their limit, the QPs waiting.
    port_window: PortWindow,
}

impl Endpoint {
    /// An endpoint with the default P_Key table (one entry, 0xFFFF: the
    /// default partition, full member, as RoCE ports have).
    pub fn new(caps: QpCaps) -> Endpoint {
        Endpoint {
            caps,
            pkey_table: vec![0xffff],
            gid_table: Vec::new(),
            qps: FastMap::default(),
            next_qpn: FIRST_QPN,
            srqs: FastMap::default(),
            next_srqn: FIRST_SRQN,
            counters: Counters::default(),
            ready: VecDeque::new(),
            turn: None,
            timers: BTreeSet::new(),
            deadline: FastMap::default(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            mcast: McastGroups::new(),
            cc: CongestionConfig::default(),
            adaptive_retransmit: true,
            selective_retransmit: true,
            held_bytes: 0,
            port_window: PortWindow::default(),
        }
    }

    /// The most RC PSNs the QPs together may have sent to one destination
    /// and not had acknowledged (`port_window`; it holds only for a while
    /// after dense loss unless [`Endpoint::set_port_window_always`]);
    /// `None` (the default) for no limit. A driver whose peers' receive
    /// buffers are finite sets it from them.
    pub fn set_port_window(&mut self, psns: Option<u32>) {
        self.port_window.set_limit(psns);
    }

    /// Whether the port window holds always, not only after loss (off by
    /// default: see `port_window`).
    pub fn set_port_window_always(&mut self, always: bool) {
        self.port_window.set_always(always);
    }

    /// The limit set by [`Endpoint::set_port_window`].
    pub fn port_window(&self) -> Option<u32> {
        self.port_window.limit()
    }

    /// RC PSNs in flight over all QPs and destinations: sent and not yet
    /// acknowledged.
    pub fn port_unacked(&self) -> u32 {
        self.port_window.unacked()
    }

    /// Whether RC QPs created from now on (and QPs returned to RESET)
    /// resend early when a few measured round trips pass without an
    /// answer, spending no retry (`send::adaptive_timer`; on by default,
    /// as NVIDIA's adaptive retransmission). Off, only the transport timer
    /// (`timeout`) retransmits, as in kernel rxe.
    pub fn set_adaptive_retransmit(&mut self, on: bool) {
        self.adaptive_retransmit = on;
    }

    /// Whether RC QPs created from now on (and QPs returned to RESET)
    /// retransmit selectively (`recv::reorder`; on by default): the
    /// responder holds SEND and WRITE packets that arrive after a gap and
    /// executes them once it is filled, and the requester, after a NAK
    /// PSN Sequence Error, resends only the NAK'd packet until its answer
    /// says whether the peer held the rest. Off, both sides are go-back-N
    /// only, as kernel rxe. Either side alone interoperates with a
    /// go-back-N peer (the requester learns, per QP, that its peer holds
    /// nothing, after the first loss).
    pub fn set_selective_retransmit(&mut self, on: bool) {
        self.selective_retransmit = on;
    }

    /// The port's congestion control settings (ECN, CNPs, DCQCN). QPs
    /// already rate limited keep the DCQCN parameters they started with.
    pub fn set_congestion(&mut self, cc: CongestionConfig) {
        self.cc = cc;
    }

    pub fn congestion(&self) -> &CongestionConfig {
        &self.cc
    }

    /// The sending rate of QP `qpn` in Mb/s while DCQCN limits it; `None`
    /// at line rate (no CNP yet, or recovered) or for no such QP.
    pub fn qp_rate_mbps(&mut self, qpn: u32, now: Instant) -> Option<f64> {
        let rp = self.qps.get_mut(&qpn)?.rp.as_mut()?;
        rp.advance(now);
        rp.is_limited().then(|| rp.rate_mbps())
    }

    /// Starts QP numbering at `qpn` (wrapped into `0x11..=0xffffff`)
    /// instead of 0x11. A device that picks a different start each time it
    /// is created keeps a peer that still retransmits to a QP of an earlier
    /// run from hitting a new QP with the same number.
    pub fn set_next_qpn(&mut self, qpn: u32) {
        self.next_qpn = FIRST_QPN + qpn % (QPN_MASK - FIRST_QPN + 1);
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn pkey_table(&self) -> &[u16] {
        &self.pkey_table
    }

    /// The port's GID table, as [`Endpoint::set_gid_table`] last set it.
    pub fn gid_table(&self) -> &[Option<Gid>] {
        &self.gid_table
    }

    /// Replaces the port's GID table. A connected QP accepts a packet only
    /// if its destination GID is the entry of the QP's `sgid_index`, so the
    /// device keeps this table current as the host's addresses change.
    pub fn set_gid_table(&mut self, table: Vec<Option<Gid>>) {
        self.gid_table = table;
        for qp in self.qps.values_mut() {
            path::refresh(&mut qp.common, &self.pkey_table, &self.gid_table);
        }
    }

    /// Replaces the P_Key table (at most `caps.pkey_table_len` entries).
    pub fn set_pkey_table(&mut self, table: Vec<u16>) {
        self.pkey_table = table;
        self.caps.pkey_table_len = self.pkey_table.len().max(1) as u16;
        for qp in self.qps.values_mut() {
            path::refresh(&mut qp.common, &self.pkey_table, &self.gid_table);
        }
    }

    /// Creates a QP in RESET; a GSI QP gets QPN 1, others the next free
    /// number. With `init.srq` the QP takes its receives from that SRQ
    /// (RC, UC and UD; QP1 is the port's own and keeps its receive queue).
    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, EndpointError> {
        if let Some(srqn) = init.srq {
            if init.qp_type == QpType::Gsi {
                return Err(EndpointError::SrqNotSupported(init.qp_type));
            }
            if !self.srqs.contains_key(&srqn) {
                return Err(EndpointError::NoSuchSrq(srqn));
            }
        }
        let qpn = if init.qp_type == QpType::Gsi {
            if self.qps.contains_key(&GSI_QPN) {
                return Err(EndpointError::GsiExists);
            }
            GSI_QPN
        } else {
            self.alloc_qpn()?
        };
        let config = if init.qp_type == QpType::Gsi {
            QpConfig::new_gsi(1, self.caps)?
        } else {
            QpConfig::new(init.qp_type, self.caps)
        };
        let pkey = pkey_of(&self.pkey_table, &config);
        if let Some(srq) = init.srq.and_then(|n| self.srqs.get_mut(&n)) {
            srq.attach();
        }
        self.qps.insert(
            qpn,
            Qp::new(
                QpCommon::new(qpn, init, config, pkey),
                self.adaptive_retransmit,
                self.selective_retransmit,
            ),
        );
        Ok(qpn)
    }

    fn alloc_qpn(&mut self) -> Result<u32, EndpointError> {
        for _ in 0..=QPN_MASK {
            let qpn = self.next_qpn;
            self.next_qpn = if qpn >= QPN_MASK { FIRST_QPN } else { qpn + 1 };
            if !self.qps.contains_key(&qpn) {
                return Ok(qpn);
            }
        }
        Err(EndpointError::OutOfQpns)
    }

    /// Destroys a QP; its outstanding work is dropped without completions,
    /// as `ibv_destroy_qp` does. A QP attached to an SRQ detaches from it;
    /// a receive it had taken for a message still in progress goes back to
    /// the front of the SRQ rather than being lost (an application that
    /// waits for Last WQE Reached before destroying, as it should, never
    /// has one).
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EndpointError> {
        // The kernel's ib_destroy_qp refuses (EBUSY) a QP still attached
        // to a multicast group: the application detaches first.
        if self.mcast.is_attached(qpn) {
            return Err(EndpointError::McastAttached(qpn));
        }
        let mut qp = self.qps.remove(&qpn).ok_or(EndpointError::NoSuchQp(qpn))?;
        self.release_held(&mut qp.held);
        self.port_window.account(&mut qp.window_share, None);
        if qp.parked {
            self.port_window.forget(qpn);
        }
        if let Some(srq) = qp.common.init.srq.and_then(|n| self.srqs.get_mut(&n)) {
            if let Some(wr) = qp.resp.take_in_progress_recv() {
                srq.push_front(wr);
            }
            srq.detach();
        }
        // Not `set_deadline`, which would leave the entry to fire.
        self.clear_deadline(qpn);
        self.ready.retain(|q| *q != qpn);
        if self.turn.is_some_and(|(q, _)| q == qpn) {
            self.turn = None;
        }
        Ok(())
    }

    /// Attaches UD QP `qpn` to the multicast group `mgid`
    /// (`ibv_attach_mcast`). `Ok(true)`: the port had no member of that
    /// group before, so the device must now receive it (join it on the
    /// host).
    pub fn attach_mcast(&mut self, qpn: u32, mgid: Gid) -> Result<bool, EndpointError> {
        let qp = self.qps.get(&qpn).ok_or(EndpointError::NoSuchQp(qpn))?;
        let t = qp.common.qp_type();
        if t != QpType::Ud {
            return Err(EndpointError::McastNotUd(t));
        }
        Ok(self.mcast.attach(mgid, qpn)?)
    }

    /// Detaches QP `qpn` from `mgid` (`ibv_detach_mcast`). `Ok(true)`: that
    /// was the group's last member on this port (leave it on the host).
    pub fn detach_mcast(&mut self, qpn: u32, mgid: Gid) -> Result<bool, EndpointError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EndpointError::NoSuchQp(qpn));
        }
        Ok(self.mcast.detach(mgid, qpn)?)
    }

    /// The multicast groups QP `qpn` is attached to.
    pub fn mcast_groups_of(&self, qpn: u32) -> Vec<Gid> {
        self.mcast.groups_of(qpn)
    }

    /// The QP's configuration (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: u32) -> Result<&QpConfig, EndpointError> {
        Ok(&self
            .qps
            .get(&qpn)
            .ok_or(EndpointError::NoSuchQp(qpn))?
            .common
            .config)
    }

    /// What the QP was created with.
    pub fn query_qp_init(&self, qpn: u32) -> Result<&QpInit, EndpointError> {
        Ok(&self
            .qps
            .get(&qpn)
            .ok_or(EndpointError::NoSuchQp(qpn))?
            .common
            .init)
    }

    /// Modify QP: checked by `qp::modify`; on success both sides see
    /// the transition (the responder takes its expected PSN on entering RTR,
    /// the requester its PSN on entering RTS), and a move to ERR flushes.
    /// A move to RESET forgets all work, as IBTA 10.3.1 says.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<(), EndpointError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EndpointError::NoSuchQp(qpn))?;
        let from = qp.common.state();
        qp.common.config = modify(&qp.common.config, attr, mask)?;
        path::refresh(&mut qp.common, &self.pkey_table, &self.gid_table);
        match qp.common.state() {
            QpState::Reset => {
                // RESET forgets the QP's work; a receive it took from its
                // SRQ for a message in progress is the SRQ's again.
                let srq = qp.common.init.srq.and_then(|n| self.srqs.get_mut(&n));
                if let (Some(srq), Some(wr)) = (srq, qp.resp.take_in_progress_recv()) {
                    srq.push_front(wr);
                }
                qp.req = Requester::new(self.adaptive_retransmit, self.selective_retransmit);
                qp.holds_ahead = self.selective_retransmit;
                qp.resp = Responder::new();
                qp.np = Notifier::default();
                qp.rp = None;
                qp.pace_wait = None;
            }
            QpState::Error if from != QpState::Error => qp.common.request_flush(),
            _ => {}
        }
        qp.resp.on_modify(&mut qp.common, from);
        qp.req.on_modify(&mut qp.common, from);
        if qp.common.state() != from && !qp.held.is_empty() {
            // Held packets belong to the state they came in.
            let mut held = core::mem::take(&mut qp.held);
            self.release_held(&mut held);
        }
        self.after(qpn);
        Ok(())
    }

    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), PostError> {
        let qp = self.qps.get_mut(&qpn).ok_or(PostError::NoSuchQp(qpn))?;
        qp.req.post_send(&qp.common, wr)?;
        // In ERR a send is accepted and flushed at once (IBTA 10.3.1); in
        // SQE the requester flushes it itself, as the receive side goes on.
        if qp.common.state() == QpState::Error {
            qp.common.request_flush();
        }
        self.after(qpn);
        Ok(())
    }

    /// Whether RC QP `qpn` has PSNs sent and not yet acknowledged: their
    /// responses are coming, and whoever takes them (a driver turn, a busy
    /// poll) transmits what is queued then. A device may hold a new post's
    /// packets back until that moment, so that they leave together (as
    /// Linux TCP's autocorking holds small writes while earlier ones are
    /// still queued).
    pub fn send_in_flight(&self, qpn: u32) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|qp| qp.common.qp_type() == QpType::Rc && qp.req.in_flight())
    }

    /// `ibv_post_recv`; refused with `QpHasSrq` on a QP attached to an SRQ.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), PostError> {
        let qp = self.qps.get_mut(&qpn).ok_or(PostError::NoSuchQp(qpn))?;
        qp.resp.post_recv(&qp.common, wr)?;
        // In ERR a receive is accepted and flushed at once (IBTA 10.3.1).
        if qp.common.state() == QpState::Error {
            qp.common.request_flush();
        }
        self.after(qpn);
        Ok(())
    }

    // ---- shared receive queues ------------------------------------------

    /// `ibv_create_srq`: an empty SRQ, numbered from 1 upwards (24 bits,
    /// wrapping, never a number still in use). `init.srq_limit`, when
    /// non-zero, arms the limit from the start (kernel rxe takes it from
    /// the init attributes too; libibverbs documents it as ignored there).
    pub fn create_srq(&mut self, init: SrqInit) -> Result<u32, EndpointError> {
        // Checked before a number is spent.
        Srq::new(0, init)?;
        let srqn = self.alloc_srqn()?;
        self.srqs.insert(srqn, Srq::new(srqn, init)?);
        Ok(srqn)
    }

    fn alloc_srqn(&mut self) -> Result<u32, EndpointError> {
        for _ in 0..SRQN_MASK {
            let srqn = self.next_srqn;
            self.next_srqn = if srqn >= SRQN_MASK {
                FIRST_SRQN
            } else {
                srqn + 1
            };
            if !self.srqs.contains_key(&srqn) {
                return Ok(srqn);
            }
        }
        Err(EndpointError::OutOfSrqns)
    }

    /// `ibv_destroy_srq`: refused while any QP is attached (`EBUSY` in
    /// libibverbs); the receives still queued go without completions.
    pub fn destroy_srq(&mut self, srqn: u32) -> Result<(), EndpointError> {
        let srq = self.srqs.get(&srqn).ok_or(EndpointError::NoSuchSrq(srqn))?;
        if srq.attached() > 0 {
            return Err(EndpointError::SrqInUse {
                srqn,
                qps: srq.attached(),
            });
        }
        self.srqs.remove(&srqn);
        Ok(())
    }

    /// `ibv_modify_srq`: `max_wr` resizes (not below what is queued:
    /// `SrqResize`), `srq_limit` arms the limit (0 disarms; above `max_wr`:
    /// `SrqLimitTooLarge`). See [`Srq::modify`].
    pub fn modify_srq(
        &mut self,
        srqn: u32,
        max_wr: Option<u32>,
        srq_limit: Option<u32>,
    ) -> Result<(), EndpointError> {
        self.srqs
            .get_mut(&srqn)
            .ok_or(EndpointError::NoSuchSrq(srqn))?
            .modify(max_wr, srq_limit)
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srqn: u32) -> Result<SrqAttr, EndpointError> {
        Ok(self
            .srqs
            .get(&srqn)
            .ok_or(EndpointError::NoSuchSrq(srqn))?
            .attr())
    }

    /// `ibv_post_srq_recv` for one request (see [`Srq::post`]). A QP that
    /// was refused a receive (RNR NAK) gets it when its requester resends,
    /// so nothing is woken here.
    pub fn post_srq_recv(&mut self, srqn: u32, wr: RecvWr) -> Result<(), PostError> {
        self.srqs
            .get_mut(&srqn)
            .ok_or(PostError::NoSuchSrq(srqn))?
            .post(wr)
    }

    /// A received packet: `bytes` from the BTH through the ICRC, whose ICRC
    /// the device has verified.
    pub fn handle(
        &mut self,
        now: Instant,
        meta: &RecvMeta,
        bytes: &[u8],
        mem: &mut dyn MemoryAccess,
    ) {
        self.counters.inc(Counter::RcvdPkts);
        if meta.ce {
            self.counters.inc(Counter::NpEcnMarkedPackets);
        }
        let pkt = match TransportRepr::parse(bytes) {
            Ok(p) => p,
            Err(e) => return self.counters.record_drop(&e),
        };
        let bth = pkt.repr.bth;
        if bth.dest_qp == MULTICAST_QPN {
            return self.handle_multicast(now, meta, bytes, &pkt, mem);
        }
        let qpn = bth.dest_qp;
        self.deliver(qpn, now, meta, bytes, &pkt, mem);
        // No QP holds anything (the common case, `held_bytes` counts every
        // held packet): no second lookup of the QP for it.
        if self.held_bytes != 0 {
            self.replay_held(qpn, now, mem);
        }
    }

    /// A packet for the permissive QPN: a copy for each QP attached to the
    /// group its destination GID names, each checked as a unicast
    /// datagram (multicast module docs).
    fn handle_multicast(
        &mut self,
        now: Instant,
        meta: &RecvMeta,
        bytes: &[u8],
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        // Only UD packets may be multicast; QPN 0xFFFFFF is no QP's.
        if pkt.info.transport != Transport::Ud {
            return self.counters.inc(Counter::DropUnknownQp);
        }
        let members = self.mcast.take_members(&meta.dgid);
        if members.is_empty() {
            self.mcast.put_back(&meta.dgid, members);
            return self.counters.inc(Counter::DropMcastNoGroup);
        }
        for &qpn in &members {
            self.counters.inc(Counter::RcvdMcastCopies);
            self.deliver(qpn, now, meta, bytes, pkt, mem);
        }
        self.mcast.put_back(&meta.dgid, members);
    }

    /// The checks common to every QP, then the packet to QP `qpn`'s
    /// responder (requests) or completer (responses).
    /// `bytes` is the packet `pkt` was parsed from (BTH..ICRC), kept if
    /// it is an RC request ahead of the expected PSN (`recv::reorder`).
    fn deliver(
        &mut self,
        qpn: u32,
        now: Instant,
        meta: &RecvMeta,
        bytes: &[u8],
        pkt: &TransportPacket<'_>,
        mem: &mut dyn MemoryAccess,
    ) {
        let bth = pkt.repr.bth;
        if pkt.info.operation == Operation::Cnp {
            return self.handle_cnp(qpn, now, meta, pkt);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return self.counters.inc(Counter::DropUnknownQp);
        };
        let c = &mut qp.common;
        // IBTA 9.6.1.2: the opcode's transport must be the QP's.
        let transport_ok = match pkt.info.transport {
            Transport::Rc => c.qp_type() == QpType::Rc,
            Transport::Uc => c.qp_type() == QpType::Uc,
            Transport::Ud => c.qp_type().is_datagram(),
            _ => false,
        };
        if !transport_ok {
            return self.counters.inc(Counter::DropWrongTransport);
        }
        // IBTA 10.3.1: a QP receives from RTR on; in RESET, INIT and ERR
        // packets are silently dropped.
        if !matches!(
            c.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return self.counters.inc(Counter::DropQpState);
        }
        let via = if c.qp_type().is_datagram() {
            PathCheck::Primary
        } else {
            path::check(c, &self.gid_table, meta, bth.mig_req)
        };
        if via == PathCheck::Foreign {
            return self.counters.inc(Counter::DropWrongAddress);
        }
        // IBTA 9.6.1.1 / 10.9.3: the BTH P_Key must match the QP's (on the
        // alternate path, the alternate path's); QP1 accepts any P_Key of
        // the port's table.
        let pkey_index = if c.qp_type() == QpType::Gsi {
            self.pkey_table
                .iter()
                .position(|k| pkeys_match(*k, bth.pkey))
        } else if via == PathCheck::Migration {
            let alt = c.config.armed_path().map_or(0, |p| p.pkey_index);
            pkeys_match(c.alt_pkey, bth.pkey).then_some(usize::from(alt))
        } else {
            pkeys_match(c.pkey, bth.pkey).then(|| c.config.attrs().pkey_index.unwrap_or(0) as usize)
        };
        let Some(pkey_index) = pkey_index else {
            return self.counters.inc(Counter::DropPkeyMismatch);
        };
        // A packet that passed the checks of its path: the peer migrated
        // (follow it), or, with MigReq 0 on the primary, rearmed.
        match via {
            PathCheck::Migration => {
                c.migrate();
                path::refresh(c, &self.pkey_table, &self.gid_table);
                self.counters.inc(Counter::PathMigratedByPeer);
            }
            PathCheck::Primary if !bth.mig_req && !c.qp_type().is_datagram() => {
                c.config.peer_rearmed();
            }
            _ => {}
        }
        // The notification point: a marked packet of a connected QP owes
        // its peer a CNP (congestion module).
        if meta.ce
            && self.cc.np
            && matches!(c.qp_type(), QpType::Rc | QpType::Uc)
            && !qp.np.on_ce(now, self.cc.min_time_between_cnps)
        {
            self.counters.inc(Counter::NpCnpSuppressed);
        }
        if pkt.info.operation.is_request() {
            let ahead = qp.holds_ahead
                && c.qp_type() == QpType::Rc
                && Psn::new(bth.psn).is_after(qp.resp.expected_psn());
            let srq = c.init.srq.and_then(|n| self.srqs.get_mut(&n));
            qp.resp.handle_request(
                c,
                &mut self.counters,
                srq,
                now,
                meta,
                pkey_index as u16,
                pkt,
                mem,
            );
            if ahead {
                self.hold_ahead(qpn, meta, bytes, pkt);
            }
        } else {
            qp.req.handle_response(c, &mut self.counters, now, pkt, mem);
        }
        self.after(qpn);
    }

    /// A CNP for QP `qpn`: the reaction point (congestion module's
    /// decisions for what is ignored).
    fn handle_cnp(&mut self, qpn: u32, now: Instant, meta: &RecvMeta, pkt: &TransportPacket<'_>) {
        let reacts = self.cc.rp
            && self.qps.get(&qpn).is_some_and(|qp| {
                let c = &qp.common;
                matches!(c.qp_type(), QpType::Rc | QpType::Uc)
                    && matches!(c.state(), QpState::Rts | QpState::Sqd)
                    && path::on_primary(c, &self.gid_table, meta)
                    && pkeys_match(c.pkey, pkt.repr.bth.pkey)
            });
        if !reacts {
            return self.counters.inc(Counter::RpCnpIgnored);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return self.counters.inc(Counter::RpCnpIgnored);
        };
        self.counters.inc(Counter::RpCnpHandled);
        let params = self.cc.dcqcn;
        let rp = qp.rp.get_or_insert_with(|| Box::new(Dcqcn::new(params)));
        rp.on_cnp(now);
        self.after(qpn);
    }

    /// The next packet to send, written to `buf` (which should hold the
    /// path MTU plus 64 bytes of headers); a QP's CNP first, then its
    /// responses, then its requests (when its pacing lets it), QPs in turn,
    /// each for up to `TX_QUANTUM` packets in a row.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn MemoryAccess,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let losses =
            self.counters.get(Counter::RcvdSeqErr) + self.counters.get(Counter::CompleterRetryErr);
        let sent = self.counters.get(Counter::SentPkts);
        self.port_window.note_losses(losses, sent, now);
        let (qps, ready) = (&mut self.qps, &mut self.ready);
        self.port_window.unpark(now, |qpn| {
            if let Some(qp) = qps.get_mut(&qpn) {
                qp.parked = false;
                if !qp.queued {
                    qp.queued = true;
                    ready.push_back(qpn);
                }
            }
        });
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.queued = false;
            let in_turn = match self.turn {
                Some((q, n)) if q == qpn => n,
                _ => 0,
            };
            // A lone ACK goes after the QP's requests of this turn, never
            // later than its last slot (`ack_after_requests`).
            let ack_last = in_turn + 1 < TX_QUANTUM && qp.resp.only_ack_queued();
            let mut t = None;
            if qp.np.pending {
                qp.np.pending = false;
                t = emit_cnp(&qp.common, buf);
                if t.is_some() {
                    self.counters.inc(Counter::NpCnpSent);
                }
            }
            if t.is_none() && !ack_last {
                t = qp
                    .resp
                    .poll_transmit(&mut qp.common, &mut self.counters, mem, buf);
            }
            if t.is_none() {
                match qp.rp.as_mut().and_then(|rp| rp.send_at(now)) {
                    Some(wait) => qp.pace_wait = Some(wait),
                    // The port's window is full: new packets wait for
                    // ACKs to free it (`port_window`).
                    None if qp.req.has_new_packet()
                        && self.port_window.full(&qp.window_share, now) =>
                    {
                        if !qp.parked {
                            qp.parked = true;
                            self.port_window.park(&qp.window_share, qpn);
                            self.counters.inc(Counter::PortWindowWaits);
                        }
                    }
                    None => {
                        t = qp
                            .req
                            .poll_transmit(&mut qp.common, &mut self.counters, now, mem, buf);
                        if let (Some(sent), Some(rp)) = (t, qp.rp.as_mut()) {
                            rp.on_sent(now, sent.len);
                        }
                    }
                }
            }
            if t.is_none() && ack_last {
                t = qp
                    .resp
                    .poll_transmit(&mut qp.common, &mut self.counters, mem, buf);
            }
            if let Some(t) = t {
                self.counters.inc(Counter::SentPkts);
                // It may have more: it keeps the head of the line for the
                // rest of its turn, then goes to the back.
                qp.queued = true;
                let sent = in_turn + 1;
                if sent < TX_QUANTUM {
                    self.turn = Some((qpn, sent));
                    self.ready.push_front(qpn);
                } else {
                    self.turn = None;
                    self.ready.push_back(qpn);
                }
                self.after_no_ready(qpn);
                return Some(t);
            }
            if self.turn.is_some_and(|(q, _)| q == qpn) {
                self.turn = None;
            }
            self.after_no_ready(qpn);
        }
        None
    }

    /// When `handle_timeout` is next due: no later than the earliest
    /// deadline of any QP's timers (a QP's entry may be earlier than its
    /// timer, see `set_deadline`, and then fires to nothing).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|(t, _)| *t)
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, qpn));
            self.deadline.remove(&qpn);
            if let Some(qp) = self.qps.get_mut(&qpn) {
                if qp.pace_wait.is_some_and(|w| w <= now) {
                    qp.pace_wait = None;
                }
                qp.req
                    .handle_timeout(&mut qp.common, &mut self.counters, now);
            }
            self.after(qpn);
        }
    }

    /// The next work completion of any QP, in the order they were made.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.completions.pop_front()
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// After any call that touched `qpn`: flush if due, collect its
    /// completions and events, queue it for sending, refresh its timer.
    fn after(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.queued {
                qp.queued = true;
                self.ready.push_back(qpn);
            }
        }
        self.after_no_ready(qpn);
    }

    fn after_no_ready(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if qp.common.take_flush() {
            qp.req.flush(&mut qp.common);
            qp.resp.flush(&mut qp.common);
        }
        while let Some(wc) = qp.common.pop_completion() {
            self.completions.push_back(wc);
        }
        while let Some(ev) = qp.common.pop_event() {
            self.events.push_back(ev);
        }
        let share = qp
            .req
            .port_window_share(&qp.common)
            .map(|psns| (rc_dest(&qp.common), psns));
        self.port_window.account(&mut qp.window_share, share);
        if let Some(rp) = &qp.rp {
            let made = rp.reductions();
            self.counters.add(
                Counter::RpRateReductions,
                made.saturating_sub(qp.rp_counted),
            );
            qp.rp_counted = made;
        }
        let d = match (qp.req.poll_timeout(), qp.pace_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.set_deadline(qpn, d);
    }

    /// Sets QP `qpn`'s entry in `timers` to `d`, lazily: an entry that is
    /// due no later than `d` stays, fires early, finds nothing due and is
    /// set again then (`handle_timeout` -> `after`). Every acknowledged
    /// packet moves the ACK timer a little later, which was otherwise a
    /// removal and an insertion in `timers` per packet; a timer is moved
    /// at once only when it must fire sooner.
    fn set_deadline(&mut self, qpn: u32, d: Option<Instant>) {
        let old = self.deadline.get(&qpn).copied();
        if old == d || old.is_some_and(|old| d.is_none_or(|d| old <= d)) {
            return;
        }
        self.clear_deadline(qpn);
        if let Some(d) = d {
            self.deadline.insert(qpn, d);
            self.timers.insert((d, qpn));
        }
    }

    /// Removes QP `qpn`'s entry from `timers`, if it has one.
    fn clear_deadline(&mut self, qpn: u32) {
        if let Some(old) = self.deadline.remove(&qpn) {
            self.timers.remove(&(old, qpn));
        }
    }
}

/// The destination GID of a connected QP's path (the port window's key;
/// read once per packet and ACK, so the address vector is not copied).
fn rc_dest(common: &QpCommon) -> Gid {
    common
        .config
        .attrs()
        .av
        .as_ref()
        .map_or_else(Gid::default, |av| av.dgid)
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
