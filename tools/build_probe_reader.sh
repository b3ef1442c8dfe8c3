#!/usr/bin/env bash
# build_probe_reader.sh — build the native light-probe reader (probes/reader, Go) once per source
# version, cache it, print the binary's path.
#
#   tools/build_probe_reader.sh      # -> /var/cache/swarmscope/tools/probe-reader-<hash>/swarmscope-probe-reader
#
# The version is a hash of probes/reader/*.go, go.mod, go.sum and proto/swarmscope/v1/probe.proto,
# so an edit rebuilds and an unchanged tree only checks the cached binary. The Go code of
# probe.proto is generated at build time (not committed): grpc_tools.protoc (the Python
# package the project already pins) with protoc-gen-go built from its module
# (google.golang.org/protobuf, the version go.mod pins). The gRPC client is hand-written over
# grpc.ClientConn (three methods), so protoc-gen-go-grpc is not needed.
# Caveats: a cold build fetches the modules of go.mod through the Go module proxy and takes
# about a minute on 2 cores; PYTHON (default: the repo's .venv, else python3) must have grpc_tools.
# Go comes from tools/go.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/probes/reader
PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
ver=$(cd "$ROOT" && cat probes/reader/*.go probes/reader/go.mod probes/reader/go.sum proto/swarmscope/v1/probe.proto \
  | sha256sum | cut -c1-12)
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DIR="$CACHE/probe-reader-$ver"
BIN="$DIR/swarmscope-probe-reader"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
go_bin=$("$ROOT/tools/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$DIR"
# A private work dir, so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$SRC"/*.go "$SRC"/go.mod "$SRC"/go.sum "$tmp/"
protobuf_ver=$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/protobuf)
echo "build_probe_reader: protoc-gen-go $protobuf_ver, reader $ver" >&2
GOBIN="$tmp/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_ver" >&2
mkdir -p "$tmp/pb"
# No go_package in the .proto (it is the Python packages' too): the M option names the package.
PATH="$tmp/bin:$PATH" "$PY" -m grpc_tools.protoc -I"$ROOT/proto" --go_out="$tmp/pb" \
  --go_opt=paths=source_relative \
  --go_opt=Mswarmscope/v1/probe.proto=swarmscope.dev/probereader/pb \
  swarmscope/v1/probe.proto >&2
mv "$tmp/pb/swarmscope/v1/probe.pb.go" "$tmp/pb/probe.pb.go"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/out" .) >&2
mv -f "$tmp/out" "$BIN"
echo "$BIN"
