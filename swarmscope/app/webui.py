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

Rows are the kind's (``Kind.live_columns`` / ``Kind.live_rows``, from the windows reconciled so
far; a window's row appears when it closes): by default generated, kernel, reported and loss %
per node and window; the ingress flood's per step, the neighbor sweep's per point. Numbers are
shown as the CLI prints them (thousands separated; loss as a % with 4 decimals). While a
free-running swarm's window is open, its rows are the readings so far (app/webui_live.py).
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from swarmscope.app.webui_live import SERIES, SO_FAR_NOTE, chart_svg, so_far_rows

TAB_KEY = "swarmscope"

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


def live(proc: Any, open_window: Any = None) -> dict[str, Any]:
    """What the tab shows now: the run, its links, the kind's columns and rows; the window
    measuring now (``open_window``, a WindowInfo) is a last row marked open until it closes,
    with its readings so far when there are any (webui_live.py)."""
    columns = proc.kind.live_columns
    results = list(proc.controller.results) if proc.controller is not None else []
    run = proc.run
    rows = proc.kind.live_rows(results)
    points = SERIES.points(open_window.window_id) if open_window is not None else []
    if open_window is not None:
        first = f"{open_window.point}.{open_window.iteration} open"
        rows += so_far_rows(first, points, tuple(k for k, _ in columns)) or [
            {k: first if i == 0 else "…" for i, (k, _) in enumerate(columns)}
        ]
    return {
        "run_id": run.run_id if run else "",
        "kind": proc.kind.name,
        "trace_id": run.trace_id if run else "",
        "windows": len(results),
        "links": {"report": "swarmscope/report.html", "trace": "swarmscope/trace.json"},
        "columns": [{"key": k, "title": t} for k, t in columns],
        "open_window": open_window.window_id if open_window is not None else None,
        "rows": rows,
        "so_far": {"note": SO_FAR_NOTE, "points": points},
    }


def _page(data: dict[str, Any]) -> str:
    def e(v: Any) -> str:  # cells are numbers or text from workers and probes: all escaped
        return html.escape(str(v))

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
        f"{chart_svg(data['so_far']['points'])}</body></html>"
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

    from swarmscope.kinds import get_kind

    columns = get_kind(_KIND[0]).live_columns
    web_ui.template_args["extended_tabs"] = [{"title": "swarmscope", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in columns]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "swarmscope/report.html", "title": "swarmscope report (HTML, rendered now)"},
        {"href": "swarmscope/report.json", "title": "swarmscope report.json"},
        {"href": "swarmscope/trace.json", "title": "swarmscope trace (trace.json)"},
    ]
    # Locust warns on its start page when a User class has no host; a swarmscope kind needs none:
    # exec storms and flows have no target, and with no host the ingress flood and neighbor
    # writes start their own (nginx in a namespace, a control plane). Locust recomputes its
    # template args per page: the warning is dropped each time.
    update = web_ui.update_template_args

    def _update_template_args() -> None:
        update()
        web_ui.template_args["missing_host_warning"] = False

    web_ui.update_template_args = _update_template_args
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
