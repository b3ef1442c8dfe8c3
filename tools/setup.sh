#!/usr/bin/env bash
# setup.sh — make this machine ready to run and test swarmscope. Idempotent; safe to re-run.
#
#   tools/setup.sh            # system packages, kernel header tree, mounts, .venv
#   tools/setup.sh --no-apt   # skip apt (e.g. inside an image that already has them)
#   tools/setup.sh --no-dev   # runtime dependencies only (the container image)
#   tools/setup.sh --no-mounts  # leave tracefs/debugfs/bpffs alone (an image build's chroot:
#                               # mounting them there leaves its /sys busy)
#   tools/setup.sh --print-packages   # list the Debian packages and exit (tools/image-install.sh)
#
# Caveats: needs root for apt, mounts and the header tree (CI and these machines are root).
# What is verified to work here is written down in docs/platform.md; this script follows it.
set -euo pipefail
cd "$(dirname "$0")/.."

APT=1
MOUNTS=1
EXTRAS='[dev]'
PRINT=0
for a in "$@"; do
  case "$a" in
    --no-apt) APT=0 ;;
    --no-mounts) MOUNTS=0 ;;
    --no-dev) EXTRAS='' ;;
    --print-packages) PRINT=1 ;;
  esac
done

# Debian packages: BCC (python3-bpfcc, not PyPI's unrelated "bcc"), headers for BCC, the
# reference exec tracer (bpftrace), bpftool for cross-checks, a C compiler for the native exec
# helpers, nginx and sysstat for the ingress scenario and pidstat comparisons, iperf3 for its
# network baseline (the write-up's netperf). libbpf1 is the
# shared libbpf that swarmscope/sys/bpf.py calls through ctypes for every raw bpf() command.
# stress-ng: the exec storm's `load: stress-ng` (the published scaling test's load generator).
# softflowd, pmacct: the real flow exporters a flow storm measures
# (targets/flow_agent/exporters.py; pmacct gives pmacctd).
# python3-venv: the .venv below (a minimal Debian 12 has python3 without ensurepip); make: the
# README's commands (missing there too: run this script first, as the README says).
PKGS=(python3-bpfcc bpfcc-tools linux-headers-amd64 bpftrace bpftool clang llvm libbpf1 libbpf-dev
      gcc libc6-dev make python3-venv iproute2 nginx-light sysstat util-linux procps wrk iperf3
      stress-ng softflowd pmacct)
if [ "$PRINT" = 1 ]; then printf '%s\n' "${PKGS[@]}"; exit 0; fi
# Test-only (not in the image's --print-packages list): golang-go bootstraps the Go tools the tests
# build (k6, Jaeger, ig, helm, kube); tools/go.sh fetches the newer toolchain they need through
# the Go module proxy (Debian 12's Go is 1.19). chromium: pages (report.html, the Locust web UI
# tab) are checked in a real headless browser. umoci, busybox-static, libseccomp-dev, pkg-config:
# the real test node (docs/realnode.md) -- its pause/busybox images and a seccomp-enabled runc.
# mmdebstrap: the image built without a Docker engine (tools/build_image.py). nftables: the
# `nft` that kube-proxy (nftables mode) runs inside the real node's network namespace. openssl:
# the CLI the test cluster's certificates are made with (tests/cluster.py).
if [ -n "$EXTRAS" ]; then
  PKGS+=(golang-go chromium umoci busybox-static libseccomp-dev pkg-config mmdebstrap nftables openssl)
fi
if [ "$APT" = 1 ]; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# One merged kernel-header tree for BCC (the -common dir overlaid by the -amd64 dir), cached by
# header version. The running kernel is newer than any Debian headers: BCC code must use helpers
# and tracepoint args only (docs/platform.md#bcc-and-the-kernel-header-tree), never read kernel structs.
HDR_ROOT=/var/lib/swarmscope/kernel-headers
amd=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1 || true)
if [ -n "$amd" ]; then
  ver=$(basename "$amd" | sed 's/^linux-headers-//; s/-amd64$//')
  common="/usr/src/linux-headers-${ver}-common"
  tree="$HDR_ROOT/$ver"
  if [ ! -f "$tree/.complete" ] && [ -d "$common" ]; then
    rm -rf "$tree"; mkdir -p "$tree"
    cp -rs "$common/." "$tree/"
    cp -rsf "$amd/." "$tree/"
    touch "$tree/.complete"
  fi
  ln -sfn "$tree" "$HDR_ROOT/current"
fi

# Mounts BPF tooling expects (missing on these VMs until someone mounts them).
if [ "$MOUNTS" = 1 ]; then
  mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
  mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
  mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
fi

# The venv: pinned direct deps (pyproject) + pinned transitive ones (constraints.txt).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
deps_hash() { (cat pyproject.toml constraints.txt; [ -n "$1" ] || echo no-dev) | sha256sum | cut -c1-16; }
stamp=".venv/.swarmscope-deps-$(deps_hash "$EXTRAS")"
# A venv with the dev extras also has the runtime ones: `make run` after `make test` installs nothing.
if [ ! -f "$stamp" ] && ! { [ -z "$EXTRAS" ] && [ -f ".venv/.swarmscope-deps-$(deps_hash '[dev]')" ]; }; then
  .venv/bin/pip install -q -c constraints.txt -e ".$EXTRAS"
  rm -f .venv/.swarmscope-deps-*; touch "$stamp"
fi
# Debian's bcc into the venv: a .pth pointing at a directory that holds only a symlink to it
# (pointing at all of dist-packages would leak Debian's other packages into the venv).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/bcc ]; then
  mkdir -p .venv/debian-bcc
  ln -sfn /usr/lib/python3/dist-packages/bcc .venv/debian-bcc/bcc
  echo "$(pwd)/.venv/debian-bcc" > "$site/debian_bcc.pth"
fi
# The Go toolchain for the test tools (a no-op when a new enough Go is already there).
if [ -n "$EXTRAS" ]; then
  echo "setup: go toolchain $(tools/go.sh)"
fi
echo "setup: ready (.venv; kernel headers at $HDR_ROOT/current)"
