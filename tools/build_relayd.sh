#!/usr/bin/env bash
# build_relayd.sh — build the native relay (controller/relayd, Go: `swarmscope relay --engine
# native`) once per source version, cache it, print the binary's path (tools/go_build.sh does
# the work: versioning by a hash of the sources and probe.proto, the generated protobuf code,
# the static build).
#
#   tools/build_relayd.sh      # -> /var/cache/swarmscope/tools/relayd-<hash>/swarmscope-relayd
#
# Caveats: a cold build fetches go.mod's modules through the Go module proxy.
set -euo pipefail
exec "$(dirname "$0")/go_build.sh" swarmscope/controller/relayd relayd swarmscope-relayd swarmscope.dev/relayd
