"""Results store: runs fired through RunEvents read back exactly; a crash keeps what was written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from _results_data import expected_iteration_json, fire_run, make_run, sweep

from swarmscope.controller.model import IterationResult
from swarmscope.controller.store import ResultStore, default_db_path, run_dir_for
from swarmscope.core.errors import ResultsError
from swarmscope.core.events import RunEvents


def test_round_trip_through_events(tmp_path: Path) -> None:
    db = default_db_path(tmp_path)
    assert db == str(tmp_path / "swarmscope.sqlite")
    run = make_run(run_dir=run_dir_for(tmp_path, "run-20261122-1"))
    events = RunEvents()
    with ResultStore(db) as store:
        store.attach(events)
        fired = fire_run(events, run)
    # A fresh connection (another process would see the same): everything came back.
    with ResultStore(db) as store:
        got = store.load_run(run.run_id)
        assert got.run == run
        assert got.status == "ok" and got.finished_ns is not None and got.finished_ns > 0
        assert [(p.index, p.params, p.iterations) for p in got.points] == [
            (0, {"nodes": 2}, 4),
            (1, {"nodes": 5}, 4),
            (2, {"nodes": 11}, 4),
        ]
        assert got.results == fired  # every field, compared as values
        assert [r.to_json() for r in got.results] == [expected_iteration_json(r) for r in fired]
        # The interesting cases survived as values, not just as equal dicts.
        mism = got.results_for(1)[2]
        assert mism.flags == ["harness-mismatch"]
        assert [n.node for n in mism.per_node if n.harness_ok is False] == ["node-3"]
        hole = got.results_for(2)[1].per_node[4]
        assert hole.reported is None and hole.missing == ["tracer"] and hole.loss_ratio is None
        # Raw probe readings, per window and in total.
        w = store.load_readings(run.run_id, "w1-2")
        assert len(w) == 5 and w[3].counters == {"exec": mism.per_node[3].kernel, "exec_failed": 0}
        assert w[3].gauges == {"prog_ns_per_event": 151.5}
        assert len(store.load_readings(run.run_id)) == 4 * (2 + 5 + 11)
        wins = store.load_windows(run.run_id)
        assert len(wins) == 12 and wins[0][0].nodes == ["node-0", "node-1"] and wins[0][1] == []
        assert wins[0][0].traceparent.startswith("00-4bf92f35")


def test_odd_config_values_do_not_lose_the_run(tmp_path: Path) -> None:
    run = make_run()
    run.config["out"] = tmp_path  # a Path, as a CLI layer might leave it
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.save_run(run)
        assert store.load_run(run.run_id).run.config["out"] == str(tmp_path)
        _, windows = next(sweep(run))
        result = windows[0][3]
        result.extra = {"ratio": float("nan"), "ok": [1.5, float("inf")]}
        store.save_iteration(result)
        assert store.load_run(run.run_id).results[0].extra == {"ratio": None, "ok": [1.5, None]}


def test_no_tracer_reported_is_null(tmp_path: Path) -> None:
    run = make_run(tracer=False)
    events = RunEvents()
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.attach(events)
        fired = fire_run(events, run, tracer=False)
        got = store.load_run(run.run_id)
    assert got.results == fired
    assert [r.to_json() for r in got.results] == [expected_iteration_json(r) for r in fired]
    assert all(r.reported is None and r.loss_ratio is None for r in got.results)


def test_node_counts_are_queryable_sql(tmp_path: Path) -> None:
    run = make_run()
    events = RunEvents()
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.attach(events)
        fired = fire_run(events, run)
    con = sqlite3.connect(tmp_path / "s.sqlite")
    (kernel_total,) = con.execute(
        "SELECT SUM(kernel) FROM node_counts WHERE run_id = ?", (run.run_id,)
    ).fetchone()
    assert kernel_total == sum(r.kernel or 0 for r in fired)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_refire_replaces_not_duplicates(tmp_path: Path) -> None:
    run = make_run()
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.save_run(run)
        _, windows = next(sweep(run))
        win, readings, missing, result = windows[0]
        for _ in range(2):
            store.save_window(win, readings, missing)
            store.save_iteration(result)
        got = store.load_run(run.run_id)
        assert len(got.results) == 1 and len(got.results[0].per_node) == 2
        assert len(store.load_readings(run.run_id)) == 2
        # No point_started: the point row is made from the result so nothing is orphaned.
        assert [(p.index, p.params, p.iterations) for p in got.points] == [(0, {"nodes": 2}, 0)]
        assert got.status == "running" and got.finished_ns is None


def test_sections_and_errors(tmp_path: Path) -> None:
    run = make_run()
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.save_run(run)
        store.add_section(run.run_id, "steps", [{"users": 100, "p99_ms": 12.5}])
        store.add_section(run.run_id, "steps", [{"users": 200, "p99_ms": 30.0}])  # replaces
        got = store.load_run(run.run_id).sections
        assert [(s.name, s.data) for s in got] == [("steps", [{"users": 200, "p99_ms": 30.0}])]
        with pytest.raises(ResultsError, match="reserved"):
            store.add_section(run.run_id, "points", {})
        with pytest.raises(ResultsError, match="not JSON"):
            store.add_section(run.run_id, "blob", {"x": object()})
        with pytest.raises(ResultsError, match="not in"):
            store.add_section("nope", "steps", {})
        with pytest.raises(ResultsError, match="status"):
            store.finish_run(run.run_id, "great")
        with pytest.raises(ResultsError, match=r"'nope' is not in .*run-20261122-1"):
            store.load_run("nope")


def test_crash_keeps_everything_written(tmp_path: Path) -> None:
    """A controller killed mid-run (os._exit: no close, no run_finished) loses nothing stored."""
    db = tmp_path / "swarmscope.sqlite"
    code = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from _results_data import make_run, sweep
        from swarmscope.controller.store import ResultStore
        from swarmscope.core.events import RunEvents
        events = RunEvents()
        store = ResultStore({str(db)!r})
        store.attach(events)
        run = make_run()
        events.run_started.fire(run=run)
        for point, windows in sweep(run):
            events.point_started.fire(run=run, point=point)
            for win, readings, missing, result in windows:
                events.window_closed.fire(run=run, window=win, readings=readings, missing=missing)
                events.iteration_done.fire(run=run, result=result)
                if (point.index, result.iteration) == (1, 1):
                    os._exit(9)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    # It really was WAL and the dead writer never checkpointed: the data is only in the log.
    assert os.path.getsize(str(db) + "-wal") > 0
    with ResultStore(db) as store:
        got = store.load_run("run-20261122-1")
    assert got.status == "running"
    assert [(r.point, r.iteration) for r in got.results] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Events fire from gRPC threads: 8 threads x 25 iterations all land, none interleave."""
    run = make_run()
    _, windows = next(sweep(run))
    template = windows[0][3]
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.save_run(run)

        def writer(t: int) -> None:
            for i in range(25):
                r = IterationResult(**{**vars(template), "iteration": t * 100 + i, "window_id": f"w{t}-{i}"})
                store.save_iteration(r)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        got = store.load_run(run.run_id).results
    assert len(got) == 200 and all(len(r.per_node) == 2 for r in got)
    assert sum(r.kernel or 0 for r in got) == 200 * (template.kernel or 0)
