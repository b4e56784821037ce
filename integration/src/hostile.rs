//! A hostile RoCEv2 peer: it speaks the protocol byte by byte from plain
//! UDP sockets, with no transport engine behind it, so that a test can send
//! a victim device exactly the packet it wants (a good one, or one with any
//! field, the pad count, the length or the ICRC wrong) and record every
//! answer the victim sends back.
//!
//! The main socket is bound to port 4791 of the peer's own loopback
//! address, so the victim's responses (addressed to the GID the victim's QP
//! was connected to) come back to it. A second socket on another address
//! serves as a spoofer: packets sent from it carry another source IP, and
//! whatever the victim answers to that address is recorded too.
//!
//! Packets are built with `rxe-core`'s wire builders ([`TransportRepr`]) and
//! their ICRC sealed over the IP and UDP headers the kernel will write, as
//! the device does ([`seal_icrc`] is the one place that calls into that).

#![forbid(unsafe_code)]

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rxe_core::wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, ExtReprs, ImmDtRepr, Opcode, RethRepr,
    TransportRepr,
};
use rxe_core::Gid;
use rxe_net::encap::{self, OpenOptions, RecvInfo, WireHeaders};
use rxe_net::{RoceSocket, RxBatch};

/// The RoCEv2 UDP port.
pub const ROCE_PORT: u16 = 4791;

/// One packet being built: BTH .. pad, then 4 ICRC bytes. `bytes` is public
/// so that a test can corrupt any byte before sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub bytes: Vec<u8>,
}

/// The BTH of a request or response, with the defaults a well-behaved peer
/// uses (default P_Key, AckReq set).
pub fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn,
    }
}

impl Packet {
    /// A well-formed packet from the wire builder (ICRC slot zero until
    /// sent). Panics only on a test's own misuse (headers that do not fit the
    /// opcode): use [`Packet::raw`] to build what the builder refuses.
    pub fn new(bth: BthRepr, ext: ExtReprs, payload: &[u8]) -> Packet {
        let t = TransportRepr::new(bth, ext, payload.len());
        let len = t.buffer_len().expect("known opcode");
        let mut bytes = vec![0; len];
        t.emit(&mut bytes, payload).expect("headers fit the opcode");
        Packet { bytes }
    }

    /// Any bytes at all (BTH .. ICRC slot).
    pub fn raw(bytes: Vec<u8>) -> Packet {
        Packet { bytes }
    }

    /// SEND ONLY (RC).
    pub fn send_only(dest_qp: u32, psn: u32, payload: &[u8]) -> Packet {
        Packet::new(
            bth(Opcode::RC_SEND_ONLY, dest_qp, psn),
            ExtReprs::default(),
            payload,
        )
    }

    /// A SEND packet of any position (no immediate).
    pub fn send(opcode: Opcode, dest_qp: u32, psn: u32, payload: &[u8]) -> Packet {
        Packet::new(bth(opcode, dest_qp, psn), ExtReprs::default(), payload)
    }

    /// RDMA WRITE ONLY with an RETH.
    pub fn write_only(dest_qp: u32, psn: u32, va: u64, rkey: u32, payload: &[u8]) -> Packet {
        Packet::write_only_len(dest_qp, psn, va, rkey, payload.len() as u32, payload)
    }

    /// RDMA WRITE ONLY whose RETH DMA length may differ from the payload.
    pub fn write_only_len(
        dest_qp: u32,
        psn: u32,
        va: u64,
        rkey: u32,
        dma_len: u32,
        payload: &[u8],
    ) -> Packet {
        Packet::new(
            bth(Opcode::RC_RDMA_WRITE_ONLY, dest_qp, psn),
            ExtReprs {
                reth: Some(RethRepr { va, rkey, dma_len }),
                ..ExtReprs::default()
            },
            payload,
        )
    }

    /// RDMA READ Request.
    pub fn read(dest_qp: u32, psn: u32, va: u64, rkey: u32, dma_len: u32) -> Packet {
        Packet::new(
            bth(Opcode::RC_RDMA_READ_REQUEST, dest_qp, psn),
            ExtReprs {
                reth: Some(RethRepr { va, rkey, dma_len }),
                ..ExtReprs::default()
            },
            &[],
        )
    }

