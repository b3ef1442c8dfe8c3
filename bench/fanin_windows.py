"""The fan-in benches' measured part: windows opened and closed over every probe, timed.

    open_lat, close_lat, lost, wrong = measure_windows(fleet, names, windows=5, timeout_s=60)
    pct(close_lat, 0.99)

A reading lost is a node with no reading at close (a host whose open failed has none); a reading wrong
is one whose counters are not the simulated probes' ``COUNTERS``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from simprobes import COUNTERS

from swarmscope.v1 import probe_pb2 as pb


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def window_figures(
    open_lat: list[float], close_lat: list[float], lost: int, wrong: int, cpu_s: float, windows: int, n: int
) -> dict[str, Any]:
    """The figures every fan-in design reports for its measured windows (n probes)."""
    return {
        "readings_lost": lost,
        "readings_wrong": wrong,
        "open_p50_ms": 1000 * statistics.median(open_lat),
        "close_p50_ms": 1000 * statistics.median(close_lat),
        "close_p99_ms": 1000 * pct(close_lat, 0.99),
        "ctl_cpu_s_per_window_per_1k": cpu_s / windows / (n / 1000),
    }


def measure_windows(
    fleet: Any, names: list[str], windows: int, timeout_s: float
) -> tuple[list[float], list[float], int, int]:
    nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in names}
    close_lat: list[float] = []
    open_lat: list[float] = []
    lost = wrong = 0
    for w in range(windows):
        t = time.monotonic()
        problems = fleet.open_window("bench", f"w{w}", nodes, timeout_s=timeout_s)
        open_lat.append(time.monotonic() - t)
        t = time.monotonic()
        readings, missing = fleet.close_window("bench", f"w{w}", timeout_s=timeout_s)
        close_lat.append(time.monotonic() - t)
        lost += len(names) - len({r.node for r in readings})  # unopened hosts have none either
        wrong += sum(r.counters != COUNTERS for r in readings)
        print(
            f"  window {w}: open {open_lat[-1]:.2f}s close {close_lat[-1]:.2f}s "
            f"missing {len(missing)} problems {len(problems)}",
            file=sys.stderr,
            flush=True,
        )
    return open_lat, close_lat, lost, wrong
