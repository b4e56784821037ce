//! Invariant CRC (IBTA 7.8.1; RoCE Annex A16.7 and RoCEv2 Annex A17.3.3).
//!
//! The ICRC is CRC-32 as Ethernet computes it (reflected, initial value all
//! ones, final XOR all ones: what `crc32fast` computes) over every byte that
//! no switch or router may change, with the variant fields replaced by ones:
//!
//! 1. the LRH: for a packet with a GRH (and for all RoCE, which has a GRH or
//!    an IP header but no LRH) 8 bytes of 0xFF, since routers rewrite the LRH;
//!    for a native IB local packet (no GRH) the real LRH with only VL set to
//!    ones, since a local packet never crosses a router (IBTA 7.8.1);
//! 2. the network header with its variant fields set to ones: IPv4 TOS, TTL
//!    and header checksum; IPv6 or GRH traffic class, flow label and hop limit;
//! 3. for RoCEv2, the UDP header with its checksum set to ones;
//! 4. the BTH with byte 4 (FECN, BECN, resv6) set to ones;
//! 5. everything after the BTH: extended headers, payload and pad.
//!
//! The result is stored least-significant byte first.

use super::bth;
use super::error::{Error, ErrorKind, Layer, Result};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// What precedes the BTH, which the ICRC covers after masking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcScope<'a> {
    /// RoCEv2: the IPv4 or IPv6 header (whole, with any IPv4 options) and the
    /// 8-byte UDP header.
    RoceV2 {
        ip_header: &'a [u8],
        udp_header: &'a [u8],
    },
    /// RoCEv1, or native IB with a GRH: the 40-byte GRH.
    Grh { grh: &'a [u8] },
    /// Native IB local packet (LNH = IBA local): the 8-byte LRH, covered
    /// except for VL.
    IbLocal { lrh: &'a [u8] },
}

/// The largest network header we mask on the stack: IPv4 with options
/// (60) or IPv6/GRH (40), plus UDP (8).
const MAX_PREFIX: usize = 60 + 8;

/// The masked LRH (or its 8 bytes of ones), network and UDP headers and BTH.
const HEAD_MAX: usize = 8 + MAX_PREFIX + bth::HEADER_LEN;

/// Computes the ICRC of `transport`: the bytes from the start of the BTH
/// to the end of the pad (the ICRC itself excluded). Returns `None` if the
/// headers are shorter than their fixed parts (the caller parsed them, so
/// this only guards against misuse).
pub fn compute(scope: &IcrcScope<'_>, transport: &[u8]) -> Option<u32> {
    if transport.len() < bth::HEADER_LEN {
        return None;
    }
    // The masked headers go in as one piece: each `update` dispatches on
    // the CPU's features, and for short pieces that was most of the cost
    // (`cargo bench -p rxe-integration --bench icrc`).
    let mut head = [0u8; HEAD_MAX];
    match *scope {
        IcrcScope::IbLocal { lrh } => {
            let lrh: &[u8; 8] = lrh.try_into().ok()?;
            head[..8].copy_from_slice(lrh);
            head[0] |= 0xf0; // VL
        }
        _ => head[..8].fill(0xff),
    }
    let n = 8 + mask_prefix(scope, (&mut head[8..8 + MAX_PREFIX]).try_into().ok()?)?;
    head[n..n + bth::HEADER_LEN].copy_from_slice(&transport[..bth::HEADER_LEN]);
    head[n + 4] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..n + bth::HEADER_LEN]);
    h.update(&transport[bth::HEADER_LEN..]);
    Some(h.finalize())
}

/// Copies the network (and UDP) header into `out` with the variant fields
/// set to ones; returns the number of bytes written.
fn mask_prefix(scope: &IcrcScope<'_>, out: &mut [u8; MAX_PREFIX]) -> Option<usize> {
    match *scope {
        IcrcScope::IbLocal { .. } => Some(0),
        IcrcScope::Grh { grh } => {
            let n = grh.len();
            if n != 40 {
                return None;
            }
            out[..n].copy_from_slice(grh);
            mask_ipv6_like(&mut out[..n]);
            Some(n)
        }
        IcrcScope::RoceV2 {
            ip_header,
            udp_header,
        } => {
            let ip_len = ip_header.len();
            if udp_header.len() != 8 || ip_len < 20 || ip_len + 8 > MAX_PREFIX {
                return None;
            }
            out[..ip_len].copy_from_slice(ip_header);
            match ip_header[0] >> 4 {
                4 => {
                    out[1] = 0xff; // TOS (DSCP + ECN)
                    out[8] = 0xff; // TTL
                    out[10] = 0xff; // header checksum
                    out[11] = 0xff;
                }
                6 if ip_len == 40 => mask_ipv6_like(&mut out[..ip_len]),
                _ => return None,
            }
            out[ip_len..ip_len + 8].copy_from_slice(udp_header);
            out[ip_len + 6] = 0xff; // UDP checksum
            out[ip_len + 7] = 0xff;
            Some(ip_len + 8)
        }
    }
}

