"""Run listing and comparison over the results store (``swarmscope ls`` / ``swarmscope compare``).

    rows = list_runs(store)                          # one dict per run, oldest first
    cmp = compare(report_a, report_b)                # figures side by side, change, spread flag
    print(render_compare(cmp)); compare_plot(cmp)    # the table; a PNG (controller.plots.Plot)

Both work from report.json dicts (docs/report-json.md), so what they show is what the reports
say. Points are matched by their swept parameters (``nodes=2``), kind-specific rows by theirs
(an ingress step by its users or rate, a neighbor point by N and mode). For each figure:
each run's mean over the point's iterations, min..max, the change B − A (and in % of A), and a
flag: ``beyond`` when the two runs' iteration ranges do not overlap (every iteration of B lies
above, or below, every iteration of A: the change is larger than either run's own spread),
``within`` when they overlap, ``no-spread`` when a side has fewer than 2 iterations (one window
gives no spread to judge by), ``only A`` / ``only B`` when one run lacks the figure (e.g. no
tracer under test: no reported number).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NUMBERS = ("generated", "kernel", "reported", "loss_ratio")
FLAG_TEXT = {"beyond": "BEYOND SPREAD", "within": "", "no-spread": "(no spread)"}
SKIP_CONFIG = {"out", "grpc_bind", "master_bind", "metrics_port", "token_file"}  # where, not what


def _stats(values: Iterable[Any]) -> dict[str, Any]:
    vals = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not vals:
        return {"n": 0, "mean": None, "min": None, "max": None}
    return {"n": len(vals), "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}


def _label(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "-"


def figures(report: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(where, figure) -> stats, for every figure of a report that compare shows."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for p in report.get("points", []):
        where = _label(p.get("params", {}))
        for name in NUMBERS:
            st = _stats(it.get(name) for it in p.get("iterations", []))
            if st["n"]:
                out[(where, name)] = st
    for s in report.get("steps") or []:  # ingress flood: one window per step, no spread
        where = f"users={s['users']}" if "users" in s else f"rate={s.get('rate')}"
        lat = s.get("latency_ms") or {}
        for name, v in (
            ("latency_ms.p50", lat.get("p50")),
            ("latency_ms.p99", lat.get("p99")),
            ("rps", s.get("rps")),
        ):
            if v is not None:
                out[(f"step {where}", name)] = _stats([v])
    for q in (report.get("neighbors") or {}).get("points", []):
        if q.get("per_neighbor_us") is not None:
            out[(f"neighbors={q['neighbors']} {q.get('mode', '')}".strip(), "per_neighbor_us")] = _stats(
                [q["per_neighbor_us"]]
            )
    return out


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[Any]]:
    keys = sorted((set(a) | set(b)) - SKIP_CONFIG)
    return {k: [a.get(k), b.get(k)] for k in keys if a.get(k) != b.get(k)}


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison of two reports (JSON-ready: what ``--json`` prints)."""
    fa, fb = figures(a), figures(b)
    wheres = list(dict.fromkeys([w for w, _ in fa] + [w for w, _ in fb]))
    names = list(dict.fromkeys([n for _, n in fa] + [n for _, n in fb]))
    order = sorted(set(fa) | set(fb), key=lambda k: (wheres.index(k[0]), names.index(k[1])))
    rows = []
    for where, name in order:
        sa, sb = fa.get((where, name)), fb.get((where, name))
        change = pct = None
        flag = "only A" if sa else "only B"
        if sa and sb:
            change = sb["mean"] - sa["mean"]
            pct = None if sa["mean"] == 0 else change / abs(sa["mean"]) * 100
            if sa["n"] < 2 or sb["n"] < 2:
                flag = "no-spread"
            elif sb["min"] > sa["max"] or sb["max"] < sa["min"]:
                flag = "beyond"
            else:
                flag = "within"
        rows.append(
            {
                "where": where,
                "figure": name,
                "a": sa,
                "b": sb,
                "change": change,
                "change_pct": pct,
                "flag": flag,
            }
        )
    run = ("run_id", "scenario", "status", "started")
    return {
        "a": {k: a.get(k) for k in run},
        "b": {k: b.get(k) for k in run},
        "config_diff": config_diff(a.get("config") or {}, b.get("config") or {}),
        "rows": rows,
    }


def _n(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.1f}"
    return f"{v:,}"


