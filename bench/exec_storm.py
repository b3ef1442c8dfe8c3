"""Exec-storm bench: our worker path vs a plain C spawn loop, and the probe's cost per exec.

    sudo .venv/bin/python bench/exec_storm.py                 # 5 alternating rounds of 1 s
    sudo .venv/bin/python bench/exec_storm.py --rounds 3 --duration-s 2 --json

(a) ``run_burst`` (execstorm driven from Python) in a simulated node, concurrency = nproc;
(b) ``bench/native/spawnloop.c`` (vfork + execve + waitpid, nothing else), one copy per CPU
in the same node;
both exec the same cached ``tiny`` binary, in alternating rounds so drift hits both alike;
medians and the a/b ratio are printed. (c) loads ``bpf/exec_count.bpf.c``, turns on BPF run
statistics and reads the program's run_cnt / run_time_ns (``/proc/self/fdinfo`` of its fd)
around one burst: ns per event, plus the kernel's count for the node next to the worker's,
and bpftool's figures for the same program id before the unload (bench/bpftool_ref.py).

Each figure is printed next to its reference from docs/platform.md#reference-figures. Caveats: needs root; the
machine is shared and virtualised, so absolute figures are noisy — the ratio is the figure
to compare across machines. The run_cnt delta includes every exec on the host in that
window, not only ours (ns/event is still per program run).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
from typing import Any

from bpftool_ref import bracket

from swarmscope.workers.exec_storm import run_burst
from swarmscope.workers.native import NativeTools, Target, build_cached, ensure_built
from swarmscope.workers.nodes import SimNode, create_sim_nodes, destroy_sim_nodes

BENCH_SRC = pathlib.Path(__file__).resolve().parent / "native"
REF_EXEC_PER_CORE = (3000, 6000)  # docs/platform.md: spawn+wait of a tiny static binary, per core
REF_NS_PER_EVENT = 150  # docs/platform.md: per-CPU exec counter, VM-inflated


def build_spawnloop() -> pathlib.Path:
    d = build_cached("bench", [Target("spawnloop", BENCH_SRC / "spawnloop.c", ("-O2", "-Wall"))])
    return d / "spawnloop"


def _join_node(node: SimNode) -> None:
    """In the child before exec: enter the node's cgroups, as execstorm does for itself."""
    for d in (node.pids_path, node.cgroup_path):
        if d is not None:
            (d / "cgroup.procs").write_text(str(os.getpid()))


