//! Conversions between the C structs and rxe's values: work requests,
//! work completions, QP attributes. Pure functions over values (the
//! callers read the C memory), unit-tested here.

use rxe_core::transport::{AltPath, Attr, Psn};
use rxe_verbs::{
    AccessFlags, AddressVector, AttrMask, InlineData, MigState, MwBind, PathMtu, QpAttr, QpCap,
    QpInfo, QpState, SendData, SendOp, SendWr, Sge, UdDest, WcOpcode, WorkCompletion,
};
use rxe_verbs_abi::consts::*;
use rxe_verbs_abi::*;

pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let opcode = match w.opcode {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::AtomicWrite => IBV_WC_ATOMIC_WRITE,
        WcOpcode::Flush => IBV_WC_FLUSH,
        // libibverbs has no REG_MR work request, so a C program never
        // sees this completion; the number is where the kernel's
        // ib_wc_opcode puts IB_WC_REG_MR (after IB_WC_ATOMIC_WRITE, 9;
        // not checked against the header).
        WcOpcode::RegMr => 10,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    };
    let mut flags = 0;
    let mut imm = 0;
    if w.grh {
        flags |= IBV_WC_GRH;
    }
    if let Some(i) = w.imm_data {
        flags |= IBV_WC_WITH_IMM;
        // imm_data is big-endian in memory (__be32).
        imm = i.to_be();
    }
    if let Some(r) = w.invalidated_rkey {
        flags |= IBV_WC_WITH_INV;
        imm = r;
    }
    ibv_wc {
        wr_id: w.wr_id,
        // rxe-core keeps libibverbs' order of ibv_wc_status.
        status: w.status as u32,
        opcode,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: w.pkey_index,
        slid: 0,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// The fields of one `ibv_send_wr` that a conversion needs, read by the
/// caller from C memory.
pub struct CSendWr<'a> {
    pub wr_id: u64,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub wr: [u64; 4],
    pub sges: &'a [ibv_sge],
    /// `IBV_WR_BIND_MW`: the bind, its `ibv_mw` and `ibv_mr` pointers
    /// resolved by the caller (`crate::mw::bind_of`); `None` if they are
    /// not live objects of ours.
    pub mw: Option<MwBind>,
}

/// Why a work request was refused before reaching the QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrError {
    /// Unknown or unsupported opcode (EINVAL, as kernel rxe's provider).
    Opcode,
    /// A UD send whose AH is not a live AH of ours.
    BadAh,
    /// A BIND_MW whose window or region is not a live one of ours.
    BadMw,
}

