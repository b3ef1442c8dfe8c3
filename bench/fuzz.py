"""Fuzz campaigns with their counts: cases tried, outcomes, and the servers' RSS growth.

    .venv/bin/python bench/fuzz.py                                   # default budgets
    .venv/bin/python bench/fuzz.py --scenarios 2000 --fleet 1000 --neighbors 2000 --json

Runs tests/fuzzing.py's three campaigns (Hypothesis): the scenario parser (every input loads or
is a ConfigError), every gRPC method of the probe fleet and of the neighbor control plane
(random, malformed, oversized messages and raw bytes, with the right token, a wrong one and
none) against the real servers in their own processes. A campaign that finds a failure stops
with Hypothesis's minimal failing case. The reference printed next to each server's RSS growth
is the bound the campaign enforces (tests/fuzzing.py RSS_BOUND).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from fuzzing import RSS_BOUND, FleetServer, NeighborServer, fuzz_fleet, fuzz_neighbors, fuzz_scenarios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", type=int, default=1000)
    ap.add_argument("--fleet", type=int, default=500)
    ap.add_argument("--neighbors", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    out: dict[str, dict[str, int | float]] = {}
    t = time.monotonic()
    out["scenario_parser"] = {**fuzz_scenarios(ns.scenarios), "seconds": round(time.monotonic() - t, 1)}
    t = time.monotonic()
    with FleetServer() as srv:
        out["fleet_grpc"] = {**fuzz_fleet(srv, ns.fleet), "seconds": round(time.monotonic() - t, 1)}
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ss-fuzz-") as d, NeighborServer(Path(d)) as srv:
        out["neighbors_grpc"] = {
            **fuzz_neighbors(srv, ns.neighbors),
            "seconds": round(time.monotonic() - t, 1),
        }
    if ns.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, c in out.items():
        rest = ", ".join(
            f"{k}={v}" for k, v in sorted(c.items()) if k not in ("cases", "seconds", "rss_growth_kib")
        )
        line = f"{name:<16} cases={c['cases']:>6}  {rest}  ({c['seconds']} s)"
        if "rss_growth_kib" in c:
            line += f"  server RSS growth {c['rss_growth_kib'] / 1024:.1f} MiB (bound {RSS_BOUND >> 20} MiB)"
        print(line)
    print(f"total cases: {sum(int(c['cases']) for c in out.values())}, failures: 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