    /// FetchAdd (or CmpSwap with `compare`).
    pub fn atomic(
        dest_qp: u32,
        psn: u32,
        va: u64,
        rkey: u32,
        swap_add: u64,
        compare: Option<u64>,
    ) -> Packet {
        let opcode = if compare.is_some() {
            Opcode::RC_COMPARE_SWAP
        } else {
            Opcode::RC_FETCH_ADD
        };
        Packet::new(
            bth(opcode, dest_qp, psn),
            ExtReprs {
                atomic_eth: Some(AtomicEthRepr {
                    va,
                    rkey,
                    swap_add,
                    compare: compare.unwrap_or(0),
                }),
                ..ExtReprs::default()
            },
            &[],
        )
    }

    /// An RC Acknowledge (ACK or NAK, by its AETH).
    pub fn ack(dest_qp: u32, psn: u32, aeth: AethRepr) -> Packet {
        let mut b = bth(Opcode::RC_ACKNOWLEDGE, dest_qp, psn);
        b.ack_req = false;
        Packet::new(
            b,
            ExtReprs {
                aeth: Some(aeth),
                ..ExtReprs::default()
            },
            &[],
        )
    }

    /// An RDMA READ response ONLY (AETH and payload).
    pub fn read_response_only(dest_qp: u32, psn: u32, aeth: AethRepr, payload: &[u8]) -> Packet {
        let mut b = bth(Opcode::RC_RDMA_READ_RESPONSE_ONLY, dest_qp, psn);
        b.ack_req = false;
        Packet::new(
            b,
            ExtReprs {
                aeth: Some(aeth),
                ..ExtReprs::default()
            },
            payload,
        )
    }

    /// An ATOMIC Acknowledge.
    pub fn atomic_ack(dest_qp: u32, psn: u32, aeth: AethRepr, orig: u64) -> Packet {
        let mut b = bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, dest_qp, psn);
        b.ack_req = false;
        Packet::new(
            b,
            ExtReprs {
                aeth: Some(aeth),
                atomic_ack_eth: Some(rxe_core::wire::AtomicAckEthRepr { orig_data: orig }),
                ..ExtReprs::default()
            },
            &[],
        )
    }

    /// UD SEND ONLY with a DETH.
    pub fn ud_send(dest_qp: u32, psn: u32, qkey: u32, src_qp: u32, payload: &[u8]) -> Packet {
        Packet::new(
            bth(Opcode::UD_SEND_ONLY, dest_qp, psn),
            ExtReprs {
                deth: Some(DethRepr { qkey, src_qp }),
                ..ExtReprs::default()
            },
            payload,
        )
    }

    /// SEND ONLY with immediate.
    pub fn send_imm(dest_qp: u32, psn: u32, imm: u32, payload: &[u8]) -> Packet {
        Packet::new(
            bth(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, dest_qp, psn),
            ExtReprs {
                immdt: Some(ImmDtRepr { imm }),
                ..ExtReprs::default()
            },
            payload,
        )
    }

    /// SEND ONLY with Invalidate of `rkey` (IETH).
    pub fn send_inv(dest_qp: u32, psn: u32, rkey: u32, payload: &[u8]) -> Packet {
        Packet::new(
            bth(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, dest_qp, psn),
            ExtReprs {
                ieth: Some(rxe_core::wire::IethRepr { rkey }),
                ..ExtReprs::default()
            },
            payload,
        )
    }

    // ---- corruption: BTH bytes as laid out in IBTA 9.2 (Figure 96) ------

    /// Byte 0: the opcode.
    pub fn opcode(mut self, raw: u8) -> Packet {
        if let Some(b) = self.bytes.first_mut() {
            *b = raw;
        }
        self
    }

    /// Byte 1 bits 5:4: the pad count.
    pub fn pad(mut self, pad: u8) -> Packet {
        if let Some(b) = self.bytes.get_mut(1) {
            *b = (*b & !0x30) | ((pad & 3) << 4);
        }
        self
    }

    /// Byte 1 bits 3:0: the transport header version.
    pub fn tver(mut self, tver: u8) -> Packet {
        if let Some(b) = self.bytes.get_mut(1) {
            *b = (*b & !0x0f) | (tver & 0x0f);
        }
        self
    }

    /// Bytes 2..4: the P_Key.
    pub fn pkey(mut self, pkey: u16) -> Packet {
        if let Some(b) = self.bytes.get_mut(2..4) {
            b.copy_from_slice(&pkey.to_be_bytes());
        }
        self
    }

    /// Bytes 5..8: the destination QP.
    pub fn dest_qp(mut self, qpn: u32) -> Packet {
        if let Some(b) = self.bytes.get_mut(5..8) {
            b.copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        self
    }

    /// Keeps the first `len` bytes.
    pub fn truncate(mut self, len: usize) -> Packet {
        self.bytes.truncate(len);
        self
    }

    /// Overwrites the bytes at `at` (extending the packet if needed).
    pub fn patch(mut self, at: usize, with: &[u8]) -> Packet {
        let end = at + with.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[at..end].copy_from_slice(with);
        self
    }
}

