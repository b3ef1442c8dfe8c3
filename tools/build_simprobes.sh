#!/usr/bin/env bash
# build_simprobes.sh — build the compiled simulated probes of the fan-in benches
# (bench/simprobes_go, Go) once per source version, cache them, print the binary's path.
#
#   tools/build_simprobes.sh     # -> /var/cache/swarmscope/tools/simprobes-<hash>/swarmscope-simprobes
#
# Built the way tools/build_probe_reader.sh builds the reader (read it for the why): the version
# is a hash of bench/simprobes_go/*.go, go.mod, go.sum and proto/swarmscope/v1/probe.proto; the
# Go code of probe.proto is generated at build time with grpc_tools.protoc and protoc-gen-go
# built from the version go.mod pins. Caveats: a cold build fetches the modules of go.mod through
# the Go module proxy (none when the reader was built: same grpc and protobuf); PYTHON (default:
# the repo's .venv, else python3) must have grpc_tools. Go comes from tools/go.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/bench/simprobes_go
PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
ver=$(cd "$ROOT" && cat bench/simprobes_go/*.go bench/simprobes_go/go.mod bench/simprobes_go/go.sum \
  proto/swarmscope/v1/probe.proto | sha256sum | cut -c1-12)
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DIR="$CACHE/simprobes-$ver"
BIN="$DIR/swarmscope-simprobes"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
go_bin=$("$ROOT/tools/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$DIR"
# A private work dir, so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$SRC"/*.go "$SRC"/go.mod "$SRC"/go.sum "$tmp/"
protobuf_ver=$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/protobuf)
echo "build_simprobes: protoc-gen-go $protobuf_ver, simprobes $ver" >&2
GOBIN="$tmp/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_ver" >&2
mkdir -p "$tmp/pb"
PATH="$tmp/bin:$PATH" "$PY" -m grpc_tools.protoc -I"$ROOT/proto" --go_out="$tmp/pb" \
  --go_opt=paths=source_relative \
  --go_opt=Mswarmscope/v1/probe.proto=swarmscope.dev/simprobes/pb \
  swarmscope/v1/probe.proto >&2
mv "$tmp/pb/swarmscope/v1/probe.pb.go" "$tmp/pb/probe.pb.go"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/out" .) >&2
mv -f "$tmp/out" "$BIN"
echo "$BIN"
