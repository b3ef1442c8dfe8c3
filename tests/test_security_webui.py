"""Issue 27, finding 2: with ``--web-login`` every route of the web UI, the plug-in's
``/swarmscope/*`` included, sends a client that has not logged in to the login page; and
report.html is rendered once per window, not per request.

The route walk runs Locust's real WebUI (Flask app and flask-login) in a process of its own
(tests/data/webui_routes.py) and asks each rule of ``app.url_map``: a new route left open
fails here without anyone listing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import ROOT

from swarmscope.app import webui


def test_every_route_is_behind_the_login() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "data" / "webui_routes.py")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["open"] == []
    assert out["checked"] >= 20  # Locust's routes and the plug-in's five


def test_report_rendered_once_per_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_write(store: Any, run_id: str, run_dir: str) -> None:
        calls.append((run_id, run_dir))
        Path(run_dir, "report.html").write_text(f"render {len(calls)}")

    import swarmscope.controller.report as report

    monkeypatch.setattr(report, "write_report", fake_write)
    run = SimpleNamespace(run_id="r1", run_dir=str(tmp_path))
    ctl = SimpleNamespace(results=[])
    proc = SimpleNamespace(run=run, report=None, store=SimpleNamespace(), controller=ctl)
    cache = webui.ReportCache()
    for _ in range(5):
        cache.fresh(proc)
    assert len(calls) == 1
    ctl.results.append("a window")
    for _ in range(3):
        cache.fresh(proc)
    assert len(calls) == 2
