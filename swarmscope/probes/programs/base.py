"""The measurement-program interface, the closed registry of programs, and window deltas.

    from swarmscope.probes.programs.base import get_program, delta_by_node
    prog = get_program("exec_count")      # ProbeError for a name not in PROGRAMS
    prog.load()
    before = prog.snapshot()              # {cgroup_id: {"exec": cumulative}}
    ...
    after = prog.snapshot()
    delta_by_node(before, after, nodes, prog.counters)   # {"n1": {"exec": 42}}
    prog.close()
    program_params("procstat")            # [Field("procstat.pids", ...), ...] declared in its module

A program counts in the kernel, keyed by cgroup v2 id, and user space only ever reads
cumulative totals; a window is the difference of two snapshots. Optional parts: ``configure``
(this window's options, see params.py), ``open_window``, ``window_gauges`` and ``window_samples`` (per-event
records). Caveats: the registry is
deliberately closed (names map to code that ships here; a probe never loads a program named by
the network that is not in it), and a counter that goes *down* between two snapshots means the
program was reloaded, which is reported as an error rather than clamped to zero.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from swarmscope.config import Field
from swarmscope.errors import ProbeError

# cgroup id -> counter name -> cumulative value since the program was loaded.
Snapshot = dict[int, dict[str, int]]


class Program(Protocol):
    """One measurement program. ``counters`` names every counter its snapshots can hold."""

    name: str
    counters: tuple[str, ...]

    def load(self) -> None: ...

    def snapshot(self) -> Snapshot: ...

    def close(self) -> None: ...


class NodeLike(Protocol):
    """Anything with a node name and a cgroup id (proto NodeInfo, a dataclass, ...)."""

    @property
    def name(self) -> str: ...

    @property
    def cgroup_id(self) -> int: ...


class GaugeSource(Protocol):
    """A program that also gives per-window gauges (``dict[str, float]`` in the proto Reading).

    The agent calls it at CloseWindow with the window's wall-clock bounds (time.time_ns()).
    """

    def window_gauges(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, dict[str, float]]: ...


class WindowOpener(Protocol):
    """A program that keeps per-window state in the kernel (exec_count: first/last exec time).

    The agent calls ``open_window`` at OpenWindow, after ``configure`` and before the open
    snapshot, with the window's nodes.
    """

    def open_window(self, nodes: Iterable[NodeLike]) -> None: ...


class Configurable(Protocol):
    """A program whose settings can change per window (OpenWindow.options).

    The agent calls ``configure`` at OpenWindow, before the snapshot, with that window's typed
    options for this program (keys ``<program>.<param>`` from its ``WINDOW_PARAMS``), only when
    they differ from the last call. Keys not given take the program's start-up settings, so
    ``configure({})`` returns to them.
    """

    def configure(self, options: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class Sample:
    """One per-event record of a window (proto Sample), e.g. one map-update call."""

    series: str
    start_ns: int
    end_ns: int
    value: int
    labels: dict[str, str] = field(default_factory=dict)


class SampleSource(Protocol):
    """A program that gives per-event samples of a window, by node name.

    Called at CloseWindow with the window's wall-clock bounds (time.time_ns()). Raises
    swarmscope.errors.IncompleteSamplesError (carrying what it has) when some are missing.
    """

    def window_samples(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, list[Sample]]: ...


def _exec_count() -> Program:
    # Imported here so importing the registry does not import BCC.
    from swarmscope.probes.programs.exec_count import ExecCount

    return ExecCount()


def _syscall_count() -> Program:
    from swarmscope.probes.programs.syscall_count import SyscallCount

    return SyscallCount.from_env()


def _pkt_count() -> Program:
    from swarmscope.probes.programs.pkt_count import PktCount

    return PktCount.from_env()


def _bpf_stats() -> Program:
    from swarmscope.probes.bpfstats import BpfStats

    return BpfStats()


def _map_update() -> Program:
    from swarmscope.probes.programs.map_update import MapUpdateCount

    return MapUpdateCount.from_env()


def _neigh_events() -> Program:
    from swarmscope.probes.programs.neigh_events import NeighEvents

    return NeighEvents.from_env()


def _neigh_netlink() -> Program:
    from swarmscope.probes.programs.neigh_netlink import NeighNetlink

    return NeighNetlink.from_env()


def _flow_count() -> Program:
    from swarmscope.probes.programs.flow_count import FlowCount

    return FlowCount.from_env()


def _procstat() -> Program:
    from swarmscope.probes.programs.procstat import ProcStat

    return ProcStat.from_env()


# The only programs a probe will load. Add an entry when a new bpf/<name>.bpf.c ships.
PROGRAMS: dict[str, Callable[[], Program]] = {
    "exec_count": _exec_count,
    "syscall_count": _syscall_count,
    "pkt_count": _pkt_count,
    "bpf_stats": _bpf_stats,
    "map_update": _map_update,
    "neigh_events": _neigh_events,
    "neigh_netlink": _neigh_netlink,
    "procstat": _procstat,
    "flow_count": _flow_count,
}

# One line per program for --help (what it counts); its settings are its module's PARAMS.
DESCRIPTIONS: dict[str, str] = {
    "exec_count": "execs per cgroup",
    "syscall_count": "syscalls per cgroup",
    "pkt_count": "packets/bytes per interface (XDP)",
    "bpf_stats": "run count/time of every eBPF program on the node",
    "map_update": "BPF map-update calls/entries per pid, cmd, map id; per-call samples",
    "neigh_events": "neighbor create/update per device (tracepoints)",
    "neigh_netlink": "RTM_NEWNEIGH/DELNEIGH per interface (pyroute2)",
    "procstat": "gauges: CPU %, RSS, faults/s of chosen processes",
    "flow_count": "packets/bytes per IPv4 5-tuple on chosen interfaces (XDP); per-flow histogram",
}

# Where each program's PARAMS / WINDOW_PARAMS are declared (next to its code). Importing these
# modules does not import BCC.
PARAM_MODULES: dict[str, str] = {
    "exec_count": "swarmscope.probes.programs.exec_count",
    "syscall_count": "swarmscope.probes.programs.syscall_count",
    "pkt_count": "swarmscope.probes.programs.pkt_count",
    "bpf_stats": "swarmscope.probes.bpfstats",
    "map_update": "swarmscope.probes.programs.map_update",
    "neigh_events": "swarmscope.probes.programs.neigh_events",
    "neigh_netlink": "swarmscope.probes.programs.neigh_netlink",
    "procstat": "swarmscope.probes.programs.procstat",
    "flow_count": "swarmscope.probes.programs.flow_count",
}


def _param_module(name: str) -> Any:
    if name not in PARAM_MODULES:
        raise ProbeError(f"unknown program {name!r} (known: {', '.join(sorted(PROGRAMS))})")
    return importlib.import_module(PARAM_MODULES[name])


def program_params(name: str) -> list[Field]:
    """The params program ``name`` declares (``<name>.<param>`` keys), start-up and per window."""
    return list(getattr(_param_module(name), "PARAMS", []))


def window_params(name: str) -> frozenset[str]:
    """The keys of ``name``'s params that its ``configure`` takes per window."""
    return frozenset(getattr(_param_module(name), "WINDOW_PARAMS", frozenset()))


