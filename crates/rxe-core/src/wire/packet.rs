//! A transport packet: BTH, extended transport headers, payload, pad and
//! ICRC (IBTA 9.2, 9.3). This is what follows the UDP header in RoCEv2, the
//! GRH in RoCEv1, and the LRH/GRH in native InfiniBand.
//!
//! Parsing walks the opcode table: the opcode says which extended headers
//! follow in which order and whether a payload is allowed, so a packet is
//! either fully accounted for or rejected with the header at fault.

use super::aeth::{Aeth, AethRepr};
use super::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEth, AtomicEthRepr};
use super::bth::{self, Bth, BthRepr};
use super::deth::{Deth, DethRepr};
use super::error::{need, Error, ErrorKind, Layer, Result};
use super::feth::{Feth, FethRepr};
use super::icrc::ICRC_LEN;
use super::ieth::{Ieth, IethRepr};
use super::immdt::{ImmDt, ImmDtRepr};
use super::opcode::{ExtHeader, OpcodeInfo, PayloadRule};
use super::rdeth::{Rdeth, RdethRepr};
use super::reth::{Reth, RethRepr};
use super::xrceth::{Xrceth, XrcethRepr};

/// The extended headers of one packet; exactly those its opcode lists are
/// `Some`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExtReprs {
    pub rdeth: Option<RdethRepr>,
    pub deth: Option<DethRepr>,
    pub xrceth: Option<XrcethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub immdt: Option<ImmDtRepr>,
    pub ieth: Option<IethRepr>,
    pub feth: Option<FethRepr>,
}

impl ExtReprs {
    /// Whether the header of this kind is present.
    pub fn has(&self, h: ExtHeader) -> bool {
        match h {
            ExtHeader::Rdeth => self.rdeth.is_some(),
            ExtHeader::Deth => self.deth.is_some(),
            ExtHeader::Xrceth => self.xrceth.is_some(),
            ExtHeader::Reth => self.reth.is_some(),
            ExtHeader::AtomicEth => self.atomic_eth.is_some(),
            ExtHeader::Aeth => self.aeth.is_some(),
            ExtHeader::AtomicAckEth => self.atomic_ack_eth.is_some(),
            ExtHeader::ImmDt => self.immdt.is_some(),
            ExtHeader::Ieth => self.ieth.is_some(),
            ExtHeader::Feth => self.feth.is_some(),
        }
    }

    const ALL: [ExtHeader; 10] = [
        ExtHeader::Rdeth,
        ExtHeader::Deth,
        ExtHeader::Xrceth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
        ExtHeader::Feth,
    ];

    /// Parses one extended header of kind `h` from the front of `buf`.
    fn parse_one(&mut self, h: ExtHeader, buf: &[u8]) -> Result<()> {
        need(h.layer(), buf, h.len())?;
        match h {
            ExtHeader::Rdeth => self.rdeth = Some(RdethRepr::parse(&Rdeth::new_unchecked(buf))?),
            ExtHeader::Deth => self.deth = Some(DethRepr::parse(&Deth::new_unchecked(buf))?),
            ExtHeader::Xrceth => {
                self.xrceth = Some(XrcethRepr::parse(&Xrceth::new_unchecked(buf))?)
            }
            ExtHeader::Reth => self.reth = Some(RethRepr::parse(&Reth::new_unchecked(buf))?),
            ExtHeader::AtomicEth => {
                self.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_unchecked(buf))?)
            }
            ExtHeader::Aeth => self.aeth = Some(AethRepr::parse(&Aeth::new_unchecked(buf))?),
            ExtHeader::AtomicAckEth => {
                self.atomic_ack_eth =
                    Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(buf))?)
            }
            ExtHeader::ImmDt => self.immdt = Some(ImmDtRepr::parse(&ImmDt::new_unchecked(buf))?),
            ExtHeader::Ieth => self.ieth = Some(IethRepr::parse(&Ieth::new_unchecked(buf))?),
            ExtHeader::Feth => self.feth = Some(FethRepr::parse(&Feth::new_unchecked(buf))?),
        }
        Ok(())
    }

    /// Writes the header of kind `h` to the front of `buf` (which holds at
    /// least `h.len()` bytes); `false` if this packet has no such header.
    fn emit_one(&self, h: ExtHeader, buf: &mut [u8]) -> bool {
        match h {
            ExtHeader::Rdeth => self.rdeth.map(|r| r.emit(&mut Rdeth::new_unchecked(buf))),
            ExtHeader::Deth => self.deth.map(|r| r.emit(&mut Deth::new_unchecked(buf))),
            ExtHeader::Xrceth => self.xrceth.map(|r| r.emit(&mut Xrceth::new_unchecked(buf))),
            ExtHeader::Reth => self.reth.map(|r| r.emit(&mut Reth::new_unchecked(buf))),
            ExtHeader::AtomicEth => self
                .atomic_eth
                .map(|r| r.emit(&mut AtomicEth::new_unchecked(buf))),
            ExtHeader::Aeth => self.aeth.map(|r| r.emit(&mut Aeth::new_unchecked(buf))),
            ExtHeader::AtomicAckEth => self
                .atomic_ack_eth
                .map(|r| r.emit(&mut AtomicAckEth::new_unchecked(buf))),
            ExtHeader::ImmDt => self.immdt.map(|r| r.emit(&mut ImmDt::new_unchecked(buf))),
            ExtHeader::Ieth => self.ieth.map(|r| r.emit(&mut Ieth::new_unchecked(buf))),
            ExtHeader::Feth => self.feth.map(|r| r.emit(&mut Feth::new_unchecked(buf))),
        }
        .is_some()
    }
}

/// A transport packet as values. The payload bytes travel beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportRepr {
    pub bth: BthRepr,
    pub ext: ExtReprs,
    /// Payload bytes, without the pad.
    pub payload_len: usize,
}

