//! The device's engine: the transport endpoint of its port, the MR table it
//! reaches memory through, the GID table, and where each QP's completions
//! go. It is what the device's driver ([`crate::driver::Engine`]) drives,
//! under the device's lock.

use std::sync::mpsc;
use std::sync::Arc;

use rxe_core::transport::{
    AsyncEvent as CoreEvent, Endpoint, FastMap, Instant, RecvMeta, Transmit, WorkCompletion,
    WorkQueue,
};
use rxe_core::Gid;

use crate::cq::{CqShared, Stored};
use crate::event::AsyncEvent;
use crate::mr_table::MrTable;

/// Where a QP's completions go.
#[derive(Debug)]
pub(crate) struct QpRoute {
    pub send_cq: Arc<CqShared>,
    pub recv_cq: Arc<CqShared>,
}

/// Object counts, for the device limits.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub pd: u32,
    pub ah: u32,
    pub cq: u32,
    pub qp: u32,
    pub srq: u32,
}

pub(crate) struct DeviceEngine {
    pub ep: Endpoint,
    pub mem: MrTable,
    pub routes: FastMap<u32, QpRoute>,
    pub counts: Counts,
    pub next_id: u32,
    /// Whether posts to busy RC QPs are corked (`Device::kick_corked`),
    /// and how many were since the engine's queue was last flushed (by a
    /// verb, the driver thread or a busy poll: `after_batch`).
    pub cork: bool,
    pub corked: u32,
    events: Option<mpsc::Sender<AsyncEvent>>,
    /// The CQs that completions of the batch being dispatched went to, and
    /// what each is owed once all are stored (kept to reuse its room).
    due: Vec<(Arc<CqShared>, Stored)>,
}

impl DeviceEngine {
    pub fn new(ep: Endpoint, events: Option<mpsc::Sender<AsyncEvent>>) -> DeviceEngine {
        DeviceEngine {
            ep,
            mem: MrTable::default(),
            routes: FastMap::default(),
            counts: Counts::default(),
            next_id: 1,
            cork: true,
            corked: 0,
            events,
            due: Vec::new(),
        }
    }

    pub fn alloc_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    pub fn raise(&self, ev: AsyncEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(ev);
        }
    }

    /// Drops the event sender, so that the event thread can end.
    pub fn close_events(&mut self) {
        self.events = None;
    }

    /// Moves the endpoint's completions to their CQs, then tells their
    /// waiters (all stored before any is told: `CqShared::store`), and its
    /// events to the handlers.
    pub fn dispatch(&mut self) {
        while let Some(wc) = self.ep.poll_completion() {
            self.deliver(wc);
        }
        let mut due = std::mem::take(&mut self.due);
        for (cq, stored) in due.drain(..) {
            cq.signal(stored);
            if stored == Stored::FirstOverrun {
                self.raise(AsyncEvent::CqErr { cq: cq.id });
            }
        }
        self.due = due;
        while let Some(ev) = self.ep.poll_event() {
            let ev = match ev {
                CoreEvent::CommEstablished { qpn } => AsyncEvent::CommEst { qp_num: qpn },
                CoreEvent::QpFatal { qpn } => AsyncEvent::QpFatal { qp_num: qpn },
                CoreEvent::SqDrained { qpn } => AsyncEvent::SqDrained { qp_num: qpn },
                CoreEvent::LastWqeReached { qpn } => AsyncEvent::QpLastWqeReached { qp_num: qpn },
                CoreEvent::SrqLimitReached { srqn } => AsyncEvent::SrqLimitReached { srq: srqn },
                CoreEvent::PathMigrated { qpn } => AsyncEvent::PathMig { qp_num: qpn },
                CoreEvent::PathMigError { qpn } => AsyncEvent::PathMigErr { qp_num: qpn },
            };
            self.raise(ev);
        }
    }

    fn deliver(&mut self, wc: WorkCompletion) {
        let Some(route) = self.routes.get(&wc.qp_num) else {
            // The QP was destroyed: its work is gone, as ibv_destroy_qp says.
            return;
        };
        let cq = match wc.queue {
            WorkQueue::Send => &route.send_cq,
            WorkQueue::Recv => &route.recv_cq,
        };
        let stored = cq.store(wc, wc.solicited);
        if stored == Stored::Quiet {
            return;
        }
        match self.due.iter_mut().find(|(c, _)| Arc::ptr_eq(c, cq)) {
            Some((_, s)) => *s = s.merge(stored),
            None => self.due.push((cq.clone(), stored)),
        }
    }

    /// The port's GID table, which the endpoint holds (it checks a
    /// connected QP's packets against it); an empty slot is `None` (a
    /// removed address leaves a hole so that the other indexes stay put, as
    /// in the kernel).
    pub fn gids(&self) -> &[Option<Gid>] {
        self.ep.gid_table()
    }

    pub fn gid(&self, index: u8) -> Option<Gid> {
        self.gids().get(index as usize).copied().flatten()
    }
}

impl crate::driver::Engine for DeviceEngine {
    fn handle(&mut self, now: Instant, meta: &RecvMeta, packet: &[u8]) {
        self.ep.handle(now, meta, packet, &mut self.mem);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.ep.poll_transmit(now, &mut self.mem, buf)
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.ep.handle_timeout(now);
    }

    fn source_gid(&self, sgid_index: u8) -> Option<Gid> {
        self.gid(sgid_index)
    }

    fn after_batch(&mut self) {
        // The corked packets have left (or wait for the socket, which
        // wakes the driver): the next corked post starts a new batch, with
        // its own deadline (`Device::kick_corked`). A receive without a
        // flush ends here too; starting a batch early only costs a clock
        // read.
        self.corked = 0;
        self.dispatch();
    }
}
