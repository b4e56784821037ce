//! The rsocket calls (`<rdma/rsocket.h>`) over [`rxe_verbs::rsocket`]:
//! stream sockets over RC QPs in librdmacm's own protocol, so Debian's
//! `rstream` (and any program written to rsockets) runs over rxe and
//! talks to rdma-core's librdmacm on the other side.
//!
//! An rsocket's number is a real file descriptor (an eventfd this library
//! owns), so it never collides with the program's own descriptors, and
//! `rpoll` tells the two kinds apart by looking the number up. What is
//! not offered fails as librdmacm's absent features would:
//! `SOCK_DGRAM` rsockets (EPROTONOSUPPORT) and the `msghdr` calls
//! (ENOSYS, in [`super::unsupported`]). A non-blocking
//! `rconnect` completes before it returns (never EINPROGRESS), which a
//! program that polls for POLLOUT afterwards also handles.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rxe_verbs::rsocket::{RListener, RStream, RsError, RsOptions, Shutdown};

use super::{fail, sockaddr};

/// librdmacm's option level for its own options (`SOL_RDMA`).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;

enum Kind {
    /// Made, maybe bound, not yet listening or connected.
    Fresh {
        bound: Option<SocketAddr>,
    },
    Listening(Arc<RListener>),
    Stream(Arc<RStream>),
}

struct RSocket {
    /// The eventfd whose number is the socket's.
    fd: c_int,
    kind: Mutex<Kind>,
    opts: Mutex<RsOptions>,
    nonblock: AtomicBool,
    /// Options recorded for `rgetsockopt` (librdmacm acts on none of
    /// these over RoCE either, but for keepalives, which rxe's RC retries
    /// make moot).
    reuseaddr: AtomicBool,
    keepalive: AtomicBool,
    nodelay: AtomicBool,
    keepidle: Mutex<c_int>,
}

impl Drop for RSocket {
    /// The number is free again only when nothing uses the socket any
    /// more (an `rpoll` in another thread may still hold it after
    /// `rclose`), so the eventfd is never a stranger's by then.
    fn drop(&mut self) {
        // SAFETY: the eventfd this socket owned, closed once.
        unsafe { libc::close(self.fd) };
    }
}

static SOCKETS: Mutex<Option<HashMap<c_int, Arc<RSocket>>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<c_int, Arc<RSocket>>>> {
    SOCKETS.lock().unwrap_or_else(|e| e.into_inner())
}

fn lookup(fd: c_int) -> Option<Arc<RSocket>> {
    table().as_ref()?.get(&fd).cloned()
}

impl RSocket {
    fn kind(&self) -> MutexGuard<'_, Kind> {
        self.kind.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stream(&self) -> Result<Arc<RStream>, c_int> {
        match &*self.kind() {
            Kind::Stream(s) => Ok(s.clone()),
            _ => Err(libc::ENOTCONN),
        }
    }

    fn options(&self) -> RsOptions {
        self.opts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn nonblocking(&self, flags: c_int) -> bool {
        flags & libc::MSG_DONTWAIT != 0 || self.nonblock.load(Ordering::Relaxed)
    }
}

/// The errno a socket program expects for `e` (as a TCP socket's).
fn errno_of(e: &RsError) -> c_int {
    match e {
        RsError::Verbs(v) => crate::errno::errno_of(v),
        RsError::Cm(c) => super::errno_of(c),
        RsError::Refused => libc::ECONNREFUSED,
        RsError::Unreachable => libc::ETIMEDOUT,
        RsError::BadConnData => libc::ECONNREFUSED,
        RsError::WouldBlock => libc::EAGAIN,
        RsError::Reset => libc::ECONNRESET,
        RsError::Pipe => libc::EPIPE,
        RsError::Io => libc::EIO,
        RsError::NoIomapRoom => libc::ENOMEM,
        RsError::NotMapped => libc::EINVAL,
    }
}

fn fail_rs(e: &RsError) -> c_int {
    tracing::debug!(error = %e, "rsocket call failed");
    fail(errno_of(e))
}

fn fail_size(e: c_int) -> isize {
    fail(e);
    -1
}

/// The hook that makes an rsocket's eventfd readable: `rpoll` sleeps in
/// poll(2) on it instead of looking again and again.
fn wakeup(fd: c_int) -> Arc<dyn Fn() + Send + Sync> {
    Arc::new(move || {
        let one: u64 = 1;
        // SAFETY: 8 bytes from a local to our own eventfd, which outlives
        // the hook (rclose removes the hook before closing it).
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    })
}

/// Empties an rsocket's eventfd before it is checked again.
fn drain(fd: c_int) {
    let mut v: u64 = 0;
    // SAFETY: our own non-blocking eventfd, into a local.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// A new rsocket entry on a fresh eventfd: its number.
fn insert(kind: Kind, opts: RsOptions, nonblock: bool) -> Result<c_int, c_int> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EMFILE));
    }
    let s = Arc::new(RSocket {
        fd,
        kind: Mutex::new(kind),
        opts: Mutex::new(opts),
        nonblock: AtomicBool::new(nonblock),
        reuseaddr: AtomicBool::new(false),
        keepalive: AtomicBool::new(false),
        nodelay: AtomicBool::new(false),
        keepidle: Mutex::new(7200),
    });
    table().get_or_insert_with(HashMap::new).insert(fd, s);
    Ok(fd)
}