/// IPv6 and the GRH share a first word (version, traffic class, flow label)
/// and put the hop limit in byte 7.
fn mask_ipv6_like(h: &mut [u8]) {
    h[0] |= 0x0f;
    h[1] = 0xff;
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff;
}

/// Reads the ICRC carried in the last 4 bytes of `transport_with_icrc`.
pub fn carried(transport_with_icrc: &[u8]) -> Option<u32> {
    let n = transport_with_icrc.len();
    let t = transport_with_icrc.get(n.checked_sub(ICRC_LEN)?..)?;
    Some(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Verifies the ICRC at the end of `transport_with_icrc` (BTH .. ICRC).
pub fn verify(scope: &IcrcScope<'_>, transport_with_icrc: &[u8]) -> Result<()> {
    let n = transport_with_icrc.len();
    let needed = bth::HEADER_LEN + ICRC_LEN;
    if n < needed {
        return Err(Error::truncated(Layer::Icrc, needed, n));
    }
    let carried = carried(transport_with_icrc).unwrap_or(0);
    let computed = compute(scope, &transport_with_icrc[..n - ICRC_LEN]).ok_or(Error::new(
        Layer::Icrc,
        ErrorKind::Malformed("headers too short for the ICRC"),
    ))?;
    if computed == carried {
        Ok(())
    } else {
        Err(Error::new(
            Layer::Icrc,
            ErrorKind::BadIcrc { computed, carried },
        ))
    }
}

/// Computes the ICRC of `transport_with_icrc[..len - 4]` and writes it into
/// the last 4 bytes.
pub fn fill(scope: &IcrcScope<'_>, transport_with_icrc: &mut [u8]) -> Option<u32> {
    let n = transport_with_icrc.len().checked_sub(ICRC_LEN)?;
    let crc = compute(scope, &transport_with_icrc[..n])?;
    transport_with_icrc[n..].copy_from_slice(&crc.to_le_bytes());
    Some(crc)
}

// ---------------------------------------------------------------------------
// Solving for an unknown IPv4 Identification

/// The CRC-32 polynomial, bit-reversed (the reflected form `crc32fast` uses).
const POLY: u32 = 0xedb8_8320;

/// Offset of the IPv4 Identification field in the IPv4 header.
const IPV4_ID_AT: usize = 4;

/// Bytes of the ICRC's input that follow the IPv4 Identification of a
/// 20-byte IPv4 header: the rest of that header (14) and the UDP header (8).
const AFTER_ID_IN_HEADERS: usize = 20 - IPV4_ID_AT - 2 + 8;

/// The largest number of bytes after the Identification that the solver
/// can undo: 2^UNSHIFT_POWERS - 1, more than any UDP datagram holds.
const UNSHIFT_POWERS: usize = 17;

/// A linear map over GF(2)^32 as its 32 columns: `m[j]` is the image of
/// bit `j`.
type Matrix = [u32; 32];

/// One step of the (linear) CRC register for one input bit of 0, LSB-first.
const fn bit_step(s: u32) -> u32 {
    (s >> 1) ^ if s & 1 != 0 { POLY } else { 0 }
}

/// The inverse of `bit_step`. The step shifts right, so bit 31 of its
/// result is 0 unless the polynomial was XORed in, which happens exactly
/// when bit 0 of the input was 1 (POLY has bit 31 set).
const fn bit_step_inv(s: u32) -> u32 {
    if s & 0x8000_0000 != 0 {
        ((s ^ POLY) << 1) | 1
    } else {
        s << 1
    }
}

/// The register after feeding `bytes` into a register of 0 (no initial
/// value, no final XOR: the linear part of the CRC).
const fn linear_crc(bytes: &[u8]) -> u32 {
    let mut s = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        s ^= bytes[i] as u32;
        let mut k = 0;
        while k < 8 {
            s = bit_step(s);
            k += 1;
        }
        i += 1;
    }
    s
}

const fn mat_apply_const(m: &Matrix, v: u32) -> u32 {
    let mut r = 0;
    let mut j = 0;
    while j < 32 {
        if (v >> j) & 1 != 0 {
            r ^= m[j];
        }
        j += 1;
    }
    r
}

/// A linear map from `4 * N` bits as `N` lookup tables, one per nibble of
/// the input: `t[i][x]` is the image of `x << 4 * i`. Applying it is `N`
/// lookups where a matrix is one step per input bit (the solve's maps were
/// a third of its cost, `cargo bench -p rxe-integration --bench icrc`).
type Tables<T, const N: usize> = [[T; 16]; N];

/// `m`, whose columns are the images of the input bits, as nibble tables.
const fn tables32<const N: usize>(m: &[u32]) -> Tables<u32, N> {
    let mut t = [[0u32; 16]; N];
    let mut i = 0;
    while i < N {
        let mut x = 1;
        while x < 16 {
            // x without its lowest bit is already done: add that bit's column.
            let low = x & (x - 1);
            t[i][x] = t[i][low] ^ m[4 * i + (x ^ low).trailing_zeros() as usize];
            x += 1;
        }
        i += 1;
    }
    t
}

/// The nibble-table map applied to `v`.
#[inline]
fn tables_apply32<const N: usize>(t: &Tables<u32, N>, v: u32) -> u32 {
    let mut r = 0;
    for (i, row) in t.iter().enumerate() {
        r ^= row[((v >> (4 * i)) & 15) as usize];
    }
    r
}

/// `UNSHIFT[k]` undoes 2^k zero bytes: it is the inverse of the register
/// step for one zero byte, raised to the power 2^k.
const UNSHIFT: [Matrix; UNSHIFT_POWERS] = {
    let mut out = [[0u32; 32]; UNSHIFT_POWERS];
    let mut j = 0;
    while j < 32 {
        let mut s = 1u32 << j;
        let mut k = 0;
        while k < 8 {
            s = bit_step_inv(s);
            k += 1;
        }
        out[0][j] = s;
        j += 1;
    }
    let mut p = 1;
    while p < UNSHIFT_POWERS {
        let mut j = 0;
        while j < 32 {
            out[p][j] = mat_apply_const(&out[p - 1], out[p - 1][j]);
            j += 1;
        }
        p += 1;
    }
    out
};

/// `UNSHIFT` as nibble tables, what `unshift` applies.
const UNSHIFT_TABLES: [Tables<u32, 8>; UNSHIFT_POWERS] = {
    let mut out = [[[0u32; 16]; 8]; UNSHIFT_POWERS];
    let mut p = 0;
    while p < UNSHIFT_POWERS {
        out[p] = tables32::<8>(&UNSHIFT[p]);
        p += 1;
    }
    out
};

/// The register right after the Identification when only bit `i` of the
/// Identification is set (bit 15 = MSB of the first byte on the wire):
/// the fixed injective map from the 16 ID bits into the 32-bit register.
const ID_COLUMNS: [u32; 16] = {
    let mut out = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let x = 1u16 << i;
        out[i] = linear_crc(&x.to_be_bytes());
        i += 1;
    }
    out
};

