#!/usr/bin/env bash
# image-install.sh — install swarmscope into a container image (run by the Dockerfile), or check
# on this host that the install would work.
#
#   tools/image-install.sh            # in the image build: apt packages, header tree, /opt venv
#                                     # (the base part: the code is copied after it, see Dockerfile)
#   tools/image-install.sh --check    # on a host, no changes: every apt package has a candidate,
#                                     # python is 3.11, the package's entry point imports
#   tools/image-install.sh --dry-run  # print the steps only
#
# It does not repeat tools/setup.sh: the Debian package list comes from
# `tools/setup.sh --print-packages` and the venv, the merged kernel-header tree for BCC and the
# Debian-bcc link into the venv are made by `tools/setup.sh --no-dev`, exactly as on a
# development machine. What is added here is only image-specific: python3-venv, the non-root
# user the controller/worker pods run as (uid 10001, see the chart), apt cache cleanup.
# Caveats: no Docker engine on the development machines, so CI runs --check, not a real build.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=install
for a in "$@"; do
  case "$a" in
    --check) MODE=check ;;
    --dry-run) MODE=dry-run ;;
    *) echo "image-install.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

mapfile -t PKGS < <(tools/setup.sh --print-packages)
# Image-only additions: the interpreter and venv module (a slim base has neither), CA roots.
PKGS+=(python3 python3-venv ca-certificates)
PY=/usr/bin/python3

case "$MODE" in
  dry-run)
    echo "apt-get install --no-install-recommends ${PKGS[*]}"
    echo "useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin swarmscope"
    echo "PYTHON=$PY tools/setup.sh --no-apt --no-dev --no-mounts   # venv at $(pwd)/.venv, kernel header tree"
    echo "rm -rf /var/lib/apt/lists/* /root/.cache/pip"
    ;;
  check)
    fail=0
    # One apt-cache call for all packages (one per package is slow on a busy machine).
    declare -A cand=()
    pkg=""
    while IFS= read -r line; do
      case "$line" in
        [![:space:]]*:) pkg=${line%:} ;;
        *Candidate:*) cand[$pkg]=${line##*Candidate: } ;;
      esac
    done < <(apt-cache policy "${PKGS[@]}" 2>/dev/null)
    for p in "${PKGS[@]}"; do
      c=${cand[$p]:-}
      if [ -z "$c" ] || [ "$c" = "(none)" ]; then
        echo "image-install: apt package $p has no install candidate" >&2; fail=1
      else
        echo "ok apt $p $c"
      fi
    done
    # The image uses Debian bookworm's python3 (3.11): the same minor version the project
    # requires, and the one python3-bpfcc is built for.
    pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$pyver" != "3.11" ]; then echo "image-install: $PY is $pyver, need 3.11" >&2; fail=1
    else echo "ok python $pyver"; fi
    grep -q '^requires-python = ">=3.11,<3.12"' pyproject.toml || { echo "image-install: requires-python changed" >&2; fail=1; }
    # The same entry point the chart's pods run.
    if [ -x .venv/bin/swarmscope ] && .venv/bin/swarmscope --help >/dev/null; then
      echo "ok entrypoint swarmscope"
    else
      echo "image-install: .venv/bin/swarmscope missing or broken (run tools/setup.sh)" >&2; fail=1
    fi
    exit "$fail"
    ;;
  install)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
    id -u swarmscope >/dev/null 2>&1 || \
      useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin swarmscope
    # --no-mounts: BPF filesystems are the pod's (the chart mounts them), not the image's.
    PYTHON=$PY tools/setup.sh --no-apt --no-dev --no-mounts
    # setup.sh's header tree is symlinks into /usr/src, and the chart's hostHeaders mounts the
    # node's /usr/src over the image's: on a node whose Debian headers are another version than
    # the image's, every link dangled and the probe's compile found no kconfig.h. Real files
    # (about 80 MB) make the image's tree its own, whatever the node mounts.
    tree=$(readlink -f /var/lib/swarmscope/kernel-headers/current || true)
    if [ -n "$tree" ] && [ -d "$tree" ]; then
      cp -rL "$tree" "$tree.files" && rm -rf "$tree" && mv "$tree.files" "$tree"
    fi
    # Nothing here may read the code: only pyproject.toml, constraints.txt, README.md and tools/
    # are copied before this runs (the image's base layer, cached apart from the code). The exec
    # helpers are built from the code in the Dockerfile's step after `COPY .`.
    rm -rf /var/lib/apt/lists/* /root/.cache/pip
    ;;
esac
