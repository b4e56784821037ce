//! Address and route resolution for RoCEv2 (`rdma_resolve_addr`,
//! `rdma_resolve_route`): the IP address is the GID (IPv4-mapped for
//! IPv4, RoCEv2 Annex A17.4.5.1, unchecked section number); the device is
//! the one that holds the source address; the path MTU is the port's
//! active MTU. Nothing is sent to resolve: RoCEv2 rides on IP, whose own
//! neighbour discovery runs when the first packet goes out.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use rxe_core::transport::PathMtu;

use super::error::CmApiError;
use crate::device::{Device, PORT};
use rxe_core::Gid;

/// The hop limit of a resolved path (Linux's rdma_cm uses the route's, 64
/// by default for IPv4).
pub const DEFAULT_HOP_LIMIT: u8 = 64;
/// The traffic class of a resolved path (the ID's ToS, 0 unless set).
pub const DEFAULT_TRAFFIC_CLASS: u8 = 0;

/// Where a destination is reached from.
#[derive(Debug, Clone)]
pub struct ResolvedAddr {
    pub device: Device,
    pub sgid_index: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// The path to a resolved destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedRoute {
    pub path_mtu: PathMtu,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// The device holding `ip` and the GID index of `ip` on it.
pub fn device_for(ip: IpAddr) -> Option<(Device, u8)> {
    let gid = Gid::from(ip);
    crate::registry::devices()
        .into_iter()
        .find_map(|d| d.find_gid(&gid).map(|(_, i)| (d, i)))
}

/// The source address the host's routing table picks for `dst`: connecting
/// a UDP socket sends nothing, and its local address is the route's source.
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst, rxe_core::wire::frame::ROCE_V2_PORT))
        .ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The device and source for `dst`: the device whose address is `src` if
/// one is given; else the one holding the routing table's source for
/// `dst`; else the one whose interface network holds `dst` with the
/// longest prefix; else the only device there is.
pub fn resolve_addr(src: Option<IpAddr>, dst: IpAddr) -> Result<ResolvedAddr, CmApiError> {
    let done = |(device, sgid_index): (Device, u8), src: IpAddr| ResolvedAddr {
        device,
        sgid_index,
        src,
        dst,
    };
    if let Some(src) = src.filter(|s| !s.is_unspecified()) {
        return device_for(src)
            .map(|d| done(d, src))
            .ok_or(CmApiError::NoDevice(src));
    }
    if let Some(s) = route_source(dst) {
        if let Some(d) = device_for(s) {
            return Ok(done(d, s));
        }
    }
    let devices = crate::registry::devices();
    let interfaces = rxe_net::netif::list_interfaces().unwrap_or_default();
    let mut best: Option<(u8, Device, u8, IpAddr)> = None;
    for d in &devices {
        for g in d.gid_table(PORT).unwrap_or_default() {
            let ip = g.gid.to_ip();
            let prefix = interfaces
                .iter()
                .filter(|i| i.holds(ip))
                .filter_map(|i| i.longest_prefix_for(dst))
                .max();
            if let Some(p) = prefix {
                if best.as_ref().is_none_or(|b| p > b.0) {
                    best = Some((p, d.clone(), g.index, ip));
                }
            }
        }
    }
    if let Some((_, d, i, ip)) = best {
        return Ok(done((d, i), ip));
    }
    if let [only] = devices.as_slice() {
        if let Some(g) = only.gid_table(PORT).unwrap_or_default().first() {
            let ip = g.gid.to_ip();
            return Ok(done((only.clone(), g.index), ip));
        }
    }
    Err(CmApiError::NoDevice(dst))
}

/// The path from `dev`: its port's active MTU and the defaults above.
pub fn resolve_route(dev: &Device) -> Result<ResolvedRoute, CmApiError> {
    let port = dev.query_port(PORT)?;
    Ok(ResolvedRoute {
        path_mtu: port.active_mtu,
        hop_limit: DEFAULT_HOP_LIMIT,
        traffic_class: DEFAULT_TRAFFIC_CLASS,
    })
}
