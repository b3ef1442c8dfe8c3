#!/usr/bin/env bash
# build_k6.sh — build the pinned k6 once and cache it by version; print the binary's path.
#
#   tools/build_k6.sh            # -> /var/cache/swarmscope/tools/k6-v1.8.1/k6
#   K6_VERSION=v1.8.1 tools/build_k6.sh
#
# Caveats: a cold build takes ≈ 4.5 min on 2 cores (Go module proxy + compile); later runs only
# check the cached binary. Go comes from tools/go.sh.
set -euo pipefail
VER=${K6_VERSION:-v1.8.1}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DIR="$CACHE/k6-$VER"
BIN="$DIR/k6"
if [ -x "$BIN" ] && "$BIN" version >/dev/null 2>&1; then
  echo "$BIN"; exit 0
fi
# A Go new enough for the module (tools/go.sh fetches one through the module proxy if needed).
go_bin=$("$(dirname "$0")/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
mkdir -p "$DIR"
# A private GOBIN so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "build_k6: building go.k6.io/k6@$VER (cold build ≈ 4.5 min)" >&2
# -s -w: no symbol table or DWARF (nothing here debugs the binary); the link is the shorter for it.
GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "go.k6.io/k6@$VER" >&2
mv -f "$tmp/k6" "$BIN"
echo "$BIN"
