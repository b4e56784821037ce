//! UDP segmentation offload, both ways, as pure bookkeeping: which queued
//! packets go out as one `UDP_SEGMENT` message (a *run*), and how a
//! coalesced `UDP_GRO` datagram splits back into packets. The system calls
//! are `socket`'s; the ICRC sealing that must agree with a run is `port`'s.
//!
//! Linux cuts a GSO message into segments of the size the `UDP_SEGMENT`
//! control message gives, the last one possibly shorter, each becoming its
//! own datagram with its own IP and UDP header. So a run is a sequence of
//! packets to one destination with the same TTL and TOS (one message has
//! one header template), all of the first one's length except a shorter
//! last one. The kernel refuses a message of more than [`MAX_SEGMENTS`]
//! segments (`UDP_MAX_SEGMENTS`) or more UDP payload than one datagram may
//! carry ([`MAX_GSO_BYTES`]).
//!
//! The IPv4 Identification: the ICRC covers it (IBTA Annex A17.3.3 masks
//! TOS, TTL and the header checksum, not the ID). An unconnected socket
//! with DF writes ID 0 into a message's header; segmentation numbers the
//! segments upward from there (UDP L4 GSO does not keep IDs fixed), so
//! packet `k` of a run leaves with ID `k` and is sealed for it
//! ([`segment_ipv4_id`]). IPv6 has no ID.

/// Segments per `UDP_SEGMENT` message, at most (Linux `UDP_MAX_SEGMENTS`
/// in the kernels that introduced it; newer ones allow more).
pub const MAX_SEGMENTS: usize = 64;

/// UDP payload of one message, at most: 65535 less the IPv4 and UDP
/// headers (IPv6 could carry 20 bytes more; one limit keeps runs alike).
pub const MAX_GSO_BYTES: usize = 65_507;

/// The IPv4 Identification the kernel gives segment `k` (from 0) of a GSO
/// message from an unconnected socket with DF set: the message's header
/// carries 0 and segmentation counts up from it.
pub fn segment_ipv4_id(k: usize) -> u16 {
    // A run has at most MAX_SEGMENTS packets, far below the wrap.
    (k % 0x1_0000) as u16
}

/// How many of `count` queued packets, from the first, form one GSO run:
/// `len(i)` is packet `i`'s length, `same(i)` whether it goes from the
/// same socket to the same destination with the same TTL and TOS as packet
/// 0. At least 1 if `count` is, 0 for none; a run of 1 is a plain
/// datagram. Looks at no more packets than the run takes, plus one.
pub fn run_len(count: usize, len: impl Fn(usize) -> usize, same: impl Fn(usize) -> bool) -> usize {
    if count == 0 {
        return 0;
    }
    let segment = len(0);
    let mut total = segment;
    let mut n = 1;
    while n < count && n < MAX_SEGMENTS {
        let len = len(n);
        if len > segment || len == 0 || !same(n) || total + len > MAX_GSO_BYTES {
            break;
        }
        total += len;
        n += 1;
        if len < segment {
            // The kernel cuts every segment but the last at `segment`.
            break;
        }
    }
    n
}

/// The packets of one received datagram: itself, or, when the kernel
/// coalesced several (`UDP_GRO` reported segment size `segment`), each
/// `segment` bytes of it, the last possibly shorter. A segment size of 0
/// (never sent by the kernel) yields the datagram whole.
pub fn segments(datagram: &[u8], segment: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let size = match segment {
        Some(s) if s > 0 => s,
        _ => datagram.len().max(1),
    };
    datagram.chunks(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_same(_: usize) -> bool {
        true
    }

    fn run(lens: &[usize], same: impl Fn(usize) -> bool) -> usize {
        run_len(lens.len(), |i| lens[i], same)
    }

    #[test]
    fn equal_packets_group_up_to_the_byte_limit() {
        // 4128-byte WRITE packets: 15 fit in 65507 bytes, the 16th does not.
        let lens = [4128; 40];
        assert_eq!(run(&lens, all_same), 15);
        assert_eq!(run(&lens[15..], all_same), 15);
        assert_eq!(run(&lens[30..], all_same), 10);
        const { assert!(15 * 4128 <= MAX_GSO_BYTES && 16 * 4128 > MAX_GSO_BYTES) };
    }

    #[test]
    fn small_packets_group_up_to_64_segments() {
        let lens = [28; 100];
        assert_eq!(run(&lens, all_same), MAX_SEGMENTS);
        assert_eq!(run(&lens[64..], all_same), 36);
        // Exactly at the byte limit: 65507 = 1 x 65507.
        assert_eq!(run(&[MAX_GSO_BYTES, 1], all_same), 1);
        assert_eq!(run(&[1000; 66], all_same), 64);
    }

    #[test]
    fn a_shorter_packet_ends_the_run_and_a_longer_one_starts_the_next() {
        assert_eq!(run(&[100, 100, 60, 100], all_same), 3);
        assert_eq!(run(&[100, 100, 160, 100], all_same), 2);
        assert_eq!(run(&[100, 60, 60], all_same), 2);
        // A shorter last packet still must fit under the byte limit.
        // 15 x 4096 = 61440: 4000 more fit (65440), 4080 more do not.
        let mut lens = vec![4096; 15];
        lens.push(4000);
        assert_eq!(run(&lens, all_same), 16);
        lens[15] = 4080;
        assert_eq!(run(&lens, all_same), 15);
        assert_eq!(run(&[], all_same), 0);
        assert_eq!(run(&[5], all_same), 1);
        assert_eq!(run(&[5, 0, 5], all_same), 1);
    }

    #[test]
    fn another_destination_ttl_or_tos_ends_the_run() {
        // `same` stands for socket, destination, TTL and TOS together.
        let lens = [200; 10];
        assert_eq!(run(&lens, |i| i < 4), 4);
        assert_eq!(run(&lens, |i| i != 1), 1);
        // A differing packet ends the run even if later ones match again.
        assert_eq!(run(&lens, |i| i != 7), 7);
    }

    #[test]
    fn ids_count_up_from_zero() {
        assert_eq!(segment_ipv4_id(0), 0);
        assert_eq!(segment_ipv4_id(14), 14);
        assert_eq!(segment_ipv4_id(63), 63);
    }

    #[test]
    fn gro_split_keeps_every_byte_and_never_panics() {
        let d: Vec<u8> = (0..=255).cycle().take(1000).collect();
        let parts: Vec<&[u8]> = segments(&d, Some(300)).collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        assert_eq!(parts.concat(), d);
        // No cmsg, a zero or oversized segment size: the datagram whole.
        assert_eq!(segments(&d, None).count(), 1);
        assert_eq!(segments(&d, Some(0)).count(), 1);
        assert_eq!(segments(&d, Some(5000)).next().unwrap().len(), 1000);
        assert_eq!(segments(&[], Some(300)).count(), 0);
        assert_eq!(segments(&[], None).count(), 0);
        assert_eq!(segments(&d[..7], Some(1)).count(), 7);
    }
}
