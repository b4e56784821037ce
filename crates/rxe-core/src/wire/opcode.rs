//! The BTH opcode table (IBTA 9.2.1, Table 38; RoCEv2 Annex A17 for CNP;
//! IBTA 1.5 for FLUSH and ATOMIC WRITE).
//!
//! Bits 7:5 of an opcode name the transport, bits 4:0 the operation. For each
//! defined opcode the table gives its IBTA name, the extended transport
//! headers that follow the BTH in wire order, whether it carries a payload,
//! and where it stands in a message (FIRST/MIDDLE/LAST/ONLY).

use core::fmt;

/// The length of the BTH, which starts every transport packet (IBTA 9.2).
/// It is defined here, beside the lengths of the extended headers that
/// follow it, so that the table can give an opcode's header length without
/// depending on the `bth` module (which depends on this one for `Opcode`);
/// `bth::HEADER_LEN` is this constant.
pub const BTH_LEN: usize = 12;

/// The transport service an opcode belongs to (opcode bits 7:5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Reliable Datagram.
    Rd,
    /// Unreliable Datagram.
    Ud,
    /// Congestion Notification Packet (RoCEv2 Annex A17).
    Cnp,
    /// Extended Reliable Connection.
    Xrc,
}

impl Transport {
    pub const fn from_opcode(op: u8) -> Option<Transport> {
        match op >> 5 {
            0 => Some(Transport::Rc),
            1 => Some(Transport::Uc),
            2 => Some(Transport::Rd),
            3 => Some(Transport::Ud),
            4 => Some(Transport::Cnp),
            5 => Some(Transport::Xrc),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
        }
    }
}

/// An extended transport header, in the order the table lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// Reliable Datagram ETH (EE context).
    Rdeth,
    /// Datagram ETH (Q_Key, source QP).
    Deth,
    /// XRC ETH (XRC SRQ number).
    Xrceth,
    /// RDMA ETH (virtual address, R_Key, DMA length).
    Reth,
    /// Atomic ETH (virtual address, R_Key, swap/add, compare).
    AtomicEth,
    /// ACK ETH (syndrome, MSN).
    Aeth,
    /// Atomic ACK ETH (original remote data).
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate ETH (R_Key to invalidate).
    Ieth,
    /// FLUSH ETH (selectivity level, placement type).
    Feth,
}

impl ExtHeader {
    /// Wire length in bytes.
    #[allow(clippy::len_without_is_empty)] // a header is never empty
    pub const fn len(self) -> usize {
        match self {
            ExtHeader::Rdeth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Xrceth => 4,
            ExtHeader::Reth => 16,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::Feth => 4,
        }
    }

    pub const fn layer(self) -> super::Layer {
        use super::Layer;
        match self {
            ExtHeader::Rdeth => Layer::Rdeth,
            ExtHeader::Deth => Layer::Deth,
            ExtHeader::Xrceth => Layer::Xrceth,
            ExtHeader::Reth => Layer::Reth,
            ExtHeader::AtomicEth => Layer::AtomicEth,
            ExtHeader::Aeth => Layer::Aeth,
            ExtHeader::AtomicAckEth => Layer::AtomicAckEth,
            ExtHeader::ImmDt => Layer::ImmDt,
            ExtHeader::Ieth => Layer::Ieth,
            ExtHeader::Feth => Layer::Feth,
        }
    }
}

/// What a packet with this opcode may carry after its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadRule {
    /// No payload (requests without data, acknowledgements).
    None,
    /// Zero or more bytes (ONLY packets: a message may be empty).
    Optional,
    /// At least one byte: FIRST and MIDDLE packets carry a full path MTU, and
    /// a LAST packet 1 to path-MTU bytes, since an empty remainder would
    /// have ended the message one packet earlier (IBTA C9-92, 9.7.x).
    Required,
    /// Exactly this many bytes (ATOMIC WRITE: 8; CNP: 16 reserved bytes).
    Exact(u16),
}

/// Where a packet stands in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// The operation family of an opcode, independent of transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    RdmaWrite,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Resync,
    Flush,
    AtomicWrite,
    Cnp,
}

