"""Reconciliation: three numbers per node per window, and the flags that keep a run honest.

    result = reconcile(WindowOutcome(window, point, {"n1": {...}}, readings), metric="exec")

generated ≠ kernel means the harness is wrong, and the result says so loudly
(``harness-mismatch``); a node whose worker, probe or tracer said nothing is kept with the
missing source named — never dropped, never zero-filled.
"""

from __future__ import annotations

from typing import Any

from swarmscope.controller.model import IterationResult, NodeCount, ProbeReading, WindowOutcome


def reconcile(outcome: WindowOutcome, metric: str, expected_per_node: float | None = None) -> IterationResult:
    """Reconcile one window. ``expected_per_node`` is what a paced generator was asked for:
    a node that generated under 95 % of it is flagged ``generator-saturated`` (the machine,
    not the system under test, was the limit)."""
    window, readings, tracer = outcome.window, outcome.readings, outcome.tracer
    generated, missing_probes = outcome.results, outcome.missing_probes
    point, params = outcome.point.index, outcome.point.params
    by_node: dict[str, list[ProbeReading]] = {}
    for r in readings:
        by_node.setdefault(r.node, []).append(r)
    per_node: list[NodeCount] = []
    flags: list[str] = []
    for node in window.nodes:
        missing: list[str] = []
        gen = generated.get(node)
        g = int(gen["generated"]) if gen is not None else None
        if gen is None:
            missing.append("worker")
        rs = [r for r in by_node.get(node, []) if metric in r.counters]
        k = sum(int(r.counters[metric]) for r in rs) if rs else None
        if not rs:
            missing.append("probe")
        errs = [r.error for r in by_node.get(node, []) if r.error]
        rep: int | None = None
        rep_lost: int | None = None
        if tracer is not None:
            if tracer.error:
                missing.append("tracer")
            else:
                rep = int(tracer.per_node.get(node, 0))
                if tracer.lost_by_node is not None:  # the tracer's loss records name their node
                    rep_lost = int(tracer.lost_by_node.get(node, 0))
        nc = NodeCount(
            node=node,
            generated=g,
            kernel=k,
            reported=rep,
            reported_lost=rep_lost,
            missing=missing,
            rate=float(gen["rate"]) if gen is not None and gen.get("rate") is not None else None,
        )
        per_node.append(nc)
        if nc.harness_ok is False:
            flags.append(f"harness-mismatch:{node}")
        if missing:
            flags.append(f"missing:{node}:{','.join(missing)}")
        for e in errs:
            flags.append(f"probe-error:{node}:{e}")
        if gen is not None and gen.get("errors"):
            flags.append(f"worker-error:{node}:{gen['errors'][0]}")
        if expected_per_node and g is not None and g < 0.95 * expected_per_node:
            flags.append(f"generator-saturated:{node}")
    extra: dict[str, Any] = {}
    if missing_probes:
        extra["missing_probes"] = list(missing_probes)
    if tracer is not None:
        # The whole TracerResult but its per-node counts (those are per_node[].reported).
        extra["tracer"] = {
            "lost": tracer.lost,
            "sentinels_lost": tracer.sentinels_lost,
            "lost_by_node": tracer.lost_by_node,
            "drained": tracer.drained,
            "other": tracer.other,
            "lines": tracer.lines,
            "unattributed": tracer.unattributed,
            "warnings": list(tracer.warnings)[:20],
            "error": tracer.error,
        }
    return IterationResult(
        run_id=window.run_id,
        point=point,
        params=dict(params),
        iteration=window.iteration,
        window_id=window.window_id,
        started_ns=window.opened_ns,
        ended_ns=window.closed_ns,
        per_node=per_node,
        tracer_lost=(tracer.lost if tracer is not None else None),
        flags=flags,
        extra=extra,
    )


def name_pods(result: IterationResult, readings: list[ProbeReading]) -> None:
    """Each node's pod as its probe named it (``NodeCount.pod``), whatever the kind's reconcile:
    the counts of a Kubernetes node then say which container they are (probes/pods.py)."""
    pods = {r.node: r.pod for r in readings if r.pod}
    for n in result.per_node:
        if n.node in pods:
            n.pod = pods[n.node]
