#!/usr/bin/env bash
# build_tools.sh — build every tool the test suite runs, before the tests start, each step timed.
#
#   tools/build_tools.sh          # `make tools` (and so `make test`) calls this
#   SWARMSCOPE_CACHE=/tmp/c tools/build_tools.sh   # a private cache (a cold build)
#   SWARMSCOPE_TOOLS_LANES=1 tools/build_tools.sh  # one step after another (the old order)
#
# Why a step of its own: on a fresh machine the Go tools take tens of minutes to build. Built
# inside a test's fixture, that time counted against the test's timeout, and one timed-out build
# turned every test sharing the fixture into an error. Built here, a build failure is reported as
# such, and the tests' timeouts measure the tests. Each tool is cached by version (see each
# script), so on a warm machine every step returns in about a second.
#
# Two lanes run side by side (docs/platform.md#tool-builds has the measured split). A Go build
# keeps both cores busy only while it compiles: its module downloads wait on the network, its
# link runs on one core, and the image's Debian install waits on the mirror and dpkg. In two
# lanes one lane's compile fills those gaps. The lanes share nothing but the Go build and module
# caches, which are safe for concurrent use; jaegerimage (lane 1) waits on build_jaeger.sh's
# lock if lane 2 is building the same binary. Each step prints its wall time and its CPU time
# (user+sys of the step and its children): CPU time does not depend on the machine's load.
#
# Caveats: a failing step stops its lane; the script waits for the other lane and exits 1.
# Two lanes add their memory peaks: a Jaeger compile reached 2.3 GB RSS, so allow ≈ 5 GB.
# The swarmscope image's cache key hashes the code (tools/build_image.py); it needs no Go tool.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LANES=${SWARMSCOPE_TOOLS_LANES:-2}

step() {
  local name=$1 tf rc=0
  shift
  tf=$(mktemp)
  local TIMEFORMAT='%R %U %S'
  { time "$@" >/dev/null 2>&3; } 3>&2 2>"$tf" || rc=$?
  if [ "$rc" != 0 ]; then
    rm -f "$tf"
    echo "build_tools: $name failed: $*" >&2
    return 1
  fi
  read -r wall user sys <"$tf"
  rm -f "$tf"
  awk -v n="$name" -v w="$wall" -v u="$user" -v s="$sys" \
    'BEGIN { printf "build_tools: %-12s %7.1f s wall %7.1f s CPU\n", n, w, u + s }'
}

# Lane 1 holds the Kubernetes builds (the longest chain: kube-* then kubelet and kube-proxy,
# which reuse kube-*'s compiled packages from the Go build cache).
lane1() {
  step k8s tools/k8s/build.sh all
  step node tools/k8s/build.sh node
  # Traefik (≈ 735 CPU-s cold, 3.1 GB peak) here: lane 2 holds the more steps.
  step traefik tools/k8s/build.sh traefikimage  # the chart's ingress controller (tools/build_traefik.sh)
}
# Lane 2: the image first (mostly network and dpkg), then the other Go tools.
lane2() {
  # Not niced (the test fixture nices it): here a nice 19 image would run only in lane 1's idle
  # moments, and the Go tools queued behind it would then finish alone on one lane.
  step image "$PY" tools/build_image.py
  step jaeger tools/build_jaeger.sh
  step k6 tools/build_k6.sh --swarmscope  # k6 with swarmscope's output: the k6 path and its tests
  step k6-upstream tools/build_k6.sh     # unmodified k6: bench/http_flood.py's plain k6 (mostly links)
  step ig tools/build_ig.sh
  step igcluster "$PY" tools/build_igcluster_image.py  # IG's DaemonSet image + kubectl-gadget (tests/igcluster.py)
  step simprobes tools/go_build.sh  # bench/simprobes_go: tests/test_simprobes_go.py
}

step go tools/go.sh  # both lanes need it: fetched once, before they start
if [ "$LANES" = 1 ]; then
  lane1
  lane2
  exit 0
fi
lane1 &
p1=$!
lane2 &
p2=$!
rc=0
wait "$p1" || rc=1
wait "$p2" || rc=1
exit "$rc"