export! {"RDMACM_1.0" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int, fail = -1, {
    let _ = protocol;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return fail(libc::EAFNOSUPPORT);
    }
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    if base != libc::SOCK_STREAM {
        return fail(libc::EPROTONOSUPPORT);
    }
    if let Err(e) = super::devices::init() {
        return fail(e);
    }
    match insert(Kind::Fresh { bound: None }, RsOptions::default(), ty & libc::SOCK_NONBLOCK != 0) {
        Ok(fd) => fd,
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rbind(socket: c_int, addr: *const c_void, len: u32) -> c_int, fail = -1, {
    let _ = len;
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    // SAFETY: the caller's address, as bind(2) takes it.
    let a = match unsafe { sockaddr::read(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let mut k = s.kind();
    if let Kind::Fresh { bound: b @ None } = &mut *k {
        *b = Some(a);
        return 0;
    }
    fail(libc::EINVAL)
}}

export! {"RDMACM_1.0" fn rlisten(socket: c_int, backlog: c_int) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    let mut k = s.kind();
    match &*k {
        Kind::Listening(_) => 0,
        Kind::Fresh { bound: Some(a) } => match RListener::listen(*a, backlog) {
            Ok(l) => {
                l.set_wakeup(Some(wakeup(s.fd)));
                *k = Kind::Listening(Arc::new(l));
                0
            }
            Err(e) => fail_rs(&e),
        },
        Kind::Fresh { bound: None } => fail(libc::EINVAL),
        Kind::Stream(_) => fail(libc::EISCONN),
    }
}}

/// Writes `a` to the caller's `addr`/`len` pair, truncated as
/// getsockname(2) does.
///
/// # Safety
/// `addr` points to `*len` writable bytes; `len` is writable.
unsafe fn write_addr(a: SocketAddr, addr: *mut c_void, len: *mut u32) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let st = sockaddr::storage(&a);
    let full = sockaddr::len_of(&a);
    // SAFETY: the caller's length.
    let room = unsafe { *len };
    let n = room.min(full) as usize;
    // SAFETY: `n` bytes fit in the caller's buffer and in `st`.
    unsafe {
        std::ptr::copy_nonoverlapping(st.0.as_ptr(), addr.cast::<u8>(), n);
        *len = full;
    }
}

export! {"RDMACM_1.0" fn raccept(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    let l = match &*s.kind() {
        Kind::Listening(l) => l.clone(),
        _ => return fail(libc::EINVAL),
    };
    let opts = s.options();
    match l.accept(&opts, s.nonblock.load(Ordering::Relaxed)) {
        Ok(stream) => {
            let peer = stream.peer_addr();
            let stream = Arc::new(stream);
            match insert(Kind::Stream(stream.clone()), opts, false) {
                Ok(fd) => {
                    stream.set_wakeup(Some(wakeup(fd)));
                    if let Some(p) = peer {
                        // SAFETY: the caller's address buffer, as accept(2).
                        unsafe { write_addr(p, addr, len) };
                    }
                    fd
                }
                Err(e) => fail(e),
            }
        }
        Err(e) => fail_rs(&e),
    }
}}

export! {"RDMACM_1.0" fn rconnect(socket: c_int, addr: *const c_void, len: u32) -> c_int, fail = -1, {
    let _ = len;
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    // SAFETY: the caller's address, as connect(2) takes it.
    let dst = match unsafe { sockaddr::read(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let src = match &*s.kind() {
        Kind::Fresh { bound } => *bound,
        Kind::Stream(_) => return fail(libc::EISCONN),
        Kind::Listening(_) => return fail(libc::EINVAL),
    };
    // The kind's lock is not held while connecting: an rclose from
    // another thread still works.
    match RStream::connect(src, dst, &s.options()) {
        Ok(stream) => {
            stream.set_wakeup(Some(wakeup(s.fd)));
            *s.kind() = Kind::Stream(Arc::new(stream));
            0
        }
        Err(e) => fail_rs(&e),
    }
}}

/// The socket and stream a data call of `len` bytes works on; `None` for
/// nothing to do (0 bytes), or the errno: EBADF, ENOTCONN, EFAULT for a
/// NULL buffer.
#[allow(clippy::type_complexity)]
fn io_target(
    socket: c_int,
    null: bool,
    len: usize,
) -> Result<Option<(Arc<RSocket>, Arc<RStream>)>, c_int> {
    let s = lookup(socket).ok_or(libc::EBADF)?;
    let stream = s.stream()?;
    if len == 0 {
        return Ok(None);
    }
    if null {
        return Err(libc::EFAULT);
    }
    Ok(Some((s, stream)))
}

/// # Safety
/// `buf` is NULL with `len` 0, or points to `len` readable bytes.
unsafe fn send_bytes(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    let (s, stream) = match io_target(socket, buf.is_null(), len) {
        Ok(Some(t)) => t,
        Ok(None) => return 0,
        Err(e) => return fail_size(e),
    };
    // SAFETY: the caller's `len` bytes, as send(2) takes them.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    match stream.send(data, s.nonblocking(flags)) {
        Ok(n) => n as isize,
        Err(e) => {
            fail_rs(&e);
            -1
        }
    }
}

/// # Safety
/// `buf` is NULL with `len` 0, or points to `len` writable bytes.
unsafe fn recv_bytes(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    let (s, stream) = match io_target(socket, buf.is_null(), len) {
        Ok(Some(t)) => t,
        Ok(None) => return 0,
        Err(e) => return fail_size(e),
    };
    // SAFETY: the caller's `len` writable bytes, as recv(2) takes them.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    let (waitall, peek) = (flags & libc::MSG_WAITALL != 0, flags & libc::MSG_PEEK != 0);
    match stream.recv(out, s.nonblocking(flags), waitall, peek) {
        Ok(n) => n as isize,
        Err(e) => {
            fail_rs(&e);
            -1
        }
    }
}

export! {"RDMACM_1.0" fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize, fail = -1, {
    // SAFETY: forwarded as the caller gave it.
    unsafe { send_bytes(socket, buf, len, flags) }
}}

export! {"RDMACM_1.0" fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize, fail = -1, {
    // SAFETY: forwarded as the caller gave it.
    unsafe { send_bytes(socket, buf, count, 0) }
}}

export! {"RDMACM_1.0" fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dst: *const c_void, dlen: u32) -> isize, fail = -1, {
    // A connected stream ignores the address, as TCP does.
    let _ = (dst, dlen);
    // SAFETY: forwarded as the caller gave it.
    unsafe { send_bytes(socket, buf, len, flags) }
}}

export! {"RDMACM_1.0" fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize, fail = -1, {
    // SAFETY: forwarded as the caller gave it.
    unsafe { recv_bytes(socket, buf, len, flags) }
}}

export! {"RDMACM_1.0" fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize, fail = -1, {
    // SAFETY: forwarded as the caller gave it.
    unsafe { recv_bytes(socket, buf, count, 0) }
}}

export! {"RDMACM_1.0" fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src: *mut c_void, slen: *mut u32) -> isize, fail = -1, {
    let n = unsafe {
        // SAFETY: forwarded as the caller gave it.
        recv_bytes(socket, buf, len, flags)
    };
    if n >= 0 {
        if let Some(p) = lookup(socket).and_then(|s| s.stream().ok()).and_then(|s| s.peer_addr()) {
            // SAFETY: the caller's address buffer, as recvfrom(2).
            unsafe { write_addr(p, src, slen) };
        }
    }
    n
}}

