#!/usr/bin/env bash
# The main job: two software RoCE NICs in one process (127.0.0.1 and
# 127.0.0.2) doing RC SEND, RDMA WRITE with immediate, RDMA READ, CMP_SWAP,
# FETCH_ADD and a UD SEND over real UDP on loopback, every packet printed as
# `rxe dissect` explains it, the data checked after each step.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null 2>&1 || { echo "demo: cargo not found; install Rust with rustup" >&2; exit 1; }
cargo build --release -q --bin rxe
exec target/release/rxe demo "$@"
