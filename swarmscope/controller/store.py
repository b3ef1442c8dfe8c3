"""The results store: every measurement of every run, in one SQLite file per output directory.

    store = ResultStore(default_db_path("results/"))    # results/swarmscope.sqlite
    store.attach(events)                                # a write per RunEvents hook
    ...                                                 # the run fires its events
    stored = store.load_run(run.run_id)                 # RunInfo + points + IterationResults
    stored.results[0].to_json()                         # identical to what was fired

Tables: ``runs``, ``points``, ``windows``, ``readings`` (raw ``ProbeReading``), ``iterations``,
``node_counts`` (the three numbers per node, as integer columns so they can be queried with
plain SQL) and ``sections`` (scenario-specific report data as JSON, see :meth:`add_section`).

Every event is its own committed transaction in WAL mode, so a controller that dies mid-run
keeps everything measured up to that point (its run then reads back with status "running").
``synchronous=NORMAL`` survives a process crash, not a power cut: that is the trade we want.

Caveats: one connection per store guarded by a lock, shared by the threads/greenlets that fire
events; other processes may read the file (``swarmscope report``) while a run writes it.
``params``, ``config``, ``flags`` and ``extra`` are stored as JSON, so tuples come back as lists.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from swarmscope.controller import store_types as ty
from swarmscope.controller.model import (
    IterationResult,
    NodeCount,
    PointInfo,
    ProbeReading,
    RunInfo,
    WindowInfo,
)
from swarmscope.core.errors import ResultsError
from swarmscope.core.sys.trust import check_store

DB_NAME = "swarmscope.sqlite"
STATUSES = ("ok", "failed", "interrupted")
RUNNING = "running"  # no run_finished recorded: still running, or the controller died

# Keys of report.json that a scenario section must not shadow (sections are merged at the top).
RESERVED_SECTION_NAMES = frozenset(
    {
        "schema",
        "run_id",
        "scenario",
        "metric",
        "trace_id",
        "started",
        "started_ns",
        "finished",
        "finished_ns",
        "duration_s",
        "status",
        "run_dir",
        "config",
        "points",
        "flags",
        "sections",
    }
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    scenario TEXT NOT NULL,
    metric TEXT NOT NULL,
    config TEXT NOT NULL,
    started_ns INTEGER NOT NULL,
    finished_ns INTEGER,
    status TEXT NOT NULL DEFAULT 'running',
    run_dir TEXT NOT NULL DEFAULT '',
    trace_id TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS points (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    idx INTEGER NOT NULL,
    params TEXT NOT NULL,
    iterations INTEGER NOT NULL,
    started_ns INTEGER,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS windows (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    window_id TEXT NOT NULL,
    point INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    nodes TEXT NOT NULL,
    opened_ns INTEGER NOT NULL,
    closed_ns INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    missing TEXT NOT NULL,
    PRIMARY KEY (run_id, window_id)
);
CREATE TABLE IF NOT EXISTS readings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    window_id TEXT NOT NULL,
    probe_id TEXT NOT NULL,
    node TEXT NOT NULL,
    counters TEXT NOT NULL,
    gauges TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    error TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS readings_window ON readings(run_id, window_id);
CREATE TABLE IF NOT EXISTS iterations (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    point INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    window_id TEXT NOT NULL,
    params TEXT NOT NULL,
    started_ns INTEGER NOT NULL,
    ended_ns INTEGER NOT NULL,
    tracer_lost INTEGER,
    flags TEXT NOT NULL,
    extra TEXT NOT NULL,
    PRIMARY KEY (run_id, point, iteration)
);
CREATE TABLE IF NOT EXISTS node_counts (
    run_id TEXT NOT NULL,
    point INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    node TEXT NOT NULL,
    generated INTEGER,
    kernel INTEGER,
    reported INTEGER,
    reported_lost INTEGER,
    missing TEXT NOT NULL,
    rate REAL,
    pod TEXT,
    PRIMARY KEY (run_id, point, iteration, seq)
);
CREATE TABLE IF NOT EXISTS sections (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    renderer TEXT,  -- unused: stores before issue 18 named code here; never read (see report.py)
    PRIMARY KEY (run_id, name)
);
"""


def default_db_path(out_dir: str | os.PathLike[str]) -> str:
    """One DB for all runs of an output directory: ``<out>/swarmscope.sqlite``."""
    return os.path.join(os.fspath(out_dir), DB_NAME)


def run_dir_for(out_dir: str | os.PathLike[str], run_id: str) -> str:
    """A run's own directory (report, plots): ``<out>/<run_id>/``."""
    return os.path.join(os.fspath(out_dir), run_id)


