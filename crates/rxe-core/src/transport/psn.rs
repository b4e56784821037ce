//! Packet Sequence Numbers (IBTA 9.7.1; responder checks in 9.7.5).
//!
//! Every RC and UC request packet carries a 24-bit PSN in its BTH; the
//! requester numbers packets upward from the QP's `sq_psn`, and the responder
//! checks each one against its expected PSN (ePSN, started at `rq_psn`).
//! Arithmetic is modulo 2^24: after 0xFFFFFF comes 0.
//!
//! # Ordering within the window
//!
//! A requester never has more than 2^23 PSNs outstanding (IBTA 9.7.1: this is
//! what lets a responder tell a duplicate from a packet that is ahead). So of
//! two PSNs, the one reached from the other by fewer than 2^23 forward steps
//! is "ahead", and the other "behind": the comparison looks at the signed
//! difference `a - b` taken as a 24-bit two's-complement number, which lies in
//! `-2^23 ..= 2^23 - 1`. Kernel rxe compares PSNs the same way.
//!
//! Two PSNs exactly 2^23 apart are each "behind" the other. This is the right
//! answer for the responder: with at most 2^23 PSNs outstanding, a packet can
//! be up to 2^23 behind the ePSN (the requester retransmits the oldest of 2^23
//! packets that all arrived, while the ePSN has moved past all of them), but
//! never 2^23 ahead of it (the newest PSN sent is at most 2^23 - 1 after the
//! oldest unacknowledged one, which is not after the ePSN). See
//! [`classify_request`].

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number; the value is always below 2^24.
///
/// `Psn` implements `Eq` and `Hash` but deliberately not `PartialOrd` or
/// `Ord`. The order that matters on the wire ([`Psn::cmp_window`]) is
/// circular: 0x000000 is before 0x600000, 0x600000 before 0xC00000, and
/// 0xC00000 before 0x000000 (each step is less than half the space). That is
/// not transitive, so it cannot be `Ord`, and sorting or a `BTreeMap` built on
/// it would silently misbehave. Ordering by the raw value instead would be a
/// trap: it says 0xFFFFFF is after 0x000000, the opposite of what the
/// sequence says right after a wrap. Use `value()` explicitly where a raw
/// numeric order is really wanted (say, a table key).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

/// A raw value that does not fit in 24 bits, from [`Psn::try_new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("PSN {0:#x} does not fit in 24 bits")]
pub struct PsnOutOfRange(pub u32);

/// How an incoming request PSN stands against the responder's expected PSN
/// (IBTA 9.7.5.1.1 for duplicates, 9.7.5.2 for the sequence-error NAK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestPsn {
    /// The PSN the responder expects: execute the request.
    Expected,
    /// `behind` (1 ..= 2^23) PSNs before the expected one: a retransmission
    /// of a request that was already executed. An RC responder answers it
    /// again (re-ACK, READ re-executed, atomic answered from its saved
    /// result) and does not execute it twice.
    Duplicate { behind: u32 },
    /// `ahead` (1 ..= 2^23 - 1) PSNs after the expected one: packets in
    /// between were lost. An RC responder sends one NAK with "PSN sequence
    /// error" and then drops requests until the expected PSN arrives.
    OutOfSequence { ahead: u32 },
}

impl Psn {
    /// Width of the PSN field.
    pub const BITS: u32 = 24;
    /// Number of distinct PSNs, 2^24.
    pub const MODULUS: u32 = 1 << Self::BITS;
    /// The bits a PSN may use.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// Half the PSN space, 2^23: the most PSNs a requester may have
    /// outstanding, and the reach of "ahead" and "behind".
    pub const WINDOW: u32 = 1 << (Self::BITS - 1);

    pub const ZERO: Psn = Psn(0);
    /// 0xFFFFFF, the PSN before [`Psn::ZERO`].
    pub const MAX: Psn = Psn(Self::MASK);

    /// The PSN of the low 24 bits of `raw`; higher bits are discarded.
    ///
    /// Masking rather than failing is the right default here: every PSN on
    /// the wire is a 24-bit field (so values parsed from a BTH always fit),
    /// PSN arithmetic is modular anyway, and a start PSN that an application
    /// draws with more bits than 24 is reduced the same way by the Linux RDMA
    /// core when it modifies a QP (it masks `sq_psn`/`rq_psn` to 24 bits and
    /// warns). Use [`Psn::try_new`] where an out-of-range value should be an
    /// error instead.
    pub const fn new(raw: u32) -> Psn {
        Psn(raw & Self::MASK)
    }

