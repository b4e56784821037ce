//! The demo's steps 1 to 6: SEND, RDMA WRITE with immediate, RDMA READ,
//! the two atomics and a UD SEND, each checked against the memory and
//! completions it should leave.

use super::*;

impl Demo<'_> {
    pub(super) fn send(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let msg = text(64, "SEND");
        b.rc.post_recv(RecvWr {
            wr_id: 1,
            sg_list: [b.mr.sge(SEND_AT, 256)].into(),
        })?;
        a.mr.write(0, &msg)?;
        a.rc.post_send(send_wr(
            1,
            SendOp::Send,
            SendData::Sges(vec![a.mr.sge(0, msg.len() as u32)]),
        ))?;
        expect_wc(&a.cq, WcOpcode::Send, "A")?;
        let wc = expect_wc(&b.cq, WcOpcode::Recv, "B")?;
        ensure!(
            wc.byte_len == 64,
            "B received {} bytes, not 64",
            wc.byte_len
        );
        let mut got = vec![0u8; 64];
        b.mr.read(SEND_AT, &mut got)?;
        ensure!(got == msg, "B's receive buffer does not hold the message");
        Ok("A's 64 bytes are in the receive buffer B posted; B's completion says RECV, 64 bytes; B acknowledged.".into())
    }

    pub(super) fn write_imm(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let data = text(2500, "WRITE");
        let imm = 0x1234_5678;
        // The immediate data consumes a receive (with no buffer needed).
        b.rc.post_recv(RecvWr {
            wr_id: 2,
            sg_list: Default::default(),
        })?;
        a.mr.write(0, &data)?;
        a.rc.post_send(send_wr(
            2,
            SendOp::RdmaWriteWithImm {
                remote_addr: b.mr.addr() + WRITE_AT as u64,
                rkey: b.mr.rkey(),
                imm,
            },
            SendData::Sges(vec![a.mr.sge(0, data.len() as u32)]),
        ))?;
        expect_wc(&a.cq, WcOpcode::RdmaWrite, "A")?;
        let wc = expect_wc(&b.cq, WcOpcode::RecvRdmaWithImm, "B")?;
        ensure!(
            wc.imm_data == Some(imm),
            "B's immediate is {:?}",
            wc.imm_data
        );
        let mut got = vec![0u8; data.len()];
        b.mr.read(WRITE_AT, &mut got)?;
        ensure!(got == data, "B's memory does not hold the written bytes");
        Ok(format!(
            "2500 bytes went into B's memory at offset {WRITE_AT} in three packets (path MTU 1024); the last carried immediate 0x{imm:08x}, which used up one of B's receives (no buffer needed) and shows in its completion."
        ))
    }

    pub(super) fn read(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let data = text(1500, "READ");
        b.mr.write(READ_AT, &data)?;
        a.mr.fill(4096, data.len(), 0)?;
        a.rc.post_send(send_wr(
            3,
            SendOp::RdmaRead {
                remote_addr: b.mr.addr() + READ_AT as u64,
                rkey: b.mr.rkey(),
            },
            SendData::Sges(vec![a.mr.sge(4096, data.len() as u32)]),
        ))?;
        expect_wc(&a.cq, WcOpcode::RdmaRead, "A")?;
        let mut got = vec![0u8; data.len()];
        a.mr.read(4096, &mut got)?;
        ensure!(got == data, "A's buffer does not hold B's bytes");
        Ok("one request, two response packets: A's buffer now holds the 1500 bytes of B's memory; B's application took no part.".into())
    }

    pub(super) fn atomic(&mut self, op: SendOp, want_old: u64, want_new: u64) -> Result<()> {
        let (a, b) = (&self.a, &self.b);
        a.mr.write(8, &[0xee; 8])?;
        a.rc.post_send(send_wr(4, op, SendData::Sges(vec![a.mr.sge(8, 8)])))?;
        let opcode = op.wc_opcode();
        expect_wc(&a.cq, opcode, "A")?;
        let old = a.mr.load_u64(8)?;
        let now = b.mr.load_u64(ATOMIC_AT)?;
        ensure!(
            old == want_old,
            "A got the original value 0x{old:x}, expected 0x{want_old:x}"
        );
        ensure!(
            now == want_new,
            "B's word is 0x{now:x}, expected 0x{want_new:x}"
        );
        Ok(())
    }

    pub(super) fn cmp_swap(&mut self) -> Result<String> {
        let b = &self.b;
        let cur = b.mr.load_u64(ATOMIC_AT)?;
        b.mr.compare_swap(ATOMIC_AT, cur, 0x1111)?;
        let op = SendOp::CmpSwap {
            remote_addr: b.mr.addr() + ATOMIC_AT as u64,
            rkey: b.mr.rkey(),
            compare: 0x1111,
            swap: 0x2222,
        };
        self.atomic(op, 0x1111, 0x2222)?;
        Ok(
            "B's word held 0x1111 = compare, so it became 0x2222; A got the old 0x1111 back."
                .into(),
        )
    }

    pub(super) fn fetch_add(&mut self) -> Result<String> {
        let b = &self.b;
        let op = SendOp::FetchAdd {
            remote_addr: b.mr.addr() + ATOMIC_AT as u64,
            rkey: b.mr.rkey(),
            add: 0x10,
        };
        self.atomic(op, 0x2222, 0x2232)?;
        Ok("B's word went from 0x2222 to 0x2232 in one step; A got 0x2222 back.".into())
    }

    pub(super) fn ud_send(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let msg = text(100, "UD");
        b.ud.post_recv(RecvWr {
            wr_id: 6,
            sg_list: [b.mr.sge(UD_AT, (GRH_LEN + 256) as u32)].into(),
        })?;
        let ah = a.pd.create_ah(&AhAttr {
            dgid: Gid::from(b.ip),
            sgid_index: a.gid_idx,
            hop_limit: 64,
            port_num: rxe_verbs::PORT,
            ..AhAttr::default()
        })?;
        a.mr.write(0, &msg)?;
        let mut wr = send_wr(
            6,
            SendOp::Send,
            SendData::Sges(vec![a.mr.sge(0, msg.len() as u32)]),
        );
        wr.ud = Some(ah.ud_dest(b.ud.qp_num(), QKEY));
        a.ud.post_send(wr)?;
        expect_wc(&a.cq, WcOpcode::Send, "A")?;
        let wc = expect_wc(&b.cq, WcOpcode::Recv, "B")?;
        ensure!(
            wc.byte_len as usize == GRH_LEN + msg.len(),
            "B received {} bytes, expected 40 + 100",
            wc.byte_len
        );
        ensure!(
            wc.src_qp == a.ud.qp_num(),
            "B's completion names QP 0x{:x} as the sender",
            wc.src_qp
        );
        let mut got = vec![0u8; GRH_LEN + msg.len()];
        b.mr.read(UD_AT, &mut got)?;
        ensure!(
            got[GRH_LEN..] == msg[..],
            "B's buffer does not hold the datagram"
        );
        ensure!(wc.grh, "B's completion has no GRH");
        let from = match b.ip {
            IpAddr::V4(_) => {
                ensure!(
                    got[20] >> 4 == 4,
                    "no IPv4 header after 20 bytes of GRH space"
                );
                IpAddr::from([got[32], got[33], got[34], got[35]])
            }
            IpAddr::V6(_) => {
                let mut s = [0u8; 16];
                s.copy_from_slice(&got[8..24]);
                IpAddr::from(s)
            }
        };
        ensure!(from == a.ip, "the GRH space names {from} as the sender");
        let _ = ah.destroy();
        Ok(format!(
            "one datagram, no acknowledgement; B's buffer starts with 40 bytes of GRH space (the IP header, from {from}), then the 100 bytes."
        ))
    }
}
