//! Asynchronous events (`ibv_get_async_event`, the kernel's
//! `ib_register_event_handler`): what happened to the port, a QP, a CQ or
//! an SRQ without a work request to report it.
//!
//! Events are delivered on a thread of the device's own, in the order they
//! happened, never while the device's lock is held: a handler may call any
//! verb.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// `enum ibv_event_type`, the events rxe raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The port has a usable address again (`IBV_EVENT_PORT_ACTIVE`).
    PortActive { port: u8 },
    /// The port lost its last usable address or its interface went down
    /// (`IBV_EVENT_PORT_ERR`).
    PortErr { port: u8 },
    /// An address was added to or removed from the GID table
    /// (`IBV_EVENT_GID_CHANGE`).
    GidChange { port: u8 },
    /// The first packet arrived at a QP in RTR (`IBV_EVENT_COMM_EST`).
    CommEst { qp_num: u32 },
    /// A QP went to the error state on its own (`IBV_EVENT_QP_FATAL`).
    QpFatal { qp_num: u32 },
    /// A QP attached to an SRQ went to ERR and will take no more receives
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached { qp_num: u32 },
    /// A QP in SQD has nothing outstanding (`IBV_EVENT_SQ_DRAINED`).
    SqDrained { qp_num: u32 },
    /// A connected QP moved to its alternate path on its own
    /// (`IBV_EVENT_PATH_MIG`; IBTA 17.2.8).
    PathMig { qp_num: u32 },
    /// A connected QP should have moved to its alternate path and could
    /// not (`IBV_EVENT_PATH_MIG_ERR`).
    PathMigErr { qp_num: u32 },
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqErr { cq: u32 },
    /// An SRQ's receive count fell below its armed limit
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached { srq: u32 },
    /// The device is going away (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
}

/// A handler registered with [`crate::Device::register_event_handler`].
pub type EventHandler = Arc<dyn Fn(&AsyncEvent) + Send + Sync>;

/// The handlers of one device and the thread that calls them.
pub(crate) struct EventHub {
    handlers: Arc<Mutex<Vec<(u64, EventHandler)>>>,
    next_id: Mutex<u64>,
    tx: Mutex<Option<mpsc::Sender<AsyncEvent>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EventHub {
    pub fn new(device_name: &str) -> std::io::Result<EventHub> {
        let handlers: Arc<Mutex<Vec<(u64, EventHandler)>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<AsyncEvent>();
        let h = handlers.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{device_name}-events"))
            .spawn(move || {
                for ev in rx {
                    tracing::debug!(?ev, "async event");
                    // Copy the list so that a handler may (un)register.
                    let list: Vec<EventHandler> =
                        h.lock().unwrap().iter().map(|(_, f)| f.clone()).collect();
                    for f in list {
                        f(&ev);
                    }
                }
            })?;
        Ok(EventHub {
            handlers,
            next_id: Mutex::new(1),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A sender that the engine keeps, to raise events while locked.
    pub fn sender(&self) -> Option<mpsc::Sender<AsyncEvent>> {
        self.tx.lock().unwrap().clone()
    }

    pub fn raise(&self, ev: AsyncEvent) {
        if let Some(tx) = self.tx.lock().unwrap().as_ref() {
            let _ = tx.send(ev);
        }
    }

    pub fn register(&self, f: EventHandler) -> u64 {
        let mut id = self.next_id.lock().unwrap();
        *id += 1;
        self.handlers.lock().unwrap().push((*id, f));
        *id
    }

    pub fn unregister(&self, id: u64) -> bool {
        let mut h = self.handlers.lock().unwrap();
        let before = h.len();
        h.retain(|(i, _)| *i != id);
        h.len() != before
    }

    /// Delivers what is queued, then stops the thread. Other senders (held
    /// by the engine) must be dropped first for the thread to end.
    pub fn shutdown(&self) {
        self.tx.lock().unwrap().take();
        if let Some(t) = self.thread.lock().unwrap().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
