//! The endpoint fuzzing harness, shared by the cargo-fuzz target
//! (`fuzz_targets/endpoint.rs`) and the plain test that replays the seed
//! corpus (`integration/tests/hostile_fuzz_replay.rs`).
//!
//! One [`Endpoint`] with live RC, UC and UD QPs (all in RTS) and four real
//! regions, fed whatever packets the input holds. The invariants, checked
//! after every step:
//!
//! - nothing panics (the fuzzer's own check);
//! - no write lands in a region that does not grant it: every write goes
//!   through [`Guarded`], which refuses (panics on) a write to a region
//!   without LOCAL_WRITE or outside the QPs' PD; the regions of the other
//!   PD and the read-only one are compared byte for byte with their initial
//!   contents, and so is the part of the receive region no receive covers;
//! - the counters are consistent: each packet handed to `handle` adds one
//!   to `rcvd_pkts` and at most one to the sum of the `drop_*` counters
//!   (a packet is handled or dropped for exactly one reason);
//! - everything the endpoint transmits parses as a transport packet and
//!   fits the buffer.
//!
//! Input format: records of `[ctl] [len lo] [len hi] [len bytes]` (length
//! mod 2048; a short last record takes what is left). `ctl` bits:
//!
//! - 0..=1: rewrite the BTH destination QPN: 0 keep, 1 the RC QP, 2 the UC
//!   QP, 3 the UD QP;
//! - 2: rewrite the P_Key to the default 0xffff;
//! - 3: rewrite the PSN to the harness's running PSN for that QP (which
//!   then advances), so that sequences of requests reach the responder;
//! - 4: advance the clock by 100 ms and fire the timers after the packet;
//! - 5: post a send work request on the QP first (the kind from `len lo`),
//!   so that responses find something outstanding;
//! - 6: post a receive on the QP first;
//! - 7: rewrite a UD packet's DETH Q_Key to the QP's.

#![forbid(unsafe_code)]

use rxe_core::transport::{
    AccessFlags, AddressVector, Counter, Endpoint, Instant, Key, MemError, MemoryAccess, MwBind,
    PathMtu, Psn, QpAttr, QpCaps, QpInit, QpRef, QpState, QpType, RecvMeta, RecvWr, RegMr, Region,
    SendData, SendOp, SendWr, Sge, UdDest, VecMemory,
};
use rxe_core::wire::TransportRepr;
use rxe_core::Gid;

/// The PD of every QP.
pub const PD: u32 = 1;
/// Another PD: its region must never change.
pub const OTHER_PD: u32 = 2;
pub const UD_QKEY: u32 = 0x1111_1111;
const REGION_LEN: usize = 4096;
/// Receives cover the first `RECV_LEN` bytes of the receive region.
const RECV_LEN: u32 = 3072;
const RC_RQ_PSN: u32 = 0x10;
const UC_RQ_PSN: u32 = 0x20;
const BUF_LEN: usize = 4096 + 128;

/// [`VecMemory`] that checks every write against the region's rights.
pub struct Guarded {
    pub inner: VecMemory,
    pub writes: u64,
}

impl MemoryAccess for Guarded {
    fn check(
        &self,
        key: Key,
        pd: u32,
        is_remote: bool,
        needed: AccessFlags,
        va: u64,
        len: usize,
    ) -> Result<Region, MemError> {
        self.inner.check(key, pd, is_remote, needed, va, len)
    }

    fn read(&self, region: &Region, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        self.inner.read(region, offset, dst)
    }

    fn write(&mut self, region: &Region, offset: usize, src: &[u8]) -> Result<(), MemError> {
        if !src.is_empty() {
            let info = self.inner.info(region.key()).copied();
            let info = info.unwrap_or_else(|e| panic!("write through a dead key: {e}"));
            // IBTA 10.6.3.1 (access rights): any write needs LOCAL_WRITE, and a
            // QP only ever reaches regions of its own PD.
            assert!(
                info.access.contains(AccessFlags::LOCAL_WRITE),
                "write to a region without LOCAL_WRITE: {info:?}"
            );
            assert_eq!(info.pd, PD, "write to a region of another PD: {info:?}");
            self.writes += 1;
        }
        self.inner.write(region, offset, src)
    }

