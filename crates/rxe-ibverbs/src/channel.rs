//! Completion channels (`ibv_create_comp_channel`, `ibv_get_cq_event`).
//!
//! A channel's `fd` is an eventfd (semaphore mode) with a queue of CQs
//! beside it: a CQ armed with `ibv_req_notify_cq` that gets a completion
//! pushes itself and adds one count ([`rxe_verbs::Cq::set_event_hook`]).
//! Applications may poll/epoll the fd and make it non-blocking. A queue
//! (not a pipe of pointers) lets destroying a CQ purge its undelivered
//! events, as the kernel does.
//!
//! A blocking `ibv_get_cq_event` with no event waiting first busy-polls
//! the devices of the channel's CQs for a short bounded time
//! ([`rxe_verbs::SpinWait`], `RXE_CQ_SPIN_US`), then sleeps in `read`:
//! without the spin every message cost two wake-ups (the driver thread's,
//! then the waiter's): `ib_send_lat -e` 72 µs typical, 15 µs with it;
//! `rxe_verbs::spin_wait` has the measurements. A non-blocking channel
//! never spins: its caller asked not to wait.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use rxe_verbs_abi::{ibv_comp_channel, ibv_context, ibv_cq};

use crate::async_events::{drain_eventfd, new_eventfd, signal_eventfd, wait_eventfd};
use crate::context::Context;
use crate::errno::set_errno;
use crate::handles::{self, Kind};

/// What the CQs' event hooks hold: the fd and the queue.
pub struct ChannelShared {
    pub fd: c_int,
    queue: Mutex<VecDeque<usize>>,
    /// The devices of the CQs on the channel (one entry per CQ), which a
    /// waiter busy-polls before it sleeps.
    devices: Mutex<Vec<rxe_verbs::Device>>,
    /// The waiters' spin, fitted to this channel's events.
    spin: rxe_verbs::spin_wait::AdaptiveSpin,
}

impl ChannelShared {
    pub fn new() -> std::io::Result<Arc<ChannelShared>> {
        Ok(Arc::new(ChannelShared {
            fd: new_eventfd()?,
            queue: Mutex::default(),
            devices: Mutex::default(),
            spin: rxe_verbs::spin_wait::AdaptiveSpin::new(),
        }))
    }

    /// An event of the CQ at `cq` (leaf lock; called from event hooks).
    /// The count is written under the queue's lock, so a spinning waiter
    /// that sees the entry finds the count too (unless another reader took
    /// it, who then pops the entry).
    pub fn push(&self, cq: usize) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(cq);
        signal_eventfd(self.fd);
    }

    /// A CQ on `dev` joined the channel.
    pub fn add_device(&self, dev: rxe_verbs::Device) {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dev);
    }

    /// A CQ on `dev` left the channel.
    pub fn remove_device(&self, dev: &rxe_verbs::Device) {
        let mut d = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = d.iter().position(|x| x == dev) {
            d.swap_remove(i);
        }
    }

    fn has_event(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Busy-polls the channel's devices until an event is queued or
    /// `spin`'s bound passes; returns whether one is queued.
    pub fn spin(&self, spin: rxe_verbs::SpinWait) -> bool {
        if self.has_event() {
            return true;
        }
        // Two CQs of one device need one turn per round, not two.
        let mut devs: Vec<rxe_verbs::Device> = Vec::new();
        for d in self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if !devs.contains(d) {
                devs.push(d.clone());
            }
        }
        spin.spin(&devs, || self.has_event())
    }

    /// One count of the eventfd, as `ibv_get_cq_event` takes it: with no
    /// event queued and a blocking fd, the channel's spin first (a
    /// non-blocking fd, O_NONBLOCK set by the application, is not spun
    /// on: its caller asked not to wait). False with read(2)'s errno.
    pub fn wait(&self) -> bool {
        if self.has_event() {
            return wait_eventfd(self.fd);
        }
        let spin = self.spin.current();
        if spin.bound().is_zero() {
            return wait_eventfd(self.fd);
        }
        // SAFETY: F_GETFL on our own eventfd, no pointers.
        let flags = unsafe { libc::fcntl(self.fd, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_NONBLOCK != 0 {
            return wait_eventfd(self.fd);
        }
        let start = std::time::Instant::now();
        let caught = self.spin(spin);
        if !caught {
            tracing::trace!("no completion event within the spin: sleeping");
        }
        let ok = wait_eventfd(self.fd);
        self.spin.record(spin, caught, start.elapsed());
        ok
    }

    /// Drops the undelivered events of the CQ at `cq`.
    pub fn purge(&self, cq: usize) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.retain(|c| *c != cq);
        let n = before - q.len();
        drop(q);
        drain_eventfd(self.fd, n);
    }

    pub fn pop(&self) -> Option<usize> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
}

