"""report.html for ``ebpf_cost``: one table per phase in the top-ebpf write-up's columns.

    {"caveat": "...", "phases": [{"phase": "busy", "seconds": 10.0, "programs": [...], "loop": {...}}]}

The caveat (what BPF statistics do not attribute) heads every table, as in the terminal.
"""

from __future__ import annotations

import html
from typing import Any

from swarmscope.controller.sections import SectionHTML, register_section
from swarmscope.kinds.ebpf_cost.table import COLUMNS, cells, loop_line


@register_section("ebpf_cost")
def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    parts = ["<h2>eBPF tools' cost: busy loop against idle (top-ebpf write-up)</h2>"]
    for phase in data.get("phases", []):
        head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(r)) + "</tr>"
            for r in phase["programs"]
        )
        parts.append(
            f'<h3>{html.escape(str(phase["phase"]))}</h3><p class="loop">{html.escape(loop_line(phase))}</p>'
            f'<table class="ebpf-cost"><caption>{html.escape(data.get("caveat", ""))}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    return SectionHTML("".join(parts))
