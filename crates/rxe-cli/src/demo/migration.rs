//! The demo's step 12, path migration (IBTA 17.2.8): each device has a
//! second address, and a QP pair of the step's own loads the pair of
//! second addresses as its alternate path with REARM, the way a
//! connection manager does. The first WRITE (MigReq 0) arms B, B's
//! acknowledgement arms A. A then migrates on request, as a program does
//! before it takes a link down; its second WRITE leaves from its second
//! address with MigReq 1, and B, seeing MigReq on its armed alternate
//! path, follows (PATH_MIG). The automatic trigger, retries spent on a
//! cut primary path, needs a path that can be cut: the namespace test
//! `integration/tests/path_migration_netns.rs` shows it.

use std::sync::{Arc, Mutex};

use rxe_verbs::{AltPath, AsyncEvent, MigState, QpAttr, PORT};

use super::*;

const MIG_AT: usize = 14336 + 2048;

/// The alternate address the demo gives a device on `ip`: on loopback the
/// same address with the second byte one higher (127.0.0.1 → 127.1.0.1),
/// a range no other part of rxe's tests uses; none elsewhere.
pub(super) fn alternate_of(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => {
            let o = v4.octets();
            Some(IpAddr::from([o[0], o[1].wrapping_add(1), o[2], o[3]]))
        }
        _ => None,
    }
}

impl Demo<'_> {
    pub(super) fn path_migration(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let (Some(alt_a), Some(alt_b)) = (a.alt_ip, b.alt_ip) else {
            bail!("the devices have no second address (--alt-ip-a, --alt-ip-b)");
        };
        let index = |s: &Side, ip: IpAddr| {
            s.dev
                .find_gid(&Gid::from(ip))
                .map(|(_, i)| i)
                .ok_or_else(|| anyhow!("{} has no GID for {ip}", s.dev.name()))
        };
        let (alt_idx_a, alt_idx_b) = (index(a, alt_a)?, index(b, alt_b)?);
        let (qa, qb) = (a.new_rc_qp()?, b.new_rc_qp()?);
        let av = |sgid_index: u8, to: IpAddr| AddressVector {
            dgid: Gid::from(to),
            sgid_index,
            hop_limit: 64,
            ..AddressVector::default()
        };
        let up = |q: &Qp, me: &Side, peer: &Side, peer_qpn: u32| {
            let remote = RemoteQp {
                qpn: peer_qpn,
                psn: Psn::new(0x00d0d0),
                av: av(me.gid_idx, peer.ip),
                path_mtu: PathMtu::Mtu1024,
            };
            connect::connect(
                q,
                &InitParams::connected(AccessFlags::REMOTE_WRITE),
                &ReadyParams::Rc {
                    sq_psn: Psn::new(0x00d0d0),
                    remote,
                    rc: DEMO_RC,
                },
            )
        };
        up(&qa, a, b, qb.qp_num())?;
        up(&qb, b, a, qa.qp_num())?;
        let rearm = |q: &Qp, idx: u8, to: IpAddr| {
            q.modify(&QpAttr {
                alt_path: Some(AltPath {
                    av: av(idx, to),
                    pkey_index: 0,
                    port_num: PORT,
                    timeout: 14,
                }),
                path_mig_state: Some(MigState::Rearm),
                ..QpAttr::default()
            })
        };
        rearm(&qa, alt_idx_a, alt_b)?;
        rearm(&qb, alt_idx_b, alt_a)?;
        let events: Arc<Mutex<Vec<AsyncEvent>>> = Arc::default();
        let seen = events.clone();
        let handler = b
            .dev
            .register_event_handler(move |e| seen.lock().unwrap().push(*e));
        let mig = |q: &Qp| -> Result<(MigState, Gid)> {
            let i = q.query()?;
            let state = i.attr.path_mig_state.unwrap_or(MigState::Migrated);
            Ok((state, i.attr.av.map(|p| p.dgid).unwrap_or_default()))
        };

        // WRITE 1 on the primary path: MigReq 0 from a QP in REARM.
        let first = text(512, "APM primary");
        a.mr.write(0, &first)?;
        a.rc_post(&qa, &first, b.mr.addr() + MIG_AT as u64, b.mr.rkey())?;
        expect_wc(&a.cq, WcOpcode::RdmaWrite, "A")?;
        ensure!(
            mig(&qa)?.0 == MigState::Armed && mig(&qb)?.0 == MigState::Armed,
            "the first exchange did not arm both QPs: A {:?}, B {:?}",
            mig(&qa)?.0,
            mig(&qb)?.0
        );
        // A migrates on request; WRITE 2 goes by the alternate path.
        qa.modify(&QpAttr {
            path_mig_state: Some(MigState::Migrated),
            ..QpAttr::default()
        })?;
        let second = text(512, "APM alternate");
        a.mr.write(0, &second)?;
        a.rc_post(
            &qa,
            &second,
            b.mr.addr() + (MIG_AT + 512) as u64,
            b.mr.rkey(),
        )?;
        expect_wc(&a.cq, WcOpcode::RdmaWrite, "A")?;
        let mut got = vec![0u8; 1024];
        b.mr.read(MIG_AT, &mut got)?;
        ensure!(
            got[..512] == first[..] && got[512..] == second[..],
            "B's memory does not hold the two WRITEs"
        );
        for (who, q, to) in [("A", &qa, alt_b), ("B", &qb, alt_a)] {
            let (state, dgid) = mig(q)?;
            ensure!(
                state == MigState::Migrated && dgid == Gid::from(to),
                "{who}'s QP is {state:?} with its path to {}, not MIGRATED to {to}",
                dgid.to_sysfs_string()
            );
        }
        let deadline = Instant::now() + STEP_TIMEOUT;
        let want = AsyncEvent::PathMig {
            qp_num: qb.qp_num(),
        };
        while !events.lock().unwrap().contains(&want) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        b.dev.unregister_event_handler(handler);
        ensure!(
            events.lock().unwrap().contains(&want),
            "B raised no PATH_MIG"
        );
        let (qpn_a, qpn_b) = (qa.qp_num(), qb.qp_num());
        qa.destroy()?;
        qb.destroy()?;
        Ok(format!(
            "QPs 0x{qpn_a:06x} (A) and 0x{qpn_b:06x} (B) loaded {alt_a} <-> {alt_b} as their alternate path (REARM); the first WRITE and its ACK on {} <-> {} carried MigReq 0 and armed both; A migrated on request, and its second WRITE left from {alt_a} with MigReq 1: B, seeing MigReq on its armed alternate path, moved there too (IBV_EVENT_PATH_MIG) and acknowledged from {alt_b}. Both QPs are MIGRATED on the new path, both WRITEs are in B's memory.",
            a.ip, b.ip
        ))
    }
}
