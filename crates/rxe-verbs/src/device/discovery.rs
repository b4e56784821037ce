//! What the host says about a device's target: its addresses, MTU, state
//! and MAC ([`discover`]), and what a device derives from them (node GUID,
//! port attributes, the first QPN).

use super::*;

/// What the host says about a device's target right now.
pub(super) struct Discovered {
    /// The addresses the device should have (none while the interface is
    /// down or the address is gone).
    pub(super) addrs: Vec<IpAddr>,
    pub(super) netdev: String,
    pub(super) mtu: u32,
    pub(super) mac: Option<[u8; 6]>,
    pub(super) ifindex: u32,
}

/// Addresses a device on `target` should have now, with the interface's
/// name, MTU and MAC; `None` when the interface does not exist.
pub(super) fn discover(target: &Target) -> Option<Discovered> {
    let found = |addrs, i: rxe_net::netif::Interface| Discovered {
        addrs,
        netdev: i.name,
        mtu: i.mtu,
        mac: i.mac,
        ifindex: i.index,
    };
    match target {
        Target::Address(ip) => match rxe_net::netif::interface_for_addr(*ip) {
            Some(i) => {
                let addrs = if i.up { vec![*ip] } else { vec![] };
                Some(found(addrs, i))
            }
            None => Some(Discovered {
                addrs: vec![],
                netdev: String::new(),
                mtu: 0,
                mac: None,
                ifindex: 0,
            }),
        },
        // Each address as a `Target::Address` says; the first one found
        // names the netdev (its MTU is the port's).
        Target::Addresses(ips) => {
            let each: Vec<Discovered> = ips
                .iter()
                .filter_map(|ip| discover(&Target::Address(*ip)))
                .collect();
            let mut d = each
                .iter()
                .find(|d| !d.netdev.is_empty())
                .map(|d| Discovered {
                    addrs: vec![],
                    netdev: d.netdev.clone(),
                    mtu: d.mtu,
                    mac: d.mac,
                    ifindex: d.ifindex,
                })
                .unwrap_or(Discovered {
                    addrs: vec![],
                    netdev: String::new(),
                    mtu: 0,
                    mac: None,
                    ifindex: 0,
                });
            d.addrs = each.into_iter().flat_map(|e| e.addrs).collect();
            Some(d)
        }
        Target::Interface(name) => {
            let i = rxe_net::netif::list_interfaces()
                .ok()?
                .into_iter()
                .find(|i| &i.name == name)?;
            let addrs = if i.up {
                i.addrs
                    .iter()
                    .copied()
                    .filter(|a| match a {
                        // A link-local IPv6 address needs a scope to bind;
                        // RoCEv2 between hosts uses routable addresses.
                        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 != 0xfe80,
                        IpAddr::V4(_) => true,
                    })
                    .collect()
            } else {
                vec![]
            };
            Some(found(addrs, i))
        }
    }
}

/// The node GUID: EUI-64 from the MAC; an interface without one (loopback)
/// gets one made from the device's first address, so that two devices on
/// loopback differ.
pub(super) fn node_guid(mac: Option<[u8; 6]>, first: Option<IpAddr>) -> u64 {
    match mac {
        Some(m) if m != [0; 6] => rxe_net::netif::eui64_from_mac(m),
        _ => {
            let gid = first.map(Gid::from).unwrap_or_default();
            let g = gid.as_bytes();
            rxe_net::netif::eui64_from_mac([0x02, 0x00, g[12], g[13], g[14], g[15]])
        }
    }
}

/// The port's attributes for a port in `state` on an interface of MTU
/// `netdev_mtu` (0: unknown, taken as 1500).
pub(super) fn port_attr(
    state: PortState,
    netdev_mtu: u32,
    netdev: String,
    attr: &DeviceAttr,
) -> PortAttr {
    PortAttr {
        state,
        max_mtu: PathMtu::Mtu4096,
        active_mtu: rxe_net::netif::mtu_to_ib(if netdev_mtu == 0 { 1500 } else { netdev_mtu }),
        netdev_mtu,
        gid_tbl_len: GID_TABLE_LEN,
        pkey_tbl_len: attr.max_pkeys,
        max_msg_sz: attr.max_msg_sz,
        lid: 0,
        sm_lid: 0,
        active_width: 1,
        active_speed: 1,
        link_layer: LinkLayer::Ethernet,
        netdev,
    }
}

/// Where a new device starts numbering QPs: different each time (std's
/// randomly keyed hasher over the name and the clock), so that a peer
/// still retransmitting to a QP of an earlier run does not reach a new QP
/// with the same number.
pub(super) fn qpn_start(name: &str) -> u32 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    name.hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    // Keep clear of the top, so that numbers rarely wrap in a session.
    (h.finish() % 0x80_0000) as u32
}
