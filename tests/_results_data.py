"""A realistic exec-storm sweep for the results tests: fired through RunEvents like a real run.

Points nodes=2, 5, 11 with 4 iterations each; the tracer loses more as nodes grow; point 1
has one harness mismatch (kernel counted 7 more than generated on node-3, iteration 2);
point 2 iteration 1 has node-4 missing the tracer (reported None); every window has one
ProbeReading per node.
"""

from __future__ import annotations

import random

from swarmscope.controller.model import (
    IterationResult,
    NodeCount,
    PointInfo,
    ProbeReading,
    RunInfo,
    WindowInfo,
)
from swarmscope.core.events import RunEvents

T0 = 1_790_000_000_000_000_000  # a fixed start (ns) so reports are reproducible
LOSS_BY_NODES = {2: 0.0, 5: 0.04, 11: 0.35}


def make_run(run_id: str = "run-20261122-1", run_dir: str = "", tracer: bool = True) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        scenario="exec_storm",
        metric="exec",
        config={"nodes": [2, 5, 11], "iterations": 4, "tracer": {"kind": "bpftrace" if tracer else "none"}},
        started_ns=T0,
        run_dir=run_dir,
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    )


def sweep(run: RunInfo, tracer: bool = True, seed: int = 7):
    """Yield (point, [(window, readings, missing, result), ...]) for the whole sweep."""
    rng = random.Random(seed)
    t = T0
    for idx, nodes in enumerate((2, 5, 11)):
        point = PointInfo(index=idx, params={"nodes": nodes}, iterations=4)
        windows = []
        for it in range(4):
            names = [f"node-{i}" for i in range(nodes)]
            win = WindowInfo(
                run_id=run.run_id,
                window_id=f"w{idx}-{it}",
                point=idx,
                iteration=it,
                nodes=names,
                opened_ns=t,
                closed_ns=t + 2_000_000_000,
                traceparent=f"00-{run.trace_id}-{idx:08x}{it:08x}-01",
            )
            per_node, readings = [], []
            for n in names:
                gen = rng.randint(3800, 4200)
                ker = gen + 7 if (idx, it, n) == (1, 2, "node-3") else gen
                rep: int | None = None
                missing: list[str] = []
                if tracer:
                    rep = round(ker * (1 - LOSS_BY_NODES[nodes] * rng.uniform(0.8, 1.2)))
                    if (idx, it, n) == (2, 1, "node-4"):
                        rep, missing = None, ["tracer"]
                per_node.append(
                    NodeCount(
                        node=n,
                        generated=gen,
                        kernel=ker,
                        reported=rep,
                        reported_lost=None if rep is None else ker - rep,
                        missing=missing,
                        rate=gen / 1.0,
                    )
                )
                readings.append(
                    ProbeReading(
                        probe_id=f"probe-{n}",
                        node=n,
                        counters={"exec": ker, "exec_failed": 0},
                        gauges={"prog_ns_per_event": 151.5},
                        start_ns=t,
                        end_ns=t + 2_000_000_000,
                    )
                )
            flags = ["harness-mismatch"] if any(p.harness_ok is False for p in per_node) else []
            if idx == 2 and it == 3:
                flags.append("generator-saturated")
            result = IterationResult(
                run_id=run.run_id,
                point=idx,
                params=dict(point.params),
                iteration=it,
                window_id=win.window_id,
                started_ns=t,
                ended_ns=t + 2_000_000_000,
                per_node=per_node,
                tracer_lost=sum(p.reported_lost or 0 for p in per_node) if tracer else None,
                flags=flags,
                extra={"burst_s": 1.0},
            )
            windows.append((win, readings, [], result))
            t += 3_000_000_000
        yield point, windows


def fire_run(events: RunEvents, run: RunInfo, tracer: bool = True, status: str | None = "ok"):
    """Fire the whole sweep through events; returns the IterationResults fired, in order."""
    fired = []
    events.run_started.fire(run=run)
    for point, windows in sweep(run, tracer):
        events.point_started.fire(run=run, point=point)
        results = []
        for win, readings, missing, result in windows:
            events.window_opened.fire(run=run, window=win)
            events.window_closed.fire(run=run, window=win, readings=readings, missing=missing)
            events.iteration_done.fire(run=run, result=result)
            results.append(result)
        events.point_done.fire(run=run, point=point, results=results)
        fired += results
    if status:
        events.run_finished.fire(run=run, status=status)
    return fired


def expected_iteration_json(r: IterationResult) -> dict:
    """report.json's iteration dict, written out here field by field (not through to_json), so a
    field that to_json drops or miscomputes shows up in the tests that compare with it."""
    both = [n for n in r.per_node if n.reported is not None and n.kernel is not None]
    rep_both, ker_both = sum(n.reported or 0 for n in both), sum(n.kernel or 0 for n in both)
    reported = [n.reported for n in r.per_node if n.reported is not None]
    g_both = [n for n in r.per_node if n.reported is not None and n.generated is not None]
    gen_g, rep_g = sum(n.generated or 0 for n in g_both), sum(n.reported or 0 for n in g_both)
    return {
        "iteration": r.iteration,
        "window_id": r.window_id,
        "started_ns": r.started_ns,
        "ended_ns": r.ended_ns,
        "generated": sum(n.generated or 0 for n in r.per_node),
        "kernel": sum(n.kernel or 0 for n in r.per_node),
        "reported": sum(reported) if reported else None,
        "loss_ratio": 1.0 - rep_both / ker_both if both and ker_both else None,
        # (generated - reported) / reported over the nodes with both (docs/report-json.md)
        "loss_vs_reported": (gen_g - rep_g) / rep_g if g_both and rep_g else None,
        "tracer_lost": r.tracer_lost,
        "flags": r.flags,
        "per_node": [
            {
                "node": n.node,
                "generated": n.generated,
                "kernel": n.kernel,
                "reported": n.reported,
                "reported_lost": n.reported_lost,
                "missing": n.missing,
                "rate": n.rate,
                "pod": n.pod,
                "loss_ratio": None if n.reported is None or not n.kernel else 1.0 - n.reported / n.kernel,
                "loss_vs_reported": None
                if n.reported is None or n.generated is None or not n.reported
                else (n.generated - n.reported) / n.reported,
                "harness_ok": n.generated == n.kernel,
            }
            for n in r.per_node
        ],
        "extra": r.extra,
    }
