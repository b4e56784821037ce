//! REQ, ConnectRequest (attribute 0x0010; IBTA 12.6.5, not checked against
//! the text): the active side asks for a connection. It carries the
//! active QP's number and starting PSN, the service asked for, the RC
//! parameters (responder resources, initiator depth, timeouts, retry
//! counts, path MTU) and the primary and alternate paths, then 92 bytes of
//! private data (for the RDMA IP CM: the addressing header and the user's
//! 56 bytes, see [`crate::ip_cm`]).
//!
//! Byte offsets count from the start of the message, after the MAD header:
//!
//! ```text
//!   0 Local Communication ID          4 reserved
//!   8 ServiceID (8)                  16 Local CA GUID (8)
//!  24 reserved                       28 Local Q_Key
//!  32 Local QPN (24) | Responder Resources (8)
//!  36 Local EECN (24) | Initiator Depth (8)
//!  40 Remote EECN (24) | Remote CM Response Timeout (5) TST (2) E2E FC (1)
//!  44 Starting PSN (24) | Local CM Response Timeout (5) Retry Count (3)
//!  48 P_Key (16) | Path MTU (4) RDC (1) RNR Retry (3) | Max CM Retries (4) SRQ (1) ExtTST (3)
//!  52 primary path (44 bytes)        96 alternate path (44 bytes)
//! 140 PrivateData (92)
//! ```
//!
//! A path is: Local Port LID (16), Remote Port LID (16), Local Port GID
//! (16 bytes), Remote Port GID (16 bytes), Flow Label (20) reserved (6)
//! Packet Rate (6), Traffic Class (8), Hop Limit (8), SL (4) Subnet Local
//! (1) reserved (3), Local ACK Timeout (5) reserved (3).

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::{MadError, DATA_LEN};
use rxe_core::Gid;

/// Private data bytes of a REQ.
pub const PRIVATE_DATA_LEN: usize = 92;
const PRIVATE_DATA_OFFSET: usize = DATA_LEN - PRIVATE_DATA_LEN;

