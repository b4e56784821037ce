#!/usr/bin/env bash
# Installs what rxe's tests need on a fresh Debian 12 machine: tshark (the
# tests check that Wireshark's dissector reads what rxe builds), iproute2
# (a test makes its own network namespace with a veth pair), ethtool (the
# GSO test turns a veth's segmentation offload off), nftables (the
# congestion test's switch marks ECN CE with an nft rule), Debian's own
# RDMA programs with the libibverbs headers (the drop-in libibverbs.so.1 is
# tested with ibverbs-utils, perftest, rdmacm-utils and qperf, its struct layouts against
# libibverbs-dev's headers) and chromium (headless: the `rxe ladder` page's
# browser test; RXE_SKIP_BROWSER=1 skips it). The Rust toolchain is
# expected to be there (rustup).
set -euo pipefail

need_apt=()
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need_apt+=(ethtool)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
command -v ibv_rc_pingpong >/dev/null 2>&1 || need_apt+=(ibverbs-utils)
command -v ib_write_bw >/dev/null 2>&1 || need_apt+=(perftest)
[ -e /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
command -v rping >/dev/null 2>&1 || need_apt+=(rdmacm-utils)
command -v qperf >/dev/null 2>&1 || need_apt+=(qperf)
[ -e /usr/include/rdma/rdma_cma.h ] || need_apt+=(librdmacm-dev)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # wireshark-common asks whether non-root users may capture: answer no.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust with rustup" >&2; exit 1; }
