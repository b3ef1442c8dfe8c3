#!/usr/bin/env bash
# build_probe_reader.sh — build the native light-probe reader (probes/reader, Go) once per source
# version, cache it, print the binary's path (tools/go_build.sh does the work: versioning by a
# hash of the sources and probe.proto, the generated protobuf code, the static build).
#
#   tools/build_probe_reader.sh      # -> /var/cache/swarmscope/tools/probe-reader-<hash>/swarmscope-probe-reader
#
# Caveats: a cold build fetches the modules of go.mod through the Go module proxy.
set -euo pipefail
exec "$(dirname "$0")/go_build.sh" swarmscope/probes/reader probe-reader swarmscope-probe-reader swarmscope.dev/probereader