impl Operation {
    /// A request (sent by the requester) as opposed to a response.
    pub const fn is_request(self) -> bool {
        !matches!(
            self,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
}

/// The extended headers of one opcode, in wire order (at most four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeaders {
    items: [ExtHeader; 4],
    len: u8,
}

impl ExtHeaders {
    const fn new(list: &[ExtHeader]) -> Self {
        let mut items = [ExtHeader::Rdeth; 4];
        let mut i = 0;
        while i < list.len() {
            items[i] = list[i];
            i += 1;
        }
        ExtHeaders {
            items,
            len: list.len() as u8,
        }
    }

    /// The same list with `first` (and `second`) put in front.
    const fn prefixed(self, first: ExtHeader, second: Option<ExtHeader>) -> Self {
        let extra = if second.is_some() { 2 } else { 1 };
        let mut items = [ExtHeader::Rdeth; 4];
        items[0] = first;
        if let Some(s) = second {
            items[1] = s;
        }
        let mut i = 0;
        while i < self.len as usize {
            items[i + extra] = self.items[i];
            i += 1;
        }
        ExtHeaders {
            items,
            len: self.len + extra as u8,
        }
    }

    pub fn as_slice(&self) -> &[ExtHeader] {
        &self.items[..usize::from(self.len)]
    }

    /// Total length of these headers in bytes.
    pub fn byte_len(&self) -> usize {
        self.as_slice().iter().map(|h| h.len()).sum()
    }

    pub fn contains(&self, h: ExtHeader) -> bool {
        self.as_slice().contains(&h)
    }
}

/// Everything the IBTA says about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub opcode: u8,
    pub transport: Transport,
    pub operation: Operation,
    /// The IBTA name without the transport, e.g. `SEND Last with Immediate`.
    pub name: &'static str,
    pub position: Option<Position>,
    pub headers: ExtHeaders,
    pub payload: PayloadRule,
    pub immediate: bool,
    pub invalidate: bool,
}

impl OpcodeInfo {
    /// Bytes from the start of the BTH to the payload.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.headers.byte_len()
    }
}

/// A BTH opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// The table entry, or `None` for an opcode the IBTA leaves reserved.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[usize::from(self.0)].as_ref()
    }

    /// Builds the opcode for `op` (an RC-space low code, 0x00..=0x1f) on `transport`.
    pub const fn on(transport: Transport, rc_code: u8) -> Opcode {
        let base = match transport {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Rd => 0x40,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
            Transport::Xrc => 0xa0,
        };
        Opcode(base | (rc_code & 0x1f))
    }

    pub const fn transport(self) -> Option<Transport> {
        Transport::from_opcode(self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => write!(f, "{} {}", i.transport.name(), i.name),
            None => write!(f, "reserved opcode {:#04x}", self.0),
        }
    }
}

/// Named opcodes, for code that builds packets.
#[allow(missing_docs)]
impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0a);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0b);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0c);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0d);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0e);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0f);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    pub const RC_FLUSH: Opcode = Opcode(0x1c);
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1d);
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2a);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2b);
    pub const RD_RESYNC: Opcode = Opcode(0x55);
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    pub const CNP: Opcode = Opcode(0x81);
}

/// The RC code space (opcode bits 4:0), from which UC, RD and XRC derive.
struct Base {
    operation: Operation,
    name: &'static str,
    position: Option<Position>,
    headers: ExtHeaders,
    payload: PayloadRule,
    immediate: bool,
    invalidate: bool,
}

