"""Fan-in: how many probes one controller holds, and how fast it closes a window over them.

    .venv/bin/python bench/fanin.py                    # N = 10, 100, 1000
    .venv/bin/python bench/fanin.py --probes 10,100 --windows 20 --json

Starts N simulated probes (real gRPC clients, each with its own channel and Session stream,
fake readings, no BPF) spread over a few processes, against one in-process controller fleet,
and runs windows: open on every probe, close, collect one reading per node. Reports readings
lost (goal: 0), window-close latency p50/p99 (goal at 1000 probes: p99 < 1 s) and the
controller's CPU and RSS. The readings' node count equals the probe count (one node each).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil

from swarmscope.controller.fleet import Fleet
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "fanin-bench-token"


def _probe_host(address: str, names: list[str], stop: Any) -> None:
    from tests.fakeprobe import FakeProbe

    probes = [FakeProbe(address, TOKEN, n, {"exec": 1000}).start() for n in names]
    stop.wait()
    for p in probes:
        p.stop()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run(n: int, windows: int, hosts_per_proc: int) -> dict[str, float]:
    fleet = Fleet(TOKEN, liveness_s=30.0)
    fleet.start()
    me = psutil.Process()
    ctx = mp.get_context("spawn")  # never fork a process that has gRPC running
    stop = ctx.Event()
    names = [f"node-{i:05d}" for i in range(n)]
    chunks = [names[i : i + hosts_per_proc] for i in range(0, n, hosts_per_proc)]
    procs = [ctx.Process(target=_probe_host, args=(fleet.address, c, stop), daemon=True) for c in chunks]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    fleet.wait_for_probes(n, timeout_s=300)
    join_s = time.monotonic() - t0
    nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in names}
    close_lat, open_lat, lost = [], [], 0
    cpu0 = me.cpu_times()
    w0 = time.monotonic()
    for w in range(windows):
        t = time.monotonic()
        problems = fleet.open_window("bench", f"w{w}", nodes, timeout_s=60)
        open_lat.append(time.monotonic() - t)
        t = time.monotonic()
        readings, _missing = fleet.close_window("bench", f"w{w}", timeout_s=60)
        close_lat.append(time.monotonic() - t)
        lost += n - len({r.node for r in readings}) + len(problems)
        assert all(r.counters["exec"] == 1000 for r in readings)
    wall = time.monotonic() - w0
    cpu1 = me.cpu_times()
    cpu_pct = 100 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
    rss = me.memory_info().rss / 2**20
    stop.set()
    for p in procs:
        p.join(30)
    fleet.stop()
    return {
        "probes": n,
        "windows": windows,
        "join_s": join_s,
        "readings_lost": lost,
        "open_p50_ms": 1000 * statistics.median(open_lat),
        "close_p50_ms": 1000 * statistics.median(close_lat),
        "close_p99_ms": 1000 * pct(close_lat, 0.99),
        "controller_cpu_pct": cpu_pct,
        "controller_rss_mib": rss,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", default="10,100,1000")
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--per-process", type=int, default=100, help="simulated probes per client process")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = [run(int(n), a.windows, a.per_process) for n in a.probes.split(",")]
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    head = ("probes", "lost", "open p50", "close p50", "close p99", "goal p99", "ctl CPU%", "ctl RSS")
    print("".join(f"{h:>11}" for h in head))
    for r in rows:
        cells = (
            str(r["probes"]),
            str(r["readings_lost"]),
            f"{r['open_p50_ms']:.1f}ms",
            f"{r['close_p50_ms']:.1f}ms",
            f"{r['close_p99_ms']:.1f}ms",
            "< 1000ms" if r["probes"] >= 1000 else "-",
            f"{r['controller_cpu_pct']:.0f}%",
            f"{r['controller_rss_mib']:.0f}MiB",
        )
        print("".join(f"{c:>11}" for c in cells))


if __name__ == "__main__":
    main()
