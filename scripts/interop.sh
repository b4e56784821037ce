#!/usr/bin/env bash
# Interop with the kernel's own Soft-RoCE: installs QEMU if missing, builds
# and boots the reference guest (Linux 6.1 rdma_rxe with rdma-core's and
# perftest's tools; its image is cached in ${RXE_PEER_CACHE:-/var/tmp/rxe-peer},
# outside the repository) with a 9000-byte MTU, runs the interop tests
# (integration/tests/interop_*.rs: every tool in both directions, and the
# netem fault cases), then stops the guest.
#
# scripts/test.sh runs it. When the peer cannot be installed, built or
# booted, it fails and says why; RXE_SKIP_INTEROP=1 skips it (loudly).
set -euo pipefail
cd "$(dirname "$0")/.."

banner() { printf '\n=== interop: %s ===\n\n' "$*" >&2; }

if [ -n "${RXE_SKIP_INTEROP:-}" ]; then
    banner "SKIPPED because RXE_SKIP_INTEROP is set: nothing was tested against the kernel's Soft-RoCE"
    exit 0
fi
fail() {
    banner "FAILED: $*. The interop tests did not run. Set RXE_SKIP_INTEROP=1 to skip them knowingly"
    exit 1
}

bash scripts/setup.sh

# shellcheck source=scripts/peer-up.sh
. scripts/peer-up.sh

# rxe, and the drop-in libraries `rxe exec` finds next to it.
# (Two commands: `--bin rxe` would limit the libraries' packages to a bin
# target they do not have, building nothing for them.)
cargo build -q -p rxe-ibverbs -p rxe-stub-mlx5 -p rxe-stub-efa
cargo build -q --bin rxe -p rxe-cli
RXE_PEER_DIR="$PEER" cargo test -p rxe-integration --test interop_pingpong --test interop_perf --test interop_ibverbs --test interop_rdmacm -- --ignored --test-threads=1
