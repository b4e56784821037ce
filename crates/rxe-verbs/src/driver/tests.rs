//! A busy poller's turn on real sockets (127.0.9.0/24): when what the
//! engine has to send waits for the next turn, and when it goes at once.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use rxe_core::transport::{AddressVector, RecvMeta, Transmit};
use rxe_core::Gid;

use super::turn::{poller_turn, Sends, DEFER_BOUND, DEFER_MAX_RECEIVED};
use super::*;
use rxe_net::encap::{seal, WireHeaders};
use rxe_net::Clock;
use rxe_net::NetPort;

/// RC SEND Only (a request) and RC Acknowledge (a response).
const SEND_ONLY: u8 = 0x04;
const ACK: u8 = 0x11;
const LEN: usize = 20;

/// Answers every packet it receives with one of its own to the sender.
struct Answer {
    gids: Vec<Gid>,
    to: VecDeque<Gid>,
}

impl Engine for Answer {
    fn handle(&mut self, _: Instant, meta: &RecvMeta, _: &[u8]) {
        self.to.push_back(meta.sgid);
    }
    fn poll_transmit(&mut self, _: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let dgid = self.to.pop_front()?;
        buf[..LEN].fill(0);
        buf[0] = ACK;
        Some(Transmit {
            len: LEN,
            dest: AddressVector {
                dgid,
                sgid_index: 0,
                hop_limit: 0,
                traffic_class: 0,
                flow_label: 0,
                sl: 0,
                src_port: None,
            },
            src_qpn: 0x11,
        })
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _: Instant) {}
    fn source_gid(&self, sgid_index: u8) -> Option<Gid> {
        self.gids.get(usize::from(sgid_index)).copied()
    }
}

fn v4(d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 9, d))
}

/// A packet with opcode `op`, its ICRC sealed for the headers it will have.
fn send(out: &UdpSocket, dst: SocketAddr, op: u8) {
    let mut p = vec![0u8; LEN];
    p[0] = op;
    let h = WireHeaders::outgoing(out.local_addr().unwrap(), dst, LEN, 64, 0).unwrap();
    seal(&h, &mut p).unwrap();
    out.send_to(&p, dst).unwrap();
}

/// How many answers reached the peer by now.
fn answers(peer: &UdpSocket) -> usize {
    let mut buf = [0u8; 64];
    std::iter::from_fn(|| peer.recv(&mut buf).ok()).count()
}

/// A turn that receives something (loopback delivers during `send_to`,
/// so the first turn does; a few more are allowed for a slow machine).
fn receiving_turn(port: &NetPort, d: &Deferral, e: &mut Answer, sends: Sends) -> Turn {
    for _ in 0..100 {
        let t = poller_turn(port, e, d, sends, None);
        if t.received > 0 {
            return t;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("nothing arrived");
}

/// A port on `me` with its deferral, a peer socket on `them` (port 4791,
/// non-blocking), the port's address, and an engine that answers.
fn setup(me: IpAddr, them: IpAddr) -> (NetPort, Deferral, UdpSocket, SocketAddr, Answer) {
    let port = NetPort::new(Clock::new());
    port.add_address(me).unwrap();
    let peer = UdpSocket::bind(SocketAddr::new(them, 4791)).unwrap();
    peer.set_nonblocking(true).unwrap();
    let e = Answer {
        gids: vec![Gid::from(me)],
        to: VecDeque::new(),
    };
    (
        port,
        Deferral::default(),
        peer,
        SocketAddr::new(me, 4791),
        e,
    )
}

#[test]
fn a_pollers_turn_leaves_the_answer_to_a_request_for_the_next_turn_once() {
    let (port, d, peer, dst, mut e) = setup(v4(1), v4(2));

    // A request: its answer waits for the next turn (or a post's flush).
    send(&peer, dst, SEND_ONLY);
    assert!(receiving_turn(&port, &d, &mut e, Sends::Poller).sends_deferred);
    assert_eq!(answers(&peer), 0);
    let t = poller_turn(&port, &mut e, &d, Sends::Poller, None);
    assert!(!t.sends_deferred);
    assert_eq!(answers(&peer), 1);

    // Only once in a row: a second request before any flush goes at once,
    // with the first's answer.
    send(&peer, dst, SEND_ONLY);
    assert!(receiving_turn(&port, &d, &mut e, Sends::Poller).sends_deferred);
    send(&peer, dst, SEND_ONLY);
    assert!(!receiving_turn(&port, &d, &mut e, Sends::Poller).sends_deferred);
    assert_eq!(answers(&peer), 2);

    // Only ACKs (a stream's sender, whose window they open): at once.
    send(&peer, dst, ACK);
    assert!(!receiving_turn(&port, &d, &mut e, Sends::Poller).sends_deferred);
    assert_eq!(answers(&peer), 1);

    // Many packets (a stream's receiver): at once.
    for _ in 0..=DEFER_MAX_RECEIVED {
        send(&peer, dst, SEND_ONLY);
    }
    let t = receiving_turn(&port, &d, &mut e, Sends::Poller);
    assert_eq!(t.received, DEFER_MAX_RECEIVED + 1);
    assert!(!t.sends_deferred);
    assert_eq!(answers(&peer), DEFER_MAX_RECEIVED + 1);

    // Busy polling not preferred (and the driver thread's turns): never.
    send(&peer, dst, SEND_ONLY);
    assert!(!receiving_turn(&port, &d, &mut e, Sends::Now).sends_deferred);
    assert_eq!(answers(&peer), 1);
}

/// The thread's look while a poller is at work (`Sends::Look`): an arrival
/// the poller missed has its answer left for the poller's post, like the
/// poller's own turn; a look leaves a deferral alone while it is younger
/// than `DEFER_BOUND`, and sends it after.
#[test]
fn the_threads_look_leaves_a_young_deferral_for_the_pollers_post() {
    let (port, d, peer, dst, mut e) = setup(v4(3), v4(4));

    // A request the poller missed: the look defers its answer as the
    // poller's turn would.
    send(&peer, dst, SEND_ONLY);
    assert!(receiving_turn(&port, &d, &mut e, Sends::Look).sends_deferred);
    let deferred = d.since().expect("noted when deferred");
    assert_eq!(answers(&peer), 0);

    // The next look, soon after: still waiting for the poller's post.
    let t = poller_turn(&port, &mut e, &d, Sends::Look, None);
    if port.clock().now().saturating_since(deferred) < DEFER_BOUND {
        assert!(t.sends_deferred);
        assert_eq!(answers(&peer), 0);
        std::thread::sleep(DEFER_BOUND);
        // Waited long enough: the look sends it.
        let t = poller_turn(&port, &mut e, &d, Sends::Look, None);
        assert!(!t.sends_deferred);
    } else {
        // A slow machine took longer than the bound between the two
        // looks: the second one sent it.
        assert!(!t.sends_deferred);
    }
    assert_eq!(answers(&peer), 1);
    assert_eq!(d.since(), None, "a flush clears the note");

    // A poller's own next turn sends at once what it deferred (one turn
    // at most), which a look would have kept.
    send(&peer, dst, SEND_ONLY);
    assert!(receiving_turn(&port, &d, &mut e, Sends::Poller).sends_deferred);
    assert!(!poller_turn(&port, &mut e, &d, Sends::Poller, None).sends_deferred);
    assert_eq!(answers(&peer), 1);

    // The thread's own turn (no poller at work) never defers.
    send(&peer, dst, SEND_ONLY);
    assert!(!receiving_turn(&port, &d, &mut e, Sends::Now).sends_deferred);
    assert_eq!(answers(&peer), 1);
}