cm_message! {
    /// A zero-copy view of a REQ (the 232 bytes after the MAD header).
    Req, name: "REQ",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's identifier of this connection"),
        resv_32 / set_resv_32: u32 = ("Reserved", "resv_32", 32, 32, "reserved"),
        service_id / set_service_id: u64 = ("ServiceID", "service_id", 64, 64, "the service asked for (the IP CM: port space and port)"),
        local_ca_guid / set_local_ca_guid: u64 = ("Local CA GUID", "local_ca_guid", 128, 64, "the sender's channel adapter GUID"),
        resv_192 / set_resv_192: u32 = ("Reserved", "resv_192", 192, 32, "reserved"),
        local_qkey / set_local_qkey: u32 = ("Local Q_Key", "local_qkey", 224, 32, "Q_Key of the sender's QP (RD only)"),
        local_qpn / set_local_qpn: u32 = ("Local QPN", "local_qpn", 256, 24, "the sender's QP number"),
        responder_resources / set_responder_resources: u8 = ("Responder Resources", "responder_resources", 280, 8, "RDMA READ/atomics the sender accepts at once"),
        local_eecn / set_local_eecn: u32 = ("Local EECN", "local_eecn", 288, 24, "the sender's EE context (RD only)"),
        initiator_depth / set_initiator_depth: u8 = ("Initiator Depth", "initiator_depth", 312, 8, "RDMA READ/atomics the sender issues at once"),
        remote_eecn / set_remote_eecn: u32 = ("Remote EECN", "remote_eecn", 320, 24, "the receiver's EE context (RD only)"),
        remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = ("Remote CM Response Timeout", "remote_cm_response_timeout", 344, 5, "time the receiver's CM takes to answer: 4.096 us x 2^value"),
        transport_service_type / set_transport_service_type: u8 = ("Transport Service Type", "transport_service_type", 349, 2, "0 RC, 1 UC, 2 RD"),
        end_to_end_flow_control / set_end_to_end_flow_control: u8 = ("End-to-End Flow Control", "end_to_end_flow_control", 351, 1, "the sender generates end-to-end credits"),
        starting_psn / set_starting_psn: u32 = ("Starting PSN", "starting_psn", 352, 24, "first PSN the sender's QP sends"),
        local_cm_response_timeout / set_local_cm_response_timeout: u8 = ("Local CM Response Timeout", "local_cm_response_timeout", 376, 5, "time the sender's CM takes to answer: 4.096 us x 2^value"),
        retry_count / set_retry_count: u8 = ("Retry Count", "retry_count", 381, 3, "transport retries on a timeout"),
        pkey / set_pkey: u16 = ("P_Key", "pkey", 384, 16, "partition of the connection"),
        path_mtu / set_path_mtu: u8 = ("Path Packet Payload MTU", "path_mtu", 400, 4, "1 256, 2 512, 3 1024, 4 2048, 5 4096"),
        rdc_exists / set_rdc_exists: u8 = ("RDC Exists", "rdc_exists", 404, 1, "an RD channel exists (RD only)"),
        rnr_retry_count / set_rnr_retry_count: u8 = ("RNR Retry Count", "rnr_retry_count", 405, 3, "retries after an RNR NAK the receiver sends; 7 is forever"),
        max_cm_retries / set_max_cm_retries: u8 = ("Max CM Retries", "max_cm_retries", 408, 4, "times a CM message is resent before giving up"),
        srq / set_srq: u8 = ("SRQ", "srq", 412, 1, "the sender's QP uses a shared receive queue"),
        extended_transport_type / set_extended_transport_type: u8 = ("Extended Transport Type", "extended_transport_type", 413, 3, "1 XRC when the TST is 3"),
        primary_local_lid / set_primary_local_lid: u16 = ("Primary Local Port LID", "primary_local_lid", 416, 16, "sender's LID; 0xFFFF (permissive) on RoCE"),
        primary_remote_lid / set_primary_remote_lid: u16 = ("Primary Remote Port LID", "primary_remote_lid", 432, 16, "receiver's LID; 0xFFFF on RoCE"),
        primary_local_gid / set_primary_local_gid: u128 = ("Primary Local Port GID", "primary_local_gid", 448, 128, "sender's GID"),
        primary_remote_gid / set_primary_remote_gid: u128 = ("Primary Remote Port GID", "primary_remote_gid", 576, 128, "receiver's GID"),
        primary_flow_label / set_primary_flow_label: u32 = ("Primary Flow Label", "primary_flow_label", 704, 20, "GRH flow label of the path"),
        resv_724 / set_resv_724: u8 = ("Reserved", "resv_724", 724, 6, "reserved"),
        primary_packet_rate / set_primary_packet_rate: u8 = ("Primary Packet Rate", "primary_packet_rate", 730, 6, "static rate of the path (IBTA rate code)"),
        primary_traffic_class / set_primary_traffic_class: u8 = ("Primary Traffic Class", "primary_traffic_class", 736, 8, "GRH traffic class"),
        primary_hop_limit / set_primary_hop_limit: u8 = ("Primary Hop Limit", "primary_hop_limit", 744, 8, "GRH hop limit"),
        primary_sl / set_primary_sl: u8 = ("Primary SL", "primary_sl", 752, 4, "service level"),
        primary_subnet_local / set_primary_subnet_local: u8 = ("Primary Subnet Local", "primary_subnet_local", 756, 1, "1: the path stays in the subnet (no GRH needed)"),
        resv_757 / set_resv_757: u8 = ("Reserved", "resv_757", 757, 3, "reserved"),
        primary_local_ack_timeout / set_primary_local_ack_timeout: u8 = ("Primary Local ACK Timeout", "primary_local_ack_timeout", 760, 5, "transport ACK timeout: 4.096 us x 2^value"),
        resv_765 / set_resv_765: u8 = ("Reserved", "resv_765", 765, 3, "reserved"),
        alternate_local_lid / set_alternate_local_lid: u16 = ("Alternate Local Port LID", "alternate_local_lid", 768, 16, "alternate path: sender's LID"),
        alternate_remote_lid / set_alternate_remote_lid: u16 = ("Alternate Remote Port LID", "alternate_remote_lid", 784, 16, "alternate path: receiver's LID"),
        alternate_local_gid / set_alternate_local_gid: u128 = ("Alternate Local Port GID", "alternate_local_gid", 800, 128, "alternate path: sender's GID"),
        alternate_remote_gid / set_alternate_remote_gid: u128 = ("Alternate Remote Port GID", "alternate_remote_gid", 928, 128, "alternate path: receiver's GID"),
        alternate_flow_label / set_alternate_flow_label: u32 = ("Alternate Flow Label", "alternate_flow_label", 1056, 20, "alternate path: flow label"),
        resv_1076 / set_resv_1076: u8 = ("Reserved", "resv_1076", 1076, 6, "reserved"),
        alternate_packet_rate / set_alternate_packet_rate: u8 = ("Alternate Packet Rate", "alternate_packet_rate", 1082, 6, "alternate path: static rate"),
        alternate_traffic_class / set_alternate_traffic_class: u8 = ("Alternate Traffic Class", "alternate_traffic_class", 1088, 8, "alternate path: traffic class"),
        alternate_hop_limit / set_alternate_hop_limit: u8 = ("Alternate Hop Limit", "alternate_hop_limit", 1096, 8, "alternate path: hop limit"),
        alternate_sl / set_alternate_sl: u8 = ("Alternate SL", "alternate_sl", 1104, 4, "alternate path: service level"),
        alternate_subnet_local / set_alternate_subnet_local: u8 = ("Alternate Subnet Local", "alternate_subnet_local", 1108, 1, "alternate path: stays in the subnet"),
        resv_1109 / set_resv_1109: u8 = ("Reserved", "resv_1109", 1109, 3, "reserved"),
        alternate_local_ack_timeout / set_alternate_local_ack_timeout: u8 = ("Alternate Local ACK Timeout", "alternate_local_ack_timeout", 1112, 5, "alternate path: ACK timeout"),
        resv_1117 / set_resv_1117: u8 = ("Reserved", "resv_1117", 1117, 3, "reserved"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 140, 92, "consumer data (the IP CM header first, for rdma_cm)"),
    ],
}

