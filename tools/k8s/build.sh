#!/usr/bin/env bash
# build.sh — build (once) the Kubernetes tools the chart tests run, cached by version.
#
#   tools/k8s/build.sh all                # helm etcd kube kwok (prints a path per tool)
#   tools/k8s/build.sh helm               # -> /var/cache/swarmscope/tools/helm-v3.22.0/bin/helm
#   tools/k8s/build.sh --path kube        # print the cache dir only, build nothing
#
# Everything comes from the Go module proxy (docs/platform.md#tool-builds): helm v3.22.0, etcd v3.6.8 through a
# wrapper module, kube-apiserver + kube-controller-manager + kube-scheduler v1.36.3 through ONE
# wrapper module (the three share most packages, so one `go build` compiles them once) and
# kwok v0.8.0 with its stage files. Each tool lands in $CACHE/<tool>-<version>/ and is marked
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
GO=${GO:-$("$(dirname "$0")/../go.sh")}  # new enough; fetched through the module proxy if not
export GOFLAGS=${GOFLAGS:--mod=mod}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

dir_of() {
  case "$1" in
    helm) echo "$CACHE/helm-$HELM_VERSION" ;;
    etcd) echo "$CACHE/etcd-$ETCD_VERSION" ;;
    kube) echo "$CACHE/kube-$KUBE_VERSION" ;;
    kwok) echo "$CACHE/kwok-$KWOK_VERSION" ;;
    *) echo "build.sh: unknown tool '$1' (helm etcd kube kwok all)" >&2; return 2 ;;
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

# build_kube OUT: one wrapper module whose three mains call upstream's command constructors.
# k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging in its own
# repo); outside the repo each needs `replace k8s.io/X => k8s.io/X v0.<minor>.<patch>`. The list
# is read from the downloaded go.mod, so it follows the release. The ldflags set the version
# strings kubectl/helm parse (an unset gitVersion reads as v0.0.0-master and breaks them).
build_kube() (
  local out=$1 mod gomod stagever="v0${KUBE_VERSION#v1}"
  mod=$(mktemp -d); trap 'rm -rf "$mod"' EXIT
  declare -A ctor=([kube-apiserver]=NewAPIServerCommand
                   [kube-controller-manager]=NewControllerManagerCommand
                   [kube-scheduler]=NewSchedulerCommand)
  for c in "${!ctor[@]}"; do
    mkdir -p "$mod/cmd/$c"
    cat > "$mod/cmd/$c/main.go" <<GO
// Command $c runs upstream's $c ($KUBE_VERSION), wrapped to build from the module proxy.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones need the zone database inside the binary.

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/$c/app"
)

func main() { os.Exit(cli.Run(app.${ctor[$c]}())) }
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

ensure() {
  local tool=$1 dir tmp t0
  dir=$(dir_of "$tool")
  [ -f "$dir/.complete" ] && { echo "$dir"; return 0; }
  mkdir -p "$CACHE"
  exec {lock}>"$CACHE/.$tool.lock"
  flock "$lock"
  if [ ! -f "$dir/.complete" ]; then
    t0=$(date +%s)
    log "building $tool into $dir (cold: takes minutes; cached afterwards)"
    tmp=$(mktemp -d "$CACHE/.$tool.XXXXXX")
    if ! "build_$tool" "$tmp"; then
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
    *) tools+=("$a") ;;
  esac
done
[ "${#tools[@]}" -gt 0 ] || { sed -n '2,8p' "$0"; exit 2; }
for t in "${tools[@]}"; do
  if [ "$PATH_ONLY" = 1 ]; then dir_of "$t"; else ensure "$t"; fi
done
