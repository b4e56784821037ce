//! rsockets through the Rust API over real UDP on loopback
//! (127.0.145.0/24): a listener and a client on two devices, a megabyte
//! each way checked byte for byte (many buffer hand-backs and credit
//! updates at 128 KiB buffers), a half-close seen as the end of the
//! stream while the other half still carries data, and a connect to a
//! port nobody listens on refused.

use std::net::SocketAddr;
use std::thread;

use rxe_verbs::cm;
use rxe_verbs::rsocket::{RListener, RStream, RsError, RsOptions, Shutdown};
use rxe_verbs::{Device, DeviceConfig};

fn device(ip: &str) -> Device {
    let dev = Device::add(DeviceConfig::on_address(ip.parse().expect("ip"))).expect("device");
    cm::start(&dev).expect("CM");
    dev
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(seed as u32) as u8)
        .collect()
}

fn read_exact(s: &RStream, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    let mut off = 0;
    while off < len {
        let n = s.recv(&mut got[off..], false, false, false).expect("recv");
        assert!(n > 0, "the stream ended after {off} of {len} bytes");
        off += n;
    }
    got
}

#[test]
fn a_megabyte_each_way_then_a_half_close() {
    let (sdev, cdev) = (device("127.0.145.1"), device("127.0.145.2"));
    let listener = RListener::listen(addr("127.0.145.1:7300"), 4).expect("listen");
    let up = pattern(1 << 20, 3);
    let down = pattern(1 << 20, 11);
    let (up2, down2) = (up.clone(), down.clone());
    let server = thread::spawn(move || {
        let s = listener
            .accept(&RsOptions::default(), false)
            .expect("accept");
        assert_eq!(read_exact(&s, up2.len()), up2, "client to server");
        // Odd-sized writes, to wrap the send buffer at odd places.
        for chunk in down2.chunks(7001) {
            assert_eq!(s.send(chunk, false).expect("send"), chunk.len());
        }
        // The client half-closes: the end of the stream, then its last
        // words are still for us to send back.
        let mut b = [0u8; 16];
        assert_eq!(s.recv(&mut b, false, false, false).expect("eof"), 0);
        assert_eq!(s.send(b"bye", false).expect("send after peer's SHUT_WR"), 3);
        s.close();
        listener.close();
    });
    let c = RStream::connect(
        Some(addr("127.0.145.2:0")),
        addr("127.0.145.1:7300"),
        &RsOptions::default(),
    )
    .expect("connect");
    assert_eq!(c.peer_addr(), Some(addr("127.0.145.1:7300")));
    assert_eq!(c.send(&up, false).expect("send"), up.len());
    assert_eq!(read_exact(&c, down.len()), down, "server to client");
    c.shutdown(Shutdown::Write).expect("shutdown write");
    let r = c.send(b"x", false);
    assert!(matches!(r, Err(RsError::Pipe)), "{r:?}");
    assert_eq!(read_exact(&c, 3), b"bye");
    let mut b = [0u8; 4];
    assert_eq!(c.recv(&mut b, false, false, false).expect("eof"), 0);
    c.close();
    server.join().expect("server");
    sdev.remove().expect("remove");
    cdev.remove().expect("remove");
}

#[test]
fn nobody_listening_is_refused() {
    let (sdev, cdev) = (device("127.0.145.11"), device("127.0.145.12"));
    let r = RStream::connect(
        Some(addr("127.0.145.12:0")),
        addr("127.0.145.11:7301"),
        &RsOptions::default(),
    );
    assert!(matches!(r, Err(RsError::Refused)), "{:?}", r.err());
    sdev.remove().expect("remove");
    cdev.remove().expect("remove");
}

#[test]
fn riowrite_lands_in_the_peers_mapped_memory() {
    use std::sync::Arc;
    let (sdev, cdev) = (device("127.0.145.21"), device("127.0.145.22"));
    let opts = RsOptions {
        iomap_size: 1,
        ..RsOptions::default()
    };
    let listener = RListener::listen(addr("127.0.145.21:7302"), 4).expect("listen");
    let o2 = opts.clone();
    let data = pattern(100_000, 5);
    let d2 = data.clone();
    let server = thread::spawn(move || {
        let s = listener.accept(&o2, false).expect("accept");
        // The mapped memory: the peer's riowrite lands here.
        let mem = Arc::new(rxe_verbs::shared_buffer::SharedBuffer::zeroed(100_000));
        assert_eq!(s.iomap(mem.clone(), true, Some(0)).expect("iomap"), 0);
        // The mapping is announced before this send's bytes.
        assert_eq!(s.send(b"go", false).expect("send"), 2);
        let mut b = [0u8; 4];
        // The client says it is done.
        assert_eq!(read_exact(&s, 4), b"done");
        let _ = &mut b;
        assert_eq!(mem.to_vec(), d2, "the mapped bytes");
        s.close();
        listener.close();
    });
    let c = RStream::connect(
        Some(addr("127.0.145.22:0")),
        addr("127.0.145.21:7302"),
        &opts,
    )
    .expect("connect");
    assert_eq!(read_exact(&c, 2), b"go");
    let mut off = 0;
    while off < data.len() {
        let n = c.iowrite(&data[off..], off as u64, false).expect("iowrite");
        assert!(n > 0, "iowrite stopped at {off}");
        off += n;
    }
    assert_eq!(c.send(b"done", false).expect("send"), 4);
    server.join().expect("server");
    c.close();
    sdev.remove().expect("remove");
    cdev.remove().expect("remove");
}
