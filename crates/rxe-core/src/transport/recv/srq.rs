//! Shared Receive Queues (IBTA 10.2.9; `ibv_create_srq(3)`,
//! `ibv_modify_srq(3)`, `ibv_post_srq_recv(3)`): one queue of receive work
//! requests from which the responders of several QPs take the receive for
//! each new incoming message.
//!
//! Rules and where they come from:
//!
//! - A posted receive is checked as on a QP's own receive queue (number of
//!   SGEs against the SRQ's `max_sge`, total length against
//!   [`MAX_MESSAGE`], depth against `max_wr`), but an SRQ has no state, so
//!   there is no state check (IBTA 10.2.9, not checked against the text;
//!   kernel rxe and libibverbs behave so).
//! - WQEs are taken in the order they were posted, by whichever QP needs one
//!   next (IBTA 10.2.9.x, not checked against the text).
//! - SRQ limit (IBTA 10.2.9.x and the SRQ Limit Reached event of 11.6.3,
//!   section numbers not checked against the text; `ibv_modify_srq(3)`): when the limit is armed (non-zero) and taking a
//!   WQE leaves fewer than `srq_limit` queued, the SRQ Limit Reached event
//!   is raised once and the limit disarms (becomes 0) until it is set
//!   again. Arming it while fewer are already queued raises nothing until a
//!   WQE is taken (the event is tied to a WQE leaving the queue).
//! - `srq_limit` may not exceed `max_wr` (`ibv_modify_srq(3)`: the limit
//!   is a number of WQEs in the queue), and `max_wr` may not shrink below
//!   what is queued now, nor below an armed limit.
//! - A receive given back (a UC message that lost a packet) goes back to
//!   the front, as if never taken. It may leave the queue one entry beyond
//!   `max_wr` for a moment per QP that gives one back, since the slot it
//!   left may have been filled by a post meanwhile; posting stays refused
//!   until the queue is below `max_wr` again.
//! - Memory: the L_Keys of an SRQ receive are checked when data lands, in
//!   the protection domain of the QP that took it (the QP's PD, as for its
//!   own receive queue; kernel rxe does the same). The SRQ's own `pd` is
//!   recorded and reported, but not used for access checks. libibverbs lets
//!   an SRQ and its QPs be in different PDs.

use std::collections::VecDeque;

use super::queue::{total_len, MAX_MESSAGE};
use crate::transport::error::{EndpointError, PostError};
use crate::transport::wr::RecvWr;

/// What an SRQ is created with (`ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqInit {
    /// The protection domain the SRQ is created in (recorded; memory checks
    /// use the PD of the QP that takes a receive, see the module doc).
    pub pd: u32,
    /// How many receives may be queued (at least 1).
    pub max_wr: u32,
    /// Scatter/gather entries per receive.
    pub max_sge: u32,
    /// The limit, armed when non-zero (at most `max_wr`).
    pub srq_limit: u32,
}

impl SrqInit {
    /// 128 receives of up to 4 SGEs, limit not armed.
    pub fn new(pd: u32) -> SrqInit {
        SrqInit {
            pd,
            max_wr: 128,
            max_sge: 4,
            srq_limit: 0,
        }
    }
}

/// What `query_srq` reports (`ibv_srq_attr`, plus the number queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    /// 0 when not armed (or after the limit event disarmed it).
    pub srq_limit: u32,
    /// Receives posted and not yet taken by a QP.
    pub queued: u32,
}

/// One shared receive queue.
#[derive(Debug)]
pub struct Srq {
    srqn: u32,
    pd: u32,
    max_wr: u32,
    max_sge: u32,
    limit: u32,
    wqes: VecDeque<RecvWr>,
    /// QPs created with this SRQ and not yet destroyed.
    attached: usize,
    /// The limit was reached by the last `pop` and nobody has taken the
    /// event yet.
    limit_reached: bool,
}

