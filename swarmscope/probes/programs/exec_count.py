"""exec() counted in the kernel per cgroup v2 id, with the first and last exec time of a window.

    prog = ExecCount(); prog.load()
    prog.open_window(nodes)      # before the open snapshot: restart first/last for these cgroups
    prog.snapshot()              # {cgroup_id: {"exec": cumulative execs since load}}
    prog.snapshot()              # at close: also fixes the times window_samples reports
    prog.window_samples(start_ns, end_ns, nodes)
    # {"n1": [Sample("exec.window", first_ns, last_ns, 0)]}   bpf_ktime (CLOCK_MONOTONIC)
    prog.close()

``bpf/exec_count.bpf.c`` keeps per cgroup and CPU, next to the count, the first and last exec
time since the cgroup's window opened (``exec_open`` / ``exec_open_any``, written by
``open_window``). ``window_samples`` gives one
sample per node that had an exec in the window: start_ns = the first, end_ns = the last exec,
both as read by the close snapshot (an exec after it does not move them); a node with no exec
gets none. Sample.value is 0: the count is the ``exec`` counter.

Caveats: counts successful execs only (the sched:sched_process_exec tracepoint fires after the
new image is in place); the maps hold at most SS_MAX_KEYS cgroups, execs in further new
cgroups are not counted (lookup_or_try_init fails), which a host with that many cgroups would
notice as a harness mismatch. An exec that runs on another CPU in the microseconds while
``open_window`` writes the open time may be counted in the window without restarting its CPU's
first time; that CPU then gives its last time as its first (never an earlier window's time).
Windows of one node must not overlap (the open time is per cgroup); a host node (cgroup id 0)
sets ``exec_open_any``, which applies to every cgroup without its own open time.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable

from swarmscope.core.errors import ProbeError
from swarmscope.probes import pinned
from swarmscope.probes.programs.base import NodeLike, Sample, Snapshot

SERIES = "exec.window"
_U64, _U32 = struct.Struct("<Q"), struct.Struct("<I")
_STAT = struct.Struct("<QQQ")  # struct exec_stat {count, first, last} in exec_count.bpf.c
LAYOUTS = {"exec_count": (8, _STAT.size), "exec_open": (8, 8), "exec_open_any": (4, 8)}

# cgroup id -> per-CPU (first, last) bpf_ktime of execs; (0, 0) on a CPU that never ran one.
Times = dict[int, list[tuple[int, int]]]


class ExecCount:
    name: str = "exec_count"
    counters: tuple[str, ...] = ("exec",)

    def __init__(self) -> None:
        self._bpf: pinned.PinnedObject | None = None
        self._opens: dict[int, int] = {}  # cgroup id (0 = host) -> open time (CLOCK_MONOTONIC)
        self._times: Times = {}  # as read by the last snapshot

    def load(self) -> None:
        if self._bpf is None:
            self._bpf = pinned.load(self.name, layouts=LAYOUTS)

    def open_window(self, nodes: Iterable[NodeLike]) -> None:
        """Restart the first/last times of ``nodes``' cgroups; call before the open snapshot."""
        if self._bpf is None:
            raise ProbeError("exec_count: open_window before load()")
        now = time.monotonic_ns()  # the BPF clock: bpf_ktime_get_ns is CLOCK_MONOTONIC
        try:
            for n in nodes:
                key = int(n.cgroup_id)
                if key == 0:  # the host: every cgroup that has no open time of its own
                    self._bpf.maps["exec_open_any"].update(_U32.pack(0), _U64.pack(now))
                else:
                    self._bpf.maps["exec_open"].update(_U64.pack(key), _U64.pack(now))
                self._opens[key] = now
        except ProbeError as e:
            raise ProbeError(f"exec_count: writing the open time failed: {e}") from e

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("exec_count: snapshot before load()")
        try:
            # One read of each slot gives its count and its times together.
            rows = [
                (_U64.unpack(k)[0], [_STAT.unpack(v) for v in cpus])
                for k, cpus in self._bpf.maps["exec_count"].percpu_items()
            ]
        except ProbeError as e:
            raise ProbeError(f"exec_count: reading the map failed: {e}") from e
        self._times = {cg: [(first, last) for _c, first, last in cpus] for cg, cpus in rows}
        return {cg: {"exec": sum(c for c, _f, _l in cpus)} for cg, cpus in rows}

    def window_samples(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, list[Sample]]:
        """One ``exec.window`` sample (first, last exec time) per node with an exec in the window."""
        if self._bpf is None:
            raise ProbeError("exec_count: window_samples before load()")
        out: dict[str, list[Sample]] = {}
        for n in nodes:
            key = int(n.cgroup_id)
            opened = self._opens.get(key, start_ns - (time.time_ns() - time.monotonic_ns()))
            cpus = [t for ts in self._times.values() for t in ts] if key == 0 else self._times.get(key, [])
            span = window_times(cpus, opened)
            out[n.name] = [] if span is None else [Sample(SERIES, span[0], span[1], 0)]
        return out

    def close(self) -> None:
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            bpf.cleanup()


def window_times(cpus: Iterable[tuple[int, int]], opened: int) -> tuple[int, int] | None:
    """(first, last) over per-CPU (first, last) times of execs at or after ``opened``; None if none.

    A CPU whose last exec is before ``opened`` ran none in the window. One whose first is before
    it but last is not missed the restart (see the module caveat): its last is its first.
    """
    firsts, lasts = [], []
    for first, last in cpus:
        if last < opened:
            continue
        firsts.append(first if first >= opened else last)
        lasts.append(last)
    if not lasts:
        return None
    return min(firsts), max(lasts)