/// writev/readv over `iovcnt` iovecs at `iov`: `io(base, len, first)`
/// for each in turn, stopping at the first short or failed one; the total,
/// or the first call's failure.
///
/// # Safety
/// `iov` points to `iovcnt` iovecs naming the caller's buffers.
unsafe fn each_iov(
    iov: *const c_void,
    iovcnt: c_int,
    mut io: impl FnMut(*mut c_void, usize, bool) -> isize,
) -> isize {
    if iovcnt < 0 || (iovcnt > 0 && iov.is_null()) {
        return fail_size(libc::EINVAL);
    }
    // SAFETY: the caller's array of `iovcnt` iovecs, as writev(2).
    let v = unsafe { std::slice::from_raw_parts(iov.cast::<libc::iovec>(), iovcnt as usize) };
    let mut total = 0isize;
    for e in v {
        let n = io(e.iov_base, e.iov_len, total == 0);
        if n < 0 {
            return if total > 0 { total } else { n };
        }
        total += n;
        if (n as usize) < e.iov_len {
            break;
        }
    }
    total
}

export! {"RDMACM_1.0" fn rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize, fail = -1, {
    // SAFETY: the caller's iovecs, each naming readable bytes.
    unsafe { each_iov(iov, iovcnt, |base, len, _| send_bytes(socket, base, len, 0)) }
}}

