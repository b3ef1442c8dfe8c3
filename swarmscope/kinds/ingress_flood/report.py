"""report.html sections of the ingress flood: ``steps``, ``faults`` and the ``ingress`` summary.

    from swarmscope.kinds.ingress_flood import report   # registers the three renderers

The plots were written into the run directory by the kind's sections (kinds.ingress_flood.plots).
"""

from __future__ import annotations

import html
from typing import Any

from swarmscope.controller.sections import SectionHTML, register_section
from swarmscope.probes.programs.procstat import COLUMNS

PCTS = ("p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99.9", "max")


def _f(v: Any, digits: int = 1) -> str:
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return html.escape("" if v is None else str(v))


@register_section("steps")
def render_steps(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    steps = data if isinstance(data, list) else []
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "step",
            "users/rate",
            "backends",
            "mean",
            "requests",
            "failures",
            "req/s",
            *PCTS,
            "proxy CPU %",
            "proxy RSS KiB",
            "gen bound",
        )
    )
    rows = []
    missing = "<i>missing</i>"  # no procstat tick in the step: not measured, not zero
    for s in steps:
        lat = s.get("latency_ms", {})
        proxy = s.get("proxy")
        load = s.get("users", s.get("rate"))
        bound = "<b style='color:#b00'>yes</b>" if s.get("generator_bound") else "no"
        cells = [
            _f(s.get("step")), _f(load), _f(s.get("backends")), _f(lat.get("mean"), 2),
            _f(s.get("requests")), _f(s.get("failures")), _f(s.get("rps")),
            *(_f(lat.get(p), 2) for p in PCTS), _f(proxy["cpu_pct"]) if proxy else missing,
            _f(proxy["rss_kib_max"], 0) if proxy else missing, bound,
        ]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    imgs = "".join(
        f'<p><img src="{f}" alt="{f}"></p>'
        for f in ("latency_percentiles.png", "latency_histograms.png", "rps.png", "proxy_cpu_rss.png",
                  "mean_latency_backends.png")
        if f in set((report.get("ingress") or {}).get("plots", {}).values())
    )  # fmt: skip
    title = "<h2>Steps (latency in ms, exact from merged HDR histograms)</h2>"
    return SectionHTML(html=f"{title}<table><tr>{head}</tr>{''.join(rows)}</table>{imgs}{_pidstat(steps)}")


def _pidstat(steps: list[dict[str, Any]]) -> str:
    """The proxy's processes in pidstat's columns (the probe's procstat): a row per process per
    step, then pidstat's own rows, one per process per second."""
    cols = tuple(COLUMNS)

    def table(key: str, first: tuple[str, ...], lead: Any) -> str:
        rows = [
            "<tr>" + "".join(f"<td>{c}</td>" for c in (
                *lead(s, p), _f(p.get("pid")), _f(p.get("role")),
                *(_f(p.get(c), 0 if c in ("VSZ", "RSS") else 2) for c in cols),
            )) + "</tr>"
            for s in steps for p in s.get(key) or []
        ]  # fmt: skip
        head = "".join(f"<th>{h}</th>" for h in (*first, "PID", "role", *cols))
        return f"<table><tr>{head}</tr>{''.join(rows)}</table>" if rows else ""

    per_step = table("proxy_processes", ("step", "users/rate"),
                     lambda s, p: (_f(s.get("step")), _f(s.get("users", s.get("rate")))))  # fmt: skip
    per_second = table(
        "proxy_per_second", ("step", "time"), lambda s, p: (_f(s.get("step")), _f(p.get("time")))
    )
    if not per_step:
        return ""
    return (
        "<h3>Proxy processes (pidstat columns: mean over the step's seconds; VSZ, RSS in KiB and "
        f"%MEM at their largest)</h3>{per_step}"
        "<h3>Proxy processes per second (pidstat's rows, as the ingress write-up's table)</h3>"
        f"{per_second}"
    )


@register_section("faults")
def render_faults(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    faults = data if isinstance(data, list) else []
    if not faults:
        return SectionHTML(html="")
    keys = ("name", "restart_delay_s", "downtime_s", "failed_requests", "recovery_s", "restarts")
    rows = "".join("<tr>" + "".join(f"<td>{_f(f.get(k), 3)}</td>" for k in keys) + "</tr>" for f in faults)
    imgs = "".join(f'<p><img src="fault_{i}.png" alt="fault {i}"></p>' for i in range(len(faults)))
    return SectionHTML(
        html=f"<h2>Faults</h2><table><tr>{''.join(f'<th>{k}</th>' for k in keys)}</tr>{rows}</table>{imgs}"
    )


@register_section("ingress")
def render_summary(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    d = data if isinstance(data, dict) else {}
    client = d.get("requests")
    ok = d.get("successes")
    server = d.get("server_requests")
    cut = int(d.get("server_log_cut_by_kill") or 0)
    if server is None:
        same = ""
    elif server == ok:
        same = " (equal)"
    elif cut and server + cut == ok:  # nginx logs after replying: the SIGKILL cut these lines
        same = f" (equal but {cut} answered just before the LB's SIGKILL, never logged)"
    else:
        same = " <b style='color:#b00'>(differ!)</b>"
    return SectionHTML(
        html=f"<h2>Ingress flood</h2><p>target {_f(d.get('url'))}, engine {_f(d.get('engine'))}, "
        f"model {_f(d.get('model'))}; requests sent {_f(client)}, succeeded {_f(ok)}; lines in the "
        f"server's access log {_f(server)}{same}</p>{_baseline(d.get('network_baseline'))}"
    )


def _baseline(b: Any) -> str:
    """The network baseline (iperf3, as the write-up's netperf) next to the HTTP throughput."""
    if not isinstance(b, dict):
        return ""
    if b.get("error"):
        return f"<p>Network baseline (iperf3): not measured: {_f(b['error'])}</p>"
    rows = []
    for key, label in (("to_target", "host → target namespace (requests' way)"),
                       ("from_target", "target namespace → host (responses' way)")):  # fmt: skip
        d = b.get(key) or {}
        rows.append(
            f"<tr><td>iperf3 TCP, 1 stream, {_f(b.get('seconds'))} s: {label}</td>"
            f"<td>{_f(d.get('gbit_s'), 2)} Gbit/s</td><td>{_f(d.get('bytes'))} bytes, "
            f"{_f(d.get('retransmits'))} retransmits, mean RTT {_f(d.get('mean_rtt_us', '–'))} µs</td></tr>"
        )
    peak = b.get("http_peak") or {}
    if peak:
        users = peak.get("users")
        load = f"{_f(users)} users" if users is not None else f"{_f(peak.get('rate'))}/s"
        rows.append(
            f"<tr><td>HTTP, the step with the most req/s (step {_f(peak.get('step'))}, {load})</td>"
            f"<td>{_f(peak.get('rps'))} req/s</td><td>mean latency {_f(peak.get('mean_ms'), 2)} ms</td></tr>"
        )
    return (
        "<h3>Network baseline beside the HTTP figures (iperf3 over the load's own veth)</h3>"
        f"<table><tr><th>path</th><th>throughput</th><th>detail</th></tr>{''.join(rows)}</table>"
    )