    /// The PSN `raw`, or an error if it does not fit in 24 bits.
    pub const fn try_new(raw: u32) -> Result<Psn, PsnOutOfRange> {
        if raw <= Self::MASK {
            Ok(Psn(raw))
        } else {
            Err(PsnOutOfRange(raw))
        }
    }

    /// The PSN as a number below 2^24.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The PSN `n` steps after this one, modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        // 2^24 divides 2^32, so wrapping in 32 bits then masking is exact.
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// The PSN `n` steps before this one, modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The following PSN (0xFFFFFF is followed by 0).
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The preceding PSN (0 is preceded by 0xFFFFFF).
    pub const fn prev(self) -> Psn {
        self.sub(1)
    }

    /// How many forward steps lead from this PSN to `later`, in
    /// `0 .. 2^24`: `self.add(self.distance_to(later)) == later`.
    pub const fn distance_to(self, later: Psn) -> u32 {
        later.0.wrapping_sub(self.0) & Self::MASK
    }

    /// The signed distance from `other` to `self` within the window, in
    /// `-2^23 ..= 2^23 - 1`: positive when `self` is ahead of `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        let d = other.distance_to(self);
        if d >= Self::WINDOW {
            d as i32 - Self::MODULUS as i32
        } else {
            d as i32
        }
    }

    /// Compares two PSNs within the window: `Greater` when `self` is ahead
    /// of `other` (fewer than 2^23 steps after it), `Less` when it is behind
    /// (up to 2^23 steps before it), `Equal` when they are the same PSN.
    ///
    /// For PSNs exactly 2^23 apart both directions answer `Less`; for all
    /// other pairs `a.cmp_window(b) == b.cmp_window(a).reverse()`. The
    /// relation is not transitive (see the type's documentation).
    pub const fn cmp_window(self, other: Psn) -> Ordering {
        let d = self.diff(other);
        if d > 0 {
            Ordering::Greater
        } else if d < 0 {
            Ordering::Less
        } else {
            Ordering::Equal
        }
    }

    /// `self` is ahead of `other` within the window.
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// `self` is behind `other` within the window.
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// `self` lies in the half-open run `start .. end`, walking forward from
    /// `start` (which may wrap past 0xFFFFFF). Empty when `start == end`.
    /// Useful for "is this response for a packet still outstanding".
    pub const fn in_range(self, start: Psn, end: Psn) -> bool {
        start.distance_to(self) < start.distance_to(end)
    }
}

/// Classifies a request PSN that an RC responder received against its
/// expected PSN (IBTA 9.7.5.1.1, 9.7.5.2): the 2^23 PSNs before `expected`
/// are duplicates, the 2^23 - 1 after it are ahead (a sequence error).
///
/// A UC responder has no duplicates to answer: for it any PSN other than the
/// expected one means that packets were lost, whichever side it lies on.
pub const fn classify_request(psn: Psn, expected: Psn) -> RequestPsn {
    let d = psn.diff(expected);
    if d == 0 {
        RequestPsn::Expected
    } else if d < 0 {
        RequestPsn::Duplicate {
            behind: d.unsigned_abs(),
        }
    } else {
        RequestPsn::OutOfSequence { ahead: d as u32 }
    }
}

