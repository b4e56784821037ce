//! Which devices the process has, and `ibv_get_device_list`.
//!
//! `RXE_IBV_DEVICES="rxe0=127.0.0.2,rxe1=eth0"` names each device and its
//! target (an IP address or an interface); unset, there is one device per
//! up, non-loopback interface with an address, named rxe0, rxe1, ... in
//! interface order. `RXE_IBV_PCAP=FILE` writes every packet of the device
//! (of several devices: `FILE.rxeN`). Listing probes the host but binds
//! nothing: the UDP port is taken when a context first needs the engine
//! ([`crate::context`]).

use std::ffi::{c_char, c_int};
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use rxe_verbs::device::Probe;
use rxe_verbs::{DeviceConfig, Target};
use rxe_verbs_abi::consts::{IBV_NODE_CA, IBV_TRANSPORT_IB};
use rxe_verbs_abi::ibv_device;

/// One device as C sees it: the `ibv_device` first, so the pointer C holds
/// is ours.
#[repr(C)]
pub struct RxeDevice {
    pub dev: ibv_device,
    pub name: String,
    pub index: u32,
    pub config: DeviceConfig,
    /// The last probe; queries of a context answer from it until the
    /// engine is attached.
    pub probe: Mutex<Option<Probe>>,
}

impl RxeDevice {
    /// The node GUID, host order (`ibv_get_device_guid` returns it
    /// big-endian).
    pub fn node_guid(&self) -> u64 {
        self.probe
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|p| p.attr.node_guid)
            .unwrap_or(0)
    }

    pub fn refresh(&self) -> Option<Probe> {
        let p = self.config.probe().ok();
        *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = p.clone();
        p
    }

    pub fn ibv(&self) -> *mut ibv_device {
        &self.dev as *const ibv_device as *mut ibv_device
    }
}

/// Every device ever listed, by address (as usize: the structs are leaked
/// on purpose, so that a device outlives `ibv_free_device_list` and every
/// context on it, as rdma-core's refcounted devices do).
static DEVICES: LazyLock<Mutex<Vec<usize>>> = LazyLock::new(Mutex::default);

/// One entry of the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub target: Target,
}

/// Parses `RXE_IBV_DEVICES`: comma-separated `name=target` (or a bare
/// target, named rxeN by position); a target is an address, addresses
/// joined by `+` (one device on all of them) or an interface. Bad entries are reported and skipped.
pub fn parse_devices(s: &str) -> (Vec<DeviceSpec>, Vec<String>) {
    let mut out: Vec<DeviceSpec> = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .enumerate()
    {
        let (name, target) = match item.split_once('=') {
            Some((n, t)) => (n.trim().to_string(), t.trim()),
            None => (format!("rxe{i}"), item),
        };
        if name.is_empty() || name.len() >= 64 || target.is_empty() || target.len() >= 64 {
            errors.push(format!(
                "bad entry {item:?} (want NAME=ADDRESS or NAME=INTERFACE)"
            ));
            continue;
        }
        if out.iter().any(|d| d.name == name) {
            errors.push(format!("device name {name} given twice"));
            continue;
        }
        // ADDR+ADDR...: one device on several addresses (GID indexes in
        // this order), for an alternate path.
        let several: Option<Vec<IpAddr>> = target
            .contains('+')
            .then(|| target.split('+').map(|a| a.trim().parse().ok()).collect())
            .flatten();
        let target = match (target.parse::<IpAddr>(), several) {
            (Ok(ip), _) => Target::Address(ip),
            (_, Some(ips)) => Target::Addresses(ips),
            _ if target.contains('+') => {
                errors.push(format!("bad address list {target:?} (want ADDR+ADDR)"));
                continue;
            }
            _ => Target::Interface(target.to_string()),
        };
        out.push(DeviceSpec { name, target });
    }
    (out, errors)
}

/// The devices of this process's configuration, in order.
pub fn configured() -> Vec<DeviceSpec> {
    crate::log::init();
    match std::env::var("RXE_IBV_DEVICES") {
        Ok(s) => {
            let (specs, errors) = parse_devices(&s);
            for e in errors {
                eprintln!("rxe libibverbs: RXE_IBV_DEVICES: {e}");
            }
            specs
        }
        Err(_) => rxe_net::netif::list_interfaces()
            .unwrap_or_default()
            .into_iter()
            .filter(|i| {
                i.up && i.name != "lo"
                    && i.addrs.iter().any(|a| match a {
                        IpAddr::V4(v4) => !v4.is_loopback(),
                        IpAddr::V6(v6) => !v6.is_loopback() && v6.segments()[0] & 0xffc0 != 0xfe80,
                    })
            })
            .enumerate()
            .map(|(i, itf)| DeviceSpec {
                name: format!("rxe{i}"),
                target: Target::Interface(itf.name),
            })
            .collect(),
    }
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
    let n = s.len().min(dst.len() - 1);
    dst[n..].iter_mut().for_each(|d| *d = 0);
}

/// The pcap file of device `name` when `RXE_IBV_PCAP` is set.
fn capture_for(name: &str, count: usize) -> Option<std::path::PathBuf> {
    let p = std::env::var_os("RXE_IBV_PCAP")?;
    if count <= 1 {
        Some(p.into())
    } else {
        let mut s = p;
        s.push(format!(".{name}"));
        Some(s.into())
    }
}

