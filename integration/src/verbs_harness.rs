//! Helpers for tests that drive real devices over loopback: bring QPs up
//! the way `ibv_rc_pingpong` does, wait for completions with a deadline.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rxe_core::transport::Psn;
use rxe_core::Gid;
use rxe_verbs::{
    connect, AccessFlags, AddressVector, Cq, Device, DeviceConfig, InitParams, Mr, PathMtu, Pd, Qp,
    QpCap, QpInitAttr, QpType, RcParams, ReadyParams, RemoteQp, WorkCompletion,
};

/// A device on one loopback address with a PD, a CQ and one MR.
pub struct Node {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub mr: Mr,
}

/// All four access rights.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// An RC QP of `pd` on `cq` (both queues) for one-SGE work requests, up
/// to `depth` of each queued, every send signaled.
pub fn rc_qp(pd: &Pd, cq: &Cq, depth: u32) -> Qp {
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    })
    .expect("qp")
}

impl Node {
    /// A device on `ip` (a 127.0.0.0/8 address) with a 64 KiB MR.
    pub fn new(ip: &str) -> Node {
        let ip: IpAddr = ip.parse().expect("address");
        Node::with_config(DeviceConfig::on_address(ip))
    }

    /// A device as `config` says, with a 64 KiB MR.
    pub fn with_config(config: DeviceConfig) -> Node {
        let dev = Device::add(config).expect("device");
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(1024).expect("cq");
        let mr = pd.reg_mr_zeroed(65536, all_access()).expect("mr");
        Node { dev, pd, cq, mr }
    }

    pub fn gid(&self) -> Gid {
        self.dev.query_gid(1, 0).expect("gid 0")
    }

    pub fn qp(&self, qp_type: QpType) -> Qp {
        self.pd
            .create_qp(&QpInitAttr {
                qp_type,
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 256,
                    max_recv_wr: 256,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 256,
                },
                sq_sig_all: false,
            })
            .expect("qp")
    }

    /// Waits for `n` completions or fails the test after 10 s.
    pub fn wait(&self, n: usize) -> Vec<WorkCompletion> {
        wait_cq(&self.cq, n)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.dev.remove();
    }
}

/// Waits for `n` completions on `cq`, polling, for at most 10 s.
pub fn wait_cq(cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        cq.poll_into(n - out.len(), &mut out).expect("poll");
        if out.len() < n {
            assert!(
                Instant::now() < deadline,
                "timed out with {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

/// Nothing more arrives on `cq` within `d`.
pub fn assert_quiet(cq: &Cq, d: Duration) {
    std::thread::sleep(d);
    let got = cq.poll(16).expect("poll");
    assert!(got.is_empty(), "unexpected completions: {got:?}");
}

/// RESET → INIT → RTR → RTS as `ibv_rc_pingpong` does (MTU 1024,
/// min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7), for RC or UC.
pub fn connect(qp: &Qp, dest_qpn: u32, dgid: Gid, sq_psn: u32, rq_psn: u32) {
    connect_with(qp, dest_qpn, dgid, sq_psn, rq_psn, 0, all_access());
}

/// As [`connect()`], with a P_Key index and QP access flags.
pub fn connect_with(
    qp: &Qp,
    dest_qpn: u32,
    dgid: Gid,
    sq_psn: u32,
    rq_psn: u32,
    pkey_index: u16,
    access: AccessFlags,
) {
    let remote = RemoteQp {
        qpn: dest_qpn,
        psn: Psn::new(rq_psn),
        av: AddressVector {
            dgid,
            sgid_index: 0,
            hop_limit: 64,
            ..Default::default()
        },
        path_mtu: PathMtu::Mtu1024,
    };
    let sq_psn = Psn::new(sq_psn);
    let ready = if qp.qp_type() == QpType::Rc {
        ReadyParams::Rc {
            sq_psn,
            remote,
            rc: PINGPONG_RC,
        }
    } else {
        ReadyParams::Uc { sq_psn, remote }
    };
    let init = InitParams::connected(access)
        .with_pkey_index(pkey_index)
        .with_port(1);
    connect::connect(qp, &init, &ready).expect("RESET->INIT->RTR->RTS");
}

/// The RC attributes of `ibv_rc_pingpong`, with four READs or atomics in
/// flight each way instead of one.
pub const PINGPONG_RC: RcParams = RcParams::PINGPONG.with_rd_atomic(4);

/// RESET → INIT → RTR → RTS for a UD QP with `qkey`.
pub fn ud_up(qp: &Qp, qkey: u32, pkey_index: u16) {
    let init = InitParams::datagram(qkey)
        .with_pkey_index(pkey_index)
        .with_port(1);
    let ready = ReadyParams::Ud {
        sq_psn: Psn::new(0x1234),
    };
    connect::connect(qp, &init, &ready).expect("RESET->INIT->RTR->RTS");
}

/// A connected RC (or UC) pair between two nodes.
pub fn pair(a: &Node, b: &Node, qp_type: QpType) -> (Qp, Qp) {
    let qa = a.qp(qp_type);
    let qb = b.qp(qp_type);
    connect(&qa, qb.qp_num(), b.gid(), 0x100, 0x200);
    connect(&qb, qa.qp_num(), a.gid(), 0x200, 0x100);
    (qa, qb)
}
