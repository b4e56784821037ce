//! Names and numbers as libibverbs and `ibv_devinfo` print them, so that
//! scripts that read theirs read ours: `ibv_wc_status_str`, GUIDs, MTUs,
//! GID table lines. Pure functions of plain values.

use rxe_verbs::Gid;

/// `ibv_wc_status_str`: the name of a work completion status by its
/// libibverbs number.
pub fn wc_status_str(status: u32) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        3 => "local EE context operation error",
        4 => "local protection error",
        5 => "Work Request Flushed Error",
        6 => "memory management operation error",
        7 => "bad response error",
        8 => "local access error",
        9 => "remote invalid request error",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        14 => "local RDD violation error",
        15 => "remote invalid RD request",
        16 => "aborted error",
        17 => "invalid EE context number",
        18 => "invalid EE context state",
        19 => "fatal error",
        20 => "response timeout error",
        21 => "general error",
        _ => "unknown",
    }
}

/// A GUID (big-endian value) as `ibv_devinfo` prints it: `0200:7fff:fe00:0001`.
pub fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// `ibv_devinfo`'s `4096 (5)` for an MTU in bytes.
pub fn mtu_str(bytes: u32) -> String {
    let code = match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => 0,
    };
    format!("{bytes} ({code})")
}

/// One `GID[  1]:\t\t::ffff:10.99.0.2, RoCE v2` line (with its three
/// leading tabs), as `ibv_devinfo -v` of rdma-core 44 prints it.
pub fn gid_line(index: u8, gid: &Gid) -> String {
    format!("\t\t\tGID[{index:3}]:\t\t{gid}, RoCE v2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devinfo_fragments() {
        assert_eq!(guid_str(0x505400fffe990002), "5054:00ff:fe99:0002");
        assert_eq!(mtu_str(1024), "1024 (3)");
        assert_eq!(mtu_str(4096), "4096 (5)");
        assert_eq!(wc_status_str(12), "transport retry counter exceeded");
        assert_eq!(wc_status_str(99), "unknown");
        let g = Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(
            gid_line(1, &g),
            "\t\t\tGID[  1]:\t\t::ffff:10.99.0.2, RoCE v2"
        );
    }
}
