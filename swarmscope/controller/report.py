"""The run report: report.json (a documented interface, docs/report-json.md), report.html, PNGs.

    report = build_report(store, run_id)           # dict, schema "swarmscope.report/v1"
    write_report(store, run_id, "results/<run_id>")  # report.json, report.html, *.png
    print(render_console(report))                  # the per-node three-number table

    # a scenario draws its own section (stored with store.add_section(run_id, "steps", rows)):
    @register_section("steps")
    def render_steps(name, data, report) -> SectionHTML: ...

Sections are rendered by the function registered under their name in this process (the code's
own registry: each kind registers its renderers, ``swarmscope report`` registers every kind's),
else by a generic table. Nothing read from the results store ever names code to run: a
``swarmscope.sqlite`` is data, possibly from someone else (an old store's ``renderer`` column
is ignored). A renderer that fails is logged and replaced by the generic one: the report is
always written.

``attach_report_writer(events, store)`` writes the report and prints the console table on
``run_finished``; attach it after ``store.attach(events)`` so the status is stored first.

Caveat: report.json is a pure function of the stored run (no render time in it), so
re-rendering gives the same file; matplotlib is imported only when plots are drawn.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swarmscope.controller.sections import _RENDERERS, SectionHTML, SectionRenderer
from swarmscope.controller.store import ResultStore, StoredRun
from swarmscope.controller.summary import run_flags, summarize_point
from swarmscope.core.errors import ResultsError
from swarmscope.core.printable import printable
from swarmscope.core.sys.trust import atomic_write

if TYPE_CHECKING:
    from swarmscope.controller.plots import Plot

log = logging.getLogger(__name__)

SCHEMA = "swarmscope.report/v1"
FORMATS = ("json", "html", "console")


def _resolve(name: str) -> SectionRenderer:
    # Only this process's registry: a name stored in the results database is never imported.
    return _RENDERERS.get(name, render_generic)


# -- report.json -----------------------------------------------------------------------------


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_report_from(stored: StoredRun) -> dict[str, Any]:
    """report.json for a run already loaded from the store."""
    run = stored.run
    points: list[dict[str, Any]] = []
    planned = {p.index: p for p in stored.points}
    for idx in sorted(planned):
        info = planned[idx]
        results = stored.results_for(idx)
        summ = summarize_point(results, info.iterations)
        point: dict[str, Any] = {"index": idx, "params": info.params}
        nodes = info.params.get("nodes")
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            point["nodes"] = nodes
        point.update(
            {
                "planned_iterations": info.iterations,
                "iterations": [r.to_json() for r in results],
                "summary": summ["summary"],
                "p99_comparison": summ["p99_comparison"],
                "totals": summ["totals"],
                "per_node": summ["per_node"],
                "flags": summ["flags"],
            }
        )
        points.append(point)
    finished = stored.finished_ns
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": run.run_id,
        "scenario": run.scenario,
        "metric": run.metric,
        "trace_id": run.trace_id,
        "started": _iso(run.started_ns),
        "started_ns": run.started_ns,
        "finished": _iso(finished),
        "finished_ns": finished,
        "duration_s": None if finished is None else (finished - run.started_ns) / 1e9,
        "status": stored.status,
        "config": run.config,
        "points": points,
        "flags": run_flags(points, stored.status),
        "sections": {s.name: s.data for s in stored.sections},
    }
    for s in stored.sections:  # store.add_section refuses names that would shadow a core key
        report[s.name] = s.data
    return report


def build_report(store: ResultStore, run_id: str) -> dict[str, Any]:
    return build_report_from(store.load_run(run_id))


# -- console ---------------------------------------------------------------------------------


def _n(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return f"{v:,}"


def _pct(ratio: float | None, digits: int = 2) -> str:
    return "-" if ratio is None else f"{ratio * 100:.{digits}f}"


def render_console(report: dict[str, Any]) -> str:
    """The per-node generated / kernel / reported table of every point, with the flags."""
    lines = [
        f"swarmscope run {report['run_id']}  scenario={report['scenario']}  "
        f"metric={report['metric']}  status={report['status']}"
    ]
    if report.get("trace_id"):
        lines.append(f"trace {report['trace_id']}")
    for p in report["points"]:
        params = " ".join(f"{k}={v}" for k, v in p["params"].items())
        planned = p.get("planned_iterations") or len(p["iterations"])
        lines.append("")
        lines.append(f"point {p['index']}  {params}  iterations {len(p['iterations'])}/{planned}")
        rows = [("node", "generated", "kernel", "reported", "loss %", "notes")]
        for n in p["per_node"]:
            notes = []
            if n["mismatched_iterations"]:
                notes.append(f"MISMATCH x{n['mismatched_iterations']}")
            if n["missing_iterations"]:
                notes.append(f"missing x{n['missing_iterations']}")
            rows.append(
                (
                    _node_label(n),
                    _n(n["generated"]),
                    _n(n["kernel"]),
                    _n(n["reported"]),
                    _pct(n["loss_ratio"]),
                    " ".join(notes),
                )
            )
        t = p["totals"]
        rows.append(
            ("total", _n(t["generated"]), _n(t["kernel"]), _n(t["reported"]), _pct(t["loss_ratio"]), "")
        )
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, 5)] + [r[5]]
            lines.append("  " + "  ".join(cells).rstrip())
        for f in p["flags"]:
            lines.append(f"  ! {f['flag']}: {f['message']}")
    if report["flags"]:
        lines.append("")
        lines.extend(f"! {f['flag']}: {f['message']}" for f in report["flags"])
    # Names, params and flags come from workers, probes and stores: one line each, no ESC obeyed.
    return "\n".join(printable(line, lines=False) for line in lines)


# -- HTML ------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1em;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.flag{color:#b00020;font-weight:600}.ok{color:#2a7d3f}
img{max-width:100%;display:block;margin:.5em 0}
.wide{max-width:100%;overflow-x:auto}table.summary{font-size:.9em}table.summary td.flag{text-align:left}
table.p99 :is(th,td):nth-child(2){text-align:left}
pre{background:#f7f7f7;padding:.6em;overflow:auto}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _img(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return f'<figure><img alt="{_e(plot.title)}" src="data:image/png;base64,{data}"></figure>'


def _plain(v: Any) -> str:
    return "/".join(str(x) for x in v) if isinstance(v, list) else str(v)


def _flags_html(flags: list[dict[str, Any]], limit: int = 20) -> str:
    if not flags:
        return ""
    items = []
    for f in flags:
        where = f.get("where") or []
        detail = "; ".join(", ".join(f"{k}={_plain(v)}" for k, v in w.items()) for w in where[:limit])
        if len(where) > limit:
            detail += f"; … {len(where) - limit} more"
        items.append(
            f'<li class="flag">{_e(f["flag"])}: {_e(f["message"])}'
            + (f"<br><small>{_e(detail)}</small>" if detail else "")
            + "</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _summary_table(report: dict[str, Any]) -> str:
    # Mean and p99 only (p50 is in report.json): with p50 too, 16 columns of 5-digit numbers ran
    # off a 1280 px page and cut the loss columns (tests/test_report_layout.py measures it).
    cols = ("generated", "kernel", "reported", "loss_ratio")
    head = (
        '<tr><th class="l" rowspan="2">point</th><th class="l" rowspan="2">params</th>'
        '<th rowspan="2">iterations</th>'
        + "".join(f'<th colspan="2">{"loss %" if c == "loss_ratio" else c}</th>' for c in cols)
        + '<th class="l" rowspan="2">flags</th></tr><tr>'
        + "<th>mean</th><th>p99</th>" * len(cols)
        + "</tr>"
    )
    body = []
    for p in report["points"]:
        cells = []
        for c in cols:
            s = p["summary"][c]
            for k in ("mean", "p99"):
                cells.append(_pct(s[k]) if c == "loss_ratio" else _n(s[k]))
        flags = ", ".join(f["flag"] for f in p["flags"])
        params = ", ".join(f"{k}={v}" for k, v in p["params"].items())
        body.append(
            f'<tr><td class="l">{_e(p["index"])}</td><td class="l">{_e(params)}</td>'
            f"<td>{len(p['iterations'])}/{p.get('planned_iterations') or len(p['iterations'])}</td>"
            + "".join(f"<td>{_e(c)}</td>" for c in cells)
            + f'<td class="l flag">{_e(flags)}</td></tr>'
        )
    return f'<div class="wide"><table class="summary">{head}{"".join(body)}</table></div>'


def _p99_table(report: dict[str, Any]) -> str:
    """The exec-storm write-up's table: p99 over iterations of generated and of reported, the
    difference, and loss relative to reported (its definition); only when a tracer reported."""
    rows = [
        [
            p["index"],
            ", ".join(f"{k}={v}" for k, v in p["params"].items()),
            _n(c["generated_p99"]),
            _n(c["reported_p99"]),
            _n(c["difference"]),
            _pct(c["loss_vs_reported"]),
        ]
        for p in report["points"]
        if (c := p.get("p99_comparison") or {}).get("reported_p99") is not None
    ]
    if not rows:
        return ""
    hdr = ["point", "params", "generated p99", "reported p99", "difference", "loss vs reported %"]
    return (
        "<h3>As the exec-storm write-up computes it</h3><p>p99 over the iterations of the "
        "generated and reported totals; loss vs reported = (generated − reported) / reported "
        "on those p99 values (a different quantity from loss = 1 − reported / kernel).</p>"
        + _table(hdr, rows, "p99")
    )


class Red(str):
    """A table cell shown in red (a flag)."""


def _table(headers: list[str], rows: list[list[Any]], cls: str = "") -> str:
    """A table whose first column is left-aligned (a name) and the rest right (numbers)."""

    def cell(tag: str, i: int, v: Any) -> str:
        classes = " ".join(c for c in ("l" if i == 0 else "", "flag" if isinstance(v, Red) else "") if c)
        return f'<{tag} class="{classes}">{_e(v)}</{tag}>' if classes else f"<{tag}>{_e(v)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))

    def row(r: list[Any]) -> str:
        return "".join(cell("td", i, c) for i, c in enumerate(r))

    body = "".join(f"<tr>{row(r)}</tr>" for r in rows)
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


def render_generic(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    """A list of rows as a table, a flat dict as key/value rows, anything else as JSON."""
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        keys: list[str] = []
        for r in data:
            keys += [k for k in r if k not in keys]
        rows = [["-" if r.get(k) is None else r.get(k) for k in keys] for r in data]
        return SectionHTML(_table(keys, rows))
    if isinstance(data, dict) and all(not isinstance(v, dict | list) for v in data.values()):
        return SectionHTML(_table(["key", "value"], [[k, v] for k, v in data.items()]))
    return SectionHTML(f"<pre>{_e(json.dumps(data, indent=2, sort_keys=True))}</pre>")


def _section_parts(stored: StoredRun, report: dict[str, Any]) -> list[tuple[str, SectionHTML]]:
    parts = []
    for s in stored.sections:
        fn = _resolve(s.name)
        try:
            part = fn(s.name, s.data, report)
        except Exception:
            log.exception("section %s: renderer failed; using a plain table", s.name)
            part = render_generic(s.name, s.data, report)
        parts.append((s.name, part))
    return parts


def render_html(
    report: dict[str, Any], plots: dict[str, Plot], sections: list[tuple[str, SectionHTML]]
) -> str:
    """The self-contained report.html (inline CSS, plots as base64 PNG)."""
    status = report["status"]
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>swarmscope {_e(report['run_id'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>swarmscope: {_e(report['scenario'])} <small>{_e(report['run_id'])}</small></h1>",
        "<p>metric <b>" + _e(report["metric"]) + "</b> · status "
        f'<b class="{"ok" if status == "ok" else "flag"}">{_e(status)}</b> · '
        f"started {_e(report['started'])} · finished {_e(report['finished'] or '-')}"
        + (f" · trace <code>{_e(report['trace_id'])}</code>" if report.get("trace_id") else "")
        + "</p>",
        _flags_html(report["flags"]),
        "<h2>Summary</h2>",
        "<p>Per window: generated (load generator), kernel (eBPF probe), reported (system under "
        "test); loss = 1 − reported / kernel.</p>",
        _summary_table(report),
        _p99_table(report),
    ]
    if "loss_vs_nodes.png" in plots:
        out.append(_img(plots["loss_vs_nodes.png"]))
    for p in report["points"]:
        params = ", ".join(f"{k}={v}" for k, v in p["params"].items())
        out.append(f"<h2>Point {_e(p['index'])} <small>{_e(params)}</small></h2>")
        out.append(_flags_html(p["flags"]))
        for name in (f"point{p['index']}_counts.png", f"point{p['index']}_per_node.png"):
            if name in plots:
                out.append(_img(plots[name]))
        rows = [
            [
                _node_label(n),
                _n(n["generated"]),
                _n(n["kernel"]),
                _n(n["reported"]),
                _pct(n["loss_ratio"]),
                Red(n["mismatched_iterations"]) if n["mismatched_iterations"] else "",
                Red(n["missing_iterations"]) if n["missing_iterations"] else "",
            ]
            for n in p["per_node"]
        ]
        t = p["totals"]
        total = [_n(t["generated"]), _n(t["kernel"]), _n(t["reported"]), _pct(t["loss_ratio"])]
        rows.append(["total", *total, "", ""])
        hdr = ["node", "generated", "kernel", "reported", "loss %", "mismatched it.", "missing it."]
        out.append(_table(hdr, rows, "per-node"))
        its = [
            [
                i + 1,
                _n(it["generated"]),
                _n(it["kernel"]),
                _n(it["reported"]),
                _pct(it["loss_ratio"]),
                _n(it["tracer_lost"]),
                Red(", ".join(it["flags"])),
            ]
            for i, it in enumerate(p["iterations"])
        ]
        hdr = ["iteration", "generated", "kernel", "reported", "loss %", "tracer lost", "flags"]
        out.append(f"<details><summary>iterations</summary>{_table(hdr, its, 'iterations')}</details>")
    for name, part in sections:
        if not part.html.strip() and not part.plots:
            continue  # an empty section (no faults struck): no heading over nothing
        if not part.html.lstrip().startswith("<h2"):  # a renderer's own heading is the section's
            out.append(f"<h2>{_e(name)}</h2>")
        frag = part.html
        for plot in part.plots:
            marker = "{plot:" + plot.filename + "}"
            frag = frag.replace(marker, _img(plot)) if marker in frag else frag + _img(plot)
        out.append(frag)
    cfg = json.dumps(report["config"], indent=2, sort_keys=True)
    out.append(f"<h2>Configuration</h2><details><summary>config</summary><pre>{_e(cfg)}</pre></details>")
    out.append("</body></html>")
    return "\n".join(x for x in out if x)


# -- files -----------------------------------------------------------------------------------


def write_report(
    store: ResultStore,
    run_id: str,
    run_dir: str | os.PathLike[str],
    formats: tuple[str, ...] = ("json", "html"),
) -> dict[str, Any]:
    """Write report.json and/or report.html + the PNG plots into run_dir; return the report.

    Every file is written under a fresh name, fsynced, then renamed over the old one (and the
    directory fsynced): a crash leaves the old report or the new one, and a symlink planted at
    a report's name is replaced, not written through."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"unknown report format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    stored = store.load_run(run_id)
    report = build_report_from(stored)
    path = os.fspath(run_dir)
    try:
        os.makedirs(path, exist_ok=True)
        if "json" in formats:
            atomic_write(os.path.join(path, "report.json"), json.dumps(report, indent=2).encode() + b"\n")
        if "html" in formats:
            from swarmscope.controller.plots import core_plots

            plots = core_plots(report)
            from swarmscope.controller.waterfall import waterfall_section

            sections = _section_parts(stored, report)
            sections += [w for w in [waterfall_section(path)] if w is not None]
            for plot in [*plots.values(), *(pl for _, part in sections for pl in part.plots)]:
                atomic_write(os.path.join(path, plot.filename), plot.png)
            atomic_write(os.path.join(path, "report.html"), render_html(report, plots, sections).encode())
    except OSError as e:
        raise ResultsError(f"cannot write the report into {path}: {e}") from e
    return report


def attach_report_writer(
    events: Any, store: ResultStore, echo: Callable[[str], Any] | None = print
) -> Callable[..., None]:
    """On run_finished: write the report into run.run_dir and echo the console table."""

    def on_finished(*, run: Any, **_: Any) -> None:
        if not run.run_dir:
            log.warning("run %s has no run_dir; report not written", run.run_id)
            return
        report = write_report(store, run.run_id, run.run_dir)
        if echo:
            echo(render_console(report))

    events.run_finished.add_listener(on_finished)
    return on_finished


def _node_label(n: dict[str, Any]) -> str:
    """A node and the pod(s) its probe counted: ``n1 (ns/pod/container)``."""
    pods = n.get("pods") or []
    return f"{n['node']} ({', '.join(pods)})" if pods else str(n["node"])
