"""The swarmscope tab in Locust's web UI: generated / kernel / reported, live, with the report.

    locust -f scenarios/exec_storm.py          # open http://localhost:8089, start: "SWARMSCOPE" tab
    curl localhost:8089/swarmscope/live.json   # the same rows for scripts

Built only on Locust's documented extension points: ``extended_tabs`` / ``extended_tables`` in
``web_ui.template_args`` (the tab and its columns), ``extended_stats`` added to the
``/stats/requests`` answer the UI polls every 2 s (the rows, so the tab updates live), and Flask
routes on ``environment.web_ui.app``: ``/swarmscope/`` (a plain page with the same table and
links, refreshing itself), ``/swarmscope/live.json``, ``/swarmscope/report.html`` (rendered from
the results store mid-run, once per closed window), ``/swarmscope/report.json`` and
``/swarmscope/trace.json``. Those links are also in Locust's "Download Data" tab
(``extended_csv_files``). With ``--web-login`` every one of them is behind Locust's login.

Rows per kind (from the windows reconciled so far; a window's row appears when it closes):
exec storm — one per node and window: generated, kernel, reported, loss %; ingress flood — one
per step: merged latency percentiles and the proxy's CPU % and RSS; neighbor writes — one per
point: µs per neighbor next to Arion's figure (``locust -f`` windows: entries written and the
batch latency). Numbers are shown as report.json has them (loss as a % with 4 decimals).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

TAB_KEY = "swarmscope"
Columns = list[tuple[str, str]]  # (row key, column title)

EXEC_COLUMNS: Columns = [
    ("window", "Window"),
    ("node", "Node"),
    ("generated", "Generated"),
    ("kernel", "Kernel"),
    ("reported", "Reported"),
    ("loss", "Loss %"),
    ("harness", "Generated = kernel"),
]
INGRESS_COLUMNS: Columns = [
    ("step", "Step"),
    ("load", "Load"),
    ("requests", "Requests"),
    ("p50", "p50 ms"),
    ("p90", "p90 ms"),
    ("p99", "p99 ms"),
    ("cpu", "Proxy CPU %"),
    ("rss", "Proxy RSS KiB"),
]
NEIGHBOR_COLUMNS: Columns = [
    ("neighbors", "Neighbors"),
    ("mode", "Mode"),
    ("perneighbor", "µs / neighbor"),
    ("arion", "Arion µs / neighbor"),
    ("p99", "p99 µs"),
    ("entries", "Entries written"),
    ("batchp99", "Batch p99 ms"),
]

_KIND: list[str] = []


class ReportCache:
    """report.html/report.json mid-run, rendered when a window has closed since the last render,
    not per request: a render draws charts and fsyncs, on the controller, mid-measurement."""

    def __init__(self) -> None:
        self._key: tuple[str, int] | None = None

    def fresh(self, proc: Any) -> None:
        from swarmscope.controller.report import write_report

        windows = len(proc.controller.results) if proc.controller is not None else 0
        key = (proc.run.run_id, windows)
        if key != self._key:
            write_report(proc.store, proc.run.run_id, proc.run.run_dir)
            self._key = key


def install(kind_name: str) -> None:
    """Add the tab and routes for ``kind_name`` to this Locust process's web UI, if any (once)."""
    if _KIND:
        return
    _KIND.append(kind_name)
    # Locust is imported here, not at the top: importing it monkey-patches the process (gevent),
    # and the row builders below are used where that must not happen (tests, reports).
    from locust import events

    events.init.add_listener(_on_init)


