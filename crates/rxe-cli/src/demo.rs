//! `rxe demo`: two devices in this process talk over loopback UDP, one
//! operation at a time, and every packet of each step is shown as
//! `rxe dissect` shows it.
//!
//! Device A (127.0.0.1) holds the requesting QPs, device B (127.0.0.2) the
//! responding ones and the memory that A reads, writes and updates. A's
//! UDP port records every packet it sends and receives to a pcapng file per
//! step (its interface description names A's address); after each step the
//! file is read back and dissected, and the memory and completions are
//! checked against what the operation should have done. With `--pcap-dir`
//! the captures are kept, each with its ladder diagram (`rxe ladder`) as
//! `stepN.html` next to it.

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use rxe_core::transport::Psn;
use rxe_core::wire::dissect::dissect;
use rxe_core::wire::grh::HEADER_LEN as GRH_LEN;
use rxe_pcap::CaptureReader;
use rxe_verbs::{
    connect, gid_of, AccessFlags, AddressVector, AhAttr, Cq, Device, InitParams, Mr, PathMtu, Pd,
    Qp, QpCap, QpInitAttr, QpType, RcParams, ReadyParams, RecvWr, RemoteQp, SendData, SendOp,
    SendWr, WcOpcode, WcStatus, WorkCompletion,
};

use crate::place;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address of device A, the requester.
    #[arg(long = "ip-a", value_name = "ADDR", default_value = "127.0.0.1")]
    ip_a: IpAddr,
    /// Address of device B, the responder.
    #[arg(long = "ip-b", value_name = "ADDR", default_value = "127.0.0.2")]
    ip_b: IpAddr,
    /// Keep the per-step captures (step1.pcapng, ...) in this directory
    /// instead of a temporary one, each with its ladder diagram
    /// (step1.html, ...).
    #[arg(long, value_name = "DIR")]
    pcap_dir: Option<PathBuf>,
}

/// How long one step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
const QKEY: u32 = 0x1111_1111;

/// Offsets in B's memory region.
const SEND_AT: usize = 0;
const WRITE_AT: usize = 1024;
const READ_AT: usize = 8192;
const ATOMIC_AT: usize = 12288;
const UD_AT: usize = 12800;
const MR_LEN: usize = 16384;

struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    rc: Qp,
    ud: Qp,
    ip: IpAddr,
    gid_idx: u8,
}

