//! Requests that came before their listener (`LISTEN_GRACE`): a REQ or
//! SIDR_REQ for a ServiceID nobody listens on waits a moment for a
//! listener before it is refused. Pure bookkeeping on the engine clock,
//! so that the policy is tested without threads or sockets; the agent
//! parks, asks what is due after every turn, and acts.
//!
//! Why hold them at all: programs that connect twice in a row (perftest's
//! `-R`: a control connection, then the test's) make the second request
//! the moment the first is up, while the server only listens again then;
//! the kernel's CM refuses such a REQ at once and the client gives up.
//! Holding it is within the protocol: the requester waits the REQ's Remote
//! CM Response Timeout (about 4 s from librdmacm) before it even resends
//! (IBTA 12.6.6, unchecked number).

use std::time::Duration;

use rxe_cm::CommId;
use rxe_core::transport::Instant;

/// How long a request waits for a listener.
pub(crate) const LISTEN_GRACE: Duration = Duration::from_millis(500);

/// A request that found no listener yet.
pub(crate) struct Parked {
    pub deadline: Instant,
    pub comm: CommId,
    pub from: rxe_cm::MadAddr,
    pub service_id: u64,
    pub private_data: Vec<u8>,
    pub req: Option<Box<rxe_cm::mad::ReqRepr>>,
}

/// What became of the parked requests at one look.
pub(crate) struct Due {
    /// A listener is there now: hand these to it.
    pub hand_over: Vec<Parked>,
    /// Waited their grace out: refuse these.
    pub refuse: Vec<Parked>,
}

/// The parked requests of one agent.
#[derive(Default)]
pub(crate) struct ParkedRequests {
    parked: Vec<Parked>,
}

impl ParkedRequests {
    /// Parks a request that arrived at `now` (a resent REQ of one already
    /// parked keeps its first deadline: its wait does not start again).
    pub fn park(
        &mut self,
        now: Instant,
        comm: CommId,
        from: rxe_cm::MadAddr,
        service_id: u64,
        private_data: &[u8],
        req: Option<&rxe_cm::mad::ReqRepr>,
    ) {
        if self.parked.iter().any(|p| p.comm == comm) {
            return;
        }
        self.parked.push(Parked {
            deadline: now.saturating_add(LISTEN_GRACE),
            comm,
            from,
            service_id,
            private_data: private_data.to_vec(),
            req: req.map(|r| Box::new(r.clone())),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// The earliest deadline, for the agent's sleep.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.deadline).min()
    }

    /// Takes out what is due at `now`: requests whose service
    /// `is_listening` now (handed over, even before their deadline), and
    /// those past their deadline without one (refused), in arrival order.
    pub fn take_due(&mut self, now: Instant, is_listening: impl Fn(u64) -> bool) -> Due {
        let mut due = Due {
            hand_over: Vec::new(),
            refuse: Vec::new(),
        };
        let mut keep = Vec::new();
        for p in self.parked.drain(..) {
            if is_listening(p.service_id) {
                due.hand_over.push(p);
            } else if p.deadline <= now {
                due.refuse.push(p);
            } else {
                keep.push(p);
            }
        }
        self.parked = keep;
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from() -> rxe_cm::MadAddr {
        rxe_cm::MadAddr::gsi(rxe_core::Gid::ZERO)
    }

    fn ms(n: u64) -> Instant {
        Instant::ZERO.saturating_add(Duration::from_millis(n))
    }

    fn comms(v: &[Parked]) -> Vec<CommId> {
        v.iter().map(|p| p.comm).collect()
    }

    #[test]
    fn a_request_waits_its_grace_then_is_refused() {
        let mut q = ParkedRequests::default();
        q.park(ms(0), CommId(1), from(), 0x106_0001, b"hdr", None);
        assert_eq!(q.next_deadline(), Some(ms(500)));
        let nobody = |_| false;
        let d = q.take_due(ms(499), nobody);
        assert!(d.hand_over.is_empty() && d.refuse.is_empty());
        let d = q.take_due(ms(500), nobody);
        assert_eq!(comms(&d.refuse), [CommId(1)]);
        assert_eq!(d.refuse[0].private_data, b"hdr");
        assert!(q.is_empty() && q.next_deadline().is_none());
    }

    #[test]
    fn a_listener_that_comes_in_time_gets_it_at_once() {
        let mut q = ParkedRequests::default();
        q.park(ms(0), CommId(1), from(), 7, &[], None);
        q.park(ms(100), CommId(2), from(), 8, &[], None);
        q.park(ms(200), CommId(3), from(), 7, &[], None);
        // Service 7 listens at 300 ms: both of its requests, in order;
        // service 8 waits on until its own deadline.
        let d = q.take_due(ms(300), |s| s == 7);
        assert_eq!(comms(&d.hand_over), [CommId(1), CommId(3)]);
        assert!(d.refuse.is_empty());
        assert_eq!(q.next_deadline(), Some(ms(600)));
        let d = q.take_due(ms(600), |s| s == 7);
        assert_eq!(comms(&d.refuse), [CommId(2)]);
    }

    #[test]
    fn a_resent_request_keeps_its_first_deadline() {
        let mut q = ParkedRequests::default();
        q.park(ms(0), CommId(5), from(), 9, &[], None);
        q.park(ms(400), CommId(5), from(), 9, &[], None);
        assert_eq!(q.next_deadline(), Some(ms(500)));
        assert_eq!(comms(&q.take_due(ms(500), |_| false).refuse), [CommId(5)]);
    }
}
