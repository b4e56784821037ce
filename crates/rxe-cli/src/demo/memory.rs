//! The demo's steps 7 to 10, the memory operations beyond the basic
//! verbs: FAST REG, ATOMIC WRITE, FLUSH and MEMORY WINDOW (bind, a WRITE
//! through the window's R_Key, LOCAL_INV, the same WRITE refused).

use super::*;

impl Demo<'_> {
    /// B registers a region allocated for fast registration with a REG_MR
    /// work request (no packet: a local operation of its send queue), then
    /// A reads through the new key.
    pub(super) fn fast_reg(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let data = text(64, "FAST REG");
        let fr = b.pd.alloc_mr(4096)?;
        fr.write(0, &data)?;
        let iova = 0xfa57_0000;
        let key = fr.next_key();
        b.rc.post_send(send_wr(
            7,
            fr.reg_op(
                key,
                iova,
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            ),
            SendData::Sges(vec![]),
        ))?;
        expect_wc(&b.cq, WcOpcode::RegMr, "B")?;
        a.mr.fill(4096, data.len(), 0)?;
        a.rc.post_send(send_wr(
            7,
            SendOp::RdmaRead {
                remote_addr: iova,
                rkey: key,
            },
            SendData::Sges(vec![a.mr.sge(4096, data.len() as u32)]),
        ))?;
        expect_wc(&a.cq, WcOpcode::RdmaRead, "A")?;
        let mut got = vec![0u8; data.len()];
        a.mr.read(4096, &mut got)?;
        ensure!(
            got == data,
            "A's buffer does not hold the fast-registered bytes"
        );
        Ok(format!(
            "B's REG_MR (a local operation, no packet) mapped its region at 0x{iova:x} under R_Key 0x{key:08x}; A's READ through that key got the 64 bytes."
        ))
    }

    /// IBTA 1.5 ATOMIC WRITE: 8 bytes placed as one, answered by an empty
    /// READ response.
    pub(super) fn atomic_write(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let v: u64 = 0x0a70_3170_0000_0008;
        let at = ATOMIC_AT + 8;
        a.rc.post_send(send_wr(
            8,
            SendOp::AtomicWrite {
                remote_addr: b.mr.addr() + at as u64,
                rkey: b.mr.rkey(),
            },
            SendData::Inline(v.to_ne_bytes()[..].into()),
        ))?;
        expect_wc(&a.cq, WcOpcode::AtomicWrite, "A")?;
        let now = b.mr.load_u64(at)?;
        ensure!(now == v, "B's word is 0x{now:x}, expected 0x{v:x}");
        Ok(format!(
            "B's word at offset {at} became 0x{v:016x} in one 8-byte store; the answer is an RDMA READ response without payload."
        ))
    }

    /// IBTA 1.5 FLUSH of the range just written, for global visibility.
    pub(super) fn flush(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        a.rc.post_send(send_wr(
            9,
            SendOp::Flush {
                remote_addr: b.mr.addr() + ATOMIC_AT as u64,
                rkey: b.mr.rkey(),
                len: 16,
                placement: rxe_core::wire::feth::PLT_GLOBAL_VISIBILITY,
                selectivity: rxe_core::wire::feth::SEL_MEMORY_RANGE,
            },
            SendData::Sges(vec![]),
        ))?;
        expect_wc(&a.cq, WcOpcode::Flush, "A")?;
        Ok("the FETH asked for global visibility of 16 bytes (B's region grants FLUSH_GLOBAL); B answered once everything before it had executed.".into())
    }

    /// B binds a type 2B memory window on part of a region with a BIND_MW
    /// work request, A writes through the window's R_Key, B invalidates it
    /// with LOCAL_INV, and A's same WRITE is refused.
    pub(super) fn memory_window(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let mr =
            b.pd.reg_mr_zeroed(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)?;
        let mw = b.pd.alloc_mw(rxe_verbs::MwType::Type2B)?;
        let key = rxe_core::transport::Key::new(mw.rkey()).inc().raw();
        let at = mr.addr() + 1024;
        b.rc.post_send(send_wr(
            10,
            mw.bind_op(key, &mr, at, 256, AccessFlags::REMOTE_WRITE),
            SendData::Sges(vec![]),
        ))?;
        expect_wc(&b.cq, WcOpcode::BindMw, "B")?;
        let data = text(32, "WINDOW");
        a.mr.write(0, &data)?;
        let write = || {
            send_wr(
                10,
                SendOp::RdmaWrite {
                    remote_addr: at,
                    rkey: key,
                },
                SendData::Sges(vec![a.mr.sge(0, data.len() as u32)]),
            )
        };
        a.rc.post_send(write())?;
        expect_wc(&a.cq, WcOpcode::RdmaWrite, "A")?;
        let mut got = vec![0u8; data.len()];
        mr.read(1024, &mut got)?;
        ensure!(
            got == data,
            "B's region does not hold the bytes written through the window"
        );
        b.rc.post_send(send_wr(
            11,
            SendOp::LocalInv { key },
            SendData::Sges(vec![]),
        ))?;
        expect_wc(&b.cq, WcOpcode::LocalInv, "B")?;
        mr.fill(1024, data.len(), 0)?;
        a.rc.post_send(write())?;
        let deadline = Instant::now() + STEP_TIMEOUT;
        let wc = loop {
            if let Some(wc) = a.cq.poll_one()? {
                break wc;
            }
            ensure!(
                Instant::now() < deadline,
                "A: no completion for the refused WRITE"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        ensure!(
            wc.status == WcStatus::RemAccessErr,
            "A's WRITE after the invalidation completed {:?}, not REM_ACCESS_ERR",
            wc.status
        );
        mr.read(1024, &mut got)?;
        ensure!(
            got.iter().all(|&x| x == 0),
            "the refused WRITE changed B's memory"
        );
        mw.dealloc()?;
        mr.dereg()?;
        Ok(format!(
            "B's BIND_MW gave the window R_Key 0x{key:08x} over 256 bytes of a region that grants no remote right itself; A's WRITE through it landed; after B's LOCAL_INV the same WRITE got NAK Remote Access Error (REM_ACCESS_ERR), and the connection is over."
        ))
    }
}
