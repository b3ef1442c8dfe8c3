"""What a read so far (ReadWindow) costs the controller, next to the close of the same window.

    .venv/bin/python bench/read_so_far.py --probes 1000 --reads 10

N compiled simulated probes (bench/simprobes_go: real gRPC, the real handshake) register with a
real Fleet; one window is opened on all of them, read ``--reads`` times, then closed. Prints the
read's p50 latency and the controller's CPU per read, next to the close's (the reference: what
a sweep already pays once per window). The tab reads every 2 s by default; a read costing what a
close costs is why sweeps never read mid-window (docs/webui.md).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simprobes_compiled import GoSimProbes

from swarmscope.controller.fleet import Fleet
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "read-so-far-bench-token"


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=1000)
    ap.add_argument("--reads", type=int, default=10)
    ns = ap.parse_args()
    fleet = Fleet(TOKEN, expect_probes=ns.probes)
    fleet.start()
    names = [f"h{i}" for i in range(ns.probes)]
    sims = GoSimProbes.spawn(fleet.address, TOKEN, names)
    try:
        fleet.wait_for_probes(ns.probes, timeout_s=300)
        nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in names}
        assert fleet.open_window("bench", "w", nodes) == {}
        lat, cpu, silent = [], [], 0
        for _ in range(ns.reads):
            t, c = time.perf_counter(), cpu_s()
            readings, missing = fleet.read_window("w", timeout_s=30)
            lat.append(time.perf_counter() - t)
            cpu.append(cpu_s() - c)
            silent += len(missing)
            print(
                f"  read {len(lat)}: {1000 * lat[-1]:.0f} ms, {len(missing)} silent {missing[:3]}",
                file=sys.stderr,
            )
            assert len(readings) + len(missing) == ns.probes
        t, c = time.perf_counter(), cpu_s()
        readings, missing = fleet.close_window("bench", "w", timeout_s=60)
        close_lat, close_cpu = time.perf_counter() - t, cpu_s() - c
        assert (len(readings), missing) == (ns.probes, [])
    finally:
        sims.stop()
        fleet.stop()
    print(f"probes {ns.probes:,}, reads {ns.reads}")
    read_ms, read_cpu_ms = 1000 * statistics.median(lat), 1000 * statistics.median(cpu)
    print(f"read  p50 {read_ms:8.1f} ms   controller CPU {read_cpu_ms:8.1f} ms   probes silent {silent}")
    print(f"close     {1000 * close_lat:8.1f} ms   controller CPU {1000 * close_cpu:8.1f} ms   (reference)")


if __name__ == "__main__":
    main()
