//! The application's own memory, read and written in place by the device.
//!
//! This is the one module that touches the bytes of registered regions
//! (and of inline sends). `ibv_reg_mr(3)` is the contract: the memory at
//! `addr..addr+length` stays valid and mapped until `ibv_dereg_mr`. The
//! device's threads and the application then use the bytes at the same
//! time, as DMA would, so every access here is atomic and relaxed: 8-byte
//! `AtomicU64` loads/stores on aligned words, `AtomicU8` at the unaligned
//! edges. These compile to plain moves and make concurrent device access
//! defined behaviour on the Rust side (what the application's own plain C
//! accesses do is governed by the verbs rules: wait for the completion).
//! Copies go in increasing address order, so within one packet the last
//! byte is written last, which `ib_write_lat` polls on.
//!
//! Remote atomics use [`RegionBytes::word`], a real `AtomicU64` over the
//! application's aligned word, so they are atomic with the CPU's own
//! atomics on that word.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use rxe_verbs::shared_buffer::{OutOfRange, RegionBytes};
use rxe_verbs::InlineData;

/// `len` bytes of someone else's memory at `ptr`.
#[derive(Debug)]
pub struct ForeignBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the bytes are only accessed through atomics (see the module
// documentation), which any thread may do; the owner's contract keeps the
// memory valid for the region's life.
unsafe impl Send for ForeignBytes {}
// SAFETY: as for Send: shared access is atomic only.
unsafe impl Sync for ForeignBytes {}

impl ForeignBytes {
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay so while
    /// the value (or any clone of an `Arc` holding it) lives; the range
    /// must not wrap the address space.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> ForeignBytes {
        ForeignBytes { ptr, len }
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

    fn at(&self, offset: usize) -> *mut u8 {
        // In bounds (or one past) by the callers' checks; wrapping_add keeps
        // the arithmetic free of UB on its own.
        self.ptr.as_ptr().wrapping_add(offset)
    }

    /// The `len` bytes at `offset` (checked by the caller) as a copy goes
    /// through them: bytes up to the first 8-aligned address, whole words,
    /// then the bytes after the last whole word. Whole words as one slice
    /// (as `SharedBuffer` copies) rather than an alignment test per word:
    /// the per-word test made the drop-in library's copy out of a region a
    /// fifth of `ib_write_bw`'s samples, twice the device's own.
    fn span(&self, offset: usize, len: usize) -> Span<'_> {
        let start = self.at(offset);
        let head = ((start as usize).wrapping_neg() % 8).min(len);
        Span {
            start,
            head,
            whole: (len - head) / 8,
            _bytes: std::marker::PhantomData,
        }
    }
}

/// See [`ForeignBytes::span`].
struct Span<'a> {
    start: *mut u8,
    /// Bytes before the first aligned word.
    head: usize,
    /// Whole words after them.
    whole: usize,
    _bytes: std::marker::PhantomData<&'a ForeignBytes>,
}

impl<'a> Span<'a> {
    fn words(&self) -> &'a [AtomicU64] {
        if self.whole == 0 {
            return &[];
        }
        let first = self.start.wrapping_add(self.head).cast::<AtomicU64>();
        // SAFETY: `first` is 8-aligned (past the head) and the whole words
        // lie inside the region (the caller checked offset..offset+len),
        // which the contract keeps valid while the ForeignBytes this borrows
        // lives; AtomicU64 has u64's size and alignment, and every access
        // from Rust to these bytes is atomic.
        unsafe { std::slice::from_raw_parts(first, self.whole) }
    }

    /// The first byte after the whole words.
    fn tail(&self) -> *mut u8 {
        self.start.wrapping_add(self.head + self.whole * 8)
    }
}

impl RegionBytes for ForeignBytes {
    fn len(&self) -> usize {
        self.len
    }

