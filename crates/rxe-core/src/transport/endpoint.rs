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
//! It also owns the port's shared receive queues ([`super::srq`]): SRQs by
//! number, each counting the QPs attached to it. A request for a QP
//! attached to an SRQ reaches the responder with that SRQ (one more map
//! lookup for that packet, by the number the QP names; no scan).

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::counters::{Counter, Counters};
use super::error::{EndpointError, PostError};
use super::io::{RecvMeta, Transmit};
use super::memory::MemoryAccess;
use super::qp::{
    modify, AsyncEvent, AttrMask, QpAttr, QpCaps, QpCommon, QpConfig, QpInit, QpState, QpType,
};
use super::recv::{Responder, Srq, SrqAttr, SrqInit};
use super::send::Requester;
use super::time::Instant;
use super::wr::{RecvWr, SendWr, WorkCompletion};
use crate::wire::{Transport, TransportRepr};

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
}

/// The transport engine of one port.
#[derive(Debug)]
pub struct Endpoint {
    caps: QpCaps,
    pkey_table: Vec<u16>,
    qps: HashMap<u32, Qp>,
    next_qpn: u32,
    srqs: HashMap<u32, Srq>,
    next_srqn: u32,
    counters: Counters,
    /// QPs that may have something to send, in round-robin order.
    ready: VecDeque<u32>,
    /// (deadline, QPN) of every QP with a timer running.
    timers: BTreeSet<(Instant, u32)>,
    /// Each QP's entry in `timers`.
    deadline: HashMap<u32, Instant>,
    completions: VecDeque<WorkCompletion>,
    events: VecDeque<AsyncEvent>,
}

