//! rsockets: stream sockets over RDMA, the protocol of librdmacm's
//! `rsocket()` family (`<rdma/rsocket.h>`), so that a program using
//! `rsocket`/`rconnect`/`rsend`/... over rxe talks to one using rdma-core's
//! librdmacm on any RDMA device.
//!
//! One job per file: [`wire`] (the connection data and the immediates),
//! [`stream`] (a connected stream: credits, buffers, shutdown), this file
//! (options, errors, the listener). The C calls are in the drop-in
//! library (`rxe-ibverbs`, `rdmacm/rsocket.rs`).
//!
//! # Decisions, with their sources
//! - **Port space TCP.** A stream rsocket's CM ID is `RDMA_PS_TCP`, so its
//!   service ID is the TCP port space's (librdmacm `rsocket()`).
//! - **No keepalive thread, no datagram rsockets.** `SOCK_DGRAM`
//!   rsockets are not offered; `SO_KEEPALIVE` is recorded but sends
//!   nothing, since the RC transport's own retries already find a dead
//!   peer. The I/O map (`riomap`/`riowrite`: RDMA WRITEs straight into
//!   memory the peer mapped) is, in `stream/iomap.rs`.
//! - **Defaults as librdmacm's** (`rsocket.c`: `def_sqsize`, `def_mem`,
//!   ...): 384-deep queues, 128 KiB buffers, 64 inline bytes; `SO_SNDBUF`
//!   and `SO_RCVBUF` double what they are given, as librdmacm does (and
//!   the kernel for TCP).
//! - **Progress inside the calls.** As in librdmacm, nothing runs in the
//!   background: `send`, `recv` and `rpoll`'s readiness check poll the CQ,
//!   hand back credits and read the CM's events.

pub mod stream;
pub mod wire;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::cm::{CmApiError, CmId, EventChannel, PortSpace, RdmaCmEvent};
use crate::error::VerbsError;

pub use stream::{RStream, Shutdown};

/// Why an rsocket call failed.
#[derive(Debug, thiserror::Error)]
pub enum RsError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Cm(#[from] CmApiError),
    #[error("the peer refused the connection")]
    Refused,
    #[error("the peer could not be reached")]
    Unreachable,
    #[error("the peer's connection data is not rsocket version 1")]
    BadConnData,
    #[error("the call would block")]
    WouldBlock,
    #[error("the connection was reset")]
    Reset,
    #[error("the stream is shut down for writing")]
    Pipe,
    #[error("a write to the peer failed")]
    Io,
    #[error("the peer's I/O map has no free entry")]
    NoIomapRoom,
    #[error("no such mapping")]
    NotMapped,
}

/// What a socket's options set before it connects (librdmacm's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RsOptions {
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub sq_inline: u32,
    pub sq_size: u32,
    pub rq_size: u32,
    /// Entries of the I/O map the peer may fill (`RDMA_IOMAPSIZE`; 0, as
    /// librdmacm's default: `riowrite` to this side is not possible).
    pub iomap_size: u32,
}

impl Default for RsOptions {
    fn default() -> RsOptions {
        RsOptions {
            sbuf_size: 1 << 17,
            rbuf_size: 1 << 17,
            sq_inline: 64,
            sq_size: 384,
            rq_size: 384,
            iomap_size: 0,
        }
    }
}

impl RsOptions {
    /// librdmacm's bounds: queues of 16 to 0xFFFE entries, a send buffer
    /// of at least two low-water marks; a receive buffer even, so that its
    /// halves are equal, and at least 4 KiB.
    pub fn normalized(&self) -> RsOptions {
        RsOptions {
            sbuf_size: self.sbuf_size.max(4096),
            rbuf_size: (self.rbuf_size.max(4096)) & !1,
            sq_inline: self.sq_inline.min(0xFFFE),
            sq_size: self.sq_size.clamp(16, 0xFFFE),
            rq_size: self.rq_size.clamp(16, 0xFFFE),
            iomap_size: wire::scale_to_value(wire::value_to_scale(self.iomap_size)),
        }
    }
}

/// A listening rsocket.
pub struct RListener {
    id: CmId,
    channel: EventChannel,
    /// Connection requests seen by a readiness check, not yet accepted.
    pending: Mutex<VecDeque<(CmId, Vec<u8>)>>,
}

impl RListener {
    /// `rbind` + `rlisten`.
    pub fn listen(addr: SocketAddr, backlog: i32) -> Result<RListener, RsError> {
        let channel = EventChannel::new();
        let id = CmId::new(&channel, PortSpace::Tcp)?;
        if let Err(e) = id.bind_addr(addr).and_then(|()| id.listen(backlog)) {
            let _ = id.destroy();
            return Err(e.into());
        }
        Ok(RListener {
            id,
            channel,
            pending: Mutex::new(VecDeque::new()),
        })
    }

    fn take_requests(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(ev) = self.channel.try_get_event() {
            if let RdmaCmEvent::ConnectRequest {
                id, private_data, ..
            } = ev
            {
                p.push_back((id, private_data));
            }
        }
    }

    /// Is a connection request waiting (`rpoll`'s POLLIN)?
    pub fn has_request(&self) -> bool {
        self.take_requests();
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// `raccept`: the next connection, set up with `opts`. A request whose
    /// setup fails is rejected and the next one is waited for.
    pub fn accept(&self, opts: &RsOptions, nonblock: bool) -> Result<RStream, RsError> {
        loop {
            self.take_requests();
            let next = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            let (id, data) = match next {
                Some(r) => r,
                None if nonblock => return Err(RsError::WouldBlock),
                None => match self.channel.get_event() {
                    RdmaCmEvent::ConnectRequest {
                        id, private_data, ..
                    } => (id, private_data),
                    _ => continue,
                },
            };
            match RStream::accept_request(id, &data, opts) {
                Ok(s) => return Ok(s),
                Err(e) => tracing::debug!("rsocket: a connection request failed: {e}"),
            }
        }
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// Calls `hook` when a CM event (a connection request) arrives; `None`
    /// removes it. As [`RStream::set_wakeup`].
    pub fn set_wakeup(&self, hook: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        self.channel.set_event_hook(hook);
    }

    /// `rclose`: refuses what is still waiting, stops listening.
    pub fn close(&self) {
        self.take_requests();
        for (id, _) in self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = id.reject(&[]);
            let _ = id.destroy();
        }
        let _ = self.id.destroy();
    }
}