/// A left inverse of `ID_COLUMNS`, found by Gauss-Jordan elimination at
/// compile time: `ID_INVERSE[b]` is the ID contribution of register bit
/// `b` (zero for the 16 bits that are not pivots). For `y` in the image,
/// the ID is the XOR of `ID_INVERSE[b]` over the set bits `b` of `y`.
const ID_INVERSE: [u16; 32] = {
    let mut basis = ID_COLUMNS;
    let mut combo = [0u16; 16];
    let mut i = 0;
    while i < 16 {
        combo[i] = 1 << i;
        i += 1;
    }
    let mut pivots = [0u32; 16];
    let mut k = 0;
    while k < 16 {
        // Nonzero: the columns are independent (x -> x * 2^32 mod P is
        // injective on polynomials of degree < 32), and row operations keep
        // them so.
        assert!(basis[k] != 0, "ID columns are dependent");
        let p = basis[k].trailing_zeros();
        pivots[k] = p;
        let mut j = 0;
        while j < 16 {
            if j != k && (basis[j] >> p) & 1 != 0 {
                basis[j] ^= basis[k];
                combo[j] ^= combo[k];
            }
            j += 1;
        }
        k += 1;
    }
    let mut out = [0u16; 32];
    let mut k = 0;
    while k < 16 {
        out[pivots[k] as usize] = combo[k];
        k += 1;
    }
    out
};

