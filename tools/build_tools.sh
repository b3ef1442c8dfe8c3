#!/usr/bin/env bash
# build_tools.sh — build every tool the test suite runs, before the tests start, each step timed.
#
#   tools/build_tools.sh          # `make tools` (and so `make test`) calls this
#   SWARMSCOPE_CACHE=/tmp/c tools/build_tools.sh   # a private cache (a cold build)
#
# Why a step of its own: on a fresh machine the Go tools take tens of minutes to build. Built
# inside a test's fixture, that time counted against the test's timeout, and one timed-out build
# turned every test sharing the fixture into an error. Built here, a build failure is reported as
# such, and the tests' timeouts measure the tests. Each tool is cached by version (see each
# script), so on a warm machine every step returns in about a second.
#
# Caveats: the steps run one after another; two cores gain little from parallel Go builds. The
# swarmscope image is built last because its cache key hashes the code (tools/build_image.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

step() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s)
  if ! "$@" >/dev/null; then
    echo "build_tools: $name failed: $*" >&2
    exit 1
  fi
  t1=$(date +%s)
  printf 'build_tools: %-12s %5d s\n' "$name" "$((t1 - t0))"
}

step go tools/go.sh
step k8s tools/k8s/build.sh all
step node tools/k8s/build.sh node
step k6 tools/build_k6.sh --swarmscope  # k6 with swarmscope's output: the k6 path and its tests
step k6-upstream tools/build_k6.sh     # unmodified k6: bench/http_flood.py's plain k6 (mostly links)
step jaeger tools/build_jaeger.sh
step ig tools/build_ig.sh
step reader tools/build_probe_reader.sh
# Niced like the test fixture does: the image build is long and CPU-bound.
step image nice -n 19 "$PY" tools/build_image.py
