//! Completion queues (`ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`,
//! `ibv_get_cq_event`): where the device puts work completions, and how an
//! application waits for them, polling, blocking or with `async`/`await`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant as StdInstant};

use rxe_core::transport::{WcStatus, WorkCompletion, WorkQueue};

use crate::device::{Device, DeviceShared};
use crate::error::{ObjectKind, Result, VerbsError};
use crate::spin_wait::{AdaptiveSpin, SpinWait};

/// Which completions end a wait (`ibv_req_notify_cq`'s `solicited_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyKind {
    /// The next completion of any kind.
    NextCompletion,
    /// The next receive completion of a message whose sender asked for a
    /// solicited event (BTH SE), or any completion in error (IBTA 11.4.2.2).
    SolicitedOnly,
}

#[derive(Debug, Default)]
struct CqState {
    wcs: VecDeque<WorkCompletion>,
    armed: Option<NotifyKind>,
    /// Notification events raised and not yet taken by a wait.
    events: u64,
    overrun: bool,
    lost: u64,
    wakers: Vec<Waker>,
    /// Threads asleep in [`Cq::wait`]: the condition variable is signalled
    /// only when there are some (a futex call otherwise wasted on the
    /// driver thread, before the completion channel's eventfd is written).
    sleepers: usize,
}

/// Called when a CQ raises a notification event (an armed request fired,
/// or the CQ overran), after the CQ's own lock is released: the drop-in
/// `libibverbs.so.1` queues the event on the CQ's completion channel. It
/// may run on the device's driver thread or on an application thread that
/// is inside a verb, possibly with the device lock held, so it must only
/// take leaf locks and never call back into the verbs.
pub type CqEventHook = Arc<dyn Fn() + Send + Sync>;

/// The part of a CQ that the device's engine holds.
pub(crate) struct CqShared {
    pub id: u32,
    pub depth: u32,
    state: Mutex<CqState>,
    cond: Condvar,
    /// QPs that complete into this CQ (a CQ with users cannot be
    /// destroyed).
    pub(crate) users: crate::use_count::UseCount,
    pub destroyed: AtomicBool,
    hook: Mutex<Option<CqEventHook>>,
    /// The spin of [`Cq::wait`], fitted to this CQ's events.
    spin: AdaptiveSpin,
}

impl std::fmt::Debug for CqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqShared")
            .field("id", &self.id)
            .field("depth", &self.depth)
            .finish()
    }
}

impl CqShared {
    pub fn new(id: u32, depth: u32) -> CqShared {
        CqShared {
            id,
            depth,
            state: Mutex::default(),
            cond: Condvar::new(),
            users: crate::use_count::UseCount::new(),
            destroyed: AtomicBool::new(false),
            hook: Mutex::new(None),
            spin: AdaptiveSpin::new(),
        }
    }

    /// Runs the event hook, if any (with no CQ lock held).
    fn fire_hook(&self) {
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h();
        }
    }

    /// Adds a completion without waking anybody; [`CqShared::signal`]
    /// then raises what it made due. A device stores every completion of
    /// one batch before it signals any (`DeviceEngine::dispatch`): a
    /// waiter woken by the first must find the others there. A program
    /// that waits on one channel for two CQs (perftest's `-e`) and polls
    /// the CQ it expects after each event would otherwise, woken by a
    /// receive's event, poll its send CQ a moment before the send
    /// completion that came in the same packet batch was stored, and find
    /// it later, one event out of step (perftest's send CQ then overran).
    pub(crate) fn store(&self, wc: WorkCompletion, solicited: bool) -> Stored {
        let mut s = self.state.lock().unwrap();
        if s.overrun || s.wcs.len() >= self.depth as usize {
            s.lost += 1;
            let first = !s.overrun;
            s.overrun = true;
            return if first {
                Stored::FirstOverrun
            } else {
                Stored::Lost
            };
        }
        s.wcs.push_back(wc);
        let trigger = match s.armed {
            Some(NotifyKind::NextCompletion) => true,
            Some(NotifyKind::SolicitedOnly) => {
                solicited && wc.queue == WorkQueue::Recv || wc.status != WcStatus::Success
            }
            None => false,
        };
        if trigger {
            s.armed = None;
            Stored::Event
        } else {
            Stored::Quiet
        }
    }

    /// Raises what storing made due: an event (the armed notification
    /// fired) or an overrun wakes the waiters, which see it, and runs the
    /// event hook (an overrun's only the first time).
    pub(crate) fn signal(&self, stored: Stored) {
        if stored == Stored::Quiet {
            return;
        }
        let mut s = self.state.lock().unwrap();
        s.events += 1;
        self.wake(&mut s);
        drop(s);
        if stored != Stored::Lost {
            self.fire_hook();
        }
    }

    fn wake(&self, s: &mut CqState) {
        if s.sleepers > 0 {
            self.cond.notify_all();
        }
        for w in s.wakers.drain(..) {
            w.wake();
        }
    }
}

