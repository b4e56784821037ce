//! The out-of-band TCP exchange of perftest 4.5 (`ib_write_bw`,
//! `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`,
//! `ib_read_lat`, `ib_send_lat`) without `-R`, byte for byte, so that
//! `rxe perf` and the real tools can be each other's peer.
//!
//! Every exchange is symmetric: the client writes its value and then reads
//! the server's; the server reads first and then writes. Each value is a
//! fixed number of bytes and is written in one `write`; reads take exactly
//! that many bytes (segments may be split or merged on the way: a peer's
//! last key message and its `done` often arrive together).
//!
//! In order, as recorded from perftest 4.5-0.17 on both sides (TCP
//! captures of the real tools talking to each other):
//!
//! 1. version: 16 bytes, a NUL-padded decimal string (`"6.06"`). A peer
//!    older than 5.70 is refused, as perftest refuses it.
//! 2. system data: two 4-byte big-endian integers, one exchange each: the
//!    buffer cycle (page size) and the cache line size. Both sides keep the
//!    larger of each.
//! 3. MTU: 2 bytes, the `enum ibv_mtu` number as decimal text and a NUL
//!    (`"3\0"` = 1024). Both sides use the smaller.
//! 4. keys, 108 bytes per QP: `LID:OUT_READS:QPN:PSN:RKEY:VADDR:` in
//!    lowercase hex of 4, 4, 6, 6, 8 and 16 digits, the 16 GID bytes as
//!    `xx:` each, the SRQ number in 8 digits and `:`, then a NUL.
//! 5. the same key message again as barriers, QP 0's unless a whole round
//!    is repeated; which rounds, and when, depends on the test
//!    ([`Flow`]).
//! 6. after the measured run of the RDMA WRITE, READ and atomic bandwidth
//!    tests, the report: five 8-byte big-endian fields exchanged one by
//!    one (message size, iterations, peak and average bandwidth and the
//!    message rate as IEEE doubles). Only the client's values mean
//!    something; perftest's server sends whatever its stack held.
//! 7. last, both sides write `done\0` and close, without waiting for the
//!    other's (`ib_write_lat` skips the last barrier and `done`: it only
//!    closes).

use std::io::{self, Read, Write};

use rxe_verbs::Gid;

use crate::side_channel;

/// The TCP port perftest uses unless told otherwise (`-p`).
pub const DEFAULT_PORT: u16 = 18515;
/// Bytes of the version message.
pub const VERSION_LEN: usize = 16;
/// The version rxe announces: that of the perftest whose exchange it
/// speaks.
pub const VERSION: &str = "6.06";
/// perftest refuses to talk to anything older.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Bytes of one key message, NUL included.
pub const KEYS_LEN: usize = 108;
/// Bytes of one report field.
pub const REPORT_FIELD_LEN: usize = 8;
/// What each side writes last.
pub const DONE: &[u8; 5] = b"done\0";

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum PerfHandshakeError {
    #[error("malformed perftest {what} ({reason}): {text:?}")]
    Malformed {
        what: &'static str,
        reason: &'static str,
        text: String,
    },
    #[error("the peer closed the connection after {got} of the {want} bytes of its {what}")]
    ShortRead {
        what: &'static str,
        got: usize,
        want: usize,
    },
    #[error("the peer runs perftest version {0}; versions older than 5.70 are not compatible")]
    OldVersion(String),
    #[error(
        "the peer is out of step (it runs another test, or another -q): expected {expected}, got {got}"
    )]
    OutOfStep { expected: String, got: String },
    #[error("{0}")]
    Io(#[from] io::Error),
}

type Result<T> = std::result::Result<T, PerfHandshakeError>;

fn malformed(what: &'static str, reason: &'static str, bytes: &[u8]) -> PerfHandshakeError {
    PerfHandshakeError::Malformed {
        what,
        reason,
        text: String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// A perftest version string and its value as perftest compares it (the
/// leading decimal number).
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub text: String,
    pub value: f64,
}

/// The 16 bytes announcing `version`; text longer than 15 bytes is cut (the
/// message always ends with a NUL).
pub fn encode_version(version: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    let b = version.as_bytes();
    let n = b.len().min(VERSION_LEN - 1);
    out[..n].copy_from_slice(&b[..n]);
    out
}

/// Parses a version message: text up to the first NUL, beginning with a
/// decimal number (`6.06`).
pub fn decode_version(msg: &[u8; VERSION_LEN]) -> Result<Version> {
    let end = msg.iter().position(|&c| c == 0).unwrap_or(VERSION_LEN);
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| malformed("version", "not text", msg))?
        .to_string();
    let num: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value = num
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| malformed("version", "does not start with a number", msg))?;
    Ok(Version { text, value })
}

