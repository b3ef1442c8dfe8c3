#!/usr/bin/env bash
# build.sh — build (once) the Kubernetes tools the chart tests run, cached by version.
#
#   tools/k8s/build.sh all                # helm etcd kube kwok (prints a path per tool)
#   tools/k8s/build.sh node               # kubelet kube-proxy containerd runc cni nodeimages
#                                         # jaegerimage (real node)
#   tools/k8s/build.sh traefikimage       # the chart's Traefik (target.controller traefik)
#   tools/k8s/build.sh helm               # -> /var/cache/swarmscope/tools/helm-v3.22.0/bin/helm
#   tools/k8s/build.sh --path kube        # print the cache dir only, build nothing
#
# Everything comes from the Go module proxy (docs/platform.md#tool-builds): helm v3.22.0, etcd v3.6.8 through a
# wrapper module, kube-apiserver + kube-controller-manager + kube-scheduler v1.36.3 through ONE
# wrapper module (the three share most packages, so one `go build` compiles them once) and
# kwok v0.8.0 with its stage files. The real node (docs/realnode.md) adds the kubelet (same
# version and method as kube-*), containerd v2.1.4 (+ its runc shim and ctr), runc v1.3.0 and
# the CNI plugins v1.7.1 (bridge, host-local, loopback). Each tool lands in $CACHE/<tool>-<version>/ and is marked
# complete with a `.complete` file; a second run returns at once.
#
# Caveats: parallel-safe through one flock per tool (a second caller waits for the first build
# and then finds it cached); builds happen in a temp dir and are renamed into place, so an
# interrupted build never leaves a half-filled cache. Cold builds take minutes (see
# docs/cluster.md for measured times); set SWARMSCOPE_CACHE to move the cache (tools go in $SWARMSCOPE_CACHE/tools).
set -euo pipefail

CACHE=${SWARMSCOPE_CACHE:-/var/cache/swarmscope}/tools
HELM_VERSION=v3.22.0
ETCD_VERSION=v3.6.8
KUBE_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
CONTAINERD_VERSION=v2.1.4
RUNC_VERSION=v1.3.0
CNI_VERSION=v1.7.1
PAUSE_VERSION=3.10  # the sandbox image name kubelet v1.36 and containerd v2.1 expect
# The chart's Jaeger (values.yaml jaeger.image.tag) is Jaeger v2.13.0, released together with
# the Go module version v1.76.0 that tools/build_jaeger.sh builds (same source tree).
JAEGER_MODULE_VERSION=v1.76.0
JAEGER_IMAGE_TAG=2.13.0
# The chart's Traefik (values.yaml target.traefik.image.tag): the binary tools/build_traefik.sh
# builds, the newest v3 whose dependencies the Go module proxy serves here (docs/cluster.md).
TRAEFIK_VERSION=v3.6.12
BUSYBOX_VERSION=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null | sed 's/^[0-9]*://; s/[^A-Za-z0-9._-]/_/g')
GO=${GO:-$("$(dirname "$0")/../go.sh")}  # new enough; fetched through the module proxy if not
export GOFLAGS=${GOFLAGS:--mod=mod}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

dir_of() {
  case "$1" in
    helm) echo "$CACHE/helm-$HELM_VERSION" ;;
    etcd) echo "$CACHE/etcd-$ETCD_VERSION" ;;
    kube) echo "$CACHE/kube-$KUBE_VERSION" ;;
    kwok) echo "$CACHE/kwok-$KWOK_VERSION" ;;
    kubelet) echo "$CACHE/kubelet-$KUBE_VERSION" ;;
    containerd) echo "$CACHE/containerd-$CONTAINERD_VERSION" ;;
    runc) echo "$CACHE/runc-$RUNC_VERSION-seccomp" ;;
    cni) echo "$CACHE/cni-$CNI_VERSION" ;;
    nodeimages) echo "$CACHE/nodeimages-r2-$PAUSE_VERSION-${KUBE_VERSION}-busybox-${BUSYBOX_VERSION:-none}" ;;
    kubeproxy) echo "$CACHE/kubeproxy-$KUBE_VERSION" ;;
    jaegerimage) echo "$CACHE/jaegerimage-r2-$JAEGER_MODULE_VERSION-$JAEGER_IMAGE_TAG" ;;
    traefikimage) echo "$CACHE/traefikimage-r1-$TRAEFIK_VERSION" ;;
    *) echo "build.sh: unknown tool '$1' (helm etcd kube kwok kubelet kubeproxy containerd runc cni jaegerimage traefikimage all node)" >&2; return 2 ;;
  esac
}

log() { echo "[k8s-build $(date -u +%H:%M:%S)] $*" >&2; }

