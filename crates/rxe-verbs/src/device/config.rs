//! What a device is asked to sit on ([`Target`]: an interface or one
//! address) and how ([`DeviceConfig`]), and what probing the host finds
//! there ([`Probe`]).

use super::*;
use rxe_core::Gid;

/// What a device sits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every address of this interface (`-d IFACE`).
    Interface(String),
    /// This one local address (`--ip ADDR`): on loopback, 127.0.0.1,
    /// 127.0.0.2, ... make separate devices.
    Address(IpAddr),
    /// These local addresses, at GID indexes 0, 1, ... in this order: a
    /// device with more than one path (an alternate path for migration)
    /// without an interface of its own.
    Addresses(Vec<IpAddr>),
}

impl Target {
    /// The address an error about a target that is not there names.
    pub(crate) fn first_address(&self) -> Option<IpAddr> {
        match self {
            Target::Address(ip) => Some(*ip),
            Target::Addresses(v) => v.first().copied(),
            Target::Interface(_) => None,
        }
    }
}

/// How to add a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// `None` takes the first free `rxeN`.
    pub name: Option<String>,
    pub target: Target,
    /// Write every packet sent and received to this pcap file.
    pub capture: Option<std::path::PathBuf>,
    /// UDP GSO on send and GRO on receive (rxe-net's `Offload`): on unless
    /// `RXE_GSO=0` is in the environment ([`DeviceConfig::default_gso`]).
    /// docs/performance.md has the measurements.
    pub gso: bool,
    /// ECN and congestion control (CNPs, DCQCN): on with ConnectX's
    /// defaults unless `RXE_ECN=0` is in the environment
    /// ([`DeviceConfig::default_congestion`]); docs/congestion.md.
    pub congestion: CongestionConfig,
    /// UDP source ports per address (rxe-net's `NetPort::with_source_ports`):
    /// each QP's packets leave from one of them, chosen by a hash of its
    /// QPN, as kernel rxe's from 0xC000 + a hash of the QPN; 0 sends
    /// everything from port 4791. [`DeviceConfig::default_source_ports`].
    pub source_ports: u16,
    /// The seeded fault layer on the receive path (rxe-net's `Faults`):
    /// drops, duplicates, reorders, for tests and benchmarks; `None`
    /// unless `RXE_FAULTS` is set ([`DeviceConfig::default_faults`]).
    pub faults: Option<rxe_net::Faults>,
    /// RC QPs resend early, a few measured round trips after a loss went
    /// unanswered, spending no retry (rxe-core's `send::adaptive_timer`,
    /// as NVIDIA's adaptive retransmission): on unless
    /// `RXE_ADAPTIVE_RETRANS=0` ([`DeviceConfig::default_adaptive_retransmit`]).
    pub adaptive_retransmit: bool,
    /// RC QPs retransmit selectively (rxe-core's `recv::reorder`): the
    /// responder holds SEND and WRITE packets that arrive after a gap, the
    /// requester resends only the NAK'd packet first and learns per QP
    /// whether its peer holds (a go-back-N peer such as kernel rxe gets
    /// go-back-N after the first loss): on unless `RXE_SELECTIVE_RETRANS=0`
    /// ([`DeviceConfig::default_selective_retransmit`]).
    pub selective_retransmit: bool,
    /// A post to an RC QP with packets already in flight leaves its
    /// packets queued for a moment, so that consecutive posts go out in
    /// one batch (`Device::kick_corked`): on unless `RXE_CORK=0`
    /// ([`DeviceConfig::default_cork`]).
    pub cork: bool,
    /// Busy polling preferred ([`Device::set_prefer_busy_poll`]): while a
    /// thread keeps polling the device's CQs, arrivals are left to it and
    /// the driver thread only looks in now and then. On unless
    /// `RXE_PREFER_BUSY_POLL=0` ([`DeviceConfig::default_prefer_busy_poll`]).
    pub prefer_busy_poll: bool,
}

/// What a device on a target would report, read from the host without
/// binding anything ([`DeviceConfig::probe`]): `ibv_get_device_list` and
/// the queries of a device that is not open yet.
#[derive(Debug, Clone)]
pub struct Probe {
    pub attr: DeviceAttr,
    pub port: PortAttr,
    /// The GID table as [`Device::add`] would fill it now.
    pub gids: Vec<Gid>,
    /// The interface's kernel index (0 when unknown).
    pub ifindex: u32,
}

impl DeviceConfig {
    /// Reads what a device on this target would be (node GUID, limits,
    /// port, GIDs) without binding its sockets, so that a device can be
    /// listed and queried while another process holds its port.
    pub fn probe(&self) -> Result<Probe> {
        let d = match discover(&self.target) {
            Some(d) => d,
            None => return Err(missing(&self.target)),
        };
        let bind: Vec<IpAddr> = match &self.target {
            Target::Address(ip) => vec![*ip],
            Target::Addresses(v) => v.clone(),
            Target::Interface(_) => d.addrs.clone(),
        };
        let attr = DeviceAttr::rxe(node_guid(d.mac, bind.first().copied()));
        let state = if d.addrs.is_empty() {
            PortState::Down
        } else {
            PortState::Active
        };
        let port = port_attr(state, d.mtu, d.netdev, &attr);
        Ok(Probe {
            attr,
            port,
            gids: bind.into_iter().map(Gid::from).collect(),
            ifindex: d.ifindex,
        })
    }

