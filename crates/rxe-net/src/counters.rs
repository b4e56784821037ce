//! The device's packet counters: what went out, what came in, and every
//! packet dropped, by reason (kernel rxe's style; names follow
//! `rdma statistic` for rxe where it has one: `sent_pkts`, `rcvd_pkts`,
//! `send_err`).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! net_counters {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// One counter of [`NetCounters`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum NetCounter {
            $( $(#[$doc])* $variant, )*
        }

        impl NetCounter {
            /// Every counter, in the order `snapshot` lists them.
            pub const ALL: &'static [NetCounter] = &[$(NetCounter::$variant,)*];

            /// The counter's name as `snapshot` reports it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(NetCounter::$variant => $name,)*
                }
            }
        }
    };
}

net_counters! {
    /// Packets handed to the kernel.
    SentPkts => "sent_pkts",
    /// Bytes of UDP payload handed to the kernel.
    SentBytes => "sent_bytes",
    /// Packets whose ICRC verified and that went to the engine.
    RcvdPkts => "rcvd_pkts",
    /// Bytes of UDP payload of those packets.
    RcvdBytes => "rcvd_bytes",
    /// Packets the kernel refused to send (an error other than "try later"),
    /// each dropped.
    SendErr => "send_err",
    /// Times a send found the socket buffer full; the packets stayed queued.
    SendDeferred => "send_deferred",
    /// Receive system calls that failed (other than "nothing there").
    RecvErr => "recv_err",
    /// Datagrams shorter than a BTH and an ICRC (16 bytes).
    RcvdTooShort => "rcvd_too_short",
    /// Datagrams larger than the receive buffer (the kernel truncated them).
    RcvdTruncated => "rcvd_truncated",
    /// Datagrams whose ICRC did not verify (for IPv4: no Identification
    /// makes it verify).
    RcvdBadIcrc => "rcvd_bad_icrc",
    /// Datagrams without a usable source address.
    RcvdNoAddress => "rcvd_no_address",
    /// IPv4 datagrams accepted with DF clear (only when the port allows it).
    RcvdIpv4NoDf => "rcvd_ipv4_without_df",
    /// Engine packets whose source GID index named no GID.
    SentNoSourceGid => "sent_no_source_gid",
    /// Engine packets whose destination GID is of another IP version than
    /// the source GID.
    SentFamilyMismatch => "sent_family_mismatch",
    /// Engine packets whose source GID is no address this port has a socket on.
    SentNoSocket => "sent_no_socket",
    /// Engine packets shorter than BTH + ICRC or longer than the buffer.
    SentBadLength => "sent_bad_length",
    /// Packets the pcap tap failed to write.
    TapErr => "tap_err",
    /// Messages of several packets sent with UDP GSO (`UDP_SEGMENT`).
    SentGsoMsgs => "sent_gso_msgs",
    /// Sockets that turned GSO off because the kernel refused it.
    GsoFallback => "gso_fallback",
    /// Received datagrams the kernel had coalesced (`UDP_GRO`), each split
    /// into its packets.
    RcvdGroDatagrams => "rcvd_gro_datagrams",
    /// Packets sent ECN-capable (ECT(0) in the IP header).
    SentEct => "sent_ect_pkts",
    /// CNPs sent (non-ECT, with the CNP DSCP).
    SentCnps => "sent_cnp_pkts",
    /// Received packets whose IP header said Congestion Experienced.
    RcvdCe => "rcvd_ce_pkts",
    /// The fault layer (`RXE_FAULTS`) dropped an intact packet.
    FaultDropped => "fault_dropped",
    /// The fault layer handed a packet to the engine twice.
    FaultDuplicated => "fault_duplicated",
    /// The fault layer held a packet back behind the next one.
    FaultReordered => "fault_reordered",
    /// Turns the driver thread took awake after traffic (`driver::SPIN`)
    /// instead of sleeping until the next packet woke it.
    DriverSpinTurns => "driver_spin_turns",
    /// Turns that left what the engine had to send (the answer to a
    /// request) for the busy poller's next post (`driver::Sends`).
    AnswersDeferred => "answers_deferred",
    /// Packets the driver thread's look took while a busy poller was at
    /// work: arrivals the poller missed (`driver::Sends::Look`).
    LookRcvdPkts => "look_rcvd_pkts",
}

/// The counters of one port, updated from any thread without locks.
#[derive(Debug)]
pub struct NetCounters {
    values: Box<[AtomicU64]>,
}

impl Default for NetCounters {
    fn default() -> Self {
        NetCounters {
            values: NetCounter::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl NetCounters {
    pub fn new() -> NetCounters {
        NetCounters::default()
    }

    fn slot(&self, c: NetCounter) -> &AtomicU64 {
        // ALL lists the variants in declaration order, so the discriminant
        // is the index.
        &self.values[c as usize]
    }

    pub fn inc(&self, c: NetCounter) {
        self.add(c, 1);
    }

    pub fn add(&self, c: NetCounter, n: u64) {
        // Relaxed: counters order nothing; readers want a recent value.
        self.slot(c).fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, c: NetCounter) -> u64 {
        self.slot(c).load(Ordering::Relaxed)
    }

    /// Every counter with its name, in a fixed order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        NetCounter::ALL
            .iter()
            .map(|&c| (c.name(), self.get(c)))
            .collect()
    }

    /// The sum of every drop counter (received and sent).
    pub fn drops(&self) -> u64 {
        use NetCounter::*;
        [
            SendErr,
            RcvdTooShort,
            RcvdTruncated,
            RcvdBadIcrc,
            RcvdNoAddress,
            SentNoSourceGid,
            SentFamilyMismatch,
            SentNoSocket,
            SentBadLength,
        ]
        .iter()
        .map(|&c| self.get(c))
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_indices_match() {
        let c = NetCounters::new();
        for (i, &k) in NetCounter::ALL.iter().enumerate() {
            assert_eq!(k as usize, i);
            c.add(k, i as u64 + 1);
        }
        let snap = c.snapshot();
        assert_eq!(snap.len(), NetCounter::ALL.len());
        let mut names: Vec<_> = snap.iter().map(|(n, _)| *n).collect();
        for n in &names {
            assert!(n
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch == '_' || ch.is_ascii_digit()));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NetCounter::ALL.len());
        assert_eq!(snap[0], ("sent_pkts", 1));
        assert_eq!(c.get(NetCounter::RcvdPkts), 3);
        assert!(c.drops() > 0);
    }
}
