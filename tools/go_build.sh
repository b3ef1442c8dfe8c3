#!/usr/bin/env bash
# go_build.sh — build the project's one Go module outside k6 (bench/simprobes_go: the fan-in
# benches' simulated probes, bench/simprobes_compiled.py) once per source version, cache it,
# print the binary's path. (The k6 extension, swarmscope/workers/k6out, is its own module:
# it is compiled into k6 by tools/build_k6.sh.)
#
#   tools/go_build.sh      # -> /var/cache/swarmscope/tools/simprobes-<hash>/swarmscope-simprobes
#
# The version is a hash of the module's *.go, go.mod, go.sum and proto/swarmscope/v1/probe.proto,
# so an edit rebuilds and an unchanged tree only checks the cached binary. The Go code of
# probe.proto is generated at build time, once, into the build's copy of the module (never
# committed): grpc_tools.protoc (the Python package the project already pins) with
# protoc-gen-go built from its module, at the version of google.golang.org/protobuf that go.mod
# pins. The gRPC client is hand-written over grpc.ClientConn, so protoc-gen-go-grpc is not needed.
# Caveats: a cold build fetches go.mod's modules through the Go module proxy (about a minute on
# 2 cores); PYTHON (default: the repo's .venv, else python3) must have grpc_tools; Go comes from
# tools/go.sh. The binary is static (CGO_ENABLED=0).
set -euo pipefail
[ $# -eq 0 ] || { echo "usage: $0   (builds bench/simprobes_go)" >&2; exit 2; }
rel=bench/simprobes_go name=simprobes binary=swarmscope-simprobes
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/$rel
PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
ver=$(cd "$ROOT" && cat "$rel"/*.go "$rel"/go.mod "$rel"/go.sum proto/swarmscope/v1/probe.proto \
  | sha256sum | cut -c1-12)
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DIR="$CACHE/$name-$ver"
BIN="$DIR/$binary"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
# names the make target, never a build inside a test's timeout.
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "$name is not built ($BIN): run \`make tools\`" >&2; exit 3; }
go_bin=$("$ROOT/tools/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$DIR"
# A private work dir, so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$SRC"/*.go "$SRC"/go.mod "$SRC"/go.sum "$tmp/"
module=$(cd "$tmp" && go list -m)
protobuf_ver=$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/protobuf)
echo "go_build: $name $ver (protoc-gen-go $protobuf_ver)" >&2
GOBIN="$tmp/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_ver" >&2
mkdir -p "$tmp/pb"
# No go_package in the .proto (it is the Python packages' too): the M option names the package.
PATH="$tmp/bin:$PATH" "$PY" -m grpc_tools.protoc -I"$ROOT/proto" --go_out="$tmp/pb" \
  --go_opt=paths=source_relative \
  --go_opt="Mswarmscope/v1/probe.proto=$module/pb" \
  swarmscope/v1/probe.proto >&2
mv "$tmp/pb/swarmscope/v1/probe.pb.go" "$tmp/pb/probe.pb.go"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/out" .) >&2
mv -f "$tmp/out" "$BIN"
echo "$BIN"