const fn base(code: u8) -> Option<Base> {
    use ExtHeader::*;
    use Operation::*;
    use PayloadRule as P;
    use Position::*;
    const NONE: &[ExtHeader] = &[];
    let (operation, name, position, headers, payload): (_, _, _, &[ExtHeader], _) = match code {
        0x00 => (Send, "SEND First", Some(First), NONE, P::Required),
        0x01 => (Send, "SEND Middle", Some(Middle), NONE, P::Required),
        0x02 => (Send, "SEND Last", Some(Last), NONE, P::Required),
        0x03 => (
            Send,
            "SEND Last with Immediate",
            Some(Last),
            &[ImmDt],
            P::Required,
        ),
        0x04 => (Send, "SEND Only", Some(Only), NONE, P::Optional),
        0x05 => (
            Send,
            "SEND Only with Immediate",
            Some(Only),
            &[ImmDt],
            P::Optional,
        ),
        0x06 => (
            RdmaWrite,
            "RDMA WRITE First",
            Some(First),
            &[Reth],
            P::Required,
        ),
        0x07 => (
            RdmaWrite,
            "RDMA WRITE Middle",
            Some(Middle),
            NONE,
            P::Required,
        ),
        0x08 => (RdmaWrite, "RDMA WRITE Last", Some(Last), NONE, P::Required),
        0x09 => (
            RdmaWrite,
            "RDMA WRITE Last with Immediate",
            Some(Last),
            &[ImmDt],
            P::Required,
        ),
        0x0a => (
            RdmaWrite,
            "RDMA WRITE Only",
            Some(Only),
            &[Reth],
            P::Optional,
        ),
        0x0b => (
            RdmaWrite,
            "RDMA WRITE Only with Immediate",
            Some(Only),
            &[Reth, ImmDt],
            P::Optional,
        ),
        0x0c => (
            RdmaReadRequest,
            "RDMA READ Request",
            Some(Only),
            &[Reth],
            P::None,
        ),
        0x0d => (
            RdmaReadResponse,
            "RDMA READ Response First",
            Some(First),
            &[Aeth],
            P::Required,
        ),
        0x0e => (
            RdmaReadResponse,
            "RDMA READ Response Middle",
            Some(Middle),
            NONE,
            P::Required,
        ),
        0x0f => (
            RdmaReadResponse,
            "RDMA READ Response Last",
            Some(Last),
            &[Aeth],
            P::Required,
        ),
        0x10 => (
            RdmaReadResponse,
            "RDMA READ Response Only",
            Some(Only),
            &[Aeth],
            P::Optional,
        ),
        0x11 => (Acknowledge, "Acknowledge", None, &[Aeth], P::None),
        0x12 => (
            AtomicAcknowledge,
            "ATOMIC Acknowledge",
            None,
            &[Aeth, AtomicAckEth],
            P::None,
        ),
        0x13 => (CompareSwap, "CmpSwap", Some(Only), &[AtomicEth], P::None),
        0x14 => (FetchAdd, "FetchAdd", Some(Only), &[AtomicEth], P::None),
        0x15 => (Resync, "RESYNC", Some(Only), NONE, P::None),
        0x16 => (
            Send,
            "SEND Last with Invalidate",
            Some(Last),
            &[Ieth],
            P::Required,
        ),
        0x17 => (
            Send,
            "SEND Only with Invalidate",
            Some(Only),
            &[Ieth],
            P::Optional,
        ),
        0x1c => (Flush, "FLUSH", Some(Only), &[Feth, Reth], P::None),
        0x1d => (
            AtomicWrite,
            "ATOMIC WRITE",
            Some(Only),
            &[Reth],
            P::Exact(8),
        ),
        _ => return None,
    };
    Some(Base {
        operation,
        name,
        position,
        headers: ExtHeaders::new(headers),
        payload,
        immediate: code == 0x03 || code == 0x05 || code == 0x09 || code == 0x0b,
        invalidate: code == 0x16 || code == 0x17,
    })
}

