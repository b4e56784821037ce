//! Capture files built byte by byte for the tests, and helpers to read them.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::{CaptureError, CaptureReader, Frame, LinkType};

/// A file in the temp directory, removed on drop.
pub(crate) struct TempFile(pub(crate) PathBuf);

impl TempFile {
    pub(crate) fn new(name: &str, bytes: &[u8]) -> TempFile {
        let file = TempFile::path(name);
        std::fs::write(&file.0, bytes).unwrap();
        file
    }

    pub(crate) fn path(name: &str) -> TempFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "rxe-pcap-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        TempFile(std::env::temp_dir().join(unique))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(crate) fn read_all(bytes: &[u8]) -> (Vec<Frame>, Option<CaptureError>) {
    let mut frames = Vec::new();
    let mut reader = match CaptureReader::from_reader(Cursor::new(bytes.to_vec()), "mem") {
        Ok(r) => r,
        Err(e) => return (frames, Some(e)),
    };
    loop {
        match reader.next_frame() {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, None),
            Err(e) => {
                // Fused after an error.
                assert!(reader.next_frame().unwrap().is_none());
                assert!(reader.next().is_none());
                return (frames, Some(e));
            }
        }
    }
}

pub(crate) fn read_ok(bytes: &[u8]) -> Vec<Frame> {
    match read_all(bytes) {
        (frames, None) => frames,
        (_, Some(e)) => panic!("unexpected error: {e}"),
    }
}

pub(crate) fn put32(out: &mut Vec<u8>, big: bool, v: u32) {
    out.extend_from_slice(&if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    });
}

pub(crate) fn put16(out: &mut Vec<u8>, big: bool, v: u16) {
    out.extend_from_slice(&if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    });
}

