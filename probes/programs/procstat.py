"""Registry program ``procstat``: per-window CPU %, RSS and fault rates of chosen processes.

    prog = ProcStat(names=["nginx"])       # or pids=[123], cgroups=["/swarmscope/n1"]
    prog.load()                            # starts a ProcSampler (1 s ticks)
    prog.window_gauges(start_ns, end_ns, nodes)
    # {"n1": {"proc.cpu_pct": 49.8, "proc.usr_pct": ..., "proc.sys_pct": ..., "proc.rss_max_kib": ...,
    #         "proc.minflt_s": ..., "proc.majflt_s": ..., "proc.processes": 1.0, "proc.ticks": 10.0}}
    prog.close()

Gauges, not counters: ``snapshot()`` is always empty and the agent asks ``window_gauges`` at
CloseWindow. For the ticks that ended inside the window (wall clock): CPU % and fault rates are
the mean over ticks of the per-tick sum over the processes (percent of one core), RSS is the
largest per-tick sum. A node with a cgroup id gets only its cgroup's processes; a node with
cgroup id 0 gets all chosen processes. Selection from the environment (registry entry):
``$SWARMSCOPE_PROC_NAMES`` (comm names), ``$SWARMSCOPE_PROC_PIDS``, ``$SWARMSCOPE_PROC_CGROUPS``
(v2 paths, every process in them), ``$SWARMSCOPE_PROC_INTERVAL`` (seconds, default 1); with no
selection it samples nothing and every gauge is 0 with ``proc.processes`` 0.
Caveats: a window shorter than one tick has no ticks (``proc.ticks`` 0, gauges 0); samples
older than ``keep_s`` are dropped so a long-lived probe does not grow.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from swarmscope.errors import ProbeError
from swarmscope.probes.cgroups import cgroup2_mount
from swarmscope.probes.procstat import ProcSampler
from swarmscope.probes.programs.base import NodeLike, Snapshot

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


def _list(env: str) -> list[str]:
    return [s.strip() for s in os.environ.get(env, "").split(",") if s.strip()]


def pid_cgroup_id(pid: int, root: str) -> int:
    """The v2 cgroup id (inode) of the cgroup ``pid`` lives in; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return os.stat(os.path.join(root, line[3:].strip().lstrip("/"))).st_ino
    except OSError:
        pass
    return 0


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
        self.interval_s = interval_s
        self.keep_s = keep_s
        self._sampler: ProcSampler | None = None
        self._root = ""
        self._cg_of: dict[int, int] = {}  # pid -> cgroup id, first seen (a pid does not move here)

    @classmethod
    def from_env(cls) -> ProcStat:
        try:
            pids = [int(p) for p in _list("SWARMSCOPE_PROC_PIDS")]
            interval = float(os.environ.get("SWARMSCOPE_PROC_INTERVAL", "1") or 1)
        except ValueError as e:
            raise ProbeError(f"procstat: bad $SWARMSCOPE_PROC_PIDS / _INTERVAL: {e}") from e
        if interval <= 0:
            raise ProbeError("procstat: $SWARMSCOPE_PROC_INTERVAL must be > 0")
        return cls(_list("SWARMSCOPE_PROC_NAMES"), pids, _list("SWARMSCOPE_PROC_CGROUPS"), interval)

    def _pids(self) -> list[int]:
        out = list(self.pids)
        for cg in self.cgroups:
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
        self._sampler = ProcSampler(pids=self._pids, names=self.names, interval_s=self.interval_s)
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
        t0, t1 = start_ns / 1e9, end_ns / 1e9
        self._sampler.prune(t1 - self.keep_s)
        rows = [s for s in self._sampler.samples() if t0 < s["t"] <= t1]
        return {n.name: self._gauges(rows, int(n.cgroup_id)) for n in nodes}

    def _gauges(self, rows: list[dict[str, Any]], cgroup: int) -> dict[str, float]:
        if cgroup:
            rows = [r for r in rows if self._cgroup(int(r["pid"])) == cgroup]
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
