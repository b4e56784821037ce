//! Clients (the kernel's `ib_register_client`): code that wants to know
//! about every device. A client's `add` runs at once for every device that
//! exists when it registers, then for each device added later; its `remove`
//! runs before a device goes (or when the client unregisters), with the
//! data the client stored on that device.
//!
//! Callbacks run one at a time, never concurrently with another device
//! addition, removal or client (un)registration; they must not add or
//! remove devices or (un)register clients themselves (that would wait for
//! itself), but may use every other verb.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::device::Device;
use crate::registry;

/// What a client stores on a device with [`Device::set_client_data`].
pub type ClientData = Box<dyn Any + Send>;

/// A user of devices.
pub trait Client: Send + Sync {
    fn name(&self) -> &str;
    /// A device exists (already, or from now).
    fn add(&self, device: &Device);
    /// A device is about to go, or the client is unregistering. `data` is
    /// what the client stored on the device, if anything.
    fn remove(&self, device: &Device, data: Option<ClientData>);
}

/// A client's identity on devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(pub(crate) u64);

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// A registered client; [`ClientRegistration::unregister`] (or dropping
/// it) runs `remove` for every device and forgets the client.
pub struct ClientRegistration {
    id: ClientId,
    done: bool,
}

impl ClientRegistration {
    pub fn id(&self) -> ClientId {
        self.id
    }

    pub fn unregister(mut self) {
        self.done = true;
        registry::unregister_client(self.id);
    }
}

impl Drop for ClientRegistration {
    fn drop(&mut self) {
        if !self.done {
            registry::unregister_client(self.id);
        }
    }
}

/// Registers `client`: its `add` runs now for every existing device.
pub fn register_client(client: Arc<dyn Client>) -> ClientRegistration {
    let id = ClientId(NEXT_CLIENT.fetch_add(1, Ordering::Relaxed));
    registry::register_client(id, client);
    ClientRegistration { id, done: false }
}
