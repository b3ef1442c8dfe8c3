"""report.html section of the neighbor-writes scenario: the published table and the plot.

Registered by name in the stored run (``"swarmscope.targets.neighbors.report_section:render"``)
so ``swarmscope report`` draws it in a fresh process too.
"""

from __future__ import annotations

import html
from typing import Any

from swarmscope.controller.report import SectionHTML

COLUMNS = (
    "mode",
    "neighbors",
    "total_ms",
    "per_neighbor_us",
    "arion_per_neighbor_us",
    "p50_us",
    "p99_us",
    "verified",
)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return html.escape(str(v))


def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    points = data.get("points", []) if isinstance(data, dict) else []
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_cell(p.get(c, ''))}</td>" for c in COLUMNS) + "</tr>"
        for p in sorted(points, key=lambda p: (p.get("mode", ""), p.get("neighbors", 0)))
    )
    img = '<p><img src="neighbors.png" alt="µs per neighbor vs N (log-log), Arion beside"></p>'
    return SectionHTML(
        html=f"<h2>Neighbor programming (target {html.escape(str(data.get('target', '')))})</h2>"
        f"<table><tr>{head}</tr>{rows}</table>{img}"
    )
