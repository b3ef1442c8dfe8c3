"""Registry program ``map_update``: BPF map-update bpf() calls per cgroup, (pid, cmd) and map id.

    prog = get_program("map_update"); prog.load()
    prog.snapshot()   # {cgroup_id: {"map_update.calls": n, "map_update.entries": m,
                      #              "map_update.elem.calls": ..., "map_update.pid.1234.elem.entries": ...,
                      #              "map_update.map.57.entries": ..., ...}} cumulative
    prog.close()

Wraps :class:`swarmscope.probes.map_update.MapUpdateTracer` (bpf/map_update.bpf.c). Totals per
(tgid, cmd, cgroup) come from the kernel's per-CPU map and are exact. Per-map-id counters come
from the ring-buffer events: the kernel knows only (tgid, fd), so a pump thread drains the ring
every ``poll_s`` and resolves fd -> map id through /proc/<tgid>/fdinfo while the caller still
holds the fd; a caller that exits or closes the fd within that time is counted under
``map_update.map.unresolved.*``. ``$SWARMSCOPE_MAP_UPDATE_PIDS`` (comma list) restricts
recording to those tgids; unset = every process. Ring-buffer drops (host total, cgroup key 0)
are ``map_update.ringbuf_dropped``: per-map counters are complete only while it stays 0.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from swarmscope.errors import ProbeError
from swarmscope.probes.map_update import CMD_UPDATE_BATCH, CMD_UPDATE_ELEM, MapUpdateTracer, map_id
from swarmscope.probes.programs.base import Snapshot

ENV_PIDS = "SWARMSCOPE_MAP_UPDATE_PIDS"
CMD_NAMES = {CMD_UPDATE_ELEM: "elem", CMD_UPDATE_BATCH: "batch"}


def _cmd(cmd: int) -> str:
    return CMD_NAMES.get(cmd, str(cmd))


class MapUpdateCount:
    name: str = "map_update"
    counters: tuple[str, ...] = ("map_update.calls", "map_update.entries")

    def __init__(self, pids: Iterable[int] | None = None, poll_s: float = 0.05) -> None:
        self.tracer = MapUpdateTracer(pids=pids)
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._by_map: Snapshot = {}  # cgroup -> "map_update.map.<id>.{calls,entries}" cumulative
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._delivered = 0  # ring-buffer events consumed since load

    @property
    def _bpf(self) -> Any:
        """The BCC object (what probes.selfmetrics reads run times and map fill from)."""
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
        spec = os.environ.get(ENV_PIDS, "").strip()
        if not spec:
            return cls()
        try:
            return cls([int(p) for p in spec.split(",") if p.strip()])
        except ValueError as e:
            raise ProbeError(f"map_update: ${ENV_PIDS} must be a comma list of PIDs, got {spec!r}") from e

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
            if self.tracer.bpf is None:
                return
            for ev in self.tracer.events():
                self._delivered += 1
                mid = map_id(ev.tgid, ev.map_fd)
                name = f"map_update.map.{mid if mid is not None else 'unresolved'}"
                cg = self._by_map.setdefault(ev.cgroup, {})
                cg[name + ".calls"] = cg.get(name + ".calls", 0) + 1
                cg[name + ".entries"] = cg.get(name + ".entries", 0) + ev.processed

    def snapshot(self) -> Snapshot:
        if self._thread is None:
            raise ProbeError("map_update: snapshot before load()")
        try:
            self._drain()
            totals = self.tracer.snapshot_by_cgroup()
            dropped = self.tracer.dropped()
        except Exception as e:  # BCC map reads raise bare Exception / OSError
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
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        with self._lock:
            self.tracer.close()
