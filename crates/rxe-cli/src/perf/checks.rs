//! `--check` and `--chk-same-reads`: what the data of every message, READ
//! and atomic must be, and what the peer's buffer holds at the end.

use anyhow::{anyhow, bail, Result};
use rxe_verbs::WorkCompletion;

use super::handshake::Verb;
use super::setup::Perf;
use crate::pattern::{self, Role};

/// The number of a READ and the bytes it returned.
pub(super) type FirstRead = (u64, Vec<u8>);

/// `--chk-same-reads`: the first READ of each remote position, per QP,
/// and how many READs matched it.
pub(super) struct SameReads {
    pub(super) first: Vec<Vec<Option<FirstRead>>>,
    pub(super) count: Vec<Vec<u64>>,
}

impl SameReads {
    pub(super) fn new(qps: usize, positions: u64) -> SameReads {
        SameReads {
            first: vec![vec![None; positions as usize]; qps],
            count: vec![vec![0; positions as usize]; qps],
        }
    }

    /// Keeps `bytes` of READ `k` as the reference if it is the first READ
    /// of `pos`, else compares: Err((first READ's number, offset, got,
    /// expected)).
    pub(super) fn compare(
        &mut self,
        q: usize,
        pos: usize,
        k: u64,
        bytes: Vec<u8>,
    ) -> Result<(), (u64, usize, u8, u8)> {
        self.count[q][pos] += 1;
        match &self.first[q][pos] {
            None => {
                self.first[q][pos] = Some((k, bytes));
                Ok(())
            }
            Some((first, want)) => match (0..want.len()).find(|&i| bytes[i] != want[i]) {
                None => Ok(()),
                Some(i) => Err((*first, i, bytes[i], want[i])),
            },
        }
    }

    /// One line for the user: how much was compared, and whether the
    /// peer's bytes vary at all (a buffer of one byte value would hide a
    /// READ that returned the wrong part of it).
    pub(super) fn summary(&self) -> String {
        let reads: u64 = self.count.iter().flatten().sum();
        let firsts: Vec<&Vec<u8>> = self
            .first
            .iter()
            .flatten()
            .flatten()
            .map(|(_, b)| b)
            .collect();
        let uniform = firsts.iter().all(|b| b.windows(2).all(|w| w[0] == w[1]));
        format!(
            " Data check: {reads} READs, each the same bytes as the first READ of its position ({} positions){}",
            firsts.len(),
            if uniform { "; the peer's buffer is uniform, so this proves little" } else { "" }
        )
    }
}

/// The pattern the target region of QP `q` holds when the side owning it
/// fills it (READ and atomic tests with --check).
pub(super) fn target_pattern(q: usize, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    pattern::fill(&mut b, Role::Server, 0x8000 + q as u32, 0);
    b
}

fn word_at(b: &[u8], off: u64) -> u64 {
    let o = off as usize;
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_ne_bytes(w)
}

