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
from typing import Any, Protocol, cast

from swarmscope.core.config import Field
from swarmscope.core.errors import ProbeError

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
    swarmscope.core.errors.IncompleteSamplesError (carrying what it has) when some are missing.
    """

    def window_samples(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, list[Sample]]: ...


@dataclass(frozen=True)
class ProgramEntry:
    """One program of the registry: ``module:factory`` under swarmscope.probes (the module also
    declares the program's PARAMS / WINDOW_PARAMS next to its code), and a one-line description."""

    spec: str  # "programs.exec_count:ExecCount" or "...:Class.from_env"
    description: str

    @property
    def module(self) -> str:
        return "swarmscope.probes." + self.spec.partition(":")[0]

    def make(self) -> Program:
        # Imported here, when a program is made: importing the registry imports neither BCC nor
        # any program module (the probe never imports BCC: its loader process does).
        obj: Any = importlib.import_module(self.module)
        for part in self.spec.partition(":")[2].split("."):
            obj = getattr(obj, part)
        return cast(Program, obj())


# The only programs a probe will load. Add an entry when a new bpf/probe/<name>.bpf.c ships.
REGISTRY: dict[str, ProgramEntry] = {
    "exec_count": ProgramEntry("programs.exec_count:ExecCount", "execs per cgroup"),
    "syscall_count": ProgramEntry("programs.syscall_count:SyscallCount.from_env", "syscalls per cgroup"),
    "pkt_count": ProgramEntry("programs.pkt_count:PktCount.from_env", "packets/bytes per interface (XDP)"),
    "bpf_stats": ProgramEntry("bpfstats:BpfStats", "run count/time of every eBPF program on the node"),
    "map_update": ProgramEntry(
        "programs.map_update:MapUpdateCount.from_env",
        "BPF map-update calls/entries per pid, cmd, map id; per-call samples",
    ),
    "neigh_events": ProgramEntry(
        "programs.neigh_events:NeighEvents.from_env", "neighbor create/update per device (tracepoints)"
    ),
    "neigh_netlink": ProgramEntry(
        "programs.neigh_netlink:NeighNetlink.from_env", "RTM_NEWNEIGH/DELNEIGH per interface (pyroute2)"
    ),
    "procstat": ProgramEntry(
        "programs.procstat:ProcStat.from_env", "gauges: CPU %, RSS, faults/s of chosen processes"
    ),
    "flow_count": ProgramEntry(
        "programs.flow_count:FlowCount.from_env",
        "packets/bytes per IPv4 5-tuple on chosen interfaces (XDP); per-flow histogram",
    ),
}
PROGRAMS: dict[str, Callable[[], Program]] = {name: e.make for name, e in REGISTRY.items()}
DESCRIPTIONS: dict[str, str] = {name: e.description for name, e in REGISTRY.items()}


def _param_module(name: str) -> Any:
    if name not in REGISTRY:
        raise ProbeError(f"unknown program {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return importlib.import_module(REGISTRY[name].module)


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