/// Packets and bytes seen so far.
#[derive(Default)]
struct Tally {
    packets: u64,
    bytes: u64,
    bad: u64,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    ensure!(
        args.ip_a != args.ip_b,
        "the two devices need two addresses (--ip-a and --ip-b)"
    );
    let (dir, keep) = match &args.pcap_dir {
        Some(d) => (d.clone(), true),
        None => (
            std::env::temp_dir().join(format!("rxe-demo-{}", std::process::id())),
            false,
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let a = place::add_device(&rxe_verbs::Target::Address(args.ip_a), None)?;
    let b = match place::add_device(&rxe_verbs::Target::Address(args.ip_b), None) {
        Ok(b) => b,
        Err(e) => {
            let _ = a.remove();
            return Err(e);
        }
    };
    let result = Demo::run(&a, &b, args, &dir);
    let _ = a.remove();
    let _ = b.remove();
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

struct Demo<'a> {
    a: Side,
    b: Side,
    dir: &'a Path,
    /// The captures are kept: draw each one's ladder next to it.
    ladders: bool,
    tally: Tally,
    results: Vec<(&'static str, Result<()>)>,
    out: io::StdoutLock<'static>,
}

fn setup(dev: &Device, ip: IpAddr) -> Result<Side> {
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(64)?;
    let mr = pd.reg_mr_zeroed(
        MR_LEN,
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC
            | AccessFlags::FLUSH_GLOBAL,
    )?;
    let qp = |qp_type| {
        pd.create_qp(&QpInitAttr {
            qp_type,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
    };
    let rc = qp(QpType::Rc)?;
    let ud = qp(QpType::Ud)?;
    let gid_idx = dev
        .find_gid(&gid_of(ip))
        .map(|(_, i)| i)
        .ok_or_else(|| anyhow!("{} has no GID for {ip}", dev.name()))?;
    Ok(Side {
        dev: dev.clone(),
        pd,
        cq,
        mr,
        rc,
        ud,
        ip,
        gid_idx,
    })
}

/// INIT, RTR, RTS for an RC QP that accepts every remote operation.
fn connect_rc(me: &Side, peer: &Side, my_psn: u32, peer_psn: u32) -> Result<()> {
    let remote = RemoteQp {
        qpn: peer.rc.qp_num(),
        psn: Psn::new(peer_psn),
        av: AddressVector {
            dgid: gid_of(peer.ip),
            sgid_index: me.gid_idx,
            hop_limit: 64,
            ..AddressVector::default()
        },
        path_mtu: PathMtu::Mtu1024,
    };
    let rc = RcParams {
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
    };
    connect::connect(
        &me.rc,
        &InitParams::connected(
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ),
        &ReadyParams::Rc {
            sq_psn: Psn::new(my_psn),
            remote,
            rc,
        },
    )?;
    Ok(())
}

fn connect_ud(me: &Side) -> Result<()> {
    connect::connect(
        &me.ud,
        &InitParams::datagram(QKEY),
        &ReadyParams::Ud {
            sq_psn: Psn::new(0),
        },
    )?;
    Ok(())
}

/// Bytes that say where they are: easy to recognise in a hex dump.
fn text(len: usize, tag: &str) -> Vec<u8> {
    let line = format!("rxe demo {tag}: byte ");
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        v.extend_from_slice(format!("{line}{:05} | ", v.len()).as_bytes());
    }
    v.truncate(len);
    v
}

/// Waits for one completion on `cq` and checks its status and opcode.
fn expect_wc(cq: &Cq, opcode: WcOpcode, who: &str) -> Result<WorkCompletion> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(wc) = cq.poll_one()? {
            ensure!(
                wc.status == WcStatus::Success,
                "{who}: completion {:?} (wr_id {})",
                wc.status,
                wc.wr_id
            );
            ensure!(
                wc.opcode == opcode,
                "{who}: completion for {:?}, expected {opcode:?}",
                wc.opcode
            );
            return Ok(wc);
        }
        if Instant::now() > deadline {
            bail!(
                "{who}: no {opcode:?} completion within {} s",
                STEP_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn send_wr(wr_id: u64, op: SendOp, data: SendData) -> SendWr {
    SendWr {
        wr_id,
        op,
        data,
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    }
}

impl Demo<'_> {
    fn run(a: &Device, b: &Device, args: &Args, dir: &Path) -> Result<ExitCode> {
        let a = setup(a, args.ip_a)?;
        let b = setup(b, args.ip_b)?;
        connect_rc(&a, &b, 0x00a0a0, 0x00b0b0)?;
        connect_rc(&b, &a, 0x00b0b0, 0x00a0a0)?;
        connect_ud(&a)?;
        connect_ud(&b)?;
        let mut demo = Demo {
            a,
            b,
            dir,
            ladders: args.pcap_dir.is_some(),
            tally: Tally::default(),
            results: Vec::new(),
            out: io::stdout().lock(),
        };
        demo.intro()?;
        demo.step(1, "SEND", Demo::send)?;
        demo.step(2, "RDMA WRITE WITH IMMEDIATE", Demo::write_imm)?;
        demo.step(3, "RDMA READ", Demo::read)?;
        demo.step(4, "CMP_SWAP", Demo::cmp_swap)?;
        demo.step(5, "FETCH_ADD", Demo::fetch_add)?;
        demo.step(6, "UD SEND", Demo::ud_send)?;
        demo.step(7, "FAST REG", Demo::fast_reg)?;
        demo.step(8, "ATOMIC WRITE", Demo::atomic_write)?;
        demo.step(9, "FLUSH", Demo::flush)?;
        // Last: its refused WRITE ends the RC connection (both QPs in ERR).
        demo.step(10, "MEMORY WINDOW", Demo::memory_window)?;
        demo.summary()
    }

    fn intro(&mut self) -> Result<()> {
        let (a, b) = (&self.a, &self.b);
        writeln!(
            self.out,
            "Two rxe devices in this process: A = {} on {}, B = {} on {}.",
            a.dev.name(),
            a.ip,
            b.dev.name(),
            b.ip
        )?;
        writeln!(
            self.out,
            "RC QP 0x{:06x} (A) <-> RC QP 0x{:06x} (B), path MTU 1024; UD QPs 0x{:06x} (A) and 0x{:06x} (B), Q_Key 0x{QKEY:08x}.",
            a.rc.qp_num(),
            b.rc.qp_num(),
            a.ud.qp_num(),
            b.ud.qp_num()
        )?;
        writeln!(
            self.out,
            "B registered {MR_LEN} bytes at 0x{:x} (R_Key 0x{:08x}) for remote write, read and atomics.",
            b.mr.addr(),
            b.mr.rkey()
        )?;
        writeln!(
            self.out,
            "Each packet below is one line of `rxe dissect`, as A's port sent or received it."
        )?;
        Ok(())
    }

    /// Runs one step with A capturing, prints its packets and verdict.
    fn step(
        &mut self,
        n: usize,
        name: &'static str,
        f: impl FnOnce(&mut Self) -> Result<String>,
    ) -> Result<()> {
        writeln!(self.out)?;
        writeln!(self.out, "{n}. {name}")?;
        let path = self.dir.join(format!("step{n}.pcapng"));
        self.a.dev.set_capture(Some(&path))?;
        let r = f(self);
        // Stopping the capture closes (and flushes) the file.
        self.a.dev.set_capture(None)?;
        let shown = self.show_packets(&path).and_then(|()| {
            if self.ladders {
                let html = path.with_extension("html");
                crate::ladder::write_page(&path, &html)?;
                writeln!(self.out, "   ladder: {}", html.display())?;
            }
            Ok(())
        });
        let r = match (r, shown) {
            (Ok(why), Ok(())) => {
                writeln!(self.out, "   OK: {why}")?;
                Ok(())
            }
            (Err(e), _) | (Ok(_), Err(e)) => {
                writeln!(self.out, "   FAILED: {e:#}")?;
                Err(e)
            }
        };
        self.results.push((name, r));
        Ok(())
    }

    fn show_packets(&mut self, path: &Path) -> Result<()> {
        let mut reader = CaptureReader::open(path)?;
        let mut seen = 0;
        while let Some(frame) = reader.next_frame()? {
            self.tally.bytes += frame.data.len() as u64;
            match dissect(frame.link_type, &frame.data) {
                Ok(Some(d)) => {
                    self.tally.packets += 1;
                    seen += 1;
                    writeln!(self.out, "{:>6} {}", self.tally.packets, d.summary())?;
                    if !d.is_good() {
                        self.tally.bad += 1;
                        for p in d.problems() {
                            writeln!(self.out, "       BAD: {p}")?;
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.tally.packets += 1;
                    self.tally.bad += 1;
                    seen += 1;
                    writeln!(self.out, "{:>6} MALFORMED ({e})", self.tally.packets)?;
                }
            }
        }
        ensure!(seen > 0, "no packet was captured");
        Ok(())
    }

    fn send(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let msg = text(64, "SEND");
        b.rc.post_recv(RecvWr {
            wr_id: 1,
            sg_list: vec![b.mr.sge(SEND_AT, 256)],
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

    fn write_imm(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let data = text(2500, "WRITE");
        let imm = 0x1234_5678;
        // The immediate data consumes a receive (with no buffer needed).
        b.rc.post_recv(RecvWr {
            wr_id: 2,
            sg_list: vec![],
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

    fn read(&mut self) -> Result<String> {
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

    fn atomic(&mut self, op: SendOp, want_old: u64, want_new: u64) -> Result<()> {
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

    fn cmp_swap(&mut self) -> Result<String> {
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

    fn fetch_add(&mut self) -> Result<String> {
        let b = &self.b;
        let op = SendOp::FetchAdd {
            remote_addr: b.mr.addr() + ATOMIC_AT as u64,
            rkey: b.mr.rkey(),
            add: 0x10,
        };
        self.atomic(op, 0x2222, 0x2232)?;
        Ok("B's word went from 0x2222 to 0x2232 in one step; A got 0x2222 back.".into())
    }

    fn ud_send(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let msg = text(100, "UD");
        b.ud.post_recv(RecvWr {
            wr_id: 6,
            sg_list: vec![b.mr.sge(UD_AT, (GRH_LEN + 256) as u32)],
        })?;
        let ah = a.pd.create_ah(&AhAttr {
            dgid: gid_of(b.ip),
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

    /// B registers a region allocated for fast registration with a REG_MR
    /// work request (no packet: a local operation of its send queue), then
    /// A reads through the new key.
    fn fast_reg(&mut self) -> Result<String> {
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
    fn atomic_write(&mut self) -> Result<String> {
        let (a, b) = (&self.a, &self.b);
        let v: u64 = 0x0a70_3170_0000_0008;
        let at = ATOMIC_AT + 8;
        a.rc.post_send(send_wr(
            8,
            SendOp::AtomicWrite {
                remote_addr: b.mr.addr() + at as u64,
                rkey: b.mr.rkey(),
            },
            SendData::Inline(v.to_ne_bytes().to_vec()),
        ))?;
        expect_wc(&a.cq, WcOpcode::AtomicWrite, "A")?;
        let now = b.mr.load_u64(at)?;
        ensure!(now == v, "B's word is 0x{now:x}, expected 0x{v:x}");
        Ok(format!(
            "B's word at offset {at} became 0x{v:016x} in one 8-byte store; the answer is an RDMA READ response without payload."
        ))
    }

    /// IBTA 1.5 FLUSH of the range just written, for global visibility.
    fn flush(&mut self) -> Result<String> {
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
    fn memory_window(&mut self) -> Result<String> {
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

    fn summary(mut self) -> Result<ExitCode> {
        writeln!(self.out)?;
        let ok = self.results.iter().filter(|(_, r)| r.is_ok()).count();
        let verdicts: Vec<String> = self
            .results
            .iter()
            .map(|(n, r)| format!("{n} {}", if r.is_ok() { "OK" } else { "FAILED" }))
            .collect();
        writeln!(
            self.out,
            "Summary: {} packets, {} bytes captured ({} bad); {} of {} operations OK: {}.",
            self.tally.packets,
            self.tally.bytes,
            self.tally.bad,
            ok,
            self.results.len(),
            verdicts.join(", ")
        )?;
        for s in [&self.a, &self.b] {
            writeln!(self.out, "Counters of {} ({}):", s.dev.name(), s.ip)?;
            for (name, v) in s.dev.counters() {
                if v != 0 {
                    writeln!(self.out, "    {name:<32} {v}")?;
                }
            }
        }
        self.out.flush()?;
        if ok != self.results.len() || self.tally.bad > 0 {
            let failed: Vec<&str> = self
                .results
                .iter()
                .filter(|(_, r)| r.is_err())
                .map(|(n, _)| *n)
                .collect();
            if failed.is_empty() {
                bail!(
                    "{} captured packet(s) are malformed or fail their ICRC",
                    self.tally.bad
                );
            }
            bail!("demo failed: {}", failed.join(", "));
        }
        Ok(ExitCode::SUCCESS)
    }
}
