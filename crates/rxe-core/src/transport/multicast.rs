//! The port's multicast groups: which UD QPs are attached to which
//! multicast GID (`ibv_attach_mcast`), and the rules for attaching.
//!
//! A packet for destination QPN 0xFFFFFF is a multicast packet: in a UD
//! BTH that QPN names every QP attached to the group its GRH's DGID names
//! (IBTA 10.5, multicast; section not checked against the text); on RoCEv2
//! the DGID is the IP destination.
//! The endpoint gives each attached QP its own copy, each checked as a
//! unicast datagram would be (state, P_Key, Q_Key).
//!
//! What makes an attach valid is the kernel's `ib_attach_mcast` and rxe's
//! `rxe_mcast.c` (behaviour only): the QP must be UD, the GID a multicast
//! address (an IPv6 multicast address, or an IPv4-mapped one whose IPv4
//! address is multicast), a QP attached to a group once (attaching again
//! is accepted and changes nothing: ibv_attach_mcast(3) says such a QP
//! still receives one copy), and the limits below. Detaching a QP
//! that is not attached is an error (EINVAL there).

use super::fast_map::FastMap;
use crate::wire::Gid;

/// The destination QPN of a multicast packet (the "permissive" QPN).
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// Groups a port holds at most (kernel rxe's `max_mcast_grp`).
pub const MAX_GROUPS: usize = 8192;
/// QPs attached to one group at most (kernel rxe's `max_mcast_qp_attach`).
pub const MAX_QPS_PER_GROUP: usize = 56;
/// Attachments over all groups at most (kernel rxe's
/// `max_total_mcast_qp_attach`).
pub const MAX_TOTAL_ATTACHES: usize = 0x7_0000;

/// Whether `gid` is a multicast GID: IPv6 multicast (ff00::/8, which is
/// also IBTA's multicast GID prefix, 4.1.1) or IPv4-mapped
/// (::ffff:a.b.c.d) with a.b.c.d in 224.0.0.0/4.
pub fn is_multicast_gid(gid: &Gid) -> bool {
    let b = gid.as_bytes();
    if gid.is_ipv4_mapped() {
        b[12] & 0xf0 == 0xe0
    } else {
        b[0] == 0xff
    }
}

/// Why an attach or a detach was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    #[error("not a multicast GID")]
    NotMulticast,
    #[error("QP {0:#x} is not attached to that group")]
    NotAttached(u32),
    #[error("{0}")]
    Limit(&'static str),
}

/// Multicast GID -> the QPNs attached to it, in the order they attached.
#[derive(Debug, Default)]
pub struct McastGroups {
    groups: FastMap<Gid, Vec<u32>>,
    total: usize,
}

impl McastGroups {
    pub fn new() -> McastGroups {
        McastGroups::default()
    }

    /// Attaches `qpn` to `mgid`; `Ok(true)` when it made a new group (the
    /// device then joins it on the host), `Ok(false)` otherwise.
    pub fn attach(&mut self, mgid: Gid, qpn: u32) -> Result<bool, McastError> {
        if !is_multicast_gid(&mgid) {
            return Err(McastError::NotMulticast);
        }
        let new_group = !self.groups.contains_key(&mgid);
        if new_group && self.groups.len() >= MAX_GROUPS {
            return Err(McastError::Limit("too many multicast groups"));
        }
        let members = self.groups.get(&mgid).map_or(&[][..], Vec::as_slice);
        if members.contains(&qpn) {
            return Ok(false);
        }
        if members.len() >= MAX_QPS_PER_GROUP {
            return Err(McastError::Limit("too many QPs attached to the group"));
        }
        if self.total >= MAX_TOTAL_ATTACHES {
            return Err(McastError::Limit("too many multicast attachments"));
        }
        self.groups.entry(mgid).or_default().push(qpn);
        self.total += 1;
        Ok(new_group)
    }

