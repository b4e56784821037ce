//! Tests of the send side: a rig drives one QP's requester the way the
//! endpoint does, with registered memory and a simulated clock; the
//! requester's tests post work and read the packets, the completer's feed
//! responses back.

use core::time::Duration;

use super::requester::Requester;
use crate::transport::counters::Counters;
use crate::transport::error::PostError;
use crate::transport::memory::Key;
use crate::transport::psn::Psn;
use crate::transport::qp::{
    modify, AccessFlags, AddressVector, AsyncEvent, PathMtu, QpAttr, QpCaps, QpCommon, QpConfig,
    QpInit, QpState, QpType,
};
use crate::transport::test_packet;
use crate::transport::time::Instant;
use crate::transport::vec_memory::VecMemory;
use crate::transport::wr::{SendData, SendOp, SendWr, Sge, UdDest, WcStatus, WorkCompletion};
use crate::wire::{
    AethRepr, AtomicAckEthRepr, ExtReprs, Opcode, Syndrome, TransportPacket, TransportRepr,
};

/// Virtual address of the source buffer (bytes `i as u8`) and of the
/// LOCAL_WRITE destination buffer.
const SRC_VA: u64 = 0x10_0000;
const DST_VA: u64 = 0x20_0000;
const BUF_LEN: usize = 1 << 18;
const DEST_QPN: u32 = 0x22;

/// RTS attributes of an RC QP.
#[derive(Debug, Clone, Copy)]
struct Rts {
    pub sq_psn: u32,
    pub mtu: PathMtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

impl Default for Rts {
    fn default() -> Rts {
        Rts {
            sq_psn: 100,
            mtu: PathMtu::Mtu256,
            timeout: 14,
            retry_cnt: 3,
            rnr_retry: 2,
            max_rd_atomic: 4,
        }
    }
}

struct Rig {
    pub req: Requester,
    pub common: QpCommon,
    pub counters: Counters,
    pub mem: VecMemory,
    pub now: Instant,
    pub src: Key,
    pub dst: Key,
    pub wcs: Vec<WorkCompletion>,
    pub events: Vec<AsyncEvent>,
}

fn step(c: &QpConfig, attr: QpAttr) -> QpConfig {
    modify(c, &attr, attr.mask()).expect("transition")
}

impl Rig {
    fn new(qp_type: QpType, rts: Rts) -> Rig {
        Rig::with_init(QpInit::new(qp_type, 1), rts)
    }

    fn rc() -> Rig {
        Rig::new(QpType::Rc, Rts::default())
    }

    fn with_init(init: QpInit, rts: Rts) -> Rig {
        let qp_type = init.qp_type;
        let caps = QpCaps::default();
        let mut config = if qp_type == QpType::Gsi {
            QpConfig::new_gsi(1, caps).unwrap()
        } else {
            QpConfig::new(qp_type, caps)
        };
        let datagram = qp_type.is_datagram();
        config = step(
            &config,
            QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: (qp_type != QpType::Gsi).then_some(1),
                access_flags: (!datagram).then_some(AccessFlags::all()),
                qkey: match qp_type {
                    QpType::Ud => Some(0x1111_1111),
                    QpType::Gsi => Some(crate::transport::GSI_QKEY),
                    _ => None,
                },
                ..Default::default()
            },
        );
        config = step(
            &config,
            QpAttr {
                qp_state: Some(QpState::Rtr),
                av: (!datagram).then(AddressVector::default),
                path_mtu: (!datagram).then_some(rts.mtu),
                dest_qpn: (!datagram).then_some(DEST_QPN),
                rq_psn: (!datagram).then_some(Psn::new(7)),
                max_dest_rd_atomic: (qp_type == QpType::Rc).then_some(4),
                min_rnr_timer: (qp_type == QpType::Rc).then_some(12),
                ..Default::default()
            },
        );
        let mut common = QpCommon::new(0x11, init, config, 0xffff);
        let mut req = Requester::new(false, false);
        let rc = qp_type == QpType::Rc;
        common.config = step(
            &common.config,
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(rts.sq_psn)),
                timeout: rc.then_some(rts.timeout),
                retry_cnt: rc.then_some(rts.retry_cnt),
                rnr_retry: rc.then_some(rts.rnr_retry),
                max_rd_atomic: rc.then_some(rts.max_rd_atomic),
                ..Default::default()
            },
        );
        req.on_modify(&mut common, QpState::Rtr);
        let mut mem = VecMemory::new();
        let bytes: Vec<u8> = (0..BUF_LEN).map(|i| (i % 251) as u8).collect();
        let src = mem
            .register_bytes(1, SRC_VA, bytes, AccessFlags::empty())
            .unwrap();
        let dst = mem
            .register(1, DST_VA, BUF_LEN, AccessFlags::LOCAL_WRITE)
            .unwrap();
        Rig {
            req,
            common,
            counters: Counters::new(),
            mem,
            now: Instant::ZERO,
            src,
            dst,
            wcs: Vec::new(),
            events: Vec::new(),
        }
    }

    fn mtu(&self) -> usize {
        self.common.mtu() as usize
    }

    /// The source bytes `off..off + len`.
    fn src_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.mem.bytes(self.src).unwrap()[off..off + len].to_vec()
    }

    fn dst_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.mem.bytes(self.dst).unwrap()[off..off + len].to_vec()
    }

    fn src_sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: SRC_VA + off,
            length: len,
            lkey: self.src.raw(),
        }
    }

    fn dst_sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: DST_VA + off,
            length: len,
            lkey: self.dst.raw(),
        }
    }

    /// A signaled work request `wr_id` of `op` over `sges`.
    fn wr(&self, wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWr {
        let ud = self.common.qp_type().is_datagram().then_some(UdDest {
            av: AddressVector {
                hop_limit: 9,
                ..Default::default()
            },
            remote_qpn: 0x33,
            remote_qkey: 0x4444,
        });
        SendWr {
            wr_id,
            op,
            data: SendData::Sges(sges),
            signaled: true,
            fence: false,
            solicited: false,
            ud,
        }
    }

    /// Posts a signaled SEND of the first `len` bytes of the source
    /// buffer, which must be accepted.
    fn post_send(&mut self, wr_id: u64, len: u32) {
        let wr = self.wr(wr_id, SendOp::Send, vec![self.src_sge(0, len)]);
        self.post(wr).unwrap();
    }

    fn post(&mut self, wr: SendWr) -> Result<(), PostError> {
        let r = self.req.post_send(&self.common, wr);
        self.after();
        r
    }

    /// What the endpoint does after every call.
    fn after(&mut self) {
        if self.common.take_flush() {
            self.req.flush(&mut self.common);
        }
        while let Some(wc) = self.common.pop_completion() {
            self.wcs.push(wc);
        }
        while let Some(ev) = self.common.pop_event() {
            self.events.push(ev);
        }
    }

    /// The next packet the requester sends, as bytes.
    fn tx(&mut self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 4096 + 128];
        let t = self.req.poll_transmit(
            &mut self.common,
            &mut self.counters,
            self.now,
            &mut self.mem,
            &mut buf,
        );
        self.after();
        let t = t?;
        assert_eq!(t.src_qpn, 0x11);
        buf.truncate(t.len);
        Some(buf)
    }

    /// Every packet the requester sends now.
    fn drain(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(p) = self.tx() {
            out.push(p);
            assert!(out.len() < 100_000, "requester never stops");
        }
        out
    }

    fn rx(&mut self, bytes: &[u8]) {
        let pkt = TransportRepr::parse(bytes).expect("a response that parses");
        self.req.handle_response(
            &mut self.common,
            &mut self.counters,
            self.now,
            &pkt,
            &mut self.mem,
        );
        self.after();
    }

    /// Moves the clock to `t`, firing the timers due.
    fn advance_to(&mut self, t: Instant) {
        self.now = t;
        if self.req.poll_timeout().is_some_and(|d| d <= t) {
            self.req
                .handle_timeout(&mut self.common, &mut self.counters, t);
            self.after();
        }
    }

    fn advance(&mut self, d: Duration) {
        self.advance_to(self.now.saturating_add(d));
    }

    /// Fires the next timer, moving the clock to it.
    fn fire(&mut self) -> Instant {
        let t = self.req.poll_timeout().expect("a timer is running");
        self.advance_to(t);
        t
    }

    fn take_wcs(&mut self) -> Vec<(u64, WcStatus)> {
        self.wcs.drain(..).map(|w| (w.wr_id, w.status)).collect()
    }
}

