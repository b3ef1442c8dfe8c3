"""Fan-in through relays: N simulated probes behind K `swarmscope relay` processes, one controller.

    .venv/bin/python bench/fanin.py --relays 4 --probes 100000 --windows 5   # prints this next to direct

The controller (this process: the fleet's loop and the caller) is pinned to CPU 0; the relays and
the simulated probes (bench/simprobes.py, the real handshake, 2,500 per process) to CPU 1, after
the join. Probes are dealt round robin over the relays (their upstream list: their relay, the
other relays, then the controller). Each window opens on every probe and closes; a reading lost
is a node with no reading at close. Prints the controller's CPU-seconds per window per 1,000
probes (the figure a shared machine does not distort) and the relays' together. Caveat: on a
two-core machine the relays share CPU 1 with every simulated probe, so close latency here is
bounded by that core, not by the controller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psutil
from fanin_windows import measure_windows, window_figures
from simprobes import SimProbes

from swarmscope.controller.fleet import Fleet
from swarmscope.core.errors import FleetError


def _start_relays(
    k: int, upstream: str, token: str, heartbeat_s: float, timeout_s: float
) -> list[tuple[subprocess.Popen[str], str]]:
    env = dict(os.environ, SWARMSCOPE_TOKEN=token)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), env.get("PYTHONPATH", "")]
    )
    procs = []
    for i in range(k):  # all at once: one by one, 16 starts took 8 minutes on a loaded machine
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "swarmscope", "relay", "--upstream", upstream, "--bind", "127.0.0.1:0",
             "--relay-id", f"relay-{i}", "--heartbeat", str(heartbeat_s),
             "--liveness", str(max(30.0, 6 * heartbeat_s)), "--window-timeout", str(timeout_s - 10)],
            env=env, stdout=subprocess.PIPE, text=True,
        ))  # fmt: skip
    out = []
    for i, proc in enumerate(procs):
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on port" not in line:
            for p in procs:
                p.kill()
            raise RuntimeError(f"relay {i} did not start: {line!r}")
        out.append((proc, f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}"))
    return out


def run_relays(
    n: int,
    k: int,
    windows: int,
    per_process: int,
    per_channel: int,
    heartbeat_s: float,
    token: str,
    pin_all: Any,
    timeout_s: float = 300.0,
    sim: Any = SimProbes,
) -> dict[str, Any]:
    fleet = Fleet(token, liveness_s=max(30.0, 6 * heartbeat_s), heartbeat_s=heartbeat_s)
    names = [f"node-{i:06d}" for i in range(n)]
    me = psutil.Process()
    saved = os.sched_getaffinity(0)
    two = {0, 1} <= saved
    relays: list[tuple[subprocess.Popen[str], str]] = []
    sims = None
    try:
        fleet.start()
        # Generous timeouts: on a loaded two-core machine a window of 100,000 can take minutes,
        # and a relay that timed out would report its probes missing (a loss the bench would
        # count, of time, not of design). The relay's stays under the controller's.
        relays = _start_relays(k, fleet.address, token, heartbeat_s, timeout_s)
        t0 = time.monotonic()
        ups = [addr for _, addr in relays] + [fleet.address]
        sims = sim.spawn(ups, token, names, per_process, per_channel, spread=k)
        join_deadline = time.monotonic() + max(300, n / 20)
        while True:  # the join of 100,000 takes minutes: say how far it is every 30 s
            try:
                fleet.wait_for_probes(n, timeout_s=min(30.0, max(0.0, join_deadline - time.monotonic())))
                break
            except FleetError:
                if time.monotonic() >= join_deadline:
                    raise
                print(f"  joined {len(fleet.probes())}/{n}", file=sys.stderr, flush=True)
        join_s = time.monotonic() - t0
        # A probe whose relay was too starved to take it during the join registered with its
        # next upstream, in the end the controller itself (the design's fallback): counted.
        direct = sum(1 for p in fleet.probes() if not p.via)
        if two:
            pin_all(os.getpid(), {0})
            for p in [*sims.procs, *(r for r, _ in relays)]:
                pin_all(p.pid, {1})
        print(f"{n} probes joined through {k} relays in {join_s:.1f}s", file=sys.stderr, flush=True)
        rprocs = [psutil.Process(r.pid) for r, _ in relays]
        cpu0 = me.cpu_times()
        rcpu0 = [p.cpu_times() for p in rprocs]
        open_lat, close_lat, lost, wrong = measure_windows(fleet, names, windows, timeout_s=timeout_s)
        cpu1 = me.cpu_times()
        cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        rcpu = sum(
            (b.user - a.user) + (b.system - a.system)
            for a, b in zip(rcpu0, [p.cpu_times() for p in rprocs], strict=True)
        )
        rss = me.memory_info().rss / 2**20
        relay_rss = sum(p.memory_info().rss for p in rprocs) / 2**20
    finally:
        if sims is not None:
            sims.stop_event.set()
            for p in sims.procs:
                p.kill()
        for r, _ in relays:
            r.kill()
            r.wait(10)
        fleet.stop()
        pin_all(os.getpid(), saved)
    return {
        "design": f"grpc.aio+{k} relays",
        "probes": n,
        "relays": k,
        "windows": windows,
        "pinned": two,
        "join_s": join_s,
        "direct_probes": direct,
        **window_figures(open_lat, close_lat, lost, wrong, cpu_s, windows, n),
        "relays_cpu_s_per_window_per_1k": rcpu / windows / (n / 1000),
        "controller_rss_mib": rss,
        "relays_rss_mib": relay_rss,
    }
