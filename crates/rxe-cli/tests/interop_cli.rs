//! `rxe pingpong` against a peer written here from the facts of the real
//! tools' out-of-band TCP handshake (as recorded between the stock
//! tools): what goes over TCP byte by byte, and the first RoCE packet
//! that follows, read from a plain UDP socket on port 4791 — the checks
//! `host_peer_smoke.py` makes against the stock `ibv_rc_pingpong`.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use support::Rxe;

const T: Duration = Duration::from_secs(30);

/// `"%04x:%06x:%06x:%s"` + NUL, the GID of an IPv4 address.
fn message(qpn: u32, psn: u32, ip: [u8; 4]) -> Vec<u8> {
    let gid = format!(
        "00000000000000000000ffff{:02x}{:02x}{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    );
    let mut m = format!("0000:{qpn:06x}:{psn:06x}:{gid}").into_bytes();
    m.push(0);
    assert_eq!(m.len(), 52);
    m
}

/// (qpn, psn, gid hex) of a 52-byte message, checking its shape.
fn parse(m: &[u8]) -> (u32, u32, String) {
    assert_eq!(m.len(), 52);
    assert_eq!(m[51], 0, "NUL-terminated: {m:?}");
    let text = std::str::from_utf8(&m[..51]).unwrap();
    let f: Vec<&str> = text.split(':').collect();
    assert_eq!(f.len(), 4, "{text}");
    assert_eq!(
        f.iter().map(|x| x.len()).collect::<Vec<_>>(),
        [4, 6, 6, 32],
        "{text}"
    );
    assert!(
        text.chars()
            .all(|c| c == ':' || c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "lowercase hex: {text}"
    );
    assert_eq!(f[0], "0000", "LID 0 on RoCE");
    (
        u32::from_str_radix(f[1], 16).unwrap(),
        u32::from_str_radix(f[2], 16).unwrap(),
        f[3].to_string(),
    )
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).unwrap();
    b
}

#[test]
fn rc_client_speaks_to_a_stock_server() {
    // The stand-in server: TCP 127.0.105.41:28620 and UDP 127.0.105.41:4791.
    let udp = UdpSocket::bind("127.0.105.41:4791").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let tcp = TcpListener::bind("127.0.105.41:28620").unwrap();
    let mut client = Rxe::spawn(&[
        "pingpong",
        "rc",
        "--ip",
        "127.0.105.42",
        "-p",
        "28620",
        "-s",
        "64",
        "-n",
        "1",
        "--timeout",
        "3",
        "127.0.105.41",
    ]);
    let (mut c, _) = tcp.accept().unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let (qpn, psn, gid) = parse(&read_n(&mut c, 52));
    assert_eq!(
        gid, "00000000000000000000ffff7f00692a",
        "::ffff:127.0.105.42"
    );
    c.write_all(&message(0xabc, 0x123, [127, 0, 105, 41]))
        .unwrap();
    assert_eq!(read_n(&mut c, 5), b"done\0");
    // Then the client closes.
    assert_eq!(c.read(&mut [0u8; 8]).unwrap(), 0);

    // The first RoCE packet: an RC SEND Only of 64 bytes of 0x7b (the
    // tools' buffer), to QPN 0xabc, with the PSN the client announced.
    let mut buf = [0u8; 2048];
    let (n, from) = udp.recv_from(&mut buf).unwrap();
    // Any source port: it is an entropy field.
    assert_eq!(from.ip().to_string(), "127.0.105.42");
    let p = &buf[..n];
    assert_eq!(n, 12 + 64 + 4, "BTH + payload + ICRC: {p:02x?}");
    assert_eq!(p[0], 0x04, "RC SEND Only");
    assert_eq!(u32::from_be_bytes([0, p[5], p[6], p[7]]), 0xabc);
    assert_ne!(p[8] & 0x80, 0, "AckReq");
    assert_eq!(u32::from_be_bytes([0, p[9], p[10], p[11]]), psn);
    assert!(p[12..76].iter().all(|b| *b == 0x7b));

    // Nobody ACKs: the client gives up, having printed what the tool does.
    let f = client.finish(T);
    assert!(!f.ok());
    let local = format!(
        "  local address:  LID 0x0000, QPN 0x{qpn:06x}, PSN 0x{psn:06x}, GID ::ffff:127.0.105.42"
    );
    assert_eq!(f.stdout[0], local, "{f:#?}");
    assert_eq!(
        f.stdout[1],
        "  remote address: LID 0x0000, QPN 0x000abc, PSN 0x000123, GID ::ffff:127.0.105.41"
    );
}

#[test]
fn uc_server_answers_a_stock_client() {
    let mut server = Rxe::spawn(&[
        "pingpong",
        "uc",
        "--ip",
        "127.0.105.51",
        "-p",
        "28621",
        "--timeout",
        "2",
    ]);
    let line = server.wait_for_line("  local address:", T);
    let mut c = TcpStream::connect("127.0.105.51:28621").unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    // One write of 52 bytes, as the tool.
    c.write_all(&message(0xabc, 0x123, [127, 0, 105, 52]))
        .unwrap();
    let (qpn, psn, gid) = parse(&read_n(&mut c, 52));
    assert_eq!(
        gid, "00000000000000000000ffff7f006933",
        "::ffff:127.0.105.51"
    );
    assert_eq!(
        line,
        format!("  local address:  LID 0x0000, QPN 0x{qpn:06x}, PSN 0x{psn:06x}, GID ::ffff:127.0.105.51")
    );
    c.write_all(b"done\0").unwrap();
    drop(c);
    // No SEND comes: the server times out, after printing the remote line.
    let f = server.finish(T);
    assert!(!f.ok());
    assert!(
        f.stdout.contains(
            &"  remote address: LID 0x0000, QPN 0x000abc, PSN 0x000123, GID ::ffff:127.0.105.52"
                .to_string()
        ),
        "{f:#?}"
    );
    assert!(f.stderr.contains("no completion"), "{f:#?}");
}

#[test]
fn srq_client_pads_to_256_messages() {
    let tcp = TcpListener::bind("127.0.105.61:28622").unwrap();
    let mut client = Rxe::spawn(&[
        "pingpong",
        "srq",
        "-q",
        "3",
        "--ip",
        "127.0.105.62",
        "-p",
        "28622",
        "--timeout",
        "2",
        "127.0.105.61",
    ]);
    let (mut c, _) = tcp.accept().unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let all = read_n(&mut c, 256 * 52);
    let msgs: Vec<(u32, u32, String)> = all.chunks(52).map(parse).collect();
    for m in &msgs[..3] {
        assert_ne!(m.0, 0);
        assert_eq!(m.2, "00000000000000000000ffff7f00693e");
    }
    for m in &msgs[3..] {
        assert_eq!(*m, (0, 0, "0".repeat(32)), "padding is all zero");
    }
    for i in 0..256u32 {
        let m = if i < 3 {
            message(0x100 + i, i, [127, 0, 105, 61])
        } else {
            b"0000:000000:000000:00000000000000000000000000000000\0".to_vec()
        };
        c.write_all(&m).unwrap();
    }
    assert_eq!(read_n(&mut c, 5), b"done\0");
    let f = client.finish(T);
    assert!(!f.ok());
    let remotes: Vec<&String> = f
        .stdout
        .iter()
        .filter(|l| l.starts_with("  remote address:"))
        .collect();
    assert_eq!(remotes.len(), 3, "{f:#?}");
    assert!(remotes[2].contains("QPN 0x000102, PSN 0x000002"), "{f:#?}");
}