/// One path of a REQ (primary or alternate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathRepr {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: Gid,
    pub remote_gid: Gid,
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits, an IBTA rate code.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits: 4.096 us x 2^value.
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Whether the path is given at all (an absent alternate path is all zero).
    pub fn is_present(&self) -> bool {
        *self != PathRepr::default()
    }
}

/// A REQ as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqRepr {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: [`TST_RC`], [`TST_UC`], [`TST_RD`] (3 with an extended type).
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits: the IBTA MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    pub primary_path: PathRepr,
    pub alternate_path: PathRepr,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

/// Transport Service Type codes of the REQ (IBTA 12.6.5, not checked against the text).
pub const TST_RC: u8 = 0;
pub const TST_UC: u8 = 1;
pub const TST_RD: u8 = 2;

macro_rules! read_path {
    ($v:expr, $lid_l:ident, $lid_r:ident, $gid_l:ident, $gid_r:ident, $fl:ident, $rate:ident, $tc:ident, $hl:ident, $sl:ident, $sub:ident, $ack:ident) => {
        PathRepr {
            local_lid: $v.$lid_l(),
            remote_lid: $v.$lid_r(),
            local_gid: Gid::from_bytes($v.$gid_l().to_be_bytes()),
            remote_gid: Gid::from_bytes($v.$gid_r().to_be_bytes()),
            flow_label: $v.$fl(),
            packet_rate: $v.$rate(),
            traffic_class: $v.$tc(),
            hop_limit: $v.$hl(),
            sl: $v.$sl(),
            subnet_local: $v.$sub() != 0,
            local_ack_timeout: $v.$ack(),
        }
    };
}

macro_rules! write_path {
    ($v:expr, $p:expr, $lid_l:ident, $lid_r:ident, $gid_l:ident, $gid_r:ident, $fl:ident, $rate:ident, $tc:ident, $hl:ident, $sl:ident, $sub:ident, $ack:ident) => {
        $v.$lid_l($p.local_lid);
        $v.$lid_r($p.remote_lid);
        $v.$gid_l(u128::from_be_bytes(*$p.local_gid.as_bytes()));
        $v.$gid_r(u128::from_be_bytes(*$p.remote_gid.as_bytes()));
        $v.$fl($p.flow_label & 0xf_ffff);
        $v.$rate($p.packet_rate & 0x3f);
        $v.$tc($p.traffic_class);
        $v.$hl($p.hop_limit);
        $v.$sl($p.sl & 0xf);
        $v.$sub(u8::from($p.subnet_local));
        $v.$ack($p.local_ack_timeout & 0x1f);
    };
}

