//! What `rxe perf` prints, in the layout perftest 4.5 prints (header
//! block, address lines, result tables), and the statistics behind the
//! tables. Pure functions of plain values; the layouts were read off the
//! real tools' output on the reference peer.

use std::time::Duration;

use super::handshake::{Keys, Report, Verb};

/// The line of dashes around each block.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The server's banner while it waits for a client.
pub const WAITING: [&str; 4] = [
    "",
    "************************************",
    "* Waiting for client to connect... *",
    "************************************",
];

/// Unit of the bandwidth columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwUnit {
    /// MB/s with MB = 2^20 bytes (perftest's default).
    MBytes,
    /// Gb/s with Gb = 10^9 bits (`--report_gbits`).
    Gbits,
}

impl BwUnit {
    /// Bytes per second that make one unit.
    pub fn bytes_per_unit(self) -> f64 {
        match self {
            BwUnit::MBytes => 1_048_576.0,
            BwUnit::Gbits => 125_000_000.0,
        }
    }

    fn label(self) -> &'static str {
        match self {
            BwUnit::MBytes => "MB/sec",
            BwUnit::Gbits => "Gb/sec",
        }
    }
}

/// The test's title line (centred as perftest centres it).
pub fn title(verb: Verb, lat: bool, cmp_swap: bool) -> String {
    let name = match (verb, lat) {
        (Verb::Write, false) => "RDMA_Write BW Test",
        (Verb::Read, false) => "RDMA_Read BW Test",
        (Verb::Send, false) => "Send BW Test",
        (Verb::Atomic, _) if cmp_swap => "Atomic CMP_AND_SWAP BW Test",
        (Verb::Atomic, _) => "Atomic FETCH_AND_ADD BW Test",
        (Verb::Write, true) => "RDMA_Write Latency Test",
        (Verb::Read, true) => "RDMA_Read Latency Test",
        (Verb::Send, true) => "Send Latency Test",
    };
    format!("                    {name}")
}

/// The settings block after the title.
#[derive(Debug, Clone)]
pub struct TestInfo {
    pub verb: Verb,
    pub lat: bool,
    pub cmp_swap: bool,
    pub device: String,
    pub qps: usize,
    /// `TX depth` (clients) or `RX depth` (SEND servers), if printed.
    pub depth: Option<(&'static str, u32)>,
    /// Bandwidth tests: completions are asked for every this many sends.
    pub cq_mod: Option<u32>,
    pub mtu: u32,
    pub gid_index: u8,
    pub out_reads: u16,
}

/// The block perftest prints once the MTU is agreed, between two rules.
pub fn info_block(i: &TestInfo) -> Vec<String> {
    let mut v = vec![
        RULE.to_string(),
        title(i.verb, i.lat, i.cmp_swap),
        format!(" Dual-port       : OFF\t\tDevice         : {}", i.device),
        format!(" Number of qps   : {}\t\tTransport type : IB", i.qps),
        " Connection type : RC\t\tUsing SRQ      : OFF".to_string(),
        // No PCIe bus between rxe and its memory.
        " PCIe relax order: OFF".to_string(),
        " ibv_wr* API     : OFF".to_string(),
    ];
    if let Some((name, d)) = i.depth {
        v.push(format!(" {name} depth        : {d}"));
    }
    if let Some(m) = i.cq_mod {
        v.push(format!(" CQ Moderation   : {m}"));
    }
    v.push(format!(" Mtu             : {}[B]", i.mtu));
    v.push(" Link type       : Ethernet".to_string());
    v.push(format!(" GID index       : {}", i.gid_index));
    if matches!(i.verb, Verb::Read | Verb::Atomic) {
        v.push(format!(" Outstand reads  : {}", i.out_reads));
    } else {
        v.push(" Max inline data : 0[B]".to_string());
    }
    v.push(" rdma_cm QPs\t : OFF".to_string());
    v.push(" Data ex. method : Ethernet".to_string());
    v.push(RULE.to_string());
    v
}

/// C's `%#0Nx`: `0x` and zero padding to `width` in all, except that zero
/// has no prefix (and is padded with zeros to `width`).
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// The two lines describing one QP: ` local address: LID 0000 QPN 0x0012
/// PSN 0x5466b RKey 0x0002ff VAddr 0x005653c5cdc000` (READ tests add
/// `OUT 0x80`, SEND and atomic tests print neither R_Key nor address) and
/// the GID in decimal bytes.
pub fn address_lines(local: bool, k: &Keys, verb: Verb) -> [String; 2] {
    let mut a = format!(
        " {} address: LID {} QPN {} PSN {}",
        if local { "local" } else { "remote" },
        c_alt_hex(u64::from(k.lid), 4),
        c_alt_hex(u64::from(k.qpn), 6),
        c_alt_hex(u64::from(k.psn), 6)
    );
    if verb == Verb::Read {
        a.push_str(&format!(" OUT {}", c_alt_hex(u64::from(k.out_reads), 4)));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        a.push_str(&format!(
            " RKey {} VAddr {}",
            c_alt_hex(u64::from(k.rkey), 8),
            c_alt_hex(k.vaddr, 16)
        ));
    }
    let gid: Vec<String> = k.gid.as_bytes().iter().map(|b| format!("{b:02}")).collect();
    [a, format!(" GID: {}", gid.join(":"))]
}

/// The bandwidth table's header line.
pub fn bw_header(unit: BwUnit) -> String {
    let u = unit.label();
    format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
}

/// One row of the bandwidth table. In Gb/s, an average under 0.1 gets six
/// decimals (and other spacing), as perftest prints it.
pub fn bw_row(r: &Report, unit: BwUnit) -> String {
    if unit == BwUnit::Gbits && r.bw_avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<7}          {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    }
}