fn parse(bytes: &[u8]) -> TransportPacket<'_> {
    TransportRepr::parse(bytes).expect("a packet that parses")
}

fn psn_of(bytes: &[u8]) -> u32 {
    parse(bytes).repr.bth.psn
}

fn response(opcode: Opcode, psn: u32, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
    test_packet::emit(test_packet::bth(opcode, 0x11, psn), ext, payload)
}

fn aeth(syndrome: Syndrome) -> ExtReprs {
    ExtReprs {
        aeth: Some(AethRepr { syndrome, msn: 0 }),
        ..Default::default()
    }
}

/// An RC Acknowledge with `syndrome` for `psn`.
fn ack_with(psn: u32, syndrome: Syndrome) -> Vec<u8> {
    response(Opcode::RC_ACKNOWLEDGE, psn & 0xff_ffff, aeth(syndrome), &[])
}

fn ack(psn: u32) -> Vec<u8> {
    ack_with(psn, Syndrome::ACK_CREDITS_INVALID)
}

/// A READ response packet of `opcode` (FIRST/MIDDLE/LAST/ONLY).
fn read_resp(opcode: Opcode, psn: u32, payload: &[u8]) -> Vec<u8> {
    let ext = if opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
        ExtReprs::default()
    } else {
        aeth(Syndrome::ACK_CREDITS_INVALID)
    };
    response(opcode, psn & 0xff_ffff, ext, payload)
}

fn atomic_ack(psn: u32, orig: u64) -> Vec<u8> {
    let mut ext = aeth(Syndrome::ACK_CREDITS_INVALID);
    ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: orig });
    response(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn & 0xff_ffff, ext, &[])
}

mod requester {
    use super::super::requester::{
        validate, ACK_REQ_INTERVAL, ACK_TIMEOUT_BACKOFF_MAX, MAX_MESSAGE_LEN, MAX_UNACKED_PSNS,
    };
    use super::*;
    use crate::transport::counters::Counter;
    use crate::transport::qp::local_ack_timeout;
    use crate::transport::qp::modify;
    use crate::transport::qp::QpInit;
    use crate::transport::qp::{PathMtu, QpAttr};
    use crate::wire::{Opcode, Position, Syndrome};
    use core::time::Duration;

    const M: usize = 256;
    const SIZES: [usize; 6] = [0, 1, M - 1, M, M + 1, 3 * M];

    fn ops() -> [SendOp; 5] {
        [
            SendOp::Send,
            SendOp::SendWithImm { imm: 0xdead_beef },
            SendOp::SendWithInv { rkey: 0x1234 },
            SendOp::RdmaWrite {
                remote_addr: 0x9000,
                rkey: 0x77,
            },
            SendOp::RdmaWriteWithImm {
                remote_addr: 0x9000,
                rkey: 0x77,
                imm: 5,
            },
        ]
    }

