//! Packets for the transport's unit tests, built as a peer would send them:
//! a BTH with the fields tests vary, then the extended headers and payload
//! through `TransportRepr::emit` (which leaves the ICRC slot zero, as the
//! engine's own packets have it).

use crate::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};

/// The BTH the tests start from: P_Key 0xffff, every flag clear.
pub(crate) fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: false,
        psn,
    }
}

/// The packet `bth`, `ext`, `payload`, pad and ICRC slot, as bytes.
pub(crate) fn emit(bth: BthRepr, ext: ExtReprs, payload: &[u8]) -> Vec<u8> {
    let t = TransportRepr::new(bth, ext, payload.len());
    let mut buf = vec![0; t.buffer_len().unwrap()];
    t.emit(&mut buf, payload).unwrap();
    buf
}
