//! What the CM does with each received message (REQ, REP, RTU, MRA, REJ,
//! DREQ, DREP, SIDR_REQ, SIDR_REP), state by state.

use super::*;

impl CmEndpoint {
    pub(super) fn on_req(&mut self, now: Instant, from: MadAddr, tid: u64, r: ReqRepr) {
        if let Some(&lid) = self.by_remote.get(&(r.local_ca_guid, r.local_comm_id)) {
            let Some(c) = self.conns.get(&lid) else {
                return;
            };
            match c.state {
                CmState::MraReqSent => self.resend_answer(lid, CmCounter::DupMraResent),
                // The consumer is still deciding and the peer is resending:
                // ask it for more time (mod docs, "Slow consumers").
                CmState::ReqRcvd => self.mra_for_duplicate(lid),
                CmState::RepSent | CmState::MraRepRcvd => {
                    self.resend_answer(lid, CmCounter::DupReqRepResent)
                }
                CmState::TimeWait => {
                    self.counters.bump(CmCounter::RejStaleConn);
                    self.send_rej(
                        from,
                        tid,
                        lid,
                        r.local_comm_id,
                        MessageRejected::Req,
                        RejectReason::StaleConn,
                    );
                }
                _ => self.drop_mad(CmCounter::DropDuplicateReq, "REQ"),
            }
            return;
        }
        if let Some(&lid) = self.by_remote_qpn.get(&(r.local_ca_guid, r.local_qpn)) {
            // A new REQ from a QP we think is connected: the old connection is stale.
            self.counters.bump(CmCounter::RejStaleConn);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::StaleConn,
            );
            if self
                .conns
                .get(&lid)
                .is_some_and(|c| c.state == CmState::Established)
            {
                let _ = self.disconnect(now, CommId(lid), &[]);
            }
            return;
        }
        if !self.config.offer_unlistened && !self.listeners.contains(&r.service_id) {
            self.counters.bump(CmCounter::RejInvalidServiceId);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::InvalidServiceId,
            );
            return;
        }
        let bad = if r.transport_service_type > mad::req::TST_UC {
            Some(RejectReason::InvalidTransportType)
        } else if mad::meaning::mtu_bytes(r.path_mtu).is_none() {
            Some(RejectReason::InvalidMtu)
        } else {
            None
        };
        if let Some(reason) = bad {
            self.counters.bump(CmCounter::RejInvalidReq);
            self.send_rej(from, tid, 0, r.local_comm_id, MessageRejected::Req, reason);
            return;
        }
        let Ok(id) = self.alloc_id() else {
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Req,
                RejectReason::NoResources,
            );
            return;
        };
        let mut c = Conn::new(
            CmState::ReqRcvd,
            false,
            tid,
            from,
            exp_duration(r.primary_path.local_ack_timeout),
        );
        c.remote_comm_id = r.local_comm_id;
        c.remote_ca_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        let req = Box::new(r);
        c.req = Some(req.clone());
        self.by_remote
            .insert((c.remote_ca_guid, c.remote_comm_id), id);
        self.conns.insert(id, c);
        self.events.push_back(CmEvent::ConnectRequest {
            id: CommId(id),
            from,
            req,
        });
    }

    pub(super) fn on_rep(&mut self, from: MadAddr, tid: u64, r: RepRepr) {
        let Some(c) = self
            .conns
            .get(&r.remote_comm_id)
            .filter(|c| c.active && c.req.is_some())
        else {
            self.counters.bump(CmCounter::RejInvalidCommId);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MessageRejected::Rep,
                RejectReason::InvalidCommId,
            );
            return;
        };
        let id = r.remote_comm_id;
        let same = c.remote_comm_id == r.local_comm_id;
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.cancel_timer(id);
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                c.remote_comm_id = r.local_comm_id;
                c.remote_ca_guid = r.local_ca_guid;
                c.remote_qpn = r.local_qpn;
                c.pending = None;
                c.state = CmState::RepRcvd;
                let rep = Box::new(r);
                c.rep = Some(rep.clone());
                self.events.push_back(CmEvent::ConnectResponse {
                    id: CommId(id),
                    rep,
                });
            }
            _ if !same => self.drop_mad(CmCounter::DropWrongRemoteCommId, "REP"),
            CmState::RepRcvd => self.mra_for_duplicate(id),
            CmState::MraRepSent => self.resend_answer(id, CmCounter::DupMraResent),
            CmState::Established => self.resend_answer(id, CmCounter::DupRepRtuResent),
            _ => self.drop_mad(CmCounter::DropWrongState, "REP"),
        }
    }

    pub(super) fn on_rtu(&mut self, r: RtuRepr) {
        let id = r.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| !c.active) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "RTU");
        };
        if c.remote_comm_id != r.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "RTU");
        }
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                self.cancel_timer(id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::Established;
                    c.pending = None;
                }
                self.events
                    .push_back(CmEvent::Established { id: CommId(id) });
            }
            CmState::Established => self.drop_mad(CmCounter::DropDuplicateRtu, "RTU"),
            _ => self.drop_mad(CmCounter::DropWrongState, "RTU"),
        }
    }

    pub(super) fn on_mra(&mut self, now: Instant, m: MraRepr) {
        let id = m.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "MRA");
        };
        // Before the REP the active side does not know the peer's ID yet.
        if c.remote_comm_id != 0 && c.remote_comm_id != m.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "MRA");
        }
        let next = match (m.message_mraed, c.state) {
            (MessageMraed::Req, CmState::ReqSent | CmState::MraReqRcvd) => CmState::MraReqRcvd,
            (MessageMraed::Rep, CmState::RepSent | CmState::MraRepRcvd) => CmState::MraRepRcvd,
            _ => return self.drop_mad(CmCounter::DropUnexpectedMra, "MRA"),
        };
        let first = c.state != next;
        // Wait the Service Timeout plus the packet lifetime before resending.
        let extra = exp_duration(m.service_timeout)
            .saturating_add(exp_duration(self.config.packet_life_time));
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = next;
        }
        self.set_timer(id, now.saturating_add(extra));
        if first {
            self.events
                .push_back(CmEvent::MraReceived { id: CommId(id) });
        }
    }

    pub(super) fn on_rej(&mut self, now: Instant, r: RejRepr) {
        let id = if r.remote_comm_id != 0 {
            Some(r.remote_comm_id)
        } else if r.reason == RejectReason::Timeout {
            // A REJ Timeout from an active side that never learned our ID:
            // found by its CA GUID (the ARI) and its communication ID.
            let mut g = [0u8; 8];
            g.copy_from_slice(&r.ari[..8]);
            self.by_remote
                .get(&(u64::from_be_bytes(g), r.local_comm_id))
                .copied()
        } else {
            None
        };
        let Some((id, c)) = id.and_then(|id| self.conns.get(&id).map(|c| (id, c))) else {
            return self.drop_mad(CmCounter::DropUnknownRej, "REJ");
        };
        if c.remote_comm_id != 0 && r.local_comm_id != 0 && c.remote_comm_id != r.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "REJ");
        }
        let state = c.state;
        let event = CmEvent::Rejected {
            id: CommId(id),
            reason: r.reason,
            rej: Box::new(r),
        };
        match state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::ReqRcvd | CmState::MraReqSent => {
                self.free(id);
                self.events.push_back(event);
            }
            s if s.rep_exchanged() && s != CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(event);
            }
            _ => self.drop_mad(CmCounter::DropWrongState, "REJ"),
        }
    }

    pub(super) fn on_dreq(&mut self, now: Instant, from: MadAddr, tid: u64, d: DreqRepr) {
        let id = d.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| c.req.is_some()) else {
            // No such connection (any more): answer, so the peer can leave.
            self.counters.bump(CmCounter::DrepUnknown);
            let drep = DrepRepr {
                local_comm_id: id,
                remote_comm_id: d.local_comm_id,
                private_data: PrivateData::default(),
            };
            self.push(from, CmMad::send(tid, CmMessage::Drep(drep)).to_bytes());
            return;
        };
        if c.remote_comm_id != d.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "DREQ");
        }
        if c.local_qpn != d.remote_qpn_eecn {
            return self.drop_mad(CmCounter::DropDreqWrongQpn, "DREQ");
        }
        let drep = DrepRepr {
            local_comm_id: id,
            remote_comm_id: d.local_comm_id,
            private_data: PrivateData::default(),
        };
        let bytes = CmMad::send(tid, CmMessage::Drep(drep)).to_bytes();
        let peer = c.peer;
        match c.state {
            s if s.rep_exchanged() => {
                self.push(peer, bytes);
                self.enter_timewait(now, id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.answer = Some(Box::new(bytes));
                }
                self.events
                    .push_back(CmEvent::Disconnected { id: CommId(id) });
            }
            CmState::TimeWait => {
                self.counters.bump(CmCounter::DupDreqDrepResent);
                self.push(peer, bytes);
            }
            _ => self.drop_mad(CmCounter::DropWrongState, "DREQ"),
        }
    }

    pub(super) fn on_drep(&mut self, now: Instant, d: DrepRepr) {
        let id = d.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return self.drop_mad(CmCounter::DropUnknownCommId, "DREP");
        };
        if c.remote_comm_id != d.local_comm_id {
            return self.drop_mad(CmCounter::DropWrongRemoteCommId, "DREP");
        }
        if c.state != CmState::DreqSent {
            return self.drop_mad(CmCounter::DropUnexpectedDrep, "DREP");
        }
        self.enter_timewait(now, id);
        self.events
            .push_back(CmEvent::Disconnected { id: CommId(id) });
    }

    pub(super) fn on_sidr_req(&mut self, from: MadAddr, tid: u64, s: SidrReqRepr) {
        if let Some(&lid) = self.sidr_by_remote.get(&(from.gid, s.request_id)) {
            match self.conns.get(&lid).map(|c| c.state) {
                Some(CmState::SidrRepSent) => self.resend_answer(lid, CmCounter::DupSidrRepResent),
                _ => self.drop_mad(CmCounter::DropDuplicateSidrReq, "SIDR_REQ"),
            }
            return;
        }
        if !self.config.offer_unlistened && !self.listeners.contains(&s.service_id) {
            self.counters.bump(CmCounter::SidrUnsupported);
            let rep = SidrRepRepr {
                request_id: s.request_id,
                status: SidrStatus::ServiceIdNotSupported,
                additional_info_length: 0,
                qpn: 0,
                service_id: s.service_id,
                qkey: 0,
                class_port_info: [0; mad::sidr::REP_INFO_LEN],
                private_data: PrivateData::default(),
            };
            self.push(from, CmMad::send(tid, CmMessage::SidrRep(rep)).to_bytes());
            return;
        }
        let Ok(id) = self.alloc_id() else {
            return;
        };
        let mut c = Conn::new(CmState::SidrReqRcvd, false, tid, from, Duration::ZERO);
        c.remote_comm_id = s.request_id;
        c.sidr_key = Some((from.gid, s.request_id));
        c.service_id = s.service_id;
        self.sidr_by_remote.insert((from.gid, s.request_id), id);
        let req = Box::new(s);
        self.conns.insert(id, c);
        self.events.push_back(CmEvent::SidrRequest {
            id: CommId(id),
            from,
            req,
        });
    }

    pub(super) fn on_sidr_rep(&mut self, s: SidrRepRepr) {
        let id = s.request_id;
        if self.conns.get(&id).map(|c| c.state) != Some(CmState::SidrReqSent) {
            return self.drop_mad(CmCounter::DropUnknownSidrRep, "SIDR_REP");
        }
        self.free(id);
        self.events.push_back(CmEvent::SidrResponse {
            id: CommId(id),
            rep: Box::new(s),
        });
    }
}
