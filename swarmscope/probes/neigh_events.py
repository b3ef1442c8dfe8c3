"""Counts kernel neighbor-table writes (neigh:neigh_create / neigh:neigh_update) per tgid.

    t = NeighEventCounter(ipv4_only=True); t.load()
    ... write neighbors through netlink ...
    t.snapshot()   # {(tgid, "update"): NeighTotal(count, first_ns, last_ns), ...}
    t.snapshot_full()   # {NeighKey(tgid, kind, cgroup, dev): NeighTotal, ...}
    t.close()

Loads bpf/neigh_events.bpf.c through the short-lived loader (probes.pinned) and reads its pins.
RTM_NEWNEIGH is handled inside the writer's sendmsg(), so the tgid is the writer's own.
Timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns). The counters are cumulative; a window is the
difference of two snapshots.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from swarmscope.core.errors import ProbeError
from swarmscope.probes import pinned

KINDS = {0: "create", 1: "update"}
_KEY = struct.Struct("<IIQ16s")  # struct ne_key {tgid, kind, cgroup, dev} in neigh_events.bpf.c
_TOTAL = struct.Struct("<QQQ")  # struct ne_total {count, first_ns, last_ns}


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
        self.bpf: pinned.PinnedObject | None = None

    def load(self) -> None:
        cflags = ["-DSS_FAMILY=2"] if self.ipv4_only else []
        self.bpf = pinned.load("neigh_events", cflags, layouts={"ne_totals": (_KEY.size, _TOTAL.size)})

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
        for k, cpus in self.bpf.maps["ne_totals"].percpu_items():
            vals = [t for t in (_TOTAL.unpack(v) for v in cpus) if t[0]]
            if vals:
                tgid, kind, cgroup, dev = _KEY.unpack(k)
                name = dev.split(b"\0", 1)[0].decode("ascii", "replace")
                key = NeighKey(tgid, KINDS.get(kind, str(kind)), cgroup, name)
                out[key] = NeighTotal(
                    count=sum(t[0] for t in vals),
                    first_ns=min(t[1] for t in vals),
                    last_ns=max(t[2] for t in vals),
                )
        return out

    def close(self) -> None:
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None