export! {"RDMACM_1.0" fn rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize, fail = -1, {
    // As readv: what has arrived, filling the buffers in order; only the
    // first read may wait.
    // SAFETY: the caller's iovecs, each naming writable bytes.
    unsafe {
        each_iov(iov, iovcnt, |base, len, first| {
            recv_bytes(socket, base, len, if first { 0 } else { libc::MSG_DONTWAIT })
        })
    }
}}

export! {"RDMACM_1.0" fn rshutdown(socket: c_int, how: c_int) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    let how = match how {
        libc::SHUT_RD => Shutdown::Read,
        libc::SHUT_WR => Shutdown::Write,
        libc::SHUT_RDWR => Shutdown::Both,
        _ => return fail(libc::EINVAL),
    };
    match s.stream() {
        Ok(st) => match st.shutdown(how) {
            Ok(()) => 0,
            Err(e) => fail_rs(&e),
        },
        Err(e) => fail(e),
    }
}}

export! {"RDMACM_1.0" fn rclose(socket: c_int) -> c_int, fail = -1, {
    let Some(s) = table().as_mut().and_then(|t| t.remove(&socket)) else {
        return fail(libc::EBADF);
    };
    match &*s.kind() {
        Kind::Stream(st) => {
            st.set_wakeup(None);
            st.close();
        }
        Kind::Listening(l) => {
            l.set_wakeup(None);
            l.close();
        }
        Kind::Fresh { .. } => {}
    }
    // The eventfd goes with the last reference (RSocket's Drop).
    0
}}

/// Reads an `int` option value.
///
/// # Safety
/// `val` points to `len` readable bytes.
unsafe fn int_opt(val: *const c_void, len: u32) -> Result<c_int, c_int> {
    if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least an int's bytes, per the check.
    Ok(unsafe { val.cast::<c_int>().read_unaligned() })
}

export! {"RDMACM_1.0" fn rsetsockopt(socket: c_int, level: c_int, name: c_int, val: *const c_void, len: u32) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    if level == SOL_RDMA && name == RDMA_ROUTE {
        // A path record from rdma_getaddrinfo: RoCE resolves its own.
        return 0;
    }
    // SAFETY: the caller's option value of `len` bytes.
    let v = match unsafe { int_opt(val, len) } {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    // Buffer and queue sizes apply until the socket has its own (a
    // listener's go to the connections it accepts).
    let fresh = !matches!(&*s.kind(), Kind::Stream(_));
    let mut o = s.opts.lock().unwrap_or_else(|e| e.into_inner());
    let as_u32 = |v: c_int| v.max(0) as u32;
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => s.reuseaddr.store(v != 0, Ordering::Relaxed),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => s.keepalive.store(v != 0, Ordering::Relaxed),
        // Doubled, as librdmacm (and the kernel for TCP) do; only before
        // the buffers exist.
        (libc::SOL_SOCKET, libc::SO_SNDBUF) if fresh => o.sbuf_size = as_u32(v).saturating_mul(2),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) if fresh => o.rbuf_size = as_u32(v).saturating_mul(2),
        (libc::SOL_SOCKET, libc::SO_SNDBUF | libc::SO_RCVBUF | libc::SO_LINGER | libc::SO_OOBINLINE) => {}
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => s.nodelay.store(v != 0, Ordering::Relaxed),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            *s.keepidle.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG | libc::TCP_CONGESTION) => {}
        (SOL_RDMA, RDMA_SQSIZE) if fresh => o.sq_size = as_u32(v),
        (SOL_RDMA, RDMA_RQSIZE) if fresh => o.rq_size = as_u32(v),
        (SOL_RDMA, RDMA_INLINE) if fresh => o.sq_inline = as_u32(v).min(0xFFFE),
        (SOL_RDMA, RDMA_IOMAPSIZE) if fresh => o.iomap_size = as_u32(v),
        (SOL_RDMA, RDMA_SQSIZE | RDMA_RQSIZE | RDMA_INLINE | RDMA_IOMAPSIZE) => {}
        _ => return fail(libc::ENOPROTOOPT),
    }
    0
}}