    /// SEND and WRITE, every flavour and size: opcodes, headers, PSNs,
    /// AckReq, SE and payload bytes, then completion by one ACK.
    #[test]
    fn segmentation_of_sends_and_writes() {
        for op in ops() {
            for len in SIZES {
                for solicited in [false, true] {
                    let mut r = Rig::rc();
                    let mut wr = r.wr(1, op, vec![r.src_sge(3, len as u32)]);
                    wr.solicited = solicited;
                    r.post(wr).unwrap();
                    let pkts = r.drain();
                    let n = len.div_ceil(M).max(1);
                    assert_eq!(pkts.len(), n, "{op:?} {len}");
                    let mut payload = Vec::new();
                    for (i, b) in pkts.iter().enumerate() {
                        let p = parse(b);
                        let (first, last) = (i == 0, i + 1 == n);
                        assert_eq!(p.repr.bth.psn, 100 + i as u32);
                        assert_eq!(p.repr.bth.dest_qp, DEST_QPN);
                        assert_eq!(p.repr.bth.pkey, 0xffff);
                        assert_eq!(p.repr.bth.ack_req, last, "AckReq on the last only");
                        let want_pos = match (first, last) {
                            (true, true) => Position::Only,
                            (true, false) => Position::First,
                            (false, false) => Position::Middle,
                            (false, true) => Position::Last,
                        };
                        assert_eq!(p.info.position, Some(want_pos), "{op:?} {len} #{i}");
                        let is_write = matches!(
                            op,
                            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. }
                        );
                        assert_eq!(p.repr.ext.reth.is_some(), is_write && first);
                        if let Some(reth) = p.repr.ext.reth {
                            assert_eq!(
                                (reth.va, reth.rkey, reth.dma_len),
                                (0x9000, 0x77, len as u32)
                            );
                        }
                        let imm = matches!(
                            op,
                            SendOp::SendWithImm { .. } | SendOp::RdmaWriteWithImm { .. }
                        );
                        assert_eq!(p.repr.ext.immdt.is_some(), imm && last);
                        assert_eq!(p.info.immediate, imm && last);
                        assert_eq!(
                            p.repr.ext.ieth.map(|h| h.rkey),
                            (last && matches!(op, SendOp::SendWithInv { .. })).then_some(0x1234)
                        );
                        let se_op = !matches!(op, SendOp::RdmaWrite { .. });
                        assert_eq!(p.repr.bth.solicited, solicited && se_op && last);
                        assert_eq!(p.payload.len(), if last { len - (n - 1) * M } else { M });
                        payload.extend_from_slice(p.payload);
                        // The packet is exactly what the wire engine emits.
                        let mut again = vec![0u8; b.len()];
                        p.repr.emit(&mut again, p.payload).unwrap();
                        assert_eq!(&again, b);
                    }
                    assert_eq!(payload, r.src_bytes(3, len));
                    assert!(r.take_wcs().is_empty());
                    r.rx(&ack(100 + n as u32 - 1));
                    assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
                    assert_eq!(r.req.poll_timeout(), None, "timer stops when all is acked");
                }
            }
        }
    }

    #[test]
    fn gather_across_sges_and_inline() {
        let mut r = Rig::rc();
        let sges = vec![r.src_sge(0, 100), r.src_sge(1000, 0), r.src_sge(500, 300)];
        r.post(r.wr(1, SendOp::Send, sges)).unwrap();
        let mut wr = r.wr(2, SendOp::Send, vec![]);
        wr.data = SendData::Inline(vec![9; 200].into());
        r.post(wr).unwrap();
        let pkts = r.drain();
        let mut got = Vec::new();
        for b in &pkts[..2] {
            got.extend_from_slice(parse(b).payload);
        }
        let mut want = r.src_bytes(0, 100);
        want.extend(r.src_bytes(500, 300));
        assert_eq!(got, want);
        assert_eq!(parse(&pkts[2]).payload, &[9; 200][..]);
        assert_eq!(psn_of(&pkts[2]), 102);
    }

    /// `SendData::Sge` is the one-entry list: the same packets for a
    /// WRITE, the same placement of a READ's response and of an atomic's
    /// original value, the same checks.
    #[test]
    fn one_sge_is_a_list_of_one() {
        let write = SendOp::RdmaWrite {
            remote_addr: 0xa000,
            rkey: 0x55,
        };
        let packets = |one: bool| {
            let mut r = Rig::rc();
            let mut wr = r.wr(1, write, vec![r.src_sge(100, 3000)]);
            if one {
                wr.data = SendData::Sge(r.src_sge(100, 3000));
            }
            r.post(wr).unwrap();
            r.drain()
        };
        assert_eq!(packets(true), packets(false));

        let mut r = Rig::rc();
        let read = SendOp::RdmaRead {
            remote_addr: 0xb000,
            rkey: 0x56,
        };
        let mut wr = r.wr(1, read, vec![]);
        wr.data = SendData::Sge(r.dst_sge(16, 5));
        r.post(wr).unwrap();
        let fa = SendOp::FetchAdd {
            remote_addr: 0x18,
            rkey: 9,
            add: 3,
        };
        let mut wr = r.wr(2, fa, vec![]);
        wr.data = SendData::Sge(r.dst_sge(32, 8));
        r.post(wr).unwrap();
        assert_eq!(r.drain().len(), 2);
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            100,
            b"hello",
        ));
        r.rx(&atomic_ack(101, 0x0102_0304_0506_0708));
        assert_eq!(
            r.take_wcs(),
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        assert_eq!(r.dst_bytes(16, 5), b"hello");
        assert_eq!(r.dst_bytes(32, 8), 0x0102_0304_0506_0708u64.to_ne_bytes());

        // An atomic's one SGE is 8 bytes; a QP without SGEs takes none.
        let mut wr = r.wr(3, fa, vec![]);
        wr.data = SendData::Sge(r.dst_sge(32, 4));
        assert_eq!(r.post(wr), Err(PostError::BadAtomic));
        let mut none = Rig::with_init(
            QpInit {
                max_send_sge: 0,
                ..QpInit::new(QpType::Rc, 1)
            },
            Rts::default(),
        );
        let mut wr = none.wr(4, SendOp::Send, vec![]);
        wr.data = SendData::Sge(none.src_sge(0, 1));
        assert_eq!(
            none.post(wr),
            Err(PostError::TooManySges { given: 1, max: 0 })
        );
    }

    #[test]
    fn read_and_atomic_requests() {
        for len in SIZES {
            let mut r = Rig::rc();
            let op = SendOp::RdmaRead {
                remote_addr: 0xa000,
                rkey: 0x55,
            };
            r.post(r.wr(1, op, vec![r.dst_sge(0, len as u32)])).unwrap();
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            let pkts = r.drain();
            assert_eq!(pkts.len(), 2);
            let p = parse(&pkts[0]);
            assert_eq!(p.repr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
            assert!(p.repr.bth.ack_req);
            let reth = p.repr.ext.reth.unwrap();
            assert_eq!(
                (reth.va, reth.rkey, reth.dma_len),
                (0xa000, 0x55, len as u32)
            );
            assert!(p.payload.is_empty());
            // The READ takes one PSN per response packet.
            assert_eq!(psn_of(&pkts[1]), 100 + len.div_ceil(M).max(1) as u32);
        }
        let mut r = Rig::rc();
        let cs = SendOp::CmpSwap {
            remote_addr: 0x10,
            rkey: 9,
            compare: 1,
            swap: 2,
        };
        let fa = SendOp::FetchAdd {
            remote_addr: 0x18,
            rkey: 9,
            add: 3,
        };
        r.post(r.wr(1, cs, vec![r.dst_sge(0, 8)])).unwrap();
        r.post(r.wr(2, fa, vec![r.dst_sge(8, 8)])).unwrap();
        let pkts = r.drain();
        let (a, b) = (parse(&pkts[0]), parse(&pkts[1]));
        assert_eq!(a.repr.bth.opcode, Opcode::RC_COMPARE_SWAP);
        let e = a.repr.ext.atomic_eth.unwrap();
        assert_eq!((e.va, e.rkey, e.swap_add, e.compare), (0x10, 9, 2, 1));
        assert_eq!(b.repr.bth.opcode, Opcode::RC_FETCH_ADD);
        let e = b.repr.ext.atomic_eth.unwrap();
        assert_eq!((e.va, e.swap_add, e.compare), (0x18, 3, 0));
        assert_eq!((a.repr.bth.psn, b.repr.bth.psn), (100, 101));
        assert!(a.repr.bth.ack_req && b.repr.bth.ack_req);
    }

    #[test]
    fn psn_wraps_at_2_pow_24() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                sq_psn: 0xff_fffe,
                ..Rts::default()
            },
        );
        r.post_send(1, 3 * M as u32);
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        };
        r.post(r.wr(2, read, vec![r.dst_sge(0, 2 * M as u32)]))
            .unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 1, 3]);
        // An ACK after the wrap completes the SEND.
        r.rx(&ack(0));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        // A stale ACK from before the wrap is a duplicate.
        r.rx(&ack(0xff_ffff));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 1);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 1, &[1; M]));
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, &[2; M]));
        r.rx(&ack(3));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
    }

    #[test]
    fn ud_and_gsi_sends() {
        for qp_type in [QpType::Ud, QpType::Gsi] {
            let mut r = Rig::new(qp_type, Rts::default());
            let mtu = r.mtu();
            assert_eq!(mtu, 4096, "UD uses the port MTU");
            let mut wr = r.wr(1, SendOp::SendWithImm { imm: 7 }, vec![r.src_sge(0, 100)]);
            wr.solicited = true;
            r.post(wr).unwrap();
            // A controlled Q_Key (high bit) means the QP's own.
            let mut wr = r.wr(2, SendOp::Send, vec![r.src_sge(0, mtu as u32)]);
            wr.ud.as_mut().unwrap().remote_qkey = 0x8000_0000;
            r.post(wr).unwrap();
            let mut buf = vec![0u8; 4200];
            let t = r
                .req
                .poll_transmit(&mut r.common, &mut r.counters, r.now, &mut r.mem, &mut buf)
                .unwrap();
            assert_eq!(t.dest.hop_limit, 9, "the work request's address");
            r.after();
            let p = parse(&buf[..t.len]);
            assert_eq!(p.repr.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
            assert_eq!(p.repr.bth.dest_qp, 0x33);
            assert!(p.repr.bth.solicited && !p.repr.bth.ack_req);
            let deth = p.repr.ext.deth.unwrap();
            assert_eq!((deth.qkey, deth.src_qp), (0x4444, 0x11));
            // Completed as soon as it was handed over.
            assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
            let b = r.tx().unwrap();
            let p = parse(&b);
            assert_eq!(p.repr.bth.opcode, Opcode::UD_SEND_ONLY);
            let own = if qp_type == QpType::Ud {
                0x1111_1111
            } else {
                crate::transport::GSI_QKEY
            };
            assert_eq!(p.repr.ext.deth.unwrap().qkey, own);
            assert_eq!(p.payload.len(), mtu);
            assert_eq!(r.take_wcs(), [(2, WcStatus::Success)]);
            assert_eq!(r.req.poll_timeout(), None, "no timers without ACKs");
        }
    }

    #[test]
    fn uc_completes_after_its_last_packet() {
        let mut r = Rig::new(QpType::Uc, Rts::default());
        let write = SendOp::RdmaWriteWithImm {
            remote_addr: 0,
            rkey: 1,
            imm: 2,
        };
        r.post(r.wr(1, write, vec![r.src_sge(0, 2 * M as u32 + 1)]))
            .unwrap();
        let a = r.tx().unwrap();
        assert_eq!(parse(&a).repr.bth.opcode, Opcode::UC_RDMA_WRITE_FIRST);
        assert!(!parse(&a).repr.bth.ack_req);
        assert!(r.take_wcs().is_empty());
        let rest = r.drain();
        let ops: Vec<_> = rest.iter().map(|b| parse(b).repr.bth.opcode).collect();
        assert_eq!(
            ops,
            [
                Opcode::UC_RDMA_WRITE_MIDDLE,
                Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE
            ]
        );
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn post_errors() {
        let mut r = Rig::rc();
        let send = |r: &Rig, sges| r.wr(1, SendOp::Send, sges);
        // Queue depth counts requests not yet completed.
        let mut small = Rig::with_init(
            QpInit {
                max_send_wr: 2,
                ..QpInit::new(QpType::Rc, 1)
            },
            Rts::default(),
        );
        small.post(send(&small, vec![])).unwrap();
        small.post(send(&small, vec![])).unwrap();
        assert_eq!(
            small.post(send(&small, vec![])),
            Err(PostError::QueueFull { depth: 2 })
        );
        let five = vec![r.src_sge(0, 1); 5];
        assert_eq!(
            r.post(send(&r, five)),
            Err(PostError::TooManySges { given: 5, max: 4 })
        );
        let mut wr = send(&r, vec![]);
        wr.data = SendData::Inline(vec![0; 257].into());
        assert_eq!(
            r.post(wr),
            Err(PostError::InlineTooLarge {
                given: 257,
                max: 256
            })
        );
        // Atomics: one 8-byte SGE, 8-byte aligned address.
        let fa = |addr| SendOp::FetchAdd {
            remote_addr: addr,
            rkey: 1,
            add: 1,
        };
        for (op, sges) in [
            (fa(4), vec![r.dst_sge(0, 8)]),
            (fa(8), vec![r.dst_sge(0, 4)]),
            (fa(8), vec![r.dst_sge(0, 4), r.dst_sge(4, 4)]),
        ] {
            assert_eq!(r.post(r.wr(1, op, sges)), Err(PostError::BadAtomic));
        }
        // 2^31 bytes at most.
        let big = vec![r.src_sge(0, u32::MAX), r.src_sge(0, 1)];
        assert!(matches!(
            r.post(send(&r, big)),
            Err(PostError::MessageTooLarge {
                max: MAX_MESSAGE_LEN,
                ..
            })
        ));
        assert_eq!(r.req.sq.len(), 0, "nothing refused was queued");

        // UC: no READ, no atomics, no invalidate.
        let uc = Rig::new(QpType::Uc, Rts::default());
        for op in [
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            fa(0),
            SendOp::SendWithInv { rkey: 0 },
        ] {
            assert_eq!(
                uc.req
                    .clone_check(&uc.common, uc.wr(1, op, vec![uc.dst_sge(0, 8)])),
                Err(PostError::OpNotSupported)
            );
        }
        // UD: SENDs only, a destination, at most one MTU.
        let mut ud = Rig::new(QpType::Ud, Rts::default());
        let w = ud.wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        );
        assert_eq!(ud.post(w), Err(PostError::OpNotSupported));
        let mut w = ud.wr(1, SendOp::Send, vec![]);
        w.ud = None;
        assert_eq!(ud.post(w), Err(PostError::MissingUdDest));
        let w = ud.wr(1, SendOp::Send, vec![ud.src_sge(0, 4097)]);
        assert_eq!(
            ud.post(w),
            Err(PostError::MessageTooLarge {
                len: 4097,
                max: 4096
            })
        );

        // Not before RTS.
        let mut common = r.common.clone();
        common.config = modify(
            &common.config,
            &QpAttr {
                qp_state: Some(QpState::Reset),
                ..Default::default()
            },
            QpAttr {
                qp_state: Some(QpState::Reset),
                ..Default::default()
            }
            .mask(),
        )
        .unwrap();
        assert_eq!(
            Requester::new(false, false).post_send(&common, send(&r, vec![])),
            Err(PostError::BadState)
        );
    }

    impl Requester {
        fn clone_check(&self, common: &QpCommon, wr: SendWr) -> Result<u32, PostError> {
            validate(common, &wr)
        }
    }

    #[test]
    fn posts_in_err_are_flushed() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.drain();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        r.common.fatal();
        r.after();
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(r.events, [AsyncEvent::QpFatal { qpn: 0x11 }]);
        let mut wr = r.wr(3, SendOp::Send, vec![]);
        wr.signaled = false;
        r.post(wr).unwrap();
        assert!(r.tx().is_none());
        assert_eq!(
            r.take_wcs(),
            [(3, WcStatus::WrFlushErr)],
            "errors always complete"
        );
    }

    #[test]
    fn bad_lkey_is_a_local_protection_error_in_order() {
        let mut r = Rig::rc();
        r.post_send(1, 10);
        let mut bad = r.src_sge(0, 10);
        bad.lkey ^= 1;
        r.post(r.wr(2, SendOp::Send, vec![bad])).unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 1);
        // The bad one waits for the one before it.
        assert!(r.take_wcs().is_empty());
        r.rx(&ack(100));
        assert_eq!(
            r.take_wcs(),
            [
                (1, WcStatus::Success),
                (2, WcStatus::LocProtErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(r.common.state(), QpState::Error);
        // Out of bounds of the region, and READ into memory without
        // LOCAL_WRITE, fail the same way.
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![r.src_sge(BUF_LEN as u64 - 4, 8)]))
            .unwrap();
        assert!(r.tx().is_none());
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
        let mut r = Rig::rc();
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 0,
        };
        r.post(r.wr(1, read, vec![r.src_sge(0, 8)])).unwrap();
        assert!(r.tx().is_none());
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
    }

    #[test]
    fn unsignaled_successes_are_silent_unless_sq_sig_all() {
        for sig_all in [false, true] {
            let mut r = Rig::with_init(
                QpInit {
                    sq_sig_all: sig_all,
                    ..QpInit::new(QpType::Rc, 1)
                },
                Rts::default(),
            );
            let mut wr = r.wr(1, SendOp::Send, vec![]);
            wr.signaled = false;
            r.post(wr).unwrap();
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            r.drain();
            r.rx(&ack(101));
            let want: &[(u64, WcStatus)] = if sig_all {
                &[(1, WcStatus::Success), (2, WcStatus::Success)]
            } else {
                &[(2, WcStatus::Success)]
            };
            assert_eq!(r.take_wcs(), want);
        }
    }

    /// A cut link: retransmissions at every timeout, from the oldest
    /// unacknowledged PSN, then RETRY_EXC_ERR after exactly `retry_cnt`
    /// retries, in simulated time.
    #[test]
    fn retry_exceeded_after_exactly_retry_cnt_retries() {
        for retry_cnt in [0u8, 1, 3, 7] {
            let mut r = Rig::new(
                QpType::Rc,
                Rts {
                    retry_cnt,
                    timeout: 10,
                    ..Rts::default()
                },
            );
            let t = local_ack_timeout(10).unwrap();
            r.post_send(1, 2 * M as u32);
            r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
            assert_eq!(r.drain().len(), 3);
            // The first packet is acknowledged; the rest is lost for ever.
            r.rx(&ack(100));
            // The intervals back off: 1, 2, 4, 4, ... times the nominal one.
            let interval = |spent: u32| t * (1u32 << spent).min(ACK_TIMEOUT_BACKOFF_MAX);
            let mut retries = 0;
            let mut due = Instant::ZERO.saturating_add(interval(0));
            loop {
                let at = r.fire();
                assert_eq!(at, due);
                if r.common.state() == QpState::Error {
                    break;
                }
                retries += 1;
                due = due.saturating_add(interval(retries));
                let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
                assert_eq!(psns, [101, 102], "resent from the oldest unacked");
            }
            assert_eq!(retries, u32::from(retry_cnt));
            // retry_cnt 7: 1 + 2 + 4 × 6 = 27 nominal intervals in all.
            let total: u32 = (0..=u32::from(retry_cnt))
                .map(|i| (1u32 << i).min(ACK_TIMEOUT_BACKOFF_MAX))
                .sum();
            assert_eq!(r.now, Instant::ZERO.saturating_add(t * total));
            if retry_cnt == 7 {
                assert_eq!(total, 27);
            }
            assert_eq!(
                r.take_wcs(),
                [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
            );
            assert_eq!(r.counters.get(Counter::RetryExceededErr), 1);
            assert_eq!(
                r.counters.get(Counter::CompleterRetryErr),
                u64::from(retry_cnt)
            );
            assert_eq!(r.req.poll_timeout(), None);
        }
    }

    #[test]
    fn progress_resets_the_retry_count() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                ..Rts::default()
            },
        );
        r.post_send(1, 3 * M as u32);
        r.drain();
        for acked in 100..102 {
            r.fire();
            r.drain();
            r.rx(&ack(acked));
        }
        r.fire();
        assert_eq!(r.drain().len(), 1);
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
    }

    /// The backed-off interval returns to the nominal one at progress.
    #[test]
    fn progress_ends_the_timer_backoff() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 7,
                timeout: 10,
                ..Rts::default()
            },
        );
        let t = local_ack_timeout(10).unwrap();
        r.post_send(1, 3 * M as u32);
        r.drain();
        let first = r.fire();
        r.drain();
        let second = r.fire();
        r.drain();
        assert_eq!(second, first.saturating_add(t * 2), "one retry spent: 2x");
        let third = r.fire();
        r.drain();
        assert_eq!(third, second.saturating_add(t * 4), "two spent: 4x");
        r.rx(&ack(100));
        let after = r.req.poll_timeout().expect("PSNs 101..102 outstanding");
        assert_eq!(after, r.now.saturating_add(t), "progress: nominal again");
    }

    #[test]
    fn no_timer_with_timeout_zero() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                timeout: 0,
                ..Rts::default()
            },
        );
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.drain();
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn window_bounds_unacknowledged_psns() {
        let mut r = Rig::with_init(
            QpInit {
                max_send_wr: 4096,
                ..QpInit::new(QpType::Rc, 1)
            },
            Rts::default(),
        );
        for i in 0..1000 {
            r.post(r.wr(i, SendOp::Send, vec![])).unwrap();
        }
        let pkts = r.drain();
        assert_eq!(pkts.len(), MAX_UNACKED_PSNS as usize);
        r.rx(&ack(100 + 9));
        assert_eq!(r.drain().len(), 10);
    }

    #[test]
    fn ack_req_within_long_messages() {
        let mut r = Rig::rc();
        let len = (ACK_REQ_INTERVAL as usize * 2 + 5) * M;
        r.post_send(1, len as u32);
        let asks: Vec<usize> = r
            .drain()
            .iter()
            .enumerate()
            .filter(|(_, b)| parse(b).repr.bth.ack_req)
            .map(|(i, _)| i)
            .collect();
        let k = ACK_REQ_INTERVAL as usize;
        assert_eq!(asks, [k - 1, 2 * k - 1, 2 * k + 4]);
    }

    #[test]
    fn max_rd_atomic_and_fence() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                max_rd_atomic: 2,
                ..Rts::default()
            },
        );
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        };
        for i in 0..3 {
            r.post(r.wr(i, read, vec![r.dst_sge(0, 4)])).unwrap();
        }
        let mut fenced = r.wr(3, SendOp::Send, vec![]);
        fenced.fence = true;
        r.post(fenced).unwrap();
        assert_eq!(r.drain().len(), 2, "two READs outstanding at most");
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[1; 4]));
        let third = r.drain();
        assert_eq!(third.len(), 1);
        assert_eq!(psn_of(&third[0]), 102);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 101, &[1; 4]));
        assert!(r.drain().is_empty(), "the fence waits for the last READ");
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 102, &[1; 4]));
        let sent = r.drain();
        assert_eq!(sent.len(), 1);
        assert_eq!(parse(&sent[0]).repr.bth.opcode, Opcode::RC_SEND_ONLY);
    }

    #[test]
    fn sqd_stops_new_requests_and_reports_drained_once() {
        let mut r = Rig::rc();
        r.post_send(1, 2 * M as u32);
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        assert!(r.tx().is_some());
        let sqd = QpAttr {
            qp_state: Some(QpState::Sqd),
            en_sqd_async_notify: Some(true),
            ..Default::default()
        };
        r.common.config = modify(&r.common.config, &sqd, sqd.mask()).unwrap();
        r.req.on_modify(&mut r.common, QpState::Rts);
        r.after();
        // The started request finishes; the next does not start.
        assert_eq!(r.drain().len(), 1);
        assert!(r.events.is_empty());
        r.rx(&ack(101));
        assert_eq!(r.events, [AsyncEvent::SqDrained { qpn: 0x11 }]);
        assert!(r.drain().is_empty());
        r.rx(&ack(101));
        assert_eq!(r.events.len(), 1, "once");
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        };
        r.common.config = modify(&r.common.config, &rts, rts.mask()).unwrap();
        r.req.on_modify(&mut r.common, QpState::Sqd);
        let sent = r.drain();
        assert_eq!(sent.len(), 1);
        assert_eq!(psn_of(&sent[0]), 102);
    }

    #[test]
    fn path_mtu_4096_segments() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                mtu: PathMtu::Mtu4096,
                ..Rts::default()
            },
        );
        r.post_send(1, 4097);
        let pkts = r.drain();
        assert_eq!(pkts.len(), 2);
        assert_eq!(parse(&pkts[1]).payload.len(), 1);
        assert!(r.take_wcs().is_empty());
        r.advance(Duration::from_secs(1));
        assert_eq!(r.drain().len(), 2, "timeout resends both");
        let _ = Syndrome::ACK_CREDITS_INVALID;
    }
}

