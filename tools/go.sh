#!/usr/bin/env bash
# go.sh — print the path of a Go toolchain new enough for the tools the tests build (k6, Jaeger,
# ig, helm, etcd, kube-apiserver, kwok); fetch one through the Go module proxy when none is.
#
#   GO=$(tools/go.sh)          # e.g. /var/cache/swarmscope/tools/go-1.26.0/bin/go
#   GO_MIN=1.26.0 tools/go.sh
#
# Order: `go` on PATH, /usr/local/go/bin/go, Debian's /usr/lib/go/bin/go (package golang-go,
# installed by tools/setup.sh). The first that is >= GO_MIN wins. When none is (Debian 12 ships
# Go 1.19; helm, kube and kwok need 1.26), the bootstrap Go downloads the module
# golang.org/toolchain@v0.0.1-go$GO_MIN.linux-$arch: the same module, from the same proxy, that
# GOTOOLCHAIN=go$GO_MIN fetches on Go >= 1.21. Go 1.19 predates GOTOOLCHAIN, so this script does
# that step itself: `go mod download`, copy out of the read-only module cache, restore the
# executable bits a module zip does not keep.
#
# Caveats: cached under $SWARMSCOPE_CACHE/tools/go-$GO_MIN (default /var/cache/swarmscope);
# concurrent callers are serialised with flock. Prints only the path on stdout.
set -euo pipefail
GO_MIN=${GO_MIN:-1.26.0}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
DEST=$CACHE/go-$GO_MIN

# ge A B: version A >= version B (dotted numbers).
ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
version_of() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//' || true; }

if [ -x "$DEST/bin/go" ]; then echo "$DEST/bin/go"; exit 0; fi
boot=""
for cand in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
  [ -n "$cand" ] && [ -x "$cand" ] || continue
  v=$(version_of "$cand")
  # `go env GOVERSION` exists since 1.16; older toolchains print nothing and are skipped.
  [ -n "$v" ] || continue
  if ge "$v" "$GO_MIN"; then echo "$cand"; exit 0; fi
  [ -n "$boot" ] || boot=$cand
done
[ -n "$boot" ] || { echo "go.sh: no Go toolchain found (tools/setup.sh installs golang-go)" >&2; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.go-$GO_MIN.lock"
flock 9
if [ -x "$DEST/bin/go" ]; then echo "$DEST/bin/go"; exit 0; fi
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
mod="golang.org/toolchain@v0.0.1-go$GO_MIN.linux-$arch"
echo "go.sh: $boot is older than $GO_MIN; fetching $mod from the Go module proxy" >&2
# A throwaway module cache: the toolchain module is large and is needed only once, here.
modcache=$(mktemp -d "$CACHE/.go-modcache.XXXXXX")
trap 'chmod -R u+w "$modcache" 2>/dev/null; rm -rf "$modcache" "$DEST.tmp"' EXIT
dir=$(cd / && GOFLAGS=-mod=mod GOMODCACHE="$modcache" GO111MODULE=on "$boot" mod download -json "$mod" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || { echo "go.sh: go mod download $mod failed" >&2; exit 1; }
rm -rf "$DEST.tmp"
cp -r "$dir" "$DEST.tmp"
chmod -R u+w "$DEST.tmp"
chmod +x "$DEST.tmp"/bin/* "$DEST.tmp"/pkg/tool/*/*
mv "$DEST.tmp" "$DEST"
echo "$DEST/bin/go"
