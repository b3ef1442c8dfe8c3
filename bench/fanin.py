"""Fan-in: how many probes one controller holds, and how fast it closes a window over them.

    .venv/bin/python bench/fanin.py                    # 1,000 and 10,000 probes + the old design
    .venv/bin/python bench/fanin.py --probes 100,1000 --windows 10 --baseline-ref none --json
    nice -n 5 .venv/bin/python bench/fanin.py --relays 4 --probes 100000 --windows 5   # + direct at 10k
    .venv/bin/python bench/fanin.py --probes 1000,10000 --baseline-ref none --compare-ref main  # before/after

The two goal figures, one command each (a few minutes on a quiet 2-core machine):

    .venv/bin/python bench/fanin.py --probes 10000 --windows 5 --baseline-ref none
    .venv/bin/python bench/fanin.py --relays 16 --probes 100000 --direct-probes 0 --windows 3 \
        --heartbeat-s 30 --per-process 5000

(at 100,000 a 5 s heartbeat alone is 20,000 messages a second on the probes' core: the relayed
run hands out 30 s, liveness 180 s.)

Starts N simulated probes (real gRPC, the real handshake, fake readings, no BPF) against one
in-process controller fleet, and runs
windows: open on every probe, close, collect one reading per node. The controller (this process:
the fleet's event loop and the caller) is pinned to CPU 0 and the simulated probes to CPU 1, so
the controller's CPU-seconds per window per 1,000 probes mean something on a shared machine.
``--sim go`` (the default when tools/go_build.sh builds them; else ``python``, said on
stderr) runs the compiled simulated probes (bench/simprobes_go via bench/simprobes_compiled.py),
``--sim python`` bench/simprobes.py's (grpc.aio, thousands of Sessions per process), same wire
behaviour; ``--sim go,python`` runs each N with both, side by side. The Python ones cost more
CPU per window than the controller, so on 2 cores they, not it, bounded the close at 10,000.

Prints, per N: readings lost (goal 0), window-close p50/p99 (goal at 10,000: p99 < 1 s), the
controller's CPU-s per window per 1,000 probes, its RSS; and, measured in the same run, the old
design (the sync server with a thread per stream, at ``--baseline-ref``, with its own bench and
thread-per-probe clients, not pinned) at ``--baseline-probes``. With ``--relays K`` the
``--probes`` go through K relays (bench/fanin_relays.py, goal at 100,000: 0 lost, p99 < 2 s),
next to the direct design at ``--direct-probes`` (goal at 10,000: p99 < 1 s), with the load
average: wall times on a shared machine are inflated, the CPU-s columns much less so. With
``--compare-ref REF`` each N is first measured with this bench as it is at REF (a throw-away
worktree, pinned the same way), so a change is seen before/after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil
from fanin_relays import run_relays
from fanin_windows import measure_windows, window_figures
from simprobes_compiled import SIMS, pick_sim, sim_probes

from swarmscope.controller.fleet import Fleet
from swarmscope.controller.options import HEARTBEAT_BUDGET

TOKEN = "fanin-bench-token"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_REF = "9feddea"  # main before the fleet went to grpc.aio (sync server, thread per stream)


def pin(ctl: set[int], probes: set[int]) -> tuple[set[int] | None, set[int] | None]:
    """CPU 0 for the controller, CPU 1 for the probes (when there are two to pin to)."""
    have = os.sched_getaffinity(0)
    if not (ctl <= have and probes <= have) or ctl == probes:
        return None, None
    return ctl, probes


def pin_all(pid: int, cpus: set[int] | None) -> None:
    """Pin every thread of a process (sched_setaffinity on a pid pins only that one thread)."""
    if not cpus:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that just ended


def run(
    n: int,
    windows: int,
    per_process: int,
    per_channel: int,
    heartbeat_s: float,
    budget: float = HEARTBEAT_BUDGET,
    known_size: bool = True,
    sim: str = "go",
) -> dict[str, Any]:
    ctl_cpus, probe_cpus = pin({0}, {1})
    saved = os.sched_getaffinity(0)
    # ``heartbeat_s`` is the floor: past ``budget`` heartbeats a second the fleet hands out more
    # (fleet_state.pace). Told the size, as a run with probe=external and expect_probes=N is.
    fleet = Fleet(
        TOKEN,
        liveness_s=max(30.0, 6 * heartbeat_s),
        heartbeat_s=heartbeat_s,
        heartbeat_budget=budget,
        expect_probes=n if known_size else 0,
    )
    names = [f"node-{i:06d}" for i in range(n)]
    me = psutil.Process()
    try:
        fleet.start()
        t0 = time.monotonic()
        # The join runs on both CPUs (on a shared machine a pinned join of 10,000 can take
        # minutes); the windows, which are what is measured, run pinned.
        sims = sim_probes(sim).spawn(fleet.address, TOKEN, names, per_process, per_channel)
        fleet.wait_for_probes(n, timeout_s=max(120, n / 10))
        join_s = time.monotonic() - t0
        pin_all(os.getpid(), ctl_cpus)
        for p in sims.procs:
            pin_all(p.pid, probe_cpus)
        print(f"{n} probes joined in {join_s:.1f}s", file=sys.stderr, flush=True)
        sim_procs = [psutil.Process(p.pid) for p in sims.procs]
        sim0 = [p.cpu_times() for p in sim_procs]
        cpu0, w0 = me.cpu_times(), time.monotonic()
        open_lat, close_lat, lost, wrong = measure_windows(fleet, names, windows, timeout_s=60)
        wall = time.monotonic() - w0
        cpu1 = me.cpu_times()
        cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        sim_s = sum(
            (b.user - a.user) + (b.system - a.system)
            for a, b in zip(sim0, [p.cpu_times() for p in sim_procs], strict=True)
        )
        rss = me.memory_info().rss / 2**20
        handed = [p.heartbeat_s for p in fleet.probes(alive_only=False)]
        sims.stop()
    finally:
        fleet.stop()
        pin_all(os.getpid(), saved)
    return {
        "design": f"grpc.aio, {sim} sims",
        "sim": sim,
        "probes": n,
        "windows": windows,
        "pinned": bool(ctl_cpus),
        "heartbeat_s": heartbeat_s,
        "heartbeat_budget": budget,
        "heartbeats_per_s": sum(1 / h for h in handed),
        "join_s": join_s,
        **window_figures(open_lat, close_lat, lost, wrong, cpu_s, windows, n),
        "controller_cpu_pct": 100 * cpu_s / wall,
        "controller_rss_mib": rss,
        "sim_cpu_s_per_window": sim_s / windows,
    }


def baseline(ref: str, n: int, windows: int) -> dict[str, Any]:
    """The old design's own bench at ``ref``, in a throw-away worktree, in this run."""
    tree = tempfile.mkdtemp(prefix="fanin-baseline-")
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "-f", tree, ref], check=True, capture_output=True
    )
    try:
        env = dict(os.environ, PYTHONPATH=tree)
        out = subprocess.run(
            [
                sys.executable,
                os.path.join(tree, "bench", "fanin.py"),
                "--probes",
                str(n),
                "--windows",
                str(windows),
                "--json",
            ],
            env=env,
            cwd=tree,
            check=True,
            capture_output=True,
            text=True,
            timeout=1800,
        ).stdout
        row = json.loads(out)[0]
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
    cpu_s = row["controller_cpu_pct"] / 100 * (row["open_p50_ms"] + row["close_p50_ms"]) / 1000
    return dict(
        row, design=f"sync+threads @{ref}", pinned=False, ctl_cpu_s_per_window_per_1k=cpu_s / (n / 1000)
    )