def all_program_params() -> list[Field]:
    """Every registered program's params, in registry order (for ``--explain``)."""
    return [f for name in PROGRAMS for f in program_params(name)]


def get_program(name: str) -> Program:
    """A new, not yet loaded instance of the registered program ``name``."""
    try:
        factory = PROGRAMS[name]
    except KeyError:
        known = ", ".join(sorted(PROGRAMS))
        raise ProbeError(f"unknown program {name!r} (known: {known})") from None
    return factory()


def _delta(before: Mapping[str, int], after: Mapping[str, int], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for counter in set(before) | set(after):
        d = after.get(counter, 0) - before.get(counter, 0)
        if d < 0:
            raise ProbeError(f"counter {counter!r} of {where} went down by {-d}: program reloaded?")
        out[counter] = d
    return out


def delta_by_node(
    before: Snapshot,
    after: Snapshot,
    nodes: Iterable[NodeLike],
    counters: Iterable[str] = (),
) -> dict[str, dict[str, int]]:
    """Per-node counter deltas between two snapshots of one program.

    A node with ``cgroup_id != 0`` gets exactly that key's delta: a simulated node's processes
    live directly in its cgroup, so descendants' keys are not added. ``cgroup_id == 0`` is the
    whole host: the delta of the sums over all keys. Every name in ``counters`` is present in
    the result (0 when nothing happened), so "no events" is an explicit zero.
    """
    names = tuple(counters)
    out: dict[str, dict[str, int]] = {}
    for node in nodes:
        if node.cgroup_id == 0:
            d = _delta(_total(before), _total(after), f"node {node.name} (host)")
        else:
            key = int(node.cgroup_id)
            d = _delta(before.get(key, {}), after.get(key, {}), f"node {node.name} (cgroup {key})")
        for c in names:
            d.setdefault(c, 0)
        out[node.name] = d
    return out


def delta_by_cgroup(before: Snapshot, after: Snapshot) -> Snapshot:
    """Every cgroup's delta between two snapshots, leaving out cgroups where nothing changed."""
    out: Snapshot = {}
    for key in set(before) | set(after):
        d = _delta(before.get(key, {}), after.get(key, {}), f"cgroup {key}")
        if any(d.values()):
            out[key] = d
    return out


def _total(snap: Snapshot) -> dict[str, int]:
    tot: dict[str, int] = {}
    for counters in snap.values():
        for c, v in counters.items():
            tot[c] = tot.get(c, 0) + v
    return tot
