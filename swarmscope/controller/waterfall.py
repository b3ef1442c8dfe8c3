"""The run's trace as a waterfall in report.html: spans as nested bars on one time axis, the
kernel's events (the probe span's events: readings, sys_exit_bpf of each map update) as marks.

    part = waterfall_section(run_dir)     # ("trace", SectionHTML) or None without trace.json
    html = render(doc)                    # the inline SVG of an OTLP JSON document

Self-contained: inline SVG and CSS, no script, nothing loaded from the network; every bar and
mark has a <title> (hover shows name, service, duration, attributes). Rows follow the span tree
depth first (children in start order), indented by depth, coloured by service.

Caveats: at most MAX_ROWS spans and MAX_MARKS marks are drawn (a long sweep has thousands); the
section says how many were left out. Times are each process's wall clock: processes on other
hosts are only as aligned as those clocks.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from swarmscope.controller.sections import SectionHTML
from swarmscope.core.sys.otlpjson import attributes, spans_of

MAX_ROWS = 400
MAX_MARKS = 4000
LABEL_W, CHART_W, ROW_H, AXIS_H = 330, 860, 17, 26
COLOURS = {"swarmscope": "#4c78a8", "swarmscope-worker": "#f58518", "swarmscope-probe": "#54a24b"}
OTHER = ["#b279a2", "#e45756", "#72b7b2", "#9d755d"]


def waterfall_section(run_dir: str) -> tuple[str, SectionHTML] | None:
    """The "trace" section of a run directory's report, None when it has no trace.json."""
    path = os.path.join(run_dir, "trace.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        return None  # a run from before the OTLP format
    return "trace", SectionHTML(render(doc))


def _rows(doc: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    spans = spans_of(doc)
    ids = {s["spanId"] for s in spans}
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for s in spans:
        parent = s.get("parentSpanId")
        kids.setdefault(parent if parent in ids else None, []).append(s)
    out: list[tuple[int, dict[str, Any]]] = []
    stack = [(0, s) for s in sorted(kids.get(None, []), key=_start, reverse=True)]
    while stack:
        depth, s = stack.pop()
        out.append((depth, s))
        stack.extend((depth + 1, c) for c in sorted(kids.get(s["spanId"], []), key=_start, reverse=True))
    return out


def _start(s: dict[str, Any]) -> int:
    return int(s.get("startTimeUnixNano", 0))


def _end(s: dict[str, Any]) -> int:
    return max(int(s.get("endTimeUnixNano", 0)), _start(s))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _ticks(span_ns: int) -> list[tuple[int, str]]:
    """Round time-axis ticks over ``span_ns`` (a 1-2-5 step, at most 8 of them), labelled in the
    unit the step is counted in: ``0 s  1 s  2 s`` or ``0 ms  200 ms  400 ms``."""
    step = 1_000  # ns
    while span_ns / step > 8:
        for m in (2, 2.5, 2):  # 1 -> 2 -> 5 -> 10 (x the decade)
            step = int(step * m)
            if span_ns / step <= 8:
                break
    unit, div = ("s", 1e9) if step >= 1e9 else ("ms", 1e6) if step >= 1e6 else ("µs", 1e3)
    return [(t, f"{t / div:g} {unit}") for t in range(0, span_ns + 1, step)]


def _colour(service: str, seen: dict[str, str]) -> str:
    if service not in seen:
        seen[service] = COLOURS.get(service) or OTHER[len(seen) % len(OTHER)]
    return seen[service]


def render(doc: dict[str, Any]) -> str:
    rows = _rows(doc)
    if not rows:
        return "<p>The trace has no spans.</p>"
    left_out = max(0, len(rows) - MAX_ROWS)
    rows = rows[:MAX_ROWS]
    t0 = min(_start(s) for _, s in rows)
    t1 = max(
        [_end(s) for _, s in rows] + [int(e["timeUnixNano"]) for _, s in rows for e in s.get("events", [])]
    )
    scale = CHART_W / max(t1 - t0, 1)
    height = AXIS_H + ROW_H * len(rows) + 4
    e = html.escape
    out = [
        f'<svg class="waterfall" xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + CHART_W + 10}" '
        f'height="{height}" font-family="sans-serif" font-size="11">'
    ]
    for t, label in _ticks(t1 - t0):  # the time axis, from the trace's first start
        x = LABEL_W + t * scale
        anchor = "end" if x > LABEL_W + CHART_W - 20 else "start" if t == 0 else "middle"
        out.append(
            f'<line x1="{x:.1f}" y1="{AXIS_H - 6}" x2="{x:.1f}" y2="{height}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{AXIS_H - 10}" text-anchor="{anchor}" fill="#555">{e(label)}</text>'
        )
    seen: dict[str, str] = {}
    marks = 0
    for row, (depth, s) in enumerate(rows):
        y = AXIS_H + row * ROW_H
        service = s["service"]
        colour = _colour(service, seen)
        attrs = attributes(s.get("attributes", []))
        tip = f"{s['name']} ({service})\n{_ms(_end(s) - _start(s))}" + "".join(
            f"\n{k} = {v}" for k, v in list(attrs.items())[:30]
        )
        out.append(
            f'<text x="{4 + depth * 12}" y="{y + ROW_H - 5}" fill="#222">{e(s["name"][:44])}</text>'
            f'<rect class="wf-bar" data-service="{e(service)}" data-span="{e(s["spanId"])}" '
            f'x="{LABEL_W + (_start(s) - t0) * scale:.2f}" y="{y + 2}" '
            f'width="{max((_end(s) - _start(s)) * scale, 1.5):.2f}" height="{ROW_H - 4}" fill="{colour}">'
            f"<title>{e(tip)}</title></rect>"
        )
        for ev in s.get("events", []):
            if marks >= MAX_MARKS:
                break
            marks += 1
            ea = attributes(ev.get("attributes", []))
            x = LABEL_W + (int(ev["timeUnixNano"]) - t0) * scale
            tip = f"{ev['name']} at {_ms(int(ev['timeUnixNano']) - t0)}" + "".join(
                f"\n{k} = {v}" for k, v in ea.items()
            )
            out.append(
                f'<path class="wf-mark" d="M{x:.2f},{y + 1} l-4,-0 l4,{ROW_H - 2} l4,-{ROW_H - 2} z" '
                f'fill="#d62728" fill-opacity="0.85"><title>{e(tip)}</title></path>'
            )
    out.append("</svg>")
    legend = " ".join(
        f'<span style="display:inline-block;width:10px;height:10px;background:{c}"></span> {e(svc)}'
        for svc, c in seen.items()
    )
    notes = []
    if left_out:
        notes.append(f"{left_out} more spans not drawn (first {MAX_ROWS} in tree order)")
    if marks >= MAX_MARKS:
        notes.append(f"kernel marks capped at {MAX_MARKS}")
    ids = sorted({s["traceId"] for _, s in rows})
    return (
        f"<p>Trace <code>{e(', '.join(ids))}</code>: {len(rows)} spans on one time axis "
        f"(0 at the first span's start), nested by parent; "
        f'<span style="color:#d62728">&#9660;</span> marks are the kernel events on the probe\'s window '
        f"spans. {legend}" + (f" ({'; '.join(notes)})" if notes else "") + "</p>"
        f'<div id="waterfall" style="overflow-x:auto">{"".join(out)}</div>'
    )
