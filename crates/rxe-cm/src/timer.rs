//! The CM's time formulas. Every timeout of the CM is a 5-bit exponent:
//! 4.096 us x 2^value (IBTA 12.6.5 for the REQ's timeouts, 9.7.6.1.3 for
//! the Local ACK Timeout; not checked against the text).

use core::time::Duration;

/// 4.096 us x 2^`exp` (the exponent is capped at 31, its 5-bit maximum).
pub fn exp_duration(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// How long a CM waits for the answer to a message it sent, before
/// resending it: the peer's CM response time plus a round trip of the
/// network, 2 x PacketLifeTime (IBTA 12.7.35, not checked against the text;
/// Linux's CM computes the same sum).
pub fn response_timeout(peer_cm_response_timeout: u8, packet_life_time: u8) -> Duration {
    exp_duration(peer_cm_response_timeout)
        .saturating_add(exp_duration(packet_life_time).saturating_mul(2))
}

/// The transport's Local ACK Timeout exponent for a path with
/// `packet_life_time` and a responder whose CA ACK delay is
/// `ca_ack_delay`: about 2 x PacketLifeTime + the ACK delay, in the same
/// exponent form, rounded as Linux's CM rounds it (so that
/// `rdma_init_qp_attr`'s `timeout` comes out equal): with a = PLT + 1,
/// the larger of `a` and the delay, plus 1 if the smaller is within one
/// of it; at most 31.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let a = packet_life_time.saturating_add(1);
    let d = ca_ack_delay;
    let t = if a >= d {
        a + u8::from(d >= a.saturating_sub(1))
    } else {
        d + u8::from(a >= d.saturating_sub(1))
    };
    t.min(31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas() {
        assert_eq!(exp_duration(0), Duration::from_nanos(4096));
        assert_eq!(exp_duration(20), Duration::from_nanos(4096 << 20)); // 4.29 s
        assert_eq!(exp_duration(40), exp_duration(31));
        // The kernel's rping REQ: response timeout 20, packet lifetime 18.
        assert_eq!(
            response_timeout(20, 18),
            Duration::from_nanos((4096 << 20) + 2 * (4096 << 18))
        );
        // rping.pcap frame 1: Local ACK Timeout 0x13 from PLT 18 and a small ACK delay.
        assert_eq!(ack_timeout(0, 18), 19);
        assert_eq!(ack_timeout(15, 18), 19);
        assert_eq!(ack_timeout(18, 18), 20);
        assert_eq!(ack_timeout(20, 18), 21);
        assert_eq!(ack_timeout(25, 18), 25);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
