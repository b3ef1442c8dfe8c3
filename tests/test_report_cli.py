"""`swarmscope report RUN_DIR` as a subprocess: re-renders the same report.json from the DB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _results_data import fire_run, make_run

from swarmscope.controller.report import write_report
from swarmscope.controller.store import ResultStore, default_db_path, run_dir_for
from swarmscope.core.events import RunEvents

RUN_ID = "run-20261122-1"


def swarmscope(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmscope", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _run(out: Path) -> Path:
    """A stored run and its report.json as the run wrote it (no HTML or plots: what the CLI
    renders is what these tests read; drawing them here too took seconds)."""
    events = RunEvents()
    run_dir = Path(run_dir_for(out, RUN_ID))
    with ResultStore(default_db_path(out)) as store:
        store.attach(events)
        events.run_finished.add_listener(
            lambda *, run, **_: write_report(store, run.run_id, run.run_dir, formats=("json",))
        )
        fire_run(events, make_run(run_dir=str(run_dir)))
        store.add_section(RUN_ID, "steps", [{"users": 100, "rps": 950.5}])
    return run_dir


@pytest.mark.slow
def test_cli_rerenders_same_report(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "results")
    first = json.loads((run_dir / "report.json").read_text())
    assert "steps" not in first  # the section came after run_finished wrote the report
    for f in run_dir.iterdir():
        f.unlink()
    proc = swarmscope("report", run_dir)
    assert proc.returncode == 0, proc.stderr
    again = json.loads((run_dir / "report.json").read_text())
    assert again.pop("steps") == again["sections"].pop("steps") == [{"users": 100, "rps": 950.5}]
    assert again == first
    assert (run_dir / "report.html").stat().st_size > 50_000 and (run_dir / "point2_counts.png").exists()
    assert f"swarmscope run {RUN_ID}" in proc.stdout and "node-10" in proc.stdout  # console table
    assert "wrote" in proc.stderr


@pytest.mark.slow
def test_cli_formats_and_db_option(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "results")
    other = tmp_path / "elsewhere" / RUN_ID
    proc = swarmscope("report", other, "--db", tmp_path / "results" / "swarmscope.sqlite", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in other.iterdir()) == ["report.json"]
    a = json.loads((other / "report.json").read_text())
    b = json.loads((run_dir / "report.json").read_text())
    assert a.pop("sections") == {"steps": a.pop("steps")} and b.pop("sections") == {} and a == b
    proc = swarmscope("report", run_dir, "--format", "console")
    assert proc.returncode == 0 and proc.stdout.startswith(f"swarmscope run {RUN_ID}")


@pytest.mark.slow
def test_cli_errors(tmp_path: Path) -> None:
    _run(tmp_path / "results")
    proc = swarmscope("report", tmp_path / "results" / "run-nope")
    assert proc.returncode == 1
    assert "run 'run-nope' is not in" in proc.stderr and RUN_ID in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = swarmscope("report", tmp_path / "nowhere" / RUN_ID)
    assert proc.returncode == 1 and "no results store at" in proc.stderr
    proc = swarmscope("report", tmp_path / "results" / RUN_ID, "--format", "pdf")
    assert proc.returncode == 1 and "unknown pdf" in proc.stderr
