#!/usr/bin/env bash
# cold_tools.sh — the cold `make tools` of a fresh machine, measured: every step's wall and CPU
# time, the total, and the quiet-machine floor (total CPU / cores) printed next to the wall.
#
#   bench/cold_tools.sh                 # both lanes (what `make tools` does), ≈ 35 min on 2 idle cores
#   bench/cold_tools.sh --lanes 1       # one step after another (the order before the lanes)
#   bench/cold_tools.sh --keep          # keep /tmp/coldci-bench.* (caches, logs) afterwards
#
# How: a private mount namespace hides /usr/local/go behind an empty dir and PATH drops it, so
# only Debian's Go 1.19 is found and tools/go.sh bootstraps Go 1.26 through the module proxy, as
# on a fresh Debian 12. HOME, SWARMSCOPE_CACHE, GOCACHE, GOMODCACHE and GOPATH point at empty
# dirs under a temp dir, so every module is downloaded and every package compiled, and the
# machine's own caches are neither read nor written. Everything runs under `nice -n 19`.
#
# Read: CPU time (user+sys of each step and its children) does not depend on the machine's
# load; wall time does. "floor" is total CPU / cores: no schedule on this many cores can beat
# it. On an idle machine, wall / floor says how much of the run waited on the network, dpkg or
# a one-core link (1.0 = none).
#
# Caveats: measures the committed tree (git archive HEAD). Root only (unshare -m, mmdebstrap). Needs the network (module proxy, Debian mirror,
# PyPI for the image's wheels). Uses ≈ 6 GB of disk in the temp dir.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LANES=2 KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --lanes) LANES=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "cold_tools: needs root (unshare -m, mmdebstrap)" >&2; exit 1; }
PY=${PY:-$ROOT/.venv/bin/python}
B=$(mktemp -d /tmp/coldci-bench.XXXXXX)
[ "$KEEP" = 1 ] || trap 'chmod -R u+w "$B" 2>/dev/null; rm -rf "$B"' EXIT
mkdir -p "$B"/{empty,home,cache,gocache,gomod,gopath}
git -C "$ROOT" archive HEAD | tar -x -C "$B" --one-top-level=src
echo "cold_tools: lanes=$LANES, private caches in $B" >&2
# The inner shell: hide the machine's Go, then time the whole `make tools` step.
nice -n 19 unshare -m bash -c '
  set -euo pipefail
  B=$1 PY=$2 LANES=$3
  [ -d /usr/local/go ] && mount --bind "$B/empty" /usr/local/go
  export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=$B/home SWARMSCOPE_CACHE=$B/cache \
    GOCACHE=$B/gocache GOMODCACHE=$B/gomod GOPATH=$B/gopath PY=$PY SWARMSCOPE_TOOLS_LANES=$LANES
  cd "$B/src"
  TIMEFORMAT="%R %U %S"
  { time tools/build_tools.sh 2>"$B/build.log"; } 2>"$B/total"
' _ "$B" "$PY" "$LANES" || {
  trap - EXIT
  echo "cold_tools: the build failed; its log and caches are kept in $B (build.log)" >&2
  exit 1
}
read -r wall user sys <"$B/total"
awk -v w="$wall" -v c="$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" -v n="$(nproc)" 'BEGIN {
  printf "cold_tools: total %.0f s wall, %.0f s CPU; floor (CPU / %d cores) %.0f s; wall / floor %.2f\n",
    w, c, n, c / n, w / (c / n)
}'
