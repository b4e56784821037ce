//! The two things rsockets put on the wire besides data: the connection
//! data carried in the REQ's and REP's private data, and the 32-bit
//! immediate of every RDMA WRITE with immediate. Both are librdmacm's own
//! format (its `rsocket.c`), not IBTA's; the field meanings below are read
//! from that source, the code is this project's.

/// Bytes of [`ConnData`] in the private data (AF_INET/AF_INET6 IDs carry
/// it at offset 0, after the CM's IP header).
pub const CONN_DATA_LEN: usize = 40;

/// The only protocol version librdmacm speaks; anything else is rejected.
pub const VERSION: u8 = 1;

/// The sender's target-SGL entries are in network order (a big-endian
/// host); otherwise host order, which the other side swaps if it differs.
pub const FLAG_NET: u8 = 1 << 0;
/// The connection data describes an I/O map area after the target SGL.
pub const FLAG_IOMAP: u8 = 1 << 1;

/// Bytes of one [`RsSge`] as it sits in memory the peer writes.
pub const SGE_LEN: usize = 16;

/// `struct rs_sge`: a remote buffer (address, R_Key, length).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RsSge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl RsSge {
    /// The 16 bytes as a host of the given byte order lays them out
    /// (`big`: network order).
    pub fn to_bytes(self, big: bool) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        if big {
            b[0..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.key.to_be_bytes());
            b[12..16].copy_from_slice(&self.length.to_be_bytes());
        } else {
            b[0..8].copy_from_slice(&self.addr.to_le_bytes());
            b[8..12].copy_from_slice(&self.key.to_le_bytes());
            b[12..16].copy_from_slice(&self.length.to_le_bytes());
        }
        b
    }

    /// The inverse of [`RsSge::to_bytes`].
    pub fn from_bytes(b: &[u8; SGE_LEN], big: bool) -> RsSge {
        let (a, k, l) = (
            <[u8; 8]>::try_from(&b[0..8]).unwrap_or_default(),
            <[u8; 4]>::try_from(&b[8..12]).unwrap_or_default(),
            <[u8; 4]>::try_from(&b[12..16]).unwrap_or_default(),
        );
        if big {
            RsSge {
                addr: u64::from_be_bytes(a),
                key: u32::from_be_bytes(k),
                length: u32::from_be_bytes(l),
            }
        } else {
            RsSge {
                addr: u64::from_le_bytes(a),
                key: u32::from_le_bytes(k),
                length: u32::from_le_bytes(l),
            }
        }
    }
}

/// Bytes of one I/O map entry (`struct rs_iomap`: the mapping's offset,
/// then its [`RsSge`]).
pub const IOMAP_LEN: usize = 8 + SGE_LEN;

/// `struct rs_iomap`: bytes at `offset` of the peer's mapped space live
/// at `sge`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RsIomap {
    pub offset: u64,
    pub sge: RsSge,
}

impl RsIomap {
    pub fn to_bytes(self, big: bool) -> [u8; IOMAP_LEN] {
        let mut b = [0u8; IOMAP_LEN];
        b[..8].copy_from_slice(&if big {
            self.offset.to_be_bytes()
        } else {
            self.offset.to_le_bytes()
        });
        b[8..].copy_from_slice(&self.sge.to_bytes(big));
        b
    }

    pub fn from_bytes(b: &[u8; IOMAP_LEN], big: bool) -> RsIomap {
        let o = <[u8; 8]>::try_from(&b[..8]).unwrap_or_default();
        let s = <[u8; SGE_LEN]>::try_from(&b[8..]).unwrap_or_default();
        RsIomap {
            offset: if big {
                u64::from_be_bytes(o)
            } else {
                u64::from_le_bytes(o)
            },
            sge: RsSge::from_bytes(&s, big),
        }
    }
}

/// The connection data's I/O map size, an 8-bit scale: up to 128 as is,
/// above that the top bit set and the count in units of 256
/// (librdmacm's `rs_value_to_scale`).
pub fn value_to_scale(v: u32) -> u8 {
    if v <= 128 {
        v as u8
    } else {
        (128 | (v >> 8).min(127)) as u8
    }
}

/// The inverse of [`value_to_scale`] (`rs_scale_to_value`).
pub fn scale_to_value(s: u8) -> u32 {
    if s <= 128 {
        u32::from(s)
    } else {
        u32::from(s & 0x7F) << 8
    }
}

/// Is this host big-endian (librdmacm's `rs_host_is_net`)?
pub const HOST_IS_NET: bool = cfg!(target_endian = "big");

/// `struct rs_conn_data`, always in network order on the wire:
/// version, flags, the receive credits (the receive queue's depth), the
/// I/O map size (a log2 scale), where the peer may write buffer updates
/// (`target_sgl`: the address of an array of `length` [`RsSge`]s) and the
/// first half of the receive buffer (`data_buf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    pub credits: u16,
    pub target_iomap_size: u8,
    pub target_sgl: RsSge,
    pub data_buf: RsSge,
}

