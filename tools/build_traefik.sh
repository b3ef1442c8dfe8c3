#!/usr/bin/env bash
# build_traefik.sh — build Traefik v3 (the ingress controller under test in the chart), cached by version.
#
#   tools/build_traefik.sh                    # prints the path of the binary (builds it once)
#   TRAEFIK_VERSION=v3.6.12 tools/build_traefik.sh
#
# Caveats: needs Go and the Go module proxy. v3.6.12 is the newest v3 that builds from it here:
# v3.7.x replaces github.com/traefik/traefik/dynamic/ext with a nested module that its zip leaves
# out, and the proxy refuses (403) a dozen of its dependencies (lego DNS providers, go-http-auth).
# The web UI's built assets are not in the module zip and the dashboard is not used here, so
# webui/static gets a stub page.
# The module zip is read-only, so it is copied to a writable dir before building. Concurrent
# callers are serialised with flock; the binary is installed atomically (mv).
set -euo pipefail
VER=${TRAEFIK_VERSION:-v3.6.12}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools/traefik-$VER
BIN=$CACHE/traefik
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
# names the make target, never a build inside a test's timeout.
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "traefik $VER is not built ($BIN): run \`make tools\`" >&2; exit 3; }
# A Go new enough for the module (tools/go.sh fetches one through the module proxy if needed).
go_bin=$("$(dirname "$0")/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
export GOFLAGS=-mod=mod
MOD=github.com/traefik/traefik/v3
dir=$(cd "$CACHE" && GO111MODULE=on go mod download -json "$MOD@$VER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$dir" ] || { echo "build_traefik: go mod download of $MOD@$VER failed" >&2; exit 1; }
src=$CACHE/src
rm -rf "$src"; cp -r "$dir" "$src"; chmod -R u+w "$src"
# webui/embed.go embeds webui/static, which a release fills from a yarn build (not in the zip).
mkdir -p "$src/webui/static"
[ -n "$(ls -A "$src/webui/static")" ] || echo '<!doctype html><title>traefik</title>' >"$src/webui/static/index.html"
# -s -w: no symbol table or DWARF (nothing here debugs the binary); the link is the shorter for it.
(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$VER" \
  -o "$CACHE/traefik.tmp" ./cmd/traefik) >&2
mv "$CACHE/traefik.tmp" "$BIN"
rm -rf "$src"
echo "$BIN"
