//! Where things are in each QP's memory region: the target the peer
//! works on, the local slots, the receive slots.

use anyhow::{bail, Result};

use super::config::Config;

/// Largest buffer a QP may need.
const MAX_BUFFER: u64 = 1 << 30;

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to.max(1)) * to.max(1)
}

/// Where things are in each QP's memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    /// Bytes the peer targets with WRITEs, READs and atomics, at offset 0
    /// (the address in our key message).
    pub(super) target: u64,
    /// Remote address step and how many steps before it wraps: a
    /// bandwidth sender walks the peer's buffer (of the same size as
    /// ours) in cache-line steps when messages fit twice in the cycle.
    pub(super) step: u64,
    pub(super) positions: u64,
    /// Send / READ destination / atomic result slots.
    pub(super) src_off: u64,
    pub(super) src_slot: u64,
    pub(super) src_slots: u64,
    /// Receive slots (SEND tests).
    pub(super) recv_off: u64,
    pub(super) recv_slot: u64,
    pub(super) recv_slots: u64,
    pub(super) total: u64,
}

impl Layout {
    pub(super) fn new(cfg: &Config, cycle: u64, cache: u64) -> Result<Layout> {
        let size = cfg.size;
        let cache = cache.max(8);
        let target = round_up(size.max(cycle), cache);
        let step = round_up(size, cache);
        let positions = if size <= cycle / 2 {
            (cycle / step).max(1)
        } else {
            1
        };
        let slot = round_up(size, 8);
        let (src_slot, src_slots) = if cfg.lat {
            (slot, 1)
        } else if cfg.own_slots() {
            (slot, u64::from(cfg.tx_depth))
        } else {
            // Without checks the sender's own address walks as the
            // remote one does, through a buffer of the target's size.
            (target, 1)
        };
        // With --check each receive has its own slot, so that a message
        // is checked where it landed; without, all share one, as
        // perftest's receives of large messages do: rx_depth slots of a
        // MiB each would be hundreds of MiB first touched (page faults,
        // zeroing) on the receiver's CPU, which is no part of moving data.
        let (recv_slot, recv_slots) = if cfg.receives() && cfg.check {
            (slot, u64::from(cfg.rx_depth))
        } else if cfg.receives() {
            (slot, 1)
        } else {
            (0, 0)
        };
        let src_off = target;
        let recv_off = src_off + src_slot * src_slots;
        let total = recv_off + recv_slot * recv_slots;
        if total > MAX_BUFFER {
            bail!(
                "size {size} with these depths needs {total} bytes of buffers per QP, more than {MAX_BUFFER}"
            );
        }
        Ok(Layout {
            target,
            step,
            positions,
            src_off,
            src_slot,
            src_slots,
            recv_off,
            recv_slot,
            recv_slots,
            total,
        })
    }

    /// Offset in the peer's buffer of bandwidth message `k`.
    pub(super) fn remote(&self, k: u64) -> u64 {
        (k % self.positions) * self.step
    }

    /// Offset in our region of the local side of bandwidth message `k`.
    pub(super) fn local(&self, k: u64, check: bool) -> u64 {
        if check {
            self.src_off + (k % self.src_slots) * self.src_slot
        } else {
            self.src_off + self.remote(k)
        }
    }

    /// The last message (below `n`) to land at each position of the
    /// target, with the number that did: what the buffer shows at the end.
    pub(super) fn last_writers(&self, n: u64) -> Vec<(u64, u64)> {
        (0..self.positions.min(n))
            .map(|p| {
                let visits = n / self.positions + u64::from(p < n % self.positions);
                (p + (visits - 1) * self.positions, visits)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::perf::config::parse_config as cfg;

    #[test]
    fn layout_walks_the_peer_buffer_as_perftest() {
        // ib_atomic_bw: 8-byte atomics 64 bytes apart through a 4 KiB cycle.
        let c = cfg(&["atomic", "-n", "100"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.step, l.positions), (4096, 64, 64));
        assert_eq!(l.remote(0), 0);
        assert_eq!(l.remote(63), 0xfc0);
        assert_eq!(l.remote(64), 0);
        // 100 atomics over 64 words: words 0..36 twice, the rest once.
        let lw = l.last_writers(100);
        assert_eq!(lw.len(), 64);
        assert_eq!(lw[0], (64, 2));
        assert_eq!(lw[35], (99, 2));
        assert_eq!(lw[36], (36, 1));
        assert_eq!(l.last_writers(10).len(), 10);
        // Messages over half the cycle all go to the start.
        let c = cfg(&["write", "-s", "4096"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.positions), (4096, 1));
        assert_eq!(l.last_writers(7), vec![(6, 7)]);
        let c = cfg(&["write", "-s", "65536", "--check", "-t", "4"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.target, l.src_slots, l.src_slot), (65536, 4, 65536));
        assert_eq!(l.local(5, true), 65536 + 65536);
        let c = cfg(&["send", "-s", "100", "-r", "10", "-n", "50", "--check"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.recv_slots, l.recv_slot), (10, 104));
        assert_eq!(l.total, l.recv_off + 1040);
        // Without checks the receives share one slot.
        let c = cfg(&["send", "-s", "100", "-r", "10", "-n", "50"]).unwrap();
        let l = Layout::new(&c, 4096, 64).unwrap();
        assert_eq!((l.recv_slots, l.recv_slot), (1, 104));
        assert_eq!(l.total, l.recv_off + 104);
        let c = cfg(&["write", "-s", "1000000000", "-t", "8"]).unwrap();
        assert!(Layout::new(&c, 4096, 64).is_err());
    }
}
