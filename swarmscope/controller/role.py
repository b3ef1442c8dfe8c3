"""The controller role: one object that owns the master side of a run.

    ctl = ControllerRole(run, fleet, events, reconcile=kind_rule, tracer=None)
    win = ctl.open_window(point, iteration, node_names, programs={"exec_count": {}})
    ... workers run the window's load and send their results (add_results) ...
    result = ctl.close_window(win, point, timeout_s=31)   # probes read, tracer drained, reconciled

It keeps the nodes workers announced (name → host, cgroup id, comm), asks each node's probe for
its reading (the kind's programs, with their options), reconciles with the kind's rule, and
fires the run's events — the store, the report, the Prometheus metrics and the OTel spans are
listeners of those, not special cases. Made once per process by swarmscope.app.process; the Locust
plug-in (free-running tests) and the sweep (``swarmscope run``) both drive it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swarmscope.controller.model import (
    IterationResult,
    PointInfo,
    RunInfo,
    WindowInfo,
    WindowOutcome,
)
from swarmscope.controller.reconcile import name_pods
from swarmscope.core.errors import FleetError
from swarmscope.core.events import RunEvents
from swarmscope.v1 import probe_pb2 as pb

if TYPE_CHECKING:  # the fleet modules bring gRPC: the role needs only their types
    from swarmscope.controller.fleet import Fleet
    from swarmscope.controller.fleet_proc import FleetProcess

log = logging.getLogger(__name__)

# (window, point, results per node, readings, tracer result, hosts whose probe is missing)
Reconcile = Callable[[WindowOutcome], IterationResult]  # the kind's rule, its config bound


@dataclass
class NodeDesc:
    """A node as a worker announced it."""

    name: str
    host: str
    cgroup_id: int
    cgroup_path: str
    comm: str
    worker: str = ""  # Locust client id of the worker that drives it


class ControllerRole:
    def __init__(
        self,
        run: RunInfo,
        fleet: Fleet | FleetProcess,
        events: RunEvents,
        reconcile: Reconcile,
        tracer: Any | None = None,
        window_timeout_s: float = 30.0,
    ):
        self.run = run
        self.fleet = fleet
        self.events = events
        self.reconcile = reconcile
        self.tracer = tracer
        self.window_timeout_s = window_timeout_s
        self.nodes: dict[str, NodeDesc] = {}
        self.worker_info: dict[str, dict[str, Any]] = {}  # Locust client id -> its set-up info
        self.worker_errors: dict[str, str] = {}  # Locust client id -> why it could not set up
        self.worker_slots: dict[str, int] = {}  # Locust client id -> its index (names its nodes)
        self.results: list[IterationResult] = []
        self._lock = threading.Lock()
        self._generated: dict[str, dict[str, dict[str, Any]]] = {}
        self._reporters: dict[str, set[str]] = {}  # window id -> workers that reported
        self._unopened: dict[str, dict[str, str]] = {}  # window id -> {host: why its probe is not in it}
        self._refused: list[str] = []  # workers' claims refused since the last window closed

    # -- nodes announced by workers ------------------------------------------------------------
    def add_nodes(
        self,
        worker: str,
        nodes: list[dict[str, Any]],
        info: dict[str, Any] | None = None,
        alive: Callable[[str], bool] | None = None,
    ) -> list[str]:
        """Take the nodes ``worker`` (its authenticated connection) announced; a name another
        live worker holds is refused (logged, and in the next window's ``extra.refused``).
        Returns the refusals."""
        refused = []
        with self._lock:
            self.worker_info[worker] = dict(info or {})
            for n in nodes:
                held = self.nodes.get(n["name"])
                if held is not None and held.worker != worker and (alive is None or alive(held.worker)):
                    refused.append(
                        f"worker {worker} announced node {n['name']}, which worker {held.worker} "
                        "holds: refused"
                    )
                    continue
                self.nodes[n["name"]] = NodeDesc(
                    name=n["name"],
                    host=n["host"],
                    cgroup_id=int(n["cgroup_id"]),
                    cgroup_path=n.get("cgroup_path", ""),
                    comm=n.get("comm", ""),
                    worker=worker,
                )
            self._refused.extend(refused)
        for why in refused:
            log.error("%s", why)
        return refused

    def workers_of(self, node_names: list[str]) -> set[str]:
        with self._lock:
            return {self.nodes[n].worker for n in node_names if n in self.nodes}

    # -- results from workers ---------------------------------------------------------------
    def add_results(
        self, window_id: str, worker: str, per_node: dict[str, dict[str, Any]], spans: bytes = b""
    ) -> None:
        """A worker's results for a window, with its spans of the window (OTLP request bytes).
        Only the nodes that worker announced (and holds) are taken; the others are refused
        (logged, and in the window's ``extra.refused``)."""
        if spans:
            self.events.spans_received.fire(run=self.run, window_id=window_id, spans=[spans])
        with self._lock:
            mine = {n: r for n, r in per_node.items() if n in self.nodes and self.nodes[n].worker == worker}
            refused = [
                f"worker {worker} sent results for node {n}, which it did not announce: refused"
                for n in per_node
                if n not in mine
            ]
            self._generated.setdefault(window_id, {}).update(mine)
            self._reporters.setdefault(window_id, set()).add(worker)
            self._refused.extend(refused)
        for why in refused:
            log.error("window %s: %s", window_id, why)

    def wait_generated(
        self, window_id: str, workers: set[str], timeout_s: float, alive: Callable[[str], bool] | None = None
    ) -> set[str]:
        """Wait until every live worker in ``workers`` reported for the window; return the silent ones."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                silent = workers - self._reporters.get(window_id, set())
            if not silent or time.monotonic() >= deadline:
                return silent
            if alive is not None and not any(alive(w) for w in silent):
                return silent  # only dead workers left: do not wait out the timeout
            time.sleep(0.02)

    # -- windows ----------------------------------------------------------------------------
    def open_window(
        self,
        point: PointInfo,
        iteration: int,
        node_names: list[str],
        programs: dict[str, dict[str, str]] | None = None,
    ) -> WindowInfo:
        """Open a window on the nodes' probes with ``programs`` ({name: {option: value}})."""
        unknown = [n for n in node_names if n not in self.nodes]
        if unknown:
            raise FleetError(f"no worker announced node(s) {unknown}; known: {sorted(self.nodes)}")
        # A node whose worker died is still measured (and shows up missing "worker").
        win = WindowInfo(
            run_id=self.run.run_id,
            window_id=f"{self.run.run_id}-p{point.index}-i{iteration}-{uuid.uuid4().hex[:6]}",
            point=point.index,
            iteration=iteration,
            nodes=list(node_names),
        )
        self.events.window_opening.fire(run=self.run, window=win)
        if self.tracer is not None:
            from swarmscope.controller.tracers.base import NodeKey

            keys = [NodeKey(n, self.nodes[n].cgroup_id, self.nodes[n].comm) for n in node_names]
            self.tracer.start(win.window_id, keys)
        by_host: dict[str, list[pb.NodeInfo]] = {}
        for n in node_names:
            d = self.nodes[n]
            by_host.setdefault(d.host, []).append(
                pb.NodeInfo(name=d.name, cgroup_id=d.cgroup_id, cgroup_path=d.cgroup_path)
            )
        progs = programs or {}
        # OpenWindow.options is one flat map: "<program>.<option>" -> text value.
        options = {f"{p}.{k}": str(v) for p, opts in progs.items() for k, v in opts.items()}
        try:
            problems = self.fleet.open_window(
                self.run.run_id,
                win.window_id,
                by_host,
                programs=sorted(progs),
                traceparent=win.traceparent,
                timeout_s=self.window_timeout_s,
                **({"options": options} if options else {}),
            )
        except Exception:
            if self.tracer is not None:
                self.tracer.stop()
            raise
        self._unopened[win.window_id] = problems
        win.opened_ns = time.time_ns()
        self.events.window_opened.fire(run=self.run, window=win)
        return win

    def close_window(
        self,
        win: WindowInfo,
        point: PointInfo,
        timeout_s: float = 30.0,
        alive: Callable[[str], bool] | None = None,
    ) -> IterationResult:
        """Close a window whose load has finished: wait for workers, read probes, drain the tracer."""
        workers = self.workers_of(win.nodes)
        silent = self.wait_generated(win.window_id, workers, timeout_s, alive)
        if silent:
            log.warning("window %s: no results from worker(s) %s", win.window_id, sorted(silent))
        win.closed_ns = time.time_ns()
        # A tracer that streams each node apart (ig-cluster) has every node's probe run its drain.
        drain_by = getattr(self.tracer, "node_drain", None)
        drain = drain_by() if drain_by is not None else None
        readings, missing = self.fleet.close_window(
            self.run.run_id,
            win.window_id,
            timeout_s=self.window_timeout_s,
            drain=drain,
        )
        if drain is not None:
            self.tracer.expect_drained({r.node: r.drained for r in readings if r.drained})  # type: ignore[union-attr]
        tracer_result = self.tracer.stop() if self.tracer is not None else None
        probe_spans = self.fleet.take_spans(win.window_id)
        if probe_spans:
            self.events.spans_received.fire(run=self.run, window_id=win.window_id, spans=probe_spans)
        with self._lock:
            generated = self._generated.pop(win.window_id, {})
            self._reporters.pop(win.window_id, None)
            refused, self._refused = self._refused, []
        self.events.window_closed.fire(run=self.run, window=win, readings=readings, missing=missing)
        result = self.reconcile(WindowOutcome(win, point, generated, readings, missing, tracer_result))
        name_pods(result, readings)
        if silent:
            result.extra["silent_workers"] = sorted(silent)
        # Probes that reconnected while the window was open (their readings were kept).
        reconnects = self.fleet.take_reconnects(win.window_id)
        if reconnects:
            result.extra["probe_reconnects"] = reconnects
        refused += self.fleet.take_refusals()
        if refused:
            result.extra["refused"] = refused
        unopened = self._unopened.pop(win.window_id, {})
        if unopened:
            result.extra["probe_problems"] = unopened
        self.results.append(result)
        self.events.iteration_done.fire(run=self.run, result=result)
        return result
