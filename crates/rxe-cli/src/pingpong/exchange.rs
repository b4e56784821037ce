//! The tools' loop: posting receives and sends, waiting for completions
//! (polling or on events), and checking what arrives.

use anyhow::{anyhow, bail, Context, Result};
use rxe_core::wire::grh::HEADER_LEN as GRH_LEN;
use rxe_verbs::{
    NotifyKind, RecvWr, SendData, SendOp, SendWr, UdDest, VerbsError, WcStatus, WorkCompletion,
};

use super::config::{Check, Kind};
use super::session::{Pingpong, UD_QKEY};
use crate::busy_poll::BusyPoll;
use crate::ibv_format::wc_status_str;
use crate::pattern::{self, Role};

/// The low two bits of a wr_id: which work queue it is of, as the tools'
/// `PINGPONG_RECV_WRID` and `PINGPONG_SEND_WRID`.
pub(super) const RECV_WRID: u64 = 1;
pub(super) const SEND_WRID: u64 = 2;

impl Pingpong {
    fn slot_offset(&self, slot: usize) -> usize {
        slot * self.cfg.recv_len()
    }

    fn send_offset(&self, qp_index: usize) -> usize {
        self.cfg.recv_len() * self.cfg.rx_depth as usize + qp_index * self.cfg.size
    }

    /// Posts up to `n` receives (to the SRQ or the one QP); returns how many.
    pub(super) fn post_recvs(&mut self, n: u32) -> Result<u32> {
        let mut done = 0;
        while done < n {
            let Some(slot) = self.free_slots.pop() else {
                break;
            };
            let wr = RecvWr {
                wr_id: (slot as u64) << 2 | RECV_WRID,
                sg_list: [self
                    .mr
                    .sge(self.slot_offset(slot), self.cfg.recv_len() as u32)]
                .into(),
            };
            let r = match &self.srq {
                Some(s) => s.post_recv(wr),
                None => self.qps[0].post_recv(wr),
            };
            if let Err(e) = r {
                self.free_slots.push(slot);
                if done == 0 {
                    return Err(e).context("couldn't post receive");
                }
                break;
            }
            done += 1;
            self.posted += 1;
        }
        Ok(done)
    }

    pub(super) fn post_send(&mut self, i: usize) -> Result<()> {
        let off = self.send_offset(i);
        if self.cfg.check != Check::Off {
            let seq = self.progress[i].sent;
            let buf = &mut self.scratch[..self.cfg.size];
            pattern::fill(buf, self.role, i as u32, seq);
            self.mr.write(off, buf)?;
        }
        let ud = match (&self.ah, self.cfg.kind) {
            (Some(ah), Kind::Ud) => Some(ah.ud_dest(self.theirs[i].qpn, UD_QKEY)),
            _ => None::<UdDest>,
        };
        self.qps[i]
            .post_send(SendWr {
                wr_id: (i as u64) << 2 | SEND_WRID,
                op: SendOp::Send,
                data: SendData::Sge(self.mr.sge(off, self.cfg.size as u32)),
                signaled: true,
                fence: false,
                solicited: false,
                ud,
            })
            .context("couldn't post send")?;
        self.progress[i].sent += 1;
        Ok(())
    }

