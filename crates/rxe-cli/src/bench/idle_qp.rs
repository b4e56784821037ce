//! The memory an idle RC QP costs (issue #14: at most 16 KiB each): this
//! process makes a device on 127.0.0.156, brings many RC QPs to RTS
//! towards a peer that never answers (nothing is posted, so nothing is
//! sent), and divides the growth of its resident set by their number.
//! The QPs have perftest's queue sizes (128 send, 512 receive work
//! requests); queues take memory only as work is posted, as a NIC's
//! on-chip QP context does not grow with them either.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result};
use rxe_core::transport::Psn;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Device, DeviceConfig, Gid, InitParams, PathMtu, QpCap,
    QpInitAttr, QpType, RcParams, ReadyParams, RemoteQp,
};

const DEVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 156));
/// The peer the QPs are connected to; nothing is ever sent to it.
const PEER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 157));

/// What [`measure`] found.
#[derive(Debug, Clone, Copy)]
pub struct IdleQps {
    pub qps: usize,
    /// Resident-set growth per QP, bytes.
    pub bytes_per_qp: f64,
}

pub fn measure(qps: usize) -> Result<IdleQps> {
    let dev = Device::add(DeviceConfig::on_address(DEVICE_IP))
        .context("cannot add the device for the idle-QP measurement")?;
    let result = with_device(&dev, qps);
    let _ = dev.remove();
    result
}

fn with_device(dev: &Device, n: usize) -> Result<IdleQps> {
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let mut qps = Vec::with_capacity(n);
    let init = InitParams::connected(AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE);
    let before = resident_bytes()?;
    for i in 0..n {
        let qp = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 512,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })?;
        let ready = ReadyParams::Rc {
            sq_psn: Psn::new(i as u32),
            remote: RemoteQp {
                qpn: 0x100 + i as u32,
                psn: Psn::new(i as u32),
                av: AddressVector {
                    dgid: Gid::from(PEER_IP),
                    hop_limit: 1,
                    ..AddressVector::default()
                },
                path_mtu: PathMtu::Mtu4096,
            },
            rc: RcParams::PINGPONG.with_rd_atomic(16),
        };
        connect::connect(&qp, &init, &ready).context("cannot bring an idle QP to RTS")?;
        qps.push(qp);
    }
    let after = resident_bytes()?;
    for qp in &qps {
        qp.destroy()?;
    }
    Ok(IdleQps {
        qps: n,
        bytes_per_qp: after.saturating_sub(before) as f64 / n.max(1) as f64,
    })
}

/// This process's resident set, from /proc/self/status (`VmRSS`, in kB).
fn resident_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}
