//! The QP attributes a connection's REQ and REP settle, for the INIT, RTR
//! and RTS transitions: what `rdma_init_qp_attr` (through the IB CM's
//! `ib_cm_init_qp_attr`) hands a consumer. Facts from Linux's CM
//! (`drivers/infiniband/core/cm.c`: which message field feeds which
//! attribute on each side), not its code.
//!
//! | attribute | active side (sent the REQ) | passive side (sent the REP) |
//! |---|---|---|
//! | `dest_qpn` | REP Local QPN | REQ Local QPN |
//! | `rq_psn` | REQ Starting PSN | REP Starting PSN |
//! | `sq_psn` | REP Starting PSN | REQ Starting PSN |
//! | `path_mtu` | REQ Path MTU | REQ Path MTU |
//! | `max_dest_rd_atomic` | REP Initiator Depth | REP Responder Resources |
//! | `max_rd_atomic` | REP Responder Resources | REP Initiator Depth |
//! | `timeout` | ack_timeout(REP Target ACK Delay, PLT) | REQ Local ACK Timeout |
//! | `retry_cnt` | REQ Retry Count | REQ Retry Count |
//! | `rnr_retry` | REP RNR Retry Count | REQ RNR Retry Count |
//! | `min_rnr_timer` | 0 | 0 |
//! | access | remote write; read and atomics if responder resources > 0 | the same |
//! | `dgid`, `sgid` | REQ remote, local GID | REQ local, remote GID |
//!
//! A message's Starting PSN is thus the PSN its sender expects to
//! receive first: the peer starts sending at it. The golden capture of two
//! kernels (`rping.pcap`: REQ 0xec53de, REP 0x0266e4) shows it: the active
//! side's first SEND carries PSN 0x0266e4, the passive side's first READ
//! 0xec53de.
//!
//! The active side's PLT is the REQ's Local ACK Timeout minus one (the
//! REQ's timeout was PLT + 1 with the local CA's ACK delay).

use crate::mad::{RepRepr, ReqRepr};
use crate::timer::ack_timeout;
use rxe_core::Gid;

/// The transport of the connection (REQ Transport Service Type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnQpType {
    Rc,
    Uc,
}

/// The address vector of the connection's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathAttrs {
    pub dgid: Gid,
    pub sgid: Gid,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub static_rate: u8,
}

/// Attributes for INIT, RTR and RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAttrs {
    pub qp_type: ConnQpType,
    // INIT
    pub pkey: u16,
    pub remote_write: bool,
    pub remote_read: bool,
    pub remote_atomic: bool,
    // RTR
    /// The IBTA MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub path: PathAttrs,
    // RTS
    pub sq_psn: u32,
    /// Local ACK timeout exponent: 4.096 us x 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

fn qp_type(req: &ReqRepr) -> ConnQpType {
    if req.transport_service_type == crate::mad::req::TST_UC {
        ConnQpType::Uc
    } else {
        ConnQpType::Rc
    }
}

/// The active side's attributes, from its REQ and the REP it received.
pub fn active(req: &ReqRepr, rep: &RepRepr) -> QpAttrs {
    let p = &req.primary_path;
    let plt = p.local_ack_timeout.saturating_sub(1);
    let responder_resources = rep.initiator_depth;
    QpAttrs {
        qp_type: qp_type(req),
        pkey: req.pkey,
        remote_write: true,
        remote_read: responder_resources > 0,
        remote_atomic: responder_resources > 0,
        path_mtu: req.path_mtu,
        dest_qpn: rep.local_qpn,
        rq_psn: req.starting_psn,
        max_dest_rd_atomic: responder_resources,
        min_rnr_timer: 0,
        path: PathAttrs {
            dgid: p.remote_gid,
            sgid: p.local_gid,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            static_rate: p.packet_rate,
        },
        sq_psn: rep.starting_psn,
        timeout: ack_timeout(rep.target_ack_delay, plt),
        retry_cnt: req.retry_count,
        rnr_retry: rep.rnr_retry_count,
        max_rd_atomic: rep.responder_resources,
    }
}

/// The passive side's attributes, from the REQ it received and its REP.
pub fn passive(req: &ReqRepr, rep: &RepRepr) -> QpAttrs {
    let p = &req.primary_path;
    let responder_resources = rep.responder_resources;
    QpAttrs {
        qp_type: qp_type(req),
        pkey: req.pkey,
        remote_write: true,
        remote_read: responder_resources > 0,
        remote_atomic: responder_resources > 0,
        path_mtu: req.path_mtu,
        dest_qpn: req.local_qpn,
        rq_psn: rep.starting_psn,
        max_dest_rd_atomic: responder_resources,
        min_rnr_timer: 0,
        path: PathAttrs {
            dgid: p.local_gid,
            sgid: p.remote_gid,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            static_rate: p.packet_rate,
        },
        sq_psn: req.starting_psn,
        timeout: p.local_ack_timeout,
        retry_cnt: req.retry_count,
        rnr_retry: req.rnr_retry_count,
        max_rd_atomic: rep.initiator_depth,
    }
}
