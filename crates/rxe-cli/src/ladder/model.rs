//! What the ladder shows, as data: lanes (endpoints), connections, one
//! arrow per packet with its marks (retransmission, duplicate, NAK ...),
//! the ACK coverage and round trips, and a summary. [`super::analyze`]
//! builds it from a capture; [`super::render`] draws it.

use std::collections::BTreeMap;

/// One endpoint: an address and a QPN (`None` when no packet tells it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lane {
    pub addr: String,
    pub qpn: Option<u32>,
}

/// Two lanes that exchange packets; `a` is the lane that was seen first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conn {
    pub a: usize,
    pub b: usize,
    /// `RC`, `UC`, `UD` ...
    pub transport: &'static str,
}

/// What an arrow is, for its color.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Ack,
    Nak,
    RnrNak,
    ReadResponse,
    AtomicAck,
    Cm,
    Ud,
    Cnp,
    Bad,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Request => "req",
            Kind::Ack => "ack",
            Kind::Nak => "nak",
            Kind::RnrNak => "rnr",
            Kind::ReadResponse => "readresp",
            Kind::AtomicAck => "atomicack",
            Kind::Cm => "cm",
            Kind::Ud => "ud",
            Kind::Cnp => "cnp",
            Kind::Bad => "bad",
        }
    }
}

/// Something worth pointing at on an arrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MarkKind {
    /// A request whose PSN was sent before on this QP.
    Retransmit,
    /// A request the responder had already acknowledged, or an identical copy.
    Duplicate,
    /// A NAK (sequence error or another code).
    Nak,
    /// An RNR NAK.
    Rnr,
    /// An ACK that acknowledges nothing new.
    RepeatAck,
    /// PSNs missing from the capture.
    Gap,
    /// ECN bits set.
    Ecn,
    /// Does not parse, or a CRC fails.
    Error,
}

impl MarkKind {
    pub fn key(self) -> &'static str {
        match self {
            MarkKind::Retransmit => "retx",
            MarkKind::Duplicate => "dup",
            MarkKind::Nak => "nak",
            MarkKind::Rnr => "rnr",
            MarkKind::RepeatAck => "repeatack",
            MarkKind::Gap => "gap",
            MarkKind::Ecn => "ecn",
            MarkKind::Error => "error",
        }
    }

    /// Whether the "errors only" filter shows it.
    pub fn is_trouble(self) -> bool {
        !matches!(self, MarkKind::Ecn)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub kind: MarkKind,
    pub text: String,
}

/// The request packets a response acknowledges (their latest copies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cover {
    /// The lowest and highest PSN acknowledged.
    pub psns: (u32, u32),
    /// The frames of those packets, in capture order.
    pub frames: Vec<u64>,
}

/// One packet, drawn from one lane to another.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrow {
    pub frame: u64,
    pub time: f64,
    pub from: usize,
    pub to: usize,
    pub conn: Option<usize>,
    pub kind: Kind,
    pub label: String,
    pub marks: Vec<Mark>,
    pub cover: Option<Cover>,
    /// The frame this one answers or repeats: the request of a response,
    /// the first copy of a retransmission, the NAK a go-back-N follows.
    pub related: Option<u64>,
}

impl Arrow {
    pub fn has(&self, k: MarkKind) -> bool {
        self.marks.iter().any(|m| m.kind == k)
    }
}

/// Round-trip times seen on one connection, request to first response.
#[derive(Debug, Clone, PartialEq)]
pub struct Rtt {
    pub conn: usize,
    /// The requester's and the responder's lanes.
    pub requester: usize,
    pub responder: usize,
    pub samples: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    pub packets: usize,
    pub bad: usize,
    /// Messages: request packets that end a message, first copies only.
    pub messages: usize,
    /// Payload bytes of requests and READ responses, first copies only.
    pub bytes: u64,
    pub retransmissions: usize,
    pub duplicates: usize,
    /// NAKs by kind in words (RNR NAKs included).
    pub naks: BTreeMap<String, usize>,
    pub cm: usize,
    pub rtt: Vec<Rtt>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Model {
    pub lanes: Vec<Lane>,
    pub conns: Vec<Conn>,
    pub arrows: Vec<Arrow>,
    pub summary: Summary,
}
