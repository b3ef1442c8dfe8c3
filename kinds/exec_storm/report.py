"""The exec storm's report section: how the load was made (``exec_storm`` in report.json).

    {"load": "paced", "rate_per_node": 150.0, "burst_s": 1.0, "concurrency": 2}

The published scaling test ran stress-ng at its maximum rate for 1 s on the node's 2 CPUs; a
paced sweep (``rate_per_node``) makes the load grow with the node count on one machine instead.
The section says which one a run did, so a reader does not compare a paced figure with the
write-up's unpaced one without knowing.
"""

from __future__ import annotations

from typing import Any

from swarmscope.controller.report import SectionHTML, register_section


@register_section("exec_storm")
def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    burst, conc = data.get("burst_s"), data.get("concurrency")
    if data.get("load") == "paced":
        what = (
            f"<b>Paced</b>: each node execs at {data['rate_per_node']:g} exec/s for {burst:g} s "
            f"({conc} exec loops), not at its maximum rate. The published test ran stress-ng at "
            "maximum rate for 1 s on 2 CPUs per node; compare with it knowing this."
        )
    else:
        what = (
            f"<b>Maximum rate</b>: each node execs as fast as it can for {burst:g} s "
            f"({conc} exec loops), as the published test did."
        )
    return SectionHTML(f'<p class="load">{what}</p>')  # numbers only: nothing to escape
