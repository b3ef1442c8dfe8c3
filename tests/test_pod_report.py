"""The pod a probe named reaches the results: NodeCount.pod (name_pods), the store, report.json,
the console and HTML reports and the controller's window span. A store written before the
``pod`` column opens with the column added."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _results_data import make_run, sweep

from swarmscope.controller.reconcile import name_pods
from swarmscope.controller.report import render_console, write_report
from swarmscope.controller.store import ResultStore
from swarmscope.core.events import RunEvents

POD = "ssrn/rn-swarmscope-workers-7dc6884d9f-xl2n7/worker"


@pytest.mark.slow
def test_pod_reaches_report_json_html_and_console(tmp_path: Path) -> None:
    run = make_run(tracer=False)
    events = RunEvents()
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.attach(events)
        events.run_started.fire(run=run)
        for point, windows in sweep(run, tracer=False):
            events.point_started.fire(run=run, point=point)
            results = []
            for win, readings, missing, result in windows:
                readings[0].pod = POD  # node-0's probe saw a pod; the others are plain cgroups
                name_pods(result, readings)
                assert [n.pod for n in result.per_node][:2] == [POD, None]
                events.window_closed.fire(run=run, window=win, readings=readings, missing=missing)
                events.iteration_done.fire(run=run, result=result)
                results.append(result)
            events.point_done.fire(run=run, point=point, results=results)
        events.run_finished.fire(run=run, status="ok")
        rep = write_report(store, run.run_id, tmp_path / "out")
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(rep))
    for p in rep["points"]:
        assert [it["per_node"][0]["pod"] for it in p["iterations"]] == [POD] * 4
        assert {it["per_node"][1]["pod"] for it in p["iterations"]} == {None}
        assert [n["pods"] for n in p["per_node"][:2]] == [[POD], []]
    text = render_console(rep)
    assert f"node-0 ({POD})" in text and "node-1 (" not in text
    html = (tmp_path / "out" / "report.html").read_text()
    assert f'<td class="l">node-0 ({POD})</td>' in html


def test_old_store_gets_the_pod_column(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as c:  # node_counts as it was before pod attribution
        c.execute(
            "CREATE TABLE node_counts (run_id TEXT NOT NULL, point INTEGER NOT NULL, iteration INTEGER"
            " NOT NULL, seq INTEGER NOT NULL, node TEXT NOT NULL, generated INTEGER, kernel INTEGER,"
            " reported INTEGER, reported_lost INTEGER, missing TEXT NOT NULL, rate REAL,"
            " PRIMARY KEY (run_id, point, iteration, seq))"
        )
        c.execute("INSERT INTO node_counts VALUES ('r', 0, 0, 0, 'n1', 5, 5, NULL, NULL, '[]', 1.0)")
    with ResultStore(db):
        pass
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT node, kernel, pod FROM node_counts").fetchall() == [("n1", 5, None)]
