"""Registry program ``map_update``: BPF map-update bpf() calls per cgroup, (pid, cmd) and map id.

    prog = get_program("map_update"); prog.load()
    prog.snapshot()   # {cgroup_id: {"map_update.calls": n, "map_update.entries": m,
                      #              "map_update.elem.calls": ..., "map_update.pid.1234.elem.entries": ...,
                      #              "map_update.map.57.entries": ..., ...}} cumulative
    prog.configure({"map_update.pids": [1234]})      # this window: record pid 1234 only
    prog.configure({"map_update.nodes": True}); prog.open_window(nodes)  # or: the nodes' cgroups
    prog.window_samples(start_ns, end_ns, nodes)
    # {"n1": [Sample("map_update.call", enter_ns, exit_ns, entries, {"pid": "1234", "cmd": "elem",
    #                                                               "map_id": "57"}), ...]}
    prog.close()

Wraps :class:`swarmscope.probes.map_update.MapUpdateTracer` (bpf/map_update.bpf.c). Totals per
(tgid, cmd, cgroup) come from the kernel's per-CPU map and are exact. Per-map-id counters and
samples come from the ring-buffer events: the kernel knows only (tgid, fd), so a pump thread
drains the ring every ``poll_s`` and resolves fd -> map id through /proc/<tgid>/fdinfo while the
caller still holds the fd; a caller that exits or closes the fd within that time is counted
under ``map_update.map.unresolved.*``. Ring-buffer drops (host total, cgroup key 0) are
``map_update.ringbuf_dropped``: per-map counters are complete only while it stays 0.

Settings (``PARAMS``): ``map_update.pids`` restricts recording to those tgids (unset = every
process) and changes per window without a reload (a kernel-side switch); samples exist only for
a pid list. ``map_update.nodes`` records, and samples, the calls made in the window's nodes'
cgroups instead (set by :meth:`open_window`, after ``configure``): in a pod the worker knows its
cgroup but not its host pid, and every call's tgid here is the host's. A node of cgroup id 0
(the whole host) then records every process. One sample per call whose sys_exit_bpf falls in
the window (start/end_ns are bpf_ktime, CLOCK_MONOTONIC; the window's wall-clock bounds are
converted at close). Caveats:
``window_samples`` raises IncompleteSamplesError (with what it has) when the ring buffer dropped
events during the window, when more than ``map_update.max_samples`` calls happened (the first ones
are kept), or when retention evicted some; retained events older than the window being closed
are forgotten, so overlapping windows are only complete for the one that started last.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import IncompleteSamplesError, ProbeError
from swarmscope.core.sys.bpf import fd_map_id
from swarmscope.probes.map_update import CMD_UPDATE_BATCH, CMD_UPDATE_ELEM, MapUpdateTracer
from swarmscope.probes.programs.base import NodeLike, Sample, Snapshot
from swarmscope.probes.programs.params import startup_values

ENV_PIDS = "SWARMSCOPE_MAP_UPDATE_PIDS"
CMD_NAMES = {CMD_UPDATE_ELEM: "elem", CMD_UPDATE_BATCH: "batch"}
SERIES = "map_update.call"

PARAMS = [
    Field(
        "map_update.pids",
        list_of(int),
        None,
        "record only these PIDs (tgids, comma list), one sample per call; unset = every process, no samples",
        ENV_PIDS,
        min=1,
        nullable=True,
    ),
    Field(
        "map_update.max_samples",
        int,
        200_000,
        "most samples (calls) per window; more is reported as an error, the first ones are kept",
        "SWARMSCOPE_MAP_UPDATE_MAX_SAMPLES",
        min=1,
    ),
    Field(
        "map_update.ringbuf_pages",
        int,
        1024,
        "ring buffer size in pages (a power of two)",
        "SWARMSCOPE_MAP_UPDATE_RINGBUF_PAGES",
        check=lambda v: None if v > 0 and v & (v - 1) == 0 else "must be a power of two",
    ),
    Field(
        "map_update.nodes",
        bool,
        False,
        "record the calls made in the window's nodes' cgroups (ids resolved here), one sample per "
        "call, instead of map_update.pids (a worker in a pod cannot know its host pid)",
        "SWARMSCOPE_MAP_UPDATE_NODES",
    ),
]
WINDOW_PARAMS = frozenset({"map_update.pids", "map_update.max_samples", "map_update.nodes"})


class _Call(NamedTuple):
    """A retained ring-buffer event of a sampled pid (compact: many may be kept)."""

    exit_ns: int
    enter_ns: int
    tgid: int
    cmd: int
    map_id: str
    processed: int
    cgroup: int


def _cmd(cmd: int) -> str:
    return CMD_NAMES.get(cmd, str(cmd))


class MapUpdateCount:
    name: str = "map_update"
    counters: tuple[str, ...] = ("map_update.calls", "map_update.entries")

    def __init__(
        self,
        pids: Iterable[int] | None = None,
        poll_s: float = 0.05,
        max_samples: int = 200_000,
        ringbuf_pages: int = 1024,
        by_nodes: bool = False,
    ) -> None:
        self.tracer = MapUpdateTracer(pids=pids, ringbuf_pages=ringbuf_pages)
        self.poll_s = poll_s
        self._startup_pids = None if pids is None else list(self.tracer.pids or ())
        self._startup_max = max_samples
        self._startup_nodes = by_nodes
        self.by_nodes = by_nodes
        self.max_samples = max_samples
        # Calls of sampled pids, oldest first; bounded (evictions make a window incomplete).
        self._calls: collections.deque[_Call] = collections.deque()
        self._evicted_ns = 0  # latest exit_ns of a call dropped from _calls
        self._drop_marks: collections.deque[tuple[int, int]] = collections.deque(maxlen=4096)
        self._lock = threading.Lock()
        self._by_map: Snapshot = {}  # cgroup -> "map_update.map.<id>.{calls,entries}" cumulative
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._delivered = 0  # ring-buffer events consumed since load

    @property
    def _bpf(self) -> Any:
        """The pinned object (what probes.selfmetrics reads run times and map fill from)."""
        return self.tracer.bpf

    def ringbuf_stats(self) -> tuple[int, int, int]:
        """(delivered, dropped, counted in the map) for swarmscope_probe_ringbuf_* metrics."""
        with self._lock:
            if self.tracer.bpf is None:
                return (0, 0, 0)
            in_map = sum(t.calls for t in self.tracer.snapshot_by_cgroup().values())
            return (self._delivered, self.tracer.dropped(), in_map)

    @classmethod
    def from_env(cls) -> MapUpdateCount:
        v = startup_values("map_update", PARAMS)
        return cls(
            v["map_update.pids"],
            max_samples=v["map_update.max_samples"],
            ringbuf_pages=v["map_update.ringbuf_pages"],
            by_nodes=v["map_update.nodes"],
        )

    def configure(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - WINDOW_PARAMS
        if unknown:
            raise ProbeError(f"map_update: not per-window options: {', '.join(sorted(unknown))}")
        self.by_nodes = bool(options.get("map_update.nodes", self._startup_nodes))
        # By nodes: no pid of the host's is known; the cgroups come at open_window.
        pids = [] if self.by_nodes else options.get("map_update.pids", self._startup_pids)
        with self._lock:
            self.max_samples = int(options.get("map_update.max_samples", self._startup_max))
            if not self.by_nodes and self.tracer.cgroups:
                self._drain_locked()
                self.tracer.set_cgroups([])
            if self.tracer.bpf is None:
                self.tracer.pids = None if pids is None else list(pids)
            elif pids != self.tracer.pids:
                self._drain_locked()  # events so far belong to the old selection
                self.tracer.set_pids(pids)

    def open_window(self, nodes: Iterable[NodeLike]) -> None:
        """map_update.nodes: record the calls in these nodes' cgroups from now on (id 0, the
        whole host: every process)."""
        if not self.by_nodes:
            return
        ids = [int(n.cgroup_id) for n in nodes]
        with self._lock:
            if self.tracer.bpf is None:
                raise ProbeError("map_update: open_window before load()")
            pids: list[int] | None = None if 0 in ids else []
            cgroups = [i for i in ids if i]
            if pids != self.tracer.pids or cgroups != self.tracer.cgroups:
                self._drain_locked()  # events so far belong to the old selection
                self.tracer.set_pids(pids)
                self.tracer.set_cgroups(cgroups)

    def load(self) -> None:
        if self._thread is not None:
            return
        self.tracer.load()
        self._stop.clear()
        self._thread = threading.Thread(target=self._pump, name="map-update-pump", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._drain()
            except Exception:  # never kill the pump; the snapshot reports read failures
                continue

    def _drain(self) -> None:
        with self._lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        if self.tracer.bpf is None:
            return
        sampled = set(self.tracer.pids) if self.tracer.pids is not None else set()
        cgroups = set(self.tracer.cgroups)
        every = self.by_nodes and self.tracer.pids is None  # a whole-host node: all are its calls
        cap = 2 * self.max_samples  # room for one window past the limit, and the next one
        ids: dict[tuple[int, int], str] = {}  # one /proc read per (tgid, fd) per drain
        for ev in self.tracer.events():
            self._delivered += 1
            key = (ev.tgid, ev.map_fd)
            if key not in ids:
                mid = fd_map_id(ev.tgid, ev.map_fd)
                ids[key] = "unresolved" if mid is None else str(mid)
            name = f"map_update.map.{ids[key]}"
            cg = self._by_map.setdefault(ev.cgroup, {})
            cg[name + ".calls"] = cg.get(name + ".calls", 0) + 1
            cg[name + ".entries"] = cg.get(name + ".entries", 0) + ev.processed
            if every or ev.tgid in sampled or ev.cgroup in cgroups:
                self._calls.append(
                    _Call(ev.exit_ns, ev.enter_ns, ev.tgid, ev.cmd, ids[key], ev.processed, ev.cgroup)
                )
                while len(self._calls) > cap:
                    self._evicted_ns = max(self._evicted_ns, self._calls.popleft().exit_ns)

    def snapshot(self) -> Snapshot:
        if self._thread is None:
            raise ProbeError("map_update: snapshot before load()")
        try:
            self._drain()
            totals = self.tracer.snapshot_by_cgroup()
            dropped = self.tracer.dropped()
        except Exception as e:  # a map read fails as BpfError (a ProbeError) or OSError
            raise ProbeError(f"map_update: reading the maps failed: {e}") from e
        out: Snapshot = {}
        for (tgid, cmd, cgroup), t in totals.items():
            cg = out.setdefault(cgroup, {})
            for key, v in (
                ("map_update.calls", t.calls),
                ("map_update.entries", t.entries),
                (f"map_update.{_cmd(cmd)}.calls", t.calls),
                (f"map_update.{_cmd(cmd)}.entries", t.entries),
                (f"map_update.pid.{tgid}.{_cmd(cmd)}.calls", t.calls),
                (f"map_update.pid.{tgid}.{_cmd(cmd)}.entries", t.entries),
            ):
                cg[key] = cg.get(key, 0) + v
        with self._lock:
            for cgroup, counters in self._by_map.items():
                out.setdefault(cgroup, {}).update(counters)
        out.setdefault(0, {})["map_update.ringbuf_dropped"] = dropped
        self._drop_marks.append((time.time_ns(), dropped))  # window_samples: drops since open
        return out

    def window_samples(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, list[Sample]]:
        """One sample per call of a sampled pid whose exit falls in the window, by node."""
        if self._thread is None:
            raise ProbeError("map_update: window_samples before load()")
        try:
            with self._lock:
                self._drain_locked()
                dropped = self.tracer.dropped()
                # Wall clock -> CLOCK_MONOTONIC (bpf_ktime), with the offset as of now.
                off = time.time_ns() - time.monotonic_ns()
                lo, hi = start_ns - off, end_ns - off
                old = [c for c in self._calls if c.exit_ns < lo]
                if old:  # earlier windows' calls (see the header on overlapping windows)
                    self._evicted_ns = max(self._evicted_ns, *(c.exit_ns for c in old))
                    self._calls = collections.deque(c for c in self._calls if c.exit_ns >= lo)
                calls = sorted((c for c in self._calls if c.exit_ns < hi), key=lambda c: c.exit_ns)
                evicted, limit = self._evicted_ns >= lo, self.max_samples
        except Exception as e:  # a map read fails as BpfError (a ProbeError) or OSError
            raise ProbeError(f"map_update: reading the samples failed: {e}") from e
        # The open snapshot is the first mark at or after the window's start.
        at_open = next((d for t, d in self._drop_marks if t >= start_ns), dropped)
        problems = []
        if dropped > at_open:
            problems.append(f"the ring buffer dropped {dropped - at_open} events during the window")
        if evicted:
            problems.append(f"calls of this window were evicted (retention {2 * limit})")
        if len(calls) > limit:
            problems.append(f"{len(calls)} calls, only the first {limit} kept (map_update.max_samples)")
            calls = calls[:limit]
        samples = [
            Sample(
                SERIES,
                c.enter_ns,
                c.exit_ns,
                c.processed,
                {"pid": str(c.tgid), "cmd": _cmd(c.cmd), "map_id": c.map_id},
            )
            for c in calls
        ]
        out = {
            n.name: [
                s for s, c in zip(samples, calls, strict=True) if not n.cgroup_id or c.cgroup == n.cgroup_id
            ]
            for n in nodes
        }
        if problems:
            raise IncompleteSamplesError(f"map_update: samples incomplete: {'; '.join(problems)}", out)
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        with self._lock:
            self.tracer.close()
