#!/usr/bin/env bash
# timed.sh — run a command and print its wall time when it ends (the Makefile's step durations).
#
#   tools/timed.sh mypy .venv/bin/mypy      # ... then "make: mypy took 41.2 s"
#
# The command's exit status is passed on, and the time is printed on failure too.
set -uo pipefail
name=$1
shift
t0=$(date +%s.%N)
"$@"
rc=$?
awk -v n="$name" -v a="$t0" -v b="$(date +%s.%N)" -v rc="$rc" \
  'BEGIN { printf "make: %s took %.1f s%s\n", n, b - a, (rc ? " (failed, rc=" rc ")" : "") }'
exit "$rc"
