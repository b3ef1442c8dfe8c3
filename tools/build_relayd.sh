#!/usr/bin/env bash
# build_relayd.sh — build the native relay (controller/relayd, Go: `swarmscope relay --engine
# native`) once per source version, cache it, print the binary's path.
#
#   tools/build_relayd.sh      # -> /var/cache/swarmscope/tools/relayd-<hash>/swarmscope-relayd
#
# The version is a hash of controller/relayd/*.go, go.mod, go.sum and proto/swarmscope/v1/probe.proto,
# so an edit rebuilds and an unchanged tree only checks the cached binary. As in
# build_probe_reader.sh (the model), the Go code of probe.proto is generated at build time with
# grpc_tools.protoc and protoc-gen-go of the google.golang.org/protobuf version go.mod pins; the
# gRPC service (server and client) is hand-written over grpc.ServiceDesc / grpc.ClientConn.
# Caveats: a cold build fetches go.mod's modules through the Go module proxy; PYTHON (default:
# the repo's .venv, else python3) must have grpc_tools. Go comes from tools/go.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/controller/relayd
PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
ver=$(cd "$ROOT" && cat controller/relayd/*.go controller/relayd/go.mod controller/relayd/go.sum \
  proto/swarmscope/v1/probe.proto | sha256sum | cut -c1-12)
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DIR="$CACHE/relayd-$ver"
BIN="$DIR/swarmscope-relayd"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
go_bin=$("$ROOT/tools/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$DIR"
# A private work dir, so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$SRC"/*.go "$SRC"/go.mod "$SRC"/go.sum "$tmp/"
protobuf_ver=$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/protobuf)
echo "build_relayd: protoc-gen-go $protobuf_ver, relayd $ver" >&2
GOBIN="$tmp/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_ver" >&2
mkdir -p "$tmp/pb"
# No go_package in the .proto (it is the Python packages' too): the M option names the package.
PATH="$tmp/bin:$PATH" "$PY" -m grpc_tools.protoc -I"$ROOT/proto" --go_out="$tmp/pb" \
  --go_opt=paths=source_relative \
  --go_opt=Mswarmscope/v1/probe.proto=swarmscope.dev/relayd/pb \
  swarmscope/v1/probe.proto >&2
mv "$tmp/pb/swarmscope/v1/probe.pb.go" "$tmp/pb/probe.pb.go"
(cd "$tmp" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/out" .) >&2
mv -f "$tmp/out" "$BIN"
echo "$BIN"
