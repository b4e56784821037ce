//! Work requests in, work completions out: the values that cross between
//! the verbs layer and the transport engine. Names follow libibverbs
//! (`ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`).

use crate::transport::memory::RegMr;
use crate::transport::qp::AddressVector;
use crate::transport::window::MwBind;

/// A scatter/gather element: `length` bytes at virtual address `addr` of
/// the memory region named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// What a send work request does (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    Send,
    SendWithImm {
        imm: u32,
    },
    /// SEND that invalidates `rkey` at the responder (RC only).
    SendWithInv {
        rkey: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    /// 64-bit compare and swap at an 8-byte aligned `remote_addr`.
    CmpSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// 64-bit fetch and add at an 8-byte aligned `remote_addr`.
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// IBTA 1.5 ATOMIC WRITE (RC): the request's 8 bytes of data (one
    /// 8-byte SGE, or 8 inline bytes) placed as one at the 8-byte aligned
    /// `remote_addr`, in the byte order given (`ibv_wr_atomic_write`).
    AtomicWrite {
        remote_addr: u64,
        rkey: u32,
    },
    /// IBTA 1.5 FLUSH (RC; Annex A19): makes earlier writes to `len`
    /// bytes at `remote_addr` (selectivity `wire::feth::SEL_MEMORY_RANGE`)
    /// or to the whole region of `rkey` (`SEL_MEMORY_REGION`) globally
    /// visible and/or persistent (`placement`, a set of
    /// `wire::feth::PLT_*` bits). Carries no data.
    Flush {
        remote_addr: u64,
        rkey: u32,
        len: u32,
        placement: u8,
        selectivity: u8,
    },
    /// Binds a memory window (`IBV_WR_BIND_MW`, or the Bind Memory Window
    /// verb for a type 1 window): a local operation, no packet.
    BindMw(MwBind),
    /// Invalidates a memory window or a fast-registered region
    /// (`IBV_WR_LOCAL_INV`): a local operation, no packet.
    LocalInv {
        key: u32,
    },
    /// Registers a region allocated for fast registration (`IB_WR_REG_MR`
    /// of the kernel's verbs; libibverbs has none): a local operation, no
    /// packet.
    RegMr(RegMr),
}

