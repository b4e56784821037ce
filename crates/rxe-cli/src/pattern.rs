//! Payload patterns for `rxe pingpong -c`: every message gets bytes that
//! depend on who sent it, on which QP, and on its sequence number, so that a
//! receiver can tell a right message from a stale, misplaced, truncated or
//! corrupted one.
//!
//! The real pingpong tools send whatever their buffer holds (0x7b bytes),
//! so this check only means something when both sides are `rxe`.

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

impl Role {
    pub fn peer(self) -> Role {
        match self {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        }
    }
}

/// The first byte that differs from the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset} is {got:#04x}, expected {expected:#04x}")]
pub struct Mismatch {
    pub offset: usize,
    pub got: u8,
    pub expected: u8,
}

/// SplitMix64: a cheap, well-mixed step.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn seed(role: Role, qp_index: u32, seq: u64) -> u64 {
    let r = match role {
        Role::Client => 0xc1,
        Role::Server => 0x5e,
    };
    mix(seq ^ (u64::from(qp_index) << 40) ^ (r << 56))
}

/// Calls `f` with each 8-byte word of the pattern (the last one cut short).
fn words(role: Role, qp_index: u32, seq: u64, len: usize, mut f: impl FnMut(usize, &[u8])) {
    let s = seed(role, qp_index, seq);
    let mut at = 0;
    let mut k = 0u64;
    while at < len {
        let w = mix(s ^ k).to_le_bytes();
        let n = (len - at).min(8);
        f(at, &w[..n]);
        at += n;
        k += 1;
    }
}

/// Fills `buf` with the pattern of message `seq` sent by `role` on QP
/// `qp_index`.
pub fn fill(buf: &mut [u8], role: Role, qp_index: u32, seq: u64) {
    let len = buf.len();
    words(role, qp_index, seq, len, |at, w| {
        buf[at..at + w.len()].copy_from_slice(w)
    });
}

/// Checks that `buf` holds exactly the pattern [`fill`] would write.
pub fn check(buf: &[u8], role: Role, qp_index: u32, seq: u64) -> Result<(), Mismatch> {
    let mut first = None;
    words(role, qp_index, seq, buf.len(), |at, w| {
        if first.is_none() && buf[at..at + w.len()] != *w {
            let i = (0..w.len()).find(|i| buf[at + i] != w[*i]).unwrap_or(0);
            first = Some(Mismatch {
                offset: at + i,
                got: buf[at + i],
                expected: w[i],
            });
        }
    });
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_passes_for_every_length() {
        for len in [0, 1, 7, 8, 9, 63, 4096, 65536] {
            let mut b = vec![0u8; len];
            fill(&mut b, Role::Client, 3, 17);
            check(&b, Role::Client, 3, 17).unwrap();
        }
    }

    #[test]
    fn every_input_changes_the_bytes() {
        let mut a = vec![0u8; 64];
        fill(&mut a, Role::Client, 0, 5);
        assert!(check(&a, Role::Client, 0, 6).is_err());
        assert!(check(&a, Role::Server, 0, 5).is_err());
        assert!(check(&a, Role::Client, 1, 5).is_err());
        // One byte is enough to differ.
        let mut one = [0u8; 1];
        let distinct: std::collections::HashSet<u8> = (0..64)
            .map(|s| {
                fill(&mut one, Role::Server, 0, s);
                one[0]
            })
            .collect();
        assert!(distinct.len() > 32);
    }

    #[test]
    fn reports_the_first_wrong_byte() {
        let mut b = vec![0u8; 100];
        fill(&mut b, Role::Server, 2, 9);
        let want = b[42];
        b[42] ^= 0x10;
        b[80] ^= 1;
        assert_eq!(
            check(&b, Role::Server, 2, 9),
            Err(Mismatch {
                offset: 42,
                got: want ^ 0x10,
                expected: want
            })
        );
        assert_eq!(Role::Client.peer(), Role::Server);
    }
}