impl ReqRepr {
    /// Reads a REQ. Every field fits its width by construction, so only
    /// the length can fail; the values are checked by the state machine,
    /// which answers a bad one with the REJ reason the IBTA names.
    pub fn parse<T: AsRef<[u8]>>(v: &Req<T>) -> Result<Self, MadError> {
        require_data("REQ", v.buffer.as_ref())?;
        Ok(ReqRepr {
            local_comm_id: v.local_comm_id(),
            service_id: v.service_id(),
            local_ca_guid: v.local_ca_guid(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            responder_resources: v.responder_resources(),
            local_eecn: v.local_eecn(),
            initiator_depth: v.initiator_depth(),
            remote_eecn: v.remote_eecn(),
            remote_cm_response_timeout: v.remote_cm_response_timeout(),
            transport_service_type: v.transport_service_type(),
            end_to_end_flow_control: v.end_to_end_flow_control() != 0,
            starting_psn: v.starting_psn(),
            local_cm_response_timeout: v.local_cm_response_timeout(),
            retry_count: v.retry_count(),
            pkey: v.pkey(),
            path_mtu: v.path_mtu(),
            rdc_exists: v.rdc_exists() != 0,
            rnr_retry_count: v.rnr_retry_count(),
            max_cm_retries: v.max_cm_retries(),
            srq: v.srq() != 0,
            extended_transport_type: v.extended_transport_type(),
            primary_path: read_path!(
                v,
                primary_local_lid,
                primary_remote_lid,
                primary_local_gid,
                primary_remote_gid,
                primary_flow_label,
                primary_packet_rate,
                primary_traffic_class,
                primary_hop_limit,
                primary_sl,
                primary_subnet_local,
                primary_local_ack_timeout
            ),
            alternate_path: read_path!(
                v,
                alternate_local_lid,
                alternate_remote_lid,
                alternate_local_gid,
                alternate_remote_gid,
                alternate_flow_label,
                alternate_packet_rate,
                alternate_traffic_class,
                alternate_hop_limit,
                alternate_sl,
                alternate_subnet_local,
                alternate_local_ack_timeout
            ),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    /// Writes the REQ into `v` (232 bytes): reserved bits zero, values
    /// truncated to their fields' widths.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Req<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_service_id(self.service_id);
        v.set_local_ca_guid(self.local_ca_guid);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn & 0xff_ffff);
        v.set_responder_resources(self.responder_resources);
        v.set_local_eecn(self.local_eecn & 0xff_ffff);
        v.set_initiator_depth(self.initiator_depth);
        v.set_remote_eecn(self.remote_eecn & 0xff_ffff);
        v.set_remote_cm_response_timeout(self.remote_cm_response_timeout & 0x1f);
        v.set_transport_service_type(self.transport_service_type & 0x3);
        v.set_end_to_end_flow_control(u8::from(self.end_to_end_flow_control));
        v.set_starting_psn(self.starting_psn & 0xff_ffff);
        v.set_local_cm_response_timeout(self.local_cm_response_timeout & 0x1f);
        v.set_retry_count(self.retry_count & 0x7);
        v.set_pkey(self.pkey);
        v.set_path_mtu(self.path_mtu & 0xf);
        v.set_rdc_exists(u8::from(self.rdc_exists));
        v.set_rnr_retry_count(self.rnr_retry_count & 0x7);
        v.set_max_cm_retries(self.max_cm_retries & 0xf);
        v.set_srq(u8::from(self.srq));
        v.set_extended_transport_type(self.extended_transport_type & 0x7);
        write_path!(
            v,
            self.primary_path,
            set_primary_local_lid,
            set_primary_remote_lid,
            set_primary_local_gid,
            set_primary_remote_gid,
            set_primary_flow_label,
            set_primary_packet_rate,
            set_primary_traffic_class,
            set_primary_hop_limit,
            set_primary_sl,
            set_primary_subnet_local,
            set_primary_local_ack_timeout
        );
        write_path!(
            v,
            self.alternate_path,
            set_alternate_local_lid,
            set_alternate_remote_lid,
            set_alternate_local_gid,
            set_alternate_remote_gid,
            set_alternate_flow_label,
            set_alternate_packet_rate,
            set_alternate_traffic_class,
            set_alternate_hop_limit,
            set_alternate_sl,
            set_alternate_subnet_local,
            set_alternate_local_ack_timeout
        );
        let pd = v.private_data_mut();
        let n = pd.len().min(PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
        debug_assert_eq!(PRIVATE_DATA_OFFSET, 140);
    }
}

#[cfg(test)]
mod tests {
    use super::super::field::{assert_fields_isolated, assert_layout};
    use super::*;

    #[test]
    fn layout() {
        assert_layout::<Req<&[u8]>>();
        assert_fields_isolated::<Req<&[u8]>>();
    }
}
