//! A Rust [`RdmaCmEvent`] as a `struct rdma_cm_event`: the IDs it names
//! (a ConnectRequest's new ID is made here, on the listener's channel),
//! the event number and status librdmacm gives, and `param.conn` with a
//! copy of the private data that lives until the event is acked.

use rxe_verbs::cm::{PeerConnParam, RdmaCmEvent};
use rxe_verbs_abi::rdmacm::*;

use super::channel::CChannel;
use super::id::CId;
use crate::handles::{self, Kind};

#[repr(C)]
pub struct CEvent {
    pub ev: rdma_cm_event,
    /// The private data `param.conn.private_data` points into.
    data: Vec<u8>,
    /// The IDs this event keeps alive (its `id`, and a ConnectRequest's
    /// `listen_id`).
    holds: [Option<usize>; 2],
}

impl CEvent {
    /// The event is acked: the IDs it held may go.
    pub fn release(self) {
        for h in self.holds.into_iter().flatten() {
            // SAFETY: held by this event until now.
            unsafe { CId::release(h as *const CId) };
        }
    }
}

fn conn(data: &[u8], peer: Option<&PeerConnParam>) -> rdma_cm_event_param {
    let p = peer.copied().unwrap_or_default();
    rdma_cm_event_param {
        conn: rdma_conn_param {
            private_data: if data.is_empty() {
                std::ptr::null()
            } else {
                data.as_ptr().cast()
            },
            private_data_len: data.len().min(255) as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: u8::from(p.flow_control),
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: u8::from(p.srq),
            qp_num: p.qp_num,
        },
    }
}

/// The C event for `e`, delivered on `ch`; `None` if the ID it is about
/// was destroyed meanwhile.
pub fn to_c(ch: &CChannel, e: RdmaCmEvent) -> Option<*mut rdma_cm_event> {
    let _ = ch;
    let (id, listen): (&'static CId, Option<&'static CId>) = match &e {
        RdmaCmEvent::ConnectRequest { id, listen_id, .. } => {
            let l = CId::of(listen_id)?;
            let child = CId::new_child(id.clone(), l)?;
            (child, Some(l))
        }
        other => (CId::of(other.id())?, None),
    };
    let (code, status, data, peer): (u32, i32, Vec<u8>, Option<PeerConnParam>) = match e {
        RdmaCmEvent::AddrResolved { .. } => (event::ADDR_RESOLVED, 0, Vec::new(), None),
        RdmaCmEvent::RouteResolved { .. } => (event::ROUTE_RESOLVED, 0, Vec::new(), None),
        RdmaCmEvent::ConnectRequest {
            private_data, peer, ..
        } => (event::CONNECT_REQUEST, 0, private_data, Some(peer)),
        RdmaCmEvent::ConnectResponse {
            private_data, peer, ..
        } => (event::CONNECT_RESPONSE, 0, private_data, Some(peer)),
        RdmaCmEvent::Established { private_data, .. } => {
            (event::ESTABLISHED, 0, private_data, None)
        }
        // The status of a REJECTED event is the REJ's reason code, as the
        // kernel's rdma_cm reports it for IB and RoCE.
        RdmaCmEvent::Rejected {
            reason,
            private_data,
            ..
        } => (event::REJECTED, i32::from(reason), private_data, None),
        RdmaCmEvent::Unreachable { .. } => (event::UNREACHABLE, -libc::ETIMEDOUT, Vec::new(), None),
        RdmaCmEvent::Disconnected { .. } => (event::DISCONNECTED, 0, Vec::new(), None),
        RdmaCmEvent::TimewaitExit { .. } => (event::TIMEWAIT_EXIT, 0, Vec::new(), None),
        RdmaCmEvent::DeviceRemoval { .. } => (event::DEVICE_REMOVAL, 0, Vec::new(), None),
    };
    id.refresh();
    id.hold();
    if let Some(l) = listen {
        l.hold();
    }
    let mut b = Box::new(CEvent {
        ev: rdma_cm_event {
            id: id.c(),
            listen_id: listen.map_or(std::ptr::null_mut(), |l| l.c()),
            event: code,
            status,
            param: rdma_cm_event_param { arg: 0 },
        },
        data,
        holds: [
            Some(id as *const CId as usize),
            listen.map(|l| l as *const CId as usize),
        ],
    });
    b.ev.param = conn(&b.data, peer.as_ref());
    let p = Box::into_raw(b);
    handles::insert(p, Kind::CmEvent);
    Some(p.cast())
}
