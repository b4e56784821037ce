//! Posting and polling: perftest's work requests, completions checked
//! and waited for with a deadline that moves with progress.

use std::io;
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rxe_verbs::{RecvWr, SendData, SendOp, SendWr, Sge, WcStatus, WorkCompletion, WorkQueue};

use super::setup::Perf;
use crate::busy_poll::BusyPoll;
use crate::ibv_format::wc_status_str;

/// A work request of perftest's kind on an RC QP: one SGE, no fence,
/// not solicited.
pub(super) fn rc_wr(wr_id: u64, op: SendOp, sge: Sge, signaled: bool) -> SendWr {
    SendWr {
        wr_id,
        op,
        data: SendData::Sge(sge),
        signaled,
        fence: false,
        solicited: false,
        ud: None,
    }
}

/// Completions of one run, and a deadline that moves with progress.
pub(super) struct Waiter(BusyPoll);

impl Waiter {
    pub(super) fn new(timeout: Option<Duration>) -> Waiter {
        Waiter(BusyPoll::new(timeout))
    }

    pub(super) fn progressed(&mut self) {
        self.0.progressed();
    }

    /// Called on every empty poll: yields the CPU (the device's own
    /// threads need it) and fails once the wait is too long.
    pub(super) fn idle(&mut self, what: &dyn Fn() -> String) -> Result<()> {
        if self.0.idle() {
            bail!(
                "no progress for {:.1} s while {}: the peer stopped or is gone (same test, -s, -n and -q on both sides?)",
                self.0.timeout().unwrap_or_default().as_secs_f64(),
                what()
            );
        }
        Ok(())
    }
}

impl Perf<'_> {
    pub(super) fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub(super) fn post_recv(&self, q: usize, slot: u64) -> Result<()> {
        let off = self.lay.recv_off + (slot % self.lay.recv_slots.max(1)) * self.lay.recv_slot;
        self.qps[q]
            .post_recv(RecvWr {
                wr_id: slot,
                sg_list: [self.mrs[q].sge(off as usize, self.cfg.size as u32)].into(),
            })
            .context("couldn't post a receive")
    }

    fn qp_index(&self, wc: &WorkCompletion) -> Result<usize> {
        self.qps
            .iter()
            .position(|q| q.qp_num() == wc.qp_num)
            .ok_or_else(|| anyhow!("completion for unknown QP 0x{:06x}", wc.qp_num))
    }

    pub(super) fn check_wc(&self, wc: &WorkCompletion) -> Result<()> {
        if wc.status != WcStatus::Success {
            let hint = if wc.status == WcStatus::RetryExcErr {
                // retry_cnt 7; the ACK timer backs off to 4x: 1 + 2 + 6 x 4
                // nominal intervals in all.
                let t = 4.096e-6 * f64::from(1u32 << self.cfg.qp_timeout);
                format!(
                    " (no progress through 7 retries, timeouts or sequence NAKs, about {:.1} s at -u {}: the peer is gone, or too slow?)",
                    27.0 * t,
                    self.cfg.qp_timeout
                )
            } else {
                String::new()
            };
            bail!(
                "completion with error: {} ({}) for wr_id {:#x} on QP 0x{:06x} ({:?}){hint}",
                wc_status_str(wc.status as u32),
                wc.status as u32,
                wc.wr_id,
                wc.qp_num,
                wc.queue
            );
        }
        Ok(())
    }

    /// Takes completions, waiting until at least one is there.
    pub(super) fn poll(&mut self, w: &mut Waiter, what: &dyn Fn() -> String) -> Result<()> {
        self.wcs.clear();
        loop {
            let n = self
                .cq
                .poll_into(64, &mut self.wcs)
                .context("poll CQ failed")?;
            if n > 0 {
                w.progressed();
                return Ok(());
            }
            w.idle(what)?;
        }
    }

    /// `--busy`, on a server with nothing to poll for: polls the (empty)
    /// CQ, each poll a turn of the device on this thread, until the client
    /// writes on the TCP connection (its report) or closes it, or for at
    /// most `timeout`; the blocking exchange then goes on as without it
    /// (and times out, if it must, as it would have).
    pub(super) fn busy_until_readable(
        &mut self,
        stream: &TcpStream,
        timeout: Option<Duration>,
    ) -> Result<()> {
        stream.set_nonblocking(true)?;
        let waited = self.poll_until_readable(stream, timeout);
        // Blocking again whatever happened, for the exchange that follows.
        stream.set_nonblocking(false)?;
        waited
    }

    fn poll_until_readable(&mut self, stream: &TcpStream, timeout: Option<Duration>) -> Result<()> {
        let start = std::time::Instant::now();
        let mut byte = [0u8; 1];
        while timeout.is_none_or(|t| start.elapsed() < t) {
            // A system call per 32 polls rather than per poll.
            for _ in 0..32 {
                self.wcs.clear();
                self.cq
                    .poll_into(64, &mut self.wcs)
                    .context("poll CQ failed")?;
                std::thread::yield_now();
            }
            match stream.peek(&mut byte) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Hands each completion of the last [`Self::poll`], its status
    /// checked, to `each` with the index of its QP.
    pub(super) fn each_polled(
        &mut self,
        mut each: impl FnMut(&mut Self, usize, &WorkCompletion) -> Result<()>,
    ) -> Result<()> {
        // Taken out and put back, so that the buffer is reused.
        let wcs = std::mem::take(&mut self.wcs);
        for wc in &wcs {
            self.check_wc(wc)?;
            let q = self.qp_index(wc)?;
            each(self, q, wc)?;
        }
        self.wcs = wcs;
        Ok(())
    }

    /// Posts message `wr_id` of a latency test on the one QP: `op` from
    /// the source slot, signaled.
    pub(super) fn post_lat(&self, wr_id: u64, op: SendOp) -> Result<()> {
        let sge = self.mrs[0].sge(self.lay.src_off as usize, self.cfg.size as u32);
        self.qps[0]
            .post_send(rc_wr(wr_id, op, sge, true))
            .with_context(|| format!("couldn't post send: scnt={wr_id}"))
    }

    /// Waits for the completion of the one send outstanding.
    pub(super) fn wait_send(&mut self, w: &mut Waiter, what: &dyn Fn() -> String) -> Result<()> {
        loop {
            self.poll(w, what)?;
            let wcs = std::mem::take(&mut self.wcs);
            let mut seen = false;
            for wc in &wcs {
                self.check_wc(wc)?;
                if wc.queue == WorkQueue::Send {
                    seen = true;
                } else {
                    bail!("unexpected receive completion on QP 0x{:06x}", wc.qp_num);
                }
            }
            self.wcs = wcs;
            if seen {
                return Ok(());
            }
        }
    }
}
