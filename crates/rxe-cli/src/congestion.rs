//! The device options of congestion control (rxe-core's `congestion` and
//! `dcqcn` modules have the algorithm and its sources): ECN on or off and
//! every DCQCN parameter, under ConnectX firmware's names, on every
//! command that adds a device. Unset options keep the defaults
//! (`DeviceConfig::default_congestion`: ConnectX's, or all off with
//! `RXE_ECN=0`).

use std::io::{self, Write};
use std::time::Duration;

use rxe_verbs::{CongestionConfig, DcqcnParams, DeviceConfig};

/// Congestion control options.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Congestion control (ECN, CNP, DCQCN)")]
pub struct CongestionArgs {
    /// No ECN: packets go out Not-ECT, CE marks get no CNP, CNPs change
    /// no rate (as the kernel's Soft-RoCE).
    #[arg(long)]
    pub no_ecn: bool,
    /// Notification point: at most one CNP per QP per this many µs.
    #[arg(long, value_name = "US")]
    pub min_time_between_cnps: Option<u64>,
    /// The DSCP of CNPs (0..=63).
    #[arg(long, value_name = "DSCP", value_parser = clap::value_parser!(u8).range(0..=63))]
    pub cnp_dscp: Option<u8>,
    /// DCQCN line rate, Mb/s: a QP back at it is no longer paced.
    #[arg(long, value_name = "MBPS")]
    pub rpg_max_rate: Option<u32>,
    /// DCQCN lowest rate, Mb/s.
    #[arg(long, value_name = "MBPS")]
    pub rpg_min_rate: Option<u32>,
    /// Rate after the first CNP, Mb/s (0: the line rate).
    #[arg(long, value_name = "MBPS")]
    pub rate_to_set_on_first_cnp: Option<u32>,
    /// A reduction keeps at least this percentage of the rate.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rpg_min_dec_fac: Option<u8>,
    /// Alpha (1/1024 units) shifted right by this is the reduction.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=31))]
    pub rpg_gd: Option<u8>,
    /// At most one rate reduction per this many µs.
    #[arg(long, value_name = "US")]
    pub rate_reduce_monitor_period: Option<u64>,
    /// Alpha on the first CNP, in 1/1024.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub initial_alpha_value: Option<u16>,
    /// Alpha's weight g is (1024 - this) / 1024.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub dce_tcp_g: Option<u16>,
    /// The alpha update period, µs.
    #[arg(long, value_name = "US")]
    pub dce_tcp_rtt: Option<u64>,
    /// The rate-increase timer, µs.
    #[arg(long, value_name = "US")]
    pub rpg_time_reset: Option<u64>,
    /// The rate-increase byte counter, in 64-byte units.
    #[arg(long, value_name = "N")]
    pub rpg_byte_reset: Option<u32>,
    /// Fast-recovery steps (F) before additive increase.
    #[arg(long, value_name = "N")]
    pub rpg_threshold: Option<u32>,
    /// Additive increase, Mb/s.
    #[arg(long, value_name = "MBPS")]
    pub rpg_ai_rate: Option<u32>,
    /// Hyper increase, Mb/s.
    #[arg(long, value_name = "MBPS")]
    pub rpg_hai_rate: Option<u32>,
}

impl CongestionArgs {
    /// The device's settings: the defaults with the options given.
    pub fn config(&self) -> CongestionConfig {
        let mut c = DeviceConfig::default_congestion();
        if self.no_ecn {
            c = CongestionConfig::off();
        }
        let us = Duration::from_micros;
        if let Some(v) = self.min_time_between_cnps {
            c.min_time_between_cnps = us(v);
        }
        if let Some(v) = self.cnp_dscp {
            c.cnp_dscp = v;
        }
        let d: &mut DcqcnParams = &mut c.dcqcn;
        let set = |dst: &mut u32, v: Option<u32>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut d.max_rate_mbps, self.rpg_max_rate);
        set(&mut d.min_rate_mbps, self.rpg_min_rate);
        set(&mut d.rate_on_first_cnp_mbps, self.rate_to_set_on_first_cnp);
        set(&mut d.byte_reset, self.rpg_byte_reset);
        set(&mut d.threshold, self.rpg_threshold);
        set(&mut d.ai_rate_mbps, self.rpg_ai_rate);
        set(&mut d.hai_rate_mbps, self.rpg_hai_rate);
        if let Some(v) = self.rpg_min_dec_fac {
            d.min_dec_fac = v;
        }
        if let Some(v) = self.rpg_gd {
            d.gd = v;
        }
        if let Some(v) = self.rate_reduce_monitor_period {
            d.rate_reduce_monitor_period = us(v);
        }
        if let Some(v) = self.initial_alpha_value {
            d.initial_alpha = v;
        }
        if let Some(v) = self.dce_tcp_g {
            d.dce_tcp_g = v;
        }
        if let Some(v) = self.dce_tcp_rtt {
            d.dce_tcp_rtt = us(v);
        }
        if let Some(v) = self.rpg_time_reset {
            d.time_reset = us(v);
        }
        c
    }
}

