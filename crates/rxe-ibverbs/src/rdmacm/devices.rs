//! The CM's view of the devices: as librdmacm opens every device at its
//! first call, this opens a context on each configured rxe device (which
//! attaches its engine and binds its UDP port), starts the device's CM
//! (QP1 answers from then on), and keeps one PD per device, the PD an ID
//! gets when it is bound to the device (`id->pd`). At the process's exit
//! it ends the connections the way the kernel's CM would after the
//! program had gone (`leave_at_exit`).

use std::ffi::c_int;
use std::sync::{Condvar, Mutex, Once, TryLockError};
use std::time::{Duration, Instant};

use rxe_verbs_abi::{ibv_context, ibv_pd};

use crate::context::Context;

struct CmDevice {
    /// A context of ours, open for the process's life.
    ctx: usize,
    dev: rxe_verbs::Device,
    /// Allocated at the first ID bound to the device.
    pd: Option<usize>,
}

static DEVICES: Mutex<Option<Vec<CmDevice>>> = Mutex::new(None);

/// The longest a process waits at its exit for the DREPs of its DREQs.
const EXIT_WAIT: Duration = Duration::from_secs(1);

static AT_EXIT: Once = Once::new();

/// The process that registered [`leave_at_exit`]: a child it forks shares
/// its sockets but not its connections, and must not end them at its exit.
static EXIT_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Where [`leave_at_exit`] stands, for [`hold_while_leaving`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exiting {
    No,
    /// Lingering for the DREPs.
    Leaving,
    /// Done: the process ends within microseconds, unless another exit
    /// handler still runs; threads are held until then at the most.
    Until(Instant),
}

static EXITING: (Mutex<Exiting>, Condvar) = (Mutex::new(Exiting::No), Condvar::new());

/// How long after the linger threads are still held: far longer than the
/// rest of `exit`, short enough that an exit handler of the program that
/// still waits for CM events (one registered before the library's) is
/// only delayed.
const HOLD_AFTER: Duration = Duration::from_secs(1);

/// Once the process lingers in `leave_at_exit`, a thread of the program
/// that comes to wait for a CM event, or is woken with one, waits here:
/// until the process ends under it, as it would have at once without the
/// linger, or `HOLD_AFTER` past the linger. The program's main thread
/// has returned and may have freed what its other threads still use:
/// Debian's rping destroys its event channel without joining the thread
/// that reads it, and that thread, woken by the DREP the linger waited
/// for, failed its next `rdma_get_cm_event` on the destroyed channel
/// (EINVAL, exit 255: 2 CI runs of 4 today; 9 of 15 rping clients on a busy
/// machine lingered).
pub fn hold_while_leaving() {
    let (m, c) = &EXITING;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match *g {
            Exiting::No => return,
            Exiting::Leaving => g = c.wait(g).unwrap_or_else(|e| e.into_inner()),
            Exiting::Until(t) => {
                let now = Instant::now();
                if now >= t {
                    return;
                }
                g = c
                    .wait_timeout(g, t - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

fn set_exiting(state: Exiting) {
    let (m, c) = &EXITING;
    *m.lock().unwrap_or_else(|e| e.into_inner()) = state;
    c.notify_all();
}

/// Run by `exit`: the kernel's CM outlives a program, this one goes with
/// it, so before it goes it disconnects what is still up and waits (at
/// most [`EXIT_WAIT`] in all) until each DREQ is answered, resending the
/// lost ones ([`rxe_verbs::cm::leave`]); meanwhile the program's own
/// threads do not get CM events ([`hold_while_leaving`]). Nothing may
/// unwind out of here.
extern "C" fn leave_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if EXIT_PID.load(std::sync::atomic::Ordering::Relaxed) != std::process::id() {
            return;
        }
        let devs: Vec<rxe_verbs::Device> = {
            let g = match DEVICES.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // Held by a thread that exit() stopped in the middle of a
                // call: leave as the kernel-less process would.
                Err(TryLockError::WouldBlock) => return,
            };
            g.iter().flatten().map(|d| d.dev.clone()).collect()
        };
        let deadline = Instant::now() + EXIT_WAIT;
        set_exiting(Exiting::Leaving);
        for dev in devs {
            rxe_verbs::cm::leave(&dev, deadline.saturating_duration_since(Instant::now()));
        }
    });
    // Also after a panic above: nobody stays held for ever.
    let (m, _) = &EXITING;
    let lingered = *m.lock().unwrap_or_else(|e| e.into_inner()) == Exiting::Leaving;
    if lingered {
        set_exiting(Exiting::Until(Instant::now() + HOLD_AFTER));
    }
}

/// Opens every configured device for the CM (once per process). A device
/// that cannot start (its address is held by another process) is left
/// out, with the reason on stderr; none at all is ENODEV.
pub fn init() -> Result<(), c_int> {
    let mut g = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if g.as_ref().is_some_and(|d| !d.is_empty()) {
        return Ok(());
    }
    let mut out = Vec::new();
    for d in crate::devices::list() {
        // SAFETY: a device of our own list.
        let ctx = unsafe { crate::context::ibv_open_device(d.ibv()) };
        let Some(c) = Context::from_ibv(ctx) else {
            continue;
        };
        match c.device() {
            Ok(dev) => {
                if let Err(e) = rxe_verbs::cm::start(&dev) {
                    eprintln!("rxe librdmacm: cannot start the CM of {}: {e}", d.name);
                }
                out.push(CmDevice {
                    ctx: ctx as usize,
                    dev,
                    pd: None,
                });
            }
            Err(_) => {
                // SAFETY: the context just opened, not handed out.
                unsafe { crate::context::ibv_close_device(ctx) };
            }
        }
    }
    if out.is_empty() {
        return Err(libc::ENODEV);
    }
    *g = Some(out);
    AT_EXIT.call_once(|| {
        EXIT_PID.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: registers a function of this library, which stays
        // mapped for the process's life (it is libibverbs.so.1 and
        // librdmacm.so.1 themselves, never unloaded).
        if unsafe { libc::atexit(leave_at_exit) } != 0 {
            tracing::debug!("atexit refused: no disconnects at exit");
        }
    });
    Ok(())
}

/// The CM's context on `dev` (`id->verbs`).
pub fn context_for(dev: &rxe_verbs::Device) -> Option<*mut ibv_context> {
    let g = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?
        .iter()
        .find(|d| &d.dev == dev)
        .map(|d| d.ctx as *mut ibv_context)
}

/// The device's shared PD (`id->pd`), allocated at its first use.
pub fn pd_for(dev: &rxe_verbs::Device) -> Option<*mut ibv_pd> {
    let mut g = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let d = g.as_mut()?.iter_mut().find(|d| &d.dev == dev)?;
    if let Some(p) = d.pd {
        return Some(p as *mut ibv_pd);
    }
    // SAFETY: our own live context.
    let p = unsafe { crate::pd::ibv_alloc_pd(d.ctx as *mut ibv_context) };
    if p.is_null() {
        return None;
    }
    d.pd = Some(p as usize);
    Some(p)
}

/// The contexts of the CM's devices, in order.
pub fn contexts() -> Vec<*mut ibv_context> {
    let g = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .map(|v| v.iter().map(|d| d.ctx as *mut ibv_context).collect())
        .unwrap_or_default()
}

export! {"RDMACM_1.0" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context, fail = std::ptr::null_mut(), {
    if let Err(e) = init() {
        crate::errno::set_errno(e);
        return std::ptr::null_mut();
    }
    let ctxs = contexts();
    if !num_devices.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { *num_devices = ctxs.len() as c_int };
    }
    // NULL-terminated, as librdmacm's; freed by rdma_free_devices.
    let mut list: Vec<*mut ibv_context> = ctxs;
    list.push(std::ptr::null_mut());
    let boxed = list.into_boxed_slice();
    Box::into_raw(boxed).cast::<*mut ibv_context>()
}}

export! {"RDMACM_1.0" fn rdma_free_devices(list: *mut *mut ibv_context) -> (), fail = (), {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: a list from rdma_get_devices, NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: rebuilt with the length it was allocated with (n + 1).
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}}
