//! A connected stream rsocket: librdmacm's byte-stream protocol over one
//! RC QP, so that an rsocket here and one in rdma-core's librdmacm talk to
//! each other.
//!
//! How the protocol moves bytes (read from librdmacm's `rsocket.c`; the
//! state and names follow it so the two can be compared line by line):
//! - Each side registers a receive buffer, splits it in halves, and tells
//!   the peer about one half in the connection data; the peer RDMA
//!   WRITEs into it *with immediate*, the immediate saying how many bytes
//!   ([`MsgOp::Data`]). Every such WRITE consumes one (empty) receive.
//! - As the reader frees half a buffer it hands the half back with an
//!   RDMA WRITE (with immediate [`MsgOp::Sgl`]) of a fresh [`RsSge`] into
//!   the writer's small *target SGL* array (two entries used in turn); the
//!   immediate also carries the new message limit, i.e. receive credits:
//!   the writer may have at most that many DATA writes outstanding.
//! - Control messages (credits, shutdown, disconnect) are limited to
//!   [`QP_CTRL_SIZE`] in flight, which are kept out of the data's send
//!   queue share.
//! - Shutdown is in band: [`CTRL_SHUTDOWN`] (no more writes from me) or
//!   [`CTRL_DISCONNECT`], then the CM's DREQ.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::cm::{CmId, ConnParam, EventChannel, PortSpace, RdmaCmEvent};
use crate::{
    AccessFlags, Cq, Mr, NotifyKind, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendData, SendOp,
    SendWr, WcStatus,
};

use super::wire::*;
use super::{RsError, RsOptions};

mod iomap;

use iomap::Mapping;

/// The send buffer space below which a writer waits (`RS_SNDLOWAT`).
const SNDLOWAT: u32 = 2048;
/// The first write of a large send, doubling up to [`MAX_TRANSFER`], so
/// the first bytes leave early (`RS_OLAP_START_SIZE`).
const OLAP_START_SIZE: u32 = 2048;
const MAX_TRANSFER: u32 = 65536;
/// Entries in the target SGL the peer writes buffer updates into.
const SGL_SIZE: u32 = 2;
/// Control messages allowed in flight (`RS_QP_CTRL_SIZE`).
pub const QP_CTRL_SIZE: u32 = 4;
/// Marks receive work requests in `wr_id` (as librdmacm does).
const RECV_FLAG: u64 = 1 << 63;
/// How long a blocked call sleeps on the CQ before it looks again (at the
/// CM's events, and at a completion another thread may have taken).
const WAIT_SLICE: Duration = Duration::from_millis(20);
/// Connection setup's bound (address, route, REQ to ESTABLISHED).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which half of the stream [`RStream::shutdown`] closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    Read,
    Write,
    Both,
}

/// The verbs objects of one connection.
struct Resources {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    /// Send buffer: data is copied here, then written from here.
    smr: Mr,
    /// The target SGL the peer writes buffer updates into.
    target: Mr,
    /// Receive buffer: the peer writes data here.
    rmr: Mr,
}

/// Everything the protocol counts (librdmacm's names).
struct State {
    connected: bool,
    readable: bool,
    writable: bool,
    /// A WRITE failed: the connection reports EIO from then on.
    failed: bool,
    /// The verbs objects are gone ([`RStream::close`]).
    released: bool,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    // Send side.
    sqe_avail: u32,
    sbuf_bytes_avail: u32,
    /// Where the next copy into the send buffer goes.
    ssgl_off: u32,
    sseq_no: u16,
    sseq_comp: u16,
    target_sge: u32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    // The peer's target SGL (where our buffer updates go).
    remote_sgl: RsSge,
    remote_sge: u32,
    /// The peer's host order differs from ours: our updates to it swap.
    swap_sgl: bool,
    // Receive side.
    /// Lengths of the DATA writes received and not yet read.
    rmsg: VecDeque<u32>,
    rbuf_offset: u32,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rseq_no: u16,
    rseq_comp: u16,
    // The I/O map (`riomap`).
    /// Where our mappings go in the peer's I/O map (its `length` entries).
    remote_iomap: RsSge,
    /// Entries our own I/O map has (the peer writes them).
    iomap_size: u32,
    /// Our mappings (`riomap`).
    maps: Vec<Mapping>,
}

