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
        // Every 24-bit field, so that `emit` never truncates silently.
        let fits24 = |layer, field, v: u32| {
            if v >= 1 << 24 {
                Err(Error::bad_field(layer, field, u64::from(v)))
            } else {
                Ok(())
            }
        };
        fits24(Layer::Bth, "DestQP", self.bth.dest_qp)?;
        fits24(Layer::Bth, "PSN", self.bth.psn)?;
        let e = &self.ext;
        if let Some(x) = e.rdeth {
            fits24(Layer::Rdeth, "EECnxt", x.ee_context)?;
        }
        if let Some(x) = e.deth {
            fits24(Layer::Deth, "SrcQP", x.src_qp)?;
        }
        if let Some(x) = e.xrceth {
            fits24(Layer::Xrceth, "XRCSRQ", x.xrc_srq)?;
        }
        if let Some(x) = e.aeth {
            fits24(Layer::Aeth, "MSN", x.msn)?;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::aeth::Syndrome;
    use crate::wire::opcode::{self, Opcode};
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// An ExtReprs with every header present, arbitrary valid values.
    fn arb_all_ext() -> impl Strategy<Value = ExtReprs> {
        (
            0u32..1 << 24,
            (any::<u32>(), 0u32..1 << 24),
            0u32..1 << 24,
            (any::<u64>(), any::<u32>(), any::<u32>()),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
            (any::<u8>(), 0u32..1 << 24),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            (0u8..4, 0u8..16),
        )
            .prop_map(
                |(
                    ee,
                    (qkey, src_qp),
                    srq,
                    (va, rkey, len),
                    (ava, arkey, sa, cmp),
                    (syn, msn),
                    orig,
                    imm,
                    inv,
                    (sel, plt),
                )| {
                    ExtReprs {
                        rdeth: Some(RdethRepr { ee_context: ee }),
                        deth: Some(DethRepr { qkey, src_qp }),
                        xrceth: Some(XrcethRepr { xrc_srq: srq }),
                        reth: Some(RethRepr {
                            va,
                            rkey,
                            dma_len: len,
                        }),
                        atomic_eth: Some(AtomicEthRepr {
                            va: ava,
                            rkey: arkey,
                            swap_add: sa,
                            compare: cmp,
                        }),
                        aeth: Some(AethRepr {
                            syndrome: Syndrome::from_raw(syn),
                            msn,
                        }),
                        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: orig }),
                        immdt: Some(ImmDtRepr { imm }),
                        ieth: Some(IethRepr { rkey: inv }),
                        feth: Some(FethRepr {
                            selectivity_level: sel,
                            placement_type: plt,
                        }),
                    }
                },
            )
    }

    /// Keeps exactly the headers that `info` lists.
    pub(crate) fn only_listed(info: &OpcodeInfo, all: &ExtReprs) -> ExtReprs {
        let h = &info.headers;
        let keep = |x: ExtHeader| h.contains(x);
        ExtReprs {
            rdeth: all.rdeth.filter(|_| keep(ExtHeader::Rdeth)),
            deth: all.deth.filter(|_| keep(ExtHeader::Deth)),
            xrceth: all.xrceth.filter(|_| keep(ExtHeader::Xrceth)),
            reth: all.reth.filter(|_| keep(ExtHeader::Reth)),
            atomic_eth: all.atomic_eth.filter(|_| keep(ExtHeader::AtomicEth)),
            aeth: all.aeth.filter(|_| keep(ExtHeader::Aeth)),
            atomic_ack_eth: all.atomic_ack_eth.filter(|_| keep(ExtHeader::AtomicAckEth)),
            immdt: all.immdt.filter(|_| keep(ExtHeader::ImmDt)),
            ieth: all.ieth.filter(|_| keep(ExtHeader::Ieth)),
            feth: all.feth.filter(|_| keep(ExtHeader::Feth)),
        }
    }

    /// Fixed, recognisable values for every extended header.
    pub(crate) fn sample_ext() -> ExtReprs {
        ExtReprs {
            rdeth: Some(RdethRepr {
                ee_context: 0xabcdef,
            }),
            deth: Some(DethRepr {
                qkey: 0x1111_2222,
                src_qp: 0x00_0a0b,
            }),
            xrceth: Some(XrcethRepr { xrc_srq: 0x12_3456 }),
            reth: Some(RethRepr {
                va: 0x0000_7f12_3456_7890,
                rkey: 0x0000_1a2b,
                dma_len: 4096,
            }),
            atomic_eth: Some(AtomicEthRepr {
                va: 0x0000_5500_0000_1000,
                rkey: 0x0000_0d48,
                swap_add: 0x0102_0304_0506_0708,
                compare: 0x1112_1314_1516_1718,
            }),
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 5 },
                msn: 0x00_0102,
            }),
            atomic_ack_eth: Some(AtomicAckEthRepr {
                orig_data: 0xa1bd_d113_d63d_de29,
            }),
            immdt: Some(ImmDtRepr { imm: 0x1234_5678 }),
            ieth: Some(IethRepr { rkey: 0x0000_0a07 }),
            feth: Some(FethRepr {
                selectivity_level: 1,
                placement_type: 2,
            }),
        }
    }

    /// A BTH for `opcode` with fixed values.
    pub(crate) fn sample_bth(opcode: Opcode) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x00_1234,
            ack_req: true,
            psn: 0x00_abcd,
        }
    }

    /// A payload length that `info` accepts, near `want`.
    pub(crate) fn legal_len(info: &OpcodeInfo, want: usize) -> usize {
        match info.payload {
            PayloadRule::None => 0,
            PayloadRule::Optional => want,
            PayloadRule::Required => want.max(1),
            PayloadRule::Exact(n) => usize::from(n),
        }
    }

    /// A valid packet for `info` with fixed header values and a payload of
    /// about `want` bytes.
    pub(crate) fn sample_packet(info: &OpcodeInfo, want: usize) -> (TransportRepr, Vec<u8>) {
        let len = legal_len(info, want);
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let t = TransportRepr::new(
            sample_bth(Opcode(info.opcode)),
            only_listed(info, &sample_ext()),
            len,
        );
        (t, payload)
    }

    fn arb_bth(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
        (
            any::<[bool; 6]>(),
            any::<u16>(),
            0u32..1 << 24,
            0u32..1 << 24,
        )
            .prop_map(move |(f, pkey, dest_qp, psn)| BthRepr {
                opcode,
                solicited: f[0],
                mig_req: f[1],
                pad_count: 0,
                pkey,
                fecn: f[2],
                becn: f[3],
                dest_qp,
                ack_req: f[4],
                psn,
            })
    }

    fn arb_len(rule: PayloadRule) -> BoxedStrategy<usize> {
        match rule {
            PayloadRule::None => Just(0).boxed(),
            PayloadRule::Optional => prop_oneof![Just(0usize), 1usize..8, 0usize..=300].boxed(),
            PayloadRule::Required => prop_oneof![1usize..8, 1usize..=300].boxed(),
            PayloadRule::Exact(n) => Just(usize::from(n)).boxed(),
        }
    }

    /// An arbitrary valid transport packet of any defined opcode, with its
    /// payload: exactly the extended headers the opcode lists, arbitrary
    /// values, a payload length its rule allows (up to 300 bytes).
    pub(crate) fn arb_packet() -> impl Strategy<Value = (TransportRepr, Vec<u8>)> {
        let infos: Vec<&'static OpcodeInfo> = opcode::all().collect();
        proptest::sample::select(infos).prop_flat_map(|info| {
            (
                arb_bth(Opcode(info.opcode)),
                arb_all_ext(),
                arb_len(info.payload).prop_flat_map(|n| vec(any::<u8>(), n)),
            )
                .prop_map(move |(bth, all, payload)| {
                    let t = TransportRepr::new(bth, only_listed(info, &all), payload.len());
                    (t, payload)
                })
        })
    }

    /// Emits `t` with `payload` into a fresh buffer of exactly its length.
    pub(crate) fn emit_vec(t: &TransportRepr, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; t.buffer_len().unwrap()];
        let n = t.emit(&mut buf, payload).unwrap();
        assert_eq!(n, buf.len());
        buf
    }

    /// Raw bytes: BTH as given (pad count included), the opcode's headers
    /// from `ext`, `body` (payload and pad), and a zero ICRC. Bypasses the
    /// checks of `emit`, to build malformed packets.
    fn raw(bth: BthRepr, ext: &ExtReprs, body: &[u8]) -> Vec<u8> {
        let info = bth.opcode.info().unwrap();
        let mut v = vec![0u8; info.header_len()];
        bth.emit(&mut Bth::new_unchecked(&mut v[..bth::HEADER_LEN]));
        let mut at = bth::HEADER_LEN;
        for &h in info.headers.as_slice() {
            assert!(ext.emit_one(h, &mut v[at..at + h.len()]));
            at += h.len();
        }
        v.extend_from_slice(body);
        v.extend_from_slice(&[0; ICRC_LEN]);
        v
    }

    fn raw_for(op: Opcode, pad: u8, body: &[u8]) -> Vec<u8> {
        let mut bth = sample_bth(op);
        bth.pad_count = pad;
        raw(bth, &sample_ext(), body)
    }

    fn parse_err(b: &[u8]) -> Error {
        TransportRepr::parse(b).expect_err("parse should fail")
    }

    #[test]
    fn sample_send_only_parses() {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 5);
        let b = emit_vec(&t, &p);
        assert_eq!(b.len(), 12 + 5 + 3 + 4);
        assert_eq!(b[1] >> 4 & 3, 3, "pad count");
        let pkt = TransportRepr::parse(&b).unwrap();
        assert_eq!(pkt.repr, t);
        assert_eq!(pkt.payload, &p[..]);
        assert_eq!(pkt.header_len, 12);
        assert_eq!(pkt.icrc, 0);
        assert_eq!(pkt.info.opcode, 0x04);
    }

    #[test]
    fn truncated_bth() {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 0);
        let b = emit_vec(&t, &p);
        for n in 0..bth::HEADER_LEN {
            assert_eq!(parse_err(&b[..n]), Error::truncated(Layer::Bth, 12, n));
        }
    }

    /// Cutting a packet inside any extended header names that header.
    #[test]
    fn truncated_inside_each_extended_header() {
        let mut seen = Vec::new();
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 4);
            let b = emit_vec(&t, &p);
            let mut at = bth::HEADER_LEN;
            for &h in info.headers.as_slice() {
                for k in 0..h.len() {
                    assert_eq!(
                        parse_err(&b[..at + k]),
                        Error::truncated(h.layer(), h.len(), k),
                        "{:#04x} cut {k} bytes into {h:?}",
                        info.opcode
                    );
                }
                if !seen.contains(&h) {
                    seen.push(h);
                }
                at += h.len();
            }
            // Headers complete, ICRC missing or partial.
            for k in 0..ICRC_LEN {
                let e = parse_err(&b[..at + k]);
                assert_eq!(e.layer, Layer::Icrc, "{:#04x}", info.opcode);
                assert!(matches!(e.kind, ErrorKind::Truncated { .. }));
            }
        }
        assert_eq!(
            seen.len(),
            ExtReprs::ALL.len(),
            "every header kind: {seen:?}"
        );
    }

    #[test]
    fn unknown_opcodes() {
        let mut n = 0;
        for op in 0..=255u8 {
            if Opcode(op).info().is_some() {
                continue;
            }
            n += 1;
            let mut b = [0u8; 16];
            b[0] = op;
            assert_eq!(
                parse_err(&b),
                Error::new(Layer::Bth, ErrorKind::UnknownOpcode(op))
            );
        }
        assert_eq!(n, 256 - opcode::all().count());
    }

    #[test]
    fn nonzero_tver() {
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 8);
        let mut b = emit_vec(&t, &p);
        for tver in 1..16u8 {
            b[1] = (b[1] & 0xf0) | tver;
            assert_eq!(
                parse_err(&b),
                Error::bad_field(Layer::Bth, "TVer", u64::from(tver))
            );
        }
    }

    #[test]
    fn pad_count_larger_than_payload() {
        for pad in 1..4 {
            assert_eq!(
                parse_err(&raw_for(Opcode::RC_SEND_ONLY, pad, &[])),
                Error::new(
                    Layer::Payload,
                    ErrorKind::PadExceedsPayload { pad, available: 0 }
                )
            );
            // An ACK carries no payload: any pad count overruns it.
            assert_eq!(
                parse_err(&raw_for(Opcode::RC_ACKNOWLEDGE, pad, &[])),
                Error::new(
                    Layer::Payload,
                    ErrorKind::PadExceedsPayload { pad, available: 0 }
                )
            );
        }
        // Pad 3 over a 4-byte body leaves one payload byte: fine.
        let b = raw_for(Opcode::RC_SEND_ONLY, 3, &[9, 0, 0, 0]);
        let p = TransportRepr::parse(&b).unwrap();
        assert_eq!(p.payload, &[9]);
    }

    #[test]
    fn payload_not_allowed() {
        for op in [
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_FETCH_ADD,
            Opcode::RC_FLUSH,
            Opcode(0x55), // RD RESYNC
        ] {
            assert_eq!(
                parse_err(&raw_for(op, 0, &[1, 2, 3, 4])),
                Error::new(Layer::Payload, ErrorKind::PayloadNotAllowed { len: 4 }),
                "{op}"
            );
            assert_eq!(
                parse_err(&raw_for(op, 1, &[1, 2, 3, 4, 5, 6, 7, 8])),
                Error::new(Layer::Payload, ErrorKind::PayloadNotAllowed { len: 7 }),
                "{op}"
            );
            TransportRepr::parse(&raw_for(op, 0, &[])).unwrap();
        }
        // Every opcode with PayloadRule::None.
        for info in opcode::all().filter(|i| i.payload == PayloadRule::None) {
            assert_eq!(
                parse_err(&raw_for(Opcode(info.opcode), 0, &[0; 4])).kind,
                ErrorKind::PayloadNotAllowed { len: 4 },
                "{:#04x}",
                info.opcode
            );
        }
    }

    #[test]
    fn payload_required() {
        for info in opcode::all().filter(|i| i.payload == PayloadRule::Required) {
            assert_eq!(
                parse_err(&raw_for(Opcode(info.opcode), 0, &[])),
                Error::new(Layer::Payload, ErrorKind::PayloadRequired),
                "{:#04x}",
                info.opcode
            );
        }
        for op in [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::UC_SEND_FIRST,
        ] {
            assert_eq!(
                parse_err(&raw_for(op, 0, &[])).kind,
                ErrorKind::PayloadRequired
            );
            TransportRepr::parse(&raw_for(op, 3, &[1, 0, 0, 0])).unwrap();
        }
    }

    #[test]
    fn atomic_write_needs_eight_bytes() {
        let op = Opcode::RC_ATOMIC_WRITE;
        for (pad, body, found) in [
            (0u8, 0usize, 0usize),
            (0, 4, 4),
            (0, 12, 12),
            (1, 8, 7),
            (3, 12, 9),
        ] {
            assert_eq!(
                parse_err(&raw_for(op, pad, &vec![0xaa; body])),
                Error::new(
                    Layer::Payload,
                    ErrorKind::PayloadLength { expected: 8, found }
                ),
                "pad {pad} body {body}"
            );
        }
        let b = raw_for(op, 0, &[7; 8]);
        let p = TransportRepr::parse(&b).unwrap();
        assert_eq!(p.payload, &[7; 8]);
        // And CNP: exactly 16 reserved bytes.
        assert_eq!(
            parse_err(&raw_for(Opcode::CNP, 0, &[0; 12])).kind,
            ErrorKind::PayloadLength {
                expected: 16,
                found: 12
            }
        );
        TransportRepr::parse(&raw_for(Opcode::CNP, 0, &[0; 16])).unwrap();
    }

    #[test]
    fn length_not_a_multiple_of_four() {
        let good = raw_for(Opcode::RC_SEND_ONLY, 0, &[1; 8]);
        for extra in 1..4 {
            let mut b = good.clone();
            b.extend(std::iter::repeat_n(0, extra));
            let len = b.len();
            assert_eq!(
                parse_err(&b),
                Error::new(Layer::Payload, ErrorKind::NotWordAligned { len })
            );
        }
        // An ACK with a stray byte.
        let mut b = raw_for(Opcode::RC_ACKNOWLEDGE, 0, &[]);
        b.push(0);
        assert_eq!(parse_err(&b).kind, ErrorKind::NotWordAligned { len: 21 });
    }

    #[test]
    fn check_finds_missing_and_unexpected_headers() {
        let write_first = Opcode::RC_RDMA_WRITE_FIRST.info().unwrap();
        let (mut t, _) = sample_packet(write_first, 16);
        t.check().unwrap();
        t.ext.reth = None;
        assert_eq!(
            t.check(),
            Err(Error::new(
                Layer::Reth,
                ErrorKind::MissingHeader(ExtHeader::Reth)
            ))
        );
        let mut buf = [0u8; 64];
        assert_eq!(t.emit(&mut buf, &[0; 16]), Err(t.check().unwrap_err()));

        let (mut t, _) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 4);
        t.ext.immdt = Some(ImmDtRepr { imm: 1 });
        assert_eq!(
            t.check(),
            Err(Error::new(
                Layer::ImmDt,
                ErrorKind::UnexpectedHeader(ExtHeader::ImmDt)
            ))
        );

        // For every opcode: dropping any listed header, or adding any other
        // one, is caught and names that header.
        for info in opcode::all() {
            let (t, _) = sample_packet(info, 4);
            t.check().unwrap();
            for h in ExtReprs::ALL {
                let mut u = t;
                if info.headers.contains(h) {
                    u.ext = drop_header(&t.ext, h);
                    assert_eq!(
                        u.check(),
                        Err(Error::new(h.layer(), ErrorKind::MissingHeader(h)))
                    );
                } else {
                    u.ext = add_header(&t.ext, h);
                    assert_eq!(
                        u.check(),
                        Err(Error::new(h.layer(), ErrorKind::UnexpectedHeader(h)))
                    );
                }
            }
        }
    }

    fn drop_header(e: &ExtReprs, h: ExtHeader) -> ExtReprs {
        let mut e = *e;
        match h {
            ExtHeader::Rdeth => e.rdeth = None,
            ExtHeader::Deth => e.deth = None,
            ExtHeader::Xrceth => e.xrceth = None,
            ExtHeader::Reth => e.reth = None,
            ExtHeader::AtomicEth => e.atomic_eth = None,
            ExtHeader::Aeth => e.aeth = None,
            ExtHeader::AtomicAckEth => e.atomic_ack_eth = None,
            ExtHeader::ImmDt => e.immdt = None,
            ExtHeader::Ieth => e.ieth = None,
            ExtHeader::Feth => e.feth = None,
        }
        e
    }

    fn add_header(e: &ExtReprs, h: ExtHeader) -> ExtReprs {
        let s = sample_ext();
        let mut e = *e;
        match h {
            ExtHeader::Rdeth => e.rdeth = s.rdeth,
            ExtHeader::Deth => e.deth = s.deth,
            ExtHeader::Xrceth => e.xrceth = s.xrceth,
            ExtHeader::Reth => e.reth = s.reth,
            ExtHeader::AtomicEth => e.atomic_eth = s.atomic_eth,
            ExtHeader::Aeth => e.aeth = s.aeth,
            ExtHeader::AtomicAckEth => e.atomic_ack_eth = s.atomic_ack_eth,
            ExtHeader::ImmDt => e.immdt = s.immdt,
            ExtHeader::Ieth => e.ieth = s.ieth,
            ExtHeader::Feth => e.feth = s.feth,
        }
        e
    }

    #[test]
    fn check_refuses_24_bit_overflow() {
        let info = Opcode::RC_SEND_ONLY.info().unwrap();
        let (t, _) = sample_packet(info, 0);
        let mut u = t;
        u.bth.dest_qp = 1 << 24;
        assert_eq!(
            u.check(),
            Err(Error::bad_field(Layer::Bth, "DestQP", 1 << 24))
        );
        u.bth.dest_qp = (1 << 24) - 1;
        u.check().unwrap();
        u.bth.psn = u32::MAX;
        assert_eq!(
            u.check(),
            Err(Error::bad_field(Layer::Bth, "PSN", u64::from(u32::MAX)))
        );
        assert_eq!(u.emit(&mut [0u8; 64], &[]), Err(u.check().unwrap_err()));

        // The 24-bit fields of the extended headers too.
        let (mut t, _) = sample_packet(Opcode(0x51).info().unwrap(), 0); // RD Acknowledge
        t.ext.rdeth = Some(RdethRepr {
            ee_context: 1 << 24,
        });
        assert_eq!(
            t.check(),
            Err(Error::bad_field(Layer::Rdeth, "EECnxt", 1 << 24))
        );
        t.ext.rdeth = Some(RdethRepr { ee_context: 1 });
        t.ext.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_CREDITS_INVALID,
            msn: 0x0100_0000,
        });
        assert_eq!(
            t.check(),
            Err(Error::bad_field(Layer::Aeth, "MSN", 1 << 24))
        );
        let (mut t, _) = sample_packet(Opcode::UD_SEND_ONLY.info().unwrap(), 0);
        t.ext.deth = Some(DethRepr {
            qkey: 0,
            src_qp: 0xff00_0000,
        });
        assert_eq!(
            t.check(),
            Err(Error::bad_field(Layer::Deth, "SrcQP", 0xff00_0000))
        );
        let (mut t, _) = sample_packet(Opcode(0xa4).info().unwrap(), 0); // XRC SEND Only
        t.ext.xrceth = Some(XrcethRepr { xrc_srq: 1 << 30 });
        assert_eq!(
            t.check(),
            Err(Error::bad_field(Layer::Xrceth, "XRCSRQ", 1 << 30))
        );
    }

    #[test]
    fn check_and_emit_refuse_bad_payloads() {
        let (mut t, _) = sample_packet(Opcode::RC_ACKNOWLEDGE.info().unwrap(), 0);
        t.payload_len = 4;
        assert_eq!(
            t.check(),
            Err(Error::new(
                Layer::Payload,
                ErrorKind::PayloadNotAllowed { len: 4 }
            ))
        );
        let (mut t, _) = sample_packet(Opcode::RC_SEND_MIDDLE.info().unwrap(), 4);
        t.payload_len = 0;
        assert_eq!(
            t.check(),
            Err(Error::new(Layer::Payload, ErrorKind::PayloadRequired))
        );
        let (mut t, _) = sample_packet(Opcode::RC_ATOMIC_WRITE.info().unwrap(), 0);
        t.payload_len = 7;
        assert_eq!(
            t.check(),
            Err(Error::new(
                Layer::Payload,
                ErrorKind::PayloadLength {
                    expected: 8,
                    found: 7
                }
            ))
        );
        // A payload slice that disagrees with payload_len.
        let (t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 10);
        let mut buf = [0u8; 64];
        assert_eq!(
            t.emit(&mut buf, &p[..9]),
            Err(Error::new(
                Layer::Payload,
                ErrorKind::PayloadLength {
                    expected: 10,
                    found: 9
                }
            ))
        );
        // An undefined opcode.
        let mut u = t;
        u.bth.opcode = Opcode(0x15);
        let e = Error::new(Layer::Bth, ErrorKind::UnknownOpcode(0x15));
        assert_eq!(u.check(), Err(e));
        assert_eq!(u.buffer_len(), Err(e));
        assert_eq!(u.emit(&mut buf, &p), Err(e));
    }

    #[test]
    fn emit_into_small_buffers_fails_cleanly() {
        for info in opcode::all() {
            let (t, p) = sample_packet(info, 13);
            let total = t.buffer_len().unwrap();
            for n in 0..total {
                let mut buf = vec![0xeeu8; n];
                assert_eq!(
                    t.emit(&mut buf, &p),
                    Err(Error::truncated(Layer::Bth, total, n)),
                    "{:#04x} into {n}",
                    info.opcode
                );
                assert!(buf.iter().all(|&b| b == 0xee), "wrote into a short buffer");
            }
            // A larger buffer: only the first `total` bytes are touched.
            let mut buf = vec![0xeeu8; total + 7];
            assert_eq!(t.emit(&mut buf, &p), Ok(total));
            assert!(buf[total..].iter().all(|&b| b == 0xee));
            assert_eq!(TransportRepr::parse(&buf[..total]).unwrap().repr, t);
        }
    }

    #[test]
    fn emit_fixes_the_pad_count() {
        let (mut t, p) = sample_packet(Opcode::RC_SEND_ONLY.info().unwrap(), 6);
        t.bth.pad_count = 0; // stale
        let b = emit_vec(&t, &p);
        let parsed = TransportRepr::parse(&b).unwrap();
        assert_eq!(parsed.repr.bth.pad_count, 2);
        assert_eq!(&b[b.len() - 6..], &[0; 6], "pad and ICRC slot are zero");
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip((t, payload) in arb_packet()) {
            t.check().unwrap();
            let b = emit_vec(&t, &payload);
            prop_assert_eq!(b.len() % 4, 0);
            prop_assert_eq!(b.len(), t.buffer_len().unwrap());
            let p = TransportRepr::parse(&b).unwrap();
            prop_assert_eq!(p.repr, t);
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(p.info.opcode, t.bth.opcode.0);
            prop_assert_eq!(p.header_len, p.info.header_len());
            prop_assert_eq!(p.icrc, 0);
        }

        #[test]
        fn parse_never_panics(bytes in vec(any::<u8>(), 0..200)) {
            if let Ok(p) = TransportRepr::parse(&bytes) {
                // Whatever parses is self-consistent and re-emits to the
                // same headers and payload (reserved bits aside).
                prop_assert!(p.header_len + p.payload.len() + ICRC_LEN <= bytes.len());
                p.repr.check().unwrap();
            }
        }

        #[test]
        fn parse_never_panics_on_valid_headers_with_noise(
            (t, payload) in arb_packet(),
            cut in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            x in 1u8..=255,
        ) {
            let mut b = emit_vec(&t, &payload);
            let i = at.index(b.len());
            b[i] ^= x;
            let _ = TransportRepr::parse(&b);
            let n = cut.index(b.len() + 1);
            let _ = TransportRepr::parse(&b[..n]);
        }
    }
}