/// The settings as `rxe info -v` prints them, one `name: value` a line,
/// under ConnectX's names.
pub fn describe(out: &mut impl Write, c: &CongestionConfig) -> io::Result<()> {
    let on = |b: bool| if b { "on" } else { "off" };
    let d = &c.dcqcn;
    let us = |t: Duration| t.as_micros();
    for (name, value) in [
        ("ecn", format!("{} (data packets ECT(0))", on(c.ecn))),
        ("cnp (np)", on(c.np).to_string()),
        ("dcqcn (rp)", on(c.rp).to_string()),
        (
            "min_time_between_cnps",
            format!("{} us", us(c.min_time_between_cnps)),
        ),
        ("cnp_dscp", c.cnp_dscp.to_string()),
        ("cnp_802p_prio", c.cnp_prio.to_string()),
        ("rpg_max_rate", format!("{} Mb/s", d.max_rate_mbps)),
        ("rpg_min_rate", format!("{} Mb/s", d.min_rate_mbps)),
        (
            "rate_to_set_on_first_cnp",
            format!("{} Mb/s", d.rate_on_first_cnp_mbps),
        ),
        ("rpg_min_dec_fac", format!("{} %", d.min_dec_fac)),
        ("rpg_gd", d.gd.to_string()),
        (
            "rate_reduce_monitor_period",
            format!("{} us", us(d.rate_reduce_monitor_period)),
        ),
        ("initial_alpha_value", d.initial_alpha.to_string()),
        ("dce_tcp_g", d.dce_tcp_g.to_string()),
        ("dce_tcp_rtt", format!("{} us", us(d.dce_tcp_rtt))),
        ("rpg_time_reset", format!("{} us", us(d.time_reset))),
        ("rpg_byte_reset", d.byte_reset.to_string()),
        ("rpg_threshold", d.threshold.to_string()),
        ("rpg_ai_rate", format!("{} Mb/s", d.ai_rate_mbps)),
        ("rpg_hai_rate", format!("{} Mb/s", d.hai_rate_mbps)),
    ] {
        // Values line up at column 56 (tabs of 8, after three).
        let mut col = 24 + name.len() + 1;
        let mut tabs = String::from("\t");
        col = (col / 8 + 1) * 8;
        while col < 56 {
            tabs.push('\t');
            col += 8;
        }
        writeln!(out, "\t\t\t{name}:{tabs}{value}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        cc: CongestionArgs,
    }

    #[test]
    fn options_override_the_defaults_and_no_ecn_turns_all_off() {
        let c = Cli::parse_from(["x"]).cc.config();
        assert_eq!(c.dcqcn, DcqcnParams::default());
        let c = Cli::parse_from([
            "x",
            "--rpg-max-rate",
            "1000",
            "--rpg-time-reset",
            "55",
            "--min-time-between-cnps",
            "0",
            "--cnp-dscp",
            "26",
        ])
        .cc
        .config();
        assert_eq!(c.dcqcn.max_rate_mbps, 1000);
        assert_eq!(c.dcqcn.time_reset, Duration::from_micros(55));
        assert_eq!(c.min_time_between_cnps, Duration::ZERO);
        assert_eq!(c.cnp_dscp, 26);
        let off = Cli::parse_from(["x", "--no-ecn"]).cc.config();
        assert!(!off.ecn && !off.np && !off.rp);
        assert!(Cli::try_parse_from(["x", "--cnp-dscp", "64"]).is_err());
    }

    #[test]
    fn describe_names_every_parameter() {
        let mut out = Vec::new();
        describe(&mut out, &CongestionConfig::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        for name in [
            "rpg_ai_rate",
            "dce_tcp_g",
            "min_time_between_cnps",
            "rpg_threshold",
        ] {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("rpg_hai_rate:\t\t\t50 Mb/s"), "{text}");
    }
}
