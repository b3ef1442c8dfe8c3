"""Counts kernel neighbor-table writes (neigh:neigh_create / neigh:neigh_update) per tgid.

    t = NeighEventCounter(ipv4_only=True); t.load()
    ... write neighbors through netlink ...
    t.snapshot()   # {(tgid, "update"): NeighTotal(count, first_ns, last_ns), ...}
    t.snapshot_full()   # {NeighKey(tgid, kind, cgroup, dev): NeighTotal, ...}
    t.close()

Loads bpf/neigh_events.bpf.c. RTM_NEWNEIGH is handled inside the writer's sendmsg(), so the
tgid is the writer's own. Timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns). The counters are
cumulative; a window is the difference of two snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import ProbeError

KINDS = {0: "create", 1: "update"}


@dataclass(frozen=True)
class NeighKey:
    tgid: int
    kind: str  # "create" | "update"
    cgroup: int  # the writer's cgroup v2 id
    dev: str  # device name as the tracepoint gives it (names are per netns: may repeat)


@dataclass(frozen=True)
class NeighTotal:
    count: int
    first_ns: int
    last_ns: int


class NeighEventCounter:
    def __init__(self, ipv4_only: bool = True):
        self.ipv4_only = ipv4_only
        self.bpf: Any = None

    def load(self) -> None:
        from swarmscope.probes.bcc_env import load_program

        self.bpf = load_program("neigh_events", ["-DSS_FAMILY=2"] if self.ipv4_only else [])

    def snapshot(self) -> dict[tuple[int, str], NeighTotal]:
        """Cumulative totals per (tgid, kind), summed over cgroups and devices."""
        out: dict[tuple[int, str], NeighTotal] = {}
        for k, t in self.snapshot_full().items():
            a = out.get((k.tgid, k.kind))
            out[(k.tgid, k.kind)] = (
                t
                if a is None
                else NeighTotal(a.count + t.count, min(a.first_ns, t.first_ns), max(a.last_ns, t.last_ns))
            )
        return out

    def snapshot_full(self) -> dict[NeighKey, NeighTotal]:
        """Cumulative totals per (tgid, kind, cgroup, device), reduced over CPUs."""
        if self.bpf is None:
            raise ProbeError("NeighEventCounter used before load()")
        out: dict[NeighKey, NeighTotal] = {}
        for k, per_cpu in self.bpf[b"ne_totals"].items():
            vals = [v for v in per_cpu if v.count]
            if vals:
                key = NeighKey(
                    int(k.tgid),
                    KINDS.get(int(k.kind), str(k.kind)),
                    int(k.cgroup),
                    bytes(k.dev).split(b"\0", 1)[0].decode("ascii", "replace"),
                )
                out[key] = NeighTotal(
                    count=sum(int(v.count) for v in vals),
                    first_ns=min(int(v.first_ns) for v in vals),
                    last_ns=max(int(v.last_ns) for v in vals),
                )
        return out

    def close(self) -> None:
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None
