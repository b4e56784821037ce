//! Asynchronous events on `context->async_fd` (`ibv_get_async_event`,
//! `ibv_ack_async_event`).
//!
//! The fd is an eventfd (a semaphore: one count per queued event) beside a
//! queue of records, so applications can `poll`/`epoll` it and set it
//! `O_NONBLOCK`. The device's event thread fills the queue (never under
//! the device lock); the C object an event is about (QP, CQ, SRQ) is found
//! in this context's maps under the same lock that destroying the object
//! takes to remove it and purge its queued events, so a destroyed object
//! never comes out of `ibv_get_async_event`.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};

use rxe_verbs::AsyncEvent;
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::{ibv_async_event, ibv_context};

use crate::errno::set_errno;

/// Counts of events handed out and acknowledged for one object; destroying
/// the object waits until they match (rdma-core does the same).
#[derive(Debug, Default)]
pub struct EventCount {
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl EventCount {
    pub fn delivered(&self) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
    }

    pub fn acked(&self, n: u64) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.1 = c.1.saturating_add(n);
        self.cv.notify_all();
    }

    /// Blocks until every delivered event is acknowledged.
    pub fn wait_all_acked(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        while c.1 < c.0 {
            c = self.cv.wait(c).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<(usize, u32)>,
    qps: HashMap<u32, usize>,
    cqs: HashMap<u32, usize>,
    srqs: HashMap<u32, usize>,
}

/// One context's async event queue and its fd.
pub struct AsyncQueue {
    pub fd: c_int,
    state: Mutex<State>,
}

/// Which object of the C API an event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    Qp,
    Cq,
    Srq,
    Port,
    Device,
}

pub fn element_of(event_type: u32) -> Element {
    match event_type {
        IBV_EVENT_CQ_ERR => Element::Cq,
        // SRQ_ERR (14) and SRQ_LIMIT_REACHED.
        14 | IBV_EVENT_SRQ_LIMIT_REACHED => Element::Srq,
        IBV_EVENT_DEVICE_FATAL => Element::Device,
        // PORT_ACTIVE, PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
        // CLIENT_REREGISTER, GID_CHANGE.
        9..=13 | 17 | IBV_EVENT_GID_CHANGE => Element::Port,
        _ => Element::Qp,
    }
}

/// The event type and the key of the object (QPN, CQ id, SRQN, or the
/// port number) of an rxe event.
pub fn ibv_event_of(e: &AsyncEvent) -> (u32, Element, u32) {
    match *e {
        AsyncEvent::PortActive { port } => (IBV_EVENT_PORT_ACTIVE, Element::Port, port.into()),
        AsyncEvent::PortErr { port } => (IBV_EVENT_PORT_ERR, Element::Port, port.into()),
        AsyncEvent::GidChange { port } => (IBV_EVENT_GID_CHANGE, Element::Port, port.into()),
        AsyncEvent::CommEst { qp_num } => (IBV_EVENT_COMM_EST, Element::Qp, qp_num),
        AsyncEvent::QpFatal { qp_num } => (IBV_EVENT_QP_FATAL, Element::Qp, qp_num),
        AsyncEvent::QpLastWqeReached { qp_num } => {
            (IBV_EVENT_QP_LAST_WQE_REACHED, Element::Qp, qp_num)
        }
        AsyncEvent::SqDrained { qp_num } => (IBV_EVENT_SQ_DRAINED, Element::Qp, qp_num),
        AsyncEvent::PathMig { qp_num } => (IBV_EVENT_PATH_MIG, Element::Qp, qp_num),
        AsyncEvent::PathMigErr { qp_num } => (IBV_EVENT_PATH_MIG_ERR, Element::Qp, qp_num),
        AsyncEvent::CqErr { cq } => (IBV_EVENT_CQ_ERR, Element::Cq, cq),
        AsyncEvent::SrqLimitReached { srq } => (IBV_EVENT_SRQ_LIMIT_REACHED, Element::Srq, srq),
        AsyncEvent::DeviceFatal => (IBV_EVENT_DEVICE_FATAL, Element::Device, 0),
    }
}