/// The MTU message: the `enum ibv_mtu` number (1 to 5) and a NUL.
pub fn encode_mtu(ibv_mtu: u8) -> [u8; 2] {
    [b'0' + ibv_mtu % 10, 0]
}

/// The `enum ibv_mtu` number the peer sent; `None` when it is not one of
/// 1 (256) to 5 (4096), which perftest then ignores.
pub fn decode_mtu(msg: &[u8; 2]) -> Option<u8> {
    match (msg[0], msg[1]) {
        (c @ b'1'..=b'5', 0) => Some(c - b'0'),
        _ => None,
    }
}

/// One QP as the key message describes it (perftest's `pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Keys {
    /// 0 on RoCE.
    pub lid: u16,
    /// READs and atomics the sender's QP takes at once as a responder and
    /// issues at once as a requester: the peer sets its `max_rd_atomic`
    /// and the sender its `max_dest_rd_atomic` to it.
    pub out_reads: u16,
    /// 24 bits.
    pub qpn: u32,
    /// The sender's initial send PSN, 24 bits.
    pub psn: u32,
    /// R_Key of the sender's buffer (0 in SEND tests).
    pub rkey: u32,
    /// Address of the sender's buffer: the target of the peer's WRITEs,
    /// READs and atomics.
    pub vaddr: u64,
    pub gid: Gid,
    /// 0 unless XRC or DC.
    pub srqn: u32,
}

impl Keys {
    /// The 108 bytes of the message. QPN and PSN are 24-bit fields: higher
    /// bits are dropped.
    pub fn encode(&self) -> [u8; KEYS_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.as_bytes() {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEYS_LEN];
        out[..KEYS_LEN - 1].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses one key message: exactly the layout [`Keys::encode`] writes
    /// (hex digits of either case), ending in a NUL.
    pub fn decode(msg: &[u8]) -> Result<Keys> {
        let bad = |reason| malformed("key message", reason, msg);
        if msg.len() != KEYS_LEN {
            return Err(bad("not 108 bytes"));
        }
        if msg[KEYS_LEN - 1] != 0 {
            return Err(bad("no terminating NUL"));
        }
        let mut at = 0usize;
        let mut field = |digits: usize| -> Result<u64> {
            let mut v = 0u64;
            for &c in &msg[at..at + digits] {
                let d = (c as char)
                    .to_digit(16)
                    .ok_or_else(|| bad("a field holds a non-hex character"))?;
                v = v << 4 | u64::from(d);
            }
            if msg[at + digits] != b':' {
                return Err(bad("fields are not separated by colons where expected"));
            }
            at += digits + 1;
            Ok(v)
        };
        let lid = field(4)? as u16;
        let out_reads = field(4)? as u16;
        let qpn = field(6)? as u32;
        let psn = field(6)? as u32;
        let rkey = field(8)? as u32;
        let vaddr = field(16)?;
        let mut gid = [0u8; 16];
        for g in gid.iter_mut() {
            *g = field(2)? as u8;
        }
        let srqn = field(8)? as u32;
        Ok(Keys {
            lid,
            out_reads,
            qpn,
            psn,
            rkey,
            vaddr,
            gid: Gid::from(gid),
            srqn,
        })
    }
}

/// The result a bandwidth client reports to its server (`bw_report_data`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    /// In the unit of the table (MB/s, or Gb/s with `--report_gbits`).
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
}

impl Report {
    /// The five fields, each as it goes on the wire.
    pub fn fields(&self) -> [[u8; REPORT_FIELD_LEN]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report from its five fields. Any bits make a double (perftest's
    /// server sends uninitialised ones), so this cannot fail.
    pub fn from_fields(f: &[[u8; REPORT_FIELD_LEN]; 5]) -> Report {
        let d = |b: &[u8; 8]| f64::from_bits(u64::from_be_bytes(*b));
        Report {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: d(&f[2]),
            bw_avg: d(&f[3]),
            msg_rate: d(&f[4]),
        }
    }
}

/// The four verbs perftest measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

/// Which exchanges a test makes, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub verb: Verb,
    /// A latency test (`ib_*_lat`); otherwise bandwidth.
    pub lat: bool,
    pub qps: usize,
}

impl Flow {
    /// Whether the client reports its result after the run (the RDMA
    /// bandwidth tests, where the server does not measure).
    pub fn has_report(&self) -> bool {
        !self.lat && self.verb != Verb::Send
    }

