"""The controller's own work per relayed window, with no sockets: what is left once relays fan in.

    .venv/bin/python bench/fanin_bookkeeping.py --probes 100000 --relays 16 --windows 3 --repeat 2

A real ``Fleet`` (not started: its commands go nowhere) gets K relays' Rosters, then windows:
``begin_open`` over every host, each relay's WindowAck and WindowDone handled as the fleet's
stream handler would (parsed from bytes), ``finish_close``; every reading is checked exact.
Prints the controller's CPU-seconds per window per 1,000 probes, and per step, for the readings
sent by column (``WindowDone.table``, what relays send) next to the same readings as one
message each (``WindowDone.batch``, what relays sent before), measured in the same run.
CPU time (``time.process_time``), so a shared machine inflates it less than wall time.
Caveat: the relays' and probes' costs, and gRPC's per-message cost, are not in it (bench/fanin.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from swarmscope.controller import relay_routes
from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_state import ProbeState, fill_table
from swarmscope.v1 import probe_pb2 as pb

COUNTERS = {"exec": 1000}


def _relay_messages(names: list[list[str]], window_id: str, table: bool) -> tuple[list[bytes], list[bytes]]:
    acks, dones = [], []
    for hosts in names:
        pids = [f"sim-{h}" for h in hosts]
        ack = pb.WindowAck(run_id="bench", window_id=window_id, ok=True, probes=pids)
        acks.append(pb.ProbeMessage(ack=ack).SerializeToString())
        rows = [
            (pid, pb.Reading(run_id="bench", window_id=window_id, probe_id=pid, node=h, counters=COUNTERS))
            for pid, h in zip(pids, hosts, strict=True)
        ]
        done = pb.WindowDone(run_id="bench", window_id=window_id, probes=pids)
        if table:
            fill_table(done, rows)
        else:
            done.batch.extend(r for _, r in rows)
            done.readings = len(rows)
        dones.append(pb.ProbeMessage(done=done).SerializeToString())
    return acks, dones


def run(n: int, k: int, windows: int, table: bool) -> dict[str, float]:
    fleet = Fleet("bench", liveness_s=30)
    now = time.monotonic()
    relays = [
        ProbeState(f"relay-{i}", "", "r", f"relay-{i}", "", [], "", 0, last_seen=now, connected=True,
                   relay=True)
        for i in range(k)
    ]  # fmt: skip
    names = [f"node-{i:06d}" for i in range(n)]
    split = [names[i::k] for i in range(k)]
    for relay, hosts in zip(relays, split, strict=True):
        fleet._probes[relay.probe_id] = relay
        roster = pb.Roster(added=[pb.RosterEntry(probe_id=f"sim-{h}", host=h) for h in hosts])
        with fleet._lock:
            relay_routes.handle(fleet, relay, pb.ProbeMessage(roster=roster))
    nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in names}
    msgs = {f"w{w}": _relay_messages(split, f"w{w}", table) for w in range(windows)}
    steps: dict[str, float] = {}

    def step(name: str, t0: float) -> float:
        t1 = time.process_time()
        steps[name] = steps.get(name, 0.0) + t1 - t0
        return t1

    for wid, (acks, dones) in msgs.items():
        t = time.process_time()
        with fleet._lock:
            win, hosts, problems = fleet.begin_open("bench", wid, nodes)
        t = step("open", t)
        for relay, data in zip(relays, acks, strict=True):
            fleet._handle(relay, pb.ProbeMessage.FromString(data))
        with fleet._lock:
            failed = fleet.wait_acks(win, set(hosts), time.monotonic() + 5)
            t = step("acks", t)
            fleet.begin_close(win)
        t = step("close", t)
        for relay, data in zip(relays, dones, strict=True):
            fleet._handle(relay, pb.ProbeMessage.FromString(data))
        with fleet._lock:
            missing = fleet.finish_close(win, time.monotonic() + 5)
        readings = list(win.readings.values())
        step("readings", t)
        if (
            problems
            or failed
            or missing
            or len(readings) != n
            or any(r.counters != COUNTERS for r in readings)
        ):
            raise SystemExit(
                f"{wid}: not exact: {len(problems)} {len(failed)} {len(missing)} {len(readings)}"
            )
    per = windows * n / 1000
    return {name: cpu / per for name, cpu in steps.items()} | {"total": sum(steps.values()) / per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--relays", type=int, default=16)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternated")
    a = ap.parse_args()
    # Alternated, the lower of each step kept: a run leaves the heap (and so the GC's work) to
    # the next one, so whichever runs first would be favoured.
    figs: dict[bool, dict[str, float]] = {}
    for _ in range(a.repeat):
        for table in (False, True):
            fig = run(a.probes, a.relays, a.windows, table)
            figs[table] = {k: min(v, figs.get(table, fig)[k]) for k, v in fig.items()}
            gc.collect()
    rows = [("one message per reading (before)", figs[False]), ("by column (WindowDone.table)", figs[True])]
    print(f"{a.probes} probes, {a.relays} relays, {a.windows} windows: controller CPU-s per window per 1k")
    head = list(rows[0][1])
    print(f"{'readings sent':>34}" + "".join(f"{h:>10}" for h in head))
    for name, fig in rows:
        print(f"{name:>34}" + "".join(f"{fig[h]:>10.4f}" for h in head))
    total = rows[1][1]["total"]
    print(f"at {a.probes}: {total * a.probes / 1000:.2f} controller CPU-s per window (goal: close p99 < 2 s)")
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