# build_helm OUT: `go install` with the ldflags helm's own Makefile sets, so the binary reports
# its version and assumes the Kubernetes version of its client-go (a bare build assumes 1.20,
# which makes `helm template`/lint reject charts that need newer APIs).
build_helm() {
  local out=$1 major minor
  # helm v3.22 is built against client-go v0.36 -> Kubernetes 1.36; helm's Makefile derives
  # major = 0 + 1, minor = 36 from that module version.
  major=1; minor=36
  local pkg=helm.sh/helm/v3
  GOBIN="$out/bin" CGO_ENABLED=0 "$GO" install -trimpath -ldflags "-s -w \
    -X $pkg/internal/version.version=$HELM_VERSION \
    -X $pkg/internal/version.gitTreeState=clean \
    -X $pkg/pkg/lint/rules.k8sVersionMajor=$major -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor \
    -X $pkg/pkg/chartutil.k8sVersionMajor=$major -X $pkg/pkg/chartutil.k8sVersionMinor=$minor" \
    "$pkg/cmd/helm@$HELM_VERSION"
}

# (The builders that make a temp module run in a subshell so their EXIT trap cleans it up.)
# build_etcd OUT: etcd's main module has replace directives, so `go install` refuses it; a
# two-line wrapper module that calls etcdmain.Main builds the same server.
build_etcd() (
  local out=$1 mod
  mod=$(mktemp -d); trap 'rm -rf "$mod"' EXIT
  cat > "$mod/main.go" <<'GO'
// Command etcd is etcd's server entry point, wrapped so it builds from the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$mod" && "$GO" mod init swarmscope.local/etcd >/dev/null 2>&1 \
    && "$GO" mod edit -require "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && "$GO" mod tidy >/dev/null 2>&1 \
    && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" .)
)

