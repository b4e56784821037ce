//! The cost of the ICRC on receive over IPv4, where a UDP socket hides the
//! Identification the ICRC covers: `icrc::verify` with the ID known (what
//! a sender pays to seal), against `icrc::solve_ipv4_id` with it unknown,
//! for one length over and over (a GRO run of equal segments) and for two
//! lengths in turn (a ping-pong's answer and ACK in one GRO datagram).
//!
//! `cargo bench -p rxe-integration --bench icrc` (add `-- --secs N` to run each
//! case longer). Prints nanoseconds per packet.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rxe_core::wire::icrc::{self, IcrcScope};
use rxe_integration::bench_args::secs;

/// A sealed RoCEv2 packet over IPv4: its IPv4 header (with `id`), UDP
/// header and transport (BTH .. ICRC) of `transport_len` bytes.
fn packet(transport_len: usize, id: u16) -> ([u8; 20], [u8; 8], Vec<u8>) {
    let total = (20 + 8 + transport_len) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    let mut udp = [0xc0, 0x01, 0x12, 0xb7, 0, 0, 0, 0];
    udp[4..6].copy_from_slice(&(total - 20).to_be_bytes());
    let mut t: Vec<u8> = (0..transport_len).map(|i| (i * 7 + 3) as u8).collect();
    let scope = IcrcScope::RoceV2 {
        ip_header: &ip,
        udp_header: &udp,
    };
    icrc::fill(&scope, &mut t).expect("a transport longer than its ICRC");
    (ip, udp, t)
}

/// Nanoseconds per call of `f` over `d`, in rounds of 1000.
fn per_call(d: Duration, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            f();
        }
        n += 1000;
    }
    start.elapsed().as_secs_f64() / n as f64 * 1e9
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this as
    // a quick smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let d = Duration::from_secs_f64(if quick { 0.05 } else { secs(1.0) });
    // A 64-byte SEND (BTH 12 + 64 + ICRC 4) and an ACK (BTH + AETH + ICRC).
    let send = packet(12 + 64 + 4, 0x1234);
    let ack = packet(12 + 4 + 4, 0x1235);
    let full = packet(12 + 4096 + 4, 0x1236);
    println!("ICRC on receive, IPv4, {:.1} s per case", d.as_secs_f64());
    for (name, p) in [("80 B", &send), ("20 B", &ack), ("4112 B", &full)] {
        let (ip, udp, t) = p;
        let scope = IcrcScope::RoceV2 {
            ip_header: ip,
            udp_header: udp,
        };
        let verify = per_call(d, || {
            black_box(icrc::verify(black_box(&scope), black_box(t)).is_ok());
        });
        let solve = per_call(d, || {
            assert!(black_box(icrc::solve_ipv4_id(black_box(ip), udp, t)).is_some());
        });
        println!(
            "transport {name:>7}  verify, ID known {verify:7.1} ns   solve, one length {solve:7.1} ns"
        );
    }
    let mut k = 0usize;
    let pair = [&send, &ack];
    let alternating = per_call(d, || {
        let (ip, udp, t) = pair[k & 1];
        k += 1;
        assert!(black_box(icrc::solve_ipv4_id(black_box(ip), udp, t)).is_some());
    });
    println!("solve, 80 B and 20 B in turn {alternating:7.1} ns per packet");
}
