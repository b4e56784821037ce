//! The driver thread: feeds received packets and time into the engine and
//! sends what it emits, then sleeps until a socket is readable (or, with
//! packets queued, writable), it is woken, or the engine's next deadline.
//!
//! Each turn: lock the engine; `receive`; `handle_timeout` if a deadline
//! passed; `flush`; read `poll_timeout`; unlock; sleep in mio's `Poll`
//! (epoll, edge-triggered). The engine's lock is never held while sleeping.
//!
//! Posts do not always pay for a wake-up: the thread publishes the
//! deadline it sleeps until, and [`DriverWaker::notify_deadline`] wakes it
//! only for an earlier one. The poster flushes its own packets (see
//! `NetPort::flush`), so the driver is needed only for what comes later:
//! responses, acknowledgements, timers.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use rxe_core::transport::Instant;

use crate::engine::Engine;
use crate::port::NetPort;
use crate::socket::RoceSocket;

const WAKE_TOKEN: Token = Token(usize::MAX);
/// The published deadline while the thread is awake (it will read the
/// engine's deadline again before sleeping).
const AWAKE: u64 = 0;
/// The published deadline while it sleeps without one.
const NO_DEADLINE: u64 = u64::MAX;
/// The shortest sleep when the engine's deadline is already due after a
/// turn (an engine that keeps a past deadline must not make this spin).
const MIN_SLEEP: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Shared {
    waker: Arc<Waker>,
    stop: AtomicBool,
    /// Nanoseconds of the deadline the thread sleeps until, `AWAKE` or
    /// `NO_DEADLINE`. Written by the thread under the engine lock.
    sleep_until: AtomicU64,
}

/// Wakes the driver thread; cheap to clone, usable from any thread.
#[derive(Debug, Clone)]
pub struct DriverWaker {
    shared: Arc<Shared>,
}

impl DriverWaker {
    /// Wakes the thread for one more turn.
    pub fn wake(&self) {
        if let Err(e) = self.shared.waker.wake() {
            tracing::warn!(error = %e, "waking the driver failed");
        }
    }

    /// Tells the thread about the engine's deadline after a change made
    /// outside it (a post that started a timer). Wakes it only if the
    /// deadline is earlier than the one it sleeps until; call it after the
    /// change, with the engine's `poll_timeout()`.
    pub fn notify_deadline(&self, deadline: Option<Instant>) {
        let Some(d) = deadline else { return };
        let d = d.as_nanos().max(AWAKE + 1);
        let prev = self.shared.sleep_until.fetch_min(d, Ordering::SeqCst);
        if d < prev {
            self.wake();
        }
    }
}

/// The driver thread of one port and engine.
#[derive(Debug)]
pub struct Driver {
    shared: Arc<Shared>,
    port: Arc<NetPort>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the thread ("rxe-driver").
    pub fn spawn<E: Engine + 'static>(
        port: Arc<NetPort>,
        engine: Arc<Mutex<E>>,
    ) -> io::Result<Driver> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN)?);
        let shared = Arc::new(Shared {
            waker: waker.clone(),
            stop: AtomicBool::new(false),
            sleep_until: AtomicU64::new(AWAKE),
        });
        port.set_waker(Some(waker));
        let (p, s) = (port.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("rxe-driver".into())
            .spawn(move || run(p, engine, poll, s));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                port.set_waker(None);
                return Err(e);
            }
        };
        Ok(Driver {
            shared,
            port,
            thread: Some(thread),
        })
    }

    pub fn waker(&self) -> DriverWaker {
        DriverWaker {
            shared: self.shared.clone(),
        }
    }

    /// Stops the thread and waits for it (also on drop). Do not hold the
    /// engine's lock while stopping: the thread may be waiting for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.waker.wake();
        if t.join().is_err() {
            tracing::error!("the driver thread panicked");
        }
        self.port.set_waker(None);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The sockets registered with the poll, and with which interest.
struct Registered {
    sockets: Vec<Arc<RoceSocket>>,
    generation: Option<u64>,
    writable: bool,
}

impl Registered {
    fn interest(writable: bool) -> Interest {
        if writable {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        }
    }

    /// Brings the registrations up to the port's sockets and the interest
    /// wanted. Holding the `Arc`s keeps each descriptor open until it is
    /// deregistered, so a removed address never leaves a stale (or reused)
    /// descriptor in the poll.
    fn update(&mut self, poll: &Poll, port: &NetPort, writable: bool) {
        let g = port.generation();
        if self.generation == Some(g) && self.writable == writable {
            return;
        }
        let reg = poll.registry();
        for s in self.sockets.drain(..) {
            let fd = s.as_raw_fd();
            if let Err(e) = reg.deregister(&mut SourceFd(&fd)) {
                tracing::debug!(error = %e, "deregister");
            }
        }
        self.sockets = port.sockets();
        for (i, s) in self.sockets.iter().enumerate() {
            let fd = s.as_raw_fd();
            if let Err(e) =
                reg.register(&mut SourceFd(&fd), Token(i), Registered::interest(writable))
            {
                tracing::error!(error = %e, local = %s.local_addr(), "cannot poll socket");
            }
        }
        self.generation = Some(g);
        self.writable = writable;
    }
}

fn run<E: Engine>(port: Arc<NetPort>, engine: Arc<Mutex<E>>, mut poll: Poll, shared: Arc<Shared>) {
    let clock = port.clock();
    let mut events = Events::with_capacity(64);
    let mut reg = Registered {
        sockets: Vec::new(),
        generation: None,
        writable: false,
    };
    tracing::debug!("driver started");
    while !shared.stop.load(Ordering::SeqCst) {
        let deadline = {
            let mut e = engine.lock().unwrap_or_else(PoisonError::into_inner);
            port.receive(&mut *e);
            let now = clock.now();
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            port.flush(&mut *e);
            let d = e.poll_timeout();
            // Published under the engine lock: a poster that changes the
            // deadline after this sees it and wakes the thread if needed.
            shared.sleep_until.store(
                d.map_or(NO_DEADLINE, |d| d.as_nanos().max(AWAKE + 1)),
                Ordering::SeqCst,
            );
            d
        };
        reg.update(&poll, &port, port.has_pending_sends());
        let timeout = if port.has_unread() {
            Some(Duration::ZERO)
        } else {
            deadline.map(|d| {
                let now = clock.now();
                if d <= now {
                    MIN_SLEEP
                } else {
                    d.saturating_since(now)
                }
            })
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "poll failed");
                std::thread::sleep(MIN_SLEEP);
            }
        }
        shared.sleep_until.store(AWAKE, Ordering::SeqCst);
    }
    let r = poll.registry();
    for s in reg.sockets.drain(..) {
        let _ = r.deregister(&mut SourceFd(&s.as_raw_fd()));
    }
    tracing::debug!("driver stopped");
}