    /// A device on `target`, named `rxeN`, with every setting as the
    /// environment says (`RXE_GSO`, `RXE_ECN`, `RXE_SOURCE_PORTS`,
    /// `RXE_FAULTS`, `RXE_ADAPTIVE_RETRANS`, `RXE_SELECTIVE_RETRANS`,
    /// `RXE_CORK`, `RXE_PREFER_BUSY_POLL`) and no capture.
    pub fn on(target: Target) -> DeviceConfig {
        DeviceConfig {
            name: None,
            target,
            capture: None,
            gso: DeviceConfig::default_gso(),
            congestion: DeviceConfig::default_congestion(),
            source_ports: DeviceConfig::default_source_ports(),
            faults: DeviceConfig::default_faults(),
            adaptive_retransmit: DeviceConfig::default_adaptive_retransmit(),
            selective_retransmit: DeviceConfig::default_selective_retransmit(),
            cork: DeviceConfig::default_cork(),
            prefer_busy_poll: DeviceConfig::default_prefer_busy_poll(),
        }
    }

    /// A device on several local addresses ([`Target::Addresses`]).
    pub fn on_addresses(ips: Vec<IpAddr>) -> DeviceConfig {
        DeviceConfig::on(Target::Addresses(ips))
    }

    pub fn on_address(ip: IpAddr) -> DeviceConfig {
        DeviceConfig::on(Target::Address(ip))
    }

    /// The fault layer from `RXE_FAULTS` (`drop=0.01,dup=0.001,
    /// reorder=0.01,seed=7`); none when unset. A value that does not parse
    /// is reported and ignored.
    pub fn default_faults() -> Option<rxe_net::Faults> {
        let spec = std::env::var("RXE_FAULTS")
            .ok()
            .filter(|s| !s.trim().is_empty())?;
        match spec.parse() {
            Ok(f) => {
                tracing::warn!(faults = %f, "RXE_FAULTS: dropping, duplicating and reordering received packets");
                Some(f)
            }
            Err(e) => {
                tracing::error!(error = %e, "RXE_FAULTS ignored");
                None
            }
        }
    }

    /// UDP source ports per address unless told: 8, or `RXE_SOURCE_PORTS`
    /// from the environment (0 to 64; 0: all from port 4791).
    pub fn default_source_ports() -> u16 {
        std::env::var("RXE_SOURCE_PORTS")
            .ok()
            .and_then(|v| v.trim().parse::<u16>().ok())
            .map_or(rxe_net::DEFAULT_SOURCE_PORTS, |n| n.min(64))
    }

    /// Early retransmission unless told: on, but for
    /// `RXE_ADAPTIVE_RETRANS=0` in the environment (only the transport
    /// timer then retransmits, as in kernel rxe).
    pub fn default_adaptive_retransmit() -> bool {
        std::env::var_os("RXE_ADAPTIVE_RETRANS").is_none_or(|v| v != "0")
    }

    /// Selective retransmission unless told: on, but for
    /// `RXE_SELECTIVE_RETRANS=0` in the environment (RC is then
    /// go-back-N only, as in kernel rxe).
    pub fn default_selective_retransmit() -> bool {
        std::env::var_os("RXE_SELECTIVE_RETRANS").is_none_or(|v| v != "0")
    }

    /// Corking of posts to busy RC QPs unless told: on, but for
    /// `RXE_CORK=0` in the environment (every post then sends at once).
    pub fn default_cork() -> bool {
        std::env::var_os("RXE_CORK").is_none_or(|v| v != "0")
    }

    /// Busy polling preferred unless told: yes, but for
    /// `RXE_PREFER_BUSY_POLL=0` in the environment (the driver thread then
    /// watches the sockets always, and is woken by every arrival).
    pub fn default_prefer_busy_poll() -> bool {
        std::env::var_os("RXE_PREFER_BUSY_POLL").is_none_or(|v| v != "0")
    }

    /// Whether devices use UDP GSO/GRO unless told: yes, but for
    /// `RXE_GSO=0` in the environment.
    pub fn default_gso() -> bool {
        std::env::var_os("RXE_GSO").is_none_or(|v| v != "0")
    }

    /// Congestion control unless told: ECN, CNPs and DCQCN on with
    /// ConnectX's defaults, all off for `RXE_ECN=0` in the environment
    /// (which reaches programs run with the drop-in libibverbs too).
    pub fn default_congestion() -> CongestionConfig {
        if std::env::var_os("RXE_ECN").is_some_and(|v| v == "0") {
            CongestionConfig::off()
        } else {
            CongestionConfig::default()
        }
    }

    pub fn on_interface(name: &str) -> DeviceConfig {
        DeviceConfig::on(Target::Interface(name.to_string()))
    }
}

/// The error for a target the host does not have.
pub(super) fn missing(target: &Target) -> VerbsError {
    match (target, target.first_address()) {
        (Target::Interface(n), _) => VerbsError::NoSuchInterface(n.clone()),
        (_, Some(ip)) => VerbsError::AddressNotLocal(ip),
        (_, None) => VerbsError::NoAddresses,
    }
}