    /// Whether the end of the test has a last barrier and `done`
    /// (`ib_write_lat` just closes).
    pub fn has_close(&self) -> bool {
        !(self.lat && self.verb == Verb::Write)
    }

    /// How many key messages each side sends in all.
    #[cfg(test)]
    pub fn key_messages(&self) -> usize {
        let before = if self.has_report() {
            2 * self.qps + 1
        } else {
            2 * self.qps + 2
        };
        let after = usize::from(self.has_report()) + usize::from(self.has_close());
        before + after
    }
}

/// The TCP side of one test, over any byte stream (a `TcpStream`, or a
/// recorded conversation in tests).
pub struct Channel<S> {
    stream: S,
    client: bool,
}

fn read_message<S: Read>(stream: &mut S, buf: &mut [u8], what: &'static str) -> Result<()> {
    let got = side_channel::read_full(stream, buf)?;
    if got < buf.len() {
        return Err(PerfHandshakeError::ShortRead {
            what,
            got,
            want: buf.len(),
        });
    }
    Ok(())
}

impl<S: Read + Write> Channel<S> {
    /// `client`: this side connected, and writes first in every exchange.
    pub fn new(stream: S, client: bool) -> Channel<S> {
        Channel { stream, client }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// The byte stream, for a side that watches it for readability.
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// One exchange of `N` bytes each way.
    fn xchg<const N: usize>(&mut self, mine: &[u8; N], what: &'static str) -> Result<[u8; N]> {
        let mut theirs = [0u8; N];
        if self.client {
            self.stream.write_all(mine)?;
            self.stream.flush()?;
            read_message(&mut self.stream, &mut theirs, what)?;
        } else {
            read_message(&mut self.stream, &mut theirs, what)?;
            self.stream.write_all(mine)?;
            self.stream.flush()?;
        }
        Ok(theirs)
    }

    /// Step 1: versions; refuses a peer older than 5.70.
    pub fn versions(&mut self, mine: &str) -> Result<Version> {
        let theirs = decode_version(&self.xchg(&encode_version(mine), "version")?)?;
        if theirs.value < MIN_PEER_VERSION {
            return Err(PerfHandshakeError::OldVersion(theirs.text));
        }
        Ok(theirs)
    }

    /// Step 2: (cycle buffer, cache line size), each the larger of the two
    /// sides'.
    pub fn sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32)> {
        let c = u32::from_be_bytes(self.xchg(&cycle_buffer.to_be_bytes(), "system data")?);
        let l = u32::from_be_bytes(self.xchg(&cache_line.to_be_bytes(), "system data")?);
        Ok((c.max(cycle_buffer), l.max(cache_line)))
    }

    /// Step 3: the MTU (`enum ibv_mtu`) both use: the smaller, unless the
    /// peer's is not valid.
    pub fn mtu(&mut self, mine: u8) -> Result<u8> {
        let theirs = decode_mtu(&self.xchg(&encode_mtu(mine), "MTU")?);
        Ok(theirs.map_or(mine, |t| t.min(mine)))
    }

    /// One key exchange.
    pub fn keys(&mut self, mine: &Keys) -> Result<Keys> {
        Keys::decode(&self.xchg(&mine.encode(), "key message")?)
    }

    /// A key exchange used as a barrier: the peer must send what it sent
    /// for that QP before.
    fn barrier(&mut self, mine: &Keys, expect: &Keys) -> Result<()> {
        let got = self.keys(mine)?;
        if got != *expect {
            return Err(PerfHandshakeError::OutOfStep {
                expected: format!("the keys of QP 0x{:06x} again", expect.qpn),
                got: format!("the keys of QP 0x{:06x}", got.qpn),
            });
        }
        Ok(())
    }

    /// Step 4: one round of key messages, one per QP; returns the peer's.
    pub fn connect_round(&mut self, mine: &[Keys]) -> Result<Vec<Keys>> {
        mine.iter().map(|k| self.keys(k)).collect()
    }