impl State {
    fn new(o: &RsOptions) -> State {
        State {
            connected: false,
            readable: false,
            writable: false,
            failed: false,
            released: false,
            sq_size: o.sq_size,
            rq_size: o.rq_size,
            sq_inline: o.sq_inline,
            sbuf_size: o.sbuf_size,
            rbuf_size: o.rbuf_size,
            sqe_avail: o.sq_size - QP_CTRL_SIZE,
            sbuf_bytes_avail: o.sbuf_size,
            ssgl_off: 0,
            sseq_no: 0,
            sseq_comp: 0,
            target_sge: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            remote_sgl: RsSge::default(),
            remote_sge: 1,
            swap_sgl: false,
            rmsg: VecDeque::new(),
            rbuf_offset: 0,
            rbuf_bytes_avail: o.rbuf_size >> 1,
            rbuf_free_offset: o.rbuf_size >> 1,
            rseq_no: 0,
            rseq_comp: (o.rq_size >> 1) as u16,
            remote_iomap: RsSge::default(),
            iomap_size: o.iomap_size,
            maps: Vec::new(),
        }
    }

    fn disconnected(&mut self) {
        self.connected = false;
        self.readable = false;
        self.writable = false;
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn have_rdata(&self) -> bool {
        !self.rmsg.is_empty()
    }

    fn all_sends_done(&self) -> bool {
        !self.connected
            || self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) + self.sqe_avail == self.sq_size
    }

    /// Half the receive buffer is free, or the peer is half way through
    /// its message credits: time to give both back.
    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= self.rbuf_size >> 1
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.connected
    }
}

/// A connected stream rsocket.
pub struct RStream {
    id: CmId,
    channel: EventChannel,
    res: Resources,
    st: Mutex<State>,
}

impl RStream {
    /// `rconnect`: resolves `dst` (from `src` if bound), connects with
    /// the connection data in the REQ and takes the peer's from the REP.
    pub fn connect(
        src: Option<SocketAddr>,
        dst: SocketAddr,
        opts: &RsOptions,
    ) -> Result<RStream, RsError> {
        let opts = &opts.normalized();
        let channel = EventChannel::new();
        let id = CmId::new(&channel, PortSpace::Tcp)?;
        let set_up = (|| {
            if let Some(s) = src {
                id.bind_addr(s)?;
            }
            id.resolve_addr(src, dst, Duration::from_secs(2))?;
            match channel.get_event_timeout(CONNECT_TIMEOUT) {
                Some(RdmaCmEvent::AddrResolved { .. }) => {}
                _ => return Err(RsError::Unreachable),
            }
            id.resolve_route(Duration::from_secs(2))?;
            match channel.get_event_timeout(CONNECT_TIMEOUT) {
                Some(RdmaCmEvent::RouteResolved { .. }) => {}
                _ => return Err(RsError::Unreachable),
            }
            let opts = fit_to_device(&id, opts)?;
            Ok((Resources::create(&id, &opts)?, opts))
        })();
        let (res, opts) = match set_up {
            Ok(r) => r,
            Err(e) => {
                let _ = id.destroy();
                return Err(e);
            }
        };
        let s = RStream::new(id, channel, res, &opts);
        let param = conn_param(s.local_conn_data());
        if let Err(e) = s.id.connect(&param) {
            s.release();
            return Err(e.into());
        }
        match s.channel.get_event_timeout(CONNECT_TIMEOUT) {
            Some(RdmaCmEvent::Established { private_data, .. }) => {
                match ConnData::parse(&private_data).filter(|c| c.version == VERSION) {
                    Some(c) => {
                        s.established(&c)?;
                        Ok(s)
                    }
                    None => {
                        s.release();
                        Err(RsError::BadConnData)
                    }
                }
            }
            Some(RdmaCmEvent::Rejected { .. }) => {
                s.release();
                Err(RsError::Refused)
            }
            _ => {
                s.release();
                Err(RsError::Unreachable)
            }
        }
    }

