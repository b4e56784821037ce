//! UD multicast through the CM (`rdma_join_multicast`,
//! `rdma_leave_multicast`), as the kernel's rdma_cm does it on RoCE: there
//! is no subnet administrator to ask, so a join is local. The group's IP
//! address becomes its MGID (IPv4-mapped for IPv4), the ID's UD QP is
//! attached to it (unless the join is send-only), the device joins the IP
//! group on the host (IGMP/MLD, [`crate::Qp::attach_mcast`]), and
//! `MulticastJoin` gives what a sender needs: an address vector to the
//! group, QPN 0xFFFFFF and the port space's Q_Key.
//!
//! Facts from the kernel's `cma_iboe_join_multicast` (behaviour only): a
//! RoCE group's hop limit is 64 (IPv6's default), its traffic class the
//! ID's ToS; the Q_Key is the ID's (RDMA_UDP_QKEY for `RDMA_PS_UDP`). That
//! code refuses IPv6 groups on RoCEv2 (ENOTSUPP); rxe accepts them, since
//! an IPv6 multicast address is a valid MGID as it stands.

use std::net::IpAddr;

use rxe_core::transport::{AddressVector, MULTICAST_QPN};

use super::channel::{RdmaCmEvent, UdPeer};
use super::error::CmApiError;
use super::id::{CmId, RDMA_UDP_QKEY};
use super::resolve::DEFAULT_HOP_LIMIT;
use crate::cm::PortSpace;
use rxe_core::Gid;

/// One group an ID has joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Joined {
    pub group: IpAddr,
    /// Whether the ID's QP was attached by the join (and is detached by
    /// the leave); a send-only join (librdmacm's
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`) attaches none.
    pub attached: bool,
}

impl CmId {
    /// `rdma_join_multicast` (`send_only`: `rdma_join_multicast_ex` with
    /// the send-only full member flag). The ID must be bound to a device
    /// (`bind_addr` or `resolve_addr`) and of `RDMA_PS_UDP`; its QP, if it
    /// has one, is attached now. `MulticastJoin` follows.
    pub fn join_multicast(&self, group: IpAddr, send_only: bool) -> Result<(), CmApiError> {
        if self.port_space() != PortSpace::Udp {
            return Err(CmApiError::Unsupported(
                "multicast on a port space other than RDMA_PS_UDP",
            ));
        }
        if !group.is_multicast() {
            return Err(CmApiError::NotMulticast(group));
        }
        if self.device().is_none() {
            return Err(CmApiError::NotReady("bind_addr or resolve_addr"));
        }
        let mgid = Gid::from(group);
        let (qp, tos, sgid_index) = {
            let st = self.lock();
            if st.mcast.iter().any(|j| j.group == group) {
                return Err(CmApiError::AlreadyJoined(group));
            }
            (st.qp.clone(), st.tos, st.sgid_index)
        };
        let attached = match qp.filter(|_| !send_only) {
            Some(qp) => {
                qp.attach_mcast(mgid)?;
                true
            }
            None => false,
        };
        self.lock().mcast.push(Joined { group, attached });
        let av = AddressVector {
            dgid: mgid,
            sgid_index,
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: tos.unwrap_or(0),
            ..AddressVector::default()
        };
        self.push(RdmaCmEvent::MulticastJoin {
            id: self.clone(),
            group,
            av,
            ud: UdPeer {
                qp_num: MULTICAST_QPN,
                qkey: RDMA_UDP_QKEY,
            },
        });
        Ok(())
    }

    /// `rdma_leave_multicast`: detaches the ID's QP from the group (if the
    /// join attached it) and forgets the group; the device leaves it on
    /// the host with its last member.
    pub fn leave_multicast(&self, group: IpAddr) -> Result<(), CmApiError> {
        let (joined, qp) = {
            let mut st = self.lock();
            let at = st
                .mcast
                .iter()
                .position(|j| j.group == group)
                .ok_or(CmApiError::NotJoined(group))?;
            (st.mcast.remove(at), st.qp.clone())
        };
        if let (true, Some(qp)) = (joined.attached, qp) {
            qp.detach_mcast(Gid::from(group))?;
        }
        Ok(())
    }

    /// The groups the ID has joined, in order.
    pub fn multicast_groups(&self) -> Vec<IpAddr> {
        self.lock().mcast.iter().map(|j| j.group).collect()
    }

    /// Leaves every group (`rdma_destroy_id`), detaching the QP where the
    /// join attached it; errors are only logged, the ID is going away.
    pub(crate) fn leave_all_multicast(&self) {
        for group in self.multicast_groups() {
            if let Err(e) = self.leave_multicast(group) {
                tracing::debug!(%group, error = %e, "leaving a multicast group at destroy");
            }
        }
    }
}