    /// Waits for completions: on an event with `-e`, else by polling.
    fn next_completions(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<()> {
        out.clear();
        let stuck = || {
            let secs = self.cfg.timeout.unwrap_or_default().as_secs_f64();
            match self.cfg.kind {
                Kind::Uc | Kind::Ud => anyhow!(
                    "no completion for {secs:.1} s: the peer stopped or is gone (same -n on both sides?), or a packet was lost ({} does not retransmit)",
                    self.cfg.qp_type()
                ),
                Kind::Rc | Kind::Srq => anyhow!(
                    "no completion for {secs:.1} s: the peer stopped or is gone (same -n on both sides?)"
                ),
            }
        };
        if self.cfg.events {
            match self.cq.wait(self.cfg.timeout) {
                Ok(()) => {}
                Err(VerbsError::Timeout) => return Err(stuck()),
                Err(e) => return Err(e).context("failed to get a CQ event"),
            }
            self.cq.req_notify(NotifyKind::NextCompletion)?;
            self.cq.poll_into(max, out).context("poll CQ failed")?;
            return Ok(());
        }
        let mut w = BusyPoll::new(self.cfg.timeout);
        loop {
            if self.cq.poll_into(max, out).context("poll CQ failed")? > 0 {
                return Ok(());
            }
            if w.idle() {
                return Err(stuck());
            }
        }
    }

    /// The tools' loop: count sends and receives, refill receives when
    /// they run low, and send again on a QP once its last send and receive
    /// have both completed.
    pub(super) fn exchange(&mut self) -> Result<()> {
        let iters = self.cfg.iters;
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        let max = if self.cfg.kind == Kind::Srq {
            (self.cfg.rx_depth + self.cfg.num_qp) as usize
        } else {
            2
        };
        let low = if self.cfg.kind == Kind::Srq {
            self.cfg.num_qp
        } else {
            1
        };
        let mut wcs = Vec::with_capacity(max);
        while rcnt < iters || scnt < iters {
            self.next_completions(max, &mut wcs)?;
            for wc in wcs.iter() {
                if wc.status != WcStatus::Success {
                    bail!(
                        "Failed status {} ({}) for wr_id {}",
                        wc_status_str(wc.status as u32),
                        wc.status as u32,
                        wc.wr_id
                    );
                }
                let qi = *self
                    .by_qpn
                    .get(&wc.qp_num)
                    .ok_or_else(|| anyhow!("Couldn't find QPN {:06x}", wc.qp_num))?;
                let kind = wc.wr_id & 3;
                match kind {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        let slot = (wc.wr_id >> 2) as usize;
                        if self.cfg.check != Check::Off {
                            self.verify(wc, qi, slot)?;
                        }
                        self.progress[qi].received += 1;
                        self.free_slots.push(slot);
                        self.posted -= 1;
                        if self.posted <= low {
                            let want = self.cfg.rx_depth - self.posted;
                            self.post_recvs(want)?;
                            if self.posted < self.cfg.rx_depth {
                                bail!("Couldn't post receive ({})", self.posted);
                            }
                        }
                        rcnt += 1;
                    }
                    _ => bail!("Completion for unknown wr_id {}", wc.wr_id),
                }
                self.progress[qi].pending &= !kind;
                if scnt < iters && self.progress[qi].pending == 0 {
                    self.post_send(qi)?;
                    self.progress[qi].pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(())
    }

    /// `-c`: the message is the peer's next on this QP, whole and intact.
    /// `--chk-echo`: it is our own message before it, sent back.
    fn verify(&mut self, wc: &WorkCompletion, qi: usize, slot: usize) -> Result<()> {
        let seq = self.progress[qi].received;
        let ud = self.cfg.kind == Kind::Ud;
        let want = self.cfg.recv_len();
        let what = || {
            format!(
                "message {seq} from the {} on QP 0x{:06x}",
                match self.role.peer() {
                    Role::Client => "client",
                    Role::Server => "server",
                },
                self.qps[qi].qp_num()
            )
        };
        if wc.byte_len as usize != want {
            bail!("{}: {} bytes, expected {want}", what(), wc.byte_len);
        }
        if ud {
            if !wc.grh {
                bail!("{}: no GRH", what());
            }
            if wc.src_qp != self.theirs[qi].qpn {
                bail!(
                    "{}: from QP 0x{:06x}, expected 0x{:06x}",
                    what(),
                    wc.src_qp,
                    self.theirs[qi].qpn
                );
            }
        }
        // Whose pattern, of which of its messages, this one must be.
        let (from, of) = match (self.cfg.check, self.role) {
            (Check::Echo, Role::Client) => (self.role, seq),
            // A client tool's first message is its initial buffer; then
            // it sends back our message 0, 1, ...
            (Check::Echo, Role::Server) if seq == 0 => return Ok(()),
            (Check::Echo, Role::Server) => (self.role, seq - 1),
            _ => (self.role.peer(), seq),
        };
        let off = self.slot_offset(slot) + if ud { GRH_LEN } else { 0 };
        let buf = &mut self.scratch[..self.cfg.size];
        self.mr.read(off, buf)?;
        if let Err(m) = pattern::check(buf, from, qi as u32, of) {
            let whose = if self.cfg.check == Check::Echo {
                format!(" (expected our message {of} sent back)")
            } else {
                String::new()
            };
            bail!("{}: data check failed{whose}: {m}", what());
        }
        Ok(())
    }
}