/// How the ICRC of a packet is written when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icrc {
    /// Correct for the headers the kernel will write.
    Seal,
    /// Sealed, then one bit flipped: the victim must drop it.
    Corrupt,
    /// Left as the bytes are (too short to seal, or deliberately raw).
    AsIs,
}

/// The one call into the device's ICRC code: the ICRC over the IPv4/IPv6
/// and UDP headers a Linux socket writes for `src` -> `dst` (RoCEv2 Annex
/// A17.3.3). A packet too short to carry an ICRC is left unchanged.
pub fn seal_icrc(src: SocketAddr, dst: SocketAddr, packet: &mut [u8]) {
    let Ok(h) = WireHeaders::outgoing(src, dst, packet.len(), 64, 0) else {
        return;
    };
    let _ = encap::seal(&h, packet);
}

/// One datagram the victim sent to the peer, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The address it came from.
    pub from: SocketAddr,
    /// The address (of the peer's sockets) it went to.
    pub to: SocketAddr,
    /// Its ICRC verified against the headers the socket reported.
    pub icrc_ok: bool,
    /// `None` if the transport did not parse (the raw bytes are kept).
    pub opcode: Option<Opcode>,
    pub dest_qp: u32,
    pub psn: u32,
    pub aeth: Option<AethRepr>,
    /// The AtomicAckETH's original value.
    pub atomic_orig: Option<u64>,
    pub payload: Vec<u8>,
    pub raw: Vec<u8>,
}

impl Answer {
    fn parse(from: SocketAddr, to: SocketAddr, hop: Option<u8>, bytes: &[u8]) -> Answer {
        let info = RecvInfo {
            src: from,
            dst: to,
            hop_limit: hop,
            traffic_class: None,
        };
        let icrc_ok = encap::open(bytes, &info, OpenOptions::default()).is_ok();
        let mut a = Answer {
            from,
            to,
            icrc_ok,
            opcode: None,
            dest_qp: 0,
            psn: 0,
            aeth: None,
            atomic_orig: None,
            payload: Vec::new(),
            raw: bytes.to_vec(),
        };
        if let Ok(p) = TransportRepr::parse(bytes) {
            a.opcode = Some(p.repr.bth.opcode);
            a.dest_qp = p.repr.bth.dest_qp;
            a.psn = p.repr.bth.psn;
            a.aeth = p.repr.ext.aeth;
            a.atomic_orig = p.repr.ext.atomic_ack_eth.map(|x| x.orig_data);
            a.payload = p.payload.to_vec();
        }
        a
    }
}

/// The hostile peer: its own socket, a spoofer's, and what the victim
/// answered.
pub struct HostilePeer {
    sock: RoceSocket,
    spoof: Option<RoceSocket>,
    victim: SocketAddr,
    rx: RxBatch,
    answers: Vec<Answer>,
    sent: u64,
}

