#!/usr/bin/env bash
# perftest's tables, measured: rxe against the kernel's Soft-RoCE in the
# reference guest (perftest 4.5's own ib_* tools, each in both directions),
# then rxe against rxe over loopback (127.0.0.71 and .72). Release build.
#
#   bash scripts/perf-tables.sh [ITERS]     (default 1000)
#
# Boots the guest as scripts/interop.sh does and stops it at the end. Each
# row is the table of the client side, which measures (for a bandwidth test
# with rxe as server, the guest client's table). A run that fails prints
# its output and the script goes on with the next.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}

fail() {
    echo "perf-tables: $*" >&2
    exit 1
}

cargo build -q --release --bin rxe
R=$PWD/target/release/rxe

# shellcheck source=scripts/peer-up.sh
. scripts/peer-up.sh

# The table's header and row from a tool's output; the whole output if it
# has none (a failure).
table() { grep -A1 "#bytes" "$1" | head -2 | grep . || cat "$1"; }

out=$(mktemp -d)
trap 'rm -rf "$out"; "$PEER/peer.sh" stop >/dev/null 2>&1 || true' EXIT

# tool and options (perftest), then rxe perf's arguments.
kernel() {
    local tool=$1 opts=$2 ours=$3
    echo "## $tool $opts: guest server, rxe client"
    local job
    job=$("$PEER/peer.sh" exec --bg "$tool -d rxe0 -x 1 -F $opts")
    "$PEER/peer.sh" waitport 18515 30 >/dev/null
    # shellcheck disable=SC2086
    ip netns exec rxepeer "$R" perf $ours --ip 10.99.0.1 --timeout 120 10.99.0.2 >"$out/rxe" 2>&1 || true
    "$PEER/peer.sh" wait -t 150 "$job" >"$out/guest" 2>&1 || true
    table "$out/rxe"
    echo "## $tool $opts: rxe server, guest client"
    # shellcheck disable=SC2086
    ip netns exec rxepeer "$R" perf $ours --ip 10.99.0.1 --timeout 120 >"$out/rxe" 2>&1 &
    local srv=$!
    sleep 1.5
    "$PEER/peer.sh" exec -t 150 "$tool -d rxe0 -x 1 -F $opts 10.99.0.1" >"$out/guest" 2>&1 || true
    wait "$srv" || true
    table "$out/guest"
}

loopback() {
    echo "## rxe perf $*: rxe server (127.0.0.71), rxe client (127.0.0.72)"
    "$R" perf "$@" --ip 127.0.0.71 -p 28991 --timeout 60 >"$out/srv" 2>&1 &
    local srv=$!
    sleep 0.7
    "$R" perf "$@" --ip 127.0.0.72 -p 28991 --timeout 60 127.0.0.71 >"$out/cli" 2>&1 || true
    wait "$srv" || true
    table "$out/cli"
}

echo "# rxe <-> kernel rxe (guest under $(cat "${RXE_PEER_CACHE:-/var/tmp/rxe-peer}/run/accel" 2>/dev/null || echo '?')), $N iterations"
kernel ib_write_bw "-n $N" "write -n $N"
kernel ib_read_bw "-n $N" "read -n $N"
kernel ib_send_bw "-n $N" "send -n $N"
kernel ib_atomic_bw "-n $N" "atomic -n $N"
kernel ib_atomic_bw "-n $N -A CMP_AND_SWAP" "atomic -n $N --cmp-swap"
kernel ib_write_lat "-n $N" "write --lat -n $N"
kernel ib_read_lat "-n $N" "read --lat -n $N"
kernel ib_send_lat "-n $N" "send --lat -n $N"
"$PEER/peer.sh" stop >/dev/null 2>&1 || true

echo "# rxe <-> rxe over loopback, perftest defaults, every byte checked"
loopback write --check
loopback read --check
loopback send --check
loopback atomic --check
loopback atomic --cmp-swap --check
loopback write --lat --check
loopback read --lat --check
loopback send --lat --check