export! {"RDMACM_1.0" fn rgetsockopt(socket: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut u32) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    if val.is_null() || len.is_null() {
        return fail(libc::EINVAL);
    }
    let o = s.options();
    let flag = |b: &AtomicBool| c_int::from(b.load(Ordering::Relaxed));
    let v: c_int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => flag(&s.reuseaddr),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => flag(&s.keepalive),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rbuf_size as c_int,
        // A failed connect already said why.
        (libc::SOL_SOCKET, libc::SO_ERROR) => 0,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => flag(&s.nodelay),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => *s.keepidle.lock().unwrap_or_else(|e| e.into_inner()),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
        (SOL_RDMA, RDMA_SQSIZE) => o.sq_size as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => o.rq_size as c_int,
        (SOL_RDMA, RDMA_INLINE) => o.sq_inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => o.iomap_size as c_int,
        _ => return fail(libc::ENOPROTOOPT),
    };
    // SAFETY: the caller's length.
    if (unsafe { *len } as usize) < std::mem::size_of::<c_int>() {
        return fail(libc::EINVAL);
    }
    // SAFETY: room for an int, per the check.
    unsafe {
        val.cast::<c_int>().write_unaligned(v);
        *len = std::mem::size_of::<c_int>() as u32;
    }
    0
}}

export! {"RDMACM_1.0" fn rfcntl(socket: c_int, cmd: c_int, arg: usize) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    match cmd {
        libc::F_GETFL => libc::O_RDWR | if s.nonblock.load(Ordering::Relaxed) { libc::O_NONBLOCK } else { 0 },
        libc::F_SETFL => {
            s.nonblock.store(arg as c_int & libc::O_NONBLOCK != 0, Ordering::Relaxed);
            0
        }
        _ => fail(libc::ENOTSUP),
    }
}}

export! {"RDMACM_1.0" fn rgetpeername(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    match s.stream().ok().and_then(|st| st.peer_addr()) {
        Some(p) => {
            // SAFETY: the caller's address buffer, as getpeername(2).
            unsafe { write_addr(p, addr, len) };
            0
        }
        None => fail(libc::ENOTCONN),
    }
}}

export! {"RDMACM_1.0" fn rgetsockname(socket: c_int, addr: *mut c_void, len: *mut u32) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    let a = match &*s.kind() {
        Kind::Fresh { bound } => *bound,
        Kind::Listening(l) => l.local_addr(),
        Kind::Stream(st) => st.local_addr(),
    };
    match a {
        Some(a) => {
            // SAFETY: the caller's address buffer, as getsockname(2).
            unsafe { write_addr(a, addr, len) };
            0
        }
        None => fail(libc::EINVAL),
    }
}}

/// What an rsocket is ready for, as poll(2) bits; when nothing it waits
/// for is there, its wakeup is armed and it is checked once more (what
/// came in between would not wake it).
fn revents(s: &RSocket, events: i16) -> i16 {
    let check = |arm: bool| -> i16 {
        let mut r = 0i16;
        match &*s.kind() {
            Kind::Listening(l) => {
                if l.has_request() {
                    r |= libc::POLLIN;
                }
            }
            Kind::Stream(st) => {
                if arm {
                    st.arm();
                }
                let (readable, writable, hup) = st.readiness();
                if readable {
                    r |= libc::POLLIN;
                }
                if writable {
                    r |= libc::POLLOUT;
                }
                if hup {
                    r |= libc::POLLHUP;
                }
            }
            // As an unconnected TCP socket.
            Kind::Fresh { .. } => r |= libc::POLLOUT | libc::POLLHUP,
        }
        r & (events | libc::POLLHUP | libc::POLLERR)
    };
    drain(s.fd);
    match check(false) {
        0 => check(true),
        r => r,
    }
}

