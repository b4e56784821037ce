//! Interfaces and addresses: what a device on a netdev or on one address
//! needs to know about it (its index, MAC, MTU, addresses), and the
//! mappings between IP addresses and GIDs, netdev MTUs and IB path MTUs,
//! and MACs and node GUIDs.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;

use nix::ifaddrs::getifaddrs;
use nix::net::if_::{if_nametoindex, InterfaceFlags};
use rxe_core::transport::PathMtu;
use rxe_core::wire::{atomic_eth, bth, icrc, ip_udp};

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    /// The kernel's interface index (0 if it could not be read).
    pub index: u32,
    /// The Ethernet address; `None` if the interface has none or it is all
    /// zeros (loopback).
    pub mac: Option<[u8; 6]>,
    /// The netdev MTU from `/sys/class/net/NAME/mtu` (0 if unreadable).
    pub mtu: u32,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Every IPv4 and IPv6 address, in the order the kernel lists them.
    pub addrs: Vec<IpAddr>,
    /// The same addresses with their prefix lengths (from the netmask).
    pub networks: Vec<(IpAddr, u8)>,
}

impl Interface {
    /// Whether `ip` is one of this interface's addresses.
    pub fn holds(&self, ip: IpAddr) -> bool {
        self.addrs.contains(&ip)
    }

    /// The longest prefix of this interface's networks that contains `ip`.
    pub fn longest_prefix_for(&self, ip: IpAddr) -> Option<u8> {
        self.networks
            .iter()
            .filter(|(net, len)| in_network(ip, *net, *len))
            .map(|(_, len)| *len)
            .max()
    }
}

/// Whether `ip` is in the network `net/len` (of the same family).
pub fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn prefix_len(mask: IpAddr) -> u8 {
    let ones = match mask {
        IpAddr::V4(m) => u32::from(m).count_ones(),
        IpAddr::V6(m) => u128::from(m).count_ones(),
    };
    ones as u8
}

