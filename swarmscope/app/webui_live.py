"""The SWARMSCOPE tab's readings so far: an open window's live rows and its chart.

    follow(proc.events)              # keep each window_reading (controller/rolling.py)
    so_far_rows("0.1 open", points)  # the tab's rows for the open window: totals, rates, note
    chart_svg(points)                # the /swarmscope/ page's chart (inline SVG, no script)

Locust's tab can only show table rows (``extended_tables``), so its chart is a row of its own: a
sparkline of the kernel count per second over the last readings. The /swarmscope/ page draws the
three series as an SVG chart. Caveat (said under the rows, and in docs/webui.md): the columns are
not read at the same instant; only the closed window is reconciled.
"""

from __future__ import annotations

import html
from itertools import pairwise
from typing import Any

from swarmscope.controller.tables import loss_pct, num

# Readings kept for the open window: at the default 2 s, an hour of them.
MAX_POINTS = 1800
SPARK = "▁▂▃▄▅▆▇█"
SPARK_POINTS = 24
SO_FAR_NOTE = (
    "so far, not one instant: kernel = the probes' counts when read; generated = the load the "
    "workers had reported to Locust's stats (finished bursts; a worker reports every 3 s); "
    "reported = the tracer's lines read by then. Only the closed window is reconciled."
)
_KEYS = ("window", "node", "generated", "kernel", "reported", "loss", "harness")


class LiveSeries:
    """The readings of the latest window that had any (older windows' are dropped)."""

    def __init__(self) -> None:
        self.window_id = ""
        self._points: list[dict[str, Any]] = []

    def add(self, *, window: Any, reading: Any, **_: Any) -> None:
        """A ``window_reading`` listener."""
        if window.window_id != self.window_id:
            self.window_id, self._points = window.window_id, []
        self._points.append(
            {
                "t": round(reading.elapsed_s, 3),
                "generated": reading.generated,
                "kernel": reading.kernel,
                "reported": reading.reported,
                "loss": reading.loss,
                "nodes": len(window.nodes),
                "missing": list(reading.missing),
            }
        )
        del self._points[:-MAX_POINTS]

    def points(self, window_id: str) -> list[dict[str, Any]]:
        return list(self._points) if window_id == self.window_id else []


SERIES = LiveSeries()


def follow(events: Any) -> None:
    """Keep this process's readings so far (once per process: one run per Locust process)."""
    if SERIES.add not in events.window_reading._listeners:
        events.window_reading.add_listener(SERIES.add)


def _rate(points: list[dict[str, Any]], key: str) -> float | None:
    """Per second between the last two readings that have ``key``."""
    have = [p for p in points if p[key] is not None]
    if len(have) < 2 or have[-1]["t"] <= have[-2]["t"]:
        return None
    return (have[-1][key] - have[-2][key]) / (have[-1]["t"] - have[-2]["t"])


def sparkline(points: list[dict[str, Any]], key: str = "kernel") -> str:
    """The per-second rate of ``key`` between successive readings, as block characters."""
    have = [p for p in points if p[key] is not None][-(SPARK_POINTS + 1) :]
    rates = [max(0.0, (b[key] - a[key]) / (b["t"] - a["t"])) for a, b in pairwise(have) if b["t"] > a["t"]]
    top = max(rates, default=0.0)
    steps = len(SPARK) - 1
    return "".join(SPARK[min(steps, int(r / top * steps + 0.5)) if top else 0] for r in rates)


def so_far_rows(first: str, points: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, str]]:
    """The open window's rows from its readings so far: the totals, the rates with the kernel's
    sparkline, and the note; [] before the first reading or for a kind with other columns."""
    if not points or keys != _KEYS:
        return []
    last = points[-1]

    def per_s(key: str) -> str:
        r = _rate(points, key)
        return "-" if r is None else f"{num(r, 0)}/s"

    missing = f", {len(last['missing'])} probe(s) silent" if last["missing"] else ""
    return [
        {
            "window": f"{first}, {last['t']:.1f} s",
            "node": f"all {last['nodes']}{missing}",
            "generated": num(last["generated"]),
            "kernel": num(last["kernel"]),
            "reported": num(last["reported"]),
            "loss": loss_pct(last["loss"]),
            "harness": "at close",
        },
        {
            "window": "rate so far",
            "node": sparkline(points) or "…",
            "generated": per_s("generated"),
            "kernel": per_s("kernel"),
            "reported": per_s("reported"),
            "loss": "",
            "harness": "",
        },
        {"window": "note", "node": SO_FAR_NOTE, **dict.fromkeys(_KEYS[2:], "")},
    ]


def chart_svg(points: list[dict[str, Any]], width: int = 640, height: int = 200) -> str:
    """The three series so far against time, as an inline SVG with its legend and note."""
    if not points:
        return ""
    series = [("generated", "#1f77b4"), ("kernel", "#2ca02c"), ("reported", "#d62728")]
    top = max([p[k] for p in points for k, _ in series if p[k] is not None] or [1]) or 1
    t_end = points[-1]["t"] or 1.0
    pad = 48

    def xy(p: dict[str, Any], key: str) -> str:
        x = pad + (width - pad - 8) * p["t"] / t_end
        y = height - 24 - (height - 40) * p[key] / top
        return f"{x:.1f},{y:.1f}"

    lines = "".join(
        f"<polyline fill='none' stroke='{c}' stroke-width='2' "
        f"points='{' '.join(xy(p, k) for p in points if p[k] is not None)}'><title>{k}</title></polyline>"
        for k, c in series
        if sum(p[k] is not None for p in points) > 1
    )
    legend = " · ".join(f"<span style='color:{c}'>■ {k}</span>" for k, c in series)
    return (
        f"<h2>open window so far</h2><svg id='so-far' width='{width}' height='{height}' "
        f"role='img' aria-label='counts so far'><line x1='{pad}' y1='{height - 24}' x2='{width - 8}' "
        f"y2='{height - 24}' stroke='#999'/><text x='{pad - 4}' y='20' text-anchor='end' "
        f"font-size='11'>{html.escape(num(top))}</text><text x='{width - 8}' y='{height - 6}' "
        f"text-anchor='end' font-size='11'>{t_end:.1f} s</text>{lines}</svg>"
        f"<p>{legend}</p><p><small>{html.escape(SO_FAR_NOTE)}</small></p>"
    )
