//! RTU, ReadyToUse (attribute 0x0014; IBTA 12.6.9, not checked against the
//! text): the active side confirms the REP; the connection is established.
//!
//! ```text
//!  0 Local Communication ID   4 Remote Communication ID   8 PrivateData (224)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const PRIVATE_DATA_LEN: usize = 224;

cm_message! {
    /// A zero-copy view of an RTU.
    Rtu, name: "RTU",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's (active side's) identifier"),
        remote_comm_id / set_remote_comm_id: u32 = ("Remote Communication ID", "remote_comm_id", 32, 32, "the REP's Local Communication ID"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 8, 224, "consumer data"),
    ],
}

/// An RTU as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtuRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl RtuRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &Rtu<T>) -> Result<Self, MadError> {
        require_data("RTU", v.buffer.as_ref())?;
        Ok(RtuRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rtu<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
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
        assert_layout::<Rtu<&[u8]>>();
        assert_fields_isolated::<Rtu<&[u8]>>();
    }
}