/// An `ibv_send_wr` as an rxe [`SendWr`]. `inline` gives the bytes of the
/// SGEs for `IBV_SEND_INLINE` (taken now, from application memory);
/// `ah` resolves `wr.ud.ah` for UD QPs (`None` for connected QPs).
pub fn send_wr_from_c(
    w: &CSendWr<'_>,
    ud: bool,
    inline: impl FnOnce(&[ibv_sge]) -> InlineData,
    ah: impl FnOnce(u64) -> Option<AddressVector>,
) -> Result<SendWr, WrError> {
    let rkey32 = |x: u64| x as u32;
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm {
            imm: u32::from_be(w.imm_data),
        },
        // invalidate_rkey is host order.
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { rkey: w.imm_data },
        IBV_WR_RDMA_WRITE => SendOp::RdmaWrite {
            remote_addr: w.wr[0],
            rkey: rkey32(w.wr[1]),
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm {
            remote_addr: w.wr[0],
            rkey: rkey32(w.wr[1]),
            imm: u32::from_be(w.imm_data),
        },
        IBV_WR_RDMA_READ => SendOp::RdmaRead {
            remote_addr: w.wr[0],
            rkey: rkey32(w.wr[1]),
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CmpSwap {
            remote_addr: w.wr[0],
            compare: w.wr[1],
            swap: w.wr[2],
            rkey: rkey32(w.wr[3]),
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr: w.wr[0],
            add: w.wr[1],
            rkey: rkey32(w.wr[3]),
        },
        // The 8 bytes come from the SGE (or inline).
        IBV_WR_ATOMIC_WRITE => SendOp::AtomicWrite {
            remote_addr: w.wr[0],
            rkey: rkey32(w.wr[1]),
        },
        IBV_WR_BIND_MW => SendOp::BindMw(w.mw.ok_or(WrError::BadMw)?),
        // invalidate_rkey is host order, in imm_data's place.
        IBV_WR_LOCAL_INV => SendOp::LocalInv { key: w.imm_data },
        _ => return Err(WrError::Opcode),
    };
    if op.is_local() {
        // Local operations carry no data (their SGEs are ignored) and no
        // destination.
        return Ok(SendWr {
            wr_id: w.wr_id,
            op,
            data: SendData::Sges(Vec::new()),
            signaled: w.send_flags & IBV_SEND_SIGNALED != 0,
            fence: w.send_flags & IBV_SEND_FENCE != 0,
            solicited: false,
            ud: None,
        });
    }
    // Inline applies to sends, writes and ATOMIC WRITE; READ and atomics
    // need their SGE as the place the answer lands.
    let data = if w.send_flags & IBV_SEND_INLINE != 0 && !op.writes_locally() {
        SendData::Inline(inline(w.sges))
    } else {
        let sge = |s: &ibv_sge| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
        match w.sges {
            [one] => SendData::Sge(sge(one)),
            list => SendData::Sges(list.iter().map(sge).collect()),
        }
    };
    let ud = if ud {
        let av = ah(w.wr[0]).ok_or(WrError::BadAh)?;
        Some(UdDest {
            av,
            remote_qpn: w.wr[1] as u32 & 0xff_ffff,
            remote_qkey: (w.wr[1] >> 32) as u32,
        })
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        data,
        signaled: w.send_flags & IBV_SEND_SIGNALED != 0,
        fence: w.send_flags & IBV_SEND_FENCE != 0,
        solicited: w.send_flags & IBV_SEND_SOLICITED != 0,
        ud,
    })
}

pub fn av_from_c(a: &ibv_ah_attr) -> AddressVector {
    AddressVector {
        dgid: a.grh.dgid.into(),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        src_port: None,
    }
}

pub fn av_to_c(av: &AddressVector, port: u8) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: av.dgid.into(),
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: av.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    }
}

