//! Memory that the application and the device use at the same time.
//!
//! A registered memory region is read and written by two parties that do not
//! take turns: the application (filling a send buffer, reading what a remote
//! RDMA WRITE put there) and the device's driver thread (copying payload in
//! and out for the network, executing remote atomics). On real hardware this
//! is DMA; in Rust, two threads touching the same bytes without
//! synchronisation is a data race and undefined behaviour, whatever the
//! bytes are.
//!
//! So the bytes of a region live in a [`SharedBuffer`]: an 8-byte aligned
//! array of `AtomicU64` words, accessed only through relaxed atomic loads,
//! stores and compare-exchanges. Concurrent accesses are then defined: each
//! word is read or written whole, and a write of part of a word merges its
//! bytes with a compare-exchange loop, so it never clobbers a neighbour's
//! concurrent write to the other bytes of that word. What a reader sees of a
//! range that a writer is changing at the same time is some mix of old and
//! new words, exactly as with DMA; the verbs rules (wait for the completion
//! before reading) are what make data consistent, not this module.
//!
//! There is no `unsafe` here: the buffer is owned by the region, the
//! registration copies the application's bytes in and deregistration hands
//! them back ([`SharedBuffer::into_vec`]), so no pointer to memory the device
//! does not own ever crosses the API. The cost is one copy at registration
//! and one at deregistration, and word-at-a-time copies on the data path.
//! All accesses use one size (64-bit words), because Rust does not define
//! racing atomic accesses of different sizes to the same location.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The bytes of a registered region, as the device reaches them: a
/// [`SharedBuffer`] that the region owns, or (in the drop-in
/// `libibverbs.so.1`) the application's own memory, read and written in
/// place. Implementations must make concurrent calls defined behaviour
/// (relaxed atomic accesses, as [`SharedBuffer`] does), because the
/// application and the device touch the bytes at the same time.
pub trait RegionBytes: Send + Sync + std::fmt::Debug {
    /// The number of bytes.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address of the first byte, the region's default virtual address.
    fn base_addr(&self) -> u64;

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange>;

    /// Copies `src` to the bytes starting at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange>;

    /// The aligned 8-byte word at `offset`, for atomics; `None` if the word
    /// at `offset` is not 8-byte aligned in memory or not inside.
    fn word(&self, offset: usize) -> Option<&AtomicU64>;

    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => {}
            _ => {
                return Err(OutOfRange {
                    offset,
                    len,
                    size: self.len(),
                })
            }
        }
        let chunk = [value; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The contents as an ordinary vector.
    fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        // The whole range is in bounds by construction.
        let _ = self.read(0, &mut v);
        v
    }
}

