"""The worker role: the nodes this Locust process drives, and what it generated on each.

    role = WorkerRole.create(2, group="run-1a2b")   # made once per process by the exec kind
    role.nodes                                 # [SimNode("n1", ...), ...] or [the real node]
    result = role.burst(window_id, ["n1"], duration_s=1.0, concurrency=2)

Locally a node is a cgroup v2 child (a *simulated node*); in a cluster it is the real node the
worker runs on (``NODE_NAME``). Generated counts are exact: every burst's helper reports how many
execs really succeeded, and bursts still in flight when a test stops are stopped and waited for
before the totals are sent, so nothing generated is dropped from the count.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from swarmscope.core.errors import LoadGenError, SwarmscopeError
from swarmscope.core.node import node_host
from swarmscope.workers.driver import report_request

log = logging.getLogger(__name__)


@dataclass
class NodeTally:
    generated: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    bursts: int = 0
    errors: list[str] = field(default_factory=list)
    bogo_ops: int | None = None  # load: stress-ng -- its own count; generated = bogo + startup

    def add(self, result: Any, helper_execs: int = 0) -> None:
        self.generated += int(result.execs) + helper_execs
        if hasattr(result, "bogo_ops"):
            self.bogo_ops = (self.bogo_ops or 0) + int(result.bogo_ops)
        self.failed += int(result.failed)
        self.elapsed_s = max(self.elapsed_s, float(result.elapsed_s))
        self.bursts += 1

    def to_msg(self) -> dict[str, Any]:
        rate = self.generated / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return {
            "generated": self.generated,
            "failed": self.failed,
            "elapsed_s": self.elapsed_s,
            "rate": rate,
            "bursts": self.bursts,
            "errors": self.errors[:5],
            **({"bogo_ops": self.bogo_ops} if self.bogo_ops is not None else {}),
        }


def _caught(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, LoadGenError | None]:
    """``fn``'s result or its LoadGenError, returned: a greenlet that dies of one has gevent
    print a traceback, for a failure the window already reports (``worker-error``)."""
    try:
        return fn(*args, **kwargs), None
    except LoadGenError as e:
        return None, e


class WorkerRole:
    """Owns this process's nodes, running bursts and the per-window tallies."""

    def __init__(
        self,
        nodes: list[Any],
        tools: Any,
        group: str | None,
        pids_max: int,
        max_execs: int,
        load: str = "native",
        stress_ng_ops: int = 0,
    ):
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self.tools = tools
        self.group = group  # sim-node cgroup group, None for the real node
        self.pids_max = pids_max
        self.max_execs = max_execs
        self.host = node_host()
        self._lock = threading.Lock()
        self._tallies: dict[str, dict[str, NodeTally]] = {}
        self._inflight: dict[int, tuple[str, str, Any]] = {}  # id(handle) -> (window, node, handle)
        self._next_user = 0
        self.current_window = ""  # free-running tests: the window users' bursts count into
        self.tag = secrets.token_hex(2)
        # On a real node the storm runs in the worker's own cgroup, so the exec of the storm
        # helper itself is seen by the probe too: count it as generated (one per burst). A
        # simulated node's helper execs outside the node and then moves in.
        self.helper_execs = 0 if group is not None else 1
        # load: stress-ng -- Debian's stress-ng makes the bursts (workers/stress_ng.py); its own
        # exec into the node is in its result (STARTUP_EXECS), wherever the node is.
        self.load = load
        self.stress_ng_ops = stress_ng_ops
        self._stress_ng: Any = None
        if load == "stress-ng":
            from swarmscope.workers.stress_ng import StressNg

            self._stress_ng = StressNg.create()
            self.helper_execs = 0

    @classmethod
    def create(
        cls,
        sim_nodes: int,
        group: str,
        pids_max: int = 256,
        max_execs: int = 1_000_000,
        prefix: str = "",
        load: str = "native",
        stress_ng_ops: int = 0,
    ) -> WorkerRole:
        """Simulated nodes <prefix>n1..nN when ``sim_nodes`` > 0, else the real node (cluster mode)."""
        from swarmscope.workers import native, nodes

        tools = native.ensure_built()
        if sim_nodes > 0:
            names = [f"{prefix}n{i + 1}" for i in range(sim_nodes)]
            made = nodes.create_sim_nodes(group, names, pids_max=pids_max)
            return cls(made, tools, group, pids_max, max_execs, load, stress_ng_ops)
        return cls(
            [nodes.own_cgroup_node(node_host())], tools, None, pids_max, max_execs, load, stress_ng_ops
        )

    def close(self) -> None:
        self.stop_inflight()
        if self._stress_ng is not None:
            self._stress_ng.close()
        if self.group is not None:
            from swarmscope.workers import nodes

            nodes.destroy_sim_nodes(self.group)

    # -- node description sent to the controller -------------------------------------------
    def describe(self) -> list[dict[str, Any]]:
        return [n.describe(self.host, self.comm(n.name)) for n in self.nodes]

    def comm(self, node: str) -> str:
        """argv0 of the execs of ``node``, so tracers that print only comm can attribute them.

        It carries a per-process tag: two runs on one machine (or a test beside a run) must not
        share a comm, or a comm-only tracer (ig) would credit one run's execs to the other."""
        return f"s{self.tag}-{node}"[:15]

    def next_node(self) -> Any:
        """Round-robin node for a newly spawned user."""
        with self._lock:
            n = self.nodes[self._next_user % len(self.nodes)]
            self._next_user += 1
            return n

    # -- bursts ---------------------------------------------------------------------------
    def start(self, window_id: str, node: Any, duration_s: float, concurrency: int, rate: float = 0.0) -> Any:
        import gevent

        from swarmscope.workers import exec_storm

        # The spawn runs in a greenlet of its own: a user killed at test stop while the burst's
        # process is being started (gevent's Popen yields between fork and exec) would leave a
        # running burst nobody tracks, whose execs the kernel counts and the tally misses.
        if self._stress_ng is not None:
            spawn = gevent.spawn(
                _caught,
                self._stress_ng.start_burst,
                node,
                duration_s=duration_s,
                instances=concurrency,
                max_execs=self.max_execs,
                ops=self.stress_ng_ops,
                comm=self.comm(node.name),
            )
        else:
            spawn = gevent.spawn(
                _caught,
                exec_storm.start_burst,
                self.tools,
                node,
                duration_s=duration_s,
                concurrency=concurrency,
                max_execs=self.max_execs,
                argv0=self.comm(node.name),
                rate=rate,
            )
        try:
            handle, err = spawn.get()
        except gevent.GreenletExit:
            handle, _ = spawn.get()  # it exists (or failed): track it so test stop counts it
            if handle is not None:
                with self._lock:
                    self._inflight[id(handle)] = (window_id, node.name, handle)
                handle.stop()
            raise
        if err is not None:
            raise err
        with self._lock:
            self._inflight[id(handle)] = (window_id, node.name, handle)
        return handle

    def finish(self, handle: Any) -> Any:
        """Wait for a burst and add it to its window's tally (exactly once per handle)."""
        try:
            result = handle.wait()
        except LoadGenError as e:
            with self._lock:
                entry = self._inflight.pop(id(handle), None)
                if entry:
                    self._tally(entry[0], entry[1]).errors.append(str(e))
            raise
        with self._lock:
            entry = self._inflight.pop(id(handle), None)
            if entry is not None:
                self._tally(entry[0], entry[1]).add(result, self.helper_execs)
        return result

    def burst(
        self, window_id: str, node_names: list[str], duration_s: float, concurrency: int, rate: float = 0.0
    ) -> dict[str, Any]:
        """Burst on every listed node this process owns, concurrently; return the window's tally."""
        import gevent

        from swarmscope.workers import spans

        mine = [self.by_name[n] for n in node_names if n in self.by_name]
        handles, started, ended = [], {}, {}
        for node in mine:
            started[node.name] = time.time_ns()
            try:
                handles.append((node.name, self.start(window_id, node, duration_s, concurrency, rate)))
            except LoadGenError as e:
                with self._lock:
                    self._tally(window_id, node.name).errors.append(str(e))

        def finish_timed(name: str, h: Any) -> None:
            try:
                self.finish(h)
            finally:
                ended[name] = time.time_ns()

        jobs = [gevent.spawn(finish_timed, name, h) for name, h in handles]
        gevent.joinall(jobs, raise_error=False)
        for j in jobs:
            if j.exception is not None and not isinstance(j.exception, LoadGenError):
                log.error("burst failed: %s", j.exception)
        out = self.take(window_id, [n.name for n in mine])
        for name, t0 in started.items():
            tally = out[name]
            spans.record(
                window_id,
                f"burst {name}",
                t0,
                ended.get(name, t0),
                {
                    "swarmscope.node": name,
                    "swarmscope.generated": tally["generated"],
                    "swarmscope.failed": tally["failed"],
                    "swarmscope.concurrency": concurrency,
                    "swarmscope.rate": tally["rate"],
                    "swarmscope.error": "; ".join(tally["errors"]) or None,
                },
            )
        return out

    # -- the driver interface (workers.driver.Driver) -------------------------------------------
    def info(self) -> dict[str, Any]:
        return {}

    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any = None
    ) -> dict[str, Any]:
        """One burst on the listed nodes; each node's burst is one Locust request (type EXEC)."""
        t0 = time.perf_counter()
        per_node = self.burst(
            window_id,
            nodes,
            float(payload["duration_s"]),
            int(payload["concurrency"]),
            float(payload.get("rate", 0.0)),
        )
        for node, tally in per_node.items():
            err = SwarmscopeError(tally["errors"][0]) if tally["errors"] else None
            report_request(environment, "EXEC", f"burst {node}", t0, int(tally["generated"]), err)
        return per_node

    def stop_window(self, window_id: str) -> None:
        self.stop_inflight(window_id)

    def stop_inflight(self, window_id: str | None = None) -> None:
        """Stop bursts still running (test stop) and count what they generated."""
        with self._lock:
            entries = [e for e in self._inflight.values() if window_id is None or e[0] == window_id]
        for _, _, h in entries:
            h.stop()
        for _, _, h in entries:
            try:
                self.finish(h)
            except LoadGenError as e:
                log.error("stopping a burst failed: %s", e)

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        """Remove and return ``{node: tally}`` for a window (nodes with no burst report zero)."""
        with self._lock:
            tallies = self._tallies.pop(window_id, {})
        names = node_names if node_names is not None else [n.name for n in self.nodes]
        return {n: tallies.get(n, NodeTally()).to_msg() for n in names}

    def _tally(self, window_id: str, node: str) -> NodeTally:
        return self._tallies.setdefault(window_id, {}).setdefault(node, NodeTally())