    fn invalidate(&mut self, rkey: Key, qp: QpRef) -> Result<(), MemError> {
        // Every region of the harness is an ordinary one (ibv_reg_mr), and
        // it has no memory window: no SEND with Invalidate may ever
        // invalidate anything.
        let r = self.inner.invalidate(rkey, qp);
        assert!(r.is_err(), "a peer invalidated an ordinary region {rkey}");
        r
    }

    fn local_invalidate(&mut self, key: Key, qp: QpRef) -> Result<(), MemError> {
        self.inner.local_invalidate(key, qp)
    }

    fn bind_mw(&mut self, bind: &MwBind, qp: QpRef) -> Result<Key, MemError> {
        self.inner.bind_mw(bind, qp)
    }

    fn reg_mr(&mut self, req: &RegMr, qp: QpRef) -> Result<Key, MemError> {
        self.inner.reg_mr(req, qp)
    }

    fn check_whole(&self, key: Key, qp: QpRef, needed: AccessFlags) -> Result<Region, MemError> {
        self.inner.check_whole(key, qp, needed)
    }
}

/// The harness: an endpoint, its memory, the regions and QPs.
pub struct Harness {
    pub ep: Endpoint,
    pub mem: Guarded,
    /// Remote read, write and atomic, in PD 1: RDMA target.
    pub rdma: Key,
    /// All rights, but PD 2.
    pub other_pd: Key,
    /// REMOTE_READ only, PD 1.
    pub read_only: Key,
    /// LOCAL_WRITE only, PD 1: receive buffers.
    pub recv: Key,
    pub rc: u32,
    pub uc: u32,
    pub ud: u32,
    now: Instant,
    psn: [u32; 3],
    next_wr: u64,
    buf: Vec<u8>,
    initial: Vec<u8>,
    /// Packets handled, transmitted.
    pub handled: u64,
    pub transmitted: u64,
}

fn peer_gid() -> Gid {
    Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 2))
}

fn local_gid() -> Gid {
    Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 1))
}

