"""Kernel-side clock of BPF map programming: counts and times map-update bpf() calls.

    t = MapUpdateTracer(pids=[os.getpid()]); t.load()
    ... program a map ...
    ev = t.events()        # [MapUpdateEvent(enter_ns, exit_ns, tgid, tid, cmd, map_fd, ...)]
    tot = t.snapshot()     # {(tgid, cmd): MapUpdateTotal(calls, entries, first_ns, last_ns)}
    t.snapshot_by_cgroup() # {(tgid, cmd, cgroup_id): MapUpdateTotal}; events carry .cgroup too
    t.set_cgroups([74885])   # also every process of cgroup v2 id 74885 (a pod's container)
    t.close()

Loads bpf/map_update.bpf.c (syscalls:sys_enter_bpf / sys_exit_bpf tracepoints) through the
short-lived loader (probes.pinned) and reads its pins: the ring buffer through libbpf's
``ring_buffer`` API (core.sys.ringbuf), the maps as raw bytes. Timestamps are
bpf_ktime_get_ns(), i.e. CLOCK_MONOTONIC, comparable with time.monotonic_ns() on this host.
The map is not known in the kernel (no kprobes, no struct reads): events carry (tgid, map_fd)
and :func:`map_id` resolves it through /proc while the process lives. ``pids`` restricts
recording to those tgids (more can be added with :meth:`add_pid`, all replaced while attached with
:meth:`set_pids`); None records every process. :meth:`set_cgroups` records the callers in those
cgroup v2 ids as well: a worker in a pod knows its cgroup (the probe resolves the id from its
path), never the host tgid its calls carry here.
Events come through a ring buffer; :meth:`dropped` says how many it refused (0 means complete).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys.ringbuf import RingBuffer
from swarmscope.probes import pinned
from swarmscope.probes.pinned import PinnedMap, PinnedObject

CMD_UPDATE_ELEM = 2
CMD_UPDATE_BATCH = 26
_EVENT = struct.Struct("=QQIIIIIIqQ")


@dataclass(frozen=True)
class MapUpdateEvent:
    enter_ns: int
    exit_ns: int
    tgid: int
    tid: int
    cmd: int
    map_fd: int
    requested: int
    processed: int
    ret: int
    cgroup: int = 0  # the caller's cgroup v2 id


@dataclass(frozen=True)
class MapUpdateTotal:
    calls: int
    entries: int
    first_ns: int
    last_ns: int


_KEY = struct.Struct("<IIQ")  # struct mu_key {tgid, cmd, cgroup}
_TOTAL = struct.Struct("<QQQQ")  # struct mu_total {calls, entries, first_ns, last_ns}
_U32, _U64, _ON = struct.Struct("<I"), struct.Struct("<Q"), b"\x01"
# The maps as this reader decodes them, checked against the kernel's at load.
LAYOUTS = {
    "mu_totals": (_KEY.size, _TOTAL.size),
    "mu_pids": (4, 1),
    "mu_cgroups": (8, 1),
    "mu_record_all": (4, 1),
    "mu_drops": (4, 8),
}


class MapUpdateTracer:
    def __init__(self, pids: Iterable[int] | None = None, ringbuf_pages: int = 1024):
        self.pids = None if pids is None else list(pids)
        self.cgroups: list[int] = []
        self.ringbuf_pages = ringbuf_pages
        self.bpf: PinnedObject | None = None
        self._ring: RingBuffer | None = None
        self._events: list[MapUpdateEvent] = []

    def load(self) -> None:
        obj = pinned.load("map_update", [f"-DSS_RINGBUF_PAGES={self.ringbuf_pages}"], layouts=LAYOUTS)
        try:
            self._ring = RingBuffer(obj.maps["mu_events"].fd, self._on_event)
        except BaseException:
            obj.cleanup()
            raise
        self.bpf = obj
        pids, self.pids = self.pids, []  # set_pids compares with what is in the kernel: nothing yet
        self.set_pids(pids)
        cgroups, self.cgroups = self.cgroups, []
        self.set_cgroups(cgroups)

    def _maps(self) -> dict[str, PinnedMap]:
        if self.bpf is None:
            raise ProbeError("MapUpdateTracer used before load()")
        return self.bpf.maps

    def add_pid(self, pid: int) -> None:
        self._maps()["mu_pids"].update(_U32.pack(pid), _ON)
        if self.pids is not None and pid not in self.pids:
            self.pids.append(pid)

    def set_pids(self, pids: Iterable[int] | None) -> None:
        """Record only ``pids`` from now on (None: every process), without reloading."""
        maps = self._maps()
        want = None if pids is None else list(dict.fromkeys(int(p) for p in pids))
        # Add before removing, and widen before narrowing, so a pid kept across the change is
        # never unrecorded for a moment.
        for p in want or ():
            maps["mu_pids"].update(_U32.pack(p), _ON)
        maps["mu_record_all"].update(_U32.pack(0), bytes([want is None]))
        for p in (self.pids or []) if want is None else set(self.pids or ()) - set(want):
            maps["mu_pids"].delete(_U32.pack(p))
        self.pids = want

    def set_cgroups(self, ids: Iterable[int]) -> None:
        """Also record every caller in these cgroup v2 ids from now on ([] for none), without
        reloading; added before the others are removed, as in :meth:`set_pids`."""
        table = self._maps()["mu_cgroups"]
        want = list(dict.fromkeys(int(i) for i in ids))
        for i in want:
            table.update(_U64.pack(i), _ON)
        for i in set(self.cgroups) - set(want):
            table.delete(_U64.pack(i))
        self.cgroups = want

    def _on_event(self, data: bytes) -> None:
        self._events.append(MapUpdateEvent(*_EVENT.unpack_from(data)))

    def events(self) -> list[MapUpdateEvent]:
        """Every event recorded since the previous call, in ring-buffer order."""
        self._maps()
        assert self._ring is not None
        self._ring.consume()
        out, self._events = self._events, []
        return out

    def snapshot(self) -> dict[tuple[int, int], MapUpdateTotal]:
        """Cumulative totals per (tgid, cmd), reduced over CPUs and cgroups (first = min, last = max)."""
        out: dict[tuple[int, int], MapUpdateTotal] = {}
        for (tgid, cmd, _cg), t in self.snapshot_by_cgroup().items():
            out[(tgid, cmd)] = _merge(out.get((tgid, cmd)), t)
        return out

    def snapshot_by_cgroup(self) -> dict[tuple[int, int, int], MapUpdateTotal]:
        """Cumulative totals per (tgid, cmd, cgroup id), reduced over CPUs."""
        out: dict[tuple[int, int, int], MapUpdateTotal] = {}
        for k, cpus in self._maps()["mu_totals"].percpu_items():
            vals = [t for t in (_TOTAL.unpack(v) for v in cpus) if t[0]]
            if vals:
                out[_KEY.unpack(k)] = MapUpdateTotal(
                    calls=sum(t[0] for t in vals),
                    entries=sum(t[1] for t in vals),
                    first_ns=min(t[2] for t in vals),
                    last_ns=max(t[3] for t in vals),
                )
        return out

    def dropped(self) -> int:
        return sum(_U64.unpack(v)[0] for _k, cpus in self._maps()["mu_drops"].percpu_items() for v in cpus)

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        if self.bpf is not None:
            obj, self.bpf = self.bpf, None
            obj.cleanup()


def _merge(a: MapUpdateTotal | None, b: MapUpdateTotal) -> MapUpdateTotal:
    if a is None:
        return b
    return MapUpdateTotal(
        a.calls + b.calls, a.entries + b.entries, min(a.first_ns, b.first_ns), max(a.last_ns, b.last_ns)
    )
