//! Packets a test forges byte by byte, as a host that is not rxe would
//! send them: a RoCEv2 request sealed with the ICRC of the IP/UDP headers
//! the kernel writes for a plain UDP socket.

use std::net::SocketAddr;

use rxe_core::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};
use rxe_net::encap::{seal, WireHeaders};

/// A request to `dest_qp` at `psn` (P_Key 0xFFFF, AckReq set) with `ext`
/// and `payload`, sealed for a datagram from `from` to `to`.
pub fn request(
    from: SocketAddr,
    to: SocketAddr,
    opcode: Opcode,
    dest_qp: u32,
    psn: u32,
    ext: ExtReprs,
    payload: &[u8],
) -> Vec<u8> {
    let bth = BthRepr {
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
    };
    let t = TransportRepr::new(bth, ext, payload.len());
    let mut buf = vec![0; t.buffer_len().expect("a valid request")];
    t.emit(&mut buf, payload).expect("emit");
    let h = WireHeaders::outgoing(from, to, buf.len(), 64, 0).expect("headers");
    seal(&h, &mut buf).expect("seal");
    buf
}