impl Srq {
    /// Checks `init` and makes the SRQ numbered `srqn`.
    pub fn new(srqn: u32, init: SrqInit) -> Result<Srq, EndpointError> {
        if init.max_wr == 0 {
            return Err(EndpointError::InvalidSrqAttr("max_wr must be at least 1"));
        }
        check_limit(init.srq_limit, init.max_wr)?;
        Ok(Srq {
            srqn,
            pd: init.pd,
            max_wr: init.max_wr,
            max_sge: init.max_sge,
            limit: init.srq_limit,
            wqes: VecDeque::new(),
            attached: 0,
            limit_reached: false,
        })
    }

    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// `ibv_query_srq`.
    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit,
            queued: u32::try_from(self.wqes.len()).unwrap_or(u32::MAX),
        }
    }

    /// `ibv_modify_srq`: a new depth (`IBV_SRQ_MAX_WR`) and/or a new limit
    /// (`IBV_SRQ_LIMIT`, 0 disarms). Checked as a whole; on error nothing
    /// changes.
    pub fn modify(
        &mut self,
        max_wr: Option<u32>,
        srq_limit: Option<u32>,
    ) -> Result<(), EndpointError> {
        let new_max = max_wr.unwrap_or(self.max_wr);
        let new_limit = srq_limit.unwrap_or(self.limit);
        if new_max == 0 {
            return Err(EndpointError::InvalidSrqAttr("max_wr must be at least 1"));
        }
        if (new_max as usize) < self.wqes.len() {
            return Err(EndpointError::SrqResize);
        }
        check_limit(new_limit, new_max)?;
        self.max_wr = new_max;
        self.limit = new_limit;
        if srq_limit.is_some() {
            // A new arming (or disarming) supersedes an event not yet taken.
            self.limit_reached = false;
        }
        Ok(())
    }

    /// `ibv_post_srq_recv` for one request.
    pub fn post(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if wr.sg_list.len() > self.max_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sg_list.len(),
                max: self.max_sge,
            });
        }
        let len = total_len(&wr.sg_list);
        if len > MAX_MESSAGE {
            return Err(PostError::MessageTooLarge {
                len,
                max: MAX_MESSAGE,
            });
        }
        if self.wqes.len() >= self.max_wr as usize {
            return Err(PostError::QueueFull { depth: self.max_wr });
        }
        self.wqes.push_back(wr);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.wqes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wqes.is_empty()
    }

    /// Takes the oldest receive for a QP's new message. If the limit is
    /// armed and fewer than `srq_limit` remain, the limit disarms and
    /// [`Srq::take_limit_reached`] reports it once.
    pub fn pop(&mut self) -> Option<RecvWr> {
        let wr = self.wqes.pop_front()?;
        if self.limit > 0 && self.wqes.len() < self.limit as usize {
            self.limit = 0;
            self.limit_reached = true;
        }
        Some(wr)
    }

    /// Puts a receive back at the front (a UC message that lost a packet
    /// gives its receive back). Never refused: the receive was accepted
    /// once already.
    pub fn push_front(&mut self, wr: RecvWr) {
        self.wqes.push_front(wr);
    }

    /// Whether a `pop` reached the limit since the last call; clears it.
    pub fn take_limit_reached(&mut self) -> bool {
        core::mem::take(&mut self.limit_reached)
    }

    /// QPs using this SRQ.
    pub fn attached(&self) -> usize {
        self.attached
    }

    pub(crate) fn attach(&mut self) {
        self.attached += 1;
    }

    pub(crate) fn detach(&mut self) {
        self.attached = self.attached.saturating_sub(1);
    }
}

/// `ibv_modify_srq(3)`: the limit counts WQEs in the queue, so it cannot be
/// above the queue's depth (kernel rxe refuses the same).
fn check_limit(srq_limit: u32, max_wr: u32) -> Result<(), EndpointError> {
    if srq_limit > max_wr {
        return Err(EndpointError::SrqLimitTooLarge { srq_limit, max_wr });
    }
    Ok(())
}
