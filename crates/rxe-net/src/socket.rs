//! One UDP socket on `<ip>:4791` and batched I/O on it.
//!
//! The socket is set up for RoCEv2 (docs/wire-format.md explains why):
//!
//! - It is never connected: on a connected socket Linux numbers the IPv4
//!   Identification from a per-socket counter that starts at a random value,
//!   and the ICRC covers that field. Unconnected with DF set
//!   (`IP_MTU_DISCOVER = IP_PMTUDISC_DO`) the ID is 0, which `encap` puts in
//!   the ICRC.
//! - IPv4 sends carry UDP checksum 0 (`SO_NO_CHECK`), as kernel rxe's do; the
//!   ICRC protects the payload and masks the checksum.
//! - IPv6: only v6, and `UDP_NO_CHECK6_RX`, or Linux drops the checksum-0
//!   datagrams that RoCEv2 senders send. IPv6 sends keep a real checksum
//!   (RFC 6935/6936 allow 0 only for tunnels; the ICRC masks it anyway).
//! - TTL/hop limit and TOS/traffic class are reported with each received
//!   datagram (`IP_RECVTTL`, `IP_RECVTOS`, `IPV6_RECVHOPLIMIT`,
//!   `IPV6_RECVTCLASS`) so that the UD GRH space can hold the real values,
//!   and are set per batch on send from the address vector.
//! - UDP GSO and GRO, when the port asks for them ([`Offload`]): a run of
//!   equal packets to one destination goes out as one message with a
//!   `UDP_SEGMENT` control message ([`RoceSocket::send_runs`]; `gso`
//!   decides the runs), and the kernel hands over what a GSO sender sent
//!   as one coalesced datagram with its `UDP_GRO` segment size
//!   ([`RxMeta::segment`]). The kernel numbers the IPv4 IDs of the
//!   segments upward from 0, so each is sealed for its own ID. Linux
//!   refuses GSO on a socket with `SO_NO_CHECK` (EINVAL), so an IPv4
//!   socket with GSO sends real UDP checksums, as IPv6 does (the ICRC
//!   masks the field; on loopback and offloading NICs nobody computes
//!   them). A kernel that refuses `UDP_SEGMENT` (EIO, EINVAL) turns GSO
//!   off for the socket ([`RoceSocket::disable_gso`]).
//!
//! Batches use `sendmmsg`/`recvmmsg` through nix. nix's `MultiHeaders` (the
//! preallocated `mmsghdr` array) holds raw pointers and so is not `Send`;
//! each thread keeps its own, per address family, in a thread local, made
//! once. Payload buffers are the caller's [`TxBatch`] and [`RxBatch`],
//! also made once: nothing is allocated per packet or per batch.
//!
//! A `recvmmsg` call fills one `mmsghdr` and one iovec per slot it
//! offers, before the kernel looks: 64 slots were 8 % of a busy-polling
//! ping-pong side in `perf record`, nearly all of it spent on calls that
//! found nothing or one datagram. So each socket offers as many slots as
//! its traffic fills ([`RoceSocket::recv_batch`]): four times more after a
//! call that filled all it offered, half (never less than twice what
//! came, nor [`MIN_RECV_SLOTS`]) after one that did not.

use std::cell::RefCell;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arrayvec::ArrayVec;
use nix::sys::socket::{
    self as nsock, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders,
    SockaddrStorage,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::batch::socket_addr;
pub use crate::batch::{RxBatch, RxMeta, TxBatch, MAX_BATCH};

/// Slots a `recvmmsg` offers at least (module docs).
pub const MIN_RECV_SLOTS: usize = 4;

/// The IANA port of RoCEv2.
pub const ROCE_V2_PORT: u16 = rxe_core::wire::frame::ROCE_V2_PORT;
/// The socket buffer size asked for (each direction).
pub const WANTED_BUFFER: usize = 8 << 20;
/// iovec entries of one [`RoceSocket::send_runs`] call, at most (each
/// packet of each message is one).
pub const MAX_IOV: usize = 256;
/// A receive slot that holds any coalesced datagram (at most 65535 bytes
/// of IP datagram).
pub const GRO_SLOT_LEN: usize = 64 << 10;

/// The segmentation offloads a socket uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offload {
    /// Send runs of packets as one `UDP_SEGMENT` message.
    pub gso: bool,
    /// Receive coalesced datagrams (`UDP_GRO`); needs receive slots of
    /// [`GRO_SLOT_LEN`].
    pub gro: bool,
}

impl Offload {
    /// Neither (one datagram per system call slot, `SO_NO_CHECK` on IPv4).
    pub const NONE: Offload = Offload {
        gso: false,
        gro: false,
    };
    /// Both.
    pub const BOTH: Offload = Offload {
        gso: true,
        gro: true,
    };
}

