//! What the consumer asks of the CM: listen, connect, accept, RTU,
//! establish, reject, MRA, disconnect, the QP attributes, SIDR.

use super::*;

impl CmEndpoint {
    /// Accept REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.remove(&service_id) {
            return Err(CmError::NotListening(service_id));
        }
        Ok(())
    }

    /// Refuses a request that `offer_unlistened` offered for a ServiceID
    /// nobody listens on, as the endpoint itself would have: REJ reason 8
    /// (Invalid Service ID) or SIDR_REP status 1, counted the same way.
    pub fn refuse_unlistened(&mut self, now: Instant, id: CommId) -> Result<(), CmError> {
        if self.conn(id)?.state == CmState::SidrReqRcvd {
            self.counters.bump(CmCounter::SidrUnsupported);
            self.sidr_reply(
                now,
                id,
                SidrReply {
                    status: SidrStatus::ServiceIdNotSupported,
                    qpn: 0,
                    qkey: 0,
                    private_data: Vec::new(),
                },
            )
        } else {
            self.counters.bump(CmCounter::RejInvalidServiceId);
            self.reject(now, id, RejectReason::InvalidServiceId, &[])
        }
    }

    /// Forgets a REQ or SIDR_REQ the consumer cannot take now (its
    /// listener's backlog is full) without answering: the requester's
    /// resend then comes as a new request. Linux's CM does the same when
    /// its consumer is out of room (no REJ, "to allow future retries").
    pub fn forget_request(&mut self, id: CommId) -> Result<(), CmError> {
        let state = self.conn(id)?.state;
        if !matches!(state, CmState::ReqRcvd | CmState::SidrReqRcvd) {
            return Err(CmError::WrongState {
                id,
                state,
                call: "forget_request",
            });
        }
        self.counters.bump(CmCounter::DropBacklogFull);
        self.free(id.0);
        Ok(())
    }

    /// Sends a REQ; the answer arrives as `ConnectResponse`, `Rejected` or `Unreachable`.
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<CommId, CmError> {
        if !(1..=5).contains(&p.path_mtu) {
            return Err(CmError::BadMtu(p.path_mtu));
        }
        let private_data = PrivateData::from_slice("REQ", &p.private_data)?;
        let id = self.alloc_id()?;
        let cfg = &self.config;
        let mut path = p.path;
        path.local_ack_timeout = ack_timeout(cfg.ca_ack_delay, cfg.packet_life_time);
        let req = ReqRepr {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: cfg.local_ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            transport_service_type: match p.qp_type {
                ConnQpType::Rc => mad::req::TST_RC,
                ConnQpType::Uc => mad::req::TST_UC,
            },
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: p.retry_count & 7,
            pkey: p.pkey,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            max_cm_retries: cfg.max_cm_retries & 0xf,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: path,
            alternate_path: Default::default(),
            private_data,
        };
        let tid = (u64::from(cfg.tid_high) << 32) | u64::from(id);
        let peer = MadAddr::gsi(path.remote_gid);
        let timewait = exp_duration(path.local_ack_timeout);
        let retry_timeout = response_timeout(cfg.cm_response_timeout, cfg.packet_life_time);
        let retries = cfg.max_cm_retries;
        let bytes = CmMad::send(tid, CmMessage::Req(req.clone())).to_bytes();
        let mut c = Conn::new(CmState::ReqSent, true, tid, peer, timewait);
        c.local_qpn = req.local_qpn;
        c.req = Some(Box::new(req));
        self.conns.insert(id, c);
        self.send_pending(now, id, bytes, retries, retry_timeout);
        Ok(CommId(id))
    }

    /// Passive side: accepts a ConnectRequest with a REP.
    pub fn accept(&mut self, now: Instant, id: CommId, p: AcceptParams) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("REP", &p.private_data)?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "accept",
            });
        }
        let Some(req) = c.req.as_deref() else {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "accept",
            });
        };
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.config.ca_ack_delay & 0x1f,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            srq: p.srq,
            local_ca_guid: self.config.local_ca_guid,
            private_data,
        };
        // The REP waits for the RTU as long as the active side said it needs
        // to answer (its Local CM Response Timeout), as often as it allows.
        let retry_timeout =
            response_timeout(req.local_cm_response_timeout, self.config.packet_life_time);
        let retries = req.max_cm_retries;
        let key = (c.remote_ca_guid, c.remote_qpn);
        let bytes = CmMad::send(c.tid, CmMessage::Rep(rep.clone())).to_bytes();
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.local_qpn = rep.local_qpn;
        c.rep = Some(Box::new(rep));
        c.state = CmState::RepSent;
        c.answer = Some(Box::new(bytes));
        self.by_remote_qpn.insert(key, id.0);
        self.send_pending(now, id.0, bytes, retries, retry_timeout);
        Ok(())
    }

    /// Active side: confirms the REP with an RTU; the connection is up.
    pub fn send_rtu(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("RTU", private_data)?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "send_rtu",
            });
        }
        let rtu = RtuRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Rtu(rtu)).to_bytes();
        let (peer, key) = (c.peer, (c.remote_ca_guid, c.remote_qpn));
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.state = CmState::Established;
        c.answer = Some(Box::new(bytes));
        self.by_remote_qpn.insert(key, id.0);
        self.push(peer, bytes);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Passive side: the QP received a packet before the RTU arrived, so
    /// the active side is up and the connection is established (the
    /// communication-established event of the verbs; not checked against
    /// the text).
    pub fn establish(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "establish",
            });
        }
        self.cancel_timer(id.0);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::Established;
            c.pending = None;
        }
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Refuses a ConnectRequest (or, active side, a ConnectResponse) with a REJ.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CommId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("REJ", private_data)?;
        let c = self.conn(id)?;
        let message_rejected = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRejected::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRejected::Rep,
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "reject",
                })
            }
        };
        let rej = RejRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_rejected,
            reject_info_length: 0,
            reason,
            ari: [0; mad::rej::ARI_LEN],
            private_data,
        };
        let (peer, tid) = (c.peer, c.tid);
        self.push(peer, CmMad::send(tid, CmMessage::Rej(rej)).to_bytes());
        if message_rejected == MessageRejected::Req {
            self.free(id.0);
        } else {
            self.enter_timewait(now, id.0);
        }
        Ok(())
    }

    /// Asks the peer for more time with an MRA of its REQ (passive) or REP (active).
    pub fn send_mra(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("MRA", private_data)?;
        let c = self.conn(id)?;
        let (message_mraed, next) = match c.state {
            CmState::ReqRcvd => (MessageMraed::Req, CmState::MraReqSent),
            CmState::RepRcvd => (MessageMraed::Rep, CmState::MraRepSent),
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "send_mra",
                })
            }
        };
        let mra = MraRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_mraed,
            service_timeout: self.config.mra_service_timeout & 0x1f,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Mra(mra)).to_bytes();
        let peer = c.peer;
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id))?;
        c.state = next;
        c.answer = Some(Box::new(bytes));
        self.push(peer, bytes);
        Ok(())
    }

    /// A duplicate REQ (or REP) while our consumer has not answered the
    /// first: an MRA, so that the peer waits the MRA's Service Timeout
    /// instead of giving up. Counted as sent; when the MRA cannot be built
    /// the duplicate is dropped as before.
    pub(super) fn mra_for_duplicate(&mut self, lid: u32) {
        if self.send_mra(CommId(lid), &[]).is_ok() {
            self.counters.bump(CmCounter::DupMraSent);
        } else {
            self.drop_mad(CmCounter::DropDuplicateReq, "REQ");
        }
    }

    /// Ends a connection with a DREQ. A no-op while already disconnecting.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CommId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("DREQ", private_data)?;
        let c = self.conn(id)?;
        match c.state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {}
            CmState::DreqSent | CmState::TimeWait => return Ok(()),
            state => {
                return Err(CmError::WrongState {
                    id,
                    state,
                    call: "disconnect",
                })
            }
        }
        let dreq = DreqRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::Dreq(dreq)).to_bytes();
        let retry_timeout = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        );
        let retries = self.config.max_cm_retries;
        self.cancel_timer(id.0);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::DreqSent;
        }
        self.send_pending(now, id.0, bytes, retries, retry_timeout);
        Ok(())
    }

    /// Sends a DREQ on every Established connection, as the kernel's CM
    /// does for each ID still connected when a program's rdma_cm file
    /// closes (its exit, however it ends); returns how many.
    pub fn disconnect_all(&mut self, now: Instant) -> usize {
        let up: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.state == CmState::Established)
            .map(|(&id, _)| id)
            .collect();
        up.into_iter()
            .filter(|&id| self.disconnect(now, CommId(id), &[]).is_ok())
            .count()
    }

    /// How many of our DREQs still wait for their DREP (connections in
    /// DreqSent).
    pub fn unanswered_dreqs(&self) -> usize {
        self.in_state(CmState::DreqSent)
    }

    /// How many connections are Established.
    pub fn established(&self) -> usize {
        self.in_state(CmState::Established)
    }

    fn in_state(&self, state: CmState) -> usize {
        self.conns.values().filter(|c| c.state == state).count()
    }

    /// The consumer is about to go, and this endpoint with it (a process
    /// exiting, where the kernel's CM would outlive it): each DREQ still
    /// unanswered is resent `every` from now on, and every `every` after,
    /// instead of at the peer's CM response time (seconds), within the
    /// retries it has left. A resend that proves needless costs the peer
    /// one duplicate DREQ, which it answers with its DREP again (IBTA 12.9,
    /// a DREQ in TimeWait; the module's "Duplicates"); a lost
    /// DREQ that is never resent leaves the peer connected for ever.
    pub fn hurry_dreqs(&mut self, now: Instant, every: Duration) {
        let at = now.saturating_add(every);
        let ids: Vec<u32> = self
            .conns
            .iter_mut()
            .filter(|(_, c)| c.state == CmState::DreqSent)
            .map(|(&id, c)| {
                c.retry_timeout = c.retry_timeout.min(every);
                id
            })
            .collect();
        for id in ids {
            let due = self.conns.get(&id).and_then(|c| c.deadline);
            if due.is_none_or(|d| d > at) {
                self.set_timer(id, at);
            }
        }
    }

    /// The attributes for the QP's INIT, RTR and RTS transitions, once both
    /// the REQ and the REP are known.
    pub fn qp_attrs(&self, id: CommId) -> Result<QpAttrs, CmError> {
        let c = self.conn(id)?;
        match (c.req.as_deref(), c.rep.as_deref()) {
            (Some(req), Some(rep)) if c.active => Ok(qp_attrs::active(req, rep)),
            (Some(req), Some(rep)) => Ok(qp_attrs::passive(req, rep)),
            _ => Err(CmError::WrongState {
                id,
                state: c.state,
                call: "qp_attrs",
            }),
        }
    }

    /// Sends a SIDR_REQ; the answer arrives as `SidrResponse` or `Unreachable`.
    pub fn sidr_request(&mut self, now: Instant, p: SidrParams) -> Result<CommId, CmError> {
        let private_data = PrivateData::from_slice("SIDR_REQ", &p.private_data)?;
        let id = self.alloc_id()?;
        let tid = (u64::from(self.config.tid_high) << 32) | u64::from(id);
        let req = SidrReqRepr {
            request_id: id,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data,
        };
        let bytes = CmMad::send(tid, CmMessage::SidrReq(req)).to_bytes();
        let retry_timeout = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        );
        let retries = self.config.max_cm_retries;
        self.conns.insert(
            id,
            Conn::new(CmState::SidrReqSent, true, tid, p.to, Duration::ZERO),
        );
        self.send_pending(now, id, bytes, retries, retry_timeout);
        Ok(CommId(id))
    }

    /// Answers a SidrRequest.
    pub fn sidr_reply(&mut self, now: Instant, id: CommId, r: SidrReply) -> Result<(), CmError> {
        let private_data = PrivateData::from_slice("SIDR_REP", &r.private_data)?;
        let c = self.conn(id)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(CmError::WrongState {
                id,
                state: c.state,
                call: "sidr_reply",
            });
        }
        let service_id = c.service_id;
        let rep = SidrRepRepr {
            request_id: c.remote_comm_id,
            status: r.status,
            additional_info_length: 0,
            qpn: r.qpn & 0xff_ffff,
            service_id,
            qkey: r.qkey,
            class_port_info: [0; mad::sidr::REP_INFO_LEN],
            private_data,
        };
        let bytes = CmMad::send(c.tid, CmMessage::SidrRep(rep)).to_bytes();
        let peer = c.peer;
        // Keep the answer while the requester may still resend its SIDR_REQ.
        let keep = response_timeout(
            self.config.cm_response_timeout,
            self.config.packet_life_time,
        )
        .saturating_mul(u32::from(self.config.max_cm_retries) + 1);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::SidrRepSent;
            c.answer = Some(Box::new(bytes));
        }
        self.push(peer, bytes);
        self.set_timer(id.0, now.saturating_add(keep));
        Ok(())
    }
}