/// What [`CqShared::store`] did with a completion, strongest first when
/// several of one batch are merged ([`Stored::merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stored {
    /// Stored; nobody to tell.
    Quiet,
    /// Dropped: the CQ had overrun already (waiters are woken again).
    Lost,
    /// Stored, and the armed notification fired.
    Event,
    /// Dropped: this one overran the CQ (the caller raises `CqErr`).
    FirstOverrun,
}

impl Stored {
    /// One signal for two stores to the same CQ.
    pub(crate) fn merge(self, other: Stored) -> Stored {
        self.max(other)
    }
}

/// A completion queue. Handles are cheap clones of one queue.
#[derive(Clone)]
pub struct Cq {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) shared: Arc<CqShared>,
}

impl Device {
    /// `ibv_create_cq` with room for `depth` completions.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        self.0.check_live()?;
        if depth == 0 || depth > self.0.max().max_cqe {
            return Err(VerbsError::InvalidArgument(format!(
                "CQ depth must be 1 to {}, not {depth}",
                self.0.max().max_cqe
            )));
        }
        let mut e = self.0.lock();
        if e.counts.cq >= self.0.max().max_cq {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Cq,
                max: self.0.max().max_cq,
            });
        }
        e.counts.cq += 1;
        let id = e.alloc_id();
        Ok(Cq {
            dev: self.0.clone(),
            shared: Arc::new(CqShared::new(id, depth)),
        })
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("id", &self.shared.id)
            .field("depth", &self.shared.depth)
            .finish()
    }
}

impl Cq {
    pub(crate) fn check_live(&self) -> Result<()> {
        self.dev.check_live()?;
        if self.shared.destroyed.load(Ordering::Acquire) {
            return Err(VerbsError::Destroyed(ObjectKind::Cq));
        }
        Ok(())
    }

    /// The CQ's number on its device.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// How many completions it holds at most (`cqe`).
    pub fn depth(&self) -> u32 {
        self.shared.depth
    }

    pub fn device(&self) -> Device {
        Device(self.dev.clone())
    }