/// The device named `spec.name`, made (and leaked) the first time.
fn device_for(spec: &DeviceSpec, index: u32, count: usize) -> &'static RxeDevice {
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    for p in all.iter() {
        // SAFETY: every entry is a leaked RxeDevice, never freed.
        let d = unsafe { &*(*p as *const RxeDevice) };
        if d.name == spec.name && d.config.target == spec.target {
            return d;
        }
    }
    let mut dev = ibv_device {
        _ops: [std::ptr::null_mut(); 2],
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        name: [0; 64],
        dev_name: [0; 64],
        dev_path: [0; 256],
        ibdev_path: [0; 256],
    };
    copy_cstr(&mut dev.name, &spec.name);
    copy_cstr(&mut dev.dev_name, &format!("uverbs{index}"));
    copy_cstr(
        &mut dev.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    copy_cstr(
        &mut dev.ibdev_path,
        &format!("{}/{}", crate::compat::VIRTUAL_IBDEV_ROOT, spec.name),
    );
    let d: &'static RxeDevice = Box::leak(Box::new(RxeDevice {
        dev,
        name: spec.name.clone(),
        index,
        config: DeviceConfig {
            name: Some(spec.name.clone()),
            capture: capture_for(&spec.name, count),
            ..DeviceConfig::on(spec.target.clone())
        },
        probe: Mutex::new(None),
    }));
    all.push(d as *const RxeDevice as usize);
    d
}

/// Our device behind a C `ibv_device` pointer, if it is one.
pub fn from_ibv(p: *const ibv_device) -> Option<&'static RxeDevice> {
    let all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    all.iter()
        .find(|d| **d == p as usize)
        // SAFETY: a leaked RxeDevice, never freed; ibv_device is its first
        // field, so the addresses are the same.
        .map(|d| unsafe { &*(*d as *const RxeDevice) })
}

/// Every device listed so far.
pub fn list_known() -> Vec<&'static RxeDevice> {
    let all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: leaked RxeDevices, never freed.
    all.iter()
        .map(|d| unsafe { &*(*d as *const RxeDevice) })
        .collect()
}

/// The devices of the configuration, probed now.
pub fn list() -> Vec<&'static RxeDevice> {
    let specs = configured();
    let n = specs.len();
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let d = device_for(s, i as u32, n);
            d.refresh();
            d
        })
        .collect()
}

export! {"IBVERBS_1.1" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device, fail = std::ptr::null_mut(), {
    let devs = list();
    // A NULL-terminated array from calloc, so that ibv_free_device_list
    // can free it without knowing its length.
    // SAFETY: calloc of n+1 pointers; checked for NULL.
    let arr = unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_device>()) }
        .cast::<*mut ibv_device>();
    if arr.is_null() {
        crate::errno::set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: i < n+1 entries allocated above.
        unsafe { *arr.add(i) = d.ibv() };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller passes a valid int pointer or NULL.
        unsafe { *num_devices = devs.len() as c_int };
    }
    arr
}}

export! {"IBVERBS_1.1" fn ibv_free_device_list(list: *mut *mut ibv_device) -> (), fail = (), {
    if !list.is_null() {
        // SAFETY: list came from ibv_get_device_list's calloc.
        unsafe { libc::free(list.cast()) };
    }
}}

export! {"IBVERBS_1.1" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char, fail = std::ptr::null(), {
    match from_ibv(device) {
        Some(d) => d.dev.name.as_ptr(),
        None => {
            crate::errno::set_errno(libc::EINVAL);
            std::ptr::null()
        }
    }
}}

export! {"IBVERBS_1.1" fn ibv_get_device_guid(device: *mut ibv_device) -> u64, fail = 0, {
    match from_ibv(device) {
        Some(d) => d.node_guid().to_be(),
        None => 0,
    }
}}

export! {"IBVERBS_1.9" fn ibv_get_device_index(device: *mut ibv_device) -> c_int, fail = -1, {
    match from_ibv(device) {
        Some(d) => d.index as c_int,
        None => -1,
    }
}}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_device_list() {
        let (d, e) = parse_devices("rxe0=127.0.0.2, rxe1=eth0,,10.0.0.1,rxe0=1.2.3.4,=x");
        assert_eq!(
            d,
            vec![
                DeviceSpec {
                    name: "rxe0".into(),
                    target: Target::Address("127.0.0.2".parse().unwrap())
                },
                DeviceSpec {
                    name: "rxe1".into(),
                    target: Target::Interface("eth0".into())
                },
                DeviceSpec {
                    name: "rxe2".into(),
                    target: Target::Address("10.0.0.1".parse().unwrap())
                },
            ]
        );
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(parse_devices("").0.is_empty());
        let (d, e) = parse_devices("a=127.0.0.2+127.1.0.2,b=127.0.0.3+x");
        assert_eq!(
            d,
            [DeviceSpec {
                name: "a".into(),
                target: Target::Addresses(vec![
                    "127.0.0.2".parse().unwrap(),
                    "127.1.0.2".parse().unwrap()
                ])
            }]
        );
        assert_eq!(e.len(), 1, "{e:?}");
    }

    #[test]
    fn names_are_truncated_and_terminated() {
        let mut b = [1 as c_char; 4];
        copy_cstr(&mut b, "abcdef");
        assert_eq!(b, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }
}