def _num(v: Any, digits: int | None = None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and digits is not None:
        return f"{v:.{digits}f}"
    return str(v)


def _loss(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.4f}"


def exec_rows(results: Sequence[Any]) -> list[dict[str, str]]:
    rows = []
    for r in results:
        for n in r.per_node:
            ok = n.harness_ok
            rows.append(
                {
                    "window": f"{r.point}.{r.iteration}",
                    "node": n.node,
                    "generated": _num(n.generated),
                    "kernel": _num(n.kernel),
                    "reported": _num(n.reported),
                    "loss": _loss(n.loss_ratio),
                    "harness": "-" if ok is None else ("yes" if ok else "MISMATCH"),
                }
            )
    return rows


def ingress_rows(results: Sequence[Any]) -> list[dict[str, str]]:
    rows = []
    for r in results:
        for s in r.extra.get("steps", []):
            lat = s.get("latency_ms") or {}
            proxy = s.get("proxy") or r.extra.get("proxy") or {}
            load = f"users={s['users']}" if "users" in s else f"rate={s.get('rate')}"
            rows.append(
                {
                    "step": _num(s.get("step")),
                    "load": load,
                    "requests": _num(s.get("requests")),
                    "p50": _num(lat.get("p50"), 2),
                    "p90": _num(lat.get("p90"), 2),
                    "p99": _num(lat.get("p99"), 2),
                    "cpu": _num(proxy.get("cpu_pct"), 1),
                    "rss": _num(proxy.get("rss_kib_max"), 0),
                }
            )
    return rows


def neighbor_rows(results: Sequence[Any]) -> list[dict[str, str]]:
    rows = []
    for r in results:
        p = r.extra.get("neighbors") or {}
        free = r.extra.get("locust") or {}
        rows.append(
            {
                "neighbors": _num(p.get("neighbors")),
                "mode": str(p.get("mode", "locust -f")),
                "perneighbor": _num(p.get("per_neighbor_us"), 3),
                "arion": _num(p.get("arion_per_neighbor_us"), 3),
                "p99": _num(p.get("p99_us"), 1),
                "entries": _num(free.get("entries_written", p.get("generated"))),
                "batchp99": _num((free.get("batch_latency_ms") or {}).get("p99"), 2),
            }
        )
    return rows


KINDS: dict[str, tuple[Columns, Callable[[Sequence[Any]], list[dict[str, str]]]]] = {
    "exec_storm": (EXEC_COLUMNS, exec_rows),
    "ingress_flood": (INGRESS_COLUMNS, ingress_rows),
    "neighbor_writes": (NEIGHBOR_COLUMNS, neighbor_rows),
}


def live(proc: Any, open_window: Any = None) -> dict[str, Any]:
    """What the tab shows now: the run, its links, the kind's columns and rows; the window
    measuring now (``open_window``, a WindowInfo) is a last row marked open until it closes."""
    columns, rows_of = KINDS.get(proc.kind.name, (EXEC_COLUMNS, exec_rows))
    results = list(proc.controller.results) if proc.controller is not None else []
    run = proc.run
    rows = rows_of(results)
    if open_window is not None:
        first = f"{open_window.point}.{open_window.iteration} open"
        rows.append({k: first if i == 0 else "…" for i, (k, _) in enumerate(columns)})
    return {
        "run_id": run.run_id if run else "",
        "kind": proc.kind.name,
        "trace_id": run.trace_id if run else "",
        "windows": len(results),
        "links": {"report": "swarmscope/report.html", "trace": "swarmscope/trace.json"},
        "columns": [{"key": k, "title": t} for k, t in columns],
        "open_window": open_window.window_id if open_window is not None else None,
        "rows": rows,
    }


def _page(data: dict[str, Any]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c['title'])}</th>" for c in data["columns"])
    body = "".join(
        "<tr>" + "".join(f"<td>{e(r[c['key']])}</td>" for c in data["columns"]) + "</tr>"
        for r in data["rows"]
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='2'>"
        f"<title>swarmscope {e(data['run_id'])}</title><style>body{{font-family:system-ui,sans-serif;"
        "margin:1.5em}table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.25em .6em;"
        "text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}</style></head><body>"
        f"<h1>swarmscope <small>{e(data['kind'])}</small></h1>"
        f"<p>run <code>{e(data['run_id'])}</code> · windows closed {data['windows']} · trace "
        f"<code>{e(data['trace_id'] or '-')}</code> · <a href='report.html'>report</a> · "
        f"<a href='trace.json'>trace</a></p><table id='swarmscope'><tr>{head}</tr>{body}</table>"
        "</body></html>"
    )


def _on_init(environment: Any, web_ui: Any = None, **_: Any) -> None:
    if web_ui is None:
        return
    from flask import Response, jsonify, request, send_file

    def proc() -> Any:
        return getattr(environment, "swarmscope", None)

    def now(p: Any) -> dict[str, Any]:
        free = getattr(environment, "swarmscope_free", None)  # the plug-in's locust -f state
        return live(p, getattr(free, "window", None))

    columns = KINDS.get(_KIND[0], (EXEC_COLUMNS, exec_rows))[0]
    web_ui.template_args["extended_tabs"] = [{"title": "swarmscope", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in columns]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "swarmscope/report.html", "title": "swarmscope report (HTML, rendered now)"},
        {"href": "swarmscope/report.json", "title": "swarmscope report.json"},
        {"href": "swarmscope/trace.json", "title": "swarmscope trace (trace.json)"},
    ]
    app = web_ui.app
    # Every route added here is behind --web-login when it is on (Locust's own decorator);
    # tests/test_security_webui.py walks app.url_map for any left open.
    guard = web_ui.auth_required_if_enabled
    reports = ReportCache()

    @app.after_request
    def _extend_stats(response: Any) -> Any:
        # The UI polls /stats/requests every 2 s: the tab's rows ride along (Locust's own way).
        p = proc()
        if request.path.rstrip("/").endswith("/stats/requests") and p is not None and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": now(p)["rows"]}]
            response.set_data(json.dumps(data))
        return response

    @app.route("/swarmscope/")
    @guard
    def _swarmscope_page() -> Any:
        p = proc()
        if p is None:
            return Response("swarmscope is not set up in this process", 503)
        return Response(_page(now(p)), mimetype="text/html")

    @app.route("/swarmscope/live.json")
    @guard
    def _swarmscope_live() -> Any:
        p = proc()
        return jsonify(now(p) if p is not None else {})

    def _report(name: str) -> Any:
        p = proc()
        if p is None or p.run is None:
            return Response("no run yet", 404)
        path = os.path.join(p.run.run_dir, name)
        if p.report is None:  # mid-run: from the store (status "running"), once per window
            reports.fresh(p)
        return send_file(path, max_age=0)

    @app.route("/swarmscope/report.html")
    @guard
    def _swarmscope_report() -> Any:
        return _report("report.html")

    @app.route("/swarmscope/report.json")
    @guard
    def _swarmscope_report_json() -> Any:
        return _report("report.json")

    @app.route("/swarmscope/trace.json")
    @guard
    def _swarmscope_trace() -> Any:
        p = proc()
        if p is None or p.run is None:
            return Response("no run yet", 404)
        path = os.path.join(p.run.run_dir, "trace.json")
        if os.path.isfile(path):
            return send_file(path, max_age=0)
        note = "trace.json is written when the run ends; spans go over OTLP when it is configured"
        return jsonify({"trace_id": p.run.trace_id, "note": note})


__all__ = ["install", "live"]