    /// Detaches `qpn` from `mgid`; `Ok(true)` when the group is now empty
    /// and gone (the device then leaves it on the host).
    pub fn detach(&mut self, mgid: Gid, qpn: u32) -> Result<bool, McastError> {
        if !is_multicast_gid(&mgid) {
            return Err(McastError::NotMulticast);
        }
        let members = self
            .groups
            .get_mut(&mgid)
            .ok_or(McastError::NotAttached(qpn))?;
        let at = members
            .iter()
            .position(|q| *q == qpn)
            .ok_or(McastError::NotAttached(qpn))?;
        members.remove(at);
        self.total -= 1;
        if members.is_empty() {
            self.groups.remove(&mgid);
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether `qpn` is attached to any group.
    pub fn is_attached(&self, qpn: u32) -> bool {
        self.groups.values().any(|m| m.contains(&qpn))
    }

    /// The groups `qpn` is attached to.
    pub fn groups_of(&self, qpn: u32) -> Vec<Gid> {
        self.groups
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect()
    }

    /// Takes the member list of `mgid` out of the table (empty if no such
    /// group) so the caller can deliver to each while it borrows the QPs;
    /// [`McastGroups::put_back`] returns it. No allocation per packet.
    pub(crate) fn take_members(&mut self, mgid: &Gid) -> Vec<u32> {
        self.groups
            .get_mut(mgid)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub(crate) fn put_back(&mut self, mgid: &Gid, members: Vec<u32>) {
        if let Some(m) = self.groups.get_mut(mgid) {
            *m = members;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> Gid {
        Gid::from(std::net::Ipv4Addr::from(a))
    }

    #[test]
    fn multicast_gids_are_ipv6_multicast_or_mapped_ipv4_multicast() {
        assert!(is_multicast_gid(&v4([239, 1, 2, 3])));
        assert!(is_multicast_gid(&v4([224, 0, 0, 1])));
        assert!(!is_multicast_gid(&v4([127, 0, 0, 1])));
        assert!(!is_multicast_gid(&v4([240, 0, 0, 1])));
        let mut ff0e = [0; 16];
        ff0e[0] = 0xff;
        ff0e[1] = 0x0e;
        assert!(is_multicast_gid(&Gid::from(ff0e)));
        let mut link_local = [0; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        assert!(!is_multicast_gid(&Gid::from(link_local)));
        assert!(!is_multicast_gid(&Gid::ZERO));
    }

    #[test]
    fn attach_and_detach_report_the_first_and_the_last_member() {
        let g = v4([239, 0, 0, 9]);
        let mut t = McastGroups::new();
        assert_eq!(t.attach(g, 0x11), Ok(true));
        assert_eq!(t.attach(g, 0x12), Ok(false));
        // Attaching again changes nothing.
        assert_eq!(t.attach(g, 0x11), Ok(false));
        assert!(t.is_attached(0x11));
        assert_eq!(t.groups_of(0x12), vec![g]);
        assert_eq!(t.detach(g, 0x11), Ok(false));
        assert_eq!(t.detach(g, 0x11), Err(McastError::NotAttached(0x11)));
        assert_eq!(t.detach(g, 0x12), Ok(true));
        assert!(!t.is_attached(0x12));
        assert_eq!(t.detach(g, 0x12), Err(McastError::NotAttached(0x12)));
    }

    #[test]
    fn unicast_gids_and_limits_are_refused() {
        let mut t = McastGroups::new();
        assert_eq!(
            t.attach(v4([10, 0, 0, 1]), 0x11),
            Err(McastError::NotMulticast)
        );
        assert_eq!(
            t.detach(v4([10, 0, 0, 1]), 0x11),
            Err(McastError::NotMulticast)
        );
        let g = v4([239, 0, 0, 1]);
        for q in 0..MAX_QPS_PER_GROUP as u32 {
            t.attach(g, 0x100 + q).unwrap();
        }
        assert!(matches!(t.attach(g, 0x11), Err(McastError::Limit(_))));
    }

    #[test]
    fn members_taken_for_delivery_come_back() {
        let g = v4([239, 0, 0, 2]);
        let mut t = McastGroups::new();
        t.attach(g, 0x11).unwrap();
        t.attach(g, 0x13).unwrap();
        let m = t.take_members(&g);
        assert_eq!(m, vec![0x11, 0x13]);
        t.put_back(&g, m);
        assert_eq!(t.take_members(&v4([239, 9, 9, 9])), Vec::<u32>::new());
        assert_eq!(t.detach(g, 0x13), Ok(false));
    }
}