impl ConnData {
    pub fn to_bytes(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // b[4..7] reserved.
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_bytes(true));
        b[24..40].copy_from_slice(&self.data_buf.to_bytes(true));
        b
    }

    /// `None` when shorter than [`CONN_DATA_LEN`]; the version is the
    /// caller's to check.
    pub fn parse(b: &[u8]) -> Option<ConnData> {
        let b: &[u8; CONN_DATA_LEN] = b.get(..CONN_DATA_LEN)?.try_into().ok()?;
        let sge = |r: std::ops::Range<usize>| -> Option<RsSge> {
            Some(RsSge::from_bytes(b[r].try_into().ok()?, true))
        };
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8..24)?,
            data_buf: sge(24..40)?,
        })
    }
}

/// What an immediate carries, in its top three bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgOp {
    /// Bits 28..0: bytes just written into the receive buffer.
    Data,
    /// Bits 28..0: the new send sequence limit (credits); the WRITE's
    /// payload, if any, was a fresh target SGE.
    Sgl,
    /// Bits 15..0: the I/O map entry just updated.
    IomapSgl,
    /// Bits 28..0: a control code (`CTRL_DISCONNECT`, ...).
    Ctrl,
    /// A plain RDMA WRITE into a mapped area (`riowrite`); never sent as
    /// an immediate, only the work request's own tag.
    Write,
    /// Reserved codes (1, 3, 5).
    Other(u8),
}

impl MsgOp {
    fn code(self) -> u32 {
        match self {
            MsgOp::Data => 0,
            MsgOp::Write => 2,
            MsgOp::Sgl => 4,
            MsgOp::IomapSgl => 6,
            MsgOp::Ctrl => 7,
            MsgOp::Other(c) => u32::from(c & 7),
        }
    }
}

/// Control codes ([`MsgOp::Ctrl`]).
pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_KEEPALIVE: u32 = 1;
pub const CTRL_SHUTDOWN: u32 = 2;

/// The 29 data bits of an immediate.
pub const MSG_DATA_MASK: u32 = 0x1FFF_FFFF;

/// An immediate (host order; the verbs put it on the wire big-endian).
pub fn msg(op: MsgOp, data: u32) -> u32 {
    (op.code() << 29) | (data & MSG_DATA_MASK)
}

/// The operation and data of an immediate.
pub fn parse_msg(imm: u32) -> (MsgOp, u32) {
    let op = match imm >> 29 {
        0 => MsgOp::Data,
        2 => MsgOp::Write,
        4 => MsgOp::Sgl,
        6 => MsgOp::IomapSgl,
        7 => MsgOp::Ctrl,
        c => MsgOp::Other(c as u8),
    };
    (op, imm & MSG_DATA_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_is_network_order_with_reserved_bytes_zero() {
        let c = ConnData {
            version: VERSION,
            flags: FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: RsSge {
                addr: 0x1122_3344_5566_7788,
                key: 0xAABB_CCDD,
                length: 2,
            },
            data_buf: RsSge {
                addr: 0x1000,
                key: 7,
                length: 65536,
            },
        };
        let b = c.to_bytes();
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&b[16..20], &0xAABB_CCDDu32.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(&b[36..40], &65536u32.to_be_bytes());
        assert_eq!(ConnData::parse(&b), Some(c));
        assert_eq!(ConnData::parse(&b[..39]), None);
    }

    #[test]
    fn an_sge_round_trips_in_either_order() {
        let s = RsSge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0A0B_0C0D,
            length: 0x1000,
        };
        for big in [false, true] {
            assert_eq!(RsSge::from_bytes(&s.to_bytes(big), big), s);
        }
        assert_eq!(s.to_bytes(false)[0], 0x08);
        assert_eq!(s.to_bytes(true)[0], 0x01);
    }

    #[test]
    fn iomap_entries_and_sizes() {
        let m = RsIomap {
            offset: 0x10,
            sge: RsSge {
                addr: 0x7000,
                key: 9,
                length: 4096,
            },
        };
        assert_eq!(RsIomap::from_bytes(&m.to_bytes(false), false), m);
        assert_eq!(m.to_bytes(true)[7], 0x10);
        for v in [0, 1, 64, 128] {
            assert_eq!(scale_to_value(value_to_scale(v)), v);
        }
        assert_eq!(value_to_scale(512), 130);
        assert_eq!(scale_to_value(130), 512);
        // Between steps of 256, rounded down, as librdmacm's.
        assert_eq!(scale_to_value(value_to_scale(700)), 512);
    }

    #[test]
    fn immediates_keep_op_and_29_bits() {
        assert_eq!(msg(MsgOp::Data, 4096), 4096);
        assert_eq!(msg(MsgOp::Sgl, 768), 0x8000_0300);
        assert_eq!(msg(MsgOp::Ctrl, CTRL_SHUTDOWN), 0xE000_0002);
        assert_eq!(parse_msg(0xE000_0000), (MsgOp::Ctrl, CTRL_DISCONNECT));
        assert_eq!(parse_msg(0x2000_0001), (MsgOp::Other(1), 1));
        assert_eq!(
            parse_msg(msg(MsgOp::Data, u32::MAX)),
            (MsgOp::Data, MSG_DATA_MASK)
        );
    }
}