    /// Step 5 up to the run: the barriers after the first round. When this
    /// returns, the peer's QPs are connected and (SEND tests) its receives
    /// posted, so the run may start; a server must have done the same
    /// before calling it, since its last answer releases the client.
    pub fn ready(&mut self, flow: &Flow, mine: &[Keys], theirs: &[Keys]) -> Result<()> {
        let round = |ch: &mut Self| -> Result<()> {
            for (m, t) in mine.iter().zip(theirs) {
                ch.barrier(m, t)?;
            }
            Ok(())
        };
        if flow.has_report() {
            round(self)?;
            self.barrier(&mine[0], &theirs[0])
        } else {
            self.barrier(&mine[0], &theirs[0])?;
            round(self)?;
            self.barrier(&mine[0], &theirs[0])
        }
    }

    /// After the run: the barrier, the report (bandwidth RDMA tests: the
    /// client's, returned to both sides), the last barrier and `done`.
    pub fn finish(
        &mut self,
        flow: &Flow,
        mine: &Keys,
        theirs: &Keys,
        report: &Report,
    ) -> Result<Option<Report>> {
        let mut got = None;
        if flow.has_report() {
            self.barrier(mine, theirs)?;
            let f = report.fields();
            let mut r = [[0u8; REPORT_FIELD_LEN]; 5];
            for (i, field) in f.iter().enumerate() {
                r[i] = self.xchg(field, "report")?;
            }
            let remote = Report::from_fields(&r);
            got = Some(if self.client { *report } else { remote });
        }
        if flow.has_close() {
            self.barrier(mine, theirs)?;
            // perftest writes its own and closes without reading ours, so
            // the connection may already be reset; after the barrier, a
            // close is as good as a `done`, but not something else.
            let gone = |e: &io::Error| {
                matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                )
            };
            match self
                .stream
                .write_all(DONE)
                .and_then(|()| self.stream.flush())
            {
                Ok(()) => {}
                Err(e) if gone(&e) => return Ok(got),
                Err(e) => return Err(e.into()),
            }
            let mut done = [0u8; DONE.len()];
            match read_message(&mut self.stream, &mut done, "done") {
                Ok(()) if &done == DONE => {}
                Ok(()) => {
                    return Err(PerfHandshakeError::OutOfStep {
                        expected: "\"done\"".into(),
                        got: format!("{:?}", String::from_utf8_lossy(&done)),
                    })
                }
                Err(PerfHandshakeError::ShortRead { .. }) => {}
                Err(PerfHandshakeError::Io(e)) if gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded peer: reads come from its bytes, writes are kept.
    struct Replay {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Replay {
        fn new(input: Vec<u8>) -> Replay {
            Replay {
                input: io::Cursor::new(input),
                output: Vec::new(),
            }
        }
        fn left(&self) -> usize {
            self.input.get_ref().len() - self.input.position() as usize
        }
    }

    impl Read for Replay {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // One byte at a time: segments may split anywhere.
            let n = buf.len().min(1);
            self.input.read(&mut buf[..n])
        }
    }

    impl Write for Replay {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `write_bw.tcp.txt`: what the client (perftest on 10.99.0.3) sent.
    const WRITE_BW_CLIENT: &str = "
        362e3036000000000000000000000000 00001000 00000040 3300
        303030303a303030313a3030303031383a6666663535313a30303030303631373a
        303030303535623965643138663030303a30303a30303a30303a30303a30303a30
        303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30
        303030303030303a00
        303030303a303030313a3030303031383a6666663535313a30303030303631373a
        303030303535623965643138663030303a30303a30303a30303a30303a30303a30
        303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30
        303030303030303a00
        303030303a303030313a3030303031383a6666663535313a30303030303631373a
        303030303535623965643138663030303a30303a30303a30303a30303a30303a30
        303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30
        303030303030303a00
        303030303a303030313a3030303031383a6666663535313a30303030303631373a
        303030303535623965643138663030303a30303a30303a30303a30303a30303a30
        303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30
        303030303030303a00
        0000000000001000 0000000000000064 400d7f238461abb4 400d3e26d8622191
        3f4ea9cc8e499212
        303030303a303030313a3030303031383a6666663535313a30303030303631373a
        303030303535623965643138663030303a30303a30303a30303a30303a30303a30
        303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30
        303030303030303a00
        646f6e6500";

    fn write_bw_client_keys() -> Keys {
        let gid = Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 3));
        Keys {
            lid: 0,
            out_reads: 1,
            qpn: 0x18,
            psn: 0xfff551,
            rkey: 0x617,
            vaddr: 0x0000_55b9_ed18_f000,
            gid,
            srqn: 0,
        }
    }

    fn server_keys(out_reads: u16) -> Keys {
        let gid = Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 2));
        Keys {
            lid: 0,
            out_reads,
            qpn: 0x1c,
            psn: 0x2c2ef4,
            rkey: 0xa07,
            vaddr: 0x0000_5650_7e97_e000,
            gid,
            srqn: 0,
        }
    }

