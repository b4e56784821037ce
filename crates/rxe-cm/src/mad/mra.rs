//! MRA, Message Receipt Acknowledgement (attribute 0x0011; IBTA 12.6.6,
//! not checked against the text): "I have your REQ (or REP, or LAP) and
//! will answer, but later than you expect": the receiver extends its
//! timer by the Service Timeout.
//!
//! ```text
//!  0 Local Communication ID   4 Remote Communication ID
//!  8 Message MRAed (2) resv (6) | Service Timeout (5) resv (3)
//! 10 PrivateData (222)
//! ```

use super::field::{clear_data, cm_message, require_data};
use super::private_data::PrivateData;
use super::MadError;

pub const PRIVATE_DATA_LEN: usize = 222;

cm_message! {
    /// A zero-copy view of an MRA.
    Mra, name: "MRA",
    fields: [
        local_comm_id / set_local_comm_id: u32 = ("Local Communication ID", "local_comm_id", 0, 32, "the sender's identifier"),
        remote_comm_id / set_remote_comm_id: u32 = ("Remote Communication ID", "remote_comm_id", 32, 32, "the Local Communication ID of the message acknowledged"),
        message_mraed / set_message_mraed: u8 = ("Message MRAed", "message_mraed", 64, 2, "0 REQ, 1 REP, 2 LAP"),
        resv_66 / set_resv_66: u8 = ("Reserved", "resv_66", 66, 6, "reserved"),
        service_timeout / set_service_timeout: u8 = ("Service Timeout", "service_timeout", 72, 5, "extra time the sender needs: 4.096 us x 2^value"),
        resv_77 / set_resv_77: u8 = ("Reserved", "resv_77", 77, 3, "reserved"),
    ],
    blobs: [
        private_data / private_data_mut = ("PrivateData", "private_data", 10, 222, "consumer data"),
    ],
}

/// Which message an MRA acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageMraed {
    Req = 0,
    Rep = 1,
    Lap = 2,
}

/// An MRA as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MraRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MessageMraed,
    /// 5 bits.
    pub service_timeout: u8,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl MraRepr {
    /// Reads an MRA; the value 3 of Message MRAed is reserved and refused.
    pub fn parse<T: AsRef<[u8]>>(v: &Mra<T>) -> Result<Self, MadError> {
        require_data("MRA", v.buffer.as_ref())?;
        let message_mraed = match v.message_mraed() {
            0 => MessageMraed::Req,
            1 => MessageMraed::Rep,
            2 => MessageMraed::Lap,
            x => {
                return Err(MadError::BadField {
                    message: "MRA",
                    field: "Message MRAed",
                    value: x.into(),
                })
            }
        };
        Ok(MraRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_mraed,
            service_timeout: v.service_timeout(),
            private_data: PrivateData::copy_from(v.private_data()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Mra<T>) {
        clear_data(v.buffer.as_mut());
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_mraed(self.message_mraed as u8);
        v.set_service_timeout(self.service_timeout & 0x1f);
        let pd = v.private_data_mut();
        let n = pd.len().min(PRIVATE_DATA_LEN);
        pd[..n].copy_from_slice(&self.private_data.0[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::field::{assert_fields_isolated, assert_layout};
    use super::*;
    use crate::mad::DATA_LEN;

    #[test]
    fn layout() {
        assert_layout::<Mra<&[u8]>>();
        assert_fields_isolated::<Mra<&[u8]>>();
    }

    #[test]
    fn reserved_message_code_is_refused() {
        let mut b = [0u8; DATA_LEN];
        let mut v = Mra::new_checked(&mut b[..]).unwrap();
        v.set_message_mraed(3);
        let err = MraRepr::parse(&Mra::new_checked(&b[..]).unwrap()).unwrap_err();
        assert_eq!(
            err,
            MadError::BadField {
                message: "MRA",
                field: "Message MRAed",
                value: 3
            }
        );
    }
}