    fn base_addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(offset, dst.len())?;
        let span = self.span(offset, dst.len());
        let (head, rest) = dst.split_at_mut(span.head);
        for (i, d) in head.iter_mut().enumerate() {
            // SAFETY: inside the region (checked above), which the contract
            // keeps valid; AtomicU8 has no alignment requirement.
            *d = unsafe { AtomicU8::from_ptr(span.start.wrapping_add(i)) }.load(Relaxed);
        }
        let mut chunks = rest.chunks_exact_mut(8);
        for (d, w) in (&mut chunks).zip(span.words()) {
            d.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
        }
        for (i, d) in chunks.into_remainder().iter_mut().enumerate() {
            // SAFETY: as for the head.
            *d = unsafe { AtomicU8::from_ptr(span.tail().wrapping_add(i)) }.load(Relaxed);
        }
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        self.check(offset, src.len())?;
        let span = self.span(offset, src.len());
        let (head, rest) = src.split_at(span.head);
        for (i, &b) in head.iter().enumerate() {
            // SAFETY: as in read.
            unsafe { AtomicU8::from_ptr(span.start.wrapping_add(i)) }.store(b, Relaxed);
        }
        let mut chunks = rest.chunks_exact(8);
        for (s, w) in (&mut chunks).zip(span.words()) {
            let mut b = [0u8; 8];
            b.copy_from_slice(s);
            w.store(u64::from_ne_bytes(b), Relaxed);
        }
        for (i, &b) in chunks.remainder().iter().enumerate() {
            // SAFETY: as in read.
            unsafe { AtomicU8::from_ptr(span.tail().wrapping_add(i)) }.store(b, Relaxed);
        }
        Ok(())
    }

    fn word(&self, offset: usize) -> Option<&AtomicU64> {
        self.check(offset, 8).ok()?;
        let p = self.at(offset);
        if (p as usize) % 8 != 0 {
            return None;
        }
        // SAFETY: aligned, inside the region, valid while self lives (the
        // returned reference borrows self).
        Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

/// Copies `len` bytes of application memory at `addr` (an inline send's
/// SGE, `IBV_SEND_INLINE`, or a GRH: the data is taken during the call).
///
/// # Safety
/// `addr..addr+len` must be readable, as `ibv_post_send(3)` requires of an
/// inline SGE.
pub unsafe fn copy_in(addr: u64, len: u32, out: &mut InlineData) {
    if len == 0 {
        return;
    }
    let p = addr as usize as *const u8;
    if p.is_null() {
        return;
    }
    let start = out.len();
    out.resize(start + len as usize, 0);
    // A plain copy, not atomics: the bytes may be read-only (a string
    // constant), and the program must not change them during the call.
    // SAFETY: the caller guarantees p..p+len is readable; out has room.
    unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr().add(start), len as usize) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(words: &mut [u64], skip: usize, len: usize) -> ForeignBytes {
        let base = words.as_mut_ptr().cast::<u8>();
        assert!(skip + len <= words.len() * 8);
        // SAFETY: inside `words`, which outlives the value in each test.
        unsafe { ForeignBytes::new(NonNull::new(base.add(skip)).unwrap(), len) }
    }

    #[test]
    fn reads_and_writes_in_place_at_every_alignment() {
        for skip in 0..8 {
            let mut mem = [0u64; 6];
            let f = region(&mut mem, skip, 40);
            let data: Vec<u8> = (1..=37).collect();
            f.write(1, &data).unwrap();
            let mut back = vec![0u8; 37];
            f.read(1, &mut back).unwrap();
            assert_eq!(back, data);
            let _ = f;
            // The bytes are in the owner's memory, where they were written.
            let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
            assert_eq!(&bytes[skip + 1..skip + 38], &data[..]);
            assert_eq!(bytes[skip], 0);
        }
    }

    /// Every start alignment, offset and length of a short copy (head
    /// only, head and tail, whole words between): the owner's bytes are the
    /// ones written, and nothing outside them changed.
    #[test]
    fn every_offset_and_length_copies_exactly_its_bytes() {
        let lens = if cfg!(miri) { 0..=12 } else { 0..=27 };
        for skip in 0..8 {
            for offset in 0..9 {
                for len in lens.clone() {
                    let mut mem = [0xEEEE_EEEE_EEEE_EEEEu64; 6];
                    let f = region(&mut mem, skip, 40);
                    let data: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
                    f.write(offset, &data).unwrap();
                    let mut back = vec![0u8; len];
                    f.read(offset, &mut back).unwrap();
                    assert_eq!(back, data, "skip {skip} offset {offset} len {len}");
                    let _ = f;
                    let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
                    let at = skip + offset;
                    assert_eq!(&bytes[at..at + len], &data[..]);
                    assert!(bytes[..at]
                        .iter()
                        .chain(&bytes[at + len..])
                        .all(|&b| b == 0xEE));
                }
            }
        }
    }

    #[test]
    fn bounds_are_checked_without_wrapping() {
        let mut mem = [0u64; 2];
        let f = region(&mut mem, 0, 16);
        assert!(f.write(10, &[0; 7]).is_err());
        assert!(f.read(usize::MAX, &mut [0; 2]).is_err());
        assert!(f.write(16, &[]).is_ok());
        assert!(f.word(9).is_none());
        assert!(f.word(12).is_none());
        assert!(f.word(16).is_none());
        assert!(f.word(8).is_some());
    }

    #[test]
    fn words_are_the_owners_words() {
        let mut mem = [0u64; 3];
        mem[1] = 40;
        let f = region(&mut mem, 0, 24);
        assert_eq!(f.word(8).unwrap().fetch_add(2, Relaxed), 40);
        // At a misaligned start, offset 8 is not an aligned word.
        let g = region(&mut mem, 4, 16);
        assert!(g.word(8).is_none());
        assert!(g.word(4).is_some());
        let _ = (f, g);
        assert_eq!(mem[1], 42);
    }

    #[test]
    fn concurrent_writers_of_separate_bytes_keep_their_bytes() {
        let mut mem = [0u64; 1];
        let f = std::sync::Arc::new(region(&mut mem, 0, 8));
        let rounds = if cfg!(miri) { 10 } else { 1000 };
        std::thread::scope(|s| {
            for i in 0..4usize {
                let f = f.clone();
                s.spawn(move || {
                    for r in 0..rounds {
                        f.write(i * 2, &[(r % 251) as u8, i as u8]).unwrap();
                    }
                });
            }
        });
        let v = f.to_vec();
        for i in 0..4usize {
            assert_eq!(v[i * 2 + 1], i as u8);
            assert_eq!(v[i * 2], ((rounds - 1) % 251) as u8);
        }
    }

    #[test]
    fn inline_copies_take_the_bytes_now() {
        let src = [7u8, 8, 9];
        let mut out = InlineData::from_slice(&[1]);
        // SAFETY: src is readable for 3 bytes.
        unsafe { copy_in(src.as_ptr() as u64, 3, &mut out) };
        assert_eq!(out[..], [1, 7, 8, 9]);
        // SAFETY: zero length reads nothing.
        unsafe { copy_in(0, 0, &mut out) };
        assert_eq!(out.len(), 4);
    }
}