const fn entry(op: u8) -> Option<OpcodeInfo> {
    let code = op & 0x1f;
    let transport = match Transport::from_opcode(op) {
        Some(t) => t,
        None => return None,
    };
    // Which RC codes each transport defines (IBTA 9.2.1 Table 38).
    let defined = match transport {
        Transport::Rc => {
            code <= 0x14 || code == 0x16 || code == 0x17 || code == 0x1c || code == 0x1d
        }
        Transport::Uc => code <= 0x0b,
        Transport::Rd => code <= 0x15,
        Transport::Ud => code == 0x04 || code == 0x05,
        Transport::Xrc => code <= 0x14 || code == 0x16 || code == 0x17,
        Transport::Cnp => code == 0x01,
    };
    if !defined {
        return None;
    }
    if let Transport::Cnp = transport {
        // RoCEv2 Annex A17.9.3: BTH, 16 reserved bytes, ICRC.
        return Some(OpcodeInfo {
            opcode: op,
            transport,
            operation: Operation::Cnp,
            name: "CNP",
            position: None,
            headers: ExtHeaders::new(&[]),
            payload: PayloadRule::Exact(16),
            immediate: false,
            invalidate: false,
        });
    }
    let b = match base(code) {
        Some(b) => b,
        None => return None,
    };
    let headers = match transport {
        // RD requests carry RDETH and DETH; RD responses carry RDETH only.
        Transport::Rd => {
            if b.operation.is_request() {
                b.headers.prefixed(ExtHeader::Rdeth, Some(ExtHeader::Deth))
            } else {
                b.headers.prefixed(ExtHeader::Rdeth, None)
            }
        }
        // UD has only SEND Only (with Immediate), both with a DETH.
        Transport::Ud => b.headers.prefixed(ExtHeader::Deth, None),
        // XRC requests name the target SRQ in an XRCETH right after the BTH.
        Transport::Xrc if b.operation.is_request() => b.headers.prefixed(ExtHeader::Xrceth, None),
        _ => b.headers,
    };
    Some(OpcodeInfo {
        opcode: op,
        transport,
        operation: b.operation,
        name: b.name,
        position: b.position,
        headers,
        payload: b.payload,
        immediate: b.immediate,
        invalidate: b.invalidate,
    })
}

const fn build_table() -> [Option<OpcodeInfo>; 256] {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = entry(i as u8);
        i += 1;
    }
    t
}

static TABLE: [Option<OpcodeInfo>; 256] = build_table();

/// Every defined opcode, in numeric order.
pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
    TABLE.iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_transport() {
        let count = |t| all().filter(|i| i.transport == t).count();
        assert_eq!(count(Transport::Rc), 25);
        assert_eq!(count(Transport::Uc), 12);
        assert_eq!(count(Transport::Rd), 22);
        assert_eq!(count(Transport::Ud), 2);
        assert_eq!(count(Transport::Cnp), 1);
        assert_eq!(count(Transport::Xrc), 23);
    }

    #[test]
    fn header_orders_follow_ibta() {
        use ExtHeader::*;
        let h = |op: u8| Opcode(op).info().unwrap().headers.as_slice().to_vec();
        assert_eq!(h(0x0b), vec![Reth, ImmDt]);
        assert_eq!(h(0x12), vec![Aeth, AtomicAckEth]);
        assert_eq!(h(0x4b), vec![Rdeth, Deth, Reth, ImmDt]);
        assert_eq!(h(0x51), vec![Rdeth, Aeth]);
        assert_eq!(h(0x65), vec![Deth, ImmDt]);
        assert_eq!(h(0xab), vec![Xrceth, Reth, ImmDt]);
        assert_eq!(h(0xb1), vec![Aeth]);
        assert_eq!(h(0x1c), vec![Feth, Reth]);
        assert_eq!(Opcode(0x1d).info().unwrap().payload, PayloadRule::Exact(8));
    }

    #[test]
    fn reserved_opcodes_have_no_entry() {
        for op in [
            0x15u8, 0x18, 0x1b, 0x1e, 0x2c, 0x35, 0x56, 0x60, 0x63, 0x66, 0x80, 0x82, 0xb5, 0xc0,
            0xff,
        ] {
            assert!(Opcode(op).info().is_none(), "{op:#x}");
        }
    }

    #[test]
    fn names_and_display() {
        assert_eq!(Opcode::RC_SEND_FIRST.to_string(), "RC SEND First");
        assert_eq!(Opcode::UD_SEND_ONLY.to_string(), "UD SEND Only");
        assert_eq!(Opcode(0x11).to_string(), "RC Acknowledge");
        assert_eq!(Opcode(0x15).to_string(), "reserved opcode 0x15");
        assert!(Opcode(0x23).info().unwrap().immediate);
        assert!(Opcode(0x17).info().unwrap().invalidate);
    }
}
