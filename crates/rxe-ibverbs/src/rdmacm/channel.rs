//! Event channels: `rdma_create_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`, `rdma_event_str`.
//!
//! A channel's `fd` is an eventfd (semaphore mode) counting the events
//! queued on its [`EventChannel`], so a program can poll it, make it
//! non-blocking, or block in `rdma_get_cm_event` on its own thread, as
//! rping does. Each count is taken before its event is popped, so a
//! count always has its event.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use rxe_verbs::cm::EventChannel;
use rxe_verbs_abi::rdmacm::{event as ev, rdma_cm_event, rdma_event_channel};

use super::event::{self as cevent, CEvent};
use super::fail;
use crate::async_events::{new_eventfd, signal_eventfd, wait_eventfd};
use crate::handles::{self, Kind};

/// An eventfd, closed when the channel and every hook that may still
/// signal it are gone (an event can be queued while the channel is
/// destroyed).
pub struct EventFd(pub c_int);

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our eventfd, closed once.
        unsafe { libc::close(self.0) };
    }
}

#[repr(C)]
pub struct CChannel {
    pub ch: rdma_event_channel,
    pub inner: EventChannel,
    fd: Arc<EventFd>,
}

impl CChannel {
    pub fn from_c(p: *const rdma_event_channel) -> Option<&'static CChannel> {
        // SAFETY: a live channel of ours; rdma_event_channel is first.
        handles::is(p, Kind::CmChannel).then(|| unsafe { &*p.cast::<CChannel>() })
    }

    pub fn c(&self) -> *mut rdma_event_channel {
        &self.ch as *const rdma_event_channel as *mut rdma_event_channel
    }

    /// A new channel, or the errno.
    pub fn create() -> Result<*mut CChannel, c_int> {
        super::devices::init()?;
        let fd = Arc::new(EventFd(
            new_eventfd().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?,
        ));
        let inner = EventChannel::new();
        let hook_fd = fd.clone();
        inner.set_event_hook(Some(Arc::new(move || signal_eventfd(hook_fd.0))));
        let p = Box::into_raw(Box::new(CChannel {
            ch: rdma_event_channel { fd: fd.0 },
            inner,
            fd,
        }));
        handles::insert(p, Kind::CmChannel);
        Ok(p)
    }

    /// Frees a channel of [`CChannel::create`].
    ///
    /// # Safety
    /// `p` is live and nothing uses it after this.
    pub unsafe fn destroy(p: *mut CChannel) {
        if !handles::remove(p, Kind::CmChannel) {
            return;
        }
        // SAFETY: live until now, Box::into_raw'd by create.
        let c = unsafe { Box::from_raw(p) };
        c.inner.set_event_hook(None);
        drop(c);
    }

    /// The next event, blocking unless the fd is non-blocking (then -1
    /// with EAGAIN, as librdmacm's read of its fd gives).
    pub fn next(&self) -> Result<*mut rdma_cm_event, c_int> {
        // Held for the whole call: a program may destroy the channel while
        // this thread waits in it (older rping never joins its CM thread).
        // The wait then goes on, on the open eventfd, as it would in
        // librdmacm, instead of touching freed memory.
        let (inner, fd) = (self.inner.clone(), self.fd.clone());
        loop {
            if !wait_eventfd(fd.0) {
                return Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO));
            }
            super::devices::hold_while_leaving();
            let Some(e) = inner.try_get_event() else {
                continue;
            };
            // An event of an ID destroyed meanwhile is dropped.
            if let Some(p) = cevent::to_c(e) {
                return Ok(p);
            }
        }
    }
}

export! {"RDMACM_1.0" fn rdma_create_event_channel() -> *mut rdma_event_channel, fail = std::ptr::null_mut(), {
    match CChannel::create() {
        // SAFETY: just made.
        Ok(p) => unsafe { (*p).c() },
        Err(e) => {
            crate::errno::set_errno(e);
            std::ptr::null_mut()
        }
    }
}}

export! {"RDMACM_1.0" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> (), fail = (), {
    if CChannel::from_c(channel).is_some() {
        // SAFETY: live; the caller destroys it.
        unsafe { CChannel::destroy(channel.cast()) };
    }
}}

export! {"RDMACM_1.0" fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int, fail = -1, {
    super::devices::hold_while_leaving();
    let Some(c) = CChannel::from_c(channel) else { return fail(libc::EINVAL) };
    if event.is_null() {
        return fail(libc::EINVAL);
    }
    match c.next() {
        Ok(p) => {
            // SAFETY: the caller's out pointer.
            unsafe { *event = p };
            0
        }
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int, fail = -1, {
    if !handles::remove(event, Kind::CmEvent) {
        return fail(libc::EINVAL);
    }
    // SAFETY: an event of ours (checked above), handed out once.
    let e = *unsafe { Box::from_raw(event.cast::<CEvent>()) };
    e.release();
    0
}}

/// The names librdmacm's `rdma_event_str` gives, by event number.
const EVENT_NAMES: [&std::ffi::CStr; 20] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
    c"RDMA_CM_EVENT_ADDRINFO_ERROR",
    c"RDMA_CM_EVENT_USER",
    c"RDMA_CM_EVENT_INTERNAL",
];

export! {"RDMACM_1.0" fn rdma_event_str(event: u32) -> *const c_char, fail = c"UNKNOWN EVENT".as_ptr(), {
    const _: () = assert!(ev::INTERNAL as usize + 1 == EVENT_NAMES.len());
    EVENT_NAMES
        .get(event as usize)
        .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_follow_the_enum() {
        // SAFETY: static strings.
        let name = |e| unsafe { std::ffi::CStr::from_ptr(rdma_event_str(e)) };
        assert_eq!(
            name(ev::ESTABLISHED).to_str(),
            Ok("RDMA_CM_EVENT_ESTABLISHED")
        );
        assert_eq!(
            name(ev::TIMEWAIT_EXIT).to_str(),
            Ok("RDMA_CM_EVENT_TIMEWAIT_EXIT")
        );
        assert_eq!(name(99).to_str(), Ok("UNKNOWN EVENT"));
    }
}