    /// The server's side of a whole test, as `rxe perf` runs it.
    fn serve(flow: Flow, peer: Vec<u8>, mine: Keys) -> (Replay, Keys, Option<Report>) {
        let mut ch = Channel::new(Replay::new(peer), false);
        let v = ch.versions(VERSION).unwrap();
        assert_eq!(v.text, "6.06");
        assert_eq!(ch.sys_data(4096, 64).unwrap(), (4096, 64));
        assert_eq!(ch.mtu(5).unwrap(), 3);
        let mine = vec![mine; flow.qps];
        let theirs = ch.connect_round(&mine).unwrap();
        ch.ready(&flow, &mine, &theirs).unwrap();
        let r = ch
            .finish(&flow, &mine[0], &theirs[0], &Report::default())
            .unwrap();
        (ch.into_inner(), theirs[0], r)
    }

    #[test]
    fn keys_match_the_recorded_bytes() {
        let stream = unhex(WRITE_BW_CLIENT);
        let msg = &stream[26..26 + KEYS_LEN];
        let k = Keys::decode(msg).unwrap();
        assert_eq!(k, write_bw_client_keys());
        assert_eq!(&k.encode()[..], msg);
        // The server's, from the same capture; READ and atomic tests send
        // 128 outstanding reads.
        let s = server_keys(1).encode();
        assert_eq!(
            std::str::from_utf8(&s[..KEYS_LEN - 1]).unwrap(),
            "0000:0001:00001c:2c2ef4:00000a07:000056507e97e000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:63:00:02:00000000:"
        );
        assert!(std::str::from_utf8(&server_keys(128).encode())
            .unwrap()
            .starts_with("0000:0080:00001c:"));
        // Upper-case hex is read too.
        let upper: Vec<u8> = msg.iter().map(|c| c.to_ascii_uppercase()).collect();
        assert_eq!(Keys::decode(&upper).unwrap(), k);
    }

    #[test]
    fn fixed_messages_match_the_recorded_bytes() {
        let stream = unhex(WRITE_BW_CLIENT);
        assert_eq!(encode_version("6.06")[..], stream[..16]);
        assert_eq!(stream[16..20], 4096u32.to_be_bytes());
        assert_eq!(stream[20..24], 64u32.to_be_bytes());
        assert_eq!(encode_mtu(3)[..], stream[24..26]);
        assert_eq!(decode_mtu(&[b'3', 0]), Some(3));
        assert_eq!(decode_mtu(&[b'5', 0]), Some(5));
        assert_eq!(decode_mtu(&[b'7', 0]), None);
        assert_eq!(decode_mtu(b"33"), None);
        let v = decode_version(&encode_version("6.06")).unwrap();
        assert!((v.value - 6.06).abs() < 1e-9);
        assert_eq!(&stream[stream.len() - 5..], DONE);
    }

    #[test]
    fn report_matches_the_recorded_bytes() {
        // write_bw.decoded.txt: 4096 B, 100 iterations, 3.68708 / 3.65535
        // MB/s, 0.000935769 Mpps.
        let stream = unhex(WRITE_BW_CLIENT);
        let at = 26 + 4 * KEYS_LEN;
        let mut f = [[0u8; 8]; 5];
        for (i, x) in f.iter_mut().enumerate() {
            x.copy_from_slice(&stream[at + 8 * i..at + 8 * i + 8]);
        }
        let r = Report::from_fields(&f);
        assert_eq!((r.size, r.iters), (4096, 100));
        assert!((r.bw_peak - 3.68708).abs() < 1e-5, "{r:?}");
        assert!((r.bw_avg - 3.65535).abs() < 1e-5, "{r:?}");
        assert!((r.msg_rate - 0.000935769).abs() < 1e-9, "{r:?}");
        assert_eq!(r.fields(), f);
    }

