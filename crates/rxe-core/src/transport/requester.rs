//! SKELETON, being replaced: the requester contract (see endpoint.rs).
use super::counters::Counters;
use super::memory::MemoryAccess;
use super::qp::{QpCommon, Transmit};
use super::qp_attr::QpState;
use super::time::Instant;
use super::wr::{PostError, SendWr};

#[derive(Debug, Default)]
pub struct Requester {}

impl Requester {
    pub fn new() -> Requester {
        Requester {}
    }
    pub fn on_modify(&mut self, _common: &mut QpCommon, _from: QpState) {}
    pub fn post_send(&mut self, _common: &QpCommon, _wr: SendWr) -> Result<(), PostError> {
        Err(PostError::BadState)
    }
    pub fn poll_transmit(
        &mut self,
        _common: &mut QpCommon,
        _counters: &mut Counters,
        _now: Instant,
        _mem: &mut dyn MemoryAccess,
        _buf: &mut [u8],
    ) -> Option<Transmit> {
        None
    }
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    pub fn handle_timeout(
        &mut self,
        _common: &mut QpCommon,
        _counters: &mut Counters,
        _now: Instant,
    ) {
    }
    pub fn flush(&mut self, _common: &mut QpCommon) {}
}