impl Perf<'_> {
    /// The value an atomic finds at message `k`'s word when every earlier
    /// one did its +1 (with --check), from the pattern the server wrote.
    fn atomic_expected(&self, k: u64, region: &[u8]) -> u64 {
        let pos = self.lay.remote(k);
        let visit = k / self.lay.positions;
        word_at(region, pos).wrapping_add(visit)
    }

    /// CMP_AND_SWAP's operands: perftest's (compare 0, swap 1), or with
    /// --check the value the word holds and that plus one, so that every
    /// swap succeeds and can be checked.
    pub(super) fn cmp_swap_values(&self, q: usize, k: u64) -> (u64, u64) {
        if self.cfg.check {
            let e = self.atomic_expected(k, &self.regions[q]);
            (e, e.wrapping_add(1))
        } else {
            (0, 1)
        }
    }

    /// --chk-same-reads: READ `k` of QP `q` has completed; its bytes must
    /// be those of the first READ of the same remote position.
    pub(super) fn compare_read(&self, q: usize, k: u64, reads: &mut SameReads) -> Result<()> {
        let mut buf = vec![0u8; self.cfg.size as usize];
        self.mrs[q].read(self.lay.local(k, true) as usize, &mut buf)?;
        let pos = (k % self.lay.positions) as usize;
        reads.compare(q, pos, k, buf).map_err(|(first, i, got, want)| {
            anyhow!(
                "READ {k} on QP 0x{:06x}: byte {i} is {got:#04x}, but READ {first} of the same bytes gave {want:#04x}",
                self.qps[q].qp_num()
            )
        })
    }

    /// --check on a bandwidth sender: messages `from..=to` of QP `q` have
    /// completed; READ data and atomic results must be right.
    pub(super) fn check_completed(
        &self,
        q: usize,
        from: u64,
        to: u64,
        region: &[u8],
    ) -> Result<()> {
        let size = self.cfg.size as usize;
        let mut buf = vec![0u8; size];
        for k in from..=to {
            let local = self.lay.local(k, true);
            match self.cfg.verb {
                Verb::Read => {
                    self.mrs[q].read(local as usize, &mut buf)?;
                    let pos = self.lay.remote(k) as usize;
                    if let Some(i) = (0..size).find(|&i| buf[i] != region[pos + i]) {
                        bail!(
                            "READ {k} on QP 0x{:06x}: byte {i} is {:#04x}, expected {:#04x}",
                            self.qps[q].qp_num(),
                            buf[i],
                            region[pos + i]
                        );
                    }
                }
                Verb::Atomic => {
                    let got = self.mrs[q].load_u64(local as usize)?;
                    let want = self.atomic_expected(k, region);
                    if got != want {
                        bail!(
                            "atomic {k} on QP 0x{:06x} found {got:#018x}, expected {want:#018x}",
                            self.qps[q].qp_num()
                        );
                    }
                }
                Verb::Write | Verb::Send => {}
            }
        }
        Ok(())
    }

    /// A received message: the right length, and with --check the peer's
    /// pattern for message `seq` on that QP.
    pub(super) fn received(
        &self,
        q: usize,
        wc: &WorkCompletion,
        seq: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        if u64::from(wc.byte_len) != self.cfg.size {
            bail!(
                "message {seq} on QP 0x{:06x}: {} bytes, expected {}",
                wc.qp_num,
                wc.byte_len,
                self.cfg.size
            );
        }
        if self.cfg.check {
            let off = self.lay.recv_off + wc.wr_id * self.lay.recv_slot;
            self.mrs[q].read(off as usize, buf)?;
            if let Err(m) = pattern::check(buf, self.role.peer(), q as u32, seq) {
                bail!(
                    "message {seq} on QP 0x{:06x}: data check failed: {m}",
                    wc.qp_num
                );
            }
        }
        Ok(())
    }

    /// --check on the server of the WRITE and atomic bandwidth tests: the
    /// buffer holds what the client's last request to each place left.
    pub(super) fn check_target(&self) -> Result<String> {
        let n = self.cfg.iters;
        let size = self.cfg.size as usize;
        for (q, mr) in self.mrs.iter().enumerate() {
            let who = || format!("QP 0x{:06x}", self.qps[q].qp_num());
            match self.cfg.verb {
                Verb::Write => {
                    let mut buf = vec![0u8; size];
                    let mut want = vec![0u8; size];
                    for (p, (k, _)) in self.lay.last_writers(n).into_iter().enumerate() {
                        let off = p as u64 * self.lay.step;
                        mr.read(off as usize, &mut buf)?;
                        pattern::fill(&mut want, Role::Client, q as u32, k);
                        if buf != want {
                            let i = (0..size).find(|&i| buf[i] != want[i]).unwrap_or(0);
                            bail!(
                                "{}: the buffer at offset {off} does not hold WRITE {k}: byte {i} is {:#04x}, expected {:#04x}",
                                who(),
                                buf[i],
                                want[i]
                            );
                        }
                    }
                }
                Verb::Atomic => {
                    let region = &self.regions[q];
                    for (p, (_, visits)) in self.lay.last_writers(n).into_iter().enumerate() {
                        let off = p as u64 * self.lay.step;
                        let got = mr.load_u64(off as usize)?;
                        let want = word_at(region, off).wrapping_add(visits);
                        if got != want {
                            bail!(
                                "{}: the word at offset {off} is {got:#018x} after {visits} atomics, expected {want:#018x}",
                                who()
                            );
                        }
                    }
                }
                Verb::Read | Verb::Send => {}
            }
        }
        let positions = self.lay.positions.min(n) as usize * self.mrs.len();
        Ok(match self.cfg.verb {
            Verb::Write => format!(
                " Data check: each of {positions} positions holds the last WRITE to it"
            ),
            Verb::Atomic => format!(
                " Data check: each of {positions} words holds its first value plus the number of atomics to it (each applied exactly once)"
            ),
            Verb::Read | Verb::Send => String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_reads_compares_with_the_first_read_of_each_position() {
        let mut r = SameReads::new(2, 2);
        assert_eq!(r.compare(0, 1, 7, vec![1, 2, 3]), Ok(()));
        assert_eq!(r.compare(0, 1, 9, vec![1, 2, 3]), Ok(()));
        // Another QP and another position have references of their own.
        assert_eq!(r.compare(1, 1, 0, vec![4, 5, 6]), Ok(()));
        assert_eq!(r.compare(0, 0, 8, vec![9, 9, 9]), Ok(()));
        assert_eq!(r.compare(0, 1, 11, vec![1, 0, 3]), Err((7, 1, 0, 2)));
        assert!(r.summary().starts_with(" Data check: 5 READs"));
        assert!(r.summary().contains("(3 positions)"));
        assert!(!r.summary().contains("uniform"));
        let mut u = SameReads::new(1, 1);
        u.compare(0, 0, 0, vec![0; 8]).unwrap();
        assert!(u.summary().contains("uniform"));
    }
}
