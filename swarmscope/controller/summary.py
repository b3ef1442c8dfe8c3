"""Reconciliation summaries: statistics per sweep point and the flags a reader must not miss.

    s = summarize_point(results, planned_iterations=30)
    s["summary"]["kernel"]["p99"]       # over the point's iterations
    s["flags"]                          # [{"flag": "harness-mismatch", "where": [...]}, ...]
    stats([1, 2, None, 4])              # {"n": 3, "mean": 2.33.., "p50": 2.0, ...}

Percentiles interpolate linearly between closest ranks (rank = p/100 · (n-1), as numpy's
default), so p50 of [1, 2, 3, 4] is 2.5. ``None`` values (a source that did not answer) are
left out of every statistic, and a statistic of nothing is ``None``, never 0.

Flags (each ``{"flag", "message", "where": [...]}``):

- ``harness-mismatch`` — some node in some iteration has generated != kernel: the load
  generator or the probe is wrong, and the reported/kernel comparison cannot be trusted there.
- ``missing`` — some node lacked a source (``NodeCount.missing``: worker, probe, tracer).
- ``incomplete`` — fewer iterations stored than planned (an interrupted or failed run).
- any flag the reconciler put on an iteration (e.g. ``generator-saturated``), listed by
  iteration.

Caveat: this is generic over the metric; it never looks at what is being counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from swarmscope.controller.model import IterationResult, loss_ratio, loss_vs_reported

NUMBERS = ("generated", "kernel", "reported", "loss_ratio", "loss_vs_reported")
HARNESS_MISMATCH = "harness-mismatch"
MISSING = "missing"
INCOMPLETE = "incomplete"


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) of already sorted values, linearly interpolated."""
    if not sorted_values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, not {p}")
    rank = p / 100 * (len(sorted_values) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = rank - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def stats(values: Iterable[float | None]) -> dict[str, Any]:
    """n, mean, p50, p99, min, max of the known values (None ones left out)."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return {"n": 0, "mean": None, "p50": None, "p99": None, "min": None, "max": None}
    return {
        "n": len(known),
        "mean": math.fsum(known) / len(known),
        "p50": percentile(known, 50),
        "p99": percentile(known, 99),
        "min": known[0],
        "max": known[-1],
    }


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def per_node_totals(results: Sequence[IterationResult]) -> list[dict[str, Any]]:
    """Each node's numbers summed over the iterations, in order of first appearance.

    ``loss_ratio`` uses only iterations where the node has both reported and kernel, so a
    window the tracer missed does not count as lost events.
    """
    order: list[str] = []
    acc: dict[str, dict[str, Any]] = {}
    for r in results:
        for n in r.per_node:
            if n.node not in acc:
                order.append(n.node)
                acc[n.node] = {
                    "node": n.node,
                    "generated": None,
                    "kernel": None,
                    "reported": None,
                    "tracer_reported_lost": None,
                    "iterations": 0,
                    "mismatched_iterations": 0,
                    "missing_iterations": 0,
                    "pods": [],  # the containers its probe counted (Kubernetes), in order seen
                    "_rep_both": None,
                    "_ker_both": None,
                }
            a = acc[n.node]
            a["iterations"] += 1
            if n.pod and n.pod not in a["pods"]:
                a["pods"].append(n.pod)
            a["generated"] = _add(a["generated"], n.generated)
            a["kernel"] = _add(a["kernel"], n.kernel)
            a["reported"] = _add(a["reported"], n.reported)
            a["tracer_reported_lost"] = _add(a["tracer_reported_lost"], n.reported_lost)
            if n.harness_ok is False:
                a["mismatched_iterations"] += 1
            if n.missing:
                a["missing_iterations"] += 1
            if n.reported is not None and n.kernel is not None:
                a["_rep_both"] = _add(a["_rep_both"], n.reported)
                a["_ker_both"] = _add(a["_ker_both"], n.kernel)
    out = []
    for name in order:
        a = acc[name]
        a["loss_ratio"] = loss_ratio(a.pop("_rep_both"), a.pop("_ker_both"))
        out.append(a)
    return out


def point_totals(results: Sequence[IterationResult]) -> dict[str, Any]:
    """The point's numbers summed over nodes and iterations (loss over comparable windows)."""
    gen = ker = rep = lost = rep_both = ker_both = gen_both = None
    for r in results:
        gen, ker, rep = _add(gen, r.generated), _add(ker, r.kernel), _add(rep, r.reported)
        lost = _add(lost, r.tracer_lost)
        for n in r.per_node:
            if n.reported is not None and n.kernel is not None:
                rep_both, ker_both = _add(rep_both, n.reported), _add(ker_both, n.kernel)
                gen_both = _add(gen_both, n.generated)
    return {
        "generated": gen,
        "kernel": ker,
        "reported": rep,
        "loss_ratio": loss_ratio(rep_both, ker_both),
        "loss_vs_reported": loss_vs_reported(gen_both, rep_both),
        "tracer_lost": lost,
    }


def point_flags(results: Sequence[IterationResult], planned_iterations: int = 0) -> list[dict[str, Any]]:
    """The flags of one point, each listing where it happened (iteration, node, numbers)."""
    mismatch: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    other: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        for n in r.per_node:
            if n.harness_ok is False:
                mismatch.append(
                    {"iteration": r.iteration, "node": n.node, "generated": n.generated, "kernel": n.kernel}
                )
            if n.missing:
                missing.append({"iteration": r.iteration, "node": n.node, "sources": list(n.missing)})
        for f in r.flags:
            if f not in (HARNESS_MISMATCH, MISSING):  # recomputed above, with detail
                other.setdefault(f, []).append({"iteration": r.iteration})
    flags: list[dict[str, Any]] = []
    if mismatch:
        flags.append(
            {
                "flag": HARNESS_MISMATCH,
                "message": f"generated != kernel on {len(mismatch)} node-iteration(s): "
                "the harness miscounted, the comparison with reported is not trustworthy there",
                "where": mismatch,
            }
        )
    if missing:
        flags.append(
            {
                "flag": MISSING,
                "message": f"{len(missing)} node-iteration(s) lack a source",
                "where": missing,
            }
        )
    if planned_iterations and len(results) < planned_iterations:
        flags.append(
            {
                "flag": INCOMPLETE,
                "message": f"{len(results)} of {planned_iterations} planned iterations stored",
                "where": [],
            }
        )
    for name, where in sorted(other.items()):
        flags.append({"flag": name, "message": f"{len(where)} iteration(s) flagged {name}", "where": where})
    return flags


def p99_comparison(results: Sequence[IterationResult]) -> dict[str, Any]:
    """The exec-storm write-up's table row: the p99 over iterations of generated and of
    reported (each a sum over nodes), their difference, and that difference relative to the
    reported p99 (``loss_vs_reported``: 65,014.75 vs 47,986.23 is 35.5 % at 17 nodes)."""
    gen = stats(r.generated for r in results)["p99"]
    rep = stats(r.reported for r in results)["p99"]
    diff = None if gen is None or rep is None else gen - rep
    return {
        "generated_p99": gen,
        "reported_p99": rep,
        "difference": diff,
        "loss_vs_reported": None if diff is None or not rep else diff / rep,
    }


def summarize_point(results: Sequence[IterationResult], planned_iterations: int = 0) -> dict[str, Any]:
    """Statistics over a point's iterations, per-node totals, point totals and flags."""
    ordered = sorted(results, key=lambda r: r.iteration)
    return {
        "summary": {name: stats(getattr(r, name) for r in ordered) for name in NUMBERS},
        "p99_comparison": p99_comparison(ordered),
        "totals": point_totals(ordered),
        "per_node": per_node_totals(ordered),
        "flags": point_flags(ordered, planned_iterations),
    }


def run_flags(points: Sequence[dict[str, Any]], status: str) -> list[dict[str, Any]]:
    """Run-level flags ``{"flag", "message", "points": [index, ...]}``: the run's status when
    not ok (``run-failed``, ``run-interrupted``, ``run-running``; no points), then each point
    flag name with the points that carry it."""
    flags: list[dict[str, Any]] = []
    if status != "ok":
        why = {
            "failed": "the run failed; results are partial",
            "interrupted": "the run was interrupted; results are partial",
            "running": "no end of run recorded: still running, or the controller died",
        }.get(status, f"run status {status}")
        flags.append({"flag": f"run-{status}", "message": why, "points": []})
    merged: dict[str, dict[str, Any]] = {}
    for p in points:
        for f in p.get("flags", []):
            m = merged.setdefault(f["flag"], {"flag": f["flag"], "points": [], "message": ""})
            m["points"].append(p["index"])
    for name, m in merged.items():
        m["message"] = f"{name} at point(s) {', '.join(str(i) for i in m['points'])}"
        flags.append(m)
    return flags