/// The latency table's header line (with perftest's trailing space).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Latency statistics, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    pub min: f64,
    pub max: f64,
    /// The median.
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

/// One row of the latency table.
pub fn lat_row(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// Latency statistics from the times at which successive messages were
/// posted: each gap is one round trip (a READ, or a message there and
/// back), divided by `per_gap` (2 for the ping-pong tests, where perftest
/// reports half the round trip). `None` with fewer than two posts.
pub fn lat_stats(posted: &[Duration], per_gap: u32) -> Option<LatStats> {
    if posted.len() < 2 {
        return None;
    }
    let f = f64::from(per_gap.max(1));
    let mut d: Vec<f64> = posted
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]).as_secs_f64() * 1e6 / f)
        .collect();
    d.sort_by(|a, b| a.total_cmp(b));
    let m = d.len();
    let typical = if m % 2 == 0 {
        (d[m / 2] + d[m / 2 - 1]) / 2.0
    } else {
        d[m / 2]
    };
    let avg = d.iter().sum::<f64>() / m as f64;
    let stdev = (d.iter().map(|x| (avg - x).powi(2)).sum::<f64>() / m as f64).sqrt();
    let pct = |p: f64| {
        let k = ((m as f64 * p).ceil() as usize).clamp(1, m);
        d[k - 1]
    };
    Some(LatStats {
        min: d[0],
        max: d[m - 1],
        typical,
        avg,
        stdev,
        p99: pct(0.99),
        p999: pct(0.999),
    })
}

/// Above this many messages the peak is not computed (its cost grows with
/// the square of the count), as perftest by default.
pub const PEAK_LIMIT: usize = 20_000;

/// The bandwidth result of a sender of `n` messages (all QPs counted
/// together): `posted[i]` is when message `i` was posted, `completed` the
/// (message index, time) of each completion seen, a completion covering
/// every message up to its index. The average runs from the first post to
/// the last completion; the peak, the best rate between any post and any
/// later completion as perftest computes it, needs every post and
/// completion and is 0 when they were not all kept (above
/// [`PEAK_LIMIT`] messages only the first post and last completion are).
pub fn bw_report(
    size: u64,
    n: u64,
    posted: &[Duration],
    completed: &[(u64, Duration)],
    unit: BwUnit,
) -> Report {
    let mut r = Report {
        size,
        iters: n,
        ..Report::default()
    };
    let (Some(first), Some(&(_, last))) = (posted.first(), completed.last()) else {
        return r;
    };
    let secs = last.saturating_sub(*first).as_secs_f64();
    if secs > 0.0 {
        r.bw_avg = size as f64 * n as f64 / secs / unit.bytes_per_unit();
        r.msg_rate = n as f64 / secs / 1e6;
    }
    if posted.len() as u64 == n && n <= PEAK_LIMIT as u64 {
        let mut best = f64::INFINITY;
        for (i, p) in posted.iter().enumerate() {
            let i = i as u64;
            for &(j, t) in completed.iter().filter(|(j, _)| *j >= i && *j < n) {
                let per = t.saturating_sub(*p).as_secs_f64() / (j - i + 1) as f64;
                if per < best {
                    best = per;
                }
            }
        }
        if best.is_finite() && best > 0.0 {
            r.bw_peak = size as f64 / best / unit.bytes_per_unit();
        }
    }
    r
}