impl Endpoint {
    /// An endpoint with the default P_Key table (one entry, 0xFFFF: the
    /// default partition, full member, as RoCE ports have).
    pub fn new(caps: QpCaps) -> Endpoint {
        Endpoint {
            caps,
            pkey_table: vec![0xffff],
            qps: HashMap::new(),
            next_qpn: FIRST_QPN,
            srqs: HashMap::new(),
            next_srqn: FIRST_SRQN,
            counters: Counters::default(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            deadline: HashMap::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
        }
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

    /// Replaces the P_Key table (at most `caps.pkey_table_len` entries).
    pub fn set_pkey_table(&mut self, table: Vec<u16>) {
        self.pkey_table = table;
        self.caps.pkey_table_len = self.pkey_table.len().max(1) as u16;
        for qp in self.qps.values_mut() {
            qp.common.pkey = pkey_of(&self.pkey_table, &qp.common.config);
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
            Qp {
                common: QpCommon::new(qpn, init, config, pkey),
                req: Requester::new(),
                resp: Responder::new(),
                queued: false,
            },
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
        let mut qp = self.qps.remove(&qpn).ok_or(EndpointError::NoSuchQp(qpn))?;
        if let Some(srq) = qp.common.init.srq.and_then(|n| self.srqs.get_mut(&n)) {
            if let Some(wr) = qp.resp.take_in_progress_recv() {
                srq.push_front(wr);
            }
            srq.detach();
        }
        self.set_deadline(qpn, None);
        self.ready.retain(|q| *q != qpn);
        Ok(())
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

    /// Modify QP: checked by `qp_state::modify`; on success both sides see
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
        qp.common.pkey = pkey_of(&self.pkey_table, &qp.common.config);
        match qp.common.state() {
            QpState::Reset => {
                // RESET forgets the QP's work; a receive it took from its
                // SRQ for a message in progress is the SRQ's again.
                let srq = qp.common.init.srq.and_then(|n| self.srqs.get_mut(&n));
                if let (Some(srq), Some(wr)) = (srq, qp.resp.take_in_progress_recv()) {
                    srq.push_front(wr);
                }
                qp.req = Requester::new();
                qp.resp = Responder::new();
            }
            QpState::Error if from != QpState::Error => qp.common.request_flush(),
            _ => {}
        }
        qp.resp.on_modify(&mut qp.common, from);
        qp.req.on_modify(&mut qp.common, from);
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
        let pkt = match TransportRepr::parse(bytes) {
            Ok(p) => p,
            Err(e) => return self.counters.record_drop(&e),
        };
        let bth = pkt.repr.bth;
        let Some(qp) = self.qps.get_mut(&bth.dest_qp) else {
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
        // IBTA 9.6.1.1 / 10.9.3: the BTH P_Key must match the QP's; QP1
        // accepts any P_Key of the port's table.
        let pkey_index = if c.qp_type() == QpType::Gsi {
            self.pkey_table
                .iter()
                .position(|k| pkeys_match(*k, bth.pkey))
        } else {
            pkeys_match(c.pkey, bth.pkey).then(|| c.config.attrs().pkey_index.unwrap_or(0) as usize)
        };
        let Some(pkey_index) = pkey_index else {
            return self.counters.inc(Counter::DropPkeyMismatch);
        };
        if pkt.info.operation.is_request() {
            let srq = c.init.srq.and_then(|n| self.srqs.get_mut(&n));
            qp.resp.handle_request(
                c,
                &mut self.counters,
                srq,
                now,
                meta,
                pkey_index as u16,
                &pkt,
                mem,
            );
        } else {
            qp.req
                .handle_response(c, &mut self.counters, now, &pkt, mem);
        }
        self.after(bth.dest_qp);
    }

    /// The next packet to send, written to `buf` (which should hold the
    /// path MTU plus 64 bytes of headers); responses before requests, QPs
    /// in turn.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn MemoryAccess,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.queued = false;
            let t = match qp
                .resp
                .poll_transmit(&mut qp.common, &mut self.counters, mem, buf)
            {
                Some(t) => Some(t),
                None => qp
                    .req
                    .poll_transmit(&mut qp.common, &mut self.counters, now, mem, buf),
            };
            if let Some(t) = t {
                self.counters.inc(Counter::SentPkts);
                // It may have more: back of the line, so QPs take turns.
                qp.queued = true;
                self.ready.push_back(qpn);
                self.after_no_ready(qpn);
                return Some(t);
            }
            self.after_no_ready(qpn);
        }
        None
    }

    /// The earliest deadline of any QP's timers.
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
        let d = qp.req.poll_timeout();
        self.set_deadline(qpn, d);
    }

    fn set_deadline(&mut self, qpn: u32, d: Option<Instant>) {
        if self.deadline.get(&qpn).copied() == d {
            return;
        }
        if let Some(old) = self.deadline.remove(&qpn) {
            self.timers.remove(&(old, qpn));
        }
        if let Some(d) = d {
            self.deadline.insert(qpn, d);
            self.timers.insert((d, qpn));
        }
    }
}

fn pkey_of(table: &[u16], config: &QpConfig) -> u16 {
    let i = usize::from(config.attrs().pkey_index.unwrap_or(0));
    table.get(i).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::memory::{Key, VecMemory};
    use crate::transport::qp::{AccessFlags, AddressVector, PathMtu};
    use crate::transport::wr::{Sge, WcOpcode, WcStatus, WorkQueue};
    use crate::transport::Psn;
    use crate::wire::{AethRepr, BthRepr, DethRepr, ExtReprs, Opcode, Syndrome};

    /// An endpoint with one RC QP in RTR (expecting PSN 100) and one UD QP
    /// in RTR.
    fn setup() -> (Endpoint, u32, u32) {
        let mut ep = Endpoint::new(QpCaps::default());
        let (rc, ud) = setup_on(&mut ep, None);
        (ep, rc, ud)
    }

    /// Creates an RC QP (in RTR, expecting PSN 100, Q_Key-less) and a UD QP
    /// (in RTR, Q_Key 0x1111) on `ep`, both attached to `srq` if given.
    fn setup_on(ep: &mut Endpoint, srq: Option<u32>) -> (u32, u32) {
        let rc = ep
            .create_qp(QpInit {
                srq,
                ..QpInit::new(QpType::Rc, 1)
            })
            .unwrap();
        let ud = ep
            .create_qp(QpInit {
                srq,
                ..QpInit::new(QpType::Ud, 1)
            })
            .unwrap();
        let init = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(AccessFlags::empty()),
            qkey: Some(0x1111),
            ..Default::default()
        };
        ep.modify_qp(
            rc,
            &QpAttr { qkey: None, ..init },
            init.mask().without(crate::transport::Attr::Qkey),
        )
        .unwrap();
        ep.modify_qp(
            ud,
            &QpAttr {
                access_flags: None,
                ..init
            },
            init.mask().without(crate::transport::Attr::AccessFlags),
        )
        .unwrap();
        let rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            av: Some(AddressVector::default()),
            path_mtu: Some(PathMtu::Mtu1024),
            dest_qpn: Some(0x22),
            rq_psn: Some(Psn::new(100)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        };
        ep.modify_qp(rc, &rtr, rtr.mask()).unwrap();
        let ud_rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        };
        ep.modify_qp(ud, &ud_rtr, ud_rtr.mask()).unwrap();
        (rc, ud)
    }

    fn ack_to(qpn: u32, pkey: u16) -> Vec<u8> {
        let bth = BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: qpn,
            ack_req: false,
            psn: 5,
        };
        let ext = ExtReprs {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 0,
            }),
            ..Default::default()
        };
        let t = TransportRepr::new(bth, ext, 0);
        let mut buf = vec![0; t.buffer_len().unwrap()];
        t.emit(&mut buf, &[]).unwrap();
        buf
    }

    #[test]
    fn qp_numbering_can_start_anywhere_and_wraps_past_the_special_ones() {
        let mut ep = Endpoint::new(QpCaps::default());
        ep.set_next_qpn(0xff_ffff - FIRST_QPN);
        let a = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
        let b = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
        assert_eq!((a, b), (0xff_ffff, FIRST_QPN));
        ep.set_next_qpn(0x1234);
        assert_eq!(ep.create_qp(QpInit::new(QpType::Ud, 1)).unwrap(), 0x1245);
    }

    #[test]
    fn refused_packets_are_counted_by_reason() {
        let (mut ep, rc, ud) = setup();
        let mut mem = VecMemory::new();
        let meta = RecvMeta::between([0; 16], [0; 16]);
        let now = Instant::ZERO;
        // Malformed: the wire error's own counter.
        ep.handle(now, &meta, &[0u8; 7], &mut mem);
        assert_eq!(ep.counters().get(Counter::DropTruncated), 1);
        // No such QP.
        ep.handle(now, &meta, &ack_to(0x999, 0xffff), &mut mem);
        assert_eq!(ep.counters().get(Counter::DropUnknownQp), 1);
        // An RC opcode to a UD QP.
        ep.handle(now, &meta, &ack_to(ud, 0xffff), &mut mem);
        assert_eq!(ep.counters().get(Counter::DropWrongTransport), 1);
        // Another partition (0x0001, not the QP's 0x7fff).
        ep.handle(now, &meta, &ack_to(rc, 0x8001), &mut mem);
        assert_eq!(ep.counters().get(Counter::DropPkeyMismatch), 1);
        assert_eq!(ep.counters().get(Counter::RcvdPkts), 4);
        // After a move to RESET nothing is received.
        let reset = QpAttr {
            qp_state: Some(QpState::Reset),
            ..Default::default()
        };
        ep.modify_qp(rc, &reset, reset.mask()).unwrap();
        ep.handle(now, &meta, &ack_to(rc, 0xffff), &mut mem);
        assert_eq!(ep.counters().get(Counter::DropQpState), 1);
    }

    #[test]
    fn limited_members_never_talk() {
        let (mut ep, rc, _) = setup();
        ep.set_pkey_table(vec![0x7fff]);
        let mut mem = VecMemory::new();
        let meta = RecvMeta::between([0; 16], [0; 16]);
        ep.handle(Instant::ZERO, &meta, &ack_to(rc, 0x7fff), &mut mem);
        assert_eq!(ep.counters().get(Counter::DropPkeyMismatch), 1);
    }

    #[test]
    fn qpns_skip_the_special_ones_and_gsi_is_qp1() {
        let mut ep = Endpoint::new(QpCaps::default());
        let a = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
        assert!(a > 1);
        assert_eq!(ep.create_qp(QpInit::new(QpType::Gsi, 1)), Ok(GSI_QPN));
        assert_eq!(
            ep.create_qp(QpInit::new(QpType::Gsi, 1)),
            Err(EndpointError::GsiExists)
        );
        ep.destroy_qp(a).unwrap();
        assert_eq!(ep.destroy_qp(a), Err(EndpointError::NoSuchQp(a)));
    }

    /// A request packet to `qpn`.
    fn request(qpn: u32, opcode: Opcode, psn: u32, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: qpn,
            ack_req: true,
            psn,
        };
        let t = TransportRepr::new(bth, ext, payload.len());
        let mut buf = vec![0; t.buffer_len().unwrap()];
        t.emit(&mut buf, payload).unwrap();
        buf
    }

    fn rc_send(
        ep: &mut Endpoint,
        mem: &mut VecMemory,
        qpn: u32,
        psn: u32,
        opcode: Opcode,
        data: &[u8],
    ) {
        let meta = RecvMeta::between([0; 16], [0; 16]);
        let pkt = request(qpn, opcode, psn, ExtReprs::default(), data);
        ep.handle(Instant::ZERO, &meta, &pkt, mem);
    }

    fn ud_send(ep: &mut Endpoint, mem: &mut VecMemory, qpn: u32, data: &[u8]) {
        let meta = RecvMeta::between([0; 16], [0; 16]);
        let ext = ExtReprs {
            deth: Some(DethRepr {
                qkey: 0x1111,
                src_qp: 0x77,
            }),
            ..Default::default()
        };
        let pkt = request(qpn, Opcode::UD_SEND_ONLY, 0, ext, data);
        ep.handle(Instant::ZERO, &meta, &pkt, mem);
    }

    /// A receive of `len` bytes at `va` (a region registered by the test).
    fn rwr(wr_id: u64, key: Key, va: u64, len: u32) -> RecvWr {
        RecvWr {
            wr_id,
            sg_list: vec![Sge {
                addr: va,
                length: len,
                lkey: key.raw(),
            }],
        }
    }

    fn completions(ep: &mut Endpoint) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| ep.poll_completion()).collect()
    }

    fn events(ep: &mut Endpoint) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| ep.poll_event()).collect()
    }

    /// Every ACK/NAK syndrome the endpoint has to send, in order.
    fn acks(ep: &mut Endpoint, mem: &mut VecMemory) -> Vec<(u32, Syndrome)> {
        let mut buf = [0u8; 4096 + 64];
        let mut v = Vec::new();
        while let Some(t) = ep.poll_transmit(Instant::ZERO, mem, &mut buf) {
            let p = TransportRepr::parse(&buf[..t.len]).unwrap();
            if let Some(a) = p.repr.ext.aeth {
                v.push((p.repr.bth.psn, a.syndrome));
            }
        }
        v
    }

    fn to_state(ep: &mut Endpoint, qpn: u32, state: QpState) {
        let a = QpAttr {
            qp_state: Some(state),
            ..Default::default()
        };
        ep.modify_qp(qpn, &a, AttrMask::STATE).unwrap();
    }

    #[test]
    fn srq_numbers_query_modify_and_destroy() {
        let mut ep = Endpoint::new(QpCaps::default());
        assert_eq!(ep.query_srq(1), Err(EndpointError::NoSuchSrq(1)));
        let a = ep.create_srq(SrqInit::new(1)).unwrap();
        let b = ep.create_srq(SrqInit::new(2)).unwrap();
        assert_eq!((a, b), (1, 2));
        // Refused creations spend no number.
        let bad = SrqInit {
            max_wr: 2,
            srq_limit: 3,
            ..SrqInit::new(1)
        };
        assert_eq!(
            ep.create_srq(bad),
            Err(EndpointError::SrqLimitTooLarge {
                srq_limit: 3,
                max_wr: 2
            })
        );
        assert_eq!(
            ep.query_srq(a),
            Ok(SrqAttr {
                max_wr: 128,
                max_sge: 4,
                srq_limit: 0,
                queued: 0
            })
        );
        let mut mem = VecMemory::new();
        let k = mem
            .register_bytes(1, 0x1000, vec![0; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
        ep.post_srq_recv(a, rwr(1, k, 0x1000, 64)).unwrap();
        ep.post_srq_recv(a, rwr(2, k, 0x1000, 64)).unwrap();
        assert_eq!(
            ep.post_srq_recv(9, rwr(3, k, 0x1000, 64)),
            Err(PostError::NoSuchSrq(9))
        );
        assert_eq!(
            ep.modify_srq(a, Some(1), None),
            Err(EndpointError::SrqResize)
        );
        assert_eq!(
            ep.modify_srq(a, None, Some(129)),
            Err(EndpointError::SrqLimitTooLarge {
                srq_limit: 129,
                max_wr: 128
            })
        );
        assert_eq!(
            ep.modify_srq(9, None, Some(1)),
            Err(EndpointError::NoSuchSrq(9))
        );
        ep.modify_srq(a, Some(2), Some(1)).unwrap();
        assert_eq!(
            ep.query_srq(a),
            Ok(SrqAttr {
                max_wr: 2,
                max_sge: 4,
                srq_limit: 1,
                queued: 2
            })
        );
        assert_eq!(
            ep.post_srq_recv(a, rwr(3, k, 0x1000, 64)),
            Err(PostError::QueueFull { depth: 2 })
        );
        ep.destroy_srq(b).unwrap();
        assert_eq!(ep.destroy_srq(b), Err(EndpointError::NoSuchSrq(b)));
        // Numbers are not reused (while alive or soon after).
        assert_eq!(ep.create_srq(SrqInit::new(1)), Ok(3));
    }

    #[test]
    fn srq_qp_creation_checks_and_destroy_refused_while_attached() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
        let with = |t| QpInit {
            srq: Some(srqn),
            ..QpInit::new(t, 1)
        };
        assert_eq!(
            ep.create_qp(QpInit {
                srq: Some(77),
                ..QpInit::new(QpType::Rc, 1)
            }),
            Err(EndpointError::NoSuchSrq(77))
        );
        assert_eq!(
            ep.create_qp(with(QpType::Gsi)),
            Err(EndpointError::SrqNotSupported(QpType::Gsi))
        );
        // A refused GSI creation did not take QPN 1.
        assert_eq!(ep.create_qp(QpInit::new(QpType::Gsi, 1)), Ok(GSI_QPN));
        let rc = ep.create_qp(with(QpType::Rc)).unwrap();
        let uc = ep.create_qp(with(QpType::Uc)).unwrap();
        let ud = ep.create_qp(with(QpType::Ud)).unwrap();
        assert_eq!(
            ep.destroy_srq(srqn),
            Err(EndpointError::SrqInUse { srqn, qps: 3 })
        );
        ep.destroy_qp(rc).unwrap();
        ep.destroy_qp(uc).unwrap();
        assert_eq!(
            ep.destroy_srq(srqn),
            Err(EndpointError::SrqInUse { srqn, qps: 1 })
        );
        // A QP moved to RESET stays attached.
        to_state(&mut ep, ud, QpState::Reset);
        assert!(ep.destroy_srq(srqn).is_err());
        ep.destroy_qp(ud).unwrap();
        ep.destroy_srq(srqn).unwrap();
        assert_eq!(ep.query_srq(srqn), Err(EndpointError::NoSuchSrq(srqn)));
    }

    #[test]
    fn post_recv_on_an_srq_qp_is_refused() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
        let (rc, ud) = setup_on(&mut ep, Some(srqn));
        for q in [rc, ud] {
            let wr = RecvWr {
                wr_id: 1,
                sg_list: vec![],
            };
            assert_eq!(ep.post_recv(q, wr), Err(PostError::QpHasSrq));
        }
        // Even in RESET, and nothing was queued anywhere.
        to_state(&mut ep, rc, QpState::Reset);
        let wr = RecvWr {
            wr_id: 1,
            sg_list: vec![],
        };
        assert_eq!(ep.post_recv(rc, wr), Err(PostError::QpHasSrq));
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
        assert!(completions(&mut ep).is_empty());
    }

    #[test]
    fn ud_and_rc_qps_share_one_srq_in_posting_order() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(7)).unwrap();
        let (rc, ud) = setup_on(&mut ep, Some(srqn));
        let mut mem = VecMemory::new();
        // The QPs' PD (1), not the SRQ's (7): receive buffers are checked in
        // the PD of the QP that takes them.
        let k = mem
            .register_bytes(1, 0x1000, vec![0; 4 * 256], AccessFlags::LOCAL_WRITE)
            .unwrap();
        for i in 0..4u64 {
            ep.post_srq_recv(srqn, rwr(10 + i, k, 0x1000 + 256 * i, 256))
                .unwrap();
        }
        rc_send(&mut ep, &mut mem, rc, 100, Opcode::RC_SEND_ONLY, b"rc-0");
        ud_send(&mut ep, &mut mem, ud, b"ud-0");
        ud_send(&mut ep, &mut mem, ud, b"ud-1");
        rc_send(&mut ep, &mut mem, rc, 101, Opcode::RC_SEND_ONLY, b"rc-1");
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status, w.queue, w.byte_len, w.src_qp))
            .collect();
        let ok = WcStatus::Success;
        let rq = WorkQueue::Recv;
        assert_eq!(
            got,
            [
                (10, rc, ok, rq, 4, 0),
                (11, ud, ok, rq, 44, 0x77),
                (12, ud, ok, rq, 44, 0x77),
                (13, rc, ok, rq, 4, 0),
            ]
        );
        let b = mem.bytes(k).unwrap();
        assert_eq!(&b[..4], b"rc-0");
        assert_eq!(&b[256 + 40..256 + 44], b"ud-0");
        assert_eq!(&b[512 + 40..512 + 44], b"ud-1");
        assert_eq!(&b[768..772], b"rc-1");
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
        // Dry: RNR NAK for RC, drop for UD; then a post lets the resend in.
        rc_send(&mut ep, &mut mem, rc, 102, Opcode::RC_SEND_ONLY, b"late");
        ud_send(&mut ep, &mut mem, ud, b"lost");
        assert_eq!(ep.counters().get(Counter::DropNoRecv), 1);
        assert_eq!(ep.counters().get(Counter::SendRnrErr), 1);
        let a = acks(&mut ep, &mut mem);
        assert_eq!(a.last(), Some(&(102, Syndrome::RnrNak { timer: 12 })));
        ep.post_srq_recv(srqn, rwr(20, k, 0x1000, 256)).unwrap();
        rc_send(&mut ep, &mut mem, rc, 102, Opcode::RC_SEND_ONLY, b"late");
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect();
        assert_eq!(got, [(20, rc, WcStatus::Success)]);
    }

    #[test]
    fn srq_limit_event_fires_once_and_disarms() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
        let (rc, ud) = setup_on(&mut ep, Some(srqn));
        let mut mem = VecMemory::new();
        let k = mem
            .register_bytes(1, 0x1000, vec![0; 256], AccessFlags::LOCAL_WRITE)
            .unwrap();
        for i in 0..6 {
            ep.post_srq_recv(srqn, rwr(i, k, 0x1000, 256)).unwrap();
        }
        ep.modify_srq(srqn, None, Some(4)).unwrap();
        ud_send(&mut ep, &mut mem, ud, b"a"); // 5 left
        ud_send(&mut ep, &mut mem, ud, b"b"); // 4 left
        assert_eq!(events(&mut ep), []);
        assert_eq!(ep.query_srq(srqn).unwrap().srq_limit, 4);
        // The QP that takes the WQE crossing the limit raises it: here RC.
        rc_send(&mut ep, &mut mem, rc, 100, Opcode::RC_SEND_ONLY, b"c"); // 3 left
        assert_eq!(
            events(&mut ep),
            [
                AsyncEvent::CommEstablished { qpn: rc },
                AsyncEvent::SrqLimitReached { srqn }
            ]
        );
        assert_eq!(ep.query_srq(srqn).unwrap().srq_limit, 0, "disarmed");
        ud_send(&mut ep, &mut mem, ud, b"d");
        ud_send(&mut ep, &mut mem, ud, b"e");
        assert_eq!(events(&mut ep), [], "fires once");
        // Armed again: fires again.
        ep.modify_srq(srqn, None, Some(2)).unwrap();
        ud_send(&mut ep, &mut mem, ud, b"f"); // 0 left
        assert_eq!(events(&mut ep), [AsyncEvent::SrqLimitReached { srqn }]);
        assert_eq!(completions(&mut ep).len(), 6);
    }

    #[test]
    fn qp_error_flushes_only_its_taken_wqe_and_raises_last_wqe_reached_once() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
        let (rc, ud) = setup_on(&mut ep, Some(srqn));
        let mut mem = VecMemory::new();
        let k = mem
            .register_bytes(1, 0x1000, vec![0; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        for i in 0..3 {
            ep.post_srq_recv(srqn, rwr(i, k, 0x1000, 4096)).unwrap();
        }
        // The RC QP takes WQE 0 for a message still in progress.
        rc_send(
            &mut ep,
            &mut mem,
            rc,
            100,
            Opcode::RC_SEND_FIRST,
            &[1; 1024],
        );
        events(&mut ep);
        to_state(&mut ep, rc, QpState::Error);
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status, w.opcode, w.queue))
            .collect();
        assert_eq!(
            got,
            [(0, rc, WcStatus::WrFlushErr, WcOpcode::Recv, WorkQueue::Recv)]
        );
        assert_eq!(events(&mut ep), [AsyncEvent::LastWqeReached { qpn: rc }]);
        // The SRQ kept its WQEs; the other QP goes on using them.
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 2);
        ud_send(&mut ep, &mut mem, ud, b"x");
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect();
        assert_eq!(got, [(1, ud, WcStatus::Success)]);
        // A send posted in ERR is flushed; no second Last WQE Reached.
        let swr = SendWr {
            wr_id: 50,
            op: crate::transport::SendOp::Send,
            data: crate::transport::SendData::Inline(vec![]),
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        };
        ep.post_send(rc, swr).unwrap();
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.status, w.queue))
            .collect();
        assert_eq!(got, [(50, WcStatus::WrFlushErr, WorkQueue::Send)]);
        assert_eq!(events(&mut ep), []);
        // Packets to the QP in ERR take nothing from the SRQ.
        rc_send(&mut ep, &mut mem, rc, 101, Opcode::RC_SEND_ONLY, b"y");
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
        // After RESET and a new trip to ERR, it is raised again.
        to_state(&mut ep, rc, QpState::Reset);
        to_state(&mut ep, rc, QpState::Error);
        assert_eq!(events(&mut ep), [AsyncEvent::LastWqeReached { qpn: rc }]);
        assert!(completions(&mut ep).is_empty());
        // A fatal error (QP_FATAL) raises it too.
        ud_send(&mut ep, &mut mem, ud, &[0; 4090]); // too long for 4096 - 40
        let got: Vec<_> = completions(&mut ep)
            .iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect();
        assert_eq!(got, [(2, ud, WcStatus::LocLenErr)]);
        assert_eq!(
            events(&mut ep),
            [
                AsyncEvent::QpFatal { qpn: ud },
                AsyncEvent::LastWqeReached { qpn: ud }
            ]
        );
    }

    #[test]
    fn reset_or_destroy_mid_message_gives_the_wqe_back_to_the_srq() {
        let mut ep = Endpoint::new(QpCaps::default());
        let srqn = ep.create_srq(SrqInit::new(1)).unwrap();
        let (rc, ud) = setup_on(&mut ep, Some(srqn));
        let mut mem = VecMemory::new();
        let k = mem
            .register_bytes(1, 0x1000, vec![0; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        for i in 0..2 {
            ep.post_srq_recv(srqn, rwr(i, k, 0x1000, 4096)).unwrap();
        }
        rc_send(
            &mut ep,
            &mut mem,
            rc,
            100,
            Opcode::RC_SEND_FIRST,
            &[1; 1024],
        );
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
        to_state(&mut ep, rc, QpState::Reset);
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 2);
        assert!(completions(&mut ep).is_empty());
        // The WQE given back is the first one taken next.
        ud_send(&mut ep, &mut mem, ud, b"x");
        assert_eq!(completions(&mut ep)[0].wr_id, 0);
        // Destroyed mid-message: the same.
        let (rc2, _) = setup_on(&mut ep, Some(srqn));
        rc_send(
            &mut ep,
            &mut mem,
            rc2,
            100,
            Opcode::RC_SEND_FIRST,
            &[1; 1024],
        );
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 0);
        ep.destroy_qp(rc2).unwrap();
        assert_eq!(ep.query_srq(srqn).unwrap().queued, 1);
        assert!(completions(&mut ep).is_empty());
    }

    #[test]
    fn pkey_matching_rule() {
        assert!(pkeys_match(0xffff, 0xffff));
        assert!(pkeys_match(0xffff, 0x7fff)); // full with limited
        assert!(!pkeys_match(0x7fff, 0x7fff)); // two limited members
        assert!(!pkeys_match(0xffff, 0x8001)); // other partition
        assert!(!pkeys_match(0x8000, 0x8000)); // the invalid P_Key
    }
}