    #[test]
    fn serves_the_recorded_write_bw_client() {
        let flow = Flow {
            verb: Verb::Write,
            lat: false,
            qps: 1,
        };
        let (rec, theirs, report) = serve(flow, unhex(WRITE_BW_CLIENT), server_keys(1));
        assert_eq!(rec.left(), 0, "the whole client stream was read");
        assert_eq!(theirs, write_bw_client_keys());
        let r = report.unwrap();
        assert_eq!((r.size, r.iters), (4096, 100));
        // What we wrote has the recorded server's shape: 611 bytes.
        assert_eq!(rec.output.len(), 611);
        assert_eq!(flow.key_messages(), 5);
    }

    /// The client's side against recorded servers: every test's byte count.
    #[test]
    fn talks_to_recorded_servers_of_every_test() {
        // (flow, bytes the server sent in the capture, key messages).
        let cases = [
            (Verb::Write, false, 611, 5),
            (Verb::Read, false, 611, 5),
            (Verb::Atomic, false, 611, 5),
            (Verb::Send, false, 571, 5),
            (Verb::Send, true, 571, 5),
            (Verb::Read, true, 571, 5),
            (Verb::Write, true, 458, 4),
        ];
        for (verb, lat, server_bytes, keys) in cases {
            let flow = Flow { verb, lat, qps: 1 };
            assert_eq!(flow.key_messages(), keys, "{flow:?}");
            // A server that answers exactly as perftest's did.
            let sk = server_keys(if matches!(verb, Verb::Read | Verb::Atomic) {
                128
            } else {
                1
            });
            let mut peer = Vec::new();
            peer.extend_from_slice(&encode_version("6.06"));
            peer.extend_from_slice(&4096u32.to_be_bytes());
            peer.extend_from_slice(&64u32.to_be_bytes());
            peer.extend_from_slice(&encode_mtu(3));
            let after = usize::from(flow.has_report()) + usize::from(flow.has_close());
            for _ in 0..keys - after {
                peer.extend_from_slice(&sk.encode());
            }
            if flow.has_report() {
                peer.extend_from_slice(&sk.encode());
                peer.extend_from_slice(&[0xa5; 40]);
            }
            if flow.has_close() {
                peer.extend_from_slice(&sk.encode());
                peer.extend_from_slice(DONE);
            }
            assert_eq!(peer.len(), server_bytes, "{flow:?}");
            let mut ch = Channel::new(Replay::new(peer), true);
            ch.versions(VERSION).unwrap();
            ch.sys_data(4096, 64).unwrap();
            assert_eq!(ch.mtu(3).unwrap(), 3);
            let mine = [write_bw_client_keys()];
            let theirs = ch.connect_round(&mine).unwrap();
            assert_eq!(theirs, [sk]);
            ch.ready(&flow, &mine, &theirs).unwrap();
            let mine_report = Report {
                size: 4096,
                iters: 100,
                bw_peak: 1.5,
                bw_avg: 1.25,
                msg_rate: 0.5,
            };
            let r = ch
                .finish(&flow, &mine[0], &theirs[0], &mine_report)
                .unwrap();
            assert_eq!(r, flow.has_report().then_some(mine_report), "{flow:?}");
            let rec = ch.into_inner();
            assert_eq!(rec.left(), 0, "{flow:?}");
            assert_eq!(rec.output.len(), server_bytes, "{flow:?}");
        }
    }

