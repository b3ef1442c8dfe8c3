"""The exec storm's report section: how the load was made (``exec_storm`` in report.json).

    {"load": "paced", "rate_per_node": 150.0, "burst_s": 1.0, "concurrency": 2}

The published scaling test ran stress-ng at its maximum rate for 1 s on the node's 2 CPUs; a
paced sweep (``rate_per_node``) makes the load grow with the node count on one machine instead.
The section says which one a run did, so a reader does not compare a paced figure with the
write-up's unpaced one without knowing.
"""

from __future__ import annotations

import html
from typing import Any

from swarmscope.controller.sections import SectionHTML, register_section


def _e(v: Any) -> str:
    return html.escape(str(v))


@register_section("exec_storm")
def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    burst, conc = data.get("burst_s"), data.get("concurrency")
    if data.get("load") == "paced":
        what = (
            f"<b>Paced</b>: each node execs at {data['rate_per_node']:g} exec/s for {burst:g} s "
            f"({_e(conc)} exec loops), not at its maximum rate. The published test ran stress-ng at "
            "maximum rate for 1 s on 2 CPUs per node; compare with it knowing this."
        )
    else:
        what = (
            f"<b>Maximum rate</b>: each node execs as fast as it can for {burst:g} s "
            f"({_e(conc)} exec loops), as the published test did."
        )
    sng = data.get("stress_ng")
    if data.get("generator") == "stress-ng" and sng:
        # Built from numbers and fixed words, but a stored section may say anything: escaped.
        what += (
            f" Each burst is Debian's <code>{_e(sng['command'])}</code>, run as nobody inside "
            f"the node. Generated = stress-ng's bogo ops ({_e(sng['bogo_ops'])} in all) + its own exec "
            f"into the node ({_e(sng['startup_execs'])} per burst), which the kernel counts too."
        )
    else:
        what += " Each burst is swarmscope's native vfork helper."
    model = data.get("tracer_model")
    if model:
        what += f" <b>The tracer is a model.</b> {_e(model['what'])}"
    ref = "".join(
        f"<tr><td>{_e(r['nodes'])}</td><td>{r['generated_p99']:,.2f}</td><td>{r['reported_p99']:,.2f}</td>"
        f"<td>{r['difference']:,.2f}</td><td>{r['loss_vs_reported_pct']:g}</td></tr>"
        for r in data.get("write_up_p99") or []
    )
    table = (
        "<h3>The write-up's own figures (published)</h3><table><tr><th>nodes</th><th>generated p99</th>"
        f"<th>reported p99</th><th>difference</th><th>loss vs reported %</th></tr>{ref}</table>"
        if ref
        else ""
    )
    return SectionHTML(f'<p class="load">{what}</p>{table}')