impl SendOp {
    /// The opcode a completion of this request reports.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::CmpSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            SendOp::Flush { .. } => WcOpcode::Flush,
            SendOp::BindMw(_) => WcOpcode::BindMw,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
            SendOp::RegMr(_) => WcOpcode::RegMr,
        }
    }

    /// Operations the requester performs itself, in send-queue order,
    /// without sending a packet (IBTA 10.8.2.x; kernel rxe's local
    /// operations).
    pub const fn is_local(self) -> bool {
        matches!(
            self,
            SendOp::BindMw(_) | SendOp::LocalInv { .. } | SendOp::RegMr(_)
        )
    }

    /// READ, atomics, ATOMIC WRITE and FLUSH: the responder answers each
    /// with a response of its own, and at most `max_rd_atomic` of them may
    /// be outstanding (IBTA 9.5, 10.2.3; ATOMIC WRITE and FLUSH use the
    /// responder resources too, IBTA 1.5, not checked against the text).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. }
                | SendOp::CmpSwap { .. }
                | SendOp::FetchAdd { .. }
                | SendOp::AtomicWrite { .. }
                | SendOp::Flush { .. }
        )
    }

    /// ATOMIC WRITE and FLUSH: one request packet, one PSN, answered by an
    /// RDMA READ Response Only without payload (as kernel rxe answers
    /// them; IBTA 1.5, not checked against the text).
    pub const fn is_zero_response(self) -> bool {
        matches!(self, SendOp::AtomicWrite { .. } | SendOp::Flush { .. })
    }

    /// READ and the two 64-bit atomics: their response lands in the
    /// request's SGEs, which need local write.
    pub const fn writes_locally(self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. } | SendOp::CmpSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    pub const fn is_atomic(self) -> bool {
        matches!(self, SendOp::CmpSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// Inline data of a send, copied at post time: up to 16 bytes held in
/// place (a latency test's 2 bytes, an ATOMIC WRITE's 8), so such a post
/// allocates nothing; more go to the heap. As large as a `Vec`.
pub type InlineData = smallvec::SmallVec<[u8; 16]>;

/// Where the data of a send comes from. `Sge(s)` equals `Sges(vec![s])`:
/// equality is of the data's sources, not of how they are held.
#[derive(Debug, Clone)]
pub enum SendData {
    /// Gathered from registered memory when the packets are built.
    Sges(Vec<Sge>),
    /// The same from one SGE, as most requests have: no list to allocate
    /// for each request (malloc and free were 2.6 % of a 64-byte WRITE
    /// stream's sender, docs/performance.md).
    Sge(Sge),
    /// Copied at post time (`IBV_SEND_INLINE`): no lkey is involved.
    Inline(InlineData),
}

impl PartialEq for SendData {
    fn eq(&self, other: &SendData) -> bool {
        match (self, other) {
            (SendData::Inline(a), SendData::Inline(b)) => a == b,
            (SendData::Inline(_), _) | (_, SendData::Inline(_)) => false,
            (a, b) => a.sge_list() == b.sge_list(),
        }
    }
}

impl Eq for SendData {}

impl SendData {
    /// Total bytes, saturating (a list whose lengths overflow is refused at
    /// post time anyway).
    pub fn len(&self) -> u64 {
        match self {
            SendData::Sges(s) => s
                .iter()
                .fold(0u64, |a, s| a.saturating_add(u64::from(s.length))),
            SendData::Sge(s) => u64::from(s.length),
            SendData::Inline(b) => b.len() as u64,
        }
    }

    /// The SGEs the data is gathered from (none for inline data).
    pub fn sge_list(&self) -> &[Sge] {
        match self {
            SendData::Sges(s) => s,
            SendData::Sge(s) => std::slice::from_ref(s),
            SendData::Inline(_) => &[],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The destination of a UD send (`wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    pub av: AddressVector,
    pub remote_qpn: u32,
    /// A Q_Key with the high bit set means "use the QP's own Q_Key"
    /// (IBTA 10.2.5).
    pub remote_qkey: u32,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    /// For READ: where the data lands. For atomics: one 8-byte SGE that
    /// receives the original value.
    pub data: SendData,
    /// Generate a completion when this request completes successfully
    /// (errors always complete).
    pub signaled: bool,
    /// Wait for all earlier READs and atomics to complete first (IBTA 10.8.3.3).
    pub fence: bool,
    /// Ask the responder to raise a solicited event (BTH SE).
    pub solicited: bool,
    /// UD only.
    pub ud: Option<UdDest>,
}

/// The scatter list of a receive: one SGE held in place, as nearly every
/// program posts (perftest, rping, `rxe perf`), so a posted receive
/// allocates nothing; a longer list goes to the heap. As large as a `Vec`.
pub type SgeList = smallvec::SmallVec<[Sge; 1]>;

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: SgeList,
}

/// `ibv_wc_status`, in libibverbs order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocEecOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    LocRddViolErr,
    RemInvRdReqErr,
    RemAbortErr,
    InvEecnErr,
    InvEecStateErr,
    FatalErr,
    RespTimeoutErr,
    GeneralErr,
}

/// `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    /// `IBV_WC_ATOMIC_WRITE`.
    AtomicWrite,
    /// `IBV_WC_FLUSH`.
    Flush,
    BindMw,
    LocalInv,
    /// A fast registration (the kernel's `IB_WC_REG_MR`).
    RegMr,
    Recv,
    RecvRdmaWithImm,
}

/// Which queue a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkQueue {
    Send,
    Recv,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Receive: bytes written (for UD including the 40-byte GRH space).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The R_Key a SEND with Invalidate invalidated (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    pub qp_num: u32,
    /// UD: the sender's QPN (from the DETH).
    pub src_qp: u32,
    /// UD: the GRH space holds the network header (`IBV_WC_GRH`).
    pub grh: bool,
    pub pkey_index: u16,
    pub sl: u8,
    pub queue: WorkQueue,
    /// Receive: the message's last packet asked for a solicited event
    /// (BTH SE, IBTA 9.2.3), which wakes a CQ armed for solicited
    /// completions only.
    pub solicited: bool,
}

impl WorkCompletion {
    /// A completion with status `status` and everything else zero/none.
    pub fn new(
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        qp_num: u32,
        queue: WorkQueue,
    ) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: 0,
            grh: false,
            pkey_index: 0,
            sl: 0,
            queue,
            solicited: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holding one SGE or 16 inline bytes in place costs no size: a queued
    /// request is as large as with a `Vec`.
    #[test]
    fn lists_held_in_place_are_as_large_as_a_vec() {
        assert_eq!(
            std::mem::size_of::<SgeList>(),
            std::mem::size_of::<Vec<Sge>>()
        );
        assert_eq!(
            std::mem::size_of::<InlineData>(),
            std::mem::size_of::<Vec<u8>>()
        );
        assert!(!SgeList::from_elem(
            Sge {
                addr: 0,
                length: 0,
                lkey: 0
            },
            1
        )
        .spilled());
        assert!(!InlineData::from_slice(&[0; 16]).spilled());
        assert!(InlineData::from_slice(&[0; 17]).spilled());
    }

    #[test]
    fn one_sge_equals_a_list_of_it_and_inline_data_equals_only_inline_data() {
        let s = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 3,
        };
        assert_eq!(SendData::Sge(s), SendData::Sges(vec![s]));
        assert_ne!(SendData::Sge(s), SendData::Sges(vec![s, s]));
        assert_ne!(SendData::Sges(vec![]), SendData::Inline(vec![].into()));
        assert_eq!(
            SendData::Inline(vec![1].into()),
            SendData::Inline(vec![1].into())
        );
        assert_eq!(SendData::Sge(s).len(), 8);
        assert_eq!(SendData::Sge(s).sge_list(), &[s]);
        assert!(SendData::Inline(vec![1].into()).sge_list().is_empty());
    }
}
