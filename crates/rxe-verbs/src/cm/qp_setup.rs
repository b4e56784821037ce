//! The QP side of a CM connection: the attributes the REQ and REP settle
//! turned into INIT, RTR and RTS ([`bring_up`]), the starting PSNs, and the
//! access an RDMA CM QP gets (remote WRITE always, READ and atomics when
//! the peer may use them).

use rxe_cm::{ConnQpType, QpAttrs};
use rxe_core::transport::{AccessFlags, AddressVector, PathMtu, Psn, QpState};

use super::error::CmApiError;
use crate::connect::{self, InitParams, RcParams, ReadyParams, RemoteQp};
use crate::device::Device;

type Result<T> = std::result::Result<T, CmApiError>;
use crate::qp::Qp;

/// A 24-bit starting PSN that differs between connections.
pub(super) fn starting_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ qpn.wrapping_mul(0x9e37_79b9)) & 0xff_ffff
}

fn path_mtu_from_code(code: u8) -> PathMtu {
    PathMtu::ALL
        .get(usize::from(code.clamp(1, 5) - 1))
        .copied()
        .unwrap_or(PathMtu::Mtu1024)
}

/// The QP's RTR and RTS attributes from what the REQ and REP settled.
pub(crate) fn ready_params(dev: &Device, a: &QpAttrs) -> ReadyParams {
    let sgid_index = dev.find_gid(&a.path.sgid).map_or(0, |(_, i)| i);
    let remote = RemoteQp {
        qpn: a.dest_qpn,
        psn: Psn::new(a.rq_psn),
        av: AddressVector {
            dgid: a.path.dgid,
            sgid_index,
            hop_limit: a.path.hop_limit,
            traffic_class: a.path.traffic_class,
            flow_label: a.path.flow_label,
            sl: a.path.sl,
            ..AddressVector::default()
        },
        path_mtu: path_mtu_from_code(a.path_mtu),
    };
    let sq_psn = Psn::new(a.sq_psn);
    match a.qp_type {
        ConnQpType::Rc => ReadyParams::Rc {
            sq_psn,
            remote,
            rc: RcParams {
                max_dest_rd_atomic: a.max_dest_rd_atomic,
                min_rnr_timer: a.min_rnr_timer,
                timeout: a.timeout,
                retry_cnt: a.retry_cnt,
                rnr_retry: a.rnr_retry,
                max_rd_atomic: a.max_rd_atomic,
            },
        },
        ConnQpType::Uc => ReadyParams::Uc { sq_psn, remote },
    }
}

/// INIT (if still in RESET) → RTR → RTS with the CM's attributes.
pub(crate) fn bring_up(dev: &Device, qp: &Qp, a: &QpAttrs) -> Result<()> {
    if qp.query()?.attr.qp_state == Some(QpState::Reset) {
        connect::to_init(qp, &init_params(a.remote_read))?;
    }
    connect::ready(qp, &ready_params(dev, a))?;
    Ok(())
}

pub(super) fn init_params(read_atomic: bool) -> InitParams {
    let mut access = AccessFlags::REMOTE_WRITE;
    if read_atomic {
        access = access | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    }
    InitParams::connected(access)
}