fn up(ep: &mut Endpoint, qpn: u32, qp_type: QpType, rq_psn: u32) {
    let connected = qp_type != QpType::Ud;
    let rc = qp_type == QpType::Rc;
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: connected.then_some(
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        ),
        qkey: (!connected).then_some(UD_QKEY),
        ..Default::default()
    };
    ep.modify_qp(qpn, &init, init.mask()).expect("RESET->INIT");
    let mut rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        ..Default::default()
    };
    if connected {
        rtr.av = Some(AddressVector {
            dgid: peer_gid(),
            sgid_index: 0,
            hop_limit: 64,
            ..Default::default()
        });
        rtr.path_mtu = Some(PathMtu::Mtu1024);
        rtr.dest_qpn = Some(0x77);
        rtr.rq_psn = Some(Psn::new(rq_psn));
    }
    if rc {
        rtr.max_dest_rd_atomic = Some(4);
        rtr.min_rnr_timer = Some(1);
    }
    ep.modify_qp(qpn, &rtr, rtr.mask()).expect("INIT->RTR");
    let mut rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(0x100)),
        ..Default::default()
    };
    if rc {
        rts.timeout = Some(14);
        rts.retry_cnt = Some(3);
        rts.rnr_retry = Some(3);
        rts.max_rd_atomic = Some(4);
    }
    ep.modify_qp(qpn, &rts, rts.mask()).expect("RTR->RTS");
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        let mut ep = Endpoint::new(QpCaps::default());
        let mut inner = VecMemory::new();
        let fill = |seed: u8| -> Vec<u8> {
            (0..REGION_LEN)
                .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                .collect()
        };
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let rdma = inner
            .register_bytes(PD, 0x1_0000, fill(1), all)
            .expect("region");
        let other_pd = inner
            .register_bytes(OTHER_PD, 0x2_0000, fill(2), all)
            .expect("region");
        let read_only = inner
            .register_bytes(PD, 0x3_0000, fill(3), AccessFlags::REMOTE_READ)
            .expect("region");
        let recv = inner
            .register_bytes(PD, 0x4_0000, fill(4), AccessFlags::LOCAL_WRITE)
            .expect("region");
        let mut initial = Vec::new();
        for k in [other_pd, read_only, recv] {
            initial.extend_from_slice(inner.bytes(k).expect("region"));
        }
        let rc = ep.create_qp(QpInit::new(QpType::Rc, PD)).expect("qp");
        let uc = ep.create_qp(QpInit::new(QpType::Uc, PD)).expect("qp");
        let ud = ep.create_qp(QpInit::new(QpType::Ud, PD)).expect("qp");
        up(&mut ep, rc, QpType::Rc, RC_RQ_PSN);
        up(&mut ep, uc, QpType::Uc, UC_RQ_PSN);
        up(&mut ep, ud, QpType::Ud, 0);
        let mut h = Harness {
            ep,
            mem: Guarded { inner, writes: 0 },
            rdma,
            other_pd,
            read_only,
            recv,
            rc,
            uc,
            ud,
            now: Instant::from_nanos(1_000_000),
            psn: [RC_RQ_PSN, UC_RQ_PSN, 0],
            next_wr: 1,
            buf: vec![0; BUF_LEN],
            initial,
            handled: 0,
            transmitted: 0,
        };
        for q in [rc, uc, ud] {
            for _ in 0..4 {
                h.post_recv(q);
            }
        }
        h
    }

    fn qp(&self, sel: u8) -> Option<(usize, u32)> {
        match sel & 3 {
            1 => Some((0, self.rc)),
            2 => Some((1, self.uc)),
            3 => Some((2, self.ud)),
            _ => None,
        }
    }

    fn post_recv(&mut self, qpn: u32) {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let _ = self.ep.post_recv(
            qpn,
            RecvWr {
                wr_id,
                sg_list: [Sge {
                    addr: 0x4_0000,
                    length: RECV_LEN,
                    lkey: self.recv.raw(),
                }]
                .into(),
            },
        );
    }

    fn post_send(&mut self, qpn: u32, kind: u8) {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let rkey = 0x0101; // whatever the peer would have sent
        let (op, len) = match kind % 6 {
            0 => (SendOp::Send, 100),
            1 => (
                SendOp::RdmaWrite {
                    remote_addr: 0x9000,
                    rkey,
                },
                2000,
            ),
            2 => (
                SendOp::RdmaRead {
                    remote_addr: 0x9000,
                    rkey,
                },
                1500,
            ),
            3 => (
                SendOp::FetchAdd {
                    remote_addr: 0x9000,
                    rkey,
                    add: 1,
                },
                8,
            ),
            4 => (
                SendOp::CmpSwap {
                    remote_addr: 0x9000,
                    rkey,
                    compare: 0,
                    swap: 1,
                },
                8,
            ),
            _ => (SendOp::SendWithImm { imm: 7 }, 0),
        };
        let ud = (qpn == self.ud).then(|| UdDest {
            av: AddressVector {
                dgid: peer_gid(),
                sgid_index: 0,
                hop_limit: 64,
                ..Default::default()
            },
            remote_qpn: 0x77,
            remote_qkey: UD_QKEY,
        });
        let len = if ud.is_some() { len.min(1000) } else { len };
        let _ = self.ep.post_send(
            qpn,
            SendWr {
                wr_id,
                op,
                // READ and atomic results land in the RDMA region (local
                // write); SENDs and WRITEs read from it.
                data: SendData::Sges(vec![Sge {
                    addr: 0x1_0000 + 64,
                    length: len,
                    lkey: self.rdma.raw(),
                }]),
                signaled: true,
                fence: false,
                solicited: false,
                ud,
            },
        );
    }

    fn meta(&self) -> RecvMeta {
        let mut grh = [0u8; 40];
        grh[20] = 0x45;
        RecvMeta {
            sgid: peer_gid(),
            dgid: local_gid(),
            grh,
            ce: false,
        }
    }

    /// Runs one whole input.
    pub fn run(&mut self, mut data: &[u8]) {
        while let Some((&ctl, rest)) = data.split_first() {
            let (len, rest) = match rest {
                [lo, hi, rest @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])) % 2048, rest),
                _ => (rest.len(), &[][..]),
            };
            let len = len.min(rest.len());
            let (pkt, rest) = rest.split_at(len);
            self.step(ctl, pkt, len as u8);
            data = rest;
        }
        self.check_memory();
    }

    /// One record: maybe post work, rewrite fields, handle the packet,
    /// maybe fire timers, then drain the output; all invariants checked.
    pub fn step(&mut self, ctl: u8, packet: &[u8], kind: u8) {
        let target = self.qp(ctl);
        if let Some((_, qpn)) = target {
            if ctl & 0x20 != 0 {
                self.post_send(qpn, kind);
            }
            if ctl & 0x40 != 0 {
                self.post_recv(qpn);
            }
            self.drain();
        }
        let mut p = packet.to_vec();
        if let Some((i, qpn)) = target {
            if let Some(b) = p.get_mut(5..8) {
                b.copy_from_slice(&qpn.to_be_bytes()[1..]);
            }
            if ctl & 0x08 != 0 {
                if let Some(b) = p.get_mut(9..12) {
                    b.copy_from_slice(&self.psn[i].to_be_bytes()[1..]);
                    self.psn[i] = (self.psn[i] + 1) & 0xff_ffff;
                }
            }
            if ctl & 0x80 != 0 && i == 2 {
                // DETH right after the BTH on UD opcodes.
                if let Some(b) = p.get_mut(12..16) {
                    b.copy_from_slice(&UD_QKEY.to_be_bytes());
                }
            }
        }
        if ctl & 0x04 != 0 {
            if let Some(b) = p.get_mut(2..4) {
                b.copy_from_slice(&[0xff, 0xff]);
            }
        }
        let before = self.ep.counters().clone();
        let meta = self.meta();
        self.ep.handle(self.now, &meta, &p, &mut self.mem);
        self.handled += 1;
        let after = self.ep.counters();
        assert_eq!(
            after.get(Counter::RcvdPkts),
            before.get(Counter::RcvdPkts) + 1,
            "one packet, one rcvd_pkts"
        );
        let dropped = after.drops() - before.drops();
        assert!(
            dropped <= 1,
            "one packet counted as dropped {dropped} times: {:?}",
            after
                .iter_counters()
                .filter(|(c, v)| c.is_drop() && *v != before.get(*c))
                .collect::<Vec<_>>()
        );
        if ctl & 0x10 != 0 {
            self.now = Instant::from_nanos(self.now.as_nanos() + 100_000_000);
            self.ep.handle_timeout(self.now);
        }
        self.drain();
        self.check_memory();
    }

    /// Sends everything ready (checking that it parses) and takes the
    /// completions and events.
    fn drain(&mut self) {
        for _ in 0..256 {
            let Some(t) = self
                .ep
                .poll_transmit(self.now, &mut self.mem, &mut self.buf)
            else {
                break;
            };
            assert!(t.len <= self.buf.len(), "transmit longer than the buffer");
            if let Err(e) = TransportRepr::parse(&self.buf[..t.len]) {
                panic!("the endpoint sent a packet that does not parse: {e}");
            }
            self.transmitted += 1;
        }
        while self.ep.poll_completion().is_some() {}
        while self.ep.poll_event().is_some() {}
    }

    /// The other PD's region, the read-only one and the receive region
    /// beyond what receives cover hold what they held at the start.
    fn check_memory(&self) {
        let mut at = 0;
        for k in [self.other_pd, self.read_only, self.recv] {
            let now = self.mem.inner.bytes(k).expect("region");
            let was = &self.initial[at..at + now.len()];
            let from = if k == self.recv { RECV_LEN as usize } else { 0 };
            assert_eq!(&now[from..], &was[from..], "region {k} changed");
            at += now.len();
        }
    }
}

/// Encodes a seed: each transport packet (BTH .. ICRC) as a record aimed at
/// the QP of its transport, with its P_Key fixed, a receive posted first,
/// the PSN taken from the harness for requests, and the UD Q_Key fixed.
pub fn seed_from_packets<'a>(packets: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        let Some(&op) = p.first() else { continue };
        let len = p.len().min(2047) as u16;
        let sel = match op >> 5 {
            0 => 1, // RC
            1 => 2, // UC
            3 => 3, // UD
            _ => 0,
        };
        // Requests of RC/UC (not responses 0x0d..=0x12) follow the PSNs.
        let is_response = sel == 1 && (0x0d..=0x12).contains(&(op & 0x1f));
        let mut ctl = sel | 0x04 | 0x40;
        if sel != 0 && !is_response {
            ctl |= 0x08;
        }
        if is_response {
            ctl |= 0x20;
        }
        if sel == 3 {
            ctl |= 0x80;
        }
        out.push(ctl);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&p[..usize::from(len)]);
    }
    out
}