impl AsyncQueue {
    pub fn new() -> std::io::Result<Arc<AsyncQueue>> {
        Ok(Arc::new(AsyncQueue {
            fd: new_eventfd()?,
            state: Mutex::default(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, kind: Element, key: u32, obj: usize) {
        let mut s = self.lock();
        match kind {
            Element::Qp => s.qps.insert(key, obj),
            Element::Cq => s.cqs.insert(key, obj),
            Element::Srq => s.srqs.insert(key, obj),
            _ => None,
        };
    }

    /// Forgets an object and drops its undelivered events.
    pub fn remove(&self, kind: Element, key: u32, obj: usize) {
        let mut s = self.lock();
        match kind {
            Element::Qp => s.qps.remove(&key),
            Element::Cq => s.cqs.remove(&key),
            Element::Srq => s.srqs.remove(&key),
            _ => None,
        };
        let before = s.queue.len();
        s.queue.retain(|(o, _)| *o != obj);
        let purged = before - s.queue.len();
        drop(s);
        drain_eventfd(self.fd, purged);
    }

    /// Queues an event of the device (on the device's event thread).
    pub fn raise(&self, e: &AsyncEvent) {
        let (ty, kind, key) = ibv_event_of(e);
        let mut s = self.lock();
        let element = match kind {
            Element::Qp => s.qps.get(&key).copied(),
            Element::Cq => s.cqs.get(&key).copied(),
            Element::Srq => s.srqs.get(&key).copied(),
            Element::Port => Some(key as usize),
            Element::Device => Some(0),
        };
        let Some(element) = element else {
            // An object of another context, or one already destroyed.
            return;
        };
        s.queue.push_back((element, ty));
        drop(s);
        signal_eventfd(self.fd);
    }

    fn pop(&self) -> Option<(usize, u32)> {
        self.lock().queue.pop_front()
    }
}

impl Drop for AsyncQueue {
    fn drop(&mut self) {
        // SAFETY: our own eventfd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

pub fn new_eventfd() -> std::io::Result<c_int> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

pub fn signal_eventfd(fd: c_int) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a local to our eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Takes back up to `n` counts without blocking (events that were purged
/// before anyone read them).
pub fn drain_eventfd(fd: c_int, n: usize) {
    for _ in 0..n {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, zero timeout.
        if unsafe { libc::poll(&mut p, 1, 0) } != 1 {
            return;
        }
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a local; the fd is readable now, so
        // this does not block (a racing reader may take the count first:
        // then the read waits for the next event, as a reader would).
        unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    }
}

/// Reads one count (blocking unless the application set O_NONBLOCK);
/// false with read(2)'s errno otherwise. A signal ends the wait with
/// EINTR, as libibverbs' and librdmacm's own read() does: programs rely on
/// it (qperf ends a test with SIGALRM, installed without SA_RESTART, while
/// blocked in ibv_get_cq_event).
pub fn wait_eventfd(fd: c_int) -> bool {
    let mut v: u64 = 0;
    // SAFETY: reading 8 bytes into a local.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    n == 8
}

export! {"IBVERBS_1.1" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int, fail = -1, {
    let Some(ctx) = crate::context::Context::from_ibv(context) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        if !wait_eventfd(ctx.events.fd) {
            // errno from read (EAGAIN when non-blocking).
            return -1;
        }
        let Some((element, ty)) = ctx.events.pop() else {
            // The event was purged after its count was taken; wait for the
            // next one.
            continue;
        };
        match element_of(ty) {
            Element::Qp => crate::qp::event_delivered(element),
            Element::Cq => crate::cq::async_event_delivered(element),
            Element::Srq => crate::srq::event_delivered(element),
            _ => {}
        }
        // SAFETY: the caller passes a writable ibv_async_event.
        unsafe {
            (*event).element = element as *mut c_void;
            (*event).event_type = ty;
        }
        return 0;
    }
}}

export! {"IBVERBS_1.1" fn ibv_ack_async_event(event: *mut ibv_async_event) -> (), fail = (), {
    if event.is_null() {
        return;
    }
    // SAFETY: the caller passes the event it got from ibv_get_async_event.
    let (element, ty) = unsafe { ((*event).element as usize, (*event).event_type) };
    match element_of(ty) {
        Element::Qp => crate::qp::event_acked(element),
        Element::Cq => crate::cq::async_event_acked(element),
        Element::Srq => crate::srq::event_acked(element),
        _ => {}
    }
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_queue_purge_and_count_on_the_fd() {
        let q = AsyncQueue::new().unwrap();
        q.add(Element::Qp, 0x11, 0x1000);
        q.add(Element::Cq, 3, 0x2000);
        q.raise(&AsyncEvent::CommEst { qp_num: 0x11 });
        q.raise(&AsyncEvent::CqErr { cq: 3 });
        q.raise(&AsyncEvent::CommEst { qp_num: 0x99 }); // not ours: dropped
        q.raise(&AsyncEvent::PortActive { port: 1 });
        q.remove(Element::Cq, 3, 0x2000);
        assert!(wait_eventfd(q.fd));
        assert_eq!(q.pop(), Some((0x1000, IBV_EVENT_COMM_EST)));
        assert!(wait_eventfd(q.fd));
        assert_eq!(q.pop(), Some((1, IBV_EVENT_PORT_ACTIVE)));
        // The purged CQ event took its count with it.
        // SAFETY: setting our own eventfd non-blocking.
        unsafe { libc::fcntl(q.fd, libc::F_SETFL, libc::O_NONBLOCK) };
        assert!(!wait_eventfd(q.fd));
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN)
        );
    }

    extern "C" fn on_signal(_: c_int) {}

    /// A signal ends a blocked wait with EINTR instead of waiting on, as
    /// rdma-core's read() does (qperf ends its tests with SIGALRM).
    #[test]
    fn a_signal_ends_the_wait_with_eintr() {
        let fd = new_eventfd().expect("eventfd");
        // SAFETY: a handler that does nothing, without SA_RESTART, for a
        // signal only this test sends.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            // SAFETY: the calling thread's own id.
            tx.send(unsafe { libc::pthread_self() }).expect("send");
            let woke = wait_eventfd(fd);
            (woke, std::io::Error::last_os_error().raw_os_error())
        });
        let thread = rx.recv().expect("thread id");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !waiter.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the wait did not end");
            // SAFETY: signalling the waiting thread, alive until joined.
            unsafe { libc::pthread_kill(thread, libc::SIGUSR2) };
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(waiter.join().expect("join"), (false, Some(libc::EINTR)));
        // SAFETY: our own eventfd.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn elements_by_event_type() {
        assert_eq!(element_of(IBV_EVENT_QP_FATAL), Element::Qp);
        assert_eq!(element_of(IBV_EVENT_QP_LAST_WQE_REACHED), Element::Qp);
        assert_eq!(element_of(IBV_EVENT_CQ_ERR), Element::Cq);
        assert_eq!(element_of(IBV_EVENT_SRQ_LIMIT_REACHED), Element::Srq);
        assert_eq!(element_of(IBV_EVENT_GID_CHANGE), Element::Port);
        assert_eq!(element_of(IBV_EVENT_DEVICE_FATAL), Element::Device);
    }

    #[test]
    fn acks_release_waiters() {
        let c = Arc::new(EventCount::default());
        c.delivered();
        c.delivered();
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.wait_all_acked());
        c.acked(1);
        c.acked(1);
        t.join().unwrap();
    }
}