    /// The passive side of a CONNECT_REQUEST: checks the peer's
    /// connection data (a REQ without it is rejected, as librdmacm does),
    /// builds the QP and buffers, accepts with ours and waits for the
    /// connection to be established.
    pub(super) fn accept_request(
        id: CmId,
        private_data: &[u8],
        opts: &RsOptions,
    ) -> Result<RStream, RsError> {
        let opts = &opts.normalized();
        let Some(peer) = ConnData::parse(private_data).filter(|c| c.version == VERSION) else {
            let _ = id.reject(&[]);
            return Err(RsError::BadConnData);
        };
        // The connection's own events (ESTABLISHED, DISCONNECTED) go to
        // its own channel, not the listener's.
        let channel = EventChannel::new();
        id.migrate(&channel);
        let made = fit_to_device(&id, opts).and_then(|o| Ok((Resources::create(&id, &o)?, o)));
        let (res, opts) = match made {
            Ok(r) => r,
            Err(e) => {
                let _ = id.reject(&[]);
                let _ = id.destroy();
                return Err(e);
            }
        };
        let s = RStream::new(id, channel, res, &opts);
        s.save_conn_data(&mut s.lock(), &peer)?;
        if let Err(e) = s.id.accept(&conn_param(s.local_conn_data())) {
            s.release();
            return Err(e.into());
        }
        match s.channel.get_event_timeout(CONNECT_TIMEOUT) {
            Some(RdmaCmEvent::Established { .. }) => {
                let mut st = s.lock();
                st.connected = true;
                st.readable = true;
                st.writable = true;
                drop(st);
                Ok(s)
            }
            _ => {
                s.release();
                Err(RsError::Unreachable)
            }
        }
    }