impl TryFrom<u32> for Psn {
    type Error = PsnOutOfRange;
    fn try_from(raw: u32) -> Result<Psn, PsnOutOfRange> {
        Psn::try_new(raw)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

/// Decimal, as packet dissectors show it.
impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Hex, as the pingpong tools exchange it (`%06x`).
impl fmt::LowerHex for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HALF: u32 = Psn::WINDOW;

    /// An independent model of the comparison: shift the 24-bit difference
    /// into the top of an i32 and read its sign.
    fn model_sign(a: Psn, b: Psn) -> Ordering {
        let d = (a.value().wrapping_sub(b.value()) << 8) as i32;
        d.cmp(&0)
    }

    fn psn() -> impl Strategy<Value = Psn> {
        (0..Psn::MODULUS).prop_map(Psn::new)
    }

    #[test]
    fn constants() {
        assert_eq!(Psn::MODULUS, 16_777_216);
        assert_eq!(Psn::MASK, 0xff_ffff);
        assert_eq!(Psn::WINDOW, 8_388_608);
        assert_eq!(Psn::MAX.value(), 0xff_ffff);
        assert_eq!(Psn::default(), Psn::ZERO);
    }

    #[test]
    fn new_masks_and_try_new_rejects() {
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
        assert_eq!(Psn::new(u32::MAX), Psn::MAX);
        assert_eq!(Psn::try_new(0xff_ffff), Ok(Psn::MAX));
        assert_eq!(Psn::try_new(0x100_0000), Err(PsnOutOfRange(0x100_0000)));
        assert_eq!(Psn::try_from(5), Ok(Psn::new(5)));
        assert_eq!(
            PsnOutOfRange(0x100_0000).to_string(),
            "PSN 0x1000000 does not fit in 24 bits"
        );
    }

    #[test]
    fn wraps_at_two_to_the_24() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.prev(), Psn::MAX);
        assert_eq!(Psn::new(0xff_fffe).add(5), Psn::new(3));
        assert_eq!(Psn::new(3).sub(5), Psn::new(0xff_fffe));
        assert_eq!(Psn::MAX.distance_to(Psn::ZERO), 1);
        assert_eq!(Psn::ZERO.distance_to(Psn::MAX), Psn::MASK);
        assert!(Psn::ZERO.is_after(Psn::MAX));
        assert!(Psn::MAX.is_before(Psn::ZERO));
    }

    #[test]
    fn window_edges() {
        let a = Psn::new(0x10);
        assert_eq!(a.add(HALF - 1).cmp_window(a), Ordering::Greater);
        assert_eq!(a.add(HALF - 1).diff(a), (HALF - 1) as i32);
        // Exactly half the space apart: both are behind each other.
        let b = a.add(HALF);
        assert_eq!(b.diff(a), -(HALF as i32));
        assert_eq!(a.diff(b), -(HALF as i32));
        assert_eq!(b.cmp_window(a), Ordering::Less);
        assert_eq!(a.cmp_window(b), Ordering::Less);
        assert_eq!(a.add(HALF + 1).cmp_window(a), Ordering::Less);
    }

    #[test]
    fn window_order_is_not_transitive() {
        // Why `Psn` is not `Ord`: three PSNs a third of the space apart form
        // a cycle, each ahead of the one before.
        let a = Psn::new(0x00_0000);
        let b = Psn::new(0x60_0000);
        let c = Psn::new(0xc0_0000);
        assert!(b.is_after(a));
        assert!(c.is_after(b));
        assert!(a.is_after(c));
    }

    #[test]
    fn classify_at_the_edges() {
        let e = Psn::new(1000);
        assert_eq!(classify_request(e, e), RequestPsn::Expected);
        assert_eq!(
            classify_request(e.prev(), e),
            RequestPsn::Duplicate { behind: 1 }
        );
        assert_eq!(
            classify_request(e.next(), e),
            RequestPsn::OutOfSequence { ahead: 1 }
        );
        assert_eq!(
            classify_request(e.sub(HALF), e),
            RequestPsn::Duplicate { behind: HALF }
        );
        assert_eq!(
            classify_request(e.add(HALF - 1), e),
            RequestPsn::OutOfSequence { ahead: HALF - 1 }
        );
        // Across the wrap.
        assert_eq!(
            classify_request(Psn::ZERO, Psn::MAX),
            RequestPsn::OutOfSequence { ahead: 1 }
        );
        assert_eq!(
            classify_request(Psn::MAX, Psn::ZERO),
            RequestPsn::Duplicate { behind: 1 }
        );
    }

    #[test]
    fn in_range_wraps() {
        let start = Psn::new(0xff_fffe);
        let end = Psn::new(2);
        for v in [0xff_fffe, 0xff_ffff, 0, 1] {
            assert!(Psn::new(v).in_range(start, end), "{v:#x}");
        }
        for v in [2, 3, 0xff_fffd, 0x80_0000] {
            assert!(!Psn::new(v).in_range(start, end), "{v:#x}");
        }
        assert!(!start.in_range(start, start));
    }

    #[test]
    fn formatting() {
        let p = Psn::new(0x2f6a4c);
        assert_eq!(format!("{p:?}"), "Psn(0x2f6a4c)");
        assert_eq!(p.to_string(), "3107404");
        assert_eq!(format!("{p:06x}"), "2f6a4c");
        assert_eq!(format!("{:06x}", Psn::new(0x1f)), "00001f");
    }

    proptest! {
        #[test]
        fn always_24_bits(raw in any::<u32>(), n in any::<u32>()) {
            let p = Psn::new(raw);
            prop_assert_eq!(p.value(), raw & Psn::MASK);
            prop_assert!(p.add(n).value() < Psn::MODULUS);
            prop_assert!(p.sub(n).value() < Psn::MODULUS);
            prop_assert_eq!(Psn::try_new(raw).is_ok(), raw < Psn::MODULUS);
        }

        #[test]
        fn add_and_sub_are_inverse(a in psn(), n in any::<u32>()) {
            prop_assert_eq!(a.add(n).sub(n), a);
            prop_assert_eq!(a.sub(n).add(n), a);
        }

        #[test]
        fn add_is_modular(a in psn(), m in any::<u32>(), n in any::<u32>()) {
            prop_assert_eq!(a.add(m).add(n), a.add(m.wrapping_add(n)));
            prop_assert_eq!(a.add(Psn::MODULUS), a);
            prop_assert_eq!(a.add(n), Psn::new(a.value() + (n & Psn::MASK)));
        }

        #[test]
        fn next_and_prev_step_once(a in psn()) {
            prop_assert_eq!(a.next(), a.add(1));
            prop_assert_eq!(a.next().prev(), a);
            prop_assert_eq!(a.distance_to(a.next()), 1);
        }

        #[test]
        fn distance_round_trips(a in psn(), b in psn(), k in 0..Psn::MODULUS) {
            prop_assert_eq!(a.add(a.distance_to(b)), b);
            prop_assert_eq!(a.distance_to(a.add(k)), k);
            prop_assert_eq!(a.distance_to(b) + b.distance_to(a),
                if a == b { 0 } else { Psn::MODULUS });
        }

        #[test]
        fn diff_is_in_window_and_consistent(a in psn(), b in psn()) {
            let d = a.diff(b);
            prop_assert!((-(HALF as i32)..HALF as i32).contains(&d));
            prop_assert_eq!(b.add(d as u32), a);
            prop_assert_eq!(a.cmp_window(b), model_sign(a, b));
            prop_assert_eq!(a.cmp_window(b), d.cmp(&0));
        }

        #[test]
        fn ahead_within_half(a in psn(), k in 1..HALF) {
            prop_assert_eq!(a.add(k).cmp_window(a), Ordering::Greater);
            prop_assert_eq!(a.cmp_window(a.add(k)), Ordering::Less);
            prop_assert!(a.add(k).is_after(a));
            prop_assert!(a.sub(k).is_before(a));
        }

        #[test]
        fn antisymmetric_except_at_half(a in psn(), b in psn()) {
            if a.distance_to(b) == HALF {
                prop_assert_eq!(a.cmp_window(b), Ordering::Less);
                prop_assert_eq!(b.cmp_window(a), Ordering::Less);
            } else {
                prop_assert_eq!(a.cmp_window(b), b.cmp_window(a).reverse());
            }
            prop_assert_eq!(a.cmp_window(b) == Ordering::Equal, a == b);
        }

        #[test]
        fn classify_agrees_with_compare(p in psn(), e in psn()) {
            match classify_request(p, e) {
                RequestPsn::Expected => prop_assert_eq!(p, e),
                RequestPsn::Duplicate { behind } => {
                    prop_assert!((1..=HALF).contains(&behind));
                    prop_assert_eq!(p.add(behind), e);
                    prop_assert_eq!(p.cmp_window(e), Ordering::Less);
                }
                RequestPsn::OutOfSequence { ahead } => {
                    prop_assert!((1..HALF).contains(&ahead));
                    prop_assert_eq!(e.add(ahead), p);
                    prop_assert_eq!(p.cmp_window(e), Ordering::Greater);
                }
            }
        }

        #[test]
        fn in_range_matches_stepping(start in psn(), len in 0u32..64, off in 0u32..128) {
            let end = start.add(len);
            prop_assert_eq!(start.add(off).in_range(start, end), off < len);
        }
    }
}
