#!/usr/bin/env bash
# Remakes the pictures of docs/wire-format.md section 7 with `rxe ladder`
# and headless Chromium (no network: a network namespace of its own).
# Usage: docs/ladder/make.sh   (from the repository root, after cargo build)
set -euo pipefail
rxe=${RXE:-target/debug/rxe}
out=docs/ladder
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shot() { # capture, hash, picture
    "$rxe" ladder "$1" -o "$tmp/page.html" >/dev/null
    unshare -n chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$tmp/profile" --window-size=1500,900 \
        --screenshot="$out/$3" "file://$tmp/page.html#$2" 2>/dev/null
}
shot integration/testdata/captures/rping.pcap 'frame=7' rping.png
shot integration/testdata/captures/send_bw.pcap 'frame=155' send_bw.png
shot integration/testdata/rxe/rxe_sim_faults.pcap 'frame=9' rxe_sim_faults.png
shot integration/testdata/rxe/rxe_netem_interop.pcapng 'frame=10' rxe_netem_interop.png
shot integration/testdata/rxe/rxe_demo.pcap 'frame=8&show=BTH' rxe_demo.png