    fn new(id: CmId, channel: EventChannel, res: Resources, opts: &RsOptions) -> RStream {
        RStream {
            id,
            channel,
            res,
            st: Mutex::new(State::new(opts)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `rs_format_conn_data`.
    fn local_conn_data(&self) -> ConnData {
        let st = self.lock();
        ConnData {
            version: VERSION,
            flags: FLAG_IOMAP | if HOST_IS_NET { FLAG_NET } else { 0 },
            credits: st.rq_size as u16,
            target_iomap_size: value_to_scale(st.iomap_size),
            target_sgl: RsSge {
                addr: self.res.target.addr(),
                key: self.res.target.rkey(),
                length: SGL_SIZE,
            },
            data_buf: RsSge {
                addr: self.res.rmr.addr(),
                key: self.res.rmr.rkey(),
                length: st.rbuf_size >> 1,
            },
        }
    }

    /// `rs_save_conn_data`: where to write buffer updates, the first
    /// half-buffer to write data into, and the initial credits.
    fn save_conn_data(&self, st: &mut State, c: &ConnData) -> Result<(), RsError> {
        st.remote_sgl = c.target_sgl;
        st.remote_sge = 1;
        st.swap_sgl = (c.flags & FLAG_NET != 0) != HOST_IS_NET;
        if c.flags & FLAG_IOMAP != 0 {
            // The peer's I/O map follows its target SGL, under its key.
            st.remote_iomap = RsSge {
                addr: c
                    .target_sgl
                    .addr
                    .wrapping_add(u64::from(c.target_sgl.length) * SGE_LEN as u64),
                key: c.target_sgl.key,
                length: scale_to_value(c.target_iomap_size),
            };
        }
        self.set_target(0, c.data_buf)?;
        st.sseq_comp = c.credits;
        Ok(())
    }

    fn established(&self, c: &ConnData) -> Result<(), RsError> {
        let mut st = self.lock();
        self.save_conn_data(&mut st, c)?;
        st.connected = true;
        st.readable = true;
        st.writable = true;
        Ok(())
    }

    /// Entry `i` of our target SGL (written by the peer in our order).
    fn target(&self, i: u32) -> Result<RsSge, RsError> {
        let mut b = [0u8; SGE_LEN];
        self.res.target.read(i as usize * SGE_LEN, &mut b)?;
        Ok(RsSge::from_bytes(&b, HOST_IS_NET))
    }

    fn set_target(&self, i: u32, s: RsSge) -> Result<(), RsError> {
        self.res
            .target
            .write(i as usize * SGE_LEN, &s.to_bytes(HOST_IS_NET))?;
        Ok(())
    }

    fn post_recv(&self) -> Result<(), RsError> {
        self.res.qp.post_recv(RecvWr {
            wr_id: RECV_FLAG,
            sg_list: Default::default(),
        })?;
        Ok(())
    }

    /// An RDMA WRITE with immediate `imm` (also the work request's ID,
    /// which is how its completion is accounted).
    fn post_write_msg(
        &self,
        data: SendData,
        imm: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), RsError> {
        self.res.qp.post_send(SendWr {
            wr_id: u64::from(imm),
            op: SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
            data,
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        })?;
        Ok(())
    }

    /// `rs_send_credits`: a fresh half-buffer for the peer if one is free,
    /// and in any case the new message limit.
    fn send_credits(&self, st: &mut State) -> Result<(), RsError> {
        st.ctrl_seqno = st.ctrl_seqno.wrapping_add(1);
        st.rseq_comp = st.rseq_no.wrapping_add((st.rq_size >> 1) as u16);
        let limit = u32::from(st.rseq_no).wrapping_add(st.rq_size);
        let imm = msg(MsgOp::Sgl, limit);
        if st.rbuf_bytes_avail >= st.rbuf_size >> 1 {
            let sge = RsSge {
                addr: self.res.rmr.addr() + u64::from(st.rbuf_free_offset),
                key: self.res.rmr.rkey(),
                length: st.rbuf_size >> 1,
            };
            let bytes = sge.to_bytes(HOST_IS_NET != st.swap_sgl);
            let at = st
                .remote_sgl
                .addr
                .wrapping_add(u64::from(st.remote_sge) * SGE_LEN as u64);
            self.post_write_msg(SendData::Inline(bytes.into()), imm, at, st.remote_sgl.key)?;
            st.rbuf_bytes_avail -= st.rbuf_size >> 1;
            st.rbuf_free_offset += st.rbuf_size >> 1;
            if st.rbuf_free_offset >= st.rbuf_size {
                st.rbuf_free_offset = 0;
            }
            st.remote_sge += 1;
            if st.remote_sge >= st.remote_sgl.length.max(1) {
                st.remote_sge = 0;
            }
        } else {
            // Credits only: a zero-length WRITE, no R_Key (IBTA C9-88).
            self.post_write_msg(SendData::Sges(Vec::new()), imm, 0, 0)?;
        }
        Ok(())
    }

    fn update_credits(&self, st: &mut State) -> Result<(), RsError> {
        if st.give_credits() {
            self.send_credits(st)?;
        }
        Ok(())
    }

    /// `rs_poll_cq`: takes every completion and accounts for it, then
    /// gives the receive queue back what was consumed.
    fn poll_cq(&self, st: &mut State) -> Result<(), RsError> {
        let mut consumed = 0;
        while let Some(wc) = self.res.cq.poll_one()? {
            if wc.wr_id & RECV_FLAG != 0 {
                if wc.status != WcStatus::Success {
                    continue;
                }
                consumed += 1;
                let Some(imm) = wc.imm_data else { continue };
                match parse_msg(imm) {
                    (MsgOp::Sgl, limit) => st.sseq_comp = limit as u16,
                    (MsgOp::Ctrl, CTRL_DISCONNECT) => st.disconnected(),
                    (MsgOp::Ctrl, CTRL_SHUTDOWN) => {
                        if st.writable {
                            st.readable = false;
                        } else {
                            st.disconnected();
                        }
                    }
                    (MsgOp::Data, len) => st.rmsg.push_back(len),
                    // Keepalives, I/O map updates, reserved codes.
                    _ => {}
                }
            } else {
                let (op, data) = parse_msg(wc.wr_id as u32);
                match op {
                    MsgOp::Sgl => st.ctrl_max_seqno = st.ctrl_max_seqno.wrapping_add(1),
                    MsgOp::IomapSgl => {
                        st.sqe_avail += 1;
                        st.sbuf_bytes_avail += IOMAP_LEN as u32;
                    }
                    MsgOp::Ctrl => {
                        st.ctrl_max_seqno = st.ctrl_max_seqno.wrapping_add(1);
                        if data == CTRL_DISCONNECT {
                            st.disconnected();
                        }
                    }
                    _ => {
                        st.sqe_avail += 1;
                        st.sbuf_bytes_avail += data;
                    }
                }
                if wc.status != WcStatus::Success && st.connected {
                    tracing::debug!(status = ?wc.status, "rsocket: a write failed");
                    st.disconnected();
                    st.failed = true;
                }
            }
        }
        if st.connected {
            for _ in 0..consumed {
                self.post_recv()?;
            }
        }
        Ok(())
    }

    /// The CM's word on the connection: a DREQ (or the device going) ends
    /// it even if the peer never sent its in-band disconnect.
    fn poll_cm(&self, st: &mut State) {
        while let Some(ev) = self.channel.try_get_event() {
            if matches!(
                ev,
                RdmaCmEvent::Disconnected { .. } | RdmaCmEvent::DeviceRemoval { .. }
            ) {
                st.disconnected();
            }
        }
    }

    /// Makes progress until `test` holds (returning the state locked),
    /// or fails with WouldBlock when `nonblock`.
    fn wait(
        &self,
        nonblock: bool,
        test: impl Fn(&State) -> bool,
    ) -> Result<MutexGuard<'_, State>, RsError> {
        loop {
            let mut st = self.lock();
            self.update_credits(&mut st)?;
            self.poll_cq(&mut st)?;
            self.poll_cm(&mut st);
            if test(&st) {
                self.update_credits(&mut st)?;
                return Ok(st);
            }
            if st.failed {
                return Err(RsError::Io);
            }
            if nonblock {
                return Err(RsError::WouldBlock);
            }
            // Arm, then look once more: a completion between the last
            // poll and the arming would not raise an event.
            self.res.cq.req_notify(NotifyKind::NextCompletion)?;
            self.poll_cq(&mut st)?;
            if test(&st) {
                self.update_credits(&mut st)?;
                return Ok(st);
            }
            self.update_credits(&mut st)?;
            drop(st);
            let _ = self.res.cq.wait(Some(WAIT_SLICE));
        }
    }

    fn can_send(&self, st: &State) -> bool {
        st.sqe_avail > 0
            && st.sbuf_bytes_avail >= SNDLOWAT
            && st.sseq_no != st.sseq_comp
            && self.target(st.target_sge).is_ok_and(|t| t.length != 0)
    }

    /// `rsend`: copies `buf` out in writes of growing size as buffer
    /// space and credits allow; returns how much went (all of it unless
    /// `nonblock` ran out of room or the connection ended part way).
    pub fn send(&self, buf: &[u8], nonblock: bool) -> Result<usize, RsError> {
        let mut off = 0usize;
        let mut olen = OLAP_START_SIZE;
        let mut st = self.lock();
        // Shut down for writing, by us or by the peer's disconnect (TCP's
        // EPIPE either way).
        if !st.writable {
            return Err(RsError::Pipe);
        }
        if st.iomap_pending_any() {
            drop(st);
            st = self.send_iomaps(nonblock)?;
        }
        while off < buf.len() {
            st = match self.room_to_send(st, nonblock, off) {
                Ok(g) => g,
                Err(r) => return r,
            };
            let mut xfer = next_size(&mut olen, buf.len() - off);
            let target = self.target(st.target_sge)?;
            xfer = xfer.min(st.sbuf_bytes_avail).min(target.length);
            self.write_data(&mut st, &buf[off..off + xfer as usize], target)?;
            off += xfer as usize;
        }
        Ok(off)
    }

    /// Waits (unless `nonblock`) until a write may go. `Err` holds what
    /// the send returns instead: the `sent` bytes, or why none went.
    #[allow(clippy::type_complexity)]
    fn room_to_send<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        nonblock: bool,
        sent: usize,
    ) -> Result<MutexGuard<'a, State>, Result<usize, RsError>> {
        if self.can_send(&st) {
            return Ok(st);
        }
        drop(st);
        let st = match self.wait(nonblock, |s| self.can_send(s) || !s.writable) {
            Ok(g) => g,
            Err(_) if sent > 0 => return Err(Ok(sent)),
            Err(e) => return Err(Err(e)),
        };
        if !st.writable {
            return Err(if sent > 0 {
                Ok(sent)
            } else {
                Err(RsError::Reset)
            });
        }
        Ok(st)
    }