# kube_wrapper OUT CMD=CTOR...: one wrapper module whose mains call upstream's command
# constructors (CTOR is Go, e.g. `NewSchedulerCommand()`). k8s.io/kubernetes requires its
# staging modules at v0.0.0 (replaced by ./staging in its own repo); outside the repo each needs
# `replace k8s.io/X => k8s.io/X v0.<minor>.<patch>`. The list is read from the downloaded
# go.mod, so it follows the release. The ldflags set the version strings kubectl/helm parse (an
# unset gitVersion reads as v0.0.0-master and breaks them).
kube_wrapper() (
  local out=$1 mod gomod stagever="v0${KUBE_VERSION#v1}" spec c
  shift
  mod=$(mktemp -d); trap 'rm -rf "$mod"' EXIT
  for spec in "$@"; do
    c=${spec%%=*}
    mkdir -p "$mod/cmd/$c"
    cat > "$mod/cmd/$c/main.go" <<GO
// Command $c runs upstream's $c ($KUBE_VERSION), wrapped to build from the module proxy.
package main

import (
	"context"
	"os"
	_ "time/tzdata" // CronJob time zones need the zone database inside the binary.

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/$c/app"
)

var _ = context.Background

func main() { os.Exit(cli.Run(app.${spec#*=})) }
GO
  done
  gomod=$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  (cd "$mod" && "$GO" mod init swarmscope.local/kube >/dev/null 2>&1)
  local args=(-require "k8s.io/kubernetes@$KUBE_VERSION")
  while read -r m; do
    args+=(-replace "$m=$m@$stagever")
  done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$gomod")
  [ "${#args[@]}" -gt 4 ] || { log "no staging replaces found in $gomod"; return 1; }
  local ver=$KUBE_VERSION major=1 minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$ver -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod" && "$GO" mod edit "${args[@]}" \
    && "$GO" mod tidy >/dev/null \
    && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ld" -o "$out/bin/" ./cmd/...)
)

# build_kube OUT: the three control-plane servers share most packages, so one `go build`
# compiles them once.
build_kube() {
  kube_wrapper "$1" kube-apiserver='NewAPIServerCommand()' \
    kube-controller-manager='NewControllerManagerCommand()' kube-scheduler='NewSchedulerCommand()'
}

# build_kubelet OUT: same wrapper, its own cache dir (so the control plane's cache stays valid).
build_kubelet() { kube_wrapper "$1" kubelet='NewKubeletCommand(context.Background())'; }

# build_kubeproxy OUT: kube-proxy for the real node's Services (run inside the node's network
# namespace, so its nftables rules never touch the host's); its own cache dir, like the kubelet.
build_kubeproxy() { kube_wrapper "$1" kube-proxy='NewProxyCommand()'; }

# build_containerd OUT: the daemon, its runc shim and ctr, static (no cgo); the btrfs and
# devmapper snapshotters are left out (overlayfs is what the node uses). containerd's go.mod has
# exclude directives, so `go install pkg@version` refuses it: a wrapper module holds copies of
# the three upstream main.go files (main_tracing.go is left out: it imports an internal package)
# and requires the module, with upstream's excludes copied so versions resolve the same.
build_containerd() (
  local out=$1 mod src c m=github.com/containerd/containerd/v2
  mod=$(mktemp -d); trap 'rm -rf "$mod"' EXIT
  src=$("$GO" mod download -json "$m@$CONTAINERD_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  for c in containerd containerd-shim-runc-v2 ctr; do
    mkdir -p "$mod/cmd/$c"; cp "$src/cmd/$c/main.go" "$mod/cmd/$c/"
  done
  chmod -R u+w "$mod"
  (cd "$mod" && "$GO" mod init swarmscope.local/containerd >/dev/null 2>&1 \
    && sed -n '/^exclude (/,/^)/p' "$src/go.mod" >> go.mod \
    && "$GO" mod edit -require "$m@$CONTAINERD_VERSION" \
    && "$GO" mod tidy >/dev/null \
    && CGO_ENABLED=0 "$GO" build -trimpath -tags "no_btrfs no_devmapper" \
      -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" -o "$out/bin/" ./cmd/...)
)

# build_runc OUT: runc needs cgo (its nsenter is C) and the seccomp tag with libseccomp-dev
# (tools/setup.sh): containerd gives every pod sandbox a seccomp profile, which a runc built
# without seccomp refuses ("config provided but seccomp not supported").
build_runc() {
  GOBIN="$1/bin" CGO_ENABLED=1 "$GO" install -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" \
    "github.com/opencontainers/runc@$RUNC_VERSION"
}

# build_cni OUT: the three plugins a bridge pod network needs, in bin/ (the CNI bin dir).
build_cni() {
  local m=github.com/containernetworking/plugins/plugins
  GOBIN="$1/bin" CGO_ENABLED=0 "$GO" install -trimpath -ldflags "-s -w" \
    "$m/main/bridge@$CNI_VERSION" "$m/ipam/host-local@$CNI_VERSION" "$m/main/loopback@$CNI_VERSION"
}

# build_kwok OUT: kwok itself plus the node/pod stage files its module ships (kwok needs a
# stages config to move fake pods to Running and fake nodes to Ready).
build_kwok() {
  local out=$1 src
  GOBIN="$out/bin" CGO_ENABLED=0 "$GO" install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  src=$("$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  mkdir -p "$out/stage"
  cp -r "$src/kustomize/stage/." "$out/stage/"
  chmod -R u+w "$out/stage"
}

# oci_image OUT NAME TAG ROOTFS ENTRYPOINT...: OUT/NAME.tar, an OCI image archive (umoci, no
# Docker engine) of one layer holding ROOTFS, tagged TAG, for `ctr images import --base-name`.
# Extra `umoci config` flags (env, user) come from the array OCI_CONFIG.
OCI_CONFIG=()
oci_image() (
  local out=$1 file=$2 name=$3 rootfs=$4 w
  shift 4
  w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
  umoci init --layout "$w/oci"
  umoci new --image "$w/oci:$name"
  umoci unpack --image "$w/oci:$name" "$w/bundle"
  cp -a "$rootfs/." "$w/bundle/rootfs/"
  umoci repack --image "$w/oci:$name" "$w/bundle"
  local ep=()
  for a in "$@"; do ep+=(--config.entrypoint "$a"); done
  umoci config --image "$w/oci:$name" --os linux --architecture amd64 "${OCI_CONFIG[@]}" "${ep[@]}"
  umoci gc --layout "$w/oci"
  tar -C "$w/oci" -cf "$out/$file.tar" .
)

# build_nodeimages OUT: the two images a node needs before the project's own: the pod sandbox
# (pause, compiled static from the pause.c that k8s.io/kubernetes ships) and a busybox for test
# pods (Debian's busybox-static). Import with
#   ctr -n k8s.io images import --base-name registry.k8s.io/pause OUT/pause.tar  # -> :3.10
# so the image has exactly one, fully qualified name: the CRI resolves an image by id to one of
# its names, and `--index-name` leaves a second docker.io/library/import-<date> name it trips on.
build_nodeimages() (
  local out=$1 src r
  command -v umoci >/dev/null && [ -x /bin/busybox ] || { log "need umoci and busybox-static (tools/setup.sh)"; return 1; }
  src=$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  r=$(mktemp -d); trap 'rm -rf "$r"' EXIT
  mkdir -p "$r/pause" "$r/busybox/bin" "$r/busybox/tmp"
  gcc -Os -static -Wall -Werror -DVERSION="v$PAUSE_VERSION-swarmscope" -o "$r/pause/pause" "$src/build/pause/linux/pause.c"
  strip "$r/pause/pause"
  oci_image "$out" pause "$PAUSE_VERSION" "$r/pause" /pause
  cp /bin/busybox "$r/busybox/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/busybox/bin/$a"; done
  chmod 1777 "$r/busybox/tmp"
  oci_image "$out" busybox "${BUSYBOX_VERSION%%-*}" "$r/busybox" /bin/sh
)

# build_jaegerimage OUT: OUT/jaeger.tar, the chart's Jaeger image from the Go module build
# (tools/build_jaeger.sh, static, cached by version), laid out as upstream's cmd/jaeger/Dockerfile
# does: the binary at /cmd/jaeger/jaeger-linux with sampling-strategies.json beside it, a sticky
# /tmp, JAEGER_LISTEN_HOST=0.0.0.0 (the built-in config listens on localhost otherwise), uid 10001.
# Import with `--base-name docker.io/jaegertracing/jaeger` (-> :2.13.0, the chart's default).
build_jaegerimage() (
  local out=$1 bin r src
  bin=$(JAEGER_VERSION=$JAEGER_MODULE_VERSION "$(dirname "$0")/../build_jaeger.sh")
  src=$("$GO" mod download -json "github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  r=$(mktemp -d); trap 'rm -rf "$r"' EXIT
  mkdir -p "$r/tmp" "$r/cmd/jaeger"; chmod 1777 "$r/tmp"
  cp "$bin" "$r/cmd/jaeger/jaeger-linux"
  cp "$src/cmd/jaeger/sampling-strategies.json" "$r/cmd/jaeger/"
  chmod -R u+w,go-w "$r/cmd"
  OCI_CONFIG=(--config.env JAEGER_LISTEN_HOST=0.0.0.0 --config.user 10001)
  oci_image "$out" jaeger "$JAEGER_IMAGE_TAG" "$r" /cmd/jaeger/jaeger-linux
)

# build_traefikimage OUT: OUT/traefik.tar, the chart's Traefik image: the static binary of
# tools/build_traefik.sh at /traefik (upstream's image's entrypoint), Debian's CA bundle, a sticky
# /tmp, uid 65532 (upstream's chart's). Import with `--base-name docker.io/library/traefik`.
build_traefikimage() (
  local out=$1 bin r
  bin=$(TRAEFIK_VERSION=$TRAEFIK_VERSION "$(dirname "$0")/../build_traefik.sh")
  r=$(mktemp -d); trap 'rm -rf "$r"' EXIT
  mkdir -p "$r/tmp" "$r/etc/ssl/certs"; chmod 1777 "$r/tmp"
  cp "$bin" "$r/traefik"
  cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  OCI_CONFIG=(--config.user 65532)
  oci_image "$out" traefik "$TRAEFIK_VERSION" "$r" /traefik
)

ensure() {
  local tool=$1 dir tmp t0
  dir=$(dir_of "$tool")
  [ -f "$dir/.complete" ] && { echo "$dir"; return 0; }
  # Under the tests (SWARMSCOPE_NO_BUILD=1, set by tests/conftest.py) a missing tool is an error that
  # names the make target, never a build inside a test's timeout.
  [ -z "${SWARMSCOPE_NO_BUILD:-}" ] || { echo "$tool is not built ($dir): run \`make tools\`" >&2; exit 3; }
  mkdir -p "$CACHE"
  exec {lock}>"$CACHE/.$tool.lock"
  flock "$lock"
  if [ ! -f "$dir/.complete" ]; then
    t0=$(date +%s)
    log "building $tool into $dir (cold: takes minutes; cached afterwards)"
    tmp=$(mktemp -d "$CACHE/.$tool.XXXXXX")
    # Not `if ! build_x`: bash ignores errexit inside a function called as a condition, so a
    # failed `go install` followed by steps that succeed would be marked complete. A subshell
    # with its own `set -e`, run as a plain command, stops at the first failure.
    local rc=0
    set +e
    (set -e; "build_$tool" "$tmp")
    rc=$?
    set -e
    if [ "$rc" != 0 ]; then
      rm -rf "$tmp"; flock -u "$lock"; log "building $tool FAILED"; return 1
    fi
    chmod 755 "$tmp"; touch "$tmp/.complete"
    rm -rf "$dir"; mv "$tmp" "$dir"
    log "built $tool in $(( $(date +%s) - t0 )) s"
  fi
  flock -u "$lock"
  echo "$dir"
}

PATH_ONLY=0
tools=()
for a in "$@"; do
  case "$a" in
    --path) PATH_ONLY=1 ;;
    all) tools+=(etcd kwok helm kube) ;;
    node) tools+=(kubelet kubeproxy containerd runc cni nodeimages jaegerimage) ;;
    *) tools+=("$a") ;;
  esac
done
[ "${#tools[@]}" -gt 0 ] || { sed -n '2,8p' "$0"; exit 2; }
for t in "${tools[@]}"; do
  if [ "$PATH_ONLY" = 1 ]; then dir_of "$t"; else ensure "$t"; fi
done
