//! rxe-net is rxe's host I/O: UDP sockets on port 4791 with batched
//! system calls (UDP GSO and GRO), the encapsulation that fills and checks
//! the ICRC against the IP and UDP headers the kernel writes and reads,
//! interface and GID discovery, packet counters, a seeded fault layer and
//! a pcap tap. It knows no engine: the device that drives a port (rxe-verbs'
//! `driver`, which owns the port, its GID table and its engine) hands it
//! packets to send and takes what it receives. Capture files are
//! rxe-pcap's.

#![deny(unsafe_code)]

pub mod batch;
pub mod clock;
pub mod counters;
pub mod encap;
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
pub use fault::{Faults, FaultsError};
pub use port::{NetPort, Outgoing, Received, DEFAULT_SOURCE_PORTS, SOURCE_PORT_BASE};
pub use socket::{Offload, RoceSocket, RxBatch, RxMeta, TxBatch};
pub use tap::PcapTap;