impl HostilePeer {
    /// A peer on `ip` (port 4791) that talks to the device at `victim`
    /// (port 4791); with `spoof_ip`, a second socket there.
    pub fn bind(ip: IpAddr, victim: IpAddr, spoof_ip: Option<IpAddr>) -> io::Result<HostilePeer> {
        let sock = RoceSocket::bind(ip, ROCE_PORT)?;
        let spoof = spoof_ip
            .map(|s| RoceSocket::bind(s, ROCE_PORT))
            .transpose()?;
        Ok(HostilePeer {
            sock,
            spoof,
            victim: SocketAddr::new(victim, ROCE_PORT),
            rx: RxBatch::new(64, 9000),
            answers: Vec::new(),
            sent: 0,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.sock.local_addr()
    }

    pub fn gid(&self) -> Gid {
        Gid::from(self.addr().ip())
    }

    /// Datagrams sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Sends `p` to the victim from the peer's own address.
    pub fn send(&mut self, p: Packet, icrc: Icrc) {
        self.send_from(false, p, icrc);
    }

    /// Sends `p` from the spoofer's address (ICRC sealed for that address,
    /// as a real spoofer on the path would).
    pub fn send_spoofed(&mut self, p: Packet, icrc: Icrc) {
        self.send_from(true, p, icrc);
    }

    fn send_from(&mut self, spoofed: bool, mut p: Packet, icrc: Icrc) {
        let sock = match (spoofed, &self.spoof) {
            (true, Some(s)) => s,
            (true, None) => panic!("the peer was bound without a spoofer"),
            (false, _) => &self.sock,
        };
        let src = sock.local_addr();
        match icrc {
            Icrc::Seal => seal_icrc(src, self.victim, &mut p.bytes),
            Icrc::Corrupt => {
                seal_icrc(src, self.victim, &mut p.bytes);
                if let Some(last) = p.bytes.last_mut() {
                    *last ^= 0x01;
                }
            }
            Icrc::AsIs => {}
        }
        // Nonblocking: a full buffer is retried, so no packet of a case is
        // silently lost on the peer's side.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match sock.send_to(&p.bytes, self.victim) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                Err(e) => panic!("send to {}: {e}", self.victim),
            }
        }
        self.sent += 1;
    }

    /// Sends raw bytes as fast as the socket takes them, without waiting:
    /// `false` if the socket did not take the datagram (its buffer full, or
    /// any other error), which is then not sent.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> bool {
        match self.sock.send_to(bytes, self.victim) {
            Ok(_) => {
                self.sent += 1;
                true
            }
            Err(_) => false,
        }
    }

    /// Reads whatever has arrived on both sockets.
    pub fn drain(&mut self) {
        let HostilePeer {
            sock,
            spoof,
            rx,
            answers,
            ..
        } = self;
        for s in std::iter::once(&*sock).chain(spoof.as_ref()) {
            loop {
                let n = match s.recv_batch(rx) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => 0,
                };
                if n == 0 {
                    break;
                }
                for i in 0..n {
                    if let Some((m, bytes)) = rx.get(i) {
                        if let Some(from) = m.src {
                            answers.push(Answer::parse(from, s.local_addr(), m.hop_limit, bytes));
                        }
                    }
                }
            }
        }
    }

    /// Every answer recorded so far.
    pub fn answers(&self) -> &[Answer] {
        &self.answers
    }

    /// Forgets the recorded answers.
    pub fn clear(&mut self) {
        self.answers.clear();
    }

    /// Waits (at most `timeout`) until `n` answers are recorded; returns
    /// them all.
    pub fn wait_answers(&mut self, n: usize, timeout: Duration) -> &[Answer] {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            if self.answers.len() >= n || Instant::now() >= deadline {
                return &self.answers;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits for the next answer, removing it from the record.
    pub fn next_answer(&mut self, timeout: Duration) -> Option<Answer> {
        self.wait_answers(1, timeout);
        if self.answers.is_empty() {
            None
        } else {
            Some(self.answers.remove(0))
        }
    }

    /// Nothing arrives within `d`: the victim stayed silent.
    pub fn assert_silent(&mut self, d: Duration) {
        std::thread::sleep(d);
        self.drain();
        assert!(
            self.answers.is_empty(),
            "the victim answered: {:?}",
            self.answers
        );
    }
}