/// The result of a SEND receiver, which has no peak: the rate between its
/// first and last receive completion.
pub fn recv_report(size: u64, n: u64, first: Duration, last: Duration, unit: BwUnit) -> Report {
    let mut r = Report {
        size,
        iters: n,
        ..Report::default()
    };
    let secs = last.saturating_sub(first).as_secs_f64();
    if secs > 0.0 {
        r.bw_avg = size as f64 * n as f64 / secs / unit.bytes_per_unit();
        r.msg_rate = n as f64 / secs / 1e6;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(qpn: u32, psn: u32, rkey: u32, vaddr: u64, last: u8) -> Keys {
        let gid = rxe_verbs::Gid::from(std::net::Ipv4Addr::new(10, 99, 0, last));
        Keys {
            lid: 0,
            out_reads: 128,
            qpn,
            psn,
            rkey,
            vaddr,
            gid,
            srqn: 0,
        }
    }

    #[test]
    fn lines_match_the_tools_output() {
        // ib_write_bw and ib_read_bw on the reference peer.
        let k = keys(0x12, 0x5466b, 0x2ff, 0x5653c5cdc000, 3);
        assert_eq!(
            address_lines(true, &k, Verb::Write),
            [
                " local address: LID 0000 QPN 0x0012 PSN 0x5466b RKey 0x0002ff VAddr 0x005653c5cdc000",
                " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:03"
            ]
        );
        let k = keys(0x15, 0x6139bc, 0x683, 0x5618af442000, 3);
        assert_eq!(
            address_lines(false, &k, Verb::Read)[0],
            " remote address: LID 0000 QPN 0x0015 PSN 0x6139bc OUT 0x80 RKey 0x000683 VAddr 0x005618af442000"
        );
        let k = keys(0x17, 0x3119cc, 0, 0x1000, 3);
        assert_eq!(
            address_lines(true, &k, Verb::Atomic)[0],
            " local address: LID 0000 QPN 0x0017 PSN 0x3119cc"
        );
        assert_eq!(
            address_lines(true, &k, Verb::Send)[0],
            " local address: LID 0000 QPN 0x0017 PSN 0x3119cc"
        );
        // C prints zero without the 0x.
        let k = keys(0x17, 0, 0, 0, 3);
        assert_eq!(
            address_lines(true, &k, Verb::Write)[0],
            " local address: LID 0000 QPN 0x0017 PSN 000000 RKey 00000000 VAddr 0000000000000000"
        );
        assert_eq!(RULE.len(), 87);
    }

    #[test]
    fn tables_match_the_tools_output() {
        let r = Report {
            size: 4096,
            iters: 100,
            bw_peak: 34.79,
            bw_avg: 25.27,
            msg_rate: 0.006470,
        };
        assert_eq!(
            bw_header(BwUnit::MBytes),
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        assert_eq!(
            bw_header(BwUnit::Gbits),
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        );
        assert_eq!(
            bw_row(&r, BwUnit::MBytes),
            " 4096       100              34.79              25.27  \t\t   0.006470"
        );
        // ib_send_bw --report_gbits, client on the reference peer.
        let g = Report {
            size: 65536,
            iters: 100,
            bw_peak: 0.098102,
            bw_avg: 0.083928,
            msg_rate: 0.000160,
        };
        assert_eq!(
            bw_row(&g, BwUnit::Gbits),
            " 65536      100           0.098102            0.083928            0.000160"
        );
        let g = Report {
            bw_peak: 0.23,
            bw_avg: 0.21,
            msg_rate: 0.006513,
            ..g
        };
        assert_eq!(
            bw_row(&g, BwUnit::Gbits),
            " 65536      100              0.23               0.21   \t\t   0.006513"
        );
        let s = LatStats {
            min: 12.69,
            max: 3988.82,
            typical: 13.05,
            avg: 200.97,
            stdev: 734.37,
            p99: 3988.82,
            p999: 3988.82,
        };
        assert_eq!(
            lat_row(64, 100, &s),
            " 64      100          12.69          3988.82      13.05    \t       200.97      \t734.37 \t\t3988.82 \t\t3988.82"
        );
        let s = LatStats {
            min: 33.57,
            max: 208.22,
            typical: 34.33,
            avg: 37.97,
            stdev: 18.27,
            p99: 208.22,
            p999: 208.22,
        };
        assert_eq!(
            lat_row(64, 100, &s),
            " 64      100          33.57          208.22       34.33    \t       37.97       \t18.27  \t\t208.22  \t\t208.22 "
        );
    }

    #[test]
    fn info_block_of_a_write_bw_client() {
        let b = info_block(&TestInfo {
            verb: Verb::Write,
            lat: false,
            cmp_swap: false,
            device: "rxe0".into(),
            qps: 1,
            depth: Some(("TX", 100)),
            cq_mod: Some(100),
            mtu: 1024,
            gid_index: 1,
            out_reads: 1,
        });
        assert_eq!(b.first().unwrap(), RULE);
        assert_eq!(b[1], "                    RDMA_Write BW Test");
        assert!(b.contains(&" TX depth        : 100".to_string()));
        assert!(b.contains(&" CQ Moderation   : 100".to_string()));
        assert!(b.contains(&" Mtu             : 1024[B]".to_string()));
        assert!(b.contains(&" Max inline data : 0[B]".to_string()));
        assert!(b.contains(&" Number of qps   : 1\t\tTransport type : IB".to_string()));
        assert_eq!(
            title(Verb::Atomic, false, true),
            "                    Atomic CMP_AND_SWAP BW Test"
        );
    }

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&x| Duration::from_micros(x)).collect()
    }

    #[test]
    fn latency_statistics() {
        // Gaps 10, 20, 30, 40 us, half of each reported.
        let s = lat_stats(&us(&[0, 10, 30, 60, 100]), 2).unwrap();
        assert!((s.min - 5.0).abs() < 1e-9);
        assert!((s.max - 20.0).abs() < 1e-9);
        assert!((s.typical - 12.5).abs() < 1e-9, "{s:?}");
        assert!((s.avg - 12.5).abs() < 1e-9);
        assert!((s.stdev - 31.25f64.sqrt()).abs() < 1e-9);
        assert!((s.p99 - 20.0).abs() < 1e-9);
        // Odd count: the middle one; READs are not halved.
        let s = lat_stats(&us(&[0, 1, 3, 6]), 1).unwrap();
        assert!((s.typical - 2.0).abs() < 1e-9);
        // 1000 gaps: the 99% is the 990th smallest.
        let mut t = vec![0u64];
        for i in 1..=1000u64 {
            t.push(t[i as usize - 1] + i);
        }
        let s = lat_stats(&us(&t), 1).unwrap();
        assert!((s.p99 - 990.0).abs() < 1e-9, "{s:?}");
        assert!((s.p999 - 999.0).abs() < 1e-9, "{s:?}");
        assert!(lat_stats(&us(&[5]), 2).is_none());
    }

    #[test]
    fn bandwidth_statistics() {
        // 4 messages of 1 MiB posted at 0, 1, 2, 3 ms; completions seen
        // for message 1 at 4 ms and message 3 at 5 ms.
        let posted = us(&[0, 1000, 2000, 3000]);
        let done = [
            (1u64, Duration::from_micros(4000)),
            (3, Duration::from_micros(5000)),
        ];
        let r = bw_report(1 << 20, 4, &posted, &done, BwUnit::MBytes);
        assert_eq!((r.size, r.iters), (1 << 20, 4));
        assert!((r.bw_avg - 800.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 0.0008).abs() < 1e-12, "{r:?}");
        // Best: messages 2..=3 between 2 ms and 5 ms, 1.5 ms each... or
        // 0..=3 in 5 ms (1.25 ms each): the latter.
        assert!((r.bw_peak - 800.0).abs() < 1e-6, "{r:?}");
        let g = bw_report(1 << 20, 4, &posted, &done, BwUnit::Gbits);
        assert!((g.bw_peak - 800.0 * 1_048_576.0 / 125e6).abs() < 1e-9);
        // Only the ends kept: the same average, no peak.
        let e = bw_report(1 << 20, 4, &posted[..1], &done[1..], BwUnit::MBytes);
        assert!((e.bw_avg - 800.0).abs() < 1e-6 && e.bw_peak == 0.0, "{e:?}");
        assert!((g.bw_avg - 800.0 * 1_048_576.0 / 125e6).abs() < 1e-9);
        let r = recv_report(
            4096,
            100,
            Duration::ZERO,
            Duration::from_millis(100),
            BwUnit::MBytes,
        );
        assert_eq!(r.bw_peak, 0.0);
        assert!((r.msg_rate - 0.001).abs() < 1e-12);
        // Nothing measured: zeros, no panic.
        let r = bw_report(8, 0, &[], &[], BwUnit::MBytes);
        assert_eq!(r.bw_avg, 0.0);
    }
}
