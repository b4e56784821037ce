//! The buffers of batched I/O, made once per port and reused by every
//! call: [`TxBatch`] (packets waiting for `sendmmsg`, with their
//! destinations) and [`RxBatch`] (slots `recvmmsg` fills, with each
//! datagram's [`RxMeta`]). The socket calls that fill and drain them are in
//! [`crate::socket`].

use std::fmt;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;

use nix::sys::socket::SockaddrStorage;

/// Datagrams per `sendmmsg`/`recvmmsg` call, at most.
pub const MAX_BATCH: usize = 64;

/// Packets waiting to be sent: fixed slots of `slot_len` bytes, filled at
/// the end and sent from the start.
pub struct TxBatch {
    pub(crate) data: Box<[u8]>,
    pub(crate) slot_len: usize,
    pub(crate) lens: Box<[usize]>,
    pub(crate) dests: Box<[Option<SockaddrStorage>]>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl fmt::Debug for TxBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxBatch")
            .field("slots", &self.lens.len())
            .field("slot_len", &self.slot_len)
            .field("pending", &(self.start..self.end))
            .finish()
    }
}

impl TxBatch {
    /// `slots` slots (at least 1) of `slot_len` bytes each.
    pub fn new(slots: usize, slot_len: usize) -> TxBatch {
        let slots = slots.max(1);
        TxBatch {
            data: vec![0; slots * slot_len].into_boxed_slice(),
            slot_len,
            lens: vec![0; slots].into_boxed_slice(),
            dests: vec![None; slots].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    pub fn slots(&self) -> usize {
        self.lens.len()
    }

    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// The slots holding packets not yet sent.
    pub fn pending(&self) -> Range<usize> {
        self.start..self.end
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// No free slot is left at the end.
    pub fn is_full(&self) -> bool {
        self.end == self.slots()
    }

    /// The index of the next free slot and its buffer.
    pub fn free_slot(&mut self) -> Option<(usize, &mut [u8])> {
        if self.is_full() {
            return None;
        }
        let i = self.end;
        let at = i * self.slot_len;
        Some((i, &mut self.data[at..at + self.slot_len]))
    }

    /// Takes the free slot as a packet of `len` bytes to `dest`. Refused
    /// (`false`) when there is no free slot or `len` exceeds it.
    pub fn commit(&mut self, len: usize, dest: SocketAddr) -> bool {
        if self.is_full() || len > self.slot_len {
            return false;
        }
        self.lens[self.end] = len;
        self.dests[self.end] = Some(SockaddrStorage::from(dest));
        self.end += 1;
        true
    }

    /// The packet in slot `i` (empty for a slot out of range).
    pub fn packet(&self, i: usize) -> &[u8] {
        match self.lens.get(i) {
            Some(&len) => {
                let at = i * self.slot_len;
                &self.data[at..at + len]
            }
            None => &[],
        }
    }

    /// The packet in slot `i`, to change it in place (its ICRC).
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        match self.lens.get(i) {
            Some(&len) => {
                let at = i * self.slot_len;
                &mut self.data[at..at + len]
            }
            None => &mut [],
        }
    }

    /// The length of the packet in slot `i` (0 for a slot out of range).
    pub fn packet_len(&self, i: usize) -> usize {
        self.lens.get(i).copied().unwrap_or(0)
    }

    /// Whether slots `i` and `j` go to the same destination.
    pub fn same_dest(&self, i: usize, j: usize) -> bool {
        match (self.dests.get(i), self.dests.get(j)) {
            (Some(Some(a)), Some(Some(b))) => a == b,
            _ => false,
        }
    }

    /// The destination of slot `i`.
    pub fn dest(&self, i: usize) -> Option<SocketAddr> {
        self.dests
            .get(i)
            .copied()
            .flatten()
            .and_then(|a| socket_addr(&a))
    }

    /// Marks the first `n` pending packets as done (sent or dropped); when
    /// none is left the batch starts over at slot 0.
    pub fn consume(&mut self, n: usize) {
        self.start = self.start.saturating_add(n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}

/// What the kernel said about one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// Bytes received (of a truncated datagram: what fit).
    pub len: usize,
    pub src: Option<SocketAddr>,
    /// IPv4 TTL or IPv6 hop limit, if the kernel reported it.
    pub hop_limit: Option<u8>,
    /// IPv4 TOS or IPv6 traffic class, if the kernel reported it.
    pub traffic_class: Option<u8>,
    /// The datagram was longer than the slot (MSG_TRUNC).
    pub truncated: bool,
    /// The kernel coalesced several datagrams of this size (the last may
    /// be shorter) into this one (`UDP_GRO`): see `gso::segments`.
    pub segment: Option<usize>,
}

/// Slots for received datagrams, reused by every `recv_batch`.
pub struct RxBatch {
    pub(crate) data: Box<[u8]>,
    pub(crate) slot_len: usize,
    pub(crate) meta: Box<[RxMeta]>,
    pub(crate) count: usize,
    pub(crate) offered: usize,
}

impl fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxBatch")
            .field("slots", &self.meta.len())
            .field("slot_len", &self.slot_len)
            .field("count", &self.count)
            .finish()
    }
}

impl RxBatch {
    /// `slots` slots (1 ..= MAX_BATCH) of `slot_len` bytes each.
    pub fn new(slots: usize, slot_len: usize) -> RxBatch {
        let slots = slots.clamp(1, MAX_BATCH);
        RxBatch {
            data: vec![0; slots * slot_len].into_boxed_slice(),
            slot_len,
            meta: vec![RxMeta::default(); slots].into_boxed_slice(),
            count: 0,
            offered: 0,
        }
    }

    pub fn slots(&self) -> usize {
        self.meta.len()
    }

    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Slots the last `recv_batch` offered the kernel: when it received
    /// fewer, nothing more was waiting.
    pub fn offered(&self) -> usize {
        self.offered
    }

    /// Datagrams the last `recv_batch` received.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last `recv_batch`: what the kernel said and the
    /// bytes.
    pub fn get(&self, i: usize) -> Option<(&RxMeta, &[u8])> {
        if i >= self.count {
            return None;
        }
        let m = &self.meta[i];
        let at = i * self.slot_len;
        let len = m.len.min(self.slot_len);
        Some((m, &self.data[at..at + len]))
    }
}

/// A socket address from nix's storage (IPv4 or IPv6; `None` for other
/// families, which a UDP socket never reports).
pub(crate) fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::new(v4.ip(), v4.port())));
    }
    a.as_sockaddr_in6().map(|v6| {
        SocketAddr::V6(SocketAddrV6::new(
            v6.ip(),
            v6.port(),
            v6.flowinfo(),
            v6.scope_id(),
        ))
    })
}
