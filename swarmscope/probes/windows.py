"""A probe's measurement windows: open (snapshot), close (exact deltas per node), kept answers.

    windows = ProbeWindows(programs, probe_id="h-1", node_name="n1", spans=ProbeSpans(...))
    ack = windows.open(cmd.open)          # pb.WindowAck; configures programs, snapshots them
    readings = windows.close(cmd.close)   # [pb.Reading], one per node of the window

The agent (probes/agent.py) keeps the session with the controller; this is what it answers with.
Open windows outlive a session, so a CloseWindow on the next session still gets its delta; an
OpenWindow sent again is acknowledged again without a new snapshot, and a CloseWindow sent
again gets the readings it got the first time (the last ``MAX_CLOSED_WINDOWS`` are kept).
A node given by ``cgroup_path`` with ``cgroup_id`` 0 is resolved here (ids are node-local
inode numbers); one that does not resolve gets a Reading with ``error`` and no counters. A
program that cannot be read yields Readings with ``error`` set, never silent zeros; bad options
fail the ack (naming the key) and the window reads nothing.
Caveat: options apply to programs, not windows: a window whose options change a program while
another window reading it is open marks that other window's readings with an error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swarmscope.core.errors import ConfigError, IncompleteSamplesError, SwarmscopeError
from swarmscope.core.sys import sentinel
from swarmscope.core.sys.cgroups import resolve_cgroup_id
from swarmscope.probes import window_span
from swarmscope.probes.programs.base import Program, Snapshot, delta_by_node
from swarmscope.probes.programs.params import window_options
from swarmscope.probes.spans import ProbeSpans, WindowSpan
from swarmscope.v1 import probe_pb2 as pb

if TYPE_CHECKING:  # imported only where there is a kubelet (probes.cli.pod_index): ~1 MiB
    from swarmscope.probes.pods import PodIndex

log = logging.getLogger(__name__)

# Windows opened but never closed (a controller that died mid-window) are dropped, oldest
# first, beyond this many, so a long-lived probe does not grow without bound.
MAX_OPEN_WINDOWS = 256
# Readings of recently closed windows, for a CloseWindow the controller sends again because the
# answer was lost with a session.
MAX_CLOSED_WINDOWS = 64


@dataclass
class _Window:
    run_id: str
    window_id: str
    nodes: list[pb.NodeInfo]
    start_ns: int
    span: WindowSpan
    before: dict[str, Snapshot] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # by program
    node_errors: dict[str, str] = field(default_factory=dict)  # by node name (unresolvable cgroup)
    pods: dict[str, str] = field(default_factory=dict)  # by node name: "namespace/pod/container"


class ProbeWindows:
    """The windows of one probe (its loaded ``programs``, shared with the agent)."""

    def __init__(
        self,
        programs: dict[str, Program],
        *,
        probe_id: str,
        node_name: str,
        spans: ProbeSpans,
        pods: PodIndex | None = None,
    ):
        self._programs = programs
        self.probe_id = probe_id
        self.node_name = node_name
        self.spans = spans
        # cgroup path -> pod (the kubelet's directory names); None off Kubernetes.
        self.pods = pods
        self._told: set[tuple[str, str]] = set()  # (node, cgroup path) already logged
        self._windows: dict[tuple[str, str], _Window] = {}
        self._closed: OrderedDict[tuple[str, str], list[pb.Reading]] = OrderedDict()
        # The options each program was last configured with ({} = start-up settings; None =
        # unknown after a failed configure, so the next window configures it again).
        self._applied: dict[str, dict[str, Any] | None] = {}
        self._drain_stop = threading.Event()  # ends the rounds of the last window's drain

    def __bool__(self) -> bool:
        """True while a window is open."""
        return bool(self._windows)

    def open(self, cmd: pb.OpenWindow) -> pb.WindowAck:
        again = self._windows.get((cmd.run_id, cmd.window_id))
        if again is not None:
            # Sent again after a reconnect (our first ack was lost): keep the first snapshot.
            err = "; ".join(again.errors.values())
            return pb.WindowAck(
                run_id=cmd.run_id, window_id=cmd.window_id, ok=not err, error=err, unix_ns=again.start_ns
            )
        self._drain_stop.set()
        start = time.time_ns()
        # The window span is a child of the controller's window span (W3C traceparent).
        span = self.spans.start(
            "probe window",
            cmd.traceparent,
            start,
            {
                "swarmscope.run_id": cmd.run_id,
                "swarmscope.window_id": cmd.window_id,
                "swarmscope.probe_id": self.probe_id,
                "swarmscope.node": self.node_name,
            },
        )
        w = _Window(cmd.run_id, cmd.window_id, [], start, span)
        for n in list(cmd.nodes) or [pb.NodeInfo(name=self.node_name, cgroup_id=0)]:
            if n.cgroup_id == 0 and n.cgroup_path:
                # Only a path: cgroup ids are node-local inode numbers, so a remote controller
                # may name a cgroup by path and leave the id to the probe.
                try:
                    n = pb.NodeInfo(
                        name=n.name, cgroup_id=resolve_cgroup_id(n.cgroup_path), cgroup_path=n.cgroup_path
                    )
                except SwarmscopeError as e:
                    w.node_errors[n.name] = f"node {n.name}: {e}"
            w.nodes.append(n)
            self._attribute(w, n)
        names = list(cmd.programs) or list(self._programs)
        try:
            options = window_options(cmd.options, names, self._programs)
        except ConfigError as e:
            # Nothing is applied or read: readings under settings the controller did not ask
            # for would be mislabelled.
            w.errors["options"] = "bad options: " + "; ".join(f"{p.key}: {p.reason}" for p in e.problems)
            names = []
            options = {}
        for name in names:
            prog = self._programs.get(name)
            if prog is None:
                w.errors[name] = f"{name}: not loaded on this probe (loaded: {', '.join(self._programs)})"
                continue
            if not self._configure(w, name, prog, options.get(name, {})):
                continue
            try:
                open_window = getattr(prog, "open_window", None)  # WindowOpener programs (exec_count)
                if open_window is not None:
                    open_window([n for n in w.nodes if n.name not in w.node_errors])
                w.before[name] = prog.snapshot()
            except Exception as e:
                w.errors[name] = f"{name}: snapshot at open failed: {e}"
        self._windows[(cmd.run_id, cmd.window_id)] = w
        while len(self._windows) > MAX_OPEN_WINDOWS:
            stale = self._windows.pop(next(iter(self._windows)))
            stale.span.set_error("never closed")
            stale.span.end()
        err = "; ".join(w.errors.values())
        if err:
            log.warning("probe: window %s opened with errors: %s", cmd.window_id, err)
        return pb.WindowAck(run_id=cmd.run_id, window_id=cmd.window_id, ok=not err, error=err, unix_ns=start)

    def _attribute(self, w: _Window, n: pb.NodeInfo) -> None:
        """Name the pod a node's cgroup is (reading, span, one log line per node and path)."""
        if self.pods is None or not n.cgroup_path:
            return
        ref = self.pods.lookup(n.cgroup_path)
        if ref is None:
            return
        w.pods[n.name] = str(ref)
        w.span.set_attribute(f"swarmscope.pod.{n.name}", str(ref))
        if (n.name, n.cgroup_path) not in self._told:
            self._told.add((n.name, n.cgroup_path))
            log.info("probe: node %s cgroup %s (id %d) is pod %s", n.name, n.cgroup_path, n.cgroup_id, ref)

    def _configure(self, w: _Window, name: str, prog: Program, options: dict[str, Any]) -> bool:
        """Apply this window's options to ``prog`` if they differ from the last ones; False if it failed."""
        configure = getattr(prog, "configure", None)  # Configurable programs (procstat, map_update)
        # NodeScoped programs (flow_count) act on the targets of this probe's nodes only: the
        # same options for other nodes are a change too.
        scope = getattr(prog, "scope", None)
        nodes = [n for n in w.nodes if n.name not in w.node_errors]
        key = {**options, "(nodes)": sorted(n.cgroup_id for n in nodes)} if scope else options
        if configure is None or self._applied.get(name, {}) == key:
            return True
        for other in self._windows.values():
            if name in other.before:
                other.errors[name] = _join(
                    other.errors.get(name, ""), f"{name}: options changed by window {w.window_id} while open"
                )
        try:
            if scope:
                scope(nodes)
            configure(options)
        except Exception as e:
            self._applied[name] = None
            w.errors[name] = f"{name}: applying options failed: {e}"
            return False
        self._applied[name] = key
        return True

    def close(self, cmd: pb.CloseWindow) -> list[pb.Reading]:
        key = (cmd.run_id, cmd.window_id)
        if key in self._closed:  # sent again after a reconnect: the same answer
            return self._closed[key]
        readings = self._read_close(cmd)
        self._closed[key] = readings
        while len(self._closed) > MAX_CLOSED_WINDOWS:
            self._closed.popitem(last=False)
        return readings

    def read(self, cmd: pb.ReadWindow) -> list[pb.Reading]:
        """A window's counters so far (ReadWindow): the deltas from its open snapshot to now, per
        node. The window stays open with its snapshot untouched, so its close is still exact."""
        now = time.time_ns()
        w = self._windows.get((cmd.run_id, cmd.window_id))
        if w is None:
            return [self._not_open(cmd.run_id, cmd.window_id, now, "window is not open on this probe")]
        return self._readings(w, now, at_close=False)

    def _drain(self, cmd: pb.CloseWindow, readings: list[pb.Reading]) -> None:
        """The tracer under test's drain on this node: sentinels pinned to each CPU, after the
        snapshot (this container is no node, so they are never counted); the numbers go in the
        reading of this probe's own node, where the controller looks for them in that node's
        stream. Its later rounds end when the next window opens here."""
        self._drain_stop.set()  # an earlier window's rounds
        self._drain_stop = threading.Event()
        try:
            done = sentinel.drain(cmd.drain_prefix, cmd.drain_from, cmd.drain_rounds, self._drain_stop)
        except (SwarmscopeError, OSError) as e:  # the controller reports the node as undrained
            log.warning("probe: window %s: drain sentinels failed: %s", cmd.window_id, e)
            return
        for r in readings:
            if r.node == self.node_name:
                r.drained.extend(done)

    def _not_open(self, run_id: str, window_id: str, now: int, why: str) -> pb.Reading:
        return pb.Reading(
            run_id=run_id,
            window_id=window_id,
            probe_id=self.probe_id,
            node=self.node_name,
            end_unix_ns=now,
            error=why,
        )

    def _read_close(self, cmd: pb.CloseWindow) -> list[pb.Reading]:
        end = time.time_ns()
        w = self._windows.pop((cmd.run_id, cmd.window_id), None)
        if w is None:
            return [self._not_open(cmd.run_id, cmd.window_id, end, "window was never opened on this probe")]
        readings = self._readings(w, end, at_close=True)
        if cmd.drain_prefix:
            self._drain(cmd, readings)
        window_span.annotate(w.span, readings, end)
        if any(r.error for r in readings):
            w.span.set_error("a reading has an error")
        w.span.end(end_time=end)
        return readings

    def _readings(self, w: _Window, end: int, at_close: bool) -> list[pb.Reading]:
        """One Reading per node of ``w``: the counters' deltas from its open snapshot to now,
        and at its close the gauges and samples of the programs that have them."""
        counters: dict[str, dict[str, int]] = {n.name: {} for n in w.nodes}
        gauges: dict[str, dict[str, float]] = {n.name: {} for n in w.nodes}
        samples: dict[str, list[pb.Sample]] = {n.name: [] for n in w.nodes}
        errors = dict(w.errors)
        # A node whose cgroup could not be resolved gets no counters (never the host's).
        measurable = [n for n in w.nodes if n.name not in w.node_errors]
        for name, before in w.before.items():
            prog = self._programs[name]
            try:
                per_node = delta_by_node(before, prog.snapshot(), measurable, prog.counters)
            except Exception as e:
                errors[name] = f"{name}: read {'at close' if at_close else 'so far'} failed: {e}"
                continue
            for node, cs in per_node.items():
                counters[node].update(cs)
            if not at_close:
                continue
            window_gauges = getattr(prog, "window_gauges", None)  # GaugeSource programs (procstat)
            if window_gauges is not None:
                try:
                    for node, gs in window_gauges(w.start_ns, end, measurable).items():
                        gauges[node].update(gs)
                except Exception as e:
                    errors[name] = f"{name}: gauges at close failed: {e}"
            # SampleSource programs (map_update, exec_count)
            window_samples = getattr(prog, "window_samples", None)
            if window_samples is not None:
                try:
                    got = window_samples(w.start_ns, end, measurable)
                except IncompleteSamplesError as e:  # what it has, with the reason it is not all
                    got = e.samples
                    errors[name] = _join(errors.get(name, ""), str(e))
                except Exception as e:
                    got = {}
                    errors[name] = _join(errors.get(name, ""), f"{name}: samples at close failed: {e}")
                for node, ss in got.items():
                    samples[node] += [
                        pb.Sample(
                            series=x.series,
                            start_ns=x.start_ns,
                            end_ns=x.end_ns,
                            value=x.value,
                            labels=x.labels,
                        )
                        for x in ss
                    ]
        return [
            pb.Reading(
                run_id=w.run_id,
                window_id=w.window_id,
                probe_id=self.probe_id,
                node=n.name,
                counters=counters[n.name],
                gauges=gauges[n.name],
                samples=samples[n.name],
                start_unix_ns=w.start_ns,
                end_unix_ns=end,
                error="; ".join(
                    [*([w.node_errors[n.name]] if n.name in w.node_errors else []), *errors.values()]
                ),
                pod=w.pods.get(n.name, ""),
            )
            for n in w.nodes
        ]


def _join(*errors: str) -> str:
    return "; ".join(e for e in errors if e)
