"""Kernel-side clock of BPF map programming: counts and times map-update bpf() calls.

    t = MapUpdateTracer(pids=[os.getpid()]); t.load()
    ... program a map ...
    ev = t.events()        # [MapUpdateEvent(enter_ns, exit_ns, tgid, tid, cmd, map_fd, ...)]
    tot = t.snapshot()     # {(tgid, cmd): MapUpdateTotal(calls, entries, first_ns, last_ns)}
    t.snapshot_by_cgroup() # {(tgid, cmd, cgroup_id): MapUpdateTotal}; events carry .cgroup too
    t.set_cgroups([74885])   # also every process of cgroup v2 id 74885 (a pod's container)
    t.close()

Loads bpf/map_update.bpf.c (syscalls:sys_enter_bpf / sys_exit_bpf tracepoints). Timestamps are
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

import contextlib
import ctypes
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import ProbeError

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


class MapUpdateTracer:
    def __init__(self, pids: Iterable[int] | None = None, ringbuf_pages: int = 1024):
        self.pids = None if pids is None else list(pids)
        self.cgroups: list[int] = []
        self.ringbuf_pages = ringbuf_pages
        self.bpf: Any = None
        self._events: list[MapUpdateEvent] = []

    def load(self) -> None:
        from swarmscope.probes.bcc_env import load_program

        self.bpf = load_program("map_update", [f"-DSS_RINGBUF_PAGES={self.ringbuf_pages}"])
        pids, self.pids = self.pids, []  # set_pids compares with what is in the kernel: nothing yet
        self.set_pids(pids)
        cgroups, self.cgroups = self.cgroups, []
        self.set_cgroups(cgroups)
        self.bpf[b"mu_events"].open_ring_buffer(self._on_event)

    def add_pid(self, pid: int) -> None:
        self._need()
        self.bpf[b"mu_pids"][ctypes.c_uint32(pid)] = ctypes.c_uint8(1)
        if self.pids is not None and pid not in self.pids:
            self.pids.append(pid)

    def set_pids(self, pids: Iterable[int] | None) -> None:
        """Record only ``pids`` from now on (None: every process), without reloading."""
        self._need()
        want = None if pids is None else list(dict.fromkeys(int(p) for p in pids))
        table, all_ = self.bpf[b"mu_pids"], self.bpf[b"mu_record_all"]
        # Add before removing, and widen before narrowing, so a pid kept across the change is
        # never unrecorded for a moment.
        for p in want or ():
            table[ctypes.c_uint32(p)] = ctypes.c_uint8(1)
        all_[ctypes.c_int(0)] = ctypes.c_uint8(1 if want is None else 0)
        for p in (self.pids or []) if want is None else set(self.pids or ()) - set(want):
            with contextlib.suppress(KeyError):
                del table[ctypes.c_uint32(p)]
        self.pids = want

    def set_cgroups(self, ids: Iterable[int]) -> None:
        """Also record every caller in these cgroup v2 ids from now on ([] for none), without
        reloading; added before the others are removed, as in :meth:`set_pids`."""
        self._need()
        want = list(dict.fromkeys(int(i) for i in ids))
        table = self.bpf[b"mu_cgroups"]
        for i in want:
            table[ctypes.c_uint64(i)] = ctypes.c_uint8(1)
        for i in set(self.cgroups) - set(want):
            with contextlib.suppress(KeyError):
                del table[ctypes.c_uint64(i)]
        self.cgroups = want

    def _need(self) -> None:
        if self.bpf is None:
            raise ProbeError("MapUpdateTracer used before load()")

    def _on_event(self, ctx: Any, data: Any, size: int) -> int:
        self._events.append(MapUpdateEvent(*_EVENT.unpack(ctypes.string_at(data, _EVENT.size))))
        return 0

    def events(self) -> list[MapUpdateEvent]:
        """Every event recorded since the previous call, in ring-buffer order."""
        self._need()
        self.bpf.ring_buffer_consume()
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
        self._need()
        out: dict[tuple[int, int, int], MapUpdateTotal] = {}
        for k, per_cpu in self.bpf[b"mu_totals"].items():
            vals = [v for v in per_cpu if v.calls]
            if not vals:
                continue
            out[(int(k.tgid), int(k.cmd), int(k.cgroup))] = MapUpdateTotal(
                calls=sum(int(v.calls) for v in vals),
                entries=sum(int(v.entries) for v in vals),
                first_ns=min(int(v.first_ns) for v in vals),
                last_ns=max(int(v.last_ns) for v in vals),
            )
        return out

    def dropped(self) -> int:
        self._need()
        return int(sum(self.bpf[b"mu_drops"][ctypes.c_int(0)]))

    def close(self) -> None:
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None


def _merge(a: MapUpdateTotal | None, b: MapUpdateTotal) -> MapUpdateTotal:
    if a is None:
        return b
    return MapUpdateTotal(
        a.calls + b.calls, a.entries + b.entries, min(a.first_ns, b.first_ns), max(a.last_ns, b.last_ns)
    )