def same_bench_at(ref: str, n: int, a: argparse.Namespace, sim: str) -> dict[str, Any]:
    """This bench as it is at ``ref`` (e.g. main), one N, pinned the same way: before/after in
    one run, each N measured right before this tree's own row (same load, near enough)."""
    tree = tempfile.mkdtemp(prefix="fanin-compare-")
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "-f", tree, ref], check=True, capture_output=True
    )
    try:
        args = ["--probes", str(n), "--windows", str(a.windows), "--baseline-ref", "none", "--json"]
        args += ["--per-process", str(a.per_process), "--per-channel", str(a.per_channel)]
        args += ["--heartbeat-s", str(a.heartbeat_s)]
        with open(os.path.join(tree, "bench", "fanin.py"), encoding="utf-8") as fh:
            if '"--sim"' in fh.read():  # the same simulated probes there, when it can choose
                args += ["--sim", sim]
        out = subprocess.run(
            [sys.executable, os.path.join(tree, "bench", "fanin.py"), *args],
            env=dict(os.environ, PYTHONPATH=tree),
            cwd=tree,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            timeout=3600,
        ).stdout
        row: dict[str, Any] = json.loads(out)[0]
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
    return dict(row, design=f"{row['design']} @{ref}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", default="1000,10000")
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--per-process", type=int, default=2500, help="simulated probes per client process")
    ap.add_argument("--per-channel", type=int, default=50, help="simulated probes per HTTP/2 connection")
    ap.add_argument(
        "--heartbeat-s", type=float, default=5.0, help="the heartbeat interval the fleet hands out"
    )
    ap.add_argument(
        "--heartbeat-budget",
        type=float,
        default=HEARTBEAT_BUDGET,
        help="heartbeats/s the fleet takes in all (this tree's fleet only; --compare-ref's may not pace)",
    )
    ap.add_argument(
        "--unknown-size",
        action="store_true",
        help="do not tell the fleet N in advance (probes paced by the size when each joined)",
    )
    ap.add_argument("--baseline-ref", default=OLD_REF, help="git ref of the old design, or 'none'")
    ap.add_argument("--baseline-probes", type=int, default=1000)
    ap.add_argument("--relays", type=int, default=0, help="K: run --probes through K relays (0: direct)")
    ap.add_argument("--direct-probes", type=int, default=10000, help="with --relays: the direct figure's N")
    ap.add_argument("--compare-ref", default="", help="git ref: run this same bench there too, per N")
    ap.add_argument(
        "--sim",
        default="auto",
        help="simulated probes: go, python, or both (go,python: each N with each); auto: go if it builds",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    # SIGTERM (timeout, kill) unwinds like Ctrl-C: the finally blocks stop relays and probes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sims = [pick_sim(s) for s in a.sim.split(",")]
    if not set(sims) <= set(SIMS):
        ap.error(f"--sim: {a.sim!r}: want go, python, a comma list of them, or auto")
    rows = []
    load0 = os.getloadavg()
    if a.baseline_ref != "none" and not a.relays:
        rows.append(baseline(a.baseline_ref, a.baseline_probes, a.windows))

    def direct(n: int, sim: str) -> dict[str, Any]:
        paced = (a.heartbeat_s, a.heartbeat_budget, not a.unknown_size)
        return run(n, a.windows, a.per_process, a.per_channel, *paced, sim=sim)

    if a.relays:
        # Relays first: the figure this mode is for; the direct one after, in the same run.
        for n in a.probes.split(","):
            for sim in sims:
                row = run_relays(
                    int(n), a.relays, a.windows, a.per_process, a.per_channel, a.heartbeat_s, TOKEN, pin_all,
                    sim=sim_probes(sim),
                )  # fmt: skip
                # heartbeat_s: the relays hand it out; the table's beats/s column needs it
                row = dict(row, design=f"{row['design']}, {sim} sims", sim=sim, heartbeat_s=a.heartbeat_s)
                rows.append(row)
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept if a later row fails
        if a.direct_probes:
            rows.extend(direct(a.direct_probes, sim) for sim in sims)
    else:
        for n in a.probes.split(","):
            for sim in sims:
                if a.compare_ref:
                    rows.append(same_bench_at(a.compare_ref, int(n), a, sim))
                rows.append(direct(int(n), sim))
    load1 = os.getloadavg()
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    head = (
        "design",
        "probes",
        "lost",
        "open p50",
        "close p50",
        "close p99",
        "goal p99",
        "CPU-s/w/1k",
        "beats/s",
        "ctl RSS",
        "relay CPU",
        "relay RSS",
        "sim CPU/w",
    )
    print(f"{head[0]:>32}" + "".join(f"{h:>11}" for h in head[1:]))
    for r in rows:
        cells = (
            str(r["probes"]),
            str(r["readings_lost"]),
            f"{r['open_p50_ms']:.0f}ms",
            f"{r['close_p50_ms']:.0f}ms",
            f"{r['close_p99_ms']:.0f}ms",
            ("< 2000ms" if r.get("relays") else "< 1000ms") if r["probes"] >= 10000 else "-",
            f"{r['ctl_cpu_s_per_window_per_1k']:.3f}",
            # The baseline's and --compare-ref's rows may carry neither: said as "-".
            f"{r['heartbeats_per_s']:.0f}"
            if "heartbeats_per_s" in r
            else (f"{r['probes'] / r['heartbeat_s']:.0f}" if "heartbeat_s" in r else "-"),
            f"{r['controller_rss_mib']:.0f}MiB",
            f"{r['relays_cpu_s_per_window_per_1k']:.3f}" if r.get("relays") else "-",
            f"{r['relays_rss_mib']:.0f}MiB" if r.get("relays") else "-",
            f"{r['sim_cpu_s_per_window']:.2f}s" if "sim_cpu_s_per_window" in r else "-",
        )
        print(f"{r['design']:>32}" + "".join(f"{c:>11}" for c in cells))
        if r.get("direct_probes"):
            print(f"{'':>32} ({r['direct_probes']} of them joined the controller directly: relay starved)")
    print(
        "CPU-s/w/1k: the controller's CPU-seconds per window (open + close) per 1,000 probes; the old "
        "design's is estimated from its CPU% over open+close p50, unpinned. Old figure quoted in issue 13: "
        "1,000 probes, close p99 640 ms quiet, 2.4-3.5 s loaded. beats/s: the heartbeats a second the probes "
        "were handed (a fleet that does not pace: probes / --heartbeat-s). relay CPU: the relays' CPU-s "
        "per window per 1,000 probes, all relays together (on the probes' core). sim CPU/w: the simulated "
        "probes' CPU-s per window, all of them (on CPU 1)."
    )
    print(f"load average (1 min) at start {load0[0]:.1f}, at end {load1[0]:.1f}, on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