    /// `rs_write_data`: one DATA write into the peer's current target.
    fn write_data(&self, st: &mut State, bytes: &[u8], mut target: RsSge) -> Result<(), RsError> {
        let len = bytes.len() as u32;
        let data = self.stage(st, bytes)?;
        st.sseq_no = st.sseq_no.wrapping_add(1);
        st.sqe_avail -= 1;
        st.sbuf_bytes_avail -= len;
        let (addr, rkey) = (target.addr, target.key);
        // The peer wrote this entry: any address, which its R_Key check
        // judges, so the arithmetic wraps rather than panics.
        target.addr = target.addr.wrapping_add(u64::from(len));
        target.length -= len;
        self.set_target(st.target_sge, target)?;
        if target.length == 0 {
            st.target_sge = (st.target_sge + 1) % SGL_SIZE;
        }
        self.post_write_msg(data, msg(MsgOp::Data, len), addr, rkey)
    }

    /// What a write sends: inline if small, else copied into the send
    /// buffer at its running offset, in two pieces where it wraps.
    fn stage(&self, st: &mut State, bytes: &[u8]) -> Result<SendData, RsError> {
        let len = bytes.len() as u32;
        Ok(if len <= st.sq_inline {
            SendData::Inline(bytes.into())
        } else {
            let room = st.sbuf_size - st.ssgl_off;
            let smr = &self.res.smr;
            if len <= room {
                smr.write(st.ssgl_off as usize, bytes)?;
                let sge = smr.sge(st.ssgl_off as usize, len);
                st.ssgl_off = if len < room { st.ssgl_off + len } else { 0 };
                SendData::Sges(vec![sge])
            } else {
                let (a, b) = bytes.split_at(room as usize);
                smr.write(st.ssgl_off as usize, a)?;
                smr.write(0, b)?;
                let sges = vec![
                    smr.sge(st.ssgl_off as usize, room),
                    smr.sge(0, b.len() as u32),
                ];
                st.ssgl_off = b.len() as u32;
                SendData::Sges(sges)
            }
        })
    }

