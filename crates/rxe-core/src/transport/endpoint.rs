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

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::counters::{Counter, Counters};
use super::memory::MemoryAccess;
use super::qp::{AsyncEvent, QpCommon, QpInit, RecvMeta, Transmit};
use super::qp_attr::{AttrMask, QpAttr, QpState, QpType};
use super::qp_state::{modify, ModifyError, QpCaps, QpConfig};
use super::requester::Requester;
use super::responder::Responder;
use super::time::Instant;
use super::wr::{PostError, RecvWr, SendWr, WorkCompletion};
use crate::wire::{Transport, TransportRepr};

/// The QPN of the general services interface (IBTA 3.5.1).
pub const GSI_QPN: u32 = 1;
/// The first QPN handed to an ordinary QP (0 and 1 are special).
const FIRST_QPN: u32 = 0x11;
/// QPNs are 24 bits.
const QPN_MASK: u32 = 0xff_ffff;

/// Why an endpoint call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("no QP with number {0:#x}")]
    NoSuchQp(u32),
    #[error("the GSI QP (QP1) exists already")]
    GsiExists,
    #[error("no free QP number")]
    OutOfQpns,
    #[error(transparent)]
    Modify(#[from] ModifyError),
}

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
}

/// The transport engine of one port.
#[derive(Debug)]
pub struct Endpoint {
    caps: QpCaps,
    pkey_table: Vec<u16>,
    qps: HashMap<u32, Qp>,
    next_qpn: u32,
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
            counters: Counters::default(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            deadline: HashMap::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
        }
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
    /// number.
    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, EndpointError> {
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
        self.qps.insert(
            qpn,
            Qp {
                common: QpCommon::new(qpn, init, config, pkey),
                req: Requester::new(),
                resp: Responder::new(),
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
    /// as `ibv_destroy_qp` does.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EndpointError> {
        self.qps.remove(&qpn).ok_or(EndpointError::NoSuchQp(qpn))?;
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
            qp.resp.handle_request(
                c,
                &mut self.counters,
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
        if !self.ready.contains(&qpn) {
            self.ready.push_back(qpn);
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
    use crate::transport::memory::VecMemory;
    use crate::transport::qp_attr::{AccessFlags, AddressVector, PathMtu};
    use crate::transport::Psn;
    use crate::wire::{AethRepr, BthRepr, ExtReprs, Opcode, Syndrome};

    /// An endpoint with one RC QP in RTR (expecting PSN 100) and one UD QP
    /// in RTR.
    fn setup() -> (Endpoint, u32, u32) {
        let mut ep = Endpoint::new(QpCaps::default());
        let rc = ep.create_qp(QpInit::new(QpType::Rc, 1)).unwrap();
        let ud = ep.create_qp(QpInit::new(QpType::Ud, 1)).unwrap();
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
        (ep, rc, ud)
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

    #[test]
    fn pkey_matching_rule() {
        assert!(pkeys_match(0xffff, 0xffff));
        assert!(pkeys_match(0xffff, 0x7fff)); // full with limited
        assert!(!pkeys_match(0x7fff, 0x7fff)); // two limited members
        assert!(!pkeys_match(0xffff, 0x8001)); // other partition
        assert!(!pkeys_match(0x8000, 0x8000)); // the invalid P_Key
    }
}