export! {"RDMACM_1.0" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int, fail = -1, {
    if nfds > 0 && fds.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's pollfd array, as poll(2) takes it.
    let fds = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    let socks: Vec<Option<Arc<RSocket>>> = fds.iter().map(|p| lookup(p.fd)).collect();
    if socks.iter().all(Option::is_none) {
        // SAFETY: as given.
        return unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout) };
    }
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let mut ready = 0;
        for (p, s) in fds.iter_mut().zip(&socks) {
            if let Some(s) = s {
                p.revents = revents(s, p.events);
                if p.revents != 0 {
                    ready += 1;
                }
            }
        }
        // The program's own descriptors as given, an rsocket as its
        // eventfd, readable when its wakeup fired.
        let mut all: Vec<libc::pollfd> = fds
            .iter()
            .zip(&socks)
            .map(|(p, s)| libc::pollfd {
                fd: p.fd,
                events: if s.is_some() { libc::POLLIN } else { p.events },
                revents: 0,
            })
            .collect();
        let wait_ms = match deadline {
            _ if ready > 0 => 0,
            None => -1,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(c_int::MAX as u128) as c_int,
        };
        // SAFETY: our own array.
        let n = unsafe { libc::poll(all.as_mut_ptr(), all.len() as libc::nfds_t, wait_ms) };
        if n < 0 {
            return -1;
        }
        for ((p, s), q) in fds.iter_mut().zip(&socks).zip(&all) {
            if s.is_none() {
                p.revents = q.revents;
                if q.revents != 0 {
                    ready += 1;
                }
            }
        }
        if ready > 0 {
            return ready;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return 0;
        }
    }
}}
export! {"RDMACM_1.0" fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: i64) -> i64, fail = -1, {
    let _ = flags;
    let Some(s) = lookup(socket) else { return i64::from(fail(libc::EBADF)) };
    if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 {
        return i64::from(fail(libc::EINVAL));
    }
    let stream = match s.stream() {
        Ok(st) => st,
        Err(_) => return i64::from(fail(libc::EINVAL)),
    };
    let Some(ptr) = std::ptr::NonNull::new(buf.cast::<u8>()) else {
        return i64::from(fail(libc::EINVAL));
    };
    if (ptr.as_ptr() as usize).checked_add(len).is_none() {
        return i64::from(fail(libc::EINVAL));
    }
    // SAFETY: riomap(3): the memory stays the program's and valid until
    // riounmap or rclose, which end the registration; the range does not
    // wrap (checked above).
    let bytes = unsafe { crate::foreign::ForeignBytes::new(ptr, len) };
    let at = (offset != -1).then_some(offset as u64);
    match stream.iomap(Arc::new(bytes), prot & libc::PROT_WRITE != 0, at) {
        Ok(o) => o as i64,
        Err(e) => i64::from(fail_rs(&e)),
    }
}}

export! {"RDMACM_1.0" fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int, fail = -1, {
    let Some(s) = lookup(socket) else { return fail(libc::EBADF) };
    match s.stream() {
        Ok(st) => match st.iounmap(buf as usize as u64, len) {
            Ok(()) => 0,
            Err(e) => fail_rs(&e),
        },
        Err(_) => fail(libc::EINVAL),
    }
}}

export! {"RDMACM_1.0" fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: i64, flags: c_int) -> usize, fail = usize::MAX, {
    let Some(s) = lookup(socket) else {
        fail(libc::EBADF);
        return usize::MAX;
    };
    let stream = match s.stream() {
        Ok(st) => st,
        Err(e) => {
            fail(e);
            return usize::MAX;
        }
    };
    if count == 0 {
        return 0;
    }
    if buf.is_null() || offset < 0 {
        fail(libc::EINVAL);
        return usize::MAX;
    }
    // SAFETY: the caller's `count` readable bytes.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) };
    match stream.iowrite(data, offset as u64, s.nonblocking(flags)) {
        Ok(n) => n,
        Err(e) => {
            fail_rs(&e);
            usize::MAX
        }
    }
}}