def spawn_loop_round(
    spawnloop: pathlib.Path, tiny: pathlib.Path, node: SimNode, procs: int, duration_s: float
) -> float:
    """Run ``procs`` copies of the plain loop at once in ``node``; return their summed exec rate."""
    ps = [
        subprocess.Popen(
            [spawnloop, tiny, str(duration_s)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: _join_node(node),  # same cgroups as (a): compare drivers only
        )
        for _ in range(procs)
    ]
    rate = 0.0
    for p in ps:
        out, _ = p.communicate(timeout=duration_s + 30)
        d = json.loads(out)
        if p.returncode != 0 or d["failed"]:
            raise SystemExit(f"spawnloop failed: {out}")
        rate += d["execs"] / (d["elapsed_ns"] / 1e9)
    return rate


def prog_stats(fd: int) -> tuple[int, int]:
    """(run_cnt, run_time_ns) of a loaded BPF program, from its fd's fdinfo."""
    info: dict[str, str] = {}
    for line in pathlib.Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    return int(info["run_cnt"]), int(info["run_time_ns"])


def probe_cost(tools: NativeTools, node: SimNode, duration_s: float, concurrency: int) -> dict[str, Any]:
    from swarmscope.core.sys.bpf import enable_stats
    from swarmscope.probes.bcc_env import load_program, percpu_sum

    b = load_program("exec_count")
    stats_fd = enable_stats()
    try:
        (fn,) = b.funcs.values()
        before_counts = percpu_sum(b[b"exec_count"], "count")
        cnt0, ns0 = prog_stats(fn.fd)
        r = run_burst(tools, node, duration_s, concurrency)
        cnt1, ns1 = prog_stats(fn.fd)
        after_counts = percpu_sum(b[b"exec_count"], "count")
        ref = bracket({"exec_count": [fn.fd]})["exec_count"]  # bpftool's figures, before the unload
    finally:
        os.close(stats_fd)  # stats cost a little on every BPF program: only on while measuring
        b.cleanup()
    events = cnt1 - cnt0
    kernel = after_counts.get(node.cgroup_id, 0) - before_counts.get(node.cgroup_id, 0)
    return {
        "events": events,
        "run_time_ns": ns1 - ns0,
        "ns_per_event": (ns1 - ns0) / events if events else None,
        "generated": r.execs,
        "kernel": kernel,
        "rate_with_probe": r.rate,
        "end": [cnt1, ns1],  # the cumulative figures the deltas end at, for the bpftool check
        **ref,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of (a) and (b)")
    ap.add_argument("--duration-s", type=float, default=1.0, help="length of each burst")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1, help="default: nproc")
    ap.add_argument("--no-probe", action="store_true", help="skip (c), the BPF cost measurement")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/exec_storm.py: run as root (cgroups, BPF)", file=sys.stderr)
        return 3
    ncpu = os.cpu_count() or 1
    tools = ensure_built()
    spawnloop = build_spawnloop()
    group = f"bench-{os.getpid()}"
    (node,) = create_sim_nodes(group, ["bench"], pids_max=4 * args.concurrency + 16)
    worker_rates: list[float] = []
    loop_rates: list[float] = []
    try:
        for _ in range(args.rounds):
            worker_rates.append(run_burst(tools, node, args.duration_s, args.concurrency).rate)
            loop_rates.append(spawn_loop_round(spawnloop, tools.tiny, node, ncpu, args.duration_s))
        probe = None if args.no_probe else probe_cost(tools, node, args.duration_s, args.concurrency)
    finally:
        destroy_sim_nodes(group)
    a, b = statistics.median(worker_rates), statistics.median(loop_rates)
    res: dict[str, Any] = {
        "cpus": ncpu,
        "rounds": args.rounds,
        "duration_s": args.duration_s,
        "concurrency": args.concurrency,
        "worker_exec_per_s": worker_rates,
        "spawnloop_exec_per_s": loop_rates,
        "worker_median": a,
        "spawnloop_median": b,
        "ratio_worker_to_spawnloop": a / b if b else None,
        "ref_exec_per_s_per_core": list(REF_EXEC_PER_CORE),
        "probe": probe,
        "ref_ns_per_event": REF_NS_PER_EVENT,
    }
    if args.json:
        print(json.dumps(res))
        return 0
    lo, hi = REF_EXEC_PER_CORE
    print(f"exec storm bench: {ncpu} CPUs, {args.rounds} alternating rounds x {args.duration_s:g} s")
    print(
        f"  (a) worker path, run_burst c={args.concurrency}  median {a:9,.0f} exec/s"
        f"  ({a / ncpu:,.0f}/s/core)   ref {lo:,}-{hi:,}/s/core (docs/platform.md)"
    )
    print(
        f"  (b) plain vfork loop x{ncpu}          median {b:9,.0f} exec/s"
        f"  ({b / ncpu:,.0f}/s/core)   ref {lo:,}-{hi:,}/s/core (docs/platform.md)"
    )
    print(
        f"      ratio a/b {a / b:.2f}   per round a={[round(x) for x in worker_rates]}"
        f" b={[round(x) for x in loop_rates]}"
    )
    if probe:
        per = probe["ns_per_event"]
        per_s = f"{per:,.0f} ns/event" if per is not None else "n/a"
        print(
            f"  (c) exec_count cost {per_s} over {probe['events']:,} runs"
            f"   ref ~{REF_NS_PER_EVENT} ns/event (docs/platform.md)"
        )
        print(
            f"      generated {probe['generated']:,} vs kernel {probe['kernel']:,}"
            f" ({'equal' if probe['generated'] == probe['kernel'] else 'MISMATCH'}),"
            f" rate with probe {probe['rate_with_probe']:,.0f} exec/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
