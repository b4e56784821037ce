//! rxe-net owns rxe's I/O: UDP sockets on port 4791 with batched system
//! calls, the encapsulation that fills and checks the ICRC against the IP
//! and UDP headers the kernel writes and reads, interface and GID
//! discovery, packet counters, a pcap tap, and the driver loop that feeds
//! packets and time into an engine and sends what it emits. Capture files
//! are rxe-pcap's.

#![deny(unsafe_code)]

pub mod batch;
pub mod clock;
pub mod counters;
pub mod driver;
pub mod encap;
pub mod engine;
mod fault;
pub mod gso;
pub mod netif;
pub mod port;
pub mod socket;
pub mod tap;
#[cfg(test)]
mod test_packets;

pub use clock::Clock;
pub use counters::{NetCounter, NetCounters};
pub use driver::{Driver, DriverWaker};
pub use engine::{EndpointEngine, Engine};
pub use fault::{Faults, FaultsError};
pub use port::{NetPort, DEFAULT_SOURCE_PORTS, SOURCE_PORT_BASE};
pub use socket::{Offload, RoceSocket, RxBatch, RxMeta, TxBatch};
pub use tap::PcapTap;