    /// `rrecv`: what has arrived, up to `buf.len()`; 0 at the end of the
    /// stream. `wait_all` waits for the whole buffer (MSG_WAITALL),
    /// `peek` leaves the bytes queued (MSG_PEEK).
    pub fn recv(
        &self,
        buf: &mut [u8],
        nonblock: bool,
        wait_all: bool,
        peek: bool,
    ) -> Result<usize, RsError> {
        let mut off = 0usize;
        loop {
            let mut st = self.lock();
            if !st.have_rdata() {
                drop(st);
                st = match self.wait(nonblock, |s| s.have_rdata() || !s.readable) {
                    Ok(g) => g,
                    Err(e) if off > 0 => {
                        let _ = e;
                        return Ok(off);
                    }
                    Err(e) => return Err(e),
                };
            }
            if peek {
                return self.peek(&st, buf);
            }
            while off < buf.len() && st.have_rdata() {
                let left = (buf.len() - off).min(u32::MAX as usize) as u32;
                let front = st.rmsg[0];
                let n = if left < front {
                    st.rmsg[0] -= left;
                    left
                } else {
                    st.rseq_no = st.rseq_no.wrapping_add(1);
                    st.rmsg.pop_front();
                    front
                };
                let at = st.rbuf_offset;
                st.rbuf_offset =
                    self.copy_out(st.rbuf_size, at, &mut buf[off..off + n as usize])?;
                st.rbuf_bytes_avail += n;
                off += n as usize;
            }
            self.update_credits(&mut st)?;
            if !(wait_all && off < buf.len() && st.readable) {
                return Ok(off);
            }
        }
    }

