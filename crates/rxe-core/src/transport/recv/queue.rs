//! A QP's receive queue: the posted receive work requests in order, the
//! checks `ibv_post_recv` makes, and the scatter of incoming bytes into a
//! request's scatter/gather list.

use std::collections::VecDeque;

use crate::transport::error::PostError;
use crate::transport::memory::{Key, MemoryAccess};
use crate::transport::qp::{AccessFlags, QpCommon, QpState};
use crate::transport::wr::{RecvWr, Sge, WcStatus};

/// The largest message the IBTA allows, 2^31 bytes: a receive whose
/// scatter/gather list adds up to more is refused at post time (kernel rxe
/// refuses the same).
pub(super) const MAX_MESSAGE: u64 = 1 << 31;

/// Posted receive work requests, oldest first.
#[derive(Debug, Default)]
pub(super) struct RecvQueue {
    wqes: VecDeque<RecvWr>,
}

impl RecvQueue {
    /// `ibv_post_recv` for one request. A QP takes receives from INIT on
    /// (IBTA 10.3.1: in RESET nothing may be posted; in INIT receives may be
    /// posted but are not processed). In ERR the request is accepted and
    /// then flushed with WR_FLUSH_ERR, as kernel rxe and hardware do: the
    /// endpoint asks for the flush after the post.
    pub(super) fn post(&mut self, common: &QpCommon, wr: RecvWr) -> Result<(), PostError> {
        // A QP attached to an SRQ has no receive queue of its own
        // (`ibv_post_recv` on it fails; IBTA 10.2.9, not checked against
        // the text).
        if common.init.srq.is_some() {
            return Err(PostError::QpHasSrq);
        }
        if common.state() == QpState::Reset {
            return Err(PostError::BadState);
        }
        let max_sge = common.init.max_recv_sge;
        if wr.sg_list.len() > max_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sg_list.len(),
                max: max_sge,
            });
        }
        let len = total_len(&wr.sg_list);
        if len > MAX_MESSAGE {
            return Err(PostError::MessageTooLarge {
                len,
                max: MAX_MESSAGE,
            });
        }
        let depth = common.init.max_recv_wr;
        if self.wqes.len() >= depth as usize {
            return Err(PostError::QueueFull { depth });
        }
        self.wqes.push_back(wr);
        Ok(())
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.wqes.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.wqes.is_empty()
    }

    /// Takes the oldest request.
    pub(super) fn pop(&mut self) -> Option<RecvWr> {
        self.wqes.pop_front()
    }

    /// Puts a request back at the front (a UC message that lost a packet
    /// gives its receive back to the next message).
    pub(super) fn push_front(&mut self, wr: RecvWr) {
        self.wqes.push_front(wr);
    }

    /// Removes every request, oldest first.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = RecvWr> + '_ {
        self.wqes.drain(..)
    }
}

/// The bytes a scatter/gather list holds, without overflow (each length is
/// a `u32`, a list has at most `u32::MAX` entries).
pub(super) fn total_len(sges: &[Sge]) -> u64 {
    sges.iter()
        .fold(0u64, |a, s| a.saturating_add(u64::from(s.length)))
}

/// Copies `data` to byte `offset` of the message that `sges` receives,
/// checking each piece against its L_Key with LOCAL_WRITE in protection
/// domain `pd`. `LocLenErr` if the list is too short (nothing is written
/// then), `LocProtErr` if a key, PD, right or bound does not allow it.
pub(super) fn scatter(
    mem: &mut dyn MemoryAccess,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), WcStatus> {
    let end = offset
        .checked_add(data.len() as u64)
        .ok_or(WcStatus::LocLenErr)?;
    if end > total_len(sges) {
        return Err(WcStatus::LocLenErr);
    }
    let mut skip = offset;
    let mut rest = data;
    for sge in sges {
        if rest.is_empty() {
            break;
        }
        let len = u64::from(sge.length);
        if skip >= len {
            skip -= len;
            continue;
        }
        // room <= sge.length, a u32.
        let room = usize::try_from(len - skip).map_err(|_| WcStatus::LocLenErr)?;
        let n = room.min(rest.len());
        let va = sge.addr.checked_add(skip).ok_or(WcStatus::LocProtErr)?;
        let region = mem
            .check(
                Key::new(sge.lkey),
                pd,
                false,
                AccessFlags::LOCAL_WRITE,
                va,
                n,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        mem.write(&region, 0, &rest[..n])
            .map_err(|_| WcStatus::LocProtErr)?;
        rest = &rest[n..];
        skip = 0;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}
