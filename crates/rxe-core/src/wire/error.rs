//! Typed parse errors: every rejection names the header and, where one is at
//! fault, the field.

use core::fmt;

use super::opcode::ExtHeader;

/// The header (or trailer) in which a parse error was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Ethernet,
    LinuxSll,
    LinuxSll2,
    Ipv4,
    Ipv6,
    Udp,
    Lrh,
    Grh,
    Bth,
    Rdeth,
    Deth,
    Xrceth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Feth,
    Payload,
    Icrc,
    Vcrc,
}

impl Layer {
    /// The IBTA (or IETF) short name of the header.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Ethernet => "Ethernet",
            Layer::LinuxSll => "Linux SLL",
            Layer::LinuxSll2 => "Linux SLL2",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
            Layer::Lrh => "LRH",
            Layer::Grh => "GRH",
            Layer::Bth => "BTH",
            Layer::Rdeth => "RDETH",
            Layer::Deth => "DETH",
            Layer::Xrceth => "XRCETH",
            Layer::Reth => "RETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::Aeth => "AETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::Feth => "FETH",
            Layer::Payload => "payload",
            Layer::Icrc => "ICRC",
            Layer::Vcrc => "VCRC",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Fewer bytes than the header needs.
    #[error("truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    /// A field holds a value the specification does not allow here.
    #[error("field {field} has value {value:#x}, which is not allowed")]
    BadField { field: &'static str, value: u64 },
    /// The BTH opcode is not defined by the IBTA (or by RoCE annexes).
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The BTH pad count is larger than the bytes that follow the headers.
    #[error("pad count {pad} is larger than the {available} payload bytes")]
    PadExceedsPayload { pad: u8, available: usize },
    /// The opcode carries no payload but bytes were found.
    #[error("opcode allows no payload but {len} bytes follow the headers")]
    PayloadNotAllowed { len: usize },
    /// The opcode needs a payload (FIRST/MIDDLE packets) but none was found.
    #[error("opcode requires a payload but none follows the headers")]
    PayloadRequired,
    /// The opcode needs a payload of an exact size.
    #[error("opcode requires exactly {expected} payload bytes, found {found}")]
    PayloadLength { expected: usize, found: usize },
    /// IBTA packets are whole 4-byte words (IBTA 9.2.5, 7.7.8).
    #[error("length {len} is not a multiple of 4")]
    NotWordAligned { len: usize },
    /// A length field disagrees with the bytes present.
    #[error("field {field} says {declared} bytes, but {actual} are present")]
    LengthMismatch {
        field: &'static str,
        declared: usize,
        actual: usize,
    },
    /// The invariant CRC does not match.
    #[error("mismatch: computed {computed:#010x}, packet carries {carried:#010x}")]
    BadIcrc { computed: u32, carried: u32 },
    /// The variant CRC does not match.
    #[error("mismatch: computed {computed:#06x}, packet carries {carried:#06x}")]
    BadVcrc { computed: u16, carried: u16 },
    /// Building a packet: the opcode needs this extended header, and the
    /// `TransportRepr` has none.
    #[error("opcode needs a {0:?} header, none was given")]
    MissingHeader(ExtHeader),
    /// Building a packet: the opcode carries no such extended header.
    #[error("opcode carries no {0:?} header, one was given")]
    UnexpectedHeader(ExtHeader),
    /// A header that etherparse rejected (IP/UDP/Ethernet level).
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// A parse error: which header, and what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{layer}: {kind}")]
pub struct Error {
    pub layer: Layer,
    pub kind: ErrorKind,
}

impl Error {
    pub const fn new(layer: Layer, kind: ErrorKind) -> Self {
        Error { layer, kind }
    }

    pub const fn truncated(layer: Layer, needed: usize, available: usize) -> Self {
        Error::new(layer, ErrorKind::Truncated { needed, available })
    }

    pub const fn bad_field(layer: Layer, field: &'static str, value: u64) -> Self {
        Error::new(layer, ErrorKind::BadField { field, value })
    }

    /// A short stable name for the reason, used for per-reason drop counters
    /// and JSON output.
    pub const fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Truncated { .. } => "truncated",
            ErrorKind::BadField { .. } => "bad_field",
            ErrorKind::UnknownOpcode(_) => "unknown_opcode",
            ErrorKind::PadExceedsPayload { .. } => "bad_pad_count",
            ErrorKind::PayloadNotAllowed { .. } => "payload_not_allowed",
            ErrorKind::PayloadRequired => "payload_required",
            ErrorKind::PayloadLength { .. } => "bad_payload_length",
            ErrorKind::NotWordAligned { .. } => "not_word_aligned",
            ErrorKind::LengthMismatch { .. } => "length_mismatch",
            ErrorKind::BadIcrc { .. } => "bad_icrc",
            ErrorKind::BadVcrc { .. } => "bad_vcrc",
            ErrorKind::MissingHeader(_) => "missing_header",
            ErrorKind::UnexpectedHeader(_) => "unexpected_header",
            ErrorKind::Malformed(_) => "malformed",
        }
    }
}

pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `needed` bytes for `layer`.
pub(crate) fn need(layer: Layer, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::truncated(layer, needed, buf.len()))
    } else {
        Ok(())
    }
}