    /// Copies from the receive buffer at `at`, wrapping at its end;
    /// returns the offset after.
    fn copy_out(&self, rbuf_size: u32, at: u32, dst: &mut [u8]) -> Result<u32, RsError> {
        let n = dst.len() as u32;
        let first = n.min(rbuf_size.saturating_sub(at));
        self.res.rmr.read(at as usize, &mut dst[..first as usize])?;
        if first < n {
            self.res.rmr.read(0, &mut dst[first as usize..])?;
            Ok(n - first)
        } else {
            Ok(at + n)
        }
    }

    fn peek(&self, st: &State, buf: &mut [u8]) -> Result<usize, RsError> {
        let mut off = 0usize;
        let mut at = st.rbuf_offset;
        for &len in &st.rmsg {
            if off == buf.len() {
                break;
            }
            let n = (len as usize).min(buf.len() - off);
            at = self.copy_out(st.rbuf_size, at, &mut buf[off..off + n])?;
            off += n;
        }
        Ok(off)
    }

    /// `rshutdown`: the in-band control message for `how`, then, once the
    /// connection is down both ways, the CM's disconnect.
    pub fn shutdown(&self, how: Shutdown) -> Result<(), RsError> {
        let mut st = self.lock();
        if st.connected {
            let ctrl = match how {
                Shutdown::Both => {
                    st.readable = false;
                    st.writable = false;
                    CTRL_DISCONNECT
                }
                Shutdown::Write => {
                    st.writable = false;
                    if st.readable {
                        CTRL_SHUTDOWN
                    } else {
                        CTRL_DISCONNECT
                    }
                }
                Shutdown::Read => {
                    st.readable = false;
                    if st.writable {
                        return Ok(());
                    }
                    CTRL_DISCONNECT
                }
            };
            if !st.ctrl_avail() {
                drop(st);
                st = self.wait(false, |s| s.ctrl_avail() || !s.connected)?;
            }
            if st.connected && st.ctrl_avail() {
                st.ctrl_seqno = st.ctrl_seqno.wrapping_add(1);
                self.post_write_msg(SendData::Sges(Vec::new()), msg(MsgOp::Ctrl, ctrl), 0, 0)?;
            }
        }
        if st.connected {
            drop(st);
            st = self.wait(false, |s| s.all_sends_done())?;
        }
        if !st.connected {
            drop(st);
            let _ = self.id.disconnect();
        }
        Ok(())
    }

    /// Calls `hook` whenever a completion or a CM event may have changed
    /// the stream's readiness, once [`RStream::arm`] asked for it (on the
    /// device's thread: it must only do something small, as writing an
    /// eventfd). `None` removes it.
    pub fn set_wakeup(&self, hook: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        self.res.cq.set_event_hook(hook.clone());
        self.channel.set_event_hook(hook);
    }

    /// Asks for the next completion to call the wakeup hook; check the
    /// readiness again afterwards, as one may have come in between.
    pub fn arm(&self) {
        let _ = self.res.cq.req_notify(NotifyKind::NextCompletion);
    }