def render_compare(cmp: Mapping[str, Any]) -> str:
    """The side-by-side table: A and B (mean, min..max), the change, and the spread flag."""
    a, b = cmp["a"], cmp["b"]
    lines = [
        f"A {a['run_id']}  ({a['scenario']}, {a['status']})",
        f"B {b['run_id']}  ({b['scenario']}, {b['status']})",
    ]
    for k, (va, vb) in cmp["config_diff"].items():
        lines.append(f"  config {k}: {va!r} -> {vb!r}")
    table = [
        ("where", "figure", "A mean", "A min..max", "B mean", "B min..max", "change", "change %", "flag")
    ]
    for r in cmp["rows"]:
        sa, sb = r["a"] or {}, r["b"] or {}

        def rng(s: Mapping[str, Any]) -> str:
            return "-" if not s else f"{_n(s['min'])}..{_n(s['max'])}"

        pct = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}"
        change = "-" if r["change"] is None else ("+" if r["change"] >= 0 else "") + _n(r["change"])
        flag = FLAG_TEXT.get(r["flag"], r["flag"])
        table.append(
            (
                r["where"],
                r["figure"],
                _n(sa.get("mean")),
                rng(sa),
                _n(sb.get("mean")),
                rng(sb),
                change,
                pct,
                flag,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines.append("")
    for row in table:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [row[i].rjust(widths[i]) for i in range(2, 8)] + [row[8]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def compare_plot(cmp: Mapping[str, Any], filename: str = "compare.png") -> Any:
    """A PNG: per figure, A and B means per point with min..max bars (controller.plots.Plot)."""
    from swarmscope.controller.plots import Plot, figure_png, new_figure

    names = list(dict.fromkeys(r["figure"] for r in cmp["rows"] if r["a"] or r["b"]))
    fig = new_figure(4.2 * max(1, len(names)), 4)
    for i, name in enumerate(names):
        ax = fig.add_subplot(1, max(1, len(names)), i + 1)
        rows = [r for r in cmp["rows"] if r["figure"] == name]
        for side, off, color in (("a", -0.15, "#4c72b0"), ("b", 0.15, "#dd5a2b")):
            xs, ys, lo, hi = [], [], [], []
            for j, r in enumerate(rows):
                s = r[side]
                if s and s["mean"] is not None:
                    xs.append(j + off)
                    ys.append(s["mean"])
                    lo.append(s["mean"] - s["min"])
                    hi.append(s["max"] - s["mean"])
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi],
                fmt="o",
                capsize=4,
                color=color,
                label=f"{side.upper()} {cmp[side]['run_id']}",
            )
        ax.set_xticks(
            range(len(rows)), [r["where"] + (" *" if r["flag"] == "beyond" else "") for r in rows], fontsize=8
        )
        ax.set_title(name + " (mean, min..max)", fontsize=10)
        ax.set_xlim(-0.6, len(rows) - 0.4)
    fig.axes[0].legend(fontsize=7, loc="best") if fig.axes else None
    fig.suptitle("swarmscope compare (* beyond both runs' spread)", fontsize=10)
    fig.tight_layout()
    return Plot(filename, "compare", figure_png(fig))


def list_runs(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: id, scenario, status, start, duration, points, windows, flags, checks,
    and the option the exec storm is about (its tracer)."""
    rows = []
    for r in reports:
        checks = r.get("checks") or []
        cfg = r.get("config") or {}
        rows.append(
            {
                "run_id": r["run_id"],
                "scenario": r["scenario"],
                "status": r["status"],
                "started": r["started"],
                "duration_s": r["duration_s"],
                "points": len(r["points"]),
                "windows": sum(len(p["iterations"]) for p in r["points"]),
                "tracer": cfg.get("tracer"),
                "flags": [f["flag"] for f in r.get("flags", [])],
                "checks_passed": sum(1 for c in checks if c.get("ok")),
                "checks_failed": sum(1 for c in checks if not c.get("ok")),
            }
        )
    return rows


def render_list(rows: Sequence[Mapping[str, Any]]) -> str:
    table = [
        ("run", "scenario", "status", "started", "duration", "points", "windows", "tracer", "checks", "flags")
    ]
    for r in rows:
        checks = (
            "-"
            if not (r["checks_passed"] or r["checks_failed"])
            else f"{r['checks_passed']} ok/{r['checks_failed']} failed"
        )
        dur = "-" if r["duration_s"] is None else f"{r['duration_s']:.1f}s"
        counts = (str(r["points"]), str(r["windows"]), str(r["tracer"] or "-"))
        table.append(
            (
                r["run_id"],
                r["scenario"],
                r["status"],
                r["started"] or "-",
                dur,
                *counts,
                checks,
                ",".join(r["flags"]),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in table)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)