    /// Takes up to `max` completions, oldest first (`ibv_poll_cq`). After
    /// an overrun, the completions queued before it are returned, then
    /// every call fails with [`VerbsError::CqOverrun`].
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::new();
        self.poll_into(max, &mut out)?;
        Ok(out)
    }

    /// As [`Cq::poll`], appending to `out` (no allocation if it has room);
    /// returns how many were added.
    pub fn poll_into(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        self.check_live()?;
        self.progress_if_empty();
        let mut s = self.shared.state.lock().unwrap();
        if s.wcs.is_empty() && s.overrun {
            return Err(VerbsError::CqOverrun);
        }
        let n = max.min(s.wcs.len());
        out.extend(s.wcs.drain(..n));
        Ok(n)
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>> {
        self.check_live()?;
        self.progress_if_empty();
        let mut s = self.shared.state.lock().unwrap();
        if s.wcs.is_empty() && s.overrun {
            return Err(VerbsError::CqOverrun);
        }
        Ok(s.wcs.pop_front())
    }

    /// One completion, if any, without the device work of an empty poll:
    /// for the device's own threads (the CM's, on QP1), which take what the
    /// driver thread delivered. Their polls are not an application at work:
    /// counted as one, they would make the driver stop watching the sockets
    /// (busy polling preferred) for a program that polls nothing.
    pub(crate) fn take_one(&self) -> Result<Option<WorkCompletion>> {
        self.check_live()?;
        let mut s = self.shared.state.lock().unwrap();
        if s.wcs.is_empty() && s.overrun {
            return Err(VerbsError::CqOverrun);
        }
        Ok(s.wcs.pop_front())
    }

    /// An empty poll does the device's pending receive work on this thread
    /// (see `DeviceShared::progress`), so that a busy-polling application
    /// does not wait for the driver thread's turn on the CPU.
    fn progress_if_empty(&self) {
        if self.shared.state.lock().unwrap().wcs.is_empty() {
            self.dev.progress();
        } else {
            self.dev.poller_busy();
        }
    }

    /// Calls `hook` at every notification event from now on (`None`
    /// removes it): see [`CqEventHook`].
    pub fn set_event_hook(&self, hook: Option<CqEventHook>) {
        *self.shared.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Completions lost to an overrun.
    pub fn lost(&self) -> u64 {
        self.shared.state.lock().unwrap().lost
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the next completion of `kind`
    /// raises one notification event, which [`Cq::wait`] or
    /// [`Cq::notified`] take. As with libibverbs, arm before the last poll
    /// that found the queue empty, or a completion may slip in between.
    pub fn req_notify(&self, kind: NotifyKind) -> Result<()> {
        self.check_live()?;
        let mut s = self.shared.state.lock().unwrap();
        // A solicited-only request does not weaken an armed "next".
        s.armed = match (s.armed, kind) {
            (Some(NotifyKind::NextCompletion), _) => Some(NotifyKind::NextCompletion),
            _ => Some(kind),
        };
        Ok(())
    }

    /// Blocks until a notification event is raised, then takes it
    /// (`ibv_get_cq_event`); `None` waits without end. It busy-polls the
    /// device for a short bounded time before it sleeps
    /// ([`SpinWait::from_env`], `crate::spin_wait` says why).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        self.check_live()?;
        let start = StdInstant::now();
        let deadline = timeout.map(|t| start + t);
        let adaptive = &self.shared.spin;
        let spin = match timeout {
            Some(t) => SpinWait::new(adaptive.current().bound().min(t)),
            None => adaptive.current(),
        };
        let caught = spin.spin(std::slice::from_ref(&self.device()), || {
            self.shared.state.lock().unwrap().events > 0
        });
        let r = self.sleep_for_event(deadline);
        adaptive.record(spin, caught, start.elapsed());
        r
    }

    /// The sleeping part of [`Cq::wait`].
    fn sleep_for_event(&self, deadline: Option<StdInstant>) -> Result<()> {
        let mut s = self.shared.state.lock().unwrap();
        while s.events == 0 {
            s.sleepers += 1;
            s = match deadline {
                None => self.shared.cond.wait(s).unwrap(),
                Some(d) => {
                    let now = StdInstant::now();
                    if now >= d {
                        s.sleepers -= 1;
                        return Err(VerbsError::Timeout);
                    }
                    self.shared.cond.wait_timeout(s, d - now).unwrap().0
                }
            };
            s.sleepers -= 1;
            if self.shared.destroyed.load(Ordering::Acquire) {
                return Err(VerbsError::Destroyed(ObjectKind::Cq));
            }
        }
        s.events -= 1;
        Ok(())
    }

    /// The asynchronous form of [`Cq::wait`].
    pub fn notified(&self) -> Notified<'_> {
        Notified { cq: self }
    }

    /// Destroys the CQ (`ibv_destroy_cq`); refused while a QP uses it.
    pub fn destroy(&self) -> Result<()> {
        self.check_live()?;
        let mut e = self.dev.lock();
        self.shared
            .users
            .check_unused(ObjectKind::Cq, "QPs complete into it")?;
        if self.shared.destroyed.swap(true, Ordering::AcqRel) {
            return Err(VerbsError::Destroyed(ObjectKind::Cq));
        }
        e.counts.cq -= 1;
        drop(e);
        // Waiters wake up and see the CQ gone.
        self.wake_all();
        Ok(())
    }

    pub(crate) fn wake_all(&self) {
        let mut s = self.shared.state.lock().unwrap();
        s.events += 1;
        self.shared.wake(&mut s);
    }
}

