//! What the driver drives: the transport engine of one port, behind the
//! narrow interface the driver needs. The device's `DeviceEngine`
//! implements it (the endpoint, the MR table, the GID table, completion
//! dispatch); [`EndpointEngine`] is the small implementation tests use,
//! and the driver's own tests script others.

use rxe_core::transport::{
    AsyncEvent, Endpoint, Instant, RecvMeta, Transmit, VecMemory, WorkCompletion,
};
use rxe_core::Gid;

/// A port's transport engine as the driver loop sees it.
pub trait Engine: Send {
    /// A received, ICRC-verified packet: `packet` is BTH..ICRC.
    fn handle(&mut self, now: Instant, meta: &RecvMeta, packet: &[u8]);
    /// The next packet to send, written into `buf` (BTH..ICRC, ICRC zeroed).
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit>;
    fn poll_timeout(&mut self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    /// The local GID at `sgid_index` of the port's GID table; `None` drops (and counts) the packet.
    fn source_gid(&self, sgid_index: u8) -> Option<Gid>;
    /// Called once after each batch of handle/handle_timeout/poll_transmit calls
    /// (the verbs layer dispatches completions and events here).
    fn after_batch(&mut self) {}
}

/// An [`Endpoint`] with its memory in a [`VecMemory`] and a GID table,
/// collecting completions and events as they come.
#[derive(Debug)]
pub struct EndpointEngine {
    pub endpoint: Endpoint,
    pub memory: VecMemory,
    /// The GID table: index `i` is `sgid_index` `i`.
    pub gids: Vec<Gid>,
    /// Every completion, in order, since the last `take`.
    pub completions: Vec<WorkCompletion>,
    pub events: Vec<AsyncEvent>,
}

impl EndpointEngine {
    pub fn new(endpoint: Endpoint, gids: Vec<Gid>) -> EndpointEngine {
        EndpointEngine {
            endpoint,
            memory: VecMemory::new(),
            gids,
            completions: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl Engine for EndpointEngine {
    fn handle(&mut self, now: Instant, meta: &RecvMeta, packet: &[u8]) {
        self.endpoint.handle(now, meta, packet, &mut self.memory);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.endpoint.poll_transmit(now, &mut self.memory, buf)
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.endpoint.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
    }

    fn source_gid(&self, sgid_index: u8) -> Option<Gid> {
        self.gids.get(usize::from(sgid_index)).copied()
    }

    fn after_batch(&mut self) {
        while let Some(wc) = self.endpoint.poll_completion() {
            self.completions.push(wc);
        }
        while let Some(ev) = self.endpoint.poll_event() {
            self.events.push(ev);
        }
    }
}