impl Drop for ChannelShared {
    fn drop(&mut self) {
        // SAFETY: our eventfd, closed once, after the last hook is gone.
        unsafe { libc::close(self.fd) };
    }
}

#[repr(C)]
pub struct Channel {
    pub ch: ibv_comp_channel,
    pub shared: Arc<ChannelShared>,
    /// CQs that use the channel (mirrored in `ch.refcnt`).
    pub users: Mutex<c_int>,
}

impl Channel {
    pub fn from_ibv(p: *const ibv_comp_channel) -> Option<&'static Channel> {
        // SAFETY: a live Channel of ours; ibv_comp_channel is first.
        handles::is(p, Kind::Channel).then(|| unsafe { &*p.cast::<Channel>() })
    }

    pub fn add_user(&self, delta: c_int) {
        let mut u = self.users.lock().unwrap_or_else(|e| e.into_inner());
        *u += delta;
        let p = &self.ch.refcnt as *const c_int as *mut c_int;
        // SAFETY: the refcnt field of our own live struct; written under
        // `users`' lock, and C only reads it.
        unsafe { p.write_volatile(*u) };
    }
}

export! {"IBVERBS_1.0" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel, fail = std::ptr::null_mut(), {
    if Context::from_ibv(context).is_none() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let shared = match ChannelShared::new() {
        Ok(s) => s,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return std::ptr::null_mut();
        }
    };
    let c = Box::into_raw(Box::new(Channel {
        ch: ibv_comp_channel { context, fd: shared.fd, refcnt: 0 },
        shared,
        users: Mutex::new(0),
    }));
    handles::insert(c, Kind::Channel);
    c.cast()
}}

export! {"IBVERBS_1.0" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int, fail = libc::EIO, {
    let Some(c) = Channel::from_ibv(channel) else { return libc::EINVAL };
    // Refused while CQs use it, as rdma-core does.
    if *c.users.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
        return libc::EBUSY;
    }
    handles::remove(channel, Kind::Channel);
    // SAFETY: Box::into_raw'd by ibv_create_comp_channel, no longer live.
    drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
    0
}}

export! {"IBVERBS_1.1" fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int, fail = -1, {
    let Some(c) = Channel::from_ibv(channel) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        if !c.shared.wait() {
            // errno from read(): EAGAIN on a non-blocking fd.
            return -1;
        }
        let Some(p) = c.shared.pop() else {
            // Purged after the count was taken: wait for the next event.
            continue;
        };
        let Some(ctx_ptr) = crate::cq::comp_event_delivered(p) else { continue };
        // SAFETY: the caller's out pointers.
        unsafe {
            *cq = p as *mut ibv_cq;
            *cq_context = ctx_ptr;
        }
        return 0;
    }
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destroyed_cq_takes_its_undelivered_events_with_it() {
        let ch = ChannelShared::new().unwrap();
        ch.push(0x10);
        ch.push(0x20);
        ch.push(0x10);
        ch.purge(0x10);
        assert!(wait_eventfd(ch.fd));
        assert_eq!(ch.pop(), Some(0x20));
        // SAFETY: our own eventfd.
        unsafe { libc::fcntl(ch.fd, libc::F_SETFL, libc::O_NONBLOCK) };
        assert!(!wait_eventfd(ch.fd), "the purged events' counts are gone");
        assert_eq!(ch.pop(), None);
    }
}
