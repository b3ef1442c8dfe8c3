#!/usr/bin/env bash
# native-stage.sh — the Dockerfile's `native` stage: build the Go binaries the image carries into
# OUT (the reader of `swarmscope probe --mode native`), each with its own build script, so the
# image's copies are the ones a development machine builds from the same sources (static,
# CGO_ENABLED=0).
#
#   tools/native-stage.sh out      # -> out/swarmscope-probe-reader
#
# Python for protoc: $PYTHON when it has grpc_tools (tools/build_image.py runs this stage on the
# build host with its venv), else python3 with the grpcio-tools pin of constraints.txt installed
# into a private venv (`docker build`, whose stage image has only python3). Go: tools/go.sh.
# Caveat: a cold build fetches Go modules through the Go module proxy (minutes on 2 cores).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: native-stage.sh OUT}
PY=${PYTHON:-python3}
if ! "$PY" -c 'import grpc_tools' 2>/dev/null; then
  pin=$(grep -E '^grpcio-tools==' "$ROOT/constraints.txt")
  venv=$(mktemp -d)
  trap 'rm -rf "$venv"' EXIT
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$pin"
  PY=$venv/bin/python
fi
mkdir -p "$OUT"
for tool in probe_reader; do
  bin=$(PYTHON=$PY "$ROOT/tools/build_$tool.sh" | tail -n1)
  install -m 0755 "$bin" "$OUT/"
done
ls "$OUT"
