#!/usr/bin/env bash
# Bounded soak runs (not part of scripts/test.sh), from
# integration/tests/soak.rs in release mode:
#   1. 100 RC QPs between two devices (127.0.0.160, .161) through a seeded
#      lossy relay (127.0.0.162, .163: loss and duplication in user space,
#      as this machine's kernel has no netem), SEND/WRITE/READ/atomics with
#      every byte checked, RSS sampled every 10 s and bounded after warm-up;
#   2. create/destroy cycles of PD, MR, CQ and QP (127.0.0.164), RSS flat.
#
# usage: scripts/soak.sh [--duration SECONDS] [--cycles N] [--loss P]
#                        [--dup P] [--seed N]
# defaults: 600 s, 100000 cycles, loss 0.01, duplication 0.002, seed 1.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=600 cycles=100000 loss=0.01 dup=0.002 seed=1
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration=$2; shift 2 ;;
        --cycles) cycles=$2; shift 2 ;;
        --loss) loss=$2; shift 2 ;;
        --dup) dup=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
export RXE_SOAK_SECS=$duration RXE_SOAK_CYCLES=$cycles RXE_SOAK_LOSS=$loss \
    RXE_SOAK_DUP=$dup RXE_SOAK_SEED=$seed
# One test at a time (the RSS is the whole process's).
set +e
cargo test --release -p rxe-integration --test soak -- --ignored --nocapture \
    --test-threads=1 2>&1 | grep --line-buffered -E 'soak:|panicked|assert|test result|^error'
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && echo "soak: passed" || echo "soak: FAILED (exit status $status)"
exit "$status"