/// `ibv_modify_qp`'s attributes and mask as rxe's. EINVAL for bits rxe
/// does not take (`IBV_QP_CAP`, `IBV_QP_RATE_LIMIT`, unknown), out of
/// range values, and an address without a GRH (RoCE needs one).
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: u32) -> Result<(QpAttr, AttrMask), i32> {
    let m = AttrMask::from_bits(mask).ok_or(libc::EINVAL)?;
    let mut q = QpAttr::default();
    let inval = libc::EINVAL;
    for attr in m.iter() {
        match attr {
            Attr::State => {
                q.qp_state = Some(
                    QpState::from_ibv(a.qp_state.try_into().map_err(|_| inval)?).ok_or(inval)?,
                )
            }
            Attr::CurState => {
                q.cur_qp_state = Some(
                    QpState::from_ibv(a.cur_qp_state.try_into().map_err(|_| inval)?)
                        .ok_or(inval)?,
                )
            }
            Attr::EnSqdAsyncNotify => q.en_sqd_async_notify = Some(a.en_sqd_async_notify != 0),
            Attr::AccessFlags => {
                let f = a.qp_access_flags as u32;
                if f & !0xf & !IBV_ACCESS_MW_BIND != 0 {
                    return Err(inval);
                }
                q.access_flags = Some(AccessFlags::from_bits_truncate(f & 0xf));
            }
            Attr::PkeyIndex => q.pkey_index = Some(a.pkey_index),
            Attr::Port => q.port_num = Some(a.port_num),
            Attr::Qkey => q.qkey = Some(a.qkey),
            Attr::Av => {
                if a.ah_attr.is_global == 0 {
                    return Err(inval);
                }
                q.av = Some(av_from_c(&a.ah_attr));
            }
            Attr::PathMtu => {
                q.path_mtu = Some(
                    PathMtu::from_ibv(a.path_mtu.try_into().map_err(|_| inval)?).ok_or(inval)?,
                )
            }
            Attr::Timeout => q.timeout = Some(a.timeout),
            Attr::RetryCnt => q.retry_cnt = Some(a.retry_cnt),
            Attr::RnrRetry => q.rnr_retry = Some(a.rnr_retry),
            Attr::RqPsn => q.rq_psn = Some(Psn::new(a.rq_psn & 0xff_ffff)),
            Attr::MaxRdAtomic => q.max_rd_atomic = Some(a.max_rd_atomic),
            Attr::AltPath => {
                if a.alt_ah_attr.is_global == 0 {
                    return Err(inval);
                }
                q.alt_path = Some(AltPath {
                    av: av_from_c(&a.alt_ah_attr),
                    pkey_index: a.alt_pkey_index,
                    port_num: a.alt_port_num,
                    timeout: a.alt_timeout,
                })
            }
            Attr::MinRnrTimer => q.min_rnr_timer = Some(a.min_rnr_timer),
            Attr::SqPsn => q.sq_psn = Some(Psn::new(a.sq_psn & 0xff_ffff)),
            Attr::MaxDestRdAtomic => q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic),
            Attr::PathMigState => {
                q.path_mig_state = Some(
                    MigState::from_ibv(a.path_mig_state.try_into().map_err(|_| inval)?)
                        .ok_or(inval)?,
                )
            }
            Attr::DestQpn => q.dest_qpn = Some(a.dest_qp_num),
        }
    }
    Ok((q, m))
}

pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_query_qp`'s attributes: every current value (unset ones 0).
pub fn qp_attr_to_c(i: &QpInfo) -> ibv_qp_attr {
    let a = &i.attr;
    let state = i.state.as_ibv() as u32;
    let av = |v: &Option<AddressVector>, port: u8| {
        v.as_ref().map(|v| av_to_c(v, port)).unwrap_or_default()
    };
    let port = a.port_num.unwrap_or(1);
    ibv_qp_attr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: a.path_mtu.map(|m| m.as_ibv() as u32).unwrap_or(0),
        path_mig_state: a.path_mig_state.map(|m| m.as_ibv() as u32).unwrap_or(0),
        qkey: a.qkey.unwrap_or(0),
        rq_psn: a.rq_psn.map(|p| p.value()).unwrap_or(0),
        sq_psn: a.sq_psn.map(|p| p.value()).unwrap_or(0),
        dest_qp_num: a.dest_qpn.unwrap_or(0),
        qp_access_flags: a.access_flags.map(|f| f.bits() as i32).unwrap_or(0),
        cap: cap_to_c(&i.cap),
        ah_attr: av(&a.av, port),
        alt_ah_attr: a
            .alt_path
            .as_ref()
            .map(|p| av_to_c(&p.av, p.port_num))
            .unwrap_or_default(),
        pkey_index: a.pkey_index.unwrap_or(0),
        alt_pkey_index: a.alt_path.map(|p| p.pkey_index).unwrap_or(0),
        en_sqd_async_notify: a.en_sqd_async_notify.map(u8::from).unwrap_or(0),
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic.unwrap_or(0),
        max_dest_rd_atomic: a.max_dest_rd_atomic.unwrap_or(0),
        min_rnr_timer: a.min_rnr_timer.unwrap_or(0),
        port_num: port,
        timeout: a.timeout.unwrap_or(0),
        retry_cnt: a.retry_cnt.unwrap_or(0),
        rnr_retry: a.rnr_retry.unwrap_or(0),
        alt_port_num: a.alt_path.map(|p| p.port_num).unwrap_or(0),
        alt_timeout: a.alt_path.map(|p| p.timeout).unwrap_or(0),
        rate_limit: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_verbs::{WcStatus, WorkQueue};

    #[test]
    fn completions_carry_big_endian_immediates_and_flags() {
        let mut w = WorkCompletion::new(
            7,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            0x12,
            WorkQueue::Recv,
        );
        w.imm_data = Some(0x0102_0304);
        w.byte_len = 64;
        w.grh = true;
        let c = wc_to_c(&w);
        assert_eq!(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(c.wc_flags, IBV_WC_GRH | IBV_WC_WITH_IMM);
        assert_eq!(c.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!((c.wr_id, c.byte_len, c.qp_num), (7, 64, 0x12));
        let e = WorkCompletion::new(1, WcStatus::RetryExcErr, WcOpcode::Send, 1, WorkQueue::Send);
        assert_eq!(wc_to_c(&e).status, 12, "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(
            wc_to_c(&WorkCompletion::new(
                1,
                WcStatus::WrFlushErr,
                WcOpcode::Send,
                1,
                WorkQueue::Send
            ))
            .status,
            5
        );
    }

    fn wr(opcode: u32, flags: u32, w: [u64; 4], sges: &[ibv_sge]) -> CSendWr<'_> {
        CSendWr {
            wr_id: 9,
            opcode,
            send_flags: flags,
            imm_data: u32::from_ne_bytes([0, 0, 0, 5]),
            wr: w,
            sges,
            mw: None,
        }
    }

    #[test]
    fn send_requests_map_their_opcodes_and_fields() {
        let sge = [ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 3,
        }];
        let no_ah = |_| None;
        let s = send_wr_from_c(
            &wr(
                IBV_WR_RDMA_WRITE_WITH_IMM,
                IBV_SEND_SIGNALED,
                [0xabc, 77, 0, 0],
                &sge,
            ),
            false,
            |_| InlineData::new(),
            no_ah,
        )
        .unwrap();
        assert_eq!(
            s.op,
            SendOp::RdmaWriteWithImm {
                remote_addr: 0xabc,
                rkey: 77,
                imm: 5
            }
        );
        assert!(s.signaled && !s.fence && !s.solicited);
        assert_eq!(
            s.data,
            SendData::Sges(vec![Sge {
                addr: 0x1000,
                length: 8,
                lkey: 3
            }])
        );
        let a = send_wr_from_c(
            &wr(IBV_WR_ATOMIC_CMP_AND_SWP, 0, [0x40, 1, 2, 99], &sge),
            false,
            |_| InlineData::new(),
            no_ah,
        )
        .unwrap();
        assert_eq!(
            a.op,
            SendOp::CmpSwap {
                remote_addr: 0x40,
                compare: 1,
                swap: 2,
                rkey: 99
            }
        );
        let f = send_wr_from_c(
            &wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 0, [0x40, 3, 0, 98], &sge),
            false,
            |_| InlineData::new(),
            no_ah,
        )
        .unwrap();
        assert_eq!(
            f.op,
            SendOp::FetchAdd {
                remote_addr: 0x40,
                add: 3,
                rkey: 98
            }
        );
        let i = send_wr_from_c(
            &wr(
                IBV_WR_SEND,
                IBV_SEND_INLINE | IBV_SEND_SOLICITED,
                [0; 4],
                &sge,
            ),
            false,
            |_| vec![1, 2].into(),
            no_ah,
        )
        .unwrap();
        assert_eq!(i.data, SendData::Inline(vec![1, 2].into()));
        assert!(i.solicited);
        // Inline is ignored for READ (the SGE is where the data lands).
        let r = send_wr_from_c(
            &wr(IBV_WR_RDMA_READ, IBV_SEND_INLINE, [1, 2, 0, 0], &sge),
            false,
            |_| vec![1].into(),
            no_ah,
        )
        .unwrap();
        assert!(matches!(r.data, SendData::Sge(_)));
        // BIND_MW needs its window and region resolved; LOCAL_INV takes
        // invalidate_rkey from imm_data's place; neither carries data.
        assert_eq!(
            send_wr_from_c(
                &wr(IBV_WR_BIND_MW, 0, [0; 4], &sge),
                false,
                |_| InlineData::new(),
                no_ah
            ),
            Err(WrError::BadMw)
        );
        let bind = MwBind {
            mw_rkey: 0x8000_0001,
            new_rkey: 0x8000_0002,
            mr_lkey: 0x100,
            addr: 0x1000,
            length: 64,
            access: AccessFlags::REMOTE_WRITE,
            verb: false,
        };
        let b = send_wr_from_c(
            &CSendWr {
                mw: Some(bind),
                ..wr(IBV_WR_BIND_MW, IBV_SEND_SIGNALED, [0; 4], &sge)
            },
            true,
            |_| InlineData::new(),
            no_ah,
        )
        .unwrap();
        assert_eq!(
            (b.op, b.data, b.signaled, b.ud),
            (SendOp::BindMw(bind), SendData::Sges(vec![]), true, None)
        );
        let l = send_wr_from_c(
            &wr(IBV_WR_LOCAL_INV, IBV_SEND_INLINE, [0; 4], &sge),
            false,
            |_| vec![1].into(),
            no_ah,
        )
        .unwrap();
        assert_eq!(
            (l.op, l.data),
            (
                SendOp::LocalInv {
                    key: u32::from_ne_bytes([0, 0, 0, 5])
                },
                SendData::Sges(vec![])
            )
        );
        assert_eq!(
            send_wr_from_c(
                &wr(12, 0, [0; 4], &sge),
                false,
                |_| InlineData::new(),
                no_ah
            ),
            Err(WrError::Opcode)
        );
        assert_eq!(
            send_wr_from_c(
                &wr(IBV_WR_SEND, 0, [0; 4], &sge),
                true,
                |_| InlineData::new(),
                no_ah
            ),
            Err(WrError::BadAh)
        );
        let av = AddressVector {
            dgid: rxe_verbs::Gid::from([1; 16]),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            src_port: None,
        };
        let u = send_wr_from_c(
            &wr(
                IBV_WR_SEND,
                0,
                [0x5000, (0x1111_1111u64 << 32) | 0x42, 0, 0],
                &sge,
            ),
            true,
            |_| InlineData::new(),
            |p| (p == 0x5000).then_some(av),
        )
        .unwrap();
        assert_eq!(
            u.ud,
            Some(UdDest {
                av,
                remote_qpn: 0x42,
                remote_qkey: 0x1111_1111
            })
        );
    }

    #[test]
    fn modify_attributes_convert_and_refuse_what_rxe_lacks() {
        let mut a = ibv_qp_attr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: 0x99,
            rq_psn: 0x1ab_cdef,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = [7; 16];
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.port_num = 1;
        let mask = IBV_QP_STATE | 0x80 | 0x100 | 0x1000 | 0x20000 | 0x8000 | 0x10_0000;
        let (q, m) = qp_attr_from_c(&a, mask).unwrap();
        assert_eq!(m.bits(), mask);
        assert_eq!(q.qp_state, Some(QpState::from_ibv(2).unwrap()));
        assert_eq!(q.path_mtu, Some(PathMtu::Mtu1024));
        assert_eq!(q.rq_psn, Some(Psn::new(0xab_cdef)), "masked to 24 bits");
        assert_eq!(q.av.unwrap().dgid, rxe_verbs::Gid::from([7; 16]));
        assert_eq!(q.dest_qpn, Some(0x99));
        assert_eq!(qp_attr_from_c(&a, IBV_QP_CAP).err(), Some(libc::EINVAL));
        assert_eq!(
            qp_attr_from_c(&a, IBV_QP_RATE_LIMIT).err(),
            Some(libc::EINVAL)
        );
        a.ah_attr.is_global = 0;
        assert_eq!(
            qp_attr_from_c(&a, 0x80).err(),
            Some(libc::EINVAL),
            "RoCE needs a GRH"
        );
        a.qp_state = 9;
        assert_eq!(qp_attr_from_c(&a, IBV_QP_STATE).err(), Some(libc::EINVAL));
    }
}
