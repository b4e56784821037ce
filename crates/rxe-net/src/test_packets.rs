//! Transport packets for the unit tests of this crate.

use rxe_core::wire::{BthRepr, ExtReprs, Opcode, TransportRepr};

/// The bytes of one packet, BTH to ICRC (the ICRC left 0): `opcode` to
/// `dest_qp` at `psn`, P_Key 0xFFFF, with the extended headers `ext`.
pub(crate) fn packet(
    opcode: Opcode,
    dest_qp: u32,
    psn: u32,
    ack_req: bool,
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
        ack_req,
        psn,
    };
    let t = TransportRepr::new(bth, ext, payload.len());
    let mut buf = vec![0; t.buffer_len().unwrap()];
    t.emit(&mut buf, payload).unwrap();
    buf
}
