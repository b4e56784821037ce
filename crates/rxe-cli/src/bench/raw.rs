//! The raw UDP side of `rxe bench`: what the kernel's UDP over loopback
//! does on this machine, with a CRC32 (crc32fast, the ICRC's CRC) computed
//! over every datagram by the sender and checked by the receiver, as rxe
//! does for the ICRC. Each side is a thread of this process; its CPU time
//! is its own (`getrusage(RUSAGE_THREAD)`).
//!
//! - [`mmsg`]: `sendmmsg`/`recvmmsg` batches of 64 datagrams, through
//!   rxe-net's own [`RoceSocket`] (the sockets rxe sends with: unconnected,
//!   DF, non-blocking), with no engine behind them.
//! - [`gso_gro`]: one `sendto` of up to 64 KiB cut into segments by the
//!   kernel (`UDP_SEGMENT`), received coalesced (`UDP_GRO`) and split
//!   again by the segment size the kernel reports.
//! - [`ping_pong`]: 8-byte datagrams back and forth between two
//!   busy-polling threads: the round trip.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use nix::sys::socket::{self as nsock, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use rxe_net::socket::MAX_BATCH;
use rxe_net::{RoceSocket, RxBatch, TxBatch};

use super::cpu;

/// The UDP port of the raw measurements (on their own addresses).
const PORT: u16 = 4791;
/// How long a receiver waits for stragglers once the sender stopped.
const DRAIN: Duration = Duration::from_millis(50);
/// The largest UDP payload GSO takes in one send.
const GSO_MAX: usize = 65_000;

/// What one streaming run moved.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stream {
    /// Bytes (datagram payloads) received with a good CRC.
    pub bytes: u64,
    /// Datagrams received with a good CRC.
    pub msgs: u64,
    /// Datagrams received with a bad CRC (should stay 0).
    pub bad: u64,
    /// The sender's running time.
    pub elapsed: Duration,
    pub tx_cpu: Duration,
    pub rx_cpu: Duration,
}

impl Stream {
    pub fn gbits(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }

