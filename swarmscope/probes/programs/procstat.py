"""Registry program ``procstat``: per-window CPU %, RSS and fault rates of chosen processes.

    prog = ProcStat(names=["nginx"])       # or pids=[123], cgroups=["/swarmscope/n1"]
    prog.load()                            # starts a ProcSampler (1 s ticks)
    prog.configure({"procstat.pids": [4242]})   # this window samples pid 4242 only ({} = start-up)
    prog.window_gauges(start_ns, end_ns, nodes)
    # {"n1": {"proc.cpu_pct": 49.8, "proc.usr_pct": ..., "proc.sys_pct": ..., "proc.rss_max_kib": ...,
    #         "proc.minflt_s": ..., "proc.majflt_s": ..., "proc.processes": 1.0, "proc.ticks": 10.0}}
    prog.window_samples(start_ns, end_ns, nodes)
    # {"n1": [Sample("procstat.tick", tick start, tick end, %CPU x 100, {"pid": "4242",
    #          "comm": "nginx", "%usr": "49.5", ... pidstat's columns}), ... one per process per tick]}
    prog.close()

Gauges, not counters: ``snapshot()`` is always empty and the agent asks ``window_gauges`` at
CloseWindow. For the ticks that ended inside the window (wall clock): CPU % and fault rates are
the mean over ticks of the per-tick sum over the processes (percent of one core), RSS is the
largest per-tick sum. ``window_samples`` gives pidstat's rows themselves: one sample per
process per tick, pidstat's columns (``COLUMNS``) as exact labels, %CPU in hundredths as the
value. A node with a cgroup id gets only its cgroup's processes; a node with
cgroup id 0 gets all chosen processes. Settings: ``PARAMS`` below (start-up from
``$SWARMSCOPE_PROC_NAMES`` / ``_PIDS`` / ``_CGROUPS`` / ``_INTERVAL``); with no selection it
samples nothing and every gauge is 0 with ``proc.processes`` 0. Per window, any of
``procstat.pids`` / ``.names`` / ``.cgroups`` replaces the whole start-up selection, and only
ticks after the change count for that window. Caveats: a window shorter than one tick has no
ticks (``proc.ticks`` 0, gauges 0); a newly chosen process gives its first tick one interval
after the change (a rate needs two readings); samples older than ``keep_s`` are dropped.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ProbeError
from swarmscope.core.sys.cgroups import cgroup2_mount, pid_cgroup_id
from swarmscope.probes.procstat import ProcSampler, pids_by_name
from swarmscope.probes.programs.base import NodeLike, Sample, Snapshot
from swarmscope.probes.programs.params import startup_values

GAUGES = (
    "proc.cpu_pct",
    "proc.usr_pct",
    "proc.sys_pct",
    "proc.rss_max_kib",
    "proc.minflt_s",
    "proc.majflt_s",
    "proc.processes",
    "proc.ticks",
)

PARAMS = [
    Field(
        "procstat.pids",
        list_of(int),
        None,
        "PIDs to sample (comma list)",
        "SWARMSCOPE_PROC_PIDS",
        min=1,
        nullable=True,
    ),
    Field(
        "procstat.names",
        list_of(str),
        None,
        "process names (comm) to sample, every match",
        "SWARMSCOPE_PROC_NAMES",
        nullable=True,
    ),
    Field(
        "procstat.cgroups",
        list_of(str),
        None,
        "cgroup v2 paths (from the mount, e.g. /swarmscope/n1): every process in them",
        "SWARMSCOPE_PROC_CGROUPS",
        nullable=True,
    ),
    Field(
        "procstat.interval",
        float,
        1.0,
        "sampling tick in seconds",
        "SWARMSCOPE_PROC_INTERVAL",
        check=lambda v: None if v > 0 else "must be > 0",
    ),
]
WINDOW_PARAMS = frozenset({"procstat.pids", "procstat.names", "procstat.cgroups"})


class _Selection(NamedTuple):
    names: list[str]
    pids: list[int]
    cgroups: list[str]


class ProcStat:
    name: str = "procstat"
    counters: tuple[str, ...] = ()

    def __init__(
        self,
        names: Iterable[str] = (),
        pids: Iterable[int] = (),
        cgroups: Iterable[str] = (),
        interval_s: float = 1.0,
        keep_s: float = 3600.0,
    ) -> None:
        self.names, self.pids, self.cgroups = list(names), [int(p) for p in pids], list(cgroups)
        # The start-up selection; a window's options replace it until a window without them.
        self._startup = _Selection(self.names, self.pids, self.cgroups)
        self._sel = self._startup  # swapped whole, so the sampler thread reads one consistent one
        self._since = 0.0  # wall time of the last selection change: older ticks are another's
        self.interval_s = interval_s
        self.keep_s = keep_s
        self._sampler: ProcSampler | None = None
        self._root = pathlib.Path("/")
        self._cg_of: dict[int, int] = {}  # pid -> cgroup id, first seen (a pid does not move here)

    @classmethod
    def from_env(cls) -> ProcStat:
        v = startup_values("procstat", PARAMS)
        return cls(
            v["procstat.names"] or (),
            v["procstat.pids"] or (),
            v["procstat.cgroups"] or (),
            v["procstat.interval"],
        )

    def configure(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - WINDOW_PARAMS
        if unknown:
            raise ProbeError(f"procstat: not per-window options: {', '.join(sorted(unknown))}")
        if options:
            sel = _Selection(
                list(options.get("procstat.names") or ()),
                [int(p) for p in options.get("procstat.pids") or ()],
                list(options.get("procstat.cgroups") or ()),
            )
        else:
            sel = self._startup
        if sel != self._sel:
            self._sel = sel
            self._since = time.time()

    def _pids(self) -> list[int]:
        sel = self._sel
        out = list(sel.pids) + (pids_by_name(sel.names) if sel.names else [])
        for cg in sel.cgroups:
            try:
                with open(os.path.join(self._root, cg.lstrip("/"), "cgroup.procs"), encoding="ascii") as fh:
                    out += [int(x) for x in fh.read().split()]
            except OSError:
                continue  # removed; it may come back
        return out

    def load(self) -> None:
        if self._sampler is not None:
            return
        self._root = cgroup2_mount()
        # Names are resolved in _pids (each tick), so a window can change them.
        self._sampler = ProcSampler(pids=self._pids, interval_s=self.interval_s)
        self._sampler.start()

    def snapshot(self) -> Snapshot:
        if self._sampler is None:
            raise ProbeError("procstat: snapshot before load()")
        return {}

    def _cgroup(self, pid: int) -> int:
        if pid not in self._cg_of:
            self._cg_of[pid] = pid_cgroup_id(pid, self._root)
        return self._cg_of[pid]

    def window_gauges(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, dict[str, float]]:
        if self._sampler is None:
            raise ProbeError("procstat: window_gauges before load()")
        return {n.name: self._gauges(self._rows(start_ns, end_ns, int(n.cgroup_id))) for n in nodes}

    def window_samples(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, list[Sample]]:
        """pidstat's rows of the window: one sample per process per tick (see the module doc)."""
        if self._sampler is None:
            raise ProbeError("procstat: window_samples before load()")
        return {n.name: [_sample(r) for r in self._rows(start_ns, end_ns, int(n.cgroup_id))] for n in nodes}

    def _rows(self, start_ns: int, end_ns: int, cgroup: int) -> list[dict[str, Any]]:
        """The sampler's rows of the ticks that ended in the window, of ``cgroup`` (0: all)."""
        assert self._sampler is not None
        # Ticks before the last selection change sampled another selection (configure runs at
        # OpenWindow, just after the window's start).
        t0, t1 = max(start_ns / 1e9, self._since), end_ns / 1e9
        self._sampler.prune(t1 - self.keep_s)
        rows = [s for s in self._sampler.samples() if t0 < s["t"] <= t1]
        if cgroup:
            rows = [r for r in rows if self._cgroup(int(r["pid"])) == cgroup]
        return rows

    def _gauges(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        ticks = ProcSampler.totals(rows)
        faults: dict[float, list[float]] = {}
        for r in rows:
            f = faults.setdefault(round(r["t"], 1), [0.0, 0.0])
            f[0] += r["minflt_s"]
            f[1] += r["majflt_s"]
        n = len(ticks)
        out = dict.fromkeys(GAUGES, 0.0)
        if n:
            out["proc.cpu_pct"] = sum(t["cpu_pct"] for t in ticks) / n
            out["proc.usr_pct"] = sum(t["usr_pct"] for t in ticks) / n
            out["proc.sys_pct"] = sum(t["sys_pct"] for t in ticks) / n
            out["proc.rss_max_kib"] = max(t["rss_kib"] for t in ticks)
            out["proc.minflt_s"] = sum(f[0] for f in faults.values()) / n
            out["proc.majflt_s"] = sum(f[1] for f in faults.values()) / n
        out["proc.processes"] = float(len({r["pid"] for r in rows}))
        out["proc.ticks"] = float(n)
        return out

    def close(self) -> None:
        if self._sampler is not None:
            sampler, self._sampler = self._sampler, None
            sampler.stop()


# pidstat's columns (pidstat -u -r), label -> the sampler's key; a row's sizes are KiB.
COLUMNS = {
    "%usr": "usr_pct", "%system": "sys_pct", "%guest": "guest_pct", "%CPU": "cpu_pct",
    "minflt/s": "minflt_s", "majflt/s": "majflt_s", "VSZ": "vsz_kib", "RSS": "rss_kib", "%MEM": "mem_pct",
}  # fmt: skip
SERIES = "procstat.tick"


def _sample(r: dict[str, Any]) -> Sample:
    labels = {"pid": str(r["pid"]), "comm": str(r["name"])}
    labels.update({col: repr(float(r.get(key, 0.0))) for col, key in COLUMNS.items()})
    end = int(r["t"] * 1e9)
    return Sample(SERIES, end - int(r["dt"] * 1e9), end, round(100 * r["cpu_pct"]), labels)