impl RegionBytes for SharedBuffer {
    fn len(&self) -> usize {
        self.len
    }
    fn base_addr(&self) -> u64 {
        SharedBuffer::base_addr(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        SharedBuffer::read(self, offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        SharedBuffer::write(self, offset, src)
    }
    fn word(&self, offset: usize) -> Option<&AtomicU64> {
        SharedBuffer::word(self, offset)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfRange> {
        SharedBuffer::fill(self, offset, len, value)
    }
    fn to_vec(&self) -> Vec<u8> {
        SharedBuffer::to_vec(self)
    }
}

/// Bytes shared between the application and the device; see the module
/// documentation for the contract.
#[derive(Debug)]
pub struct SharedBuffer {
    words: Box<[AtomicU64]>,
    len: usize,
}

/// An access outside the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bytes {offset}..{offset}+{len} are outside a buffer of {size} bytes")]
pub struct OutOfRange {
    pub offset: usize,
    pub len: usize,
    pub size: usize,
}

const W: usize = 8;

impl SharedBuffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> SharedBuffer {
        let n = len.div_ceil(W);
        let words = (0..n).map(|_| AtomicU64::new(0)).collect();
        SharedBuffer { words, len }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> SharedBuffer {
        let b = SharedBuffer::zeroed(bytes.len());
        // The buffer is not shared yet; the range is in bounds by construction.
        b.write(0, bytes).expect("in bounds");
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, as the default virtual address of a
    /// region (8-byte aligned, so that remote atomics on aligned virtual
    /// addresses fall on whole words).
    pub fn base_addr(&self) -> u64 {
        self.words.as_ptr() as usize as u64
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(offset, dst.len())?;
        // A partial first word, then whole words (fixed 8-byte copies the
        // compiler turns into plain moves: the data path's payload copy),
        // then a partial last word.
        let (wi, bi) = (offset / W, offset % W);
        let head = if bi == 0 { 0 } else { (W - bi).min(dst.len()) };
        let (first, rest) = dst.split_at_mut(head);
        if head > 0 {
            let word = self.words[wi].load(Relaxed).to_ne_bytes();
            first.copy_from_slice(&word[bi..bi + head]);
        }
        let wi = (offset + head) / W;
        let mut chunks = rest.chunks_exact_mut(W);
        let whole = chunks.len();
        for (d, w) in (&mut chunks).zip(&self.words[wi..wi + whole]) {
            d.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let word = self.words[wi + whole].load(Relaxed).to_ne_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
        Ok(())
    }

    /// Copies `src` to the bytes starting at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        self.check(offset, src.len())?;
        // Part of a word is merged, so that a concurrent write to the
        // word's other bytes survives; whole words are stored.
        let merge = |wi: usize, bi: usize, part: &[u8]| {
            let _ = self.words[wi].fetch_update(Relaxed, Relaxed, |old| {
                let mut b = old.to_ne_bytes();
                b[bi..bi + part.len()].copy_from_slice(part);
                Some(u64::from_ne_bytes(b))
            });
        };
        let (wi, bi) = (offset / W, offset % W);
        let head = if bi == 0 { 0 } else { (W - bi).min(src.len()) };
        let (first, rest) = src.split_at(head);
        if head > 0 {
            merge(wi, bi, first);
        }
        let wi = (offset + head) / W;
        let chunks = rest.chunks_exact(W);
        let whole = chunks.len();
        let tail = chunks.remainder();
        for (c, w) in chunks.zip(&self.words[wi..wi + whole]) {
            let mut b = [0u8; W];
            b.copy_from_slice(c);
            w.store(u64::from_ne_bytes(b), Relaxed);
        }
        if !tail.is_empty() {
            merge(wi + whole, 0, tail);
        }
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        let chunk = [value; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The 8-byte word at `offset` (which must be a multiple of 8), for
    /// atomics that the application and remote peers both apply.
    pub fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if offset % W != 0 {
            return None;
        }
        self.check(offset, W).ok()?;
        self.words.get(offset / W)
    }

    /// The contents as an ordinary vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v).expect("whole buffer");
        v
    }

    /// The contents, consuming the buffer.
    pub fn into_vec(self) -> Vec<u8> {
        self.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn base_is_word_aligned() {
        let b = SharedBuffer::zeroed(100);
        assert_eq!(b.base_addr() % 8, 0);
        assert_eq!(b.len(), 100);
    }

    #[test]
    fn out_of_range_is_refused_without_wrapping() {
        let b = SharedBuffer::zeroed(16);
        assert!(b.write(10, &[0; 7]).is_err());
        assert!(b.read(usize::MAX, &mut [0; 2]).is_err());
        assert!(b.write(16, &[]).is_ok());
        assert!(b.write(17, &[]).is_err());
        assert!(b.word(12).is_none());
        assert!(b.word(16).is_none());
        assert!(b.word(8).is_some());
    }

    #[test]
    fn partial_word_writes_do_not_clobber_neighbours_across_threads() {
        // Eight threads each own one byte of the same word and write it many
        // times; every byte must end with its own thread's last value.
        let b = std::sync::Arc::new(SharedBuffer::zeroed(8));
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        let hs: Vec<_> = (0..8u8)
            .map(|i| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for r in 0..rounds {
                        b.write(i as usize, &[(r as u8).wrapping_add(i)]).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let v = b.to_vec();
        for i in 0..8u8 {
            assert_eq!(v[i as usize], ((rounds - 1) as u8).wrapping_add(i));
        }
    }

    #[test]
    fn word_atomics_are_shared() {
        let b = SharedBuffer::zeroed(24);
        b.write(8, &5u64.to_ne_bytes()).unwrap();
        b.word(8).unwrap().fetch_add(3, Relaxed);
        let mut out = [0u8; 8];
        b.read(8, &mut out).unwrap();
        assert_eq!(u64::from_ne_bytes(out), 8);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 8 } else { 256 }))]
        #[test]
        fn behaves_like_a_byte_vector(
            init in proptest::collection::vec(any::<u8>(), 0..80),
            ops in proptest::collection::vec((0usize..90, proptest::collection::vec(any::<u8>(), 0..40)), 0..10),
        ) {
            let b = SharedBuffer::from_slice(&init);
            let mut model = init.clone();
            for (off, data) in ops {
                let r = b.write(off, &data);
                if off + data.len() <= model.len() {
                    prop_assert!(r.is_ok());
                    model[off..off + data.len()].copy_from_slice(&data);
                } else {
                    prop_assert!(r.is_err());
                }
                let mut got = vec![0u8; data.len()];
                let rr = b.read(off, &mut got);
                prop_assert_eq!(rr.is_ok(), off + data.len() <= model.len());
                if rr.is_ok() {
                    prop_assert_eq!(&got[..], &model[off..off + data.len()]);
                }
                // A read at another alignment, across several words.
                let (o2, n2) = (off % 13, data.len() * 2 + 3);
                let mut got = vec![0u8; n2];
                if b.read(o2, &mut got).is_ok() {
                    prop_assert_eq!(&got[..], &model[o2..o2 + n2]);
                } else {
                    prop_assert!(o2 + n2 > model.len());
                }
            }
            prop_assert_eq!(b.into_vec(), model);
        }
    }
}
