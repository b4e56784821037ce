#!/usr/bin/env bash
# The test command: installs what the tests need, then format, lints, docs,
# every test in the workspace, and the interop tests against the kernel's
# Soft-RoCE in a QEMU guest (scripts/interop.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The API documentation builds without a broken or private link.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
# The memory shared with the device, under Miri (skipped without nightly).
bash scripts/miri.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# Against the kernel's own Soft-RoCE in a QEMU guest (installs QEMU, builds
# and boots the guest; RXE_SKIP_INTEROP=1 skips it, loudly).
bash scripts/interop.sh 2>&1 | tee -a "$log"
interop=${PIPESTATUS[0]}
set -e
# One closing line for the whole workspace (cargo prints one per test binary,
# the last often a doc-test run with nothing in it).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
[ "$interop" -eq 0 ] || echo "interop: FAILED (exit status $interop)"
[ "$status" -ne 0 ] && exit "$status"
exit "$interop"
