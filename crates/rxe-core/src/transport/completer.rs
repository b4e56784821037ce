//! SKELETON, being replaced: the completer contract (see endpoint.rs).
use super::counters::Counters;
use super::memory::MemoryAccess;
use super::qp::QpCommon;
use super::requester::Requester;
use super::time::Instant;
use crate::wire::TransportPacket;

impl Requester {
    pub fn handle_response(
        &mut self,
        _common: &mut QpCommon,
        _counters: &mut Counters,
        _now: Instant,
        _pkt: &TransportPacket<'_>,
        _mem: &mut dyn MemoryAccess,
    ) {
    }
}
