#!/usr/bin/env bash
# build_k6.sh — build the pinned k6 once and cache it; print the binary's path.
#
#   tools/build_k6.sh                 # upstream k6 -> /var/cache/swarmscope/tools/k6-v1.8.1/k6
#   tools/build_k6.sh --swarmscope    # k6 + swarmscope's output (workers/k6out), what the k6 path runs
#                                     # -> /var/cache/swarmscope/tools/k6-v1.8.1-ss-<hash>/k6
#   tools/build_k6.sh --swarmscope --path   # print where it is (or would be), build nothing
#
# Upstream k6 is `go install go.k6.io/k6@$VER`, unmodified (bench/http_flood.py's plain k6).
# The swarmscope k6 is what xk6 would make for an output extension: workers/k6out/cmd/k6 is k6's
# own main plus a blank import of the extension, in a module that requires go.k6.io/k6 at the
# version below (go.mod/go.sum pin every dependency at k6's own versions). It is cached by k6's
# version and a hash of workers/k6out's Go sources, go.mod and go.sum, so an edit rebuilds. Both
# are built with the same Go and flags (CGO_ENABLED=0, nothing else), so the compiled k6
# packages in Go's build cache are shared: after one, the other mostly links.
#
# Caveats: a cold build takes ≈ 4.5 min on 2 cores (Go module proxy + compile); later runs only
# check the cached binary. Go comes from tools/go.sh. workers/k6out's go.mod must name $VER
# (checked).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VER=${K6_VERSION:-v1.8.1}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
ours=0 path_only=0
for a in "$@"; do
  case $a in
    --swarmscope) ours=1 ;;
    --path) path_only=1 ;;
    *) echo "build_k6: unknown argument $a (--swarmscope, --path)" >&2; exit 2 ;;
  esac
done
SRC=$ROOT/swarmscope/workers/k6out
if [ "$ours" = 1 ]; then
  hash=$(cd "$SRC" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort \
    | xargs cat | sha256sum | cut -c1-12)
  DIR="$CACHE/k6-$VER-ss-$hash"
else
  DIR="$CACHE/k6-$VER"
fi
BIN="$DIR/k6"
if [ "$path_only" = 1 ]; then echo "$BIN"; exit 0; fi
if [ -x "$BIN" ] && "$BIN" version >/dev/null 2>&1; then
  echo "$BIN"; exit 0
fi
# Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
# names the make target, never a build inside a test's timeout.
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "k6 $VER is not built ($BIN): run \`make tools\`" >&2; exit 3; }
# A Go new enough for the module (tools/go.sh fetches one through the module proxy if needed).
go_bin=$("$ROOT/tools/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
mkdir -p "$DIR"
# A private work dir so a half-built binary never appears at $BIN; moved into place at the end.
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ "$ours" = 1 ]; then
  grep -q "go.k6.io/k6 $VER\$" "$SRC/go.mod" \
    || { echo "build_k6: $SRC/go.mod does not require go.k6.io/k6 $VER" >&2; exit 1; }
  echo "build_k6: building k6 $VER with swarmscope's output ($hash; cold build ≈ 4.5 min)" >&2
  # -buildvcs=false: inside the repo Go would otherwise stamp (or fail to read) its git state.
  (cd "$SRC" && CGO_ENABLED=0 go build -buildvcs=false -o "$tmp/k6" ./cmd/k6) >&2
else
  echo "build_k6: building go.k6.io/k6@$VER (cold build ≈ 4.5 min)" >&2
  GOBIN="$tmp" CGO_ENABLED=0 go install "go.k6.io/k6@$VER" >&2
fi
mv -f "$tmp/k6" "$BIN"
echo "$BIN"
