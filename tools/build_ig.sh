#!/usr/bin/env bash
# build_ig.sh — build Inspektor Gadget's `ig` (the exec tracer under test), cached by version.
#
#   tools/build_ig.sh             # prints the path of the binary (builds it once, 2-4 min)
#   IG_VERSION=v0.35.0 tools/build_ig.sh
#
# Caveats: needs Go and the Go module proxy. v0.35 is the newest that runs here without kprobes
# (docs/platform.md#tool-builds). The module zip is read-only, so it is copied to a writable dir before building.
# Concurrent callers are serialised with flock; the binary is installed atomically (mv).
set -euo pipefail
VER=${IG_VERSION:-v0.35.0}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools/ig-$VER
BIN=$CACHE/ig
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
# names the make target, never a build inside a test's timeout.
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "ig $VER is not built ($BIN): run \`make tools\`" >&2; exit 3; }
# A Go new enough for the module (tools/go.sh fetches one through the module proxy if needed).
go_bin=$("$(dirname "$0")/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
export GOFLAGS=-mod=mod
MOD=github.com/inspektor-gadget/inspektor-gadget
dir=$(cd "$CACHE" && GO111MODULE=on go mod download -json "$MOD@$VER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$dir" ] || { echo "build_ig: go mod download of $MOD@$VER failed" >&2; exit 1; }
src=$CACHE/src
rm -rf "$src"; cp -r "$dir" "$src"; chmod -R u+w "$src"
# -s -w: no symbol table or DWARF (nothing here debugs the binary); the link is the shorter for it.
(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -checklinkname=0" -o "$CACHE/ig.tmp" ./cmd/ig) >&2
mv "$CACHE/ig.tmp" "$BIN"
rm -rf "$src"
echo "$BIN"
