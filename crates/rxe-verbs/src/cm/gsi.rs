//! QP1, the general services interface of the device's port: a GSI QP
//! (QPN 1, Q_Key 0x80010000) with its own PD and CQ, receive buffers with
//! room for the GRH, and UD SEND_ONLY of whole 256-byte MADs.

use rxe_cm::mad::MAD_LEN;
use rxe_cm::{MadAddr, GSI_QKEY, GSI_QPN};
use rxe_core::transport::{
    AccessFlags, AddressVector, Psn, QpAttr, QpType, RecvWr, SendData, SendOp, SendWr, UdDest,
    WcStatus, WorkQueue,
};

use crate::connect::{init_attr, InitParams, ReadyParams};
use crate::cq::Cq;
use crate::device::{Device, PORT};
use crate::error::Result;
use crate::mr::Mr;
use crate::qp::{Qp, QpCap, QpInitAttr};

/// The GRH space in front of every UD receive (IBTA 11.4.1.1).
const GRH_LEN: usize = 40;
const SLOT: usize = GRH_LEN + MAD_LEN;
/// Receives kept posted: a burst of REQs from many peers (ucmatose -c 100
/// sends 100 at once) must not find QP1 without a receive, or the lost
/// ones wait a 4 s CM response timeout to be resent. 512, as Linux's MAD
/// layer posts on its QP1 (150 KB per device).
const RECV_SLOTS: usize = 512;
const SEND_DEPTH: u32 = 256;

/// Why a received MAD was not handed to the CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GsiDrop {
    /// A receive completed in error (flushed, or too long for the buffer).
    RecvError,
    /// Shorter than a MAD, or no GRH to read the sender from.
    Malformed,
}

/// A MAD received on QP1, or why one was dropped.
pub(crate) enum GsiRecv {
    Mad {
        from: MadAddr,
        /// Our GID index the MAD was sent to: the one to answer from.
        sgid_index: u8,
        mad: Box<[u8; MAD_LEN]>,
    },
    Dropped(GsiDrop),
}

pub(crate) struct Gsi {
    pub dev: Device,
    pub cq: Cq,
    pub qp: Qp,
    recv: Mr,
}

impl Gsi {
    /// Creates QP1 on `dev` and brings it to RTS with every receive posted.
    pub fn create(dev: &Device) -> Result<Gsi> {
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(SEND_DEPTH + RECV_SLOTS as u32)?;
        let qp = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Gsi,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: SEND_DEPTH,
                max_recv_wr: RECV_SLOTS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MAD_LEN as u32,
            },
            sq_sig_all: false,
        })?;
        // QP1 answers any P_Key of the table (the transport checks it); its
        // Q_Key is the well-known one.
        // QP1 has no port attribute: it is the port's own (IBTA 11.2.5.2).
        qp.modify(&QpAttr {
            port_num: None,
            ..init_attr(&InitParams::datagram(GSI_QKEY))
        })?;
        let ready = ReadyParams::Ud {
            sq_psn: Psn::new(0),
        };
        qp.modify(&ready.rtr_attr())?;
        qp.modify(&ready.rts_attr())?;
        let recv = pd.reg_mr_zeroed(SLOT * RECV_SLOTS, AccessFlags::LOCAL_WRITE)?;
        let g = Gsi {
            dev: dev.clone(),
            cq,
            qp,
            recv,
        };
        for slot in 0..RECV_SLOTS {
            g.post_recv(slot)?;
        }
        Ok(g)
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        self.qp.post_recv(RecvWr {
            wr_id: slot as u64,
            sg_list: [self.recv.sge(slot * SLOT, SLOT as u32)].into(),
        })
    }

    /// Sends one MAD to `to` from our GID `sgid_index`.
    pub fn send(&self, to: MadAddr, sgid_index: u8, mad: &[u8; MAD_LEN]) -> Result<()> {
        self.qp.post_send(SendWr {
            wr_id: 0,
            op: SendOp::Send,
            data: SendData::Inline(mad[..].into()),
            signaled: false,
            fence: false,
            solicited: false,
            ud: Some(UdDest {
                av: AddressVector {
                    dgid: to.gid,
                    sgid_index,
                    hop_limit: 64,
                    ..AddressVector::default()
                },
                remote_qpn: to.qpn,
                remote_qkey: GSI_QKEY,
            }),
        })
    }

    /// Takes every completion of QP1 and reposts the receive buffers.
    pub fn poll(&self, out: &mut Vec<GsiRecv>) -> Result<()> {
        while let Some(wc) = self.cq.take_one()? {
            if wc.queue == WorkQueue::Send {
                continue;
            }
            let slot = wc.wr_id as usize;
            if slot >= RECV_SLOTS {
                continue;
            }
            out.push(self.read_slot(slot, &wc));
            if wc.status != WcStatus::WrFlushErr {
                self.post_recv(slot)?;
            }
        }
        Ok(())
    }

    fn read_slot(&self, slot: usize, wc: &rxe_core::transport::WorkCompletion) -> GsiRecv {
        if wc.status != WcStatus::Success {
            return GsiRecv::Dropped(GsiDrop::RecvError);
        }
        let mut buf = [0u8; SLOT];
        if self.recv.read(slot * SLOT, &mut buf).is_err() || (wc.byte_len as usize) < SLOT {
            return GsiRecv::Dropped(GsiDrop::Malformed);
        }
        let Ok(ah) = crate::ah::ah_attr_from_wc(&self.dev, PORT, wc, &buf[..GRH_LEN]) else {
            return GsiRecv::Dropped(GsiDrop::Malformed);
        };
        let mut mad = Box::new([0u8; MAD_LEN]);
        mad.copy_from_slice(&buf[GRH_LEN..]);
        GsiRecv::Mad {
            from: MadAddr {
                gid: ah.dgid,
                qpn: if wc.src_qp == 0 { GSI_QPN } else { wc.src_qp },
            },
            sgid_index: ah.sgid_index,
            mad,
        }
    }
}
