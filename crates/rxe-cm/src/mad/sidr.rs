//! SIDR_REQ and SIDR_REP (attributes 0x0017, 0x0018; IBTA 12.11, not
//! checked against the text): Service ID Resolution, how a UD client
//! (udaddy, RDMA_PS_UDP) learns the QPN and Q_Key of a service. There is no
//! connection: one request, one reply, no RTU and no TimeWait.
//!
//! ```text
//! SIDR_REQ:  0 Request ID   4 P_Key (16) | reserved (16)   8 ServiceID (8)   16 PrivateData (216)
//! SIDR_REP:  0 Request ID   4 Status | AddInfoLen | reserved (16)
//!            8 QPN (24) | reserved   12 ServiceID (8)   20 Q_Key
//!           24 ClassPortInfo (72)   96 PrivateData (136)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const REQ_PRIVATE_DATA_LEN: usize = 216;
pub const REP_PRIVATE_DATA_LEN: usize = 136;
/// Bytes of the SIDR_REP's additional information (a ClassPortInfo when
/// the status is a redirect).
pub const REP_INFO_LEN: usize = 72;

cm_message! {
    /// A zero-copy view of a SIDR_REQ.
    SidrReq, name: "SIDR_REQ",
    fields: [
        request_id / set_request_id: u32 = ("Request ID", "request_id", 0, 32, "the sender's identifier of this request"),
        pkey / set_pkey: u16 = ("P_Key", "pkey", 32, 16, "partition the UD QP must be in"),
        resv_48 / set_resv_48: u16 = ("Reserved", "resv_48", 48, 16, "reserved"),
        service_id / set_service_id: u64 = ("ServiceID", "service_id", 64, 64, "the service to resolve"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 16, 216, "consumer data (the IP CM header first, for rdma_cm)"),
    ],
}

cm_message! {
    /// A zero-copy view of a SIDR_REP.
    SidrRep, name: "SIDR_REP",
    fields: [
        request_id / set_request_id: u32 = ("Request ID", "request_id", 0, 32, "the SIDR_REQ's Request ID"),
        status / set_status: u8 = ("Status", "sidr_status", 32, 8, "0 the QP is valid; else why not"),
        additional_info_length / set_additional_info_length: u8 = ("Additional Information Length", "additional_info_length", 40, 8, "bytes of the additional information that are meant"),
        resv_48 / set_resv_48: u16 = ("Reserved", "resv_48", 48, 16, "reserved"),
        qpn / set_qpn: u32 = ("QPN", "qpn", 64, 24, "the service's UD QP"),
        resv_88 / set_resv_88: u8 = ("Reserved", "resv_88", 88, 8, "reserved"),
        service_id / set_service_id: u64 = ("ServiceID", "service_id", 96, 64, "the service resolved"),
        qkey / set_qkey: u32 = ("Q_Key", "qkey", 160, 32, "the Q_Key of the service's QP"),
    ],
    blobs: [
        class_port_info / class_port_info_mut = ("ClassPortInfo", "class_port_info", 24, 72, "redirection information (status 4)"),
        private_data / private_data_mut = ("PrivateData", "private_data", 96, 136, "consumer data"),
    ],
}

/// SIDR_REP status codes (IBTA 12.11.2, not checked against the text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidrStatus {
    /// The QPN and Q_Key are valid.
    Success,
    /// Nobody serves this ServiceID.
    ServiceIdNotSupported,
    /// The service refused.
    Rejected,
    NoQp,
    Redirect,
    UnsupportedClassVersion,
    Other(u8),
}

impl SidrStatus {
    pub const fn code(self) -> u8 {
        match self {
            SidrStatus::Success => 0,
            SidrStatus::ServiceIdNotSupported => 1,
            SidrStatus::Rejected => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedClassVersion => 5,
            SidrStatus::Other(c) => c,
        }
    }
    pub const fn from_code(c: u8) -> SidrStatus {
        match c {
            0 => SidrStatus::Success,
            1 => SidrStatus::ServiceIdNotSupported,
            2 => SidrStatus::Rejected,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedClassVersion,
            c => SidrStatus::Other(c),
        }
    }
}

/// A SIDR_REQ as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqRepr {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: PrivateData<REQ_PRIVATE_DATA_LEN>,
}

impl SidrReqRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &SidrReq<T>) -> Result<Self, MadError> {
        require_data("SIDR_REQ", v.buffer.as_ref())?;
        Ok(SidrReqRepr {
            request_id: v.request_id(),
            pkey: v.pkey(),
            service_id: v.service_id(),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrReq<T>) {
        clear_data(v.buffer.as_mut());
        v.set_request_id(self.request_id);
        v.set_pkey(self.pkey);
        v.set_service_id(self.service_id);
        let pd = v.private_data_mut();
        let n = pd.len().min(REQ_PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
    }
}

/// A SIDR_REP as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepRepr {
    pub request_id: u32,
    pub status: SidrStatus,
    pub additional_info_length: u8,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub class_port_info: [u8; REP_INFO_LEN],
    pub private_data: PrivateData<REP_PRIVATE_DATA_LEN>,
}

impl SidrRepRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &SidrRep<T>) -> Result<Self, MadError> {
        require_data("SIDR_REP", v.buffer.as_ref())?;
        let mut class_port_info = [0u8; REP_INFO_LEN];
        let c = v.class_port_info();
        let n = c.len().min(REP_INFO_LEN);
        class_port_info[..n].copy_from_slice(&c[..n]);
        Ok(SidrRepRepr {
            request_id: v.request_id(),
            status: SidrStatus::from_code(v.status()),
            additional_info_length: v.additional_info_length(),
            qpn: v.qpn(),
            service_id: v.service_id(),
            qkey: v.qkey(),
            class_port_info,
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrRep<T>) {
        clear_data(v.buffer.as_mut());
        v.set_request_id(self.request_id);
        v.set_status(self.status.code());
        v.set_additional_info_length(self.additional_info_length);
        v.set_qpn(self.qpn & 0xff_ffff);
        v.set_service_id(self.service_id);
        v.set_qkey(self.qkey);
        let c = v.class_port_info_mut();
        let n = c.len().min(REP_INFO_LEN);
        c[..n].copy_from_slice(&self.class_port_info[..n]);
        let pd = v.private_data_mut();
        let n = pd.len().min(REP_PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::field::{assert_fields_isolated, assert_layout};
    use super::*;

    #[test]
    fn layout() {
        assert_layout::<SidrReq<&[u8]>>();
        assert_fields_isolated::<SidrReq<&[u8]>>();
        assert_layout::<SidrRep<&[u8]>>();
        assert_fields_isolated::<SidrRep<&[u8]>>();
    }
}
