#!/usr/bin/env bash
# build_jaeger.sh — build Jaeger v2 (OTLP in on 4317/4318, query API on 16686) from the Go
# module proxy, cached by version. Prints the binary's path.
#
#   tools/build_jaeger.sh            # -> /var/cache/swarmscope/tools/jaeger-v1.76.0/jaeger
#
# `go install` fails on this module (replace directives), so download the module and build
# ./cmd/jaeger inside it (docs/platform.md#tool-builds). Its UI assets are not in the module: the query API
# works, the UI page is a placeholder.
set -euo pipefail
VER=${JAEGER_VERSION:-v1.76.0}
DEST=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools/jaeger-$VER
BIN=$DEST/jaeger
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
# names the make target, never a build inside a test's timeout.
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "jaeger $VER is not built ($BIN): run \`make tools\`" >&2; exit 3; }
mkdir -p "$DEST"
exec 9>"$DEST/.lock"; flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# A Go new enough for the module (tools/go.sh fetches one through the module proxy if needed).
go_bin=$("$(dirname "$0")/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
export GOFLAGS=-mod=mod
dir=$(go mod download -json "github.com/jaegertracing/jaeger@$VER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
work=$(mktemp -d)
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
echo "building jaeger $VER (about 6 minutes on 2 cores)..." >&2
# -s -w: no symbol table or DWARF (nothing here debugs the binary); the link is the shorter for it.
(cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" ./cmd/jaeger)
mv "$BIN.tmp" "$BIN"
rm -rf "$work"
echo "$BIN"
