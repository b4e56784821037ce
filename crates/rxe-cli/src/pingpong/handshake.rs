//! The out-of-band TCP handshake of the libibverbs pingpong examples
//! (`ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`,
//! `ibv_srq_pingpong`), byte for byte, so that `rxe pingpong` and the real
//! tools can talk to each other.
//!
//! Each side describes a QP in one 52-byte message: the text
//! `LLLL:QQQQQQ:PPPPPP:GGGG…G` (LID, QPN and initial send PSN in lowercase
//! hex, then the 16 GID bytes in network order as 32 hex digits) and a
//! terminating NUL, which is counted. The client speaks first; the server
//! reads, connects its QP(s) with what it read, answers with its own
//! message(s), and the client ends with the 5 bytes `done\0`.
//! `srq_pingpong` sends [`SRQ_MESSAGES`] messages each way whatever the
//! number of QPs: the ones past the last QP are all zero.
//!
//! Every message goes out in one `write`; reads take exactly the message
//! size (a peer's segments may be split or merged on the way).

use std::io::{self, Read, Write};

use rxe_verbs::Gid;

use crate::side_channel::read_full;

/// The TCP port the pingpong tools use unless told otherwise (`-p`).
pub const DEFAULT_PORT: u16 = 18515;
/// Length of one QP description on the wire, NUL included.
pub const MSG_LEN: usize = 52;
/// What the client sends last.
pub const DONE: &[u8; 5] = b"done\0";
/// `srq_pingpong` always exchanges this many descriptions in each direction.
pub const SRQ_MESSAGES: usize = 256;

/// One side's QP, as the handshake describes it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Dest {
    /// 0 on RoCE.
    pub lid: u16,
    /// 24 bits.
    pub qpn: u32,
    /// The sender's initial send PSN, 24 bits; the peer uses it as its
    /// expected receive PSN.
    pub psn: u32,
    /// Raw GID bytes; all zero when the sender ran without a GID index.
    pub gid: Gid,
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("malformed pingpong message ({reason}): {text:?}")]
    Malformed { reason: &'static str, text: String },
    #[error("the peer closed the connection after {got} of {want} bytes")]
    ShortRead { got: usize, want: usize },
    #[error("expected \"done\" from the client, got {0:?}")]
    NotDone(String),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Dest {
    /// The 52 bytes that describe this QP. QPN and PSN are 24-bit fields:
    /// higher bits are dropped (the C tools would print more digits and
    /// overflow their buffer).
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid.as_bytes() {
            text.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; MSG_LEN];
        out[..MSG_LEN - 1].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses one message. It must be exactly [`MSG_LEN`] bytes: the four
    /// fields with their colons, hex digits only (either case), and the NUL.
    pub fn decode(msg: &[u8]) -> Result<Dest, HandshakeError> {
        let bad = |reason| HandshakeError::Malformed {
            reason,
            text: String::from_utf8_lossy(msg).into_owned(),
        };
        if msg.len() != MSG_LEN {
            return Err(bad("not 52 bytes"));
        }
        if msg[MSG_LEN - 1] != 0 {
            return Err(bad("no terminating NUL"));
        }
        if msg[4] != b':' || msg[11] != b':' || msg[18] != b':' {
            return Err(bad("fields are not separated by colons where expected"));
        }
        let field = |range: std::ops::Range<usize>| -> Result<u32, HandshakeError> {
            let mut v = 0u32;
            for &c in &msg[range] {
                v = v << 4
                    | hex_digit(c).ok_or_else(|| bad("a field holds a non-hex character"))?;
            }
            Ok(v)
        };
        let lid = field(0..4)? as u16;
        let qpn = field(5..11)?;
        let psn = field(12..18)?;
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            let at = 19 + 2 * i;
            *g = field(at..at + 2)? as u8;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Gid::from(gid),
        })
    }

    /// Whether this is one of `srq_pingpong`'s all-zero padding messages.
    pub fn is_null(&self) -> bool {
        *self == Dest::default()
    }

    /// The GID as `inet_ntop` prints it (`::ffff:10.0.0.1`), as the tools
    /// print it in their "local address" and "remote address" lines.
    pub fn gid_text(&self) -> String {
        self.gid.to_string()
    }
}

fn hex_digit(c: u8) -> Option<u32> {
    (c as char).to_digit(16)
}

fn read_exactly<S: Read>(stream: &mut S, buf: &mut [u8]) -> Result<(), HandshakeError> {
    let got = read_full(stream, buf)?;
    if got < buf.len() {
        return Err(HandshakeError::ShortRead {
            got,
            want: buf.len(),
        });
    }
    Ok(())
}