/// Future of [`Cq::notified`].
pub struct Notified<'a> {
    cq: &'a Cq,
}

impl Future for Notified<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.cq.check_live() {
            return Poll::Ready(Err(e));
        }
        let mut s = self.cq.shared.state.lock().unwrap();
        if s.events > 0 {
            s.events -= 1;
            return Poll::Ready(Ok(()));
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::transport::{WcOpcode, WorkQueue};
    use std::sync::atomic::AtomicUsize;

    fn wc(queue: WorkQueue) -> WorkCompletion {
        WorkCompletion::new(1, WcStatus::Success, WcOpcode::Send, 7, queue)
    }

    #[test]
    fn the_event_hook_fires_once_per_armed_notification_and_at_overrun() {
        let cq = CqShared::new(1, 2);
        let fired = Arc::new(AtomicUsize::new(0));
        let f = fired.clone();
        *cq.hook.lock().unwrap() = Some(Arc::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        }));
        let push = |q, solicited| {
            let stored = cq.store(wc(q), solicited);
            cq.signal(stored);
            stored
        };
        assert_eq!(push(WorkQueue::Send, false), Stored::Quiet);
        assert_eq!(fired.load(Ordering::SeqCst), 0, "not armed");
        cq.state.lock().unwrap().armed = Some(NotifyKind::SolicitedOnly);
        cq.state.lock().unwrap().wcs.clear();
        assert_eq!(push(WorkQueue::Recv, false), Stored::Quiet);
        assert_eq!(fired.load(Ordering::SeqCst), 0, "not solicited");
        assert_eq!(push(WorkQueue::Recv, true), Stored::Event);
        assert_eq!(fired.load(Ordering::SeqCst), 1, "solicited receive");
        // Full (depth 2): the overrun fires once.
        assert_eq!(push(WorkQueue::Send, false), Stored::FirstOverrun);
        assert_eq!(
            push(WorkQueue::Send, false),
            Stored::Lost,
            "later losses are not new overruns"
        );
        assert_eq!(fired.load(Ordering::SeqCst), 2);
    }

    /// A batch's completions are all stored before anybody hears of one:
    /// a waiter woken by the first finds the second there too.
    #[test]
    fn nothing_is_signalled_until_the_batch_is_stored() {
        let (send, recv) = (CqShared::new(1, 4), CqShared::new(2, 4));
        let fired = Arc::new(AtomicUsize::new(0));
        for cq in [&send, &recv] {
            cq.state.lock().unwrap().armed = Some(NotifyKind::NextCompletion);
            let f = fired.clone();
            *cq.hook.lock().unwrap() = Some(Arc::new(move || {
                f.fetch_add(1, Ordering::SeqCst);
            }));
        }
        let r = recv.store(wc(WorkQueue::Recv), false);
        let s = send.store(wc(WorkQueue::Send), false);
        assert_eq!((r, s), (Stored::Event, Stored::Event));
        assert_eq!(fired.load(Ordering::SeqCst), 0, "stored, not told");
        assert_eq!(recv.state.lock().unwrap().events, 0);
        recv.signal(r);
        assert_eq!(fired.load(Ordering::SeqCst), 1);
        assert_eq!(send.state.lock().unwrap().wcs.len(), 1, "already there");
        send.signal(s);
        assert_eq!(fired.load(Ordering::SeqCst), 2);
        assert_eq!(
            Stored::Event.merge(Stored::FirstOverrun),
            Stored::FirstOverrun
        );
        assert_eq!(Stored::Quiet.merge(Stored::Event), Stored::Event);
    }
}
