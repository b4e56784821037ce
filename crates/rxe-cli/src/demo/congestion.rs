//! The demo's step 11, congestion control: A's packets arrive at B marked
//! Congestion Experienced, B answers with a CNP, A's QP lowers its rate
//! (DCQCN). No switch marks on loopback, so A's QP for this step stands in
//! for one: its address vector carries the traffic class CE (ECN bits 11),
//! which the device keeps (an address vector that sets the ECN field
//! itself is sent as it says; rxe-core's `congestion` module).

use super::*;

/// The traffic class of A's marked packets: DSCP 0, ECN CE.
const CE: u8 = 0b11;
const CC_AT: usize = 14336;

impl Demo<'_> {
    pub(super) fn congestion(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let (qa, qb) = (a.new_rc_qp()?, b.new_rc_qp()?);
        let up = |me: &Side, q: &Qp, peer: &Side, peer_qpn: u32, tclass: u8| {
            let remote = RemoteQp {
                qpn: peer_qpn,
                psn: Psn::new(0x00c0c0),
                av: AddressVector {
                    dgid: Gid::from(peer.ip),
                    sgid_index: me.gid_idx,
                    hop_limit: 64,
                    traffic_class: tclass,
                    ..AddressVector::default()
                },
                path_mtu: PathMtu::Mtu1024,
            };
            connect::connect(
                q,
                &InitParams::connected(AccessFlags::REMOTE_WRITE),
                &ReadyParams::Rc {
                    sq_psn: Psn::new(0x00c0c0),
                    remote,
                    rc: DEMO_RC,
                },
            )
        };
        up(a, &qa, b, qb.qp_num(), CE)?;
        up(b, &qb, a, qa.qp_num(), 0)?;
        let count = |s: &Side, n: &str| s.dev.counter(n);
        let (ce0, cnp0, red0) = (
            count(b, "np_ecn_marked_roce_packets"),
            count(b, "np_cnp_sent"),
            count(a, "rp_rate_reductions"),
        );
        ensure!(
            a.dev.qp_rate_mbps(qa.qp_num()).is_none(),
            "A's new QP starts at line rate"
        );
        let data = text(2048, "CNP");
        a.mr.write(0, &data)?;
        a.rc_post(&qa, &data, b.mr.addr() + CC_AT as u64, b.mr.rkey())?;
        expect_wc(&a.cq, WcOpcode::RdmaWrite, "A")?;
        let mut got = vec![0u8; data.len()];
        b.mr.read(CC_AT, &mut got)?;
        ensure!(got == data, "B's memory does not hold the written bytes");
        // The CNP may still be on its way when the WRITE's ACK is in.
        let deadline = Instant::now() + STEP_TIMEOUT;
        while count(a, "rp_rate_reductions") == red0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ce = count(b, "np_ecn_marked_roce_packets") - ce0;
        let cnps = count(b, "np_cnp_sent") - cnp0;
        let reductions = count(a, "rp_rate_reductions") - red0;
        ensure!(ce >= 2, "B saw {ce} CE-marked packets, not 2");
        ensure!(cnps >= 1, "B sent no CNP");
        ensure!(reductions >= 1, "A's rate was not reduced");
        // DCQCN recovers within milliseconds of one CNP: a slow host may
        // find the QP back at line rate already.
        let rate = match a.dev.qp_rate_mbps(qa.qp_num()) {
            Some(r) => format!("{r:.0} Mb/s"),
            None => "line rate again (recovered already)".to_string(),
        };
        let line = a.dev.congestion().dcqcn.max_rate_mbps;
        let (qpn_a, qpn_b) = (qa.qp_num(), qb.qp_num());
        qa.destroy()?;
        qb.destroy()?;
        Ok(format!(
            "A's QP 0x{qpn_a:06x} sent its 2 WRITE packets to B's QP 0x{qpn_b:06x} marked CE (ECN 11, as a congested switch marks them); B counted {ce} and answered with {cnps} CNP (opcode 0x81, BECN, to QP 0x{qpn_a:06x}; at most one per 4 us); A's QP went from line rate ({line} Mb/s) down by {reductions} DCQCN rate reduction, and is now at {rate}: it recovers by itself."
        ))
    }
}

impl Side {
    /// An RDMA WRITE of `data` (already at offset 0 of the MR) on `qp`.
    pub(super) fn rc_post(&self, qp: &Qp, data: &[u8], remote_addr: u64, rkey: u32) -> Result<()> {
        qp.post_send(send_wr(
            11,
            SendOp::RdmaWrite { remote_addr, rkey },
            SendData::Sges(vec![self.mr.sge(0, data.len() as u32)]),
        ))?;
        Ok(())
    }
}