    pub fn msg_rate(&self) -> f64 {
        self.msgs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The round trips of one ping-pong run.
#[derive(Debug, Clone, Copy, Default)]
pub struct PingPong {
    /// The median round trip.
    pub rtt: Duration,
    pub round_trips: u64,
    pub cpu_a: Duration,
    pub cpu_b: Duration,
}

/// Writes a sequence number and the CRC32 of everything before the last
/// four bytes into them (least significant byte first, as the ICRC).
fn seal(d: &mut [u8], seq: u64) {
    let n = d.len();
    if n < 12 {
        return;
    }
    d[..8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&d[..n - 4]);
    d[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn crc_good(d: &[u8]) -> bool {
    let n = d.len();
    n >= 12 && crc32fast::hash(&d[..n - 4]).to_le_bytes() == d[n - 4..]
}

/// Counts what a receiver saw.
#[derive(Debug, Default)]
struct Tally {
    bytes: u64,
    msgs: u64,
    bad: u64,
}

impl Tally {
    fn add(&mut self, d: &[u8]) {
        if crc_good(d) {
            self.bytes += d.len() as u64;
            self.msgs += 1;
        } else {
            self.bad += 1;
        }
    }
}

/// `sendmmsg`/`recvmmsg` of `len`-byte datagrams from `src` to `dst` for
/// `d`.
pub fn mmsg(src: IpAddr, dst: IpAddr, len: usize, d: Duration) -> Result<Stream> {
    let tx = RoceSocket::bind(src, PORT).with_context(|| format!("bind {src}:{PORT}"))?;
    let rx = RoceSocket::bind(dst, PORT).with_context(|| format!("bind {dst}:{PORT}"))?;
    let to = rx.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = cpu::thread();
            let mut batch = RxBatch::new(MAX_BATCH, len.max(64) + 64);
            let mut t = Tally::default();
            let mut idle_since: Option<Instant> = None;
            loop {
                match rx.recv_batch(&mut batch) {
                    Ok(n) if n > 0 => {
                        idle_since = None;
                        for i in 0..n {
                            if let Some((_, bytes)) = batch.get(i) {
                                t.add(bytes);
                            }
                        }
                    }
                    Ok(_) => {
                        if stop.load(Ordering::Acquire) {
                            let since = *idle_since.get_or_insert_with(Instant::now);
                            if since.elapsed() > DRAIN {
                                break;
                            }
                        }
                        std::thread::yield_now();
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(anyhow!("recvmmsg: {e}")),
                }
            }
            Ok((t, cpu::thread().saturating_sub(start)))
        })
    };
    let cpu0 = cpu::thread();
    let mut batch = TxBatch::new(MAX_BATCH, len.max(64));
    let mut seq = 0u64;
    let start = Instant::now();
    while start.elapsed() < d {
        while let Some((_, slot)) = batch.free_slot() {
            let p = &mut slot[..len];
            seal(p, seq);
            seq += 1;
            batch.commit(len, to);
        }
        match tx.send_batch(&batch, batch.pending(), 64, 0) {
            Ok(0) => std::thread::yield_now(),
            Ok(n) => batch.consume(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                stop.store(true, Ordering::Release);
                let _ = receiver.join();
                return Err(anyhow!("sendmmsg: {e}"));
            }
        }
    }
    let elapsed = start.elapsed();
    let tx_cpu = cpu::thread().saturating_sub(cpu0);
    stop.store(true, Ordering::Release);
    let (t, rx_cpu) = receiver
        .join()
        .map_err(|_| anyhow!("the receiver panicked"))??;
    Ok(Stream {
        bytes: t.bytes,
        msgs: t.msgs,
        bad: t.bad,
        elapsed,
        tx_cpu,
        rx_cpu,
    })
}

/// UDP GSO on send and GRO on receive, `seg`-byte segments, for `d`.
pub fn gso_gro(src: IpAddr, dst: IpAddr, seg: usize, d: Duration) -> Result<Stream> {
    let per_send = (GSO_MAX / seg).max(1);
    let tx = UdpSocket::bind(SocketAddr::new(src, 0)).context("bind the GSO sender")?;
    let rx = UdpSocket::bind(SocketAddr::new(dst, 0)).context("bind the GRO receiver")?;
    let to = rx.local_addr()?;
    let gso = i32::try_from(seg).context("segment size")?;
    nsock::setsockopt(&tx.as_fd(), sockopt::UdpGsoSegment, &gso).context("UDP_SEGMENT")?;
    nsock::setsockopt(&rx.as_fd(), sockopt::UdpGroSegment, &true).context("UDP_GRO")?;
    // As large as the kernel allows without privileges; a small buffer
    // only costs drops, which the figure then shows.
    let _ = nsock::setsockopt(&rx.as_fd(), sockopt::RcvBuf, &(8 << 20));
    let _ = nsock::setsockopt(&tx.as_fd(), sockopt::SndBuf, &(8 << 20));
    rx.set_read_timeout(Some(DRAIN))?;
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<(Tally, Duration)> {
            let start = cpu::thread();
            let mut buf = vec![0u8; 1 << 16];
            let mut cmsg = nix::cmsg_space!(i32);
            let mut t = Tally::default();
            loop {
                let got = {
                    let mut iov = [IoSliceMut::new(&mut buf)];
                    match nsock::recvmsg::<SockaddrStorage>(
                        std::os::fd::AsRawFd::as_raw_fd(&rx),
                        &mut iov,
                        Some(&mut cmsg),
                        MsgFlags::empty(),
                    ) {
                        Ok(m) => {
                            let mut size = None;
                            if let Ok(cs) = m.cmsgs() {
                                for c in cs {
                                    if let ControlMessageOwned::UdpGroSegments(s) = c {
                                        size = usize::try_from(s).ok().filter(|&s| s > 0);
                                    }
                                }
                            }
                            Some((m.bytes, size))
                        }
                        Err(nix::errno::Errno::EAGAIN) => None,
                        Err(nix::errno::Errno::EINTR) => continue,
                        Err(e) => return Err(anyhow!("recvmsg: {e}")),
                    }
                };
                match got {
                    Some((n, size)) => {
                        let data = &buf[..n.min(buf.len())];
                        for s in data.chunks(size.unwrap_or(n.max(1))) {
                            t.add(s);
                        }
                    }
                    // The read timed out: done once the sender is.
                    None if stop.load(Ordering::Acquire) => break,
                    None => {}
                }
            }
            Ok((t, cpu::thread().saturating_sub(start)))
        })
    };
    let cpu0 = cpu::thread();
    let mut buf = vec![0u8; per_send * seg];
    let mut seq = 0u64;
    let start = Instant::now();
    let mut failed = None;
    while start.elapsed() < d {
        for s in buf.chunks_mut(seg) {
            seal(s, seq);
            seq += 1;
        }
        if let Err(e) = tx.send_to(&buf, to) {
            if e.kind() != io::ErrorKind::Interrupted {
                failed = Some(e);
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    let tx_cpu = cpu::thread().saturating_sub(cpu0);
    stop.store(true, Ordering::Release);
    let (t, rx_cpu) = receiver
        .join()
        .map_err(|_| anyhow!("the receiver panicked"))??;
    if let Some(e) = failed {
        return Err(anyhow!("GSO send: {e}"));
    }
    Ok(Stream {
        bytes: t.bytes,
        msgs: t.msgs,
        bad: t.bad,
        elapsed,
        tx_cpu,
        rx_cpu,
    })
}

/// Busy-polling 8-byte ping-pong between `a` and `b` for `d`.
pub fn ping_pong(a: IpAddr, b: IpAddr, d: Duration) -> Result<PingPong> {
    let sa = UdpSocket::bind(SocketAddr::new(a, 0)).context("bind the pinger")?;
    let sb = UdpSocket::bind(SocketAddr::new(b, 0)).context("bind the echo")?;
    sa.set_nonblocking(true)?;
    sb.set_nonblocking(true)?;
    let (aa, ba) = (sa.local_addr()?, sb.local_addr()?);
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = cpu::thread();
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                match sb.recv(&mut buf) {
                    Ok(n) => {
                        let _ = sb.send_to(&buf[..n], aa);
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
            cpu::thread().saturating_sub(start)
        })
    };
    let cpu0 = cpu::thread();
    let mut buf = [0u8; 64];
    let mut rtts = Vec::new();
    let start = Instant::now();
    let mut seq = 0u64;
    'outer: while start.elapsed() < d {
        let t0 = Instant::now();
        seq += 1;
        sa.send_to(&seq.to_le_bytes(), ba)?;
        loop {
            match sa.recv(&mut buf) {
                Ok(8) if buf[..8] == seq.to_le_bytes() => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A lost datagram (loopback does not lose them, but
                    // a full buffer could): start a new round trip.
                    if t0.elapsed() > Duration::from_millis(200) {
                        continue 'outer;
                    }
                    std::hint::spin_loop();
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    let _ = echo.join();
                    return Err(e.into());
                }
            }
        }
        rtts.push(t0.elapsed());
    }
    let cpu_a = cpu::thread().saturating_sub(cpu0);
    stop.store(true, Ordering::Relaxed);
    let cpu_b = echo.join().map_err(|_| anyhow!("the echo panicked"))?;
    rtts.sort_unstable();
    let rtt = *rtts
        .get(rtts.len() / 2)
        .ok_or_else(|| anyhow!("no round trip in {d:?}"))?;
    Ok(PingPong {
        rtt,
        round_trips: rtts.len() as u64,
        cpu_a,
        cpu_b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_datagram_checks_and_a_changed_one_does_not() {
        let mut d = vec![0x5a; 100];
        seal(&mut d, 7);
        assert!(crc_good(&d));
        d[50] ^= 1;
        assert!(!crc_good(&d));
        assert!(!crc_good(&[0; 4]), "too short");
    }
}
