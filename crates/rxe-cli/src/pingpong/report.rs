//! The lines `ibv_*_pingpong` print, so that scripts that read theirs
//! read ours. Pure functions of plain values.

use super::handshake::Dest;

/// `  local address:  LID 0x0000, QPN 0x000011, PSN 0x63c9c5, GID ::ffff:10.99.0.3`.
/// `ibv_ud_pingpong` prints a colon instead of the last comma of its local
/// line (and only there); `ud` reproduces that.
pub fn local_line(d: &Dest, ud: bool) -> String {
    format!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        if ud { ":" } else { "," },
        d.gid_text()
    )
}

/// `  remote address: LID 0x0000, QPN 0x000015, PSN 0xc849dc, GID ::ffff:10.99.0.2`.
pub fn remote_line(d: &Dest) -> String {
    format!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        d.gid_text()
    )
}

/// The two closing lines: `409600 bytes in 0.44 seconds = 7.38 Mbit/sec`
/// and `50 iters in 0.44 seconds = 8881.08 usec/iter`. Like the tools,
/// `micros` is whole microseconds held in single precision, bytes count
/// both directions (`size * iters * 2`), and the per-iteration figure is
/// divided in single precision.
pub fn result_lines(size: u64, iters: u64, micros: u64) -> [String; 2] {
    let usec = micros as f32;
    let bytes = size.saturating_mul(iters).saturating_mul(2);
    let secs = f64::from(usec) / 1_000_000.0;
    let mbits = bytes as f64 * 8.0 / f64::from(usec);
    let per_iter = f64::from(usec / iters as f32);
    [
        format!("{bytes} bytes in {secs:.2} seconds = {mbits:.2} Mbit/sec"),
        format!("{iters} iters in {secs:.2} seconds = {per_iter:.2} usec/iter"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(qpn: u32, psn: u32, last: u8) -> Dest {
        let gid = rxe_verbs::Gid::from(std::net::Ipv4Addr::new(10, 99, 0, last));
        Dest {
            lid: 0,
            qpn,
            psn,
            gid,
        }
    }

    #[test]
    fn address_lines_match_the_captured_logs() {
        // captures/logs/rc_pingpong.client.log and ud_pingpong.server.log
        assert_eq!(
            local_line(&dest(0x11, 0x63c9c5, 3), false),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x63c9c5, GID ::ffff:10.99.0.3"
        );
        assert_eq!(
            remote_line(&dest(0x15, 0xc849dc, 2)),
            "  remote address: LID 0x0000, QPN 0x000015, PSN 0xc849dc, GID ::ffff:10.99.0.2"
        );
        assert_eq!(
            local_line(&dest(0x17, 0x48628c, 2), true),
            "  local address:  LID 0x0000, QPN 0x000017, PSN 0x48628c: GID ::ffff:10.99.0.2"
        );
        assert_eq!(
            remote_line(&Dest::default()),
            "  remote address: LID 0x0000, QPN 0x000000, PSN 0x000000, GID ::"
        );
    }

    #[test]
    fn result_lines_follow_the_tools_arithmetic() {
        // 4096 B x 50 iters in 440541 us: 409600 bytes, 7.44 Mbit/s.
        let [a, b] = result_lines(4096, 50, 440_541);
        assert_eq!(a, "409600 bytes in 0.44 seconds = 7.44 Mbit/sec");
        assert_eq!(b, "50 iters in 0.44 seconds = 8810.82 usec/iter");
        let [a, b] = result_lines(4096, 1000, 70_000);
        assert_eq!(a, "8192000 bytes in 0.07 seconds = 936.23 Mbit/sec");
        assert_eq!(b, "1000 iters in 0.07 seconds = 70.00 usec/iter");
        // Zero time prints as C's printf would.
        let [a, _] = result_lines(1, 1, 0);
        assert_eq!(a, "2 bytes in 0.00 seconds = inf Mbit/sec");
    }
}
