"""Issue 27, finding 5: every value from a scenario, a worker, a probe or a stored run is shown as
text — report.html, the Locust tab's page, the console — and a store holding the wrong types is
one clear error, not a traceback (nor markup, nor a text point index in a plot's file name).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _results_data import fire_run, make_run

from swarmscope.controller.report import build_report, render_console, write_report
from swarmscope.controller.store import ResultStore, default_db_path, run_dir_for
from swarmscope.core.errors import ResultsError
from swarmscope.core.events import RunEvents
from swarmscope.kinds import register_all_renderers

RUN_ID = "run-20261122-1"
XSS = "<ss-x onload=alert(1)>"


def _store(out: Path) -> Path:
    events = RunEvents()
    with ResultStore(default_db_path(out)) as store:
        store.attach(events)
        fire_run(events, make_run(run_dir=run_dir_for(out, RUN_ID)))
    return Path(run_dir_for(out, RUN_ID))


def _sql(out: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    db = sqlite3.connect(default_db_path(out))
    with db:
        for sql, args in statements:
            db.execute(sql, args)
    db.close()


def test_a_text_point_index_is_one_error(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run_dir = _store(out)
    _sql(out, ("UPDATE points SET idx = ? WHERE run_id = ? AND idx = 0", (XSS, RUN_ID)))
    p = subprocess.run(
        [sys.executable, "-m", "swarmscope", "report", str(run_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    db = default_db_path(out)
    assert p.stderr.strip() == f"swarmscope: results store {db}: points.idx holds str {XSS!r}, not an integer"
    assert not (run_dir / "report.html").exists()


@pytest.mark.parametrize(
    ("table", "column", "value", "said"),
    [
        ("iterations", "flags", "[1]", "list [1], not a JSON list of strings"),
        ("iterations", "extra", "{oops", "not JSON, not a JSON object"),
        ("node_counts", "kernel", "many", "str 'many', not an integer or null"),
        ("node_counts", "node", b"n1", "bytes b'n1', not text"),
        ("runs", "config", "[]", "list [], not a JSON object"),
        ("runs", "run_id", "../../x", "str '../../x', not a name (text without '/')"),
    ],
)
def test_a_column_of_the_wrong_type_is_named(
    tmp_path: Path, table: str, column: str, value: object, said: str
) -> None:
    out = tmp_path / "results"
    _store(out)
    _sql(out, (f"UPDATE {table} SET {column} = ? WHERE run_id = ?", (value, RUN_ID)))
    with ResultStore(default_db_path(out)) as store, pytest.raises(ResultsError) as e:
        store.load_run(str(value) if column == "run_id" else RUN_ID)
    assert str(e.value) == f"results store {default_db_path(out)}: {table}.{column} holds {said}"


def test_values_from_workers_probes_and_sections_are_text_in_report_html(tmp_path: Path) -> None:
    register_all_renderers()  # as `swarmscope report` has them
    out = tmp_path / "results"
    run_dir = _store(out)
    sections = {
        "exec_storm": {
            "load": "max", "burst_s": 1.0, "concurrency": XSS, "generator": "stress-ng",
            "stress_ng": {"command": XSS, "bogo_ops": XSS, "startup_execs": XSS},
            "write_up_p99": [{"nodes": XSS, "generated_p99": 1.0, "reported_p99": 1.0, "difference": 0.0,
                              "loss_vs_reported_pct": 0.0}],
        },
        "flow_storm": {"points": [],
                       "write_up_cpu": [{"comparison": XSS, "ours_pct": XSS, "write_up_pct": XSS}]},
        XSS: {XSS: XSS},
    }  # fmt: skip
    with ResultStore(default_db_path(out)) as store:
        for name, data in sections.items():
            store.add_section(RUN_ID, name, data)
    _sql(
        out,
        ("UPDATE node_counts SET node = ?, pod = ? WHERE run_id = ?", (XSS, XSS, RUN_ID)),
        ("UPDATE points SET params = ? WHERE run_id = ?", (json.dumps({XSS: XSS}), RUN_ID)),
        ("UPDATE iterations SET flags = ? WHERE run_id = ?", (json.dumps([XSS]), RUN_ID)),
        ("UPDATE runs SET scenario = ?, metric = ?, trace_id = ?, status = ? WHERE run_id = ?",
         (XSS, XSS, XSS, XSS, RUN_ID)),
    )  # fmt: skip
    with ResultStore(default_db_path(out)) as store:
        write_report(store, RUN_ID, run_dir)
    page = (run_dir / "report.html").read_text()
    assert "<ss-x" not in page
    # Drawn as text in each renderer (not dropped because one failed): the two kinds' sections,
    # the generic one, the per-node rows, the headings.
    assert page.count("&lt;ss-x onload=alert(1)&gt;") >= 12
    assert "exec loops" in page and "Agent CPU change" in page


def test_the_console_shows_control_characters_and_keeps_one_line_per_row(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _store(out)
    evil = "n1\x1b[2J\x1b]0;owned\x07\rnode-0\nforged line\u202e"
    _sql(out, ("UPDATE node_counts SET node = ? WHERE run_id = ? AND node = 'node-1'", (evil, RUN_ID)))
    with ResultStore(default_db_path(out)) as store:
        text = render_console(build_report(store, RUN_ID))
    assert not any(c in text for c in "\x1b\x07\r\u202e")
    assert r"n1\x1b[2J\x1b]0;owned\x07\x0dnode-0\x0aforged line\u202e" in text
    assert not any(line.startswith("forged") for line in text.splitlines())


def test_the_progress_line_shows_control_characters() -> None:
    from swarmscope.app.console import IterationPrinter
    from swarmscope.controller.model import IterationResult, NodeCount
    from swarmscope.kinds import get_kind

    result = IterationResult(
        run_id="r", point=0, params={"nodes": "2\x1b[1A"}, iteration=0, window_id="w", started_ns=0,
        ended_ns=1, per_node=[NodeCount(node="n\x1b[2K", generated=1, kernel=1, reported=1)],
    )  # fmt: skip
    line = IterationPrinter(get_kind("exec_storm")).line(result, 1.0)
    assert line == r"[nodes=2\x1b[1A iter 0] | n\x1b[2K: gen 1 kern 1 rep 1"


def test_the_tab_page_escapes_every_cell() -> None:
    from swarmscope.app.webui import _page

    data = {
        "run_id": XSS, "kind": XSS, "trace_id": XSS, "windows": 1,
        "columns": [{"key": "node", "title": XSS}, {"key": "kernel", "title": "kernel"}],
        "rows": [{"node": XSS, "kernel": 4096}],
        "so_far": {"note": XSS, "points": []},  # the live chart: no readings yet
    }  # fmt: skip
    page = _page(data)
    assert "<ss-x" not in page
    assert page.count("&lt;ss-x onload=alert(1)&gt;") == 6  # title, run, kind, trace, column, cell
    assert "<td>4096</td>" in page