/// A classic pcap file: records are (seconds, fraction, captured bytes, original length).
pub(crate) fn pcap_file(
    big: bool,
    nanos: bool,
    linktype: u32,
    snaplen: u32,
    records: &[(u32, u32, &[u8], u32)],
) -> Vec<u8> {
    let mut out = Vec::new();
    put32(&mut out, big, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
    put16(&mut out, big, 2);
    put16(&mut out, big, 4);
    put32(&mut out, big, 0);
    put32(&mut out, big, 0);
    put32(&mut out, big, snaplen);
    put32(&mut out, big, linktype);
    for &(sec, frac, data, orig) in records {
        put32(&mut out, big, sec);
        put32(&mut out, big, frac);
        put32(&mut out, big, data.len() as u32);
        put32(&mut out, big, orig);
        out.extend_from_slice(data);
    }
    out
}

/// Builds pcapng files block by block.
pub(crate) struct Ng {
    big: bool,
    out: Vec<u8>,
}

impl Ng {
    pub(crate) fn new(big: bool) -> Ng {
        let mut ng = Ng {
            big,
            out: Vec::new(),
        };
        ng.shb();
        ng
    }

    pub(crate) fn block(&mut self, type_: u32, body: &[u8]) -> &mut Ng {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        put32(&mut self.out, self.big, type_);
        put32(&mut self.out, self.big, len);
        self.out.extend_from_slice(body);
        self.out.extend(std::iter::repeat_n(0, pad));
        put32(&mut self.out, self.big, len);
        self
    }

    /// A section header; switches to byte order `big` for this section.
    pub(crate) fn shb_with(&mut self, big: bool) -> &mut Ng {
        self.big = big;
        let mut body = Vec::new();
        put32(&mut body, big, 0x1a2b_3c4d);
        put16(&mut body, big, 1);
        put16(&mut body, big, 0);
        body.extend_from_slice(&[0xff; 8]); // section length -1
        self.block(0x0a0d_0d0a, &body)
    }

    pub(crate) fn shb(&mut self) -> &mut Ng {
        self.shb_with(self.big)
    }

    fn options(&self, body: &mut Vec<u8>, options: &[(u16, &[u8])]) {
        if options.is_empty() {
            return;
        }
        for &(code, value) in options {
            put16(body, self.big, code);
            put16(body, self.big, value.len() as u16);
            body.extend_from_slice(value);
            body.extend(std::iter::repeat_n(0, (4 - value.len() % 4) % 4));
        }
        body.extend_from_slice(&[0; 4]);
    }

    pub(crate) fn idb(&mut self, linktype: u16, snaplen: u32, options: &[(u16, &[u8])]) -> &mut Ng {
        let mut body = Vec::new();
        put16(&mut body, self.big, linktype);
        put16(&mut body, self.big, 0);
        put32(&mut body, self.big, snaplen);
        self.options(&mut body, options);
        self.block(1, &body)
    }

    pub(crate) fn epb_with(
        &mut self,
        interface: u32,
        ts: u64,
        data: &[u8],
        orig: u32,
        options: &[(u16, &[u8])],
    ) -> &mut Ng {
        let mut body = Vec::new();
        put32(&mut body, self.big, interface);
        put32(&mut body, self.big, (ts >> 32) as u32);
        put32(&mut body, self.big, ts as u32);
        put32(&mut body, self.big, data.len() as u32);
        put32(&mut body, self.big, orig);
        body.extend_from_slice(data);
        body.extend(std::iter::repeat_n(0, (4 - data.len() % 4) % 4));
        self.options(&mut body, options);
        self.block(6, &body)
    }

    pub(crate) fn epb(&mut self, interface: u32, ts: u64, data: &[u8]) -> &mut Ng {
        self.epb_with(interface, ts, data, data.len() as u32, &[])
    }

    pub(crate) fn spb(&mut self, data: &[u8], orig: u32) -> &mut Ng {
        let mut body = Vec::new();
        put32(&mut body, self.big, orig);
        body.extend_from_slice(data);
        self.block(3, &body)
    }

    pub(crate) fn pb(&mut self, interface: u16, ts: u64, data: &[u8]) -> &mut Ng {
        let mut body = Vec::new();
        put16(&mut body, self.big, interface);
        put16(&mut body, self.big, 0);
        put32(&mut body, self.big, (ts >> 32) as u32);
        put32(&mut body, self.big, ts as u32);
        put32(&mut body, self.big, data.len() as u32);
        put32(&mut body, self.big, data.len() as u32);
        body.extend_from_slice(data);
        self.block(2, &body)
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.out.clone()
    }
}

pub(crate) fn frame(number: u64, link_type: LinkType, timestamp: Duration, data: &[u8]) -> Frame {
    Frame {
        number,
        link_type,
        timestamp,
        data: data.to_vec(),
        orig_len: data.len() as u32,
    }
}

/// A pcapng file of two sections, the second in the other byte order, with four
/// interfaces of three timestamp resolutions, and every kind of block between packets.
pub(crate) fn sample_pcapng(big: bool) -> (Vec<u8>, Vec<Frame>) {
    let mut ng = Ng::new(big);
    ng.idb(1, 0, &[(2, b"eth0")]) // Ethernet, default if_tsresol: microseconds
        .block(4, &[0, 0, 0, 0]) // Name Resolution Block, empty
        .idb(101, 65535, &[(9, &[9])]) // raw IP, nanoseconds
        .epb(0, 1_700_000_000_123_456, b"ethernet frame")
        .block(5, &[0; 12]) // Interface Statistics Block
        .epb(1, 1_700_000_001_000_000_007, b"ip")
        .block(0x0000_0bad, b"custom\0\0") // custom block
        .block(0x8000_0001, b"") // a local block type
        .spb(b"simple!", 7) // interface 0, padded to 8 bytes
        .pb(1, 1_700_000_002_500_000_000, b"old packet block")
        .epb_with(0, 3_000_000, b"cut", 1500, &[(1, &[0xff, 0xfe])]); // non-UTF-8 comment
                                                                      // if_tsoffset of 100 s, in the second section's byte order.
    let tsoffset = if big {
        100u64.to_le_bytes()
    } else {
        100u64.to_be_bytes()
    };
    ng.shb_with(!big)
        .idb(247, 0, &[(9, &[0x80 | 10]), (14, &tsoffset)]) // 2^-10 s units
        .idb(228, 0, &[])
        .epb(1, 5_000_000, b"ipv4")
        .epb(0, 3 * 1024 + 512, b"ib");
    let bytes = ng.bytes();
    let s = Duration::from_secs;
    let mut cut = frame(11, LinkType::Ethernet, Duration::from_secs(3), b"cut");
    cut.orig_len = 1500;
    let expected = vec![
        frame(
            1,
            LinkType::Ethernet,
            s(1_700_000_000) + Duration::from_micros(123_456),
            b"ethernet frame",
        ),
        frame(
            2,
            LinkType::RawIp,
            s(1_700_000_001) + Duration::from_nanos(7),
            b"ip",
        ),
        frame(3, LinkType::Ethernet, Duration::ZERO, b"simple!"),
        frame(
            4,
            LinkType::RawIp,
            s(1_700_000_002) + Duration::from_millis(500),
            b"old packet block",
        ),
        Frame { number: 5, ..cut },
        frame(6, LinkType::Ipv4, s(5), b"ipv4"),
        // 3.5 s at 2^-10 s units, plus the 100 s offset.
        frame(
            7,
            LinkType::Infiniband,
            s(103) + Duration::from_millis(500),
            b"ib",
        ),
    ];
    (bytes, expected)
}

pub(crate) fn sample_pcap() -> (Vec<u8>, Vec<Frame>) {
    let bytes = pcap_file(
        false,
        false,
        1,
        262_144,
        &[
            (1_700_000_000, 1, b"first", 5),
            (1_700_000_000, 999_999, b"", 0),
            (1_700_000_001, 0, &[0xab; 100], 100),
        ],
    );
    let s = Duration::from_secs;
    let expected = vec![
        frame(
            1,
            LinkType::Ethernet,
            s(1_700_000_000) + Duration::from_micros(1),
            b"first",
        ),
        frame(
            2,
            LinkType::Ethernet,
            s(1_700_000_000) + Duration::from_micros(999_999),
            b"",
        ),
        frame(3, LinkType::Ethernet, s(1_700_000_001), &[0xab; 100]),
    ];
    (bytes, expected)
}
