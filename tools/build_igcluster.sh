#!/usr/bin/env bash
# build_igcluster.sh — Inspektor Gadget's in-cluster parts, from the same Go module as `ig`, cached by version.
#
#   tools/build_igcluster.sh      # prints the cache dir: bin/{entrypoint,cleanup,gadgettracermanager,kubectl-gadget}
#
# What v0.35's Dockerfiles/gadget.Dockerfile builds (gadget-container/Makefile: the entrypoint, the
# preStop cleanup and gadgettracermanager, which serves the gadgets on each node) and the client,
# kubectl-gadget (its Makefile's flags: -tags withoutebpf, the version and default image linked in).
# tools/build_igcluster_image.py wraps the node binaries into an OCI image.
# Caveats: the OCI and NRI hooks (ocihookgadget, nrigadget) are not built: they serve CRI-O and NRI
# hook modes, and the deployment here uses the pod informer (docs/cluster.md). Same locking and
# module copy as tools/build_ig.sh (they share the module download and the Go build cache).
set -euo pipefail
VER=${IG_VERSION:-v0.35.0}
CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools/igcluster-$VER
IMAGE=ghcr.io/inspektor-gadget/inspektor-gadget:$VER
BINS=(entrypoint cleanup gadgettracermanager kubectl-gadget)
done_() { for b in "${BINS[@]}"; do [ -x "$CACHE/bin/$b" ] || return 1; done; }
if done_; then echo "$CACHE"; exit 0; fi
[ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "igcluster $VER is not built ($CACHE): run \`make tools\`" >&2; exit 3; }
go_bin=$("$(dirname "$0")/go.sh")
export PATH="$(dirname "$go_bin"):$PATH" GOTOOLCHAIN=local
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if done_; then echo "$CACHE"; exit 0; fi
export GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0
MOD=github.com/inspektor-gadget/inspektor-gadget
dir=$(cd "$CACHE" && go mod download -json "$MOD@$VER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$dir" ] || { echo "build_igcluster: go mod download of $MOD@$VER failed" >&2; exit 1; }
src=$CACHE/src
rm -rf "$src" "$CACHE/bin.tmp"; cp -r "$dir" "$src"; chmod -R u+w "$src"
out=$CACHE/bin.tmp
mkdir -p "$out"
vflag="-X $MOD/internal/version.version=$VER"
# -s -w: no symbol table or DWARF, as build_ig.sh; -checklinkname=0 as build_ig.sh (the eBPF libs' linknames).
cd "$src"
go build -trimpath -ldflags "-s -w" -o "$out/entrypoint" ./gadget-container/entrypoint/entrypoint.go >&2
go build -trimpath -ldflags "-s -w" -o "$out/cleanup" ./gadget-container/cleanup/cleanup.go >&2
go build -trimpath -ldflags "-s -w -checklinkname=0 $vflag" -o "$out/gadgettracermanager" ./gadget-container/gadgettracermanager >&2
go build -trimpath -tags withoutebpf -ldflags "-s -w -checklinkname=0 $vflag -X main.gadgetimage=$IMAGE" \
  -o "$out/kubectl-gadget" ./cmd/kubectl-gadget >&2
cd /
rm -rf "$CACHE/bin"; mv "$out" "$CACHE/bin"
rm -rf "$src"
echo "$CACHE"
