//! Address handles (`ibv_create_ah`, `ibv_create_ah_from_wc`): where a UD
//! send goes. On RoCEv2 the address is a GID (an IP address) and the GRH
//! fields become the IP header's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rxe_core::transport::{AddressVector, UdDest, WorkCompletion};
use rxe_core::Gid;

use crate::device::PORT;
use crate::error::{ObjectKind, Result, VerbsError};
use crate::pd::Pd;

/// `struct ibv_ah_attr` with its GRH, which RoCE always needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    pub dgid: Gid,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
    pub port_num: u8,
}

/// An address handle. Clones share it; one AH may serve many UD QPs.
#[derive(Clone)]
pub struct Ah {
    pd: Pd,
    av: AddressVector,
    destroyed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah")
            .field("dgid", &self.av.dgid.to_ip())
            .field("sgid_index", &self.av.sgid_index)
            .finish()
    }
}

impl Pd {
    /// `ibv_create_ah`. The source GID must exist and be of the same IP
    /// family as the destination.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        self.check_live()?;
        if attr.port_num != PORT {
            return Err(VerbsError::NoSuchPort(attr.port_num));
        }
        if attr.flow_label > rxe_core::transport::MAX_FLOW_LABEL
            || attr.sl > rxe_core::transport::MAX_SL
        {
            return Err(VerbsError::InvalidArgument(
                "flow label is 20 bits and SL 4 bits".into(),
            ));
        }
        let mut e = self.dev.lock();
        let sgid = e
            .gid(attr.sgid_index)
            .ok_or(VerbsError::NoSuchGid(attr.sgid_index))?;
        if sgid.to_ip().is_ipv4() != attr.dgid.to_ip().is_ipv4() {
            return Err(VerbsError::InvalidArgument(
                "source and destination GIDs are of different IP families".into(),
            ));
        }
        let max = self.dev.max().max_ah;
        if e.counts.ah >= max {
            return Err(VerbsError::LimitReached {
                kind: ObjectKind::Ah,
                max,
            });
        }
        e.counts.ah += 1;
        self.shared.users.acquire();
        Ok(Ah {
            pd: self.clone(),
            av: AddressVector {
                dgid: attr.dgid,
                sgid_index: attr.sgid_index,
                hop_limit: attr.hop_limit,
                traffic_class: attr.traffic_class,
                flow_label: attr.flow_label,
                sl: attr.sl,
                src_port: None,
            },
            destroyed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// `ibv_create_ah_from_wc`: an AH that answers the sender of a UD
    /// receive, from the network header in the first 40 bytes of its
    /// buffer (`grh`).
    pub fn create_ah_from_wc(&self, port_num: u8, wc: &WorkCompletion, grh: &[u8]) -> Result<Ah> {
        let attr = ah_attr_from_wc(&self.device(), port_num, wc, grh)?;
        self.create_ah(&attr)
    }
}

/// `ibv_init_ah_from_wc`: the AH attributes that answer a UD receive. The
/// GRH space holds, for IPv4, 20 zero bytes then the IPv4 header; for
/// IPv6 the IPv6 header (RoCEv2, IBTA Annex A17.4.5.1).
pub fn ah_attr_from_wc(
    dev: &crate::Device,
    port_num: u8,
    wc: &WorkCompletion,
    grh: &[u8],
) -> Result<AhAttr> {
    if !wc.grh || grh.len() < rxe_core::wire::grh::HEADER_LEN {
        return Err(VerbsError::InvalidArgument(
            "the completion has no GRH to answer".into(),
        ));
    }
    let (src, dst, tclass, flow) = if grh[20] >> 4 == 4 && grh[..20].iter().all(|b| *b == 0) {
        let h = &grh[20..40];
        let ip = |o: usize| std::net::Ipv4Addr::new(h[o], h[o + 1], h[o + 2], h[o + 3]);
        (Gid::from(ip(12)), Gid::from(ip(16)), h[1], 0)
    } else if grh[0] >> 4 == 6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&grh[8..24]);
        d.copy_from_slice(&grh[24..40]);
        let tc = (grh[0] & 0x0f) << 4 | grh[1] >> 4;
        let flow = u32::from(grh[1] & 0x0f) << 16 | u32::from(grh[2]) << 8 | u32::from(grh[3]);
        (Gid::from(s), Gid::from(d), tc, flow)
    } else {
        return Err(VerbsError::InvalidArgument(
            "the GRH space holds neither an IPv4 nor an IPv6 header".into(),
        ));
    };
    let (_, sgid_index) = dev.find_gid(&dst).ok_or_else(|| {
        VerbsError::InvalidArgument("the packet was not sent to this device".into())
    })?;
    Ok(AhAttr {
        dgid: src,
        sgid_index,
        // libibverbs answers with the largest hop limit.
        hop_limit: 0xff,
        traffic_class: tclass,
        flow_label: flow,
        sl: wc.sl,
        port_num,
    })
}

impl Ah {
    /// The destination of a UD send to QP `remote_qpn` with `remote_qkey`
    /// (a Q_Key with the high bit set means the sending QP's own).
    pub fn ud_dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            av: self.av,
            remote_qpn,
            remote_qkey,
        }
    }

    pub fn address_vector(&self) -> AddressVector {
        self.av
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_destroy_ah`. Sends already posted with it are unaffected (they
    /// carry a copy of the address).
    pub fn destroy(&self) -> Result<()> {
        self.pd.dev.check_live()?;
        let mut e = self.pd.dev.lock();
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Err(VerbsError::Destroyed(ObjectKind::Ah));
        }
        e.counts.ah -= 1;
        self.pd.shared.users.release();
        Ok(())
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }
}
