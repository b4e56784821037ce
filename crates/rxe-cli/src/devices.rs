//! `rxe devices`: where this host can put an rxe device.
//!
//! `ibv_devices` lists the RDMA devices the kernel holds. An rxe device
//! lives in the process that adds it (`rxe info`, `rxe pingpong`, an
//! application using rxe-verbs), so there is nothing to list between
//! commands; what is useful is where one can go: each interface with its
//! state, MTU, the IB path MTU a device there gets, and each address a
//! device can be added on (`--ip ADDR`) with the GID it would have.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use rxe_net::netif::{list_interfaces, mtu_to_ib, Interface};
use rxe_verbs::Gid;

use crate::place::usable_address;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also list interfaces that are down or have no usable address.
    #[arg(short, long)]
    all: bool,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let ifs = list_interfaces().context("cannot list network interfaces")?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    write_table(&mut out, &ifs, args.all)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The table, in the look of `ibv_devices` (four-space indent, a dashed
/// rule under the header).
pub fn write_table(out: &mut impl Write, ifs: &[Interface], all: bool) -> io::Result<()> {
    row(
        out,
        [
            "interface",
            "state",
            "MTU",
            "IB MTU",
            "address (--ip)",
            "GID",
        ],
    )?;
    row(
        out,
        [
            "---------",
            "-----",
            "---",
            "------",
            "--------------",
            "---",
        ],
    )?;
    for i in ifs {
        let addrs: Vec<_> = i
            .addrs
            .iter()
            .copied()
            .filter(|a| usable_address(*a))
            .collect();
        if !all && (!i.up || addrs.is_empty()) {
            continue;
        }
        let state = if i.up { "UP" } else { "DOWN" };
        let (mtu, ib) = if i.mtu == 0 {
            ("-".to_string(), "-".to_string())
        } else {
            (i.mtu.to_string(), mtu_to_ib(i.mtu).bytes().to_string())
        };
        if addrs.is_empty() {
            row(out, [&i.name, state, &mtu, &ib, "-", "-"])?;
        }
        for (n, a) in addrs.iter().enumerate() {
            let gid = Gid::from(*a).to_string();
            let addr = a.to_string();
            if n == 0 {
                row(out, [&i.name, state, &mtu, &ib, &addr, &gid])?;
            } else {
                row(out, ["", "", "", "", &addr, &gid])?;
            }
        }
    }
    Ok(())
}

fn row(out: &mut impl Write, c: [&str; 6]) -> io::Result<()> {
    writeln!(
        out,
        "    {:<16}\t{:<5}  {:>5}  {:>6}  {:<18}  {}",
        c[0], c[1], c[2], c[3], c[4], c[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, up: bool, mtu: u32, addrs: &[&str]) -> Interface {
        let addrs: Vec<std::net::IpAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        Interface {
            name: name.into(),
            index: 1,
            mac: None,
            mtu,
            up,
            networks: addrs.iter().map(|a| (*a, 8)).collect(),
            addrs,
        }
    }

    #[test]
    fn lists_usable_addresses_with_their_gids() {
        let ifs = vec![
            iface("lo", true, 65536, &["127.0.0.1", "::1"]),
            iface("eth0", true, 1500, &["10.0.0.5", "fe80::1"]),
            iface("eth1", false, 1500, &["10.1.0.5"]),
        ];
        let mut v = vec![];
        write_table(&mut v, &ifs, false).unwrap();
        let t = String::from_utf8(v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("    interface"), "{t}");
        assert!(lines[2].contains("lo") && lines[2].contains("65536"));
        assert!(lines[2].contains("4096") && lines[2].ends_with("::ffff:127.0.0.1"));
        assert!(lines[3].trim_start().starts_with("::1"));
        assert!(lines[4].contains("eth0") && lines[4].contains(" 1024 "));
        assert!(!t.contains("fe80"), "link-local is not offered: {t}");
        assert!(!t.contains("eth1"), "down interfaces only with --all");
        let mut v = vec![];
        write_table(&mut v, &ifs, true).unwrap();
        assert!(String::from_utf8(v).unwrap().contains("eth1"));
    }
}
