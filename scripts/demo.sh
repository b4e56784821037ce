#!/usr/bin/env bash
# The main job, until the device exists: build rxe and explain real kernel
# Soft-RoCE traffic (RC SEND/ACK, RDMA WRITE, READ, atomics, UD) captured
# from the reference peer.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q --bin rxe
rxe=target/release/rxe
caps=integration/testdata/captures

show() { # title, file, then one grep pattern per line to show (first match each)
    local title=$1 file=$2
    shift 2
    printf '\n== %s (%s)\n' "$title" "$file"
    local all
    all=$("$rxe" dissect "$caps/$file")
    for pat in "$@"; do grep -m 1 -e "$pat" <<<"$all" || true; done
}
show "RC SEND, then the ACK" rc_pingpong.pcap "SEND First" "SEND Middle" "SEND Last" "Acknowledge"
show "RDMA WRITE" write_bw.pcap "WRITE First" "WRITE Last" "Acknowledge"
show "RDMA READ request and response" read_bw.pcap "READ Request" "READ Response First" "READ Response Last"
show "FetchAdd and ATOMIC Acknowledge" atomic_bw.pcap "FetchAdd" "ATOMIC Acknowledge"
show "UD SEND with DETH" ud_pingpong.pcap "UD SEND Only"
show "CM MAD to QP1 (rdma_cm)" rping.pcap "qp=0x1 "

printf '\n== One packet, every field explained (rxe dissect -v)\n'
"$rxe" dissect -v "$caps/atomic_bw.pcap" | sed -n '1,/ICRC @/p'

printf '\n== ICRC check of every packet of every capture (rxe dissect --check)\n'
for f in "$caps"/*.pcap; do
    printf '%-22s ' "$(basename "$f")"
    "$rxe" dissect --check "$f" | tail -n 1
done
