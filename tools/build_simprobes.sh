#!/usr/bin/env bash
# build_simprobes.sh — build the compiled simulated probes (bench/simprobes_go, Go: the fan-in
# benches' probes, bench/simprobes_compiled.py) once per source version, cache it, print the
# binary's path (tools/go_build.sh does the work: versioning by a hash of the sources and
# probe.proto, the generated protobuf code, the static build).
#
#   tools/build_simprobes.sh      # -> /var/cache/swarmscope/tools/simprobes-<hash>/swarmscope-simprobes
#
# Caveats: a cold build fetches go.mod's modules through the Go module proxy.
set -euo pipefail
exec "$(dirname "$0")/go_build.sh" bench/simprobes_go simprobes swarmscope-simprobes swarmscope.dev/simprobes
