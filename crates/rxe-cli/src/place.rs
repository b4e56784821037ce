//! Where a command puts its device: on one local address (`--ip`) or on a
//! network interface (`-d`). A device lives in the process that adds it,
//! so each command adds its own and removes it when it ends.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rxe_verbs::{CongestionConfig, Device, DeviceConfig, Gid, Target};

use crate::congestion::CongestionArgs;

/// `--ip ADDR` / `-d IFACE`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Place {
    /// Add the device on this local address only (its UDP port 4791). On
    /// loopback, 127.0.0.1, 127.0.0.2, ... are separate devices.
    #[arg(long, value_name = "ADDR")]
    pub ip: Option<IpAddr>,
    /// Add the device on this network interface, with all its addresses
    /// (`rxe devices` lists them). The real tools take an RDMA device name
    /// here; rxe has none until a command adds one.
    #[arg(
        short = 'd',
        long = "ib-dev",
        value_name = "IFACE",
        conflicts_with = "ip"
    )]
    pub iface: Option<String>,
    #[command(flatten)]
    pub congestion: CongestionArgs,
}

impl Place {
    pub fn target(&self) -> Option<Target> {
        match (&self.ip, &self.iface) {
            (Some(ip), _) => Some(Target::Address(*ip)),
            (None, Some(i)) => Some(Target::Interface(i.clone())),
            (None, None) => None,
        }
    }
}

/// `--pcap FILE`: the device's live capture.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Capture {
    /// Write every packet the device sends and receives to this capture
    /// file: pcapng, with the device's addresses in its interface
    /// description, if FILE ends in .pcapng, classic pcap otherwise
    /// (`rxe dissect` and `rxe ladder` read both).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
}

/// How a target reads in a message.
pub fn describe(t: &Target) -> String {
    match t {
        Target::Address(ip) => ip.to_string(),
        Target::Addresses(v) => v
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        Target::Interface(i) => format!("interface {i}"),
    }
}

/// Runs a `pingpong` or `perf` session on a device of its own: on `--ip`
/// or `-d` if given, else a client's on the address it reaches `host`
/// from and a server's on the default interface. After a session that
/// succeeded the device stays until nothing has arrived for `linger`, so
/// that the acknowledgements of the peer's last messages (and of its
/// resends of them) leave before its UDP port closes; then it is removed
/// (printing its counters with `--counters`).
pub fn run_on_device(
    place: &Place,
    capture: &Capture,
    host: Option<&str>,
    counters: bool,
    linger: Duration,
    session: impl FnOnce(&Device, &Target) -> Result<()>,
) -> Result<ExitCode> {
    let target = match place.target() {
        Some(t) => t,
        None => match host {
            // The address this host reaches the server from.
            Some(h) => Target::Address(source_address_for(h)?),
            None => Target::Interface(default_interface()?),
        },
    };
    let dev = add_device(&target, capture.pcap.as_deref(), place.congestion.config())?;
    let result = session(&dev, &target);
    if result.is_ok() {
        linger_until_quiet(&dev, linger);
    }
    remove_device(dev, counters);
    result.map(|()| ExitCode::SUCCESS)
}

/// Keeps the device until no packet has arrived for `quiet` (at most
/// `LINGER_MAX`). The peer's last message is acknowledged when it arrives,
/// but on a lossy link that ACK can be lost, and the peer then resends
/// after its ACK timeout (67 ms at `timeout` 14, longer when the resend is
/// lost too): each resend is answered and waits out one more `quiet`, so a
/// peer is not left retrying into a closed port.
fn linger_until_quiet(dev: &Device, quiet: Duration) {
    let start = Instant::now();
    let mut seen = dev.counter("net_rcvd_pkts");
    let mut since = Instant::now();
    while since.elapsed() < quiet && start.elapsed() < LINGER_MAX {
        std::thread::sleep(Duration::from_millis(10));
        let now = dev.counter("net_rcvd_pkts");
        if now != seen {
            seen = now;
            since = Instant::now();
        }
    }
}

/// The longest `linger_until_quiet` waits.
const LINGER_MAX: Duration = Duration::from_secs(3);

