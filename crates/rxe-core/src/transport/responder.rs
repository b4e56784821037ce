//! SKELETON, being replaced: the responder contract (see endpoint.rs).
use super::counters::Counters;
use super::memory::MemoryAccess;
use super::qp::{QpCommon, RecvMeta, Transmit};
use super::qp_attr::QpState;
use super::time::Instant;
use super::wr::{PostError, RecvWr};
use crate::wire::TransportPacket;

#[derive(Debug, Default)]
pub struct Responder {}

impl Responder {
    pub fn new() -> Responder {
        Responder {}
    }
    pub fn on_modify(&mut self, _common: &mut QpCommon, _from: QpState) {}
    pub fn post_recv(&mut self, _common: &QpCommon, _wr: RecvWr) -> Result<(), PostError> {
        Err(PostError::BadState)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn handle_request(
        &mut self,
        _common: &mut QpCommon,
        _counters: &mut Counters,
        _now: Instant,
        _meta: &RecvMeta,
        _pkey_index: u16,
        _pkt: &TransportPacket<'_>,
        _mem: &mut dyn MemoryAccess,
    ) {
    }
    pub fn poll_transmit(
        &mut self,
        _common: &mut QpCommon,
        _counters: &mut Counters,
        _mem: &mut dyn MemoryAccess,
        _buf: &mut [u8],
    ) -> Option<Transmit> {
        None
    }
    pub fn flush(&mut self, _common: &mut QpCommon) {}
}