/// `ID_INVERSE` and `ID_COLUMNS` as nibble tables, what `id_from_delta`
/// applies.
const ID_INVERSE_TABLES: Tables<u32, 8> = {
    let mut wide = [0u32; 32];
    let mut b = 0;
    while b < 32 {
        wide[b] = ID_INVERSE[b] as u32;
        b += 1;
    }
    tables32::<8>(&wide)
};
const ID_COLUMNS_TABLES: Tables<u32, 4> = tables32::<4>(&ID_COLUMNS);

/// The register difference, after undoing the shift, that the DF bit
/// (byte 6 of the IPv4 header, the first byte after the Identification)
/// contributes: the byte 0x40 fed in, then one zero byte undone.
const DF_DELTA: u32 = mat_apply_const(&UNSHIFT[0], linear_crc(&[0x40]));

/// Undoes `n` zero bytes of register steps: `Z^-n v`.
///
/// A receiver sees one segment length over and over (GRO hands over runs
/// of equal segments), so the map for the length last seen twice in a row
/// is kept, per thread, as one map: one application per packet instead
/// of one per set bit of the length (the solve beyond the CRC was 6.5 % of
/// a 1 MiB WRITE responder in `perf record`). A length seen once costs what
/// it did, so lengths that alternate never pay for composing.
fn unshift(v: u32, n: usize) -> Option<u32> {
    if n >> UNSHIFT_POWERS != 0 {
        return None;
    }
    let cached = UNSHIFT_CACHE.with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        if c.len != n {
            if c.last != n {
                c.last = n;
                return None;
            }
            c.map = tables32::<8>(&unshift_matrix(n));
            c.len = n;
        }
        Some(tables_apply32(&c.map, v))
    });
    Some(cached.unwrap_or_else(|| unshift_by_powers(v, n)))
}

/// `unshift` one power of two at a time (`n` below 2^UNSHIFT_POWERS).
fn unshift_by_powers(mut v: u32, n: usize) -> u32 {
    for (k, t) in UNSHIFT_TABLES.iter().enumerate() {
        if (n >> k) & 1 != 0 {
            v = tables_apply32(t, v);
        }
    }
    v
}

/// `Z^-n` as one matrix.
fn unshift_matrix(n: usize) -> Matrix {
    core::array::from_fn(|j| unshift_by_powers(1 << j, n))
}

/// The map `unshift` keeps: `map` undoes `len` bytes; `last` is the length
/// of the call before (`usize::MAX`: none, never a valid length).
struct UnshiftCache {
    len: usize,
    last: usize,
    map: Tables<u32, 8>,
}

std::thread_local! {
    static UNSHIFT_CACHE: core::cell::RefCell<UnshiftCache> = const {
        core::cell::RefCell::new(UnshiftCache {
            len: usize::MAX,
            last: usize::MAX,
            map: [[0; 16]; 8],
        })
    };
}

/// The ID whose contribution to the register (right after the ID) is `y`,
/// if there is one: 16 of the 32 bits determine the ID, the other 16 must
/// then agree.
fn id_from_delta(y: u32) -> Option<u16> {
    let id = tables_apply32(&ID_INVERSE_TABLES, y) as u16;
    (tables_apply32(&ID_COLUMNS_TABLES, u32::from(id)) == y).then_some(id)
}

/// The register difference between the ICRC carried and the ICRC with ID 0,
/// moved back to just after the Identification. `None` for a header other
/// than a 20-byte IPv4 one, or a transport shorter than BTH + ICRC.
fn id_delta(ip_header: &[u8; 20], udp_header: &[u8; 8], transport_with_icrc: &[u8]) -> Option<u32> {
    if ip_header[0] != 0x45 {
        return None;
    }
    let n = transport_with_icrc.len().checked_sub(ICRC_LEN)?;
    let mut ip = *ip_header;
    ip[IPV4_ID_AT] = 0;
    ip[IPV4_ID_AT + 1] = 0;
    let scope = IcrcScope::RoceV2 {
        ip_header: &ip,
        udp_header,
    };
    let with_zero_id = compute(&scope, &transport_with_icrc[..n])?;
    let carried = carried(transport_with_icrc)?;
    // CRC-32 is affine over GF(2): for inputs of equal length, the init
    // value and final XOR cancel, so ICRC(id) ^ ICRC(0) is the linear CRC
    // of the ID bits followed by `after` zero bytes.
    let after = AFTER_ID_IN_HEADERS.checked_add(n)?;
    unshift(carried ^ with_zero_id, after)
}

