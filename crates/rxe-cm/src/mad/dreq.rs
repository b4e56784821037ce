//! DREQ, DisconnectRequest (attribute 0x0015; IBTA 12.6.10, not checked
//! against the text): either side ends an established connection.
//!
//! ```text
//!  0 Local Communication ID   4 Remote Communication ID
//!  8 Remote QPN/EECN (24) | reserved   12 PrivateData (220)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const PRIVATE_DATA_LEN: usize = 220;

cm_message! {
    /// A zero-copy view of a DREQ.
    Dreq, name: "DREQ",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's identifier"),
        remote_comm_id / set_remote_comm_id: u32 = ("Remote Communication ID", "remote_comm_id", 32, 32, "the receiver's identifier"),
        remote_qpn_eecn / set_remote_qpn_eecn: u32 = ("Remote QPN/EECN", "remote_qpn_eecn", 64, 24, "the receiver's QP (or EE context), as a check"),
        resv_88 / set_resv_88: u8 = ("Reserved", "resv_88", 88, 8, "reserved"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 12, 220, "consumer data"),
    ],
}

/// A DREQ as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DreqRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits.
    pub remote_qpn_eecn: u32,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl DreqRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &Dreq<T>) -> Result<Self, MadError> {
        require_data("DREQ", v.buffer.as_ref())?;
        Ok(DreqRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            remote_qpn_eecn: v.remote_qpn_eecn(),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Dreq<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_remote_qpn_eecn(self.remote_qpn_eecn & 0xff_ffff);
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
        assert_layout::<Dreq<&[u8]>>();
        assert_fields_isolated::<Dreq<&[u8]>>();
    }
}