/// `UDP_NO_CHECK6_RX` (linux/udp.h); not in every libc.
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// A bound, non-blocking RoCEv2 UDP socket.
pub struct RoceSocket {
    socket: Socket,
    local: SocketAddr,
    recv_buffer: usize,
    send_buffer: usize,
    /// GSO asked for and not refused yet.
    gso: AtomicBool,
    gro: bool,
    /// Slots the next `recvmmsg` offers (module docs).
    recv_slots: AtomicUsize,
}

impl fmt::Debug for RoceSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoceSocket")
            .field("local", &self.local)
            .field("fd", &self.socket.as_raw_fd())
            .field("recv_buffer", &self.recv_buffer)
            .field("send_buffer", &self.send_buffer)
            .field("gso", &self.gso())
            .field("gro", &self.gro)
            .finish()
    }
}

/// An error with what was being done, keeping the kind (`AddrInUse`,
/// `AddrNotAvailable` ...) for callers to match on.
fn context(e: io::Error, what: fmt::Arguments<'_>) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `setsockopt` of an `int` option that neither socket2 nor nix wraps.
#[allow(unsafe_code)]
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is a live descriptor for the borrow's lifetime; the
    // pointer and length describe `value`, which outlives the call; the
    // kernel only reads `len` bytes from it.
    let r =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const value).cast(), len) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl RoceSocket {
    /// Binds a UDP socket to `ip:port` and sets it up for RoCEv2 (see the
    /// module doc). A port in use fails with `ErrorKind::AddrInUse`, an
    /// address that is not local with `ErrorKind::AddrNotAvailable`.
    pub fn bind(ip: IpAddr, port: u16) -> io::Result<RoceSocket> {
        RoceSocket::bind_with(ip, port, Offload::NONE)
    }

    /// [`RoceSocket::bind`] with the offloads `offload`. A kernel without
    /// `UDP_GRO` leaves the socket without it (see [`RoceSocket::gro`]).
    pub fn bind_with(ip: IpAddr, port: u16, offload: Offload) -> io::Result<RoceSocket> {
        let s = RoceSocket::open(ip, port, offload, |_| Ok(()))?;
        // Multicast sends leave by this address's interface, never by
        // the default route (IP_MULTICAST_IF / IPV6_MULTICAST_IF).
        match ip {
            IpAddr::V4(v4) => s.socket.set_multicast_if_v4(&v4),
            IpAddr::V6(_) => s.socket.set_multicast_if_v6(interface_index(ip)),
        }
        .map_err(|e| context(e, format_args!("multicast interface of {}", s.local)))?;
        Ok(s)
    }

    /// A socket that receives what is sent to multicast `group` (port
    /// `port`), joined on the host (IGMP/MLD) on the interface that holds
    /// `member_of`, a local address. Several such sockets, of several
    /// devices, may be bound to one group: each gets every datagram, as
    /// each NIC on a switch would.
    pub fn bind_group(group: IpAddr, port: u16, member_of: IpAddr) -> io::Result<RoceSocket> {
        if !group.is_multicast() || group.is_ipv4() != member_of.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast group of {member_of}'s family"),
            ));
        }
        RoceSocket::open(group, port, Offload::NONE, |socket| {
            socket.set_reuse_address(true)?;
            match (group, member_of) {
                (IpAddr::V4(g), IpAddr::V4(via)) => {
                    socket.join_multicast_v4(&g, &via)?;
                    // Only the groups this socket joined (bound to one anyway).
                    socket.set_multicast_all_v4(false)
                }
                (IpAddr::V6(g), _) => {
                    socket.join_multicast_v6(&g, interface_index(member_of))?;
                    socket.set_multicast_all_v6(false)
                }
                _ => Ok(()),
            }
            .map_err(|e| context(e, format_args!("joining {group} on {member_of}")))
        })
    }

    /// Opens the socket, sets it up for RoCEv2 with `offload`, runs
    /// `before_bind`, binds.
    fn open(
        ip: IpAddr,
        port: u16,
        offload: Offload,
        before_bind: impl FnOnce(&Socket) -> io::Result<()>,
    ) -> io::Result<RoceSocket> {
        let local = match ip {
            // A link-local address is bound on its interface (untested here:
            // the tests stay on loopback, which has none).
            IpAddr::V6(v6) if v6.is_unicast_link_local() => {
                let scope = crate::netif::interface_for_addr(ip).map_or(0, |i| i.index);
                SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
            }
            _ => SocketAddr::new(ip, port),
        };
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| context(e, format_args!("socket for {local}")))?;
        socket.set_nonblocking(true)?;
        socket.set_cloexec(true)?;
        let fd = socket.as_fd();
        match ip {
            IpAddr::V4(_) => {
                setsockopt_int(
                    fd,
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_DO,
                )
                .map_err(|e| context(e, format_args!("IP_MTU_DISCOVER on {local}")))?;
                if !offload.gso {
                    // With GSO the kernel needs checksums on (see the module doc).
                    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
                        .map_err(|e| context(e, format_args!("SO_NO_CHECK on {local}")))?;
                }
                nsock::setsockopt(&socket, sockopt::Ipv4RecvTtl, &true).map_err(io::Error::from)?;
                nsock::setsockopt(&socket, sockopt::IpRecvTos, &true).map_err(io::Error::from)?;
            }
            IpAddr::V6(_) => {
                socket.set_only_v6(true)?;
                setsockopt_int(
                    fd,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_DO,
                )
                .map_err(|e| context(e, format_args!("IPV6_MTU_DISCOVER on {local}")))?;
                setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
                    .map_err(|e| context(e, format_args!("UDP_NO_CHECK6_RX on {local}")))?;
                socket.set_recv_hoplimit_v6(true)?;
                socket.set_recv_tclass_v6(true)?;
            }
        }
        let gro = offload.gro
            && match nsock::setsockopt(&socket, sockopt::UdpGroSegment, &true) {
                Ok(()) => true,
                Err(e) => {
                    tracing::info!(error = %e, %local, "no UDP_GRO: one datagram per packet");
                    false
                }
            };
        let (recv_buffer, send_buffer) = size_buffers(&socket);
        before_bind(&socket)?;
        socket
            .bind(&SockAddr::from(local))
            .map_err(|e| context(e, format_args!("bind {local}")))?;
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        tracing::debug!(%local, recv_buffer, send_buffer, gso = offload.gso, gro, "RoCE socket bound");
        Ok(RoceSocket {
            socket,
            local,
            recv_buffer,
            send_buffer,
            gso: AtomicBool::new(offload.gso),
            gro,
            recv_slots: AtomicUsize::new(MAX_BATCH),
        })
    }

    /// Whether [`RoceSocket::send_runs`] may send runs of several packets.
    pub fn gso(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    /// Stops GSO on this socket (the kernel refused it); whether it was on.
    /// The socket keeps sending UDP checksums.
    pub fn disable_gso(&self) -> bool {
        self.gso.swap(false, Ordering::Relaxed)
    }

    /// Whether the socket receives coalesced datagrams: its receive slots
    /// must then be [`GRO_SLOT_LEN`] long, or they come truncated.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The receive buffer the kernel granted, as it reports it (Linux
    /// doubles the size asked for to account for its bookkeeping).
    pub fn recv_buffer_size(&self) -> usize {
        self.recv_buffer
    }

    /// The send buffer the kernel granted (reported as `recv_buffer_size`).
    pub fn send_buffer_size(&self) -> usize {
        self.send_buffer
    }

    /// Sends one datagram (tests and tools; the data path uses batches).
    pub fn send_to(&self, buf: &[u8], dest: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(buf, &SockAddr::from(dest))
    }

    /// Sends the packets `range` of `tx` (at most [`MAX_BATCH`]) with one
    /// `sendmmsg`, with TTL/hop limit `hop_limit` and TOS/traffic class
    /// `traffic_class`. Returns how many the kernel took, from the first;
    /// an error means the first was refused (`WouldBlock`: the socket buffer
    /// is full).
    pub fn send_batch(
        &self,
        tx: &TxBatch,
        range: Range<usize>,
        hop_limit: u8,
        traffic_class: u8,
    ) -> io::Result<usize> {
        let end = range
            .end
            .min(tx.end)
            .min(range.start.saturating_add(MAX_BATCH));
        let start = range.start.min(end);
        let n = end - start;
        if n == 0 {
            return Ok(0);
        }
        let iovs: [[IoSlice<'_>; 1]; MAX_BATCH] = std::array::from_fn(|i| {
            let k = start + i;
            [IoSlice::new(if k < end { tx.packet(k) } else { &[] })]
        });
        let v6 = self.local.is_ipv6();
        let ttl: libc::c_int = hop_limit.into();
        let tos: u8 = traffic_class;
        let tclass: libc::c_int = traffic_class.into();
        let cmsgs: [ControlMessage<'_>; 2] = if v6 {
            [
                ControlMessage::Ipv6HopLimit(&ttl),
                ControlMessage::Ipv6TClass(&tclass),
            ]
        } else {
            [ControlMessage::Ipv4Ttl(&ttl), ControlMessage::Ipv4Tos(&tos)]
        };
        SEND_HEADERS.with(|cell| {
            let mut slot = cell.borrow_mut();
            let headers = slot[usize::from(v6)].get_or_insert_with(|| {
                MultiHeaders::preallocate(MAX_BATCH, Some(send_cmsg_space(v6, false)))
            });
            let sent = nsock::sendmmsg(
                self.socket.as_raw_fd(),
                headers,
                iovs[..n].iter(),
                &tx.dests[start..end],
                cmsgs,
                MsgFlags::empty(),
            )
            .map_err(io::Error::from)?;
            Ok(sent.count())
        })
    }

    /// Sends the runs `runs` of `tx` (each a range of its pending slots,
    /// in order) with one `sendmmsg`, a message per run, with TTL/hop
    /// limit `hop_limit` and TOS/traffic class `traffic_class`. With
    /// `segment` every message carries `UDP_SEGMENT` of that size: a run
    /// whose packets are all `segment` long but the last leaves as one
    /// datagram per packet; a single packet no longer than `segment`
    /// leaves as a plain datagram. Takes at most [`MAX_BATCH`] runs and
    /// [`MAX_IOV`] packets (an empty range ends the list). Returns how many
    /// runs the kernel took, from the first; an error means the first was
    /// refused (`WouldBlock`: the socket buffer is full; EIO or EINVAL with
    /// `segment`: GSO refused).
    pub fn send_runs(
        &self,
        tx: &TxBatch,
        runs: &[Range<usize>],
        segment: Option<u16>,
        hop_limit: u8,
        traffic_class: u8,
    ) -> io::Result<usize> {
        // Filled as far as used, never initialised beyond (whole arrays of
        // 256 iovecs and 64 addresses were written at every call: most of
        // this function's own time in a ping-pong, on its critical path).
        let mut iovs: ArrayVec<IoSlice<'_>, MAX_IOV> = ArrayVec::new();
        let mut msgs: ArrayVec<Range<usize>, MAX_BATCH> = ArrayVec::new();
        let mut dests: ArrayVec<Option<SockaddrStorage>, MAX_BATCH> = ArrayVec::new();
        for r in runs.iter().take(MAX_BATCH) {
            let r = r.start.max(tx.start)..r.end.min(tx.end);
            if r.is_empty() || iovs.len() + r.len() > MAX_IOV {
                break;
            }
            let at = iovs.len();
            iovs.extend(r.clone().map(|i| IoSlice::new(tx.packet(i))));
            msgs.push(at..iovs.len());
            dests.push(tx.dests[r.start]);
        }
        if msgs.is_empty() {
            return Ok(0);
        }
        let slices: ArrayVec<&[IoSlice<'_>], MAX_BATCH> =
            msgs.iter().map(|m| &iovs[m.clone()]).collect();
        let v6 = self.local.is_ipv6();
        let ttl: libc::c_int = hop_limit.into();
        let tos: u8 = traffic_class;
        let tclass: libc::c_int = traffic_class.into();
        let seg: u16 = segment.unwrap_or(0);
        let with_gso = segment.is_some();
        let ip_cmsgs = if v6 {
            [
                ControlMessage::Ipv6HopLimit(&ttl),
                ControlMessage::Ipv6TClass(&tclass),
            ]
        } else {
            [ControlMessage::Ipv4Ttl(&ttl), ControlMessage::Ipv4Tos(&tos)]
        };
        let [a, b] = ip_cmsgs;
        let all = [a, b, ControlMessage::UdpGsoSegments(&seg)];
        let cmsgs = if with_gso { &all[..] } else { &all[..2] };
        SEND_HEADERS.with(|cell| {
            let mut slot = cell.borrow_mut();
            let headers =
                slot[usize::from(v6) + 2 * usize::from(with_gso)].get_or_insert_with(|| {
                    MultiHeaders::preallocate(MAX_BATCH, Some(send_cmsg_space(v6, with_gso)))
                });
            let sent = nsock::sendmmsg(
                self.socket.as_raw_fd(),
                headers,
                slices.iter(),
                &dests[..],
                cmsgs,
                MsgFlags::empty(),
            )
            .map_err(io::Error::from)?;
            Ok(sent.count())
        })
    }

    /// Receives up to `rx.slots()` (at most [`MAX_BATCH`]) datagrams with one
    /// `recvmmsg`, replacing what `rx` held. `Ok(0)`: nothing was waiting.
    /// It offers the kernel fewer slots while the socket's traffic fills
    /// fewer (module docs): [`RxBatch::offered`] says how many; a call that
    /// returns fewer found the socket empty.
    pub fn recv_batch(&self, rx: &mut RxBatch) -> io::Result<usize> {
        rx.count = 0;
        let v6 = self.local.is_ipv6();
        let RxBatch {
            data,
            slot_len,
            meta,
            count,
            offered,
        } = rx;
        let n = meta
            .len()
            .min(MAX_BATCH)
            .min(self.recv_slots.load(Ordering::Relaxed))
            .max(1);
        *offered = n;
        let gro = self.gro;
        RECV_HEADERS.with(|cell| {
            let mut slot = cell.borrow_mut();
            let mut stale = STALE_FOR_GRO.get();
            if gro && stale[usize::from(v6)] {
                slot[usize::from(v6)] = None;
                stale[usize::from(v6)] = false;
            }
            let (got, ctrunc, shrunk) = {
                let headers = slot[usize::from(v6)].get_or_insert_with(|| {
                    MultiHeaders::preallocate(
                        MAX_BATCH,
                        // TTL, TOS and the UDP_GRO segment size.
                        Some(nix::cmsg_space!(libc::c_int, libc::c_int, libc::c_int)),
                    )
                });
                // Only the `n` offered slots are cut from the buffer: an
                // empty busy poll offers a few of the 64. (An `ArrayVec`
                // would not write the rest, but nix's `recvmmsg` ties the
                // iovecs' lifetime to their borrow, which a value with a
                // destructor cannot lend.)
                let mut chunks = data.chunks_mut(*slot_len);
                let mut iovs: [[IoSliceMut<'_>; 1]; MAX_BATCH] = std::array::from_fn(|i| {
                    let chunk = if i < n { chunks.next() } else { None };
                    [IoSliceMut::new(chunk.unwrap_or_default())]
                });
                let mut ctrunc = false;
                let mut shrunk = false;
                let got = match nsock::recvmmsg(
                    self.socket.as_raw_fd(),
                    headers,
                    iovs[..n].iter_mut(),
                    MsgFlags::empty(),
                    None,
                ) {
                    Ok(results) => {
                        let mut k = 0;
                        for (m, msg) in meta.iter_mut().zip(results) {
                            *m = RxMeta {
                                len: msg.bytes,
                                src: msg.address.and_then(|a| socket_addr(&a)),
                                hop_limit: None,
                                traffic_class: None,
                                truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
                                segment: None,
                            };
                            ctrunc |= msg.flags.contains(MsgFlags::MSG_CTRUNC);
                            if let Ok(cmsgs) = msg.cmsgs() {
                                for c in cmsgs {
                                    match c {
                                        ControlMessageOwned::Ipv4Ttl(t)
                                        | ControlMessageOwned::Ipv6HopLimit(t) => {
                                            m.hop_limit = u8::try_from(t).ok();
                                        }
                                        ControlMessageOwned::Ipv4Tos(t) => {
                                            m.traffic_class = Some(t)
                                        }
                                        ControlMessageOwned::Ipv6TClass(t) => {
                                            m.traffic_class = u8::try_from(t).ok();
                                        }
                                        ControlMessageOwned::UdpGroSegments(s) => {
                                            m.segment = usize::try_from(s).ok();
                                        }
                                        _ => {}
                                    }
                                }
                            }
                            shrunk |= m.segment.is_none();
                            k += 1;
                        }
                        Ok(k)
                    }
                    Err(nix::errno::Errno::EAGAIN) => Ok(0),
                    Err(e) => Err(io::Error::from(e)),
                };
                (got, ctrunc, shrunk)
            };
            // The kernel shrinks each header's control (and name) length to
            // what it used and nix (0.32) does not restore them; a truncated
            // control area means a header set went stale: make a fresh one
            // next time. A datagram without the UDP_GRO message left its
            // slot too short for one with it: a GRO socket's next batch
            // gets fresh headers (three allocations, about a microsecond,
            // against the tens a batch of system call takes).
            if ctrunc {
                slot[usize::from(v6)] = None;
            }
            stale[usize::from(v6)] =
                (stale[usize::from(v6)] || shrunk) && slot[usize::from(v6)].is_some();
            STALE_FOR_GRO.set(stale);
            *count = got.as_ref().copied().unwrap_or(0);
            self.recv_slots
                .store(next_recv_slots(n, *count), Ordering::Relaxed);
            got
        })
    }
}

fn send_cmsg_space(v6: bool, gso: bool) -> Vec<u8> {
    // Exactly what `send_batch` and `send_runs` encode: the kernel rejects
    // a control area with an empty header after the real ones.
    match (v6, gso) {
        (true, false) => nix::cmsg_space!(libc::c_int, libc::c_int),
        (false, false) => nix::cmsg_space!(libc::c_int, u8),
        (true, true) => nix::cmsg_space!(libc::c_int, libc::c_int, u16),
        (false, true) => nix::cmsg_space!(libc::c_int, u8, u16),
    }
}

thread_local! {
    /// Per thread, address family (index 0 IPv4, 1 IPv6) and, for sends,
    /// with the GSO control message or not (+2): see the module doc.
    static SEND_HEADERS: RefCell<[Option<MultiHeaders<SockaddrStorage>>; 4]> = const { RefCell::new([None, None, None, None]) };
    static RECV_HEADERS: RefCell<[Option<MultiHeaders<SockaddrStorage>>; 2]> = const { RefCell::new([None, None]) };
    /// The receive headers of that family have a slot whose control
    /// length the kernel shrank below what a coalesced datagram needs.
    static STALE_FOR_GRO: std::cell::Cell<[bool; 2]> = const { std::cell::Cell::new([false, false]) };
}

/// The slots to offer after a `recvmmsg` that offered `offered` and got
/// `got` (module docs).
fn next_recv_slots(offered: usize, got: usize) -> usize {
    if got >= offered {
        offered.saturating_mul(4).min(MAX_BATCH)
    } else {
        (offered / 2).max(got * 2).clamp(MIN_RECV_SLOTS, MAX_BATCH)
    }
}

/// The index of the interface that holds `ip` (0, "any", if none does).
fn interface_index(ip: IpAddr) -> u32 {
    crate::netif::interface_for_addr(ip).map_or(0, |i| i.index)
}

/// Asks for [`WANTED_BUFFER`] each way: first with the `FORCE` options,
/// which pass `rmem_max`/`wmem_max` but need CAP_NET_ADMIN, then the plain
/// ones, which the kernel caps. Returns what it granted.
fn size_buffers(socket: &Socket) -> (usize, usize) {
    let want = WANTED_BUFFER;
    if nsock::setsockopt(socket, sockopt::RcvBufForce, &want).is_err() {
        let _ = socket.set_recv_buffer_size(want);
    }
    if nsock::setsockopt(socket, sockopt::SndBufForce, &want).is_err() {
        let _ = socket.set_send_buffer_size(want);
    }
    let r = socket.recv_buffer_size().unwrap_or(0);
    let s = socket.send_buffer_size().unwrap_or(0);
    if r < want || s < want {
        tracing::info!(
            wanted = want,
            recv = r,
            send = s,
            "socket buffers smaller than asked (raise net.core.rmem_max/wmem_max or run with CAP_NET_ADMIN)"
        );
    }
    (r, s)
}

impl AsRawFd for RoceSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for RoceSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::wire::ip_udp;
    use std::net::Ipv4Addr;

    fn lo(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 3, last))
    }

    /// Polls `sock` for up to `ms` milliseconds until a batch arrives;
    /// returns its size (0 if none came).
    fn recv_within(sock: &RoceSocket, rx: &mut RxBatch, ms: u32) -> usize {
        for _ in 0..ms {
            let n = sock.recv_batch(rx).unwrap();
            if n > 0 {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        0
    }

    #[test]
    fn busy_port_and_foreign_address_give_clear_errors() {
        let a = RoceSocket::bind(lo(1), ROCE_V2_PORT).unwrap();
        assert_eq!(a.local_addr(), SocketAddr::new(lo(1), ROCE_V2_PORT));
        let e = RoceSocket::bind(lo(1), ROCE_V2_PORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains("127.0.3.1:4791"), "{e}");
        // TEST-NET-3: not an address of this machine.
        let e =
            RoceSocket::bind(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)), ROCE_V2_PORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable, "{e}");
        assert!(a.recv_buffer_size() > 0 && a.send_buffer_size() > 0);
    }

    #[test]
    fn batches_go_and_come_with_ttl_and_tos() {
        let a = RoceSocket::bind(lo(2), ROCE_V2_PORT).unwrap();
        let b = RoceSocket::bind(lo(3), ROCE_V2_PORT).unwrap();
        let mut tx = TxBatch::new(100, 256);
        for i in 0..100u8 {
            let (_, slot) = tx.free_slot().unwrap();
            slot[..3].copy_from_slice(&[i, i, i]);
            assert!(tx.commit(3 + usize::from(i % 7), b.local_addr()));
        }
        assert!(tx.is_full());
        assert!(!tx.commit(1, b.local_addr()));
        let mut sent = 0;
        while !tx.is_empty() {
            let n = a.send_batch(&tx, tx.pending(), 9, 0x28).unwrap();
            assert!(n > 0 && n <= MAX_BATCH);
            tx.consume(n);
            sent += n;
        }
        assert_eq!(sent, 100);
        let mut rx = RxBatch::new(MAX_BATCH, 256);
        let mut got = Vec::new();
        for _ in 0..100 {
            let n = b.recv_batch(&mut rx).unwrap();
            for i in 0..n {
                let (m, bytes) = rx.get(i).unwrap();
                assert_eq!(m.src, Some(a.local_addr()));
                assert_eq!(m.hop_limit, Some(9));
                assert_eq!(m.traffic_class, Some(0x28));
                assert!(!m.truncated);
                got.push((bytes[0], bytes.len()));
            }
            if got.len() == 100 {
                break;
            }
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert_eq!(got.len(), 100);
        for (i, (tag, len)) in got.iter().enumerate() {
            assert_eq!(usize::from(*tag), i);
            assert_eq!(*len, 3 + i % 7);
        }
        assert_eq!(b.recv_batch(&mut rx).unwrap(), 0);
        assert!(rx.get(0).is_none());
    }

    /// Empty calls shrink the slots offered to MIN_RECV_SLOTS; a backlog
    /// grows them again, fourfold per call that fills them, and nothing is
    /// lost or reordered on the way.
    #[test]
    fn the_slots_offered_follow_the_traffic() {
        assert_eq!(next_recv_slots(64, 0), 32);
        assert_eq!(next_recv_slots(8, 0), MIN_RECV_SLOTS);
        assert_eq!(next_recv_slots(64, 20), 40);
        assert_eq!(next_recv_slots(4, 4), 16);
        assert_eq!(next_recv_slots(32, 32), MAX_BATCH);
        let a = RoceSocket::bind(lo(12), ROCE_V2_PORT).unwrap();
        let b = RoceSocket::bind(lo(13), ROCE_V2_PORT).unwrap();
        let mut rx = RxBatch::new(MAX_BATCH, 64);
        for _ in 0..5 {
            assert_eq!(b.recv_batch(&mut rx).unwrap(), 0);
        }
        assert_eq!(rx.offered(), MIN_RECV_SLOTS);
        let mut tx = TxBatch::new(MAX_BATCH, 64);
        for i in 0..MAX_BATCH {
            let (_, slot) = tx.free_slot().unwrap();
            slot[0] = i as u8;
            assert!(tx.commit(1, b.local_addr()));
        }
        while !tx.is_empty() {
            let n = a.send_batch(&tx, tx.pending(), 9, 0).unwrap();
            tx.consume(n);
        }
        let mut got = Vec::new();
        let mut offered = Vec::new();
        for _ in 0..1000 {
            let n = b.recv_batch(&mut rx).unwrap();
            if n > 0 {
                offered.push(rx.offered());
            }
            got.extend((0..n).map(|i| rx.get(i).unwrap().1[0]));
            if got.len() == MAX_BATCH {
                break;
            }
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert_eq!(got, (0..MAX_BATCH as u8).collect::<Vec<_>>());
        // All 64 were waiting after the send: 4 + 16 + 44 of 64.
        assert_eq!(offered, [4, 16, 64]);
    }

    fn fill(tx: &mut TxBatch, lens: &[usize], dest: SocketAddr) {
        for (i, &len) in lens.iter().enumerate() {
            let (_, slot) = tx.free_slot().unwrap();
            slot[..len].fill(i as u8);
            assert!(tx.commit(len, dest));
        }
    }

    /// Every datagram `rx` gets within `ms`, with its GRO segment size.
    fn drain(sock: &RoceSocket, rx: &mut RxBatch, want: usize) -> Vec<(Vec<u8>, Option<usize>)> {
        let mut got = Vec::new();
        for _ in 0..500 {
            let n = sock.recv_batch(rx).unwrap();
            for i in 0..n {
                let (m, b) = rx.get(i).unwrap();
                assert!(!m.truncated);
                assert_eq!(m.hop_limit, Some(9));
                got.push((b.to_vec(), m.segment));
            }
            if got.len() >= want {
                break;
            }
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        got
    }

    #[test]
    fn gso_runs_arrive_whole_with_gro_and_one_by_one_without() {
        let a = RoceSocket::bind_with(lo(170), ROCE_V2_PORT, Offload::BOTH).unwrap();
        let gro = RoceSocket::bind_with(lo(171), ROCE_V2_PORT, Offload::BOTH).unwrap();
        let plain = RoceSocket::bind(lo(172), ROCE_V2_PORT).unwrap();
        assert!(a.gso() && gro.gro() && !plain.gro());
        for (to, coalesced) in [(&gro, true), (&plain, false)] {
            let mut tx = TxBatch::new(16, 512);
            // A run of 5 x 300 and a shorter last one, then a single packet.
            fill(
                &mut tx,
                &[300, 300, 300, 300, 300, 120, 200],
                to.local_addr(),
            );
            let sent = a.send_runs(&tx, &[0..6, 6..7], Some(300), 9, 0).unwrap();
            assert_eq!(sent, 2);
            let mut rx = RxBatch::new(8, GRO_SLOT_LEN);
            let got = drain(to, &mut rx, if coalesced { 2 } else { 7 });
            if coalesced {
                assert_eq!(got.len(), 2, "{got:?}");
                assert_eq!(got[0].0.len(), 5 * 300 + 120);
                assert_eq!(got[0].1, Some(300));
                let parts: Vec<&[u8]> = crate::gso::segments(&got[0].0, got[0].1).collect();
                assert_eq!(parts.len(), 6);
                for (i, p) in parts.iter().enumerate() {
                    assert!(p.iter().all(|&b| b == i as u8));
                }
                assert_eq!(got[1].0, vec![6u8; 200]);
            } else {
                // The kernel cut the message on receive for a socket
                // without UDP_GRO.
                let lens: Vec<usize> = got.iter().map(|g| g.0.len()).collect();
                assert_eq!(lens, [300, 300, 300, 300, 300, 120, 200]);
                assert!(got.iter().all(|g| g.1.is_none()));
                for (i, g) in got.iter().enumerate() {
                    assert!(g.0.iter().all(|&b| b == i as u8));
                }
            }
        }
    }

    /// nix does not restore a header's control length after `recvmmsg`
    /// shrank it to what a plain datagram used: a coalesced one landing
    /// in that slot later must still report its segment size.
    #[test]
    fn gro_segment_size_survives_slots_used_by_plain_datagrams() {
        let a = RoceSocket::bind_with(lo(175), ROCE_V2_PORT, Offload::BOTH).unwrap();
        let b = RoceSocket::bind_with(lo(176), ROCE_V2_PORT, Offload::BOTH).unwrap();
        let mut rx = RxBatch::new(8, GRO_SLOT_LEN);
        for round in 0..3 {
            let mut tx = TxBatch::new(16, 512);
            fill(&mut tx, &[40, 41, 42, 43], b.local_addr());
            a.send_runs(&tx, &[0..1, 1..2, 2..3, 3..4], None, 9, 0x28)
                .unwrap();
            let got = drain(&b, &mut rx, 4);
            assert_eq!(got.len(), 4, "round {round}");
            let mut tx = TxBatch::new(16, 512);
            fill(&mut tx, &[100; 12], b.local_addr());
            let runs = [0..3, 3..6, 6..9, 9..12];
            assert_eq!(a.send_runs(&tx, &runs, Some(100), 9, 0x28).unwrap(), 4);
            let mut n = 0;
            for _ in 0..500 {
                let k = b.recv_batch(&mut rx).unwrap();
                for i in 0..k {
                    let (m, bytes) = rx.get(i).unwrap();
                    assert_eq!(bytes.len(), 300, "round {round}");
                    assert_eq!(m.segment, Some(100), "round {round}: {m:?}");
                    assert_eq!(m.traffic_class, Some(0x28), "round {round}: {m:?}");
                    assert_eq!(m.hop_limit, Some(9), "round {round}: {m:?}");
                }
                n += k;
                if n == 4 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(n, 4);
        }
    }

    #[test]
    fn oversize_datagrams_are_flagged_truncated() {
        let a = RoceSocket::bind(lo(4), ROCE_V2_PORT).unwrap();
        let b = RoceSocket::bind(lo(5), ROCE_V2_PORT).unwrap();
        a.send_to(&[7u8; 300], b.local_addr()).unwrap();
        let mut rx = RxBatch::new(4, 64);
        let n = recv_within(&b, &mut rx, 100);
        assert_eq!(n, 1);
        let (m, bytes) = rx.get(0).unwrap();
        assert!(m.truncated);
        assert_eq!(bytes.len(), 64);
    }

    #[test]
    fn ipv6_loopback_batches_with_hop_limit_and_tclass() {
        let ip = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        // Port 4791 on ::1 may be shared by other tests: use an ephemeral one.
        let Ok(a) = RoceSocket::bind(ip, 0) else {
            return; // no IPv6 on this machine
        };
        let b = RoceSocket::bind(ip, 0).unwrap();
        let mut tx = TxBatch::new(2, 64);
        tx.free_slot().unwrap().1[..4].copy_from_slice(b"rxe6");
        assert!(tx.commit(4, b.local_addr()));
        assert_eq!(a.send_batch(&tx, tx.pending(), 7, 0x10).unwrap(), 1);
        let mut rx = RxBatch::new(2, 64);
        let n = recv_within(&b, &mut rx, 100);
        assert_eq!(n, 1);
        let (m, bytes) = rx.get(0).unwrap();
        assert_eq!(bytes, b"rxe6");
        assert_eq!(m.hop_limit, Some(7));
        assert_eq!(m.traffic_class, Some(0x10));
        assert_eq!(m.src, Some(a.local_addr()));
    }

    /// RoCEv2 senders (kernel rxe) send UDP checksum 0 over IPv6, which
    /// Linux drops unless UDP_NO_CHECK6_RX is set. Needs a raw socket
    /// (CAP_NET_RAW); skipped without it.
    #[test]
    fn ipv6_checksum_zero_datagrams_arrive() {
        let ip = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        let Ok(b) = RoceSocket::bind(ip, 0) else {
            return;
        };
        let Ok(raw) = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::UDP)) else {
            eprintln!("no raw socket: UDP_NO_CHECK6_RX not exercised");
            return;
        };
        let port = b.local_addr().port();
        // The UDP header of rxe-core's builder: checksum 0, as kernel rxe sends.
        let mut headers = [0u8; ip_udp::MAX_HEADER_LEN];
        let udp = ip_udp::RoceV2Ip {
            dst_port: port,
            ..ip_udp::RoceV2Ip::new(ip, ip, ROCE_V2_PORT)
        };
        udp.emit(4, &mut headers).unwrap();
        let mut d = [0u8; 8 + 4];
        d[..8].copy_from_slice(&headers[40..]);
        d[8..].copy_from_slice(b"zero");
        raw.send_to(&d, &SockAddr::from(SocketAddr::new(ip, 0)))
            .unwrap();
        let mut rx = RxBatch::new(2, 64);
        let n = recv_within(&b, &mut rx, 200);
        assert_eq!(n, 1, "the checksum-0 datagram was dropped");
        assert_eq!(rx.get(0).unwrap().1, b"zero");
    }
}
