"""Issue 18, finding 1: a crafted swarmscope.sqlite runs no code in ``swarmscope report``.

Before the fix the report imported the section renderer from a ``"module:function"`` stored in
the database: ``builtins:exec`` with Python as the section's name ran it (as root). Now only
the code's own registry renders sections; the stored column is ignored.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _results_data import fire_run, make_run

from swarmscope.controller.store import ResultStore, default_db_path, run_dir_for
from swarmscope.core.events import RunEvents

RUN_ID = "run-20261122-1"


def _crafted_store(out: Path, marker: Path) -> Path:
    events = RunEvents()
    with ResultStore(default_db_path(out)) as store:
        store.attach(events)
        fire_run(events, make_run(run_dir=run_dir_for(out, RUN_ID)))
    # What an attacker writes into a results database someone else will re-render: the
    # section name is code, the stored renderer is exec (renderer(name, data, report)), and a
    # second one names a module that writes the marker when imported.
    code = f"open({str(marker)!r}, 'w').write('pwned')"
    db = sqlite3.connect(default_db_path(out))
    with db:
        db.execute(
            "INSERT INTO sections (run_id, name, data, renderer) VALUES (?, ?, ?, ?)",
            (RUN_ID, code, "{}", "builtins:exec"),
        )
        db.execute(
            "INSERT INTO sections (run_id, name, data, renderer) VALUES (?, ?, ?, ?)",
            (RUN_ID, "other", json.dumps({"a": 1}), "evil_module_ss18:render"),
        )
    db.close()
    return Path(run_dir_for(out, RUN_ID))


@pytest.mark.slow
def test_crafted_database_runs_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run_dir = _crafted_store(tmp_path / "results", marker)
    # A module on the path that would write the marker on import (the second stored renderer).
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "evil_module_ss18.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\ndef render(*a):\n    return None\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": f"{lib}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "swarmscope", "report", str(run_dir)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
    page = (run_dir / "report.html").read_text()
    # Both sections are drawn as data by the generic renderer; the name is escaped text.
    assert "open(&#x27;" in page and '<td class="l">a</td><td>1</td>' in page
    report = json.loads((run_dir / "report.json").read_text())
    assert report["other"] == {"a": 1}
