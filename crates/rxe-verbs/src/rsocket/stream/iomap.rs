//! The I/O map (`riomap`, `riounmap`, `riowrite`): one side registers a
//! piece of its memory and announces it into the other side's I/O map (an
//! array after the target SGL, its size agreed in the connection data);
//! the other side then RDMA WRITEs straight into it at an offset of that
//! mapped space, with no immediate and no receive consumed: the bytes
//! appear in the mapper's memory, which it watches itself (riostream spins
//! on the last byte).

use std::sync::{Arc, MutexGuard};

use crate::shared_buffer::RegionBytes;
use crate::{AccessFlags, Mr, SendOp, SendWr};

use super::{next_size, RStream, State, OLAP_START_SIZE, SGL_SIZE};
use crate::rsocket::wire::*;
use crate::rsocket::RsError;

/// One `riomap`.
pub(in crate::rsocket) struct Mapping {
    pub(super) mr: Mr,
    /// Where it sits in this side's mapped space.
    offset: u64,
    /// Its entry in the peer's I/O map (only a mapping the peer may write
    /// has one).
    slot: Option<u32>,
    /// The peer has been told (an IOMAP_SGL write).
    announced: bool,
}

impl RStream {
    /// `riomap`: registers `bytes` (writable by the peer if `writable`) at
    /// `offset` of this side's mapped space, or at its own address when
    /// `None`; a writable mapping is announced to the peer before the next
    /// send. Returns the offset.
    pub fn iomap(
        &self,
        bytes: Arc<dyn RegionBytes>,
        writable: bool,
        offset: Option<u64>,
    ) -> Result<u64, RsError> {
        let mut st = self.lock();
        let slot = if writable {
            let used: Vec<u32> = st.maps.iter().filter_map(|m| m.slot).collect();
            Some(
                (0..st.remote_iomap.length)
                    .find(|i| !used.contains(i))
                    .ok_or(RsError::NoIomapRoom)?,
            )
        } else {
            None
        };
        let access = if writable {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
        } else {
            AccessFlags::LOCAL_WRITE
        };
        let mr = self.res.pd.reg_mr_with(bytes, None, access)?;
        let offset = offset.unwrap_or(mr.addr());
        st.maps.push(Mapping {
            mr,
            offset,
            slot,
            announced: false,
        });
        Ok(offset)
    }

    /// `riounmap`: ends the mapping of exactly `len` bytes at `addr`.
    pub fn iounmap(&self, addr: u64, len: usize) -> Result<(), RsError> {
        let mut st = self.lock();
        let i = st
            .maps
            .iter()
            .position(|m| m.mr.addr() == addr && m.mr.len() == len)
            .ok_or(RsError::NotMapped)?;
        let m = st.maps.remove(i);
        m.mr.dereg_in_place()?;
        Ok(())
    }

    /// `rs_send_iomaps`: tells the peer of every writable mapping it has
    /// not heard of, each an RDMA WRITE with immediate of its entry into
    /// the peer's I/O map (a message credit each, as librdmacm counts it).
    pub(super) fn send_iomaps(&self, nonblock: bool) -> Result<MutexGuard<'_, State>, RsError> {
        let mut st = self.lock();
        loop {
            let Some(i) = st
                .maps
                .iter()
                .position(|m| m.slot.is_some() && !m.announced)
            else {
                return Ok(st);
            };
            if !self.can_send(&st) {
                drop(st);
                st = self.wait(nonblock, |s| self.can_send(s) || !s.writable)?;
                if !st.writable {
                    return Err(RsError::Reset);
                }
                continue;
            }
            let m = &st.maps[i];
            let slot = m.slot.unwrap_or(0);
            let entry = RsIomap {
                offset: m.offset,
                sge: RsSge {
                    addr: m.mr.addr(),
                    key: m.mr.rkey(),
                    length: m.mr.len() as u32,
                },
            };
            let bytes = entry.to_bytes(HOST_IS_NET != st.swap_sgl);
            let data = self.stage(&mut st, &bytes)?;
            st.sseq_no = st.sseq_no.wrapping_add(1);
            st.sqe_avail -= 1;
            st.sbuf_bytes_avail -= IOMAP_LEN as u32;
            let at = st
                .remote_iomap
                .addr
                .wrapping_add(u64::from(slot) * IOMAP_LEN as u64);
            let key = st.remote_iomap.key;
            self.post_write_msg(data, msg(MsgOp::IomapSgl, slot), at, key)?;
            st.maps[i].announced = true;
        }
    }

    /// The peer's mapping that holds `offset`, from our I/O map (which the
    /// peer writes, in our byte order: any values, so the arithmetic on
    /// them saturates or wraps; the peer's own R_Key checks judge them).
    fn find_iomap(&self, st: &State, offset: u64) -> Result<Option<RsIomap>, RsError> {
        for i in 0..st.iomap_size as usize {
            let mut b = [0u8; IOMAP_LEN];
            self.res
                .target
                .read(SGL_SIZE as usize * SGE_LEN + i * IOMAP_LEN, &mut b)?;
            let e = RsIomap::from_bytes(&b, HOST_IS_NET);
            if e.sge.length > 0
                && offset >= e.offset
                && offset < e.offset.saturating_add(u64::from(e.sge.length))
            {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// `riowrite`: `buf` into the peer's mapped space at `offset`, in
    /// writes of growing size as send buffer space allows; stops at the
    /// end of the peer's mappings. Returns how much was written.
    pub fn iowrite(&self, buf: &[u8], offset: u64, nonblock: bool) -> Result<usize, RsError> {
        let mut st = self.lock();
        if !st.writable {
            return Err(RsError::Pipe);
        }
        if st.iomap_pending_any() {
            drop(st);
            st = self.send_iomaps(nonblock)?;
        }
        let (mut off, mut olen) = (0usize, OLAP_START_SIZE);
        let mut iom: Option<RsIomap> = None;
        while off < buf.len() {
            let at = offset.wrapping_add(off as u64);
            let m = match iom {
                Some(m)
                    if at >= m.offset && at < m.offset.saturating_add(u64::from(m.sge.length)) =>
                {
                    m
                }
                _ => match self.find_iomap(&st, at)? {
                    Some(m) => m,
                    None => break,
                },
            };
            iom = Some(m);
            st = match self.room_to_send(st, nonblock, off) {
                Ok(g) => g,
                Err(r) => return r,
            };
            let mut xfer = next_size(&mut olen, buf.len() - off);
            let room = (m.offset.saturating_add(u64::from(m.sge.length)) - at)
                .min(u64::from(u32::MAX)) as u32;
            xfer = xfer.min(st.sbuf_bytes_avail).min(room);
            let data = self.stage(&mut st, &buf[off..off + xfer as usize])?;
            st.sqe_avail -= 1;
            st.sbuf_bytes_avail -= xfer;
            self.res.qp.post_send(SendWr {
                wr_id: u64::from(msg(MsgOp::Write, xfer)),
                op: SendOp::RdmaWrite {
                    remote_addr: m.sge.addr.wrapping_add(at - m.offset),
                    rkey: m.sge.key,
                },
                data,
                signaled: true,
                fence: false,
                solicited: false,
                ud: None,
            })?;
            off += xfer as usize;
        }
        Ok(off)
    }
}

impl State {
    pub(super) fn iomap_pending_any(&self) -> bool {
        self.maps.iter().any(|m| m.slot.is_some() && !m.announced)
    }
}
