//! The latency loops: `ib_write_lat`, `ib_read_lat` and `ib_send_lat`.

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use rxe_verbs::{SendOp, WorkQueue};

use super::queues::Waiter;
use super::report::{self as rep, LatStats};
use super::setup::Perf;
use crate::pattern::{self, Role};

impl Perf<'_> {
    /// `ib_write_lat`: each side waits for the peer's iteration number in
    /// the last byte of its buffer, then writes its own message (its last
    /// byte the next number) into the peer's. The server writes first.
    pub(super) fn write_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let peer = self.theirs[0];
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let poll_at = size - 1;
        let server = self.role == Role::Server;
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; size];
        let mut want = vec![0u8; size];
        let mut byte = [0u8; 1];
        let mut empty = Vec::new();
        self.start = Instant::now();
        while scnt < n || ccnt < n || rcnt < n {
            if rcnt < n && !(scnt < 1 && server) {
                rcnt += 1;
                loop {
                    mr.read(poll_at, &mut byte)?;
                    if byte[0] == rcnt as u8 {
                        break;
                    }
                    // An empty poll makes the device work on this thread.
                    self.cq.poll_into(0, &mut empty)?;
                    let what = || format!("waiting for the peer's WRITE {rcnt} of {n}");
                    w.idle(&what)?;
                }
                w.progressed();
                if cfg.check && size > 1 {
                    mr.read(0, &mut buf)?;
                    pattern::fill(&mut want, self.role.peer(), 0, rcnt - 1);
                    if let Some(i) = (0..size - 1).find(|&i| buf[i] != want[i]) {
                        bail!(
                            "WRITE {} from the peer: byte {i} is {:#04x}, expected {:#04x}",
                            rcnt - 1,
                            buf[i],
                            want[i]
                        );
                    }
                }
            }
            if scnt < n {
                if cfg.check {
                    pattern::fill(&mut buf, self.role, 0, scnt);
                    mr.write(src, &buf)?;
                }
                scnt += 1;
                mr.write(src + size - 1, &[scnt as u8])?;
                posted.push(self.now());
                let op = SendOp::RdmaWrite {
                    remote_addr: peer.vaddr,
                    rkey: peer.rkey,
                };
                self.post_lat(scnt, op)?;
            }
            if ccnt < n {
                let what = || format!("waiting for the completion of WRITE {ccnt} of {n}");
                self.wait_send(&mut w, &what)?;
                ccnt += 1;
            }
        }
        rep::lat_stats(&posted, 2).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// `ib_read_lat`'s client: one READ at a time.
    pub(super) fn read_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let peer = self.theirs[0];
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let region = self.regions[0].clone();
        let mut buf = vec![0u8; size];
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        self.start = Instant::now();
        for k in 0..n {
            posted.push(self.now());
            let op = SendOp::RdmaRead {
                remote_addr: peer.vaddr,
                rkey: peer.rkey,
            };
            self.post_lat(k, op)?;
            let what = || format!("waiting for READ {k} of {n}");
            self.wait_send(&mut w, &what)?;
            if cfg.check {
                mr.read(src, &mut buf)?;
                if let Some(i) = (0..size).find(|&i| buf[i] != region[i]) {
                    bail!(
                        "READ {k}: byte {i} is {:#04x}, expected {:#04x}",
                        buf[i],
                        region[i]
                    );
                }
            }
        }
        rep::lat_stats(&posted, 1).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// `ib_send_lat`: SENDs back and forth, the client first.
    pub(super) fn send_lat(&mut self) -> Result<LatStats> {
        let cfg = self.cfg;
        let n = cfg.iters;
        let size = cfg.size as usize;
        let mr = self.mrs[0].clone();
        let src = self.lay.src_off as usize;
        let client = self.role == Role::Client;
        let mut c = LatCounts {
            recv_posted: u64::from(cfg.rx_depth).min(n),
            ..LatCounts::default()
        };
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        let mut posted = Vec::with_capacity(n as usize);
        let mut w = Waiter::new(cfg.timeout);
        let mut buf = vec![0u8; size];
        let mut rbuf = vec![0u8; size];
        self.start = Instant::now();
        while scnt < n || rcnt < n {
            if rcnt < n && !(scnt < 1 && client) {
                // The peer's answer may have come before our last send's
                // acknowledgement: it is counted as soon as it is seen.
                while c.seen <= rcnt {
                    let what = || format!("waiting for message {rcnt} of {n} from the peer");
                    self.pump(&mut w, &mut c, &mut rbuf, &what)?;
                }
                rcnt += 1;
            }
            if scnt < n {
                while c.sent < scnt {
                    let what = || format!("waiting for the completion of send {scnt} of {n}");
                    self.pump(&mut w, &mut c, &mut rbuf, &what)?;
                }
                if cfg.check {
                    pattern::fill(&mut buf, self.role, 0, scnt);
                    mr.write(src, &buf)?;
                }
                posted.push(self.now());
                self.post_lat(scnt, SendOp::Send)?;
                scnt += 1;
            }
        }
        while c.sent < scnt {
            let what = || format!("waiting for the completion of the last send of {n}");
            self.pump(&mut w, &mut c, &mut rbuf, &what)?;
        }
        rep::lat_stats(&posted, 2).ok_or_else(|| anyhow!("too few iterations"))
    }

    /// One poll of `send_lat`: counts send completions, checks and counts
    /// receives (in order: RC delivers in order) and reposts them. `buf`
    /// (the message size) holds a received message for its check.
    fn pump(
        &mut self,
        w: &mut Waiter,
        c: &mut LatCounts,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        self.poll(w, what)?;
        let wcs = std::mem::take(&mut self.wcs);
        for wc in &wcs {
            self.check_wc(wc)?;
            match wc.queue {
                WorkQueue::Send => c.sent += 1,
                WorkQueue::Recv => {
                    self.received(0, wc, c.seen, buf)?;
                    c.seen += 1;
                    if c.recv_posted < self.cfg.iters {
                        self.post_recv(0, wc.wr_id)?;
                        c.recv_posted += 1;
                    }
                }
            }
        }
        self.wcs = wcs;
        Ok(())
    }
}

/// Progress of `send_lat`.
#[derive(Debug, Default)]
struct LatCounts {
    /// Send completions.
    sent: u64,
    /// Receive completions.
    seen: u64,
    recv_posted: u64,
}