mod completer {
    use super::*;
    use crate::transport::counters::Counter;
    use crate::transport::qp::{rnr_timer, AccessFlags};
    use crate::wire::NakCode;
    use crate::wire::Opcode;

    const M: usize = 256;

    fn read(addr: u64) -> SendOp {
        SendOp::RdmaRead {
            remote_addr: addr,
            rkey: 0x55,
        }
    }

    fn sends(r: &mut Rig, n: u64, len: u32) {
        for i in 1..=n {
            r.post_send(i, len);
        }
    }

    #[test]
    fn coalesced_partial_duplicate_and_stray_acks() {
        let mut r = Rig::rc();
        sends(&mut r, 3, 2 * M as u32); // PSNs 100-101, 102-103, 104-105
        assert_eq!(r.drain().len(), 6);
        // Inside the second message: the first completes, the second not.
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.req.una, Psn::new(103));
        // Older than the oldest outstanding: a duplicate, ignored.
        r.rx(&ack(101));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 1);
        // Beyond the newest sent: answers nothing, ignored.
        r.rx(&ack(106));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        assert!(r.take_wcs().is_empty());
        // One ACK for the newest completes the rest in order.
        r.rx(&ack(105));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
        r.rx(&ack(105));
        assert_eq!(r.counters.get(Counter::DropDuplicateResponse), 2);
    }

    #[test]
    fn nak_sequence_error_goes_back_to_the_named_psn() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                ..Rts::default()
            },
        );
        sends(&mut r, 3, 2 * M as u32);
        assert_eq!(r.drain().len(), 6);
        let seq = |psn| ack_with(psn, Syndrome::Nak(NakCode::PsnSequenceError));
        r.rx(&seq(103));
        // Everything before 103 arrived: the first request completes.
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.counters.get(Counter::RcvdSeqErr), 1);
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [103, 104, 105]);
        // The same NAK again (duplicated by the network) starts nothing.
        r.rx(&seq(103));
        assert!(r.drain().is_empty());
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        // The NAK spent the one retry: the next timeout is one too many.
        r.fire();
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::RetryExcErr), (3, WcStatus::WrFlushErr)]
        );
    }

    /// Kernel rxe answers the packets in flight behind an RNR NAK'd one
    /// with a NAK PSN sequence error for the same PSN. That is no new
    /// error: many RNR rounds must not spend `retry_cnt`.
    #[test]
    fn a_sequence_nak_behind_an_rnr_nak_costs_no_retry() {
        let mut r = Rig::new(
            QpType::Rc,
            Rts {
                retry_cnt: 1,
                rnr_retry: 7,
                ..Rts::default()
            },
        );
        sends(&mut r, 3, 10);
        assert_eq!(r.drain().len(), 3);
        let rnr = ack_with(100, Syndrome::RnrNak { timer: 14 });
        let seq = ack_with(100, Syndrome::Nak(NakCode::PsnSequenceError));
        for _ in 0..10 {
            r.rx(&rnr);
            r.rx(&seq);
            assert!(r.tx().is_none(), "waits for the RNR timer");
            r.fire();
            let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
            assert_eq!(psns, [100, 101, 102], "resent once, from the NAK'd PSN");
            // The sequence NAK of the previous round, late, starts nothing.
            r.rx(&seq);
            assert!(r.drain().is_empty());
        }
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 0);
        assert!(r.take_wcs().is_empty());
        r.rx(&ack(102));
        assert_eq!(
            r.take_wcs(),
            [
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::Success)
            ]
        );
        // A sequence NAK after progress is a real one and costs a retry.
        sends(&mut r, 2, 10);
        assert_eq!(r.drain().len(), 2);
        r.rx(&ack_with(103, Syndrome::Nak(NakCode::PsnSequenceError)));
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [103, 104]);
    }

    #[test]
    fn fatal_naks_complete_with_their_status_and_flush() {
        for (code, status) in [
            (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
            (NakCode::RemoteAccessError, WcStatus::RemAccessErr),
            (NakCode::RemoteOperationalError, WcStatus::RemOpErr),
            (NakCode::Reserved(9), WcStatus::RemOpErr),
        ] {
            let mut r = Rig::rc();
            sends(&mut r, 3, 10);
            r.drain();
            r.rx(&ack_with(101, Syndrome::Nak(code)));
            assert_eq!(
                r.take_wcs(),
                [
                    (1, WcStatus::Success),
                    (2, status),
                    (3, WcStatus::WrFlushErr)
                ],
                "{code:?}"
            );
            assert_eq!(r.common.state(), QpState::Error);
            assert_eq!(r.req.poll_timeout(), None);
            assert!(r.tx().is_none());
        }
    }

    #[test]
    fn rnr_nak_waits_then_resends_until_rnr_retry_is_spent() {
        for rnr_retry in [0u8, 2, 7] {
            let mut r = Rig::new(
                QpType::Rc,
                Rts {
                    rnr_retry,
                    ..Rts::default()
                },
            );
            sends(&mut r, 2, 10);
            assert_eq!(r.drain().len(), 2);
            let rnr = ack_with(100, Syndrome::RnrNak { timer: 14 });
            let wait = rnr_timer(14);
            let rounds = if rnr_retry == 7 { 50 } else { rnr_retry };
            for i in 0..rounds {
                let at = r.now;
                r.rx(&rnr);
                assert_eq!(r.counters.get(Counter::RcvdRnrErr), 2 * u64::from(i) + 1);
                assert!(r.tx().is_none(), "waits for the RNR timer");
                // A duplicate of the same RNR NAK changes nothing.
                r.rx(&rnr);
                assert_eq!(r.fire(), at.saturating_add(wait));
                let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
                assert_eq!(psns, [100, 101], "resent from the NAK'd PSN");
            }
            if rnr_retry == 7 {
                r.rx(&ack(101));
                assert_eq!(
                    r.take_wcs(),
                    [(1, WcStatus::Success), (2, WcStatus::Success)]
                );
                continue;
            }
            r.rx(&rnr);
            assert_eq!(
                r.take_wcs(),
                [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
            );
            assert_eq!(r.counters.get(Counter::RetryRnrExceededErr), 1);
        }
    }

    #[test]
    fn rnr_nak_acknowledges_what_came_before() {
        let mut r = Rig::rc();
        sends(&mut r, 3, 10);
        r.drain();
        r.rx(&ack_with(101, Syndrome::RnrNak { timer: 1 }));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        r.fire();
        let psns: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(psns, [101, 102]);
    }

    #[test]
    fn read_responses_scatter_into_the_sges() {
        let mut r = Rig::rc();
        let len = 3 * M + 10;
        let sges = vec![r.dst_sge(0, 300), r.dst_sge(1000, (len - 300) as u32)];
        r.post(r.wr(1, read(0xa000), sges)).unwrap();
        assert_eq!(r.drain().len(), 1);
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            100,
            &data[..M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            101,
            &data[M..2 * M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &data[2 * M..3 * M],
        ));
        assert!(r.take_wcs().is_empty());
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            103,
            &data[3 * M..],
        ));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        assert_eq!(r.dst_bytes(0, 300), data[..300]);
        assert_eq!(r.dst_bytes(1000, len - 300), data[300..]);
        assert_eq!(r.req.poll_timeout(), None);
    }

    #[test]
    fn lost_read_response_is_requested_again_for_the_rest() {
        let mut r = Rig::rc();
        let len = 4 * M;
        r.post(r.wr(1, read(0xa000), vec![r.dst_sge(0, len as u32)]))
            .unwrap();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 2); // READ 100..=103, SEND 104
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            100,
            &[1; M],
        ));
        // 101 is lost; 102 arrives out of order and is not taken.
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &[3; M],
        ));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        r.fire();
        let again = r.drain();
        assert_eq!(again.len(), 2);
        let p = parse(&again[0]);
        assert_eq!(p.repr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert_eq!(p.repr.bth.psn, 101);
        let reth = p.repr.ext.reth.unwrap();
        assert_eq!((reth.va, reth.dma_len), (0xa000 + M as u64, 3 * M as u32));
        assert_eq!(psn_of(&again[1]), 104);
        // The responder answers the rest from 101 on, FIRST again.
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            101,
            &[2; M],
        ));
        r.rx(&read_resp(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            102,
            &[3; M],
        ));
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 103, &[4; M]));
        r.rx(&ack(104));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        let want: Vec<u8> = [1u8, 2, 3, 4].iter().flat_map(|&b| [b; M]).collect();
        assert_eq!(r.dst_bytes(0, len), want);
    }

    #[test]
    fn ack_past_an_unanswered_read_resends_the_read() {
        let mut r = Rig::rc();
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.post(r.wr(2, read(0), vec![r.dst_sge(0, 8)])).unwrap();
        r.post(r.wr(3, SendOp::Send, vec![])).unwrap();
        assert_eq!(r.drain().len(), 3); // 100, 101, 102
                                        // The READ response was lost: the ACK of 102 implies it.
        r.rx(&ack(102));
        assert_eq!(r.take_wcs(), [(1, WcStatus::Success)]);
        let again: Vec<u32> = r.drain().iter().map(|b| psn_of(b)).collect();
        assert_eq!(again, [101, 102]);
        assert_eq!(r.counters.get(Counter::CompleterRetryErr), 1);
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 101, &[5; 8]));
        r.rx(&ack(102));
        assert_eq!(
            r.take_wcs(),
            [(2, WcStatus::Success), (3, WcStatus::Success)]
        );
    }

    #[test]
    fn malformed_read_response_is_a_bad_response() {
        let mut r = Rig::rc();
        r.post(r.wr(1, read(0), vec![r.dst_sge(0, 2 * M as u32)]))
            .unwrap();
        r.post(r.wr(2, SendOp::Send, vec![])).unwrap();
        r.drain();
        // ONLY where FIRST is due (two packets expected).
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[0; M]));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::BadRespErr), (2, WcStatus::WrFlushErr)]
        );
    }

    #[test]
    fn read_into_memory_gone_is_a_local_protection_error() {
        let mut r = Rig::rc();
        r.post(r.wr(1, read(0), vec![r.dst_sge(0, 8)])).unwrap();
        r.drain();
        let dst = r.dst;
        r.mem.deregister(dst).unwrap();
        r.mem
            .register(1, DST_VA, BUF_LEN, AccessFlags::empty())
            .unwrap();
        r.rx(&read_resp(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 100, &[0; 8]));
        assert_eq!(r.take_wcs(), [(1, WcStatus::LocProtErr)]);
    }

    #[test]
    fn atomic_ack_writes_the_original_value() {
        let mut r = Rig::rc();
        let cs = SendOp::CmpSwap {
            remote_addr: 0x40,
            rkey: 1,
            compare: 0,
            swap: 1,
        };
        r.post(r.wr(1, SendOp::Send, vec![])).unwrap();
        r.post(r.wr(2, cs, vec![r.dst_sge(16, 8)])).unwrap();
        r.drain();
        let orig = 0x0102_0304_0506_0708u64;
        // A wrong PSN (the SEND's) is not an atomic's answer.
        r.rx(&atomic_ack(100, orig));
        assert_eq!(r.counters.get(Counter::DropUnexpectedResponse), 1);
        // It also acknowledges the SEND before it.
        r.rx(&atomic_ack(101, orig));
        assert_eq!(
            r.take_wcs(),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        assert_eq!(r.dst_bytes(16, 8), orig.to_ne_bytes());
        assert_eq!(r.req.rd_atomic, 0);
    }
}