/// Finds the IPv4 Identification that makes the ICRC carried at the end of
/// `transport_with_icrc` (BTH .. ICRC) correct, for a packet received from a
/// UDP socket, which hands over the payload but never the IPv4 header, so
/// never the Identification that the ICRC covers (and senders fill it
/// differently: some with a running counter, some with 0). `ip_header` is the 20-byte IPv4 header as the
/// receiver reconstructs it (version/IHL 0x45, total length, flags, protocol,
/// addresses; TOS, TTL and checksum are masked, and the Identification bytes
/// are ignored). Returns the unique ID, or `None` when no ID makes the ICRC
/// correct (or the header is not a 20-byte IPv4 header, or the transport is
/// shorter than an ICRC).
///
/// # Strength
///
/// Solving for 16 unknown bits uses up 16 of the ICRC's 32 check bits: a
/// random corruption passes with probability 2^-16, not 2^-32. Single-bit
/// errors: a flip of the bit at offset `j` after the end of the
/// Identification (counting bytes in wire order and bits LSB first, as the
/// CRC consumes them, the ICRC's own bytes included) goes unnoticed iff the
/// flip's register difference, moved back to the ID, is some ID's; that
/// depends on `j` only, and for `j < 8 * 65557` (any UDP datagram) it
/// happens exactly at `j` in {214134, 227786, 290142, 290143, 304016}
/// (tested). The first is 26766 bytes after the ID, so every single-bit
/// error is detected in any packet whose transport (BTH .. ICRC) is at most
/// 26744 bytes, which covers every RoCE packet (path MTU at most 4096).
/// Flips in the header bytes before the ID (total length) are all detected.
///
/// # Cost
///
/// One ICRC over the packet (with ID 0), then at most 17 32x32 GF(2)
/// maps (one per set bit of the byte count after the ID, undoing the CRC's
/// shift with precomputed powers of the inverse zero-byte step; one map
/// for a length that repeats), then a 32->16 map and a 16->32 check, each
/// map 8 or 4 nibble-table lookups: no loop over candidate IDs.
pub fn solve_ipv4_id(
    ip_header: &[u8; 20],
    udp_header: &[u8; 8],
    transport_with_icrc: &[u8],
) -> Option<u16> {
    id_from_delta(id_delta(ip_header, udp_header, transport_with_icrc)?)
}

/// What [`solve_ipv4_id_any_df`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4IdSolution {
    pub id: u16,
    /// Whether the DF bit was as `ip_header` had it; `false` means the
    /// sender sent it the other way.
    pub df_as_given: bool,
}

