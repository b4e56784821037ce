//! The process's devices and clients.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::client::{Client, ClientId};
use crate::device::{Device, DeviceShared};

#[derive(Default)]
struct Registry {
    devices: BTreeMap<String, Arc<DeviceShared>>,
    clients: Vec<(ClientId, Arc<dyn Client>)>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

/// Serialises additions, removals and client callbacks (see
/// [`crate::client`]).
pub(crate) fn ops_lock() -> std::sync::MutexGuard<'static, ()> {
    static OPS: Mutex<()> = Mutex::new(());
    OPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn reg() -> std::sync::MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|e| e.into_inner())
}

/// Every device of this process, by name.
pub fn devices() -> Vec<Device> {
    reg().devices.values().map(|d| Device(d.clone())).collect()
}

/// The device named `name`.
pub fn device_by_name(name: &str) -> Option<Device> {
    reg().devices.get(name).map(|d| Device(d.clone()))
}

/// The first free name `rxe0`, `rxe1`, ...
pub(crate) fn free_name() -> String {
    let r = reg();
    (0..)
        .map(|i| format!("rxe{i}"))
        .find(|n| !r.devices.contains_key(n))
        .expect("unbounded")
}

pub(crate) fn name_taken(name: &str) -> bool {
    reg().devices.contains_key(name)
}

/// Adds a device and runs every client's `add` (caller holds `ops_lock`).
pub(crate) fn insert_device(dev: Arc<DeviceShared>) {
    let clients = {
        let mut r = reg();
        r.devices.insert(dev.name.clone(), dev.clone());
        r.clients.clone()
    };
    let d = Device(dev);
    for (_, c) in clients {
        c.add(&d);
    }
}

/// Runs every client's `remove` for a device, then forgets it (caller
/// holds `ops_lock`).
pub(crate) fn remove_device(dev: &Arc<DeviceShared>) {
    let clients = reg().clients.clone();
    let d = Device(dev.clone());
    for (id, c) in clients.iter().rev() {
        let data = dev.take_client_data(*id);
        c.remove(&d, data);
    }
    reg().devices.remove(&dev.name);
}

pub(crate) fn register_client(id: ClientId, client: Arc<dyn Client>) {
    let _ops = ops_lock();
    let devices: Vec<_> = {
        let mut r = reg();
        r.clients.push((id, client.clone()));
        r.devices.values().cloned().collect()
    };
    for d in devices {
        client.add(&Device(d));
    }
}

pub(crate) fn unregister_client(id: ClientId) {
    let _ops = ops_lock();
    let (client, devices) = {
        let mut r = reg();
        let Some(pos) = r.clients.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, c) = r.clients.remove(pos);
        (c, r.devices.values().cloned().collect::<Vec<_>>())
    };
    for d in devices {
        let data = d.take_client_data(id);
        client.remove(&Device(d), data);
    }
}
