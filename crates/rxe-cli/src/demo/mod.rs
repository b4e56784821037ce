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
    connect, AccessFlags, AddressVector, AhAttr, Cq, Device, Gid, InitParams, Mr, PathMtu, Pd, Qp,
    QpCap, QpInitAttr, QpType, RcParams, ReadyParams, RecvWr, RemoteQp, SendData, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};

use crate::place;

mod basic;
mod congestion;
mod memory;
mod migration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address of device A, the requester.
    #[arg(long = "ip-a", value_name = "ADDR", default_value = "127.0.0.1")]
    ip_a: IpAddr,
    /// Address of device B, the responder.
    #[arg(long = "ip-b", value_name = "ADDR", default_value = "127.0.0.2")]
    ip_b: IpAddr,
    /// A second address of device A, for the path migration step's
    /// alternate path [default: on loopback, --ip-a with its second byte
    /// one higher: 127.1.0.1].
    #[arg(long = "alt-ip-a", value_name = "ADDR")]
    alt_ip_a: Option<IpAddr>,
    /// A second address of device B [default: as --alt-ip-a, from --ip-b].
    #[arg(long = "alt-ip-b", value_name = "ADDR")]
    alt_ip_b: Option<IpAddr>,
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
// 14336..16384: the ECN step's WRITE target (congestion.rs); 16384..17408
// the path migration step's (migration.rs).
const MR_LEN: usize = 17408;

struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    rc: Qp,
    ud: Qp,
    ip: IpAddr,
    gid_idx: u8,
    /// The device's second address, for the path migration step.
    alt_ip: Option<IpAddr>,
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
    let (alt_a, alt_b) = alternates(args);
    let a = place::add_device(
        &target(args.ip_a, alt_a),
        None,
        rxe_verbs::DeviceConfig::default_congestion(),
    )?;
    let b = match place::add_device(
        &target(args.ip_b, alt_b),
        None,
        rxe_verbs::DeviceConfig::default_congestion(),
    ) {
        Ok(b) => b,
        Err(e) => {
            let _ = a.remove();
            return Err(e);
        }
    };
    let result = Demo::run((&a, alt_a), (&b, alt_b), args, &dir);
    let _ = a.remove();
    let _ = b.remove();
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// The two second addresses, given or derived, when both exist and
/// differ from the first ones.
fn alternates(args: &Args) -> (Option<IpAddr>, Option<IpAddr>) {
    let a = args.alt_ip_a.or_else(|| migration::alternate_of(args.ip_a));
    let b = args.alt_ip_b.or_else(|| migration::alternate_of(args.ip_b));
    match (a, b) {
        (Some(x), Some(y))
            if x != y && ![args.ip_a, args.ip_b].iter().any(|i| *i == x || *i == y) =>
        {
            (Some(x), Some(y))
        }
        _ => (None, None),
    }
}

/// A device on its address, and on its second one when it has one.
fn target(ip: IpAddr, alt: Option<IpAddr>) -> rxe_verbs::Target {
    match alt {
        Some(alt) => rxe_verbs::Target::Addresses(vec![ip, alt]),
        None => rxe_verbs::Target::Address(ip),
    }
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

fn setup(dev: &Device, ip: IpAddr, alt_ip: Option<IpAddr>) -> Result<Side> {
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
        .find_gid(&Gid::from(ip))
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
        alt_ip,
    })
}

/// The RC attributes of every demo connection (ibv_rc_pingpong's, with
/// four READs or atomics in flight).
const DEMO_RC: RcParams = RcParams::PINGPONG.with_rd_atomic(4);

impl Side {
    /// One more RC QP on the side's CQ, for a step of its own.
    fn new_rc_qp(&self) -> Result<Qp> {
        Ok(self.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })?)
    }
}

/// INIT, RTR, RTS for an RC QP that accepts every remote operation.
fn connect_rc(me: &Side, peer: &Side, my_psn: u32, peer_psn: u32) -> Result<()> {
    let remote = RemoteQp {
        qpn: peer.rc.qp_num(),
        psn: Psn::new(peer_psn),
        av: AddressVector {
            dgid: Gid::from(peer.ip),
            sgid_index: me.gid_idx,
            hop_limit: 64,
            ..AddressVector::default()
        },
        path_mtu: PathMtu::Mtu1024,
    };
    let rc = DEMO_RC;
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
    /// Each device with its second address, if it has one.
    fn run(
        (a, alt_a): (&Device, Option<IpAddr>),
        (b, alt_b): (&Device, Option<IpAddr>),
        args: &Args,
        dir: &Path,
    ) -> Result<ExitCode> {
        let a = setup(a, args.ip_a, alt_a)?;
        let b = setup(b, args.ip_b, alt_b)?;
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
        // Its refused WRITE ends the RC connection (both QPs in ERR).
        demo.step(10, "MEMORY WINDOW", Demo::memory_window)?;
        // On a QP pair of its own.
        demo.step(11, "ECN AND CNP", Demo::congestion)?;
        // On a QP pair of its own, over both devices' second addresses.
        if demo.a.alt_ip.is_some() {
            demo.step(12, "PATH MIGRATION", Demo::path_migration)?;
        } else {
            writeln!(
                demo.out,
                "\n12. PATH MIGRATION: not run, the devices have no second address \
                 (give --alt-ip-a and --alt-ip-b)"
            )?;
        }
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