/// As [`solve_ipv4_id`], for a sender whose DF bit is unknown too (a UDP
/// socket does not report it): tries the DF bit as `ip_header` has it, then
/// flipped, for the cost of one ICRC. Every capture of kernel rxe and of the
/// NICs we have seen sets DF; accepting either value leaves 15 check bits
/// (a random corruption passes with probability 2^-15).
pub fn solve_ipv4_id_any_df(
    ip_header: &[u8; 20],
    udp_header: &[u8; 8],
    transport_with_icrc: &[u8],
) -> Option<Ipv4IdSolution> {
    let y = id_delta(ip_header, udp_header, transport_with_icrc)?;
    if let Some(id) = id_from_delta(y) {
        return Some(Ipv4IdSolution {
            id,
            df_as_given: true,
        });
    }
    id_from_delta(y ^ DF_DELTA).map(|id| Ipv4IdSolution {
        id,
        df_as_given: false,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Frame 5 of captures/rc_pingpong.pcap without its Ethernet header: an
    /// RC Acknowledge that the kernel's rxe sent over IPv4 (ID 0x5e4d).
    pub(crate) const ACK: &str = "450000305e4d40004011c7a50a6300020a630003c16512b7001c0000\
                       1100ffff000000110063c9c81f0000017b930808";

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn kernel_rxe_ack_verifies() {
        let b = hex(ACK);
        let s = IcrcScope::RoceV2 {
            ip_header: &b[..20],
            udp_header: &b[20..28],
        };
        verify(&s, &b[28..]).unwrap();
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let base = hex(ACK);
        let split = |b: &[u8]| (b[..20].to_vec(), b[20..28].to_vec(), b[28..].to_vec());
        let (ip, udp, t) = split(&base);
        let scope = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        let want = compute(&scope, &t[..t.len() - 4]).unwrap();
        for (at, v) in [
            (1usize, 0x02u8),
            (8, 0x01),
            (10, 0x12),
            (11, 0x34),
            (26, 0xab),
            (27, 0xcd),
            (32, 0xc0),
            (32, 0x3f),
        ] {
            let mut b = base.clone();
            b[at] = v;
            let (ip, udp, t) = split(&b);
            let s = IcrcScope::RoceV2 {
                ip_header: &ip,
                udp_header: &udp,
            };
            assert_eq!(compute(&s, &t[..t.len() - 4]), Some(want), "byte {at}");
        }
        // The IPv4 Identification is not masked.
        let mut b = base.clone();
        b[5] ^= 1;
        let (ip, udp, t) = split(&b);
        let s = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        assert_ne!(compute(&s, &t[..t.len() - 4]), Some(want));
    }

    #[test]
    fn fill_then_verify() {
        let ip = [
            0x45u8, 0, 0, 0x30, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ];
        let udp = [0xc0u8, 0, 0x12, 0xb7, 0, 0x1c, 0, 0];
        let scope = IcrcScope::RoceV2 {
            ip_header: &ip,
            udp_header: &udp,
        };
        let mut t = [0u8; 20];
        t[0] = 0x11;
        t[2] = 0xff;
        t[3] = 0xff;
        let crc = fill(&scope, &mut t).unwrap();
        assert_eq!(carried(&t), Some(crc));
        verify(&scope, &t).unwrap();
        t[13] ^= 0x80;
        assert!(matches!(
            verify(&scope, &t).unwrap_err().kind,
            ErrorKind::BadIcrc { .. }
        ));
        assert_eq!(
            verify(&scope, &t[..15]).unwrap_err(),
            Error::truncated(Layer::Icrc, 16, 15)
        );
    }

    #[test]
    fn short_headers_are_refused_not_panicking() {
        let s = IcrcScope::RoceV2 {
            ip_header: &[0x45; 10],
            udp_header: &[0; 8],
        };
        assert_eq!(compute(&s, &[0; 12]), None);
        let s = IcrcScope::Grh { grh: &[0x60; 39] };
        assert_eq!(compute(&s, &[0; 12]), None);
        assert_eq!(
            compute(&IcrcScope::IbLocal { lrh: &[0; 8] }, &[0; 11]),
            None
        );
        assert_eq!(
            compute(&IcrcScope::IbLocal { lrh: &[0; 7] }, &[0; 12]),
            None
        );
    }

    #[test]
    fn ib_local_covers_the_lrh_except_vl() {
        let t = [0u8; 12];
        let lrh = [0x02u8, 0x02, 0x00, 0x01, 0x00, 0x05, 0x00, 0x02];
        let base = compute(&IcrcScope::IbLocal { lrh: &lrh }, &t).unwrap();
        let mut vl = lrh;
        vl[0] = 0x72;
        assert_eq!(compute(&IcrcScope::IbLocal { lrh: &vl }, &t), Some(base));
        let mut dlid = lrh;
        dlid[3] = 0x09;
        assert_ne!(compute(&IcrcScope::IbLocal { lrh: &dlid }, &t), Some(base));
    }

    // -- solve_ipv4_id ------------------------------------------------------

    use proptest::prelude::*;

    /// A RoCEv2/IPv4 packet as (IPv4 header, UDP header, transport with
    /// ICRC), its ICRC filled for `id`.
    fn ipv4_packet(id: u16, header_seed: &[u8; 20], udp: [u8; 8], transport: &[u8]) -> Vec<u8> {
        let mut ip = *header_seed;
        ip[0] = 0x45;
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        let mut b = Vec::with_capacity(28 + transport.len() + 4);
        b.extend_from_slice(&ip);
        b.extend_from_slice(&udp);
        b.extend_from_slice(transport);
        b.extend_from_slice(&[0; 4]);
        let (h, t) = b.split_at_mut(28);
        let scope = IcrcScope::RoceV2 {
            ip_header: &h[..20],
            udp_header: &h[20..],
        };
        fill(&scope, t).unwrap();
        b
    }

    fn solve(b: &[u8]) -> Option<u16> {
        let ip: &[u8; 20] = b[..20].try_into().unwrap();
        let udp: &[u8; 8] = b[20..28].try_into().unwrap();
        solve_ipv4_id(ip, udp, &b[28..])
    }

    #[test]
    fn kernel_rxe_ack_id_is_found() {
        let mut b = hex(ACK);
        assert_eq!(solve(&b), Some(0x5e4d));
        // The ID bytes given are ignored.
        b[4] = 0x12;
        b[5] = 0x34;
        assert_eq!(solve(&b), Some(0x5e4d));
    }

    #[test]
    fn id_columns_have_full_rank_and_the_inverse_inverts() {
        for (i, col) in ID_COLUMNS.iter().enumerate() {
            assert_eq!(id_from_delta(*col), Some(1 << i));
        }
        assert_eq!(id_from_delta(0), Some(0));
        for x in [0x0001u16, 0x8000, 0xffff, 0x5e4d, 0x1234] {
            assert_eq!(id_from_delta(linear_crc(&x.to_be_bytes())), Some(x));
        }
    }

    #[test]
    fn unshift_undoes_zero_bytes() {
        let v = 0xdead_beefu32;
        for n in [0usize, 1, 2, 3, 7, 100, 1500, 4200, 65557, (1 << 17) - 1] {
            let mut s = v;
            for _ in 0..n {
                s = linear_crc_from(s, &[0]);
            }
            assert_eq!(unshift(s, n), Some(v), "n = {n}");
        }
        assert_eq!(unshift(v, 1 << 17), None);
    }

    /// The kept map gives what the powers give, whatever the order of
    /// lengths: repeated (kept, then used), alternating (never kept), and
    /// a length that comes back after others.
    #[test]
    fn unshift_with_a_kept_map_agrees_with_the_powers() {
        let lens = [
            4134usize, 4134, 4134, 4150, 4134, 4150, 4150, 4150, 62, 4134, 4134, 0, 0, 1,
        ];
        for (i, &n) in lens.iter().enumerate() {
            let v = 0x9e37_79b9u32.rotate_left(i as u32);
            assert_eq!(unshift(v, n), Some(unshift_by_powers(v, n)), "n = {n}");
        }
        // The matrix itself: column j is bit j undone.
        let m = unshift_matrix(4134);
        assert_eq!(
            mat_apply_const(&m, 0x8000_0001),
            unshift_by_powers(0x8000_0001, 4134)
        );
    }

    proptest! {
        /// A map as nibble tables gives what its matrix gives.
        #[test]
        fn nibble_tables_apply_as_the_matrix(m in proptest::array::uniform32(any::<u32>()), v: u32) {
            prop_assert_eq!(tables_apply32(&tables32::<8>(&m), v), mat_apply_const(&m, v));
            prop_assert_eq!(
                tables_apply32(&tables32::<4>(&m[..16]), v & 0xffff),
                mat_apply_const(&m, v & 0xffff)
            );
        }
    }

    /// The linear register after feeding `bytes` into `s`.
    fn linear_crc_from(mut s: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            s ^= u32::from(b);
            for _ in 0..8 {
                s = bit_step(s);
            }
        }
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_solver_finds_exactly_the_id(
            id in any::<u16>(),
            seed in any::<[u8; 20]>(),
            udp in any::<[u8; 8]>(),
            transport in proptest::collection::vec(any::<u8>(), 12..2100),
            given in any::<u16>(),
        ) {
            let mut b = ipv4_packet(id, &seed, udp, &transport);
            b[4..6].copy_from_slice(&given.to_be_bytes());
            prop_assert_eq!(solve(&b), Some(id));
            let ip: &[u8; 20] = b[..20].try_into().unwrap();
            let u: &[u8; 8] = b[20..28].try_into().unwrap();
            // The DF-agnostic solver agrees, with DF as given...
            prop_assert_eq!(
                solve_ipv4_id_any_df(ip, u, &b[28..]),
                Some(Ipv4IdSolution { id, df_as_given: true })
            );
            // ...and finds the ID when the receiver guessed DF wrong.
            let mut wrong_df = *ip;
            wrong_df[6] ^= 0x40;
            let s = solve_ipv4_id_any_df(&wrong_df, u, &b[28..]);
            prop_assert_eq!(s, Some(Ipv4IdSolution { id, df_as_given: false }));
        }

        #[test]
        fn masked_fields_do_not_matter_to_the_solver(
            id in any::<u16>(),
            seed in any::<[u8; 20]>(),
            transport in proptest::collection::vec(any::<u8>(), 12..300),
            tos in any::<u8>(), ttl in any::<u8>(), csum in any::<u16>(),
            udp_csum in any::<u16>(), fecn_byte in any::<u8>(),
        ) {
            let udp = [0xc0, 0x01, 0x12, 0xb7, 0, 0, 0, 0];
            let mut b = ipv4_packet(id, &seed, udp, &transport);
            b[1] = tos;
            b[8] = ttl;
            b[10..12].copy_from_slice(&csum.to_be_bytes());
            b[26..28].copy_from_slice(&udp_csum.to_be_bytes());
            b[28 + 4] = fecn_byte;
            prop_assert_eq!(solve(&b), Some(id));
        }
    }

    /// Which bytes of a 20-byte IPv4 header, UDP header and transport the
    /// ICRC masks (and the ID, which the solver finds).
    fn masked_or_id(at: usize) -> bool {
        matches!(at, 1 | 4 | 5 | 8 | 10 | 11 | 26 | 27 | 32)
    }

    #[test]
    fn every_single_bit_flip_outside_the_id_is_rejected() {
        // A 1024-byte RC SEND ONLY-sized packet (BTH + 1024 + ICRC), with
        // a kernel-rxe-like nonzero ID.
        let mut t = vec![0u8; 12 + 1024];
        t[0] = 0x04; // RC SEND ONLY
        t[2] = 0xff;
        t[3] = 0xff;
        for (i, v) in t.iter_mut().enumerate().skip(12) {
            *v = (i * 7 + 3) as u8;
        }
        let ip = [
            0x45u8, 0, 0x04, 0x3c, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 10, 99, 0, 3, 10, 99, 0, 2,
        ];
        let udp = [0xc1, 0x65, 0x12, 0xb7, 0x04, 0x28, 0, 0];
        let b = ipv4_packet(0xaf62, &ip, udp, &t);
        assert_eq!(solve(&b), Some(0xaf62));
        let mut rejected = 0;
        for at in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[at] ^= 1 << bit;
                let got = solve(&c);
                if masked_or_id(at) {
                    // The ID bytes given are ignored, masked ones change nothing.
                    assert_eq!(got, Some(0xaf62), "byte {at} bit {bit}");
                } else {
                    assert_eq!(got, None, "byte {at} bit {bit} not detected");
                    rejected += 1;
                }
            }
        }
        // Everything but 9 bytes: the ICRC too.
        assert_eq!(rejected, (b.len() - 9) * 8);
    }

    /// The exact set of single-bit error offsets (after the ID, LSB-first)
    /// that the solver cannot see, over every offset a UDP datagram has.
    /// The register difference of a flip `j` bits after the ID, moved back
    /// to the ID, is the inverse bit step applied `j` times to bit 0.
    #[test]
    fn blind_single_bit_offsets_are_beyond_any_roce_packet() {
        let mut v = 1u32;
        let mut blind = Vec::new();
        for j in 0..8 * (65535 + 22) {
            if id_from_delta(v).is_some() {
                blind.push(j);
            }
            v = bit_step_inv(v);
        }
        assert_eq!(blind, [214134, 227786, 290142, 290143, 304016]);
    }

    #[test]
    fn a_blind_offset_is_really_blind() {
        // 214134 = 8 * 26766 + 6: byte 26766 after the ID, bit 6; the
        // transport starts 22 bytes after the ID.
        let t: Vec<u8> = (0..30_000u32).map(|i| (i * 13 + 1) as u8).collect();
        let ip = [
            0x45u8, 0, 0, 0, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ];
        let b = ipv4_packet(0x1234, &ip, [0x12, 0xb7, 0x12, 0xb7, 0, 0, 0, 0], &t);
        assert_eq!(solve(&b), Some(0x1234));
        let mut c = b.clone();
        c[28 + 26766 - 22] ^= 1 << 6;
        let got = solve(&c);
        assert!(matches!(got, Some(id) if id != 0x1234), "{got:?}");
        // One bit earlier is seen.
        let mut c = b.clone();
        c[28 + 26766 - 22] ^= 1 << 5;
        assert_eq!(solve(&c), None);
    }

    #[test]
    fn solver_refuses_what_it_cannot_solve_without_panicking() {
        let ip = [0x46u8; 20];
        assert_eq!(solve_ipv4_id(&ip, &[0; 8], &[0; 16]), None);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        assert_eq!(solve_ipv4_id(&ip, &[0; 8], &[0; 15]), None);
        assert_eq!(solve_ipv4_id(&ip, &[0; 8], &[]), None);
        assert_eq!(solve_ipv4_id_any_df(&ip, &[0; 8], &[0; 3]), None);
    }
}