/// Reads `n` descriptions.
pub fn read_dests<S: Read>(stream: &mut S, n: usize) -> Result<Vec<Dest>, HandshakeError> {
    let mut out = Vec::with_capacity(n);
    let mut msg = [0u8; MSG_LEN];
    for _ in 0..n {
        read_exactly(stream, &mut msg)?;
        out.push(Dest::decode(&msg)?);
    }
    Ok(out)
}

/// Writes `dests`, each in one write, then all-zero messages up to `total`
/// (`srq_pingpong`'s padding; `total` = `dests.len()` for the others).
pub fn write_dests<S: Write>(
    stream: &mut S,
    dests: &[Dest],
    total: usize,
) -> Result<(), HandshakeError> {
    for i in 0..total.max(dests.len()) {
        let d = dests.get(i).copied().unwrap_or_default();
        stream.write_all(&d.encode())?;
    }
    stream.flush()?;
    Ok(())
}

/// The client's whole side: send ours (padded to `total`), read the
/// server's `total`, send `done`. Returns the server's descriptions.
pub fn client_exchange<S: Read + Write>(
    stream: &mut S,
    mine: &[Dest],
    total: usize,
) -> Result<Vec<Dest>, HandshakeError> {
    write_dests(stream, mine, total)?;
    let theirs = read_dests(stream, total)?;
    stream.write_all(DONE)?;
    stream.flush()?;
    Ok(theirs)
}

