#!/usr/bin/env bash
# Runs the tests of the memory shared between applications and the device
# under Miri, if a nightly toolchain with Miri is installed: rxe-verbs'
# SharedBuffer (no `unsafe`, Miri checks the atomics) and rxe-ibverbs'
# foreign module (the one place that reads and writes a C program's
# registered memory, with `unsafe`), and the C socket addresses the drop-in
# librdmacm reads from programs (`rdmacm::sockaddr`, unaligned reads).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri: skipped (no nightly toolchain with the miri component)"
    exit 0
fi
# proptest saves failures under the working directory: Miri must see it.
MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p rxe-verbs --lib shared_buffer
MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p rxe-ibverbs --lib foreign
MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p rxe-ibverbs --lib rdmacm::sockaddr