    /// Readiness for `rpoll`: (bytes or the end to read, room to write,
    /// the connection is gone).
    pub fn readiness(&self) -> (bool, bool, bool) {
        let mut st = self.lock();
        let _ = self.update_credits(&mut st);
        let _ = self.poll_cq(&mut st);
        self.poll_cm(&mut st);
        let _ = self.update_credits(&mut st);
        let readable = st.have_rdata() || !st.readable;
        let writable = self.can_send(&st) || !st.writable;
        (readable, writable, !st.connected && !st.have_rdata())
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.remote_addr()
    }

    /// `rclose`: shuts down what is still open, then frees the QP, the
    /// buffers and the ID (once; later calls do nothing).
    pub fn close(&self) {
        if self.lock().connected {
            let _ = self.shutdown(Shutdown::Both);
        }
        self.release();
    }

    fn release(&self) {
        {
            let mut st = self.lock();
            if st.released {
                return;
            }
            st.released = true;
            st.disconnected();
        }
        let _ = self.id.disconnect();
        if let Some(qp) = self.id.detach_qp() {
            let _ = qp.destroy();
        } else {
            let _ = self.res.qp.destroy();
        }
        let _ = self.id.destroy();
        let _ = self.res.cq.destroy();
        for m in self.lock().maps.drain(..) {
            let _ = m.mr.dereg_in_place();
        }
        for mr in [&self.res.smr, &self.res.target, &self.res.rmr] {
            let _ = mr.dereg_in_place();
        }
        let _ = self.res.pd.dealloc();
    }
}

impl Resources {
    /// `rs_create_ep`: a CQ shared by both queues, the RC QP (every send
    /// signalled, two gather entries for a wrapping copy), the three
    /// buffers, and a full receive queue of empty receives.
    fn create(id: &CmId, opts: &RsOptions) -> Result<Resources, RsError> {
        let dev = id.device().ok_or(RsError::Unreachable)?;
        let (sq, rq) = (opts.sq_size, opts.rq_size);
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(sq + rq)?;
        let qp = id.create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: sq,
                    max_recv_wr: rq,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: opts.sq_inline,
                },
                sq_sig_all: true,
            },
        )?;
        let local = AccessFlags::LOCAL_WRITE;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let smr = pd.reg_mr_zeroed(opts.sbuf_size as usize, local)?;
        let target = pd.reg_mr_zeroed(
            SGL_SIZE as usize * SGE_LEN + opts.iomap_size as usize * IOMAP_LEN,
            remote,
        )?;
        let rmr = pd.reg_mr_zeroed(opts.rbuf_size as usize, remote)?;
        let r = Resources {
            pd,
            cq,
            qp,
            smr,
            target,
            rmr,
        };
        for _ in 0..rq {
            r.qp.post_recv(RecvWr {
                wr_id: RECV_FLAG,
                sg_list: Default::default(),
            })?;
        }
        Ok(r)
    }
}

/// `opts` with queues no deeper than the ID's device allows, as
/// librdmacm bounds them by the device's `max_qp_wr`.
fn fit_to_device(id: &CmId, opts: &RsOptions) -> Result<RsOptions, RsError> {
    let dev = id.device().ok_or(RsError::Unreachable)?;
    let max = dev.query_device()?.max_qp_wr;
    let mut o = opts.clone();
    o.sq_size = o.sq_size.min(max);
    o.rq_size = o.rq_size.min(max);
    Ok(o)
}

/// The next write's size for `left` bytes still to go: the whole rest,
/// or the growing overlap size, which doubles up to [`MAX_TRANSFER`]
/// (librdmacm's `olen`).
fn next_size(olen: &mut u32, left: usize) -> u32 {
    let left = left.min(u32::MAX as usize) as u32;
    if *olen < left {
        let x = *olen;
        if *olen < MAX_TRANSFER {
            *olen <<= 1;
        }
        x
    } else {
        left
    }
}

fn conn_param(c: ConnData) -> ConnParam {
    ConnParam {
        private_data: c.to_bytes().to_vec(),
        // No RDMA READs: the protocol only writes.
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}