/// The server's second half, after it has read the client's descriptions
/// and connected its QPs: answer with ours and wait for `done`.
pub fn server_reply<S: Read + Write>(
    stream: &mut S,
    mine: &[Dest],
    total: usize,
) -> Result<(), HandshakeError> {
    write_dests(stream, mine, total)?;
    let mut done = [0u8; DONE.len()];
    read_exactly(stream, &mut done)?;
    if &done != DONE {
        return Err(HandshakeError::NotDone(
            String::from_utf8_lossy(&done).into_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// The client's message of `captures/handshake/rc_pingpong.tcp.txt`.
    const CAPTURED: &[u8; 52] = b"0000:000011:63c9c5:00000000000000000000ffff0a630003\0";

    fn captured_dest() -> Dest {
        let gid = Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 3));
        Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x63c9c5,
            gid,
        }
    }

    #[test]
    fn encodes_as_the_real_tool_does() {
        assert_eq!(&captured_dest().encode(), CAPTURED);
        assert_eq!(captured_dest().gid_text(), "::ffff:10.99.0.3");
    }

    #[test]
    fn decodes_a_captured_message() {
        assert_eq!(Dest::decode(CAPTURED).unwrap(), captured_dest());
    }

    #[test]
    fn round_trips_extremes_and_accepts_upper_case() {
        let d = Dest {
            lid: 0xffff,
            qpn: 0xff_ffff,
            psn: 0xab_cdef,
            gid: Gid::from([0xfe; 16]),
        };
        assert_eq!(Dest::decode(&d.encode()).unwrap(), d);
        let upper: Vec<u8> = d.encode().iter().map(u8::to_ascii_uppercase).collect();
        assert_eq!(Dest::decode(&upper).unwrap(), d);
        // Out-of-range QPN/PSN are cut to 24 bits, never longer messages.
        let wide = Dest {
            qpn: 0x1ff_ffff,
            psn: 0xf00_0001,
            ..d
        };
        let back = Dest::decode(&wide.encode()).unwrap();
        assert_eq!((back.qpn, back.psn), (0xff_ffff, 1));
    }

    #[test]
    fn null_message_is_srq_padding() {
        let z = Dest::default();
        assert!(z.is_null());
        assert_eq!(
            &z.encode(),
            b"0000:000000:000000:00000000000000000000000000000000\0"
        );
        assert!(!captured_dest().is_null());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            CAPTURED[..51].to_vec(),
            [&CAPTURED[..], b"x"].concat(),
            {
                let mut m = CAPTURED.to_vec();
                m[51] = b'0';
                m
            },
            {
                let mut m = CAPTURED.to_vec();
                m[4] = b'-';
                m
            },
            {
                let mut m = CAPTURED.to_vec();
                m[7] = b'g';
                m
            },
            {
                let mut m = CAPTURED.to_vec();
                m[30] = 0xff;
                m
            },
            {
                let mut m = CAPTURED.to_vec();
                m[50] = 0;
                m
            },
            vec![0u8; 52],
            vec![b':'; 52],
        ];
        for c in cases {
            let e = Dest::decode(&c).unwrap_err();
            assert!(matches!(e, HandshakeError::Malformed { .. }), "{e}");
            assert!(e.to_string().contains("malformed"));
        }
        // Every single-byte corruption either still parses or is an error.
        for at in 0..52 {
            for v in [0u8, b':', b'z', 0x80, b'F'] {
                let mut m = CAPTURED.to_vec();
                m[at] = v;
                let _ = Dest::decode(&m);
            }
        }
    }

    /// A duplex in-memory stream: reads from `input`, records writes.
    struct Duplex {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
        writes: Vec<usize>,
    }

    impl Duplex {
        fn new(input: Vec<u8>) -> Duplex {
            Duplex {
                input: Cursor::new(input),
                output: vec![],
                writes: vec![],
            }
        }
    }

    impl Read for Duplex {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // Hand out at most 7 bytes at a time: reads must reassemble.
            let n = buf.len().min(7);
            self.input.read(&mut buf[..n])
        }
    }

    impl Write for Duplex {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            self.writes.push(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn client_sends_one_message_per_write_then_done() {
        let server = Dest {
            qpn: 0x15,
            psn: 0xc849dc,
            ..captured_dest()
        };
        let mut s = Duplex::new(server.encode().to_vec());
        let got = client_exchange(&mut s, &[captured_dest()], 1).unwrap();
        assert_eq!(got, vec![server]);
        assert_eq!(s.writes, vec![52, 5]);
        assert_eq!(&s.output[..52], CAPTURED);
        assert_eq!(&s.output[52..], DONE);
    }

    #[test]
    fn srq_exchange_pads_to_256() {
        let mine: Vec<Dest> = (0..4)
            .map(|i| Dest {
                qpn: 0x20 + i,
                psn: i,
                ..captured_dest()
            })
            .collect();
        let theirs: Vec<u8> = write_to_vec(&mine, SRQ_MESSAGES);
        let mut s = Duplex::new(theirs);
        let got = client_exchange(&mut s, &mine, SRQ_MESSAGES).unwrap();
        assert_eq!(got.len(), SRQ_MESSAGES);
        assert_eq!(&got[..4], &mine[..]);
        assert!(got[4..].iter().all(Dest::is_null));
        assert_eq!(s.writes.len(), SRQ_MESSAGES + 1);
        assert_eq!(s.output.len(), SRQ_MESSAGES * MSG_LEN + 5);
    }

    fn write_to_vec(d: &[Dest], total: usize) -> Vec<u8> {
        let mut v = vec![];
        write_dests(&mut v, d, total).unwrap();
        v
    }

    #[test]
    fn server_reads_then_replies_and_wants_done() {
        let mut input = CAPTURED.to_vec();
        input.extend_from_slice(DONE);
        let mut s = Duplex::new(input);
        let client = read_dests(&mut s, 1).unwrap();
        assert_eq!(client, vec![captured_dest()]);
        server_reply(&mut s, &[Dest::default()], 1).unwrap();
        assert_eq!(s.writes, vec![52]);

        let mut bad = CAPTURED.to_vec();
        bad.extend_from_slice(b"dome\0");
        let mut s = Duplex::new(bad);
        read_dests(&mut s, 1).unwrap();
        assert!(matches!(
            server_reply(&mut s, &[Dest::default()], 1),
            Err(HandshakeError::NotDone(_))
        ));
    }

    #[test]
    fn a_short_stream_is_an_error() {
        let mut s = Duplex::new(CAPTURED[..30].to_vec());
        match read_dests(&mut s, 1) {
            Err(HandshakeError::ShortRead { got: 30, want: 52 }) => {}
            other => panic!("{other:?}"),
        }
        let mut s = Duplex::new(b"do".to_vec());
        assert!(matches!(
            server_reply(&mut s, &[], 1),
            Err(HandshakeError::ShortRead { got: 2, want: 5 })
        ));
    }

    #[test]
    fn over_real_tcp() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let theirs = read_dests(&mut c, 1).unwrap();
            server_reply(
                &mut c,
                &[Dest {
                    qpn: 7,
                    ..Dest::default()
                }],
                1,
            )
            .unwrap();
            theirs
        });
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let got = client_exchange(&mut c, &[captured_dest()], 1).unwrap();
        assert_eq!(got[0].qpn, 7);
        assert_eq!(server.join().unwrap(), vec![captured_dest()]);
    }
}