/// Adds a device on `target`, recording its packets to `capture` if
/// given, with an error that says what went wrong in one line.
pub fn add_device(
    target: &Target,
    capture: Option<&Path>,
    congestion: CongestionConfig,
) -> Result<Device> {
    let mut config = DeviceConfig::on(target.clone());
    config.capture = capture.map(Path::to_path_buf);
    config.congestion = congestion;
    Device::add(config).with_context(|| format!("cannot add a device on {}", describe(target)))
}

/// Removes a command's device, first printing its nonzero counters when
/// `--counters` asked for them.
pub fn remove_device(dev: Device, counters: bool) {
    if counters {
        println!("{}", counters_line(&dev.counters()));
    }
    let _ = dev.remove();
}

/// ` rxe counters: name value name value ...`, the nonzero ones in the
/// device's order.
pub fn counters_line(counters: &[(String, u64)]) -> String {
    let mut line = " rxe counters:".to_string();
    for (name, value) in counters.iter().filter(|(_, v)| *v != 0) {
        line.push_str(&format!(" {name} {value}"));
    }
    line
}

/// The local address the host would send from to reach `host` (a route
/// lookup; nothing is sent).
pub fn source_address_for(host: &str) -> Result<IpAddr> {
    let addrs: Vec<SocketAddr> = (host, 4791)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    let mut last = None;
    for a in &addrs {
        let any: SocketAddr = if a.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let probe = UdpSocket::bind(any).and_then(|s| {
            s.connect(a)?;
            s.local_addr()
        });
        match probe {
            Ok(l) => return Ok(l.ip()),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).with_context(|| format!("no route to {host}")),
        None => bail!("{host} has no address"),
    }
}

/// The first interface that is up, is not loopback and has a usable
/// address: what the real tools' "first device found" stands for.
pub fn default_interface() -> Result<String> {
    let ifs = rxe_net::netif::list_interfaces().context("cannot list network interfaces")?;
    ifs.into_iter()
        .find(|i| {
            i.up && i
                .addrs
                .iter()
                .any(|a| usable_address(*a) && !a.is_loopback())
        })
        .map(|i| i.name)
        .context("no interface is up with an address: say where the device goes with --ip ADDR or -d IFACE (see `rxe devices`)")
}

/// Whether a device can be added on this address: link-local IPv6
/// addresses need a scope, which RoCEv2 GIDs do not carry.
pub fn usable_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 != 0xfe80,
    }
}

/// The GID index to use when `-g` is not given: the address's own for
/// `--ip`, else the first IPv4 one (as a RoCE user picks with
/// `rxe-gid-index`), else the first.
pub fn default_gid_index(dev: &Device, target: &Target) -> Result<u8> {
    if let Target::Address(ip) = target {
        if let Some((_, i)) = dev.find_gid(&Gid::from(*ip)) {
            return Ok(i);
        }
    }
    let table = dev.gid_table(rxe_verbs::PORT)?;
    let v4 = table
        .iter()
        .find(|e| e.gid.to_ip().is_ipv4())
        .or_else(|| table.first());
    match v4 {
        Some(e) => Ok(e.index),
        None => bail!("device {} has no GID (no usable address)", dev.name()),
    }
}

/// The GID index to use (`index`, else [`default_gid_index`]) and its GID.
pub fn local_gid(dev: &Device, target: &Target, index: Option<u8>) -> Result<(u8, Gid)> {
    let index = match index {
        Some(g) => g,
        None => default_gid_index(dev, target)?,
    };
    let gid = dev
        .query_gid(rxe_verbs::PORT, index)
        .with_context(|| format!("cannot read the GID of index {index}"))?;
    Ok((index, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_not_usable() {
        assert!(usable_address("127.0.0.1".parse().unwrap()));
        assert!(usable_address("fd00::1".parse().unwrap()));
        assert!(!usable_address("fe80::1".parse().unwrap()));
    }

    #[test]
    fn counters_line_keeps_the_nonzero_ones_in_order() {
        let c = [
            ("sent_pkts".to_string(), 10),
            ("rcvd_seq_err".to_string(), 0),
            ("duplicate_request".to_string(), 3),
        ];
        assert_eq!(
            counters_line(&c),
            " rxe counters: sent_pkts 10 duplicate_request 3"
        );
        assert_eq!(counters_line(&[]), " rxe counters:");
    }

    #[test]
    fn route_lookup_of_loopback() {
        assert!(source_address_for("127.0.0.7").unwrap().is_loopback());
    }
}
