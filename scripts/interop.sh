#!/usr/bin/env bash
# Interop with the kernel's own Soft-RoCE: installs QEMU if missing, builds
# and boots the reference guest (shared/interop: Linux 6.1 rdma_rxe with
# rdma-core's and perftest's tools) with a 9000-byte MTU, runs the interop
# tests (integration/tests/interop_*.rs), then stops the guest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PEER=${RXE_PEER_DIR:-}
for d in "$PEER" ../shared/interop /work/shared/interop; do
    if [ -n "$d" ] && [ -x "$d/peer.sh" ]; then PEER=$(cd "$d" && pwd); break; fi
done
[ -x "$PEER/peer.sh" ] || { echo "interop: shared/interop/peer.sh not found; set RXE_PEER_DIR" >&2; exit 1; }
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-system-x86 >/dev/null
fi
"$PEER/build-peer.sh" --offline 2>/dev/null || "$PEER/build-peer.sh"
"$PEER/peer.sh" start --mtu 9000
trap '"$PEER/peer.sh" stop' EXIT
cargo build -q --bin rxe
RXE_PEER_DIR="$PEER" cargo test -p rxe-integration --test interop_pingpong --test interop_perf -- --ignored --test-threads=1
