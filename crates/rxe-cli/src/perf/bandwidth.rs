//! The bandwidth loops: the client keeping `-t` requests outstanding
//! per QP, and the SEND server counting what arrives.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rxe_verbs::{SendOp, SendWr, WorkQueue};

use super::checks::SameReads;
use super::handshake::{Report, Verb};
use super::queues::{rc_wr, Waiter};
use super::report as rep;
use super::setup::Perf;
use crate::pattern::{self, Role};

impl Perf<'_> {
    /// The work request of bandwidth message `k` on QP `q`.
    fn bw_request(&self, q: usize, k: u64, signaled: bool) -> Result<SendWr> {
        let cfg = self.cfg;
        let peer = self.theirs[q];
        let mr = &self.mrs[q];
        let local = self.lay.local(k, cfg.own_slots());
        let remote_addr = peer.vaddr.wrapping_add(self.lay.remote(k));
        let size = cfg.size as u32;
        let op = match cfg.verb {
            Verb::Write => SendOp::RdmaWrite {
                remote_addr,
                rkey: peer.rkey,
            },
            Verb::Read => SendOp::RdmaRead {
                remote_addr,
                rkey: peer.rkey,
            },
            Verb::Send => SendOp::Send,
            Verb::Atomic => {
                let (compare, swap) = self.cmp_swap_values(q, k);
                if cfg.cmp_swap {
                    SendOp::CmpSwap {
                        remote_addr,
                        rkey: peer.rkey,
                        compare,
                        swap,
                    }
                } else {
                    SendOp::FetchAdd {
                        remote_addr,
                        rkey: peer.rkey,
                        add: 1,
                    }
                }
            }
        };
        if cfg.check && matches!(cfg.verb, Verb::Write | Verb::Send) {
            let mut buf = vec![0u8; cfg.size as usize];
            pattern::fill(&mut buf, Role::Client, q as u32, k);
            mr.write(local as usize, &buf)?;
        }
        Ok(rc_wr(
            (q as u64) << 48 | k,
            op,
            mr.sge(local as usize, size),
            signaled,
        ))
    }

    /// The bandwidth client: every QP keeps up to -t requests outstanding
    /// and asks for a completion every `cq_mod`-th and at its last.
    pub(super) fn bw_sender(&mut self) -> Result<Report> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let nq = self.qps.len();
        let total = n as usize * nq;
        let mut scnt = vec![0u64; nq];
        let mut ccnt = vec![0u64; nq];
        // Every post and completion for the peak, or only the ends.
        let keep_all = total <= rep::PEAK_LIMIT;
        let mut posted = Vec::with_capacity(if keep_all { total } else { 1 });
        let mut completed: Vec<(u64, Duration)> = Vec::new();
        let mut done = 0usize;
        let regions = self.regions.clone();
        let mut reads = SameReads::new(nq, self.lay.positions);
        let mut w = Waiter::new(cfg.timeout);
        self.start = Instant::now();
        while done < total {
            for q in 0..nq {
                while scnt[q] < n && scnt[q] - ccnt[q] < u64::from(cfg.tx_depth) {
                    let k = scnt[q];
                    let signaled = (k + 1) % u64::from(cfg.cq_mod) == 0 || k + 1 == n;
                    let wr = self.bw_request(q, k, signaled)?;
                    if keep_all || posted.is_empty() {
                        posted.push(self.now());
                    }
                    self.qps[q]
                        .post_send(wr)
                        .with_context(|| format!("couldn't post send: scnt={k}"))?;
                    scnt[q] += 1;
                }
            }
            let what = || format!("{done} of {total} requests completed");
            self.poll(&mut w, &what)?;
            let t = self.now();
            self.each_polled(|s, q, wc| {
                let k = wc.wr_id & ((1 << 48) - 1);
                if k < ccnt[q] || k >= scnt[q] {
                    bail!("completion for wr_id {:#x} out of order", wc.wr_id);
                }
                if cfg.check {
                    s.check_completed(q, ccnt[q], k, &regions[q])?;
                }
                if cfg.same_reads {
                    for j in ccnt[q]..=k {
                        s.compare_read(q, j, &mut reads)?;
                    }
                }
                done += (k + 1 - ccnt[q]) as usize;
                ccnt[q] = k + 1;
                if !keep_all {
                    completed.clear();
                }
                completed.push((done as u64 - 1, t));
                Ok(())
            })?;
        }
        if cfg.same_reads {
            self.data_note = Some(reads.summary());
        }
        Ok(rep::bw_report(
            cfg.size,
            total as u64,
            &posted,
            &completed,
            cfg.unit,
        ))
    }

    /// The SEND bandwidth server: counts (and with --check verifies) what
    /// arrives, reposting receives while more are due.
    pub(super) fn send_receiver(&mut self) -> Result<Report> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let nq = self.qps.len();
        let total = n * nq as u64;
        let mut rcnt = vec![0u64; nq];
        let mut posted = vec![u64::from(cfg.rx_depth).min(n); nq];
        let mut got = 0u64;
        let (mut first, mut last) = (None, Duration::ZERO);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; cfg.size as usize];
        self.start = Instant::now();
        while got < total {
            let what = || format!("{got} of {total} messages received");
            self.poll(&mut w, &what)?;
            let t = self.now();
            self.each_polled(|s, q, wc| {
                if wc.queue != WorkQueue::Recv {
                    return Ok(());
                }
                s.received(q, wc, rcnt[q], &mut buf)?;
                rcnt[q] += 1;
                got += 1;
                first.get_or_insert(t);
                last = t;
                if posted[q] < n {
                    s.post_recv(q, wc.wr_id)?;
                    posted[q] += 1;
                }
                Ok(())
            })?;
        }
        Ok(rep::recv_report(
            cfg.size,
            total,
            first.unwrap_or_default(),
            last,
            cfg.unit,
        ))
    }
}