    #[test]
    fn several_qps_repeat_the_rounds() {
        // Recorded with -q 2 through a relay: write_bw sends two rounds of
        // per-QP keys, then QP 0's; send_bw QP 0's between the rounds.
        let mk = |qpn| Keys {
            qpn,
            ..write_bw_client_keys()
        };
        let mine = [mk(0x21), mk(0x22)];
        let theirs = [mk(0x23), mk(0x24)];
        for (verb, order) in [
            (Verb::Write, vec![0, 1, 0, 1, 0]),
            (Verb::Send, vec![0, 1, 0, 0, 1, 0]),
        ] {
            let flow = Flow {
                verb,
                lat: false,
                qps: 2,
            };
            let mut peer = Vec::new();
            for &i in &order {
                peer.extend_from_slice(&theirs[i].encode());
            }
            let mut ch = Channel::new(Replay::new(peer), true);
            let got = ch.connect_round(&mine).unwrap();
            assert_eq!(got, theirs);
            ch.ready(&flow, &mine, &got).unwrap();
            let rec = ch.into_inner();
            assert_eq!(rec.left(), 0);
            let sent: Vec<u32> = rec
                .output
                .chunks(KEYS_LEN)
                .map(|m| Keys::decode(m).unwrap().qpn)
                .collect();
            let want: Vec<u32> = order.iter().map(|&i| mine[i].qpn).collect();
            assert_eq!(sent, want, "{verb:?}");
            // After the run: the barrier before the report, and the last.
            let after = if flow.has_report() { 2 } else { 1 };
            assert_eq!(flow.key_messages(), order.len() + after);
        }
        // A peer that answers with the wrong QP is out of step.
        let flow = Flow {
            verb: Verb::Write,
            lat: false,
            qps: 2,
        };
        let mut peer = Vec::new();
        for i in [0, 1, 1] {
            peer.extend_from_slice(&theirs[i].encode());
        }
        let mut ch = Channel::new(Replay::new(peer), true);
        let got = ch.connect_round(&mine).unwrap();
        assert!(matches!(
            ch.ready(&flow, &mine, &got),
            Err(PerfHandshakeError::OutOfStep { .. })
        ));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let good = write_bw_client_keys().encode();
        assert!(Keys::decode(&good[..107]).is_err());
        assert!(Keys::decode(&[0u8; 108]).is_err());
        assert!(Keys::decode(&[b':'; 108]).is_err());
        assert!(Keys::decode(&[0xff; 108]).is_err());
        let mut no_nul = good;
        no_nul[107] = b'x';
        assert!(Keys::decode(&no_nul).is_err());
        let mut bad_hex = good;
        bad_hex[0] = b'g';
        assert!(Keys::decode(&bad_hex).is_err());
        let mut bad_colon = good;
        bad_colon[4] = b'-';
        assert!(Keys::decode(&bad_colon).is_err());
        // Every single-byte corruption is either refused or parsed, never
        // a panic.
        for i in 0..KEYS_LEN {
            for b in [0u8, b':', b'0', b'f', 0x80] {
                let mut m = good;
                m[i] = b;
                let _ = Keys::decode(&m);
            }
        }
        assert!(decode_version(&[0u8; 16]).is_err());
        assert!(decode_version(&encode_version("abc")).is_err());
        assert!(decode_version(&[0xff; 16]).is_err());
        assert!(decode_version(&encode_version("5.5")).is_ok());
        // An old peer is refused, a short stream is an error.
        let mut ch = Channel::new(Replay::new(encode_version("5.60").to_vec()), true);
        assert!(matches!(
            ch.versions(VERSION),
            Err(PerfHandshakeError::OldVersion(_))
        ));
        let mut ch = Channel::new(Replay::new(vec![b'6'; 10]), false);
        assert!(matches!(
            ch.versions(VERSION),
            Err(PerfHandshakeError::ShortRead { got: 10, .. })
        ));
        let mut ch = Channel::new(Replay::new(good[..50].to_vec()), false);
        assert!(matches!(
            ch.keys(&good_keys()),
            Err(PerfHandshakeError::ShortRead { got: 50, .. })
        ));
        // The peer's done may be missing (a close is as good) but not wrong.
        let flow = Flow {
            verb: Verb::Send,
            lat: false,
            qps: 1,
        };
        let k = good_keys();
        let mut peer = k.encode().to_vec();
        peer.extend_from_slice(b"nope\0");
        let mut ch = Channel::new(Replay::new(peer), true);
        assert!(ch.finish(&flow, &k, &k, &Report::default()).is_err());
        let mut ch = Channel::new(Replay::new(k.encode().to_vec()), true);
        assert!(ch.finish(&flow, &k, &k, &Report::default()).is_ok());
    }

    fn good_keys() -> Keys {
        write_bw_client_keys()
    }

    #[test]
    fn fields_are_cut_to_their_width() {
        let k = Keys {
            qpn: 0x1ab_cdef,
            psn: 0xffff_ffff,
            ..Keys::default()
        };
        let d = Keys::decode(&k.encode()).unwrap();
        assert_eq!((d.qpn, d.psn), (0xab_cdef, 0xff_ffff));
        assert_eq!(encode_version("0123456789abcdefXYZ")[15], 0);
    }
}