fn read_mtu(name: &str) -> u32 {
    // A name from getifaddrs never holds '/', but a caller's might.
    if name.contains('/') || name.is_empty() {
        return 0;
    }
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Every interface the kernel lists, with its addresses.
pub fn list_interfaces() -> io::Result<Vec<Interface>> {
    let mut by_name: BTreeMap<String, Interface> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for ifa in getifaddrs().map_err(io::Error::from)? {
        let name = ifa.interface_name.clone();
        let entry = by_name.entry(name.clone()).or_insert_with(|| {
            order.push(name.clone());
            // An IPv4 alias label ("eth0:1") shares its device's index and MTU.
            let dev = name.split(':').next().unwrap_or(&name);
            Interface {
                index: if_nametoindex(dev).unwrap_or(0),
                mtu: read_mtu(dev),
                name,
                mac: None,
                up: false,
                addrs: Vec::new(),
                networks: Vec::new(),
            }
        });
        entry.up |= ifa.flags.contains(InterfaceFlags::IFF_UP);
        let Some(addr) = ifa.address else { continue };
        if let Some(link) = addr.as_link_addr() {
            if let Some(mac) = link.addr().filter(|m| *m != [0; 6]) {
                entry.mac = Some(mac);
            }
            continue;
        }
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        let mask = ifa.netmask.and_then(|m| {
            m.as_sockaddr_in()
                .map(|m| IpAddr::V4(m.ip()))
                .or_else(|| m.as_sockaddr_in6().map(|m| IpAddr::V6(m.ip())))
        });
        let len = mask
            .map(prefix_len)
            .unwrap_or(if ip.is_ipv4() { 32 } else { 128 });
        entry.addrs.push(ip);
        entry.networks.push((ip, len));
    }
    Ok(order
        .into_iter()
        .filter_map(|n| by_name.remove(&n))
        .collect())
}

/// The interface that holds `ip`, or else the one whose network contains
/// it with the longest prefix (127.0.0.2 belongs to `lo` through
/// 127.0.0.1/8). `None` if no interface does or the list cannot be read.
pub fn interface_for_addr(ip: IpAddr) -> Option<Interface> {
    let list = list_interfaces().ok()?;
    if let Some(i) = list.iter().find(|i| i.holds(ip)) {
        return Some(i.clone());
    }
    list.into_iter()
        .filter_map(|i| i.longest_prefix_for(ip).map(|len| (len, i)))
        .max_by_key(|(len, _)| *len)
        .map(|(_, i)| i)
}

/// Headers a RoCEv2 packet carries beyond its payload, at most: IPv6 (40;
/// IPv4 is 20), UDP (8), BTH (12), the largest set of extended headers
/// (28: RETH 16 + ImmDt 4 ... or AtomicETH 28), ICRC (4).
pub const ROCE_V2_MAX_OVERHEAD: u32 =
    (ip_udp::MAX_HEADER_LEN + bth::HEADER_LEN + atomic_eth::HEADER_LEN + icrc::ICRC_LEN) as u32;

/// The largest IB path MTU (256 .. 4096) whose packets fit a netdev MTU of
/// `mtu` with every header (`ROCE_V2_MAX_OVERHEAD`, counted for IPv6 so
/// that one port MTU serves both families): 1500 gives 1024 (as kernel
/// rxe), 9000 and loopback's 65536 give 4096. Below 348 nothing fits; the
/// smallest IB MTU, 256, is returned anyway, and sends of full packets
/// will then fail (and be counted).
pub fn mtu_to_ib(mtu: u32) -> PathMtu {
    let room = mtu.saturating_sub(ROCE_V2_MAX_OVERHEAD);
    PathMtu::ALL
        .iter()
        .rev()
        .copied()
        .find(|m| m.bytes() <= room)
        .unwrap_or(PathMtu::Mtu256)
}

/// The EUI-64 of a MAC address (RFC 4291 appendix A: FF:FE in the middle,
/// the universal/local bit flipped), which RoCE devices use as node GUID.
pub fn eui64_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn loopback_is_listed_and_owns_127_slash_8() {
        let list = list_interfaces().unwrap();
        let lo = list.iter().find(|i| i.name == "lo").expect("lo");
        assert!(lo.up);
        assert!(lo.index > 0);
        assert_eq!(lo.mac, None);
        assert!(lo.mtu >= 1500, "lo mtu {}", lo.mtu);
        assert!(lo.holds(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let i = interface_for_addr(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))).unwrap();
        assert_eq!(i.name, "lo");
        let i = interface_for_addr(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        assert_eq!(i.name, "lo");
        // TEST-NET-3 is on no interface here.
        assert_eq!(
            interface_for_addr(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))),
            None
        );
    }

    #[test]
    fn networks_contain() {
        let net = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
        assert!(in_network(IpAddr::V4(Ipv4Addr::new(10, 1, 9, 9)), net, 16));
        assert!(!in_network(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)), net, 16));
        assert!(in_network(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), net, 0));
        assert!(in_network(net, net, 32));
        assert!(!in_network(IpAddr::V6(Ipv6Addr::LOCALHOST), net, 0));
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert!(in_network("fe80::abcd".parse().unwrap(), v6, 64));
        assert!(!in_network("fe81::1".parse().unwrap(), v6, 64));
        assert!(in_network(v6, v6, 128));
        assert_eq!(prefix_len(IpAddr::V4(Ipv4Addr::new(255, 0, 0, 0))), 8);
    }

    #[test]
    fn netdev_mtu_to_path_mtu() {
        assert_eq!(mtu_to_ib(1500), PathMtu::Mtu1024);
        assert_eq!(mtu_to_ib(65536), PathMtu::Mtu4096);
        assert_eq!(mtu_to_ib(9000), PathMtu::Mtu4096);
        assert_eq!(mtu_to_ib(4096 + 92), PathMtu::Mtu4096);
        assert_eq!(mtu_to_ib(4096 + 91), PathMtu::Mtu2048);
        assert_eq!(mtu_to_ib(2048 + 92), PathMtu::Mtu2048);
        assert_eq!(mtu_to_ib(1280), PathMtu::Mtu1024);
        assert_eq!(mtu_to_ib(576), PathMtu::Mtu256);
        assert_eq!(mtu_to_ib(0), PathMtu::Mtu256);
    }

    #[test]
    fn node_guid_from_mac() {
        assert_eq!(
            eui64_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
        assert_eq!(eui64_from_mac([0x02, 0, 0, 0, 0, 1]), 0x0000_00ff_fe00_0001);
    }
}
