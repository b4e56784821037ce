//! A Rust [`RdmaCmEvent`] as a `struct rdma_cm_event`: the IDs it names
//! (a ConnectRequest's new ID is made here, on the listener's channel),
//! the event number and status librdmacm gives, and `param.conn` with a
//! copy of the private data that lives until the event is acked.

use rxe_verbs::cm::{PeerConnParam, RdmaCmEvent, UdPeer, Unreachable, RDMA_UDP_QKEY};
use rxe_verbs::Gid;
use rxe_verbs_abi::rdmacm::*;
use rxe_verbs_abi::{ibv_ah_attr, ibv_global_route};

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

/// `param.ud`: the private data, and the address of the ID's peer (its
/// QP and Q_Key from a SIDR_REP; a SIDR_REQ names none, then 0 and the
/// port space's Q_Key).
fn ud(data: &[u8], id: &CId, peer: Option<UdPeer>) -> rdma_cm_event_param {
    let route = id.inner.route();
    let dgid = id
        .inner
        .remote_addr()
        .map_or(Gid::ZERO, |a| Gid::from(a.ip()));
    rdma_cm_event_param {
        ud: rdma_ud_param {
            private_data: if data.is_empty() {
                std::ptr::null()
            } else {
                data.as_ptr().cast()
            },
            private_data_len: data.len().min(255) as u8,
            ah_attr: ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: dgid.into(),
                    flow_label: 0,
                    sgid_index: id.inner.sgid_index(),
                    hop_limit: route.map_or(64, |r| r.hop_limit),
                    traffic_class: route.map_or(0, |r| r.traffic_class),
                },
                is_global: 1,
                port_num: rxe_verbs::PORT,
                ..ibv_ah_attr::default()
            },
            qp_num: peer.map_or(0, |p| p.qp_num),
            qkey: peer.map_or(RDMA_UDP_QKEY, |p| p.qkey),
        },
    }
}

/// `param.ud` of a MULTICAST_JOIN: the join's `context` as the private
/// data (librdmacm's convention), the address vector to the group, QPN
/// 0xFFFFFF and the group's Q_Key.
fn multicast_param(
    id: &CId,
    group: std::net::IpAddr,
    av: &rxe_core::transport::AddressVector,
    peer: UdPeer,
) -> rdma_cm_event_param {
    rdma_cm_event_param {
        ud: rdma_ud_param {
            private_data: super::multicast::context_of(id, group),
            private_data_len: 0,
            ah_attr: ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: av.dgid.into(),
                    flow_label: av.flow_label,
                    sgid_index: av.sgid_index,
                    hop_limit: av.hop_limit,
                    traffic_class: av.traffic_class,
                },
                sl: av.sl,
                is_global: 1,
                port_num: rxe_verbs::PORT,
                ..ibv_ah_attr::default()
            },
            qp_num: peer.qp_num,
            qkey: peer.qkey,
        },
    }
}

/// The C event for `e`; `None` if the ID it is about was destroyed
/// meanwhile.
pub fn to_c(e: RdmaCmEvent) -> Option<*mut rdma_cm_event> {
    let (id, listen): (&'static CId, Option<&'static CId>) = match &e {
        RdmaCmEvent::ConnectRequest { id, listen_id, .. } => {
            let l = CId::of(listen_id)?;
            let child = CId::new_child(id.clone(), l)?;
            (child, Some(l))
        }
        other => (CId::of(other.id())?, None),
    };
    let is_ud = id.inner.port_space() == rxe_verbs::cm::PortSpace::Udp;
    let mut ud_peer = None;
    let mut joined = None;
    let (code, status, data, peer): (u32, i32, Vec<u8>, Option<PeerConnParam>) = match e {
        RdmaCmEvent::AddrResolved { .. } => (event::ADDR_RESOLVED, 0, Vec::new(), None),
        RdmaCmEvent::RouteResolved { .. } => (event::ROUTE_RESOLVED, 0, Vec::new(), None),
        RdmaCmEvent::ConnectRequest {
            private_data, peer, ..
        } => (event::CONNECT_REQUEST, 0, private_data, Some(peer)),
        RdmaCmEvent::ConnectResponse {
            private_data, peer, ..
        } => (event::CONNECT_RESPONSE, 0, private_data, Some(peer)),
        RdmaCmEvent::Established {
            private_data, ud, ..
        } => {
            ud_peer = ud;
            (event::ESTABLISHED, 0, private_data, None)
        }
        // The status of a REJECTED event is the REJ's reason code, as the
        // kernel's rdma_cm reports it for IB and RoCE.
        RdmaCmEvent::Rejected {
            reason,
            private_data,
            ..
        } => (event::REJECTED, i32::from(reason), private_data, None),
        RdmaCmEvent::Unreachable { why, .. } => {
            let status = match why {
                Unreachable::Timeout => -libc::ETIMEDOUT,
                Unreachable::Sidr(s) => i32::from(s),
            };
            (event::UNREACHABLE, status, Vec::new(), None)
        }
        RdmaCmEvent::Disconnected { .. } => (event::DISCONNECTED, 0, Vec::new(), None),
        RdmaCmEvent::TimewaitExit { .. } => (event::TIMEWAIT_EXIT, 0, Vec::new(), None),
        RdmaCmEvent::DeviceRemoval { .. } => (event::DEVICE_REMOVAL, 0, Vec::new(), None),
        RdmaCmEvent::MulticastJoin { group, av, ud, .. } => {
            joined = Some(multicast_param(id, group, &av, ud));
            (event::MULTICAST_JOIN, 0, Vec::new(), None)
        }
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
    b.ev.param = if let Some(p) = joined {
        p
    } else if is_ud {
        ud(&b.data, id, ud_peer)
    } else {
        conn(&b.data, peer.as_ref())
    };
    let p = Box::into_raw(b);
    handles::insert(p, Kind::CmEvent);
    Some(p.cast())
}
