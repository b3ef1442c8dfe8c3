"""Registry program ``neigh_events``: kernel neighbor-table writes per cgroup and device.

    prog = get_program("neigh_events"); prog.load()
    prog.snapshot()   # {cgroup_id: {"neigh.create": n, "neigh.update": m,
                      #              "neigh.create.dev.eth0": ..., "neigh.update.dev.eth0": ...}}
    prog.close()

Wraps :class:`swarmscope.probes.neigh_events.NeighEventCounter` (neigh:neigh_create /
neigh:neigh_update tracepoints). Keyed by the writer's cgroup: a netlink RTM_NEWNEIGH is
handled in the sender's sendmsg(), so the writer is the process that asked. Device names come
from the tracepoint and are per network namespace (two netns' "eth0" add up). Entries the kernel
creates itself (ARP in softirq) land in whatever cgroup was current: use the host total
(cgroup 0 node) for those. ``$SWARMSCOPE_NEIGH_FAMILY``: ``inet`` (default, IPv4 only) or
``all``. One ``ip neigh add`` makes one create and one update.
"""

from __future__ import annotations

from typing import Any

from swarmscope.core.config import Field
from swarmscope.core.errors import ProbeError
from swarmscope.probes.neigh_events import NeighEventCounter
from swarmscope.probes.programs.base import Snapshot
from swarmscope.probes.programs.params import startup_values

ENV_FAMILY = "SWARMSCOPE_NEIGH_FAMILY"
PARAMS = [
    Field("neigh_events.family", str, "inet", "inet (IPv4 only) or all", ENV_FAMILY, choices=("inet", "all")),
]
WINDOW_PARAMS: frozenset[str] = frozenset()  # the family is compiled in


class NeighEvents:
    name: str = "neigh_events"
    counters: tuple[str, ...] = ("neigh.create", "neigh.update")

    def __init__(self, ipv4_only: bool = True) -> None:
        self.counter = NeighEventCounter(ipv4_only=ipv4_only)

    @classmethod
    def from_env(cls) -> NeighEvents:
        return cls(ipv4_only=startup_values("neigh_events", PARAMS)["neigh_events.family"] == "inet")

    @property
    def _bpf(self) -> Any:
        """The pinned object (what probes.selfmetrics reads run times and map fill from)."""
        return self.counter.bpf

    def load(self) -> None:
        if self.counter.bpf is None:
            self.counter.load()

    def snapshot(self) -> Snapshot:
        if self.counter.bpf is None:
            raise ProbeError("neigh_events: snapshot before load()")
        try:
            full = self.counter.snapshot_full()
        except Exception as e:  # a map read fails as BpfError (a ProbeError) or OSError
            raise ProbeError(f"neigh_events: reading the map failed: {e}") from e
        out: Snapshot = {}
        for k, t in full.items():
            cg = out.setdefault(k.cgroup, {})
            for name in (f"neigh.{k.kind}", f"neigh.{k.kind}.dev.{k.dev or '?'}"):
                cg[name] = cg.get(name, 0) + t.count
        return out

    def close(self) -> None:
        self.counter.close()
