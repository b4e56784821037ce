//! REP, ConnectReply (attribute 0x0013; IBTA 12.6.8, not checked against
//! the text): the passive side accepts a REQ, with its own QP number,
//! starting PSN and RC parameters, then 196 bytes of private data.
//!
//! ```text
//!   0 Local Communication ID          4 Remote Communication ID
//!   8 Local Q_Key                    12 Local QPN (24) | reserved
//!  16 Local EECN (24) | reserved     20 Starting PSN (24) | reserved
//!  24 Responder Resources | Initiator Depth | Target ACK Delay (5) Failover (2) E2E FC (1) | RNR Retry (3) SRQ (1) resv (4)
//!  28 Local CA GUID (8)              36 PrivateData (196)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const PRIVATE_DATA_LEN: usize = 196;

cm_message! {
    /// A zero-copy view of a REP (the 232 bytes after the MAD header).
    Rep, name: "REP",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's (passive side's) identifier"),
        remote_comm_id / set_remote_comm_id: u32 = ("Remote Communication ID", "remote_comm_id", 32, 32, "the REQ's Local Communication ID"),
        local_qkey / set_local_qkey: u32 = ("Local Q_Key", "local_qkey", 64, 32, "Q_Key of the sender's QP (RD only)"),
        local_qpn / set_local_qpn: u32 = ("Local QPN", "local_qpn", 96, 24, "the sender's QP number"),
        resv_120 / set_resv_120: u8 = ("Reserved", "resv_120", 120, 8, "reserved"),
        local_eecn / set_local_eecn: u32 = ("Local EE Context Number", "local_eecn", 128, 24, "the sender's EE context (RD only)"),
        resv_152 / set_resv_152: u8 = ("Reserved", "resv_152", 152, 8, "reserved"),
        starting_psn / set_starting_psn: u32 = ("Starting PSN", "starting_psn", 160, 24, "first PSN the sender's QP sends"),
        resv_184 / set_resv_184: u8 = ("Reserved", "resv_184", 184, 8, "reserved"),
        responder_resources / set_responder_resources: u8 = ("Responder Resources", "responder_resources", 192, 8, "RDMA READ/atomics the sender accepts at once"),
        initiator_depth / set_initiator_depth: u8 = ("Initiator Depth", "initiator_depth", 200, 8, "RDMA READ/atomics the sender issues at once"),
        target_ack_delay / set_target_ack_delay: u8 = ("Target ACK Delay", "target_ack_delay", 208, 5, "the sender's CA ACK delay: 4.096 us x 2^value"),
        failover_accepted / set_failover_accepted: u8 = ("Failover Accepted", "failover_accepted", 213, 2, "0 alternate path accepted, 1 rejected, 2 unsupported"),
        end_to_end_flow_control / set_end_to_end_flow_control: u8 = ("End-to-End Flow Control", "end_to_end_flow_control", 215, 1, "the sender generates end-to-end credits"),
        rnr_retry_count / set_rnr_retry_count: u8 = ("RNR Retry Count", "rnr_retry_count", 216, 3, "retries after an RNR NAK the REQ's sender sends"),
        srq / set_srq: u8 = ("SRQ", "srq", 219, 1, "the sender's QP uses a shared receive queue"),
        resv_220 / set_resv_220: u8 = ("Reserved", "resv_220", 220, 4, "reserved"),
        local_ca_guid / set_local_ca_guid: u64 = ("Local CA GUID", "local_ca_guid", 224, 64, "the sender's channel adapter GUID"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 36, 196, "consumer data"),
    ],
}

/// A REP as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl RepRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &Rep<T>) -> Result<Self, MadError> {
        require_data("REP", v.buffer.as_ref())?;
        Ok(RepRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            local_eecn: v.local_eecn(),
            starting_psn: v.starting_psn(),
            responder_resources: v.responder_resources(),
            initiator_depth: v.initiator_depth(),
            target_ack_delay: v.target_ack_delay(),
            failover_accepted: v.failover_accepted(),
            end_to_end_flow_control: v.end_to_end_flow_control() != 0,
            rnr_retry_count: v.rnr_retry_count(),
            srq: v.srq() != 0,
            local_ca_guid: v.local_ca_guid(),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    /// Writes the REP (reserved bits zero, values truncated to their widths).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rep<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn & 0xff_ffff);
        v.set_local_eecn(self.local_eecn & 0xff_ffff);
        v.set_starting_psn(self.starting_psn & 0xff_ffff);
        v.set_responder_resources(self.responder_resources);
        v.set_initiator_depth(self.initiator_depth);
        v.set_target_ack_delay(self.target_ack_delay & 0x1f);
        v.set_failover_accepted(self.failover_accepted & 0x3);
        v.set_end_to_end_flow_control(u8::from(self.end_to_end_flow_control));
        v.set_rnr_retry_count(self.rnr_retry_count & 0x7);
        v.set_srq(u8::from(self.srq));
        v.set_local_ca_guid(self.local_ca_guid);
        let pd = v.private_data_mut();
        let n = pd.len().min(PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::field::{assert_fields_isolated, assert_layout};
    use super::*;

    #[test]
    fn layout() {
        assert_layout::<Rep<&[u8]>>();
        assert_fields_isolated::<Rep<&[u8]>>();
    }
}