/// A parsed transport packet, borrowing its payload from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPacket<'a> {
    pub repr: TransportRepr,
    pub info: &'static OpcodeInfo,
    /// Bytes from the start of the BTH to the payload.
    pub header_len: usize,
    pub payload: &'a [u8],
    /// The ICRC as carried (not verified here: that needs the outer headers).
    pub icrc: u32,
}

/// Pad bytes that make `payload_len` a whole number of 4-byte words.
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

impl TransportRepr {
    /// A packet of `payload_len` bytes; sets the BTH pad count to match.
    pub fn new(mut bth: BthRepr, ext: ExtReprs, payload_len: usize) -> Self {
        bth.pad_count = pad_for(payload_len);
        TransportRepr {
            bth,
            ext,
            payload_len,
        }
    }

    /// Parses the bytes from the BTH through the ICRC.
    pub fn parse(buf: &[u8]) -> Result<TransportPacket<'_>> {
        let bth = BthRepr::parse(&Bth::new_checked(buf)?)?;
        let info = bth.opcode.info().ok_or(Error::new(
            Layer::Bth,
            ErrorKind::UnknownOpcode(bth.opcode.0),
        ))?;

        let mut ext = ExtReprs::default();
        let mut at = bth::HEADER_LEN;
        for &h in info.headers.as_slice() {
            ext.parse_one(h, &buf[at..])?;
            at += h.len();
        }
        let header_len = at;
        need(Layer::Icrc, buf, header_len + ICRC_LEN)?;
        // IBTA 9.2.5 / 7.7.8: a packet is a whole number of 4-byte words.
        if buf.len() % 4 != 0 {
            return Err(Error::new(
                Layer::Payload,
                ErrorKind::NotWordAligned { len: buf.len() },
            ));
        }
        let icrc_at = buf.len() - ICRC_LEN;
        let body = &buf[header_len..icrc_at];
        let pad = bth.pad_count;
        let payload_len = body.len().checked_sub(usize::from(pad)).ok_or(Error::new(
            Layer::Payload,
            ErrorKind::PadExceedsPayload {
                pad,
                available: body.len(),
            },
        ))?;
        check_payload(info, payload_len)?;
        let c = &buf[icrc_at..];
        Ok(TransportPacket {
            repr: TransportRepr {
                bth,
                ext,
                payload_len,
            },
            info,
            header_len,
            payload: &body[..payload_len],
            icrc: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        })
    }

    /// The opcode's table entry.
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.bth.opcode.info().ok_or(Error::new(
            Layer::Bth,
            ErrorKind::UnknownOpcode(self.bth.opcode.0),
        ))
    }

    /// Bytes from the BTH through the ICRC.
    pub fn buffer_len(&self) -> Result<usize> {
        Ok(self.info()?.header_len()
            + self.payload_len
            + usize::from(pad_for(self.payload_len))
            + ICRC_LEN)
    }

    /// Checks that the headers present are exactly those the opcode needs,
    /// that the payload suits it, and that 24-bit fields fit.
    pub fn check(&self) -> Result<()> {
        let info = self.info()?;
        for h in ExtReprs::ALL {
            match (info.headers.contains(h), self.ext.has(h)) {
                (true, false) => return Err(Error::new(h.layer(), ErrorKind::MissingHeader(h))),
                (false, true) => return Err(Error::new(h.layer(), ErrorKind::UnexpectedHeader(h))),
                _ => {}
            }
        }
        if self.bth.dest_qp >= 1 << 24 {
            return Err(Error::bad_field(
                Layer::Bth,
                "DestQP",
                u64::from(self.bth.dest_qp),
            ));
        }
        if self.bth.psn >= 1 << 24 {
            return Err(Error::bad_field(Layer::Bth, "PSN", u64::from(self.bth.psn)));
        }
        check_payload(info, self.payload_len)
    }

    /// Writes BTH, extended headers, `payload` and a zero pad to the front of
    /// `buf`, and zeroes the ICRC slot (fill it with `icrc::fill` once the
    /// outer headers are known). Returns the bytes used (`buffer_len`).
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        self.check()?;
        if payload.len() != self.payload_len {
            return Err(Error::new(
                Layer::Payload,
                ErrorKind::PayloadLength {
                    expected: self.payload_len,
                    found: payload.len(),
                },
            ));
        }
        let info = self.info()?;
        let total = self.buffer_len()?;
        if buf.len() < total {
            return Err(Error::truncated(Layer::Bth, total, buf.len()));
        }
        let mut bth = self.bth;
        bth.pad_count = pad_for(self.payload_len);
        bth.emit(&mut Bth::new_unchecked(&mut buf[..bth::HEADER_LEN]));
        let mut at = bth::HEADER_LEN;
        for &h in info.headers.as_slice() {
            self.ext.emit_one(h, &mut buf[at..at + h.len()]);
            at += h.len();
        }
        buf[at..at + payload.len()].copy_from_slice(payload);
        at += payload.len();
        buf[at..total].fill(0);
        Ok(total)
    }
}

/// IBTA 9.2 Table 38 and 9.7.x: which opcodes carry a payload, and how much.
fn check_payload(info: &OpcodeInfo, len: usize) -> Result<()> {
    let err = |kind| Err(Error::new(Layer::Payload, kind));
    match info.payload {
        PayloadRule::None if len != 0 => err(ErrorKind::PayloadNotAllowed { len }),
        PayloadRule::Required if len == 0 => err(ErrorKind::PayloadRequired),
        PayloadRule::Exact(n) if len != usize::from(n) => err(ErrorKind::PayloadLength {
            expected: usize::from(n),
            found: len,
        }),
        _ => Ok(()),
    }
}
