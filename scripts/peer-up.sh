# Sourced by scripts/interop.sh and scripts/perf-tables.sh: finds the
# reference peer's scripts, installs QEMU if missing, builds the guest image
# (cached in ${RXE_PEER_CACHE:-/var/tmp/rxe-peer}, outside the repository)
# and boots guest 1 (10.99.0.2; rxe's side is 10.99.0.1 in the namespace
# rxepeer) with a 9000-byte MTU. Sets PEER; stops the guest at exit. The
# caller defines fail() (message, then exit).

# The peer's scripts: RXE_PEER_DIR, shared/interop beside the checkout, the
# workplace's copy, else the copy kept in the repository.
PEER=""
for d in "${RXE_PEER_DIR:-}" ../shared/interop /work/shared/interop integration/peer; do
    if [ -n "$d" ] && [ -x "$d/peer.sh" ] && [ -x "$d/build-peer.sh" ]; then
        PEER=$(cd "$d" && pwd)
        break
    fi
done
[ -n "$PEER" ] || fail "peer.sh and build-peer.sh not found (set RXE_PEER_DIR)"
echo "peer: scripts from $PEER" >&2

# QEMU, and what the image build uses (apt-get download, dpkg -x, readelf).
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
need_apt=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86)
command -v readelf >/dev/null 2>&1 || need_apt+=(binutils)
if [ ${#need_apt[@]} -gt 0 ]; then
    { $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null; } ||
        fail "could not install ${need_apt[*]} with apt-get"
fi
command -v qemu-system-x86_64 >/dev/null 2>&1 || fail "qemu-system-x86_64 is not installed"

# From the cache when it is complete; else fetch the packages (apt-get
# download needs current package lists).
if ! "$PEER/build-peer.sh" --offline >/dev/null 2>&1; then
    $sudo apt-get update -qq || true
    "$PEER/build-peer.sh" || fail "the guest image could not be built ($PEER/build-peer.sh)"
fi

# A guest left over from an earlier run would hold the addresses.
"$PEER/peer.sh" stop >/dev/null 2>&1 || true
trap '"$PEER/peer.sh" stop >/dev/null 2>&1 || true' EXIT
# Programs the tests build for the guest (it has no compiler) go here; the
# guest sees it read-only at /host.
export RXE_PEER_SHARE_DIR="${RXE_PEER_SHARE_DIR:-$PWD/target/peer-share}"
mkdir -p "$RXE_PEER_SHARE_DIR"
"$PEER/peer.sh" start --mtu 9000 --share "$RXE_PEER_SHARE_DIR" ||
    fail "the guest did not boot ($PEER/peer.sh start)"