def _dumps(value: Any, strict: bool = False) -> str:
    # sort_keys: the stored text is stable, so two stores of the same run compare equal.
    # Not strict (config, params, extra): a Path or enum becomes its str() rather than losing
    # the whole event; sections are strict so their author hears about it.
    if strict:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False, default=str)
    except ValueError:  # NaN/inf (a 0/0 rate): stored as null, report.json stays valid JSON
        return json.dumps(_finite(value), sort_keys=True, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


@dataclass
class Section:
    name: str
    data: Any


@dataclass
class StoredRun:
    """A run as read back from the store."""

    run: RunInfo
    status: str  # "ok" | "failed" | "interrupted" | "running"
    finished_ns: int | None
    points: list[PointInfo]
    results: list[IterationResult]  # ordered by (point, iteration)
    sections: list[Section] = field(default_factory=list)

    def results_for(self, point: int) -> list[IterationResult]:
        return [r for r in self.results if r.point == point]


class ResultStore:
    """SQLite results store; see the module doc. Usable as a context manager."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        check_store(self.path)
        try:
            os.makedirs(parent, exist_ok=True)
            # check_same_thread=False: events fire from gRPC threads and greenlets; _lock
            # serialises them on the one connection.
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(node_counts)")}
            if "pod" not in cols:  # a store written before pod attribution
                self._db.execute("ALTER TABLE node_counts ADD COLUMN pod TEXT")
        except (OSError, sqlite3.Error) as e:
            raise ResultsError(f"cannot open the results store {self.path}: {e}") from e
        self._lock = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction (the connection's context manager commits/rolls back)."""
        with self._lock:
            try:
                with self._db:
                    yield self._db
            except sqlite3.Error as e:
                raise ResultsError(f"results store {self.path}: {e}") from e

    # -- writes (one per event) ------------------------------------------------------------

    def attach(self, events: Any) -> None:
        """Subscribe to a :class:`swarmscope.core.events.RunEvents`: a committed write per event."""
        events.run_started.add_listener(self._on_run_started)
        events.point_started.add_listener(self._on_point_started)
        events.window_closed.add_listener(self._on_window_closed)
        events.iteration_done.add_listener(self._on_iteration_done)
        events.run_finished.add_listener(self._on_run_finished)

    def detach(self, events: Any) -> None:
        events.run_started.remove_listener(self._on_run_started)
        events.point_started.remove_listener(self._on_point_started)
        events.window_closed.remove_listener(self._on_window_closed)
        events.iteration_done.remove_listener(self._on_iteration_done)
        events.run_finished.remove_listener(self._on_run_finished)

    def _on_run_started(self, *, run: RunInfo, **_: Any) -> None:
        self.save_run(run)

    def _on_point_started(self, *, run: RunInfo, point: PointInfo, **_: Any) -> None:
        self.save_point(run.run_id, point, started_ns=time.time_ns())

    def _on_window_closed(
        self,
        *,
        run: RunInfo,
        window: WindowInfo,
        readings: list[ProbeReading],
        missing: list[str] | None = None,
        **_: Any,
    ) -> None:
        self.save_window(window, readings, missing or [])

    def _on_iteration_done(self, *, run: RunInfo, result: IterationResult, **_: Any) -> None:
        self.save_iteration(result)

    def _on_run_finished(self, *, run: RunInfo, status: str, **_: Any) -> None:
        self.finish_run(run.run_id, status)

    def save_run(self, run: RunInfo) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (run_id, scenario, metric, config, started_ns, run_dir, trace_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET scenario=excluded.scenario,"
                " metric=excluded.metric, config=excluded.config, started_ns=excluded.started_ns,"
                " run_dir=excluded.run_dir, trace_id=excluded.trace_id",
                (
                    run.run_id,
                    run.scenario,
                    run.metric,
                    _dumps(run.config),
                    run.started_ns,
                    run.run_dir,
                    run.trace_id,
                ),
            )

    def save_point(self, run_id: str, point: PointInfo, started_ns: int | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO points (run_id, idx, params, iterations, started_ns)"
                " VALUES (?, ?, ?, ?, ?)",
                (run_id, point.index, _dumps(point.params), point.iterations, started_ns),
            )

    def save_window(self, window: WindowInfo, readings: list[ProbeReading], missing: list[str]) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO windows (run_id, window_id, point, iteration, nodes,"
                " opened_ns, closed_ns, traceparent, missing) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    window.run_id,
                    window.window_id,
                    window.point,
                    window.iteration,
                    _dumps(window.nodes),
                    window.opened_ns,
                    window.closed_ns,
                    window.traceparent,
                    _dumps(list(missing)),
                ),
            )
            # A window closed twice (a retry) replaces its readings rather than doubling them.
            db.execute(
                "DELETE FROM readings WHERE run_id = ? AND window_id = ?", (window.run_id, window.window_id)
            )
            db.executemany(
                "INSERT INTO readings (run_id, window_id, probe_id, node, counters, gauges,"
                " start_ns, end_ns, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        window.run_id,
                        window.window_id,
                        r.probe_id,
                        r.node,
                        _dumps(r.counters),
                        _dumps(r.gauges),
                        r.start_ns,
                        r.end_ns,
                        r.error,
                    )
                    for r in readings
                ],
            )

    def save_iteration(self, result: IterationResult) -> None:
        key = (result.run_id, result.point, result.iteration)
        with self._tx() as db:
            # The point row normally comes from point_started; make sure it exists anyway so a
            # result is never orphaned (iterations unknown: 0).
            db.execute(
                "INSERT OR IGNORE INTO points (run_id, idx, params, iterations) VALUES (?, ?, ?, 0)",
                (result.run_id, result.point, _dumps(result.params)),
            )
            db.execute(
                "INSERT OR REPLACE INTO iterations (run_id, point, iteration, window_id, params,"
                " started_ns, ended_ns, tracer_lost, flags, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *key,
                    result.window_id,
                    _dumps(result.params),
                    result.started_ns,
                    result.ended_ns,
                    result.tracer_lost,
                    _dumps(list(result.flags)),
                    _dumps(result.extra),
                ),
            )
            db.execute("DELETE FROM node_counts WHERE run_id = ? AND point = ? AND iteration = ?", key)
            db.executemany(
                "INSERT INTO node_counts (run_id, point, iteration, seq, node, generated, kernel,"
                " reported, reported_lost, missing, rate, pod) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        *key,
                        seq,
                        n.node,
                        n.generated,
                        n.kernel,
                        n.reported,
                        n.reported_lost,
                        _dumps(list(n.missing)),
                        n.rate,
                        n.pod,
                    )
                    for seq, n in enumerate(result.per_node)
                ],
            )

    def finish_run(self, run_id: str, status: str, finished_ns: int | None = None) -> None:
        if status not in STATUSES:
            raise ResultsError(f"run status must be one of {', '.join(STATUSES)}, not {status!r}")
        with self._tx() as db:
            cur = db.execute(
                "UPDATE runs SET status = ?, finished_ns = ? WHERE run_id = ?",
                (status, finished_ns if finished_ns is not None else time.time_ns(), run_id),
            )
            if cur.rowcount == 0:
                raise ResultsError(f"run {run_id!r} is not in {self.path} (run_started never stored)")

    def add_section(self, run_id: str, name: str, data: Any) -> None:
        """Store a scenario-specific report section (JSON: a dict, or a list of rows).

        It appears in report.json under ``sections[name]`` and at the top level as ``name``
        (so ``add_section(run_id, "steps", [...])`` gives ``report["steps"]``). It is drawn in
        report.html by the renderer registered under ``name`` in the code
        (``report.register_section``), never by anything named in the store. Storing the same
        name again replaces it.
        """
        if name in RESERVED_SECTION_NAMES or not name:
            raise ResultsError(f"section name {name!r} is reserved by report.json; pick another")
        try:
            text = _dumps(data, strict=True)
        except (TypeError, ValueError) as e:
            raise ResultsError(f"section {name!r} is not JSON-serialisable: {e}") from e
        with self._tx() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise ResultsError(f"run {run_id!r} is not in {self.path}")
            db.execute(
                "INSERT OR REPLACE INTO sections (run_id, name, data) VALUES (?, ?, ?)",
                (run_id, name, text),
            )

    # -- reads -----------------------------------------------------------------------------

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise ResultsError(f"results store {self.path}: {e}") from e

    def _rows(
        self, table: str, sql: str, args: tuple[Any, ...], *cols: tuple[str, ty.Kind]
    ) -> list[tuple[Any, ...]]:
        """``SELECT sql``, JSON columns decoded, every value of the type ``cols`` says (ResultsError)."""
        return ty.typed(self.path, table, self._query("SELECT " + sql, args), *cols)

    def run_ids(self) -> list[str]:
        """All runs in the store, oldest first."""
        return [r[0] for r in self._query("SELECT run_id FROM runs ORDER BY started_ns, run_id")]

    def has_run(self, run_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def load_run(self, run_id: str) -> StoredRun:
        rows = self._query(
            "SELECT run_id, scenario, metric, config, started_ns, run_dir, trace_id, status,"
            " finished_ns FROM runs WHERE run_id = ?",
            (run_id,),
        )
        if not rows:
            known = self.run_ids()
            hint = f"; runs stored: {', '.join(known[-5:])}" if known else "; the store holds no runs"
            raise ResultsError(f"run {run_id!r} is not in {self.path}{hint}")
        rid, scenario, metric, config, started_ns, run_dir, trace_id, status, finished_ns = ty.typed(
            self.path, "runs", rows, ("run_id", ty.NAME), ("scenario", ty.STR), ("metric", ty.STR),
            ("config", ty.DICT), ("started_ns", ty.INT), ("run_dir", ty.STR), ("trace_id", ty.STR),
            ("status", ty.STR), ("finished_ns", ty.INT_OR_NULL),
        )[0]  # fmt: skip
        run = RunInfo(
            run_id=rid,
            scenario=scenario,
            metric=metric,
            config=config,
            started_ns=started_ns,
            run_dir=run_dir,
            trace_id=trace_id,
        )
        points = [
            PointInfo(index=i, params=p, iterations=n)
            for i, p, n in self._rows(
                "points", "idx, params, iterations FROM points WHERE run_id = ? ORDER BY idx", (run_id,),
                ("idx", ty.INT), ("params", ty.DICT), ("iterations", ty.INT),
            )
        ]  # fmt: skip
        nodes: dict[tuple[int, int], list[NodeCount]] = {}
        for pt, it, node, gen, ker, rep, rlost, missing, rate, pod in self._rows(
            "node_counts",
            "point, iteration, node, generated, kernel, reported, reported_lost, missing, rate, pod"
            " FROM node_counts WHERE run_id = ? ORDER BY point, iteration, seq",
            (run_id,),
            ("point", ty.INT), ("iteration", ty.INT), ("node", ty.STR), ("generated", ty.INT_OR_NULL),
            ("kernel", ty.INT_OR_NULL), ("reported", ty.INT_OR_NULL), ("reported_lost", ty.INT_OR_NULL),
            ("missing", ty.STR_LIST), ("rate", ty.NUM_OR_NULL), ("pod", ty.STR_OR_NULL),
        ):  # fmt: skip
            nodes.setdefault((pt, it), []).append(
                NodeCount(
                    node=node,
                    generated=gen,
                    kernel=ker,
                    reported=rep,
                    reported_lost=rlost,
                    missing=missing,
                    rate=rate,
                    pod=pod,
                )
            )
        results = [
            IterationResult(
                run_id=run_id,
                point=pt,
                params=params,
                iteration=it,
                window_id=wid,
                started_ns=s,
                ended_ns=e,
                per_node=nodes.get((pt, it), []),
                tracer_lost=lost,
                flags=flags,
                extra=extra,
            )
            for pt, it, wid, params, s, e, lost, flags, extra in self._rows(
                "iterations",
                "point, iteration, window_id, params, started_ns, ended_ns, tracer_lost, flags,"
                " extra FROM iterations WHERE run_id = ? ORDER BY point, iteration",
                (run_id,),
                ("point", ty.INT), ("iteration", ty.INT), ("window_id", ty.STR), ("params", ty.DICT),
                ("started_ns", ty.INT), ("ended_ns", ty.INT), ("tracer_lost", ty.INT_OR_NULL),
                ("flags", ty.STR_LIST), ("extra", ty.DICT),
            )
        ]  # fmt: skip
        sections = [
            Section(name=n, data=d)
            for n, d in self._rows(
                "sections", "name, data FROM sections WHERE run_id = ? ORDER BY name", (run_id,),
                ("name", ty.STR), ("data", ty.JSON),
            )
        ]  # fmt: skip
        return StoredRun(
            run=run,
            status=status,
            finished_ns=finished_ns,
            points=points,
            results=results,
            sections=sections,
        )

    def load_windows(self, run_id: str) -> list[tuple[WindowInfo, list[str]]]:
        """Every stored window of a run with the sources that were missing from it."""
        return [
            (
                WindowInfo(
                    run_id=run_id,
                    window_id=wid,
                    point=pt,
                    iteration=it,
                    nodes=json.loads(nodes),
                    opened_ns=o,
                    closed_ns=c,
                    traceparent=tp,
                ),
                json.loads(missing),
            )
            for wid, pt, it, nodes, o, c, tp, missing in self._query(
                "SELECT window_id, point, iteration, nodes, opened_ns, closed_ns, traceparent, missing"
                " FROM windows WHERE run_id = ? ORDER BY point, iteration, window_id",
                (run_id,),
            )
        ]

    def load_readings(self, run_id: str, window_id: str | None = None) -> list[ProbeReading]:
        """Raw probe readings of a run (or of one window), in arrival order."""
        sql = (
            "SELECT probe_id, node, counters, gauges, start_ns, end_ns, error FROM readings WHERE run_id = ?"
        )
        args: tuple[Any, ...] = (run_id,)
        if window_id is not None:
            sql += " AND window_id = ?"
            args += (window_id,)
        return [
            ProbeReading(
                probe_id=p,
                node=n,
                counters=json.loads(c),
                gauges=json.loads(g),
                start_ns=s,
                end_ns=e,
                error=err,
            )
            for p, n, c, g, s, e, err in self._query(sql + " ORDER BY id", args)
        ]
