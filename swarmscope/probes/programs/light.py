"""The light probe's programs: loaded by the short-lived BCC loader, read from pins (no BCC here).

    from swarmscope.probes.programs.light import get_light_program, LIGHT
    prog = get_light_program("exec_count")     # ProbeError naming the full mode for the others
    prog.load()                                # python -m swarmscope.probes.loader, then pins
    ...                                        # the same Program interface as the full probe

``swarmscope probe --mode light`` (or ``$SWARMSCOPE_PROBE_MODE=light``) builds its programs
here. What it carries (``LIGHT``): ``exec_count`` (counts, first/last exec times, the per-window
restart of the times), ``neigh_events`` (per cgroup and device) and ``syscall_count`` (its
per-window filter written into the pinned filter map; a switch between filtered and unfiltered
reloads it through the loader), read through pinned maps;
``bpf_stats``, ``procstat`` and ``neigh_netlink``, which never used BCC and are the full probe's
own code. The fleet handshake, heartbeats, options, window spans and self-metrics (run counts
and map fill of the pinned programs) are the agent's, the same in both modes.

``pkt_count`` is attached by the loader through pinned XDP links (its interfaces are start-up
settings). What it does not carry (``NOT_LIGHT``, each refused at start with the reason):
``flow_count`` (XDP attached per window) and ``map_update`` (per-call samples through BCC). Run
those with the full probe (``--mode full``, the default).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable

from swarmscope.core.errors import ProbeError
from swarmscope.probes import pinned
from swarmscope.probes.neigh_events import KINDS, NeighEventCounter, NeighKey, NeighTotal
from swarmscope.probes.programs.base import PROGRAMS, NodeLike, Program, Snapshot
from swarmscope.probes.programs.exec_count import ExecCount
from swarmscope.probes.programs.neigh_events import NeighEvents
from swarmscope.probes.programs.pkt_count import ENV_IFACES, PktCount, in_netns
from swarmscope.probes.programs.pkt_count import FIELDS as PKT_FIELDS
from swarmscope.probes.programs.syscall_count import SyscallCount, counter_name

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_EXEC_STAT = struct.Struct("<QQQ")  # struct exec_stat {count, first, last} in exec_count.bpf.c
_NE_KEY = struct.Struct("<IIQ16s")  # struct ne_key {tgid, kind, cgroup, dev} in neigh_events.bpf.c
_NE_TOTAL = struct.Struct("<QQQ")  # struct ne_total {count, first_ns, last_ns}
_SC_KEY = struct.Struct("<QQ")  # struct sc_key {cgroup, nr} in syscall_count.bpf.c
_PKT_VAL = struct.Struct("<5Q")  # struct pkt_val {packets, bytes, ipv4, ipv6, arp} in pkt_count.bpf.c
# exec_count's maps as its readers decode them (this module's, and the native reader's).
EXEC_COUNT_LAYOUT = {
    "exec_count": (_U64.size, _EXEC_STAT.size),
    "exec_open": (_U64.size, _U64.size),
    "exec_open_any": (_U32.size, _U64.size),
}


def load_checked(
    program: str, cflags: list[str], layouts: dict[str, tuple[int, int]], loader_args: Iterable[str] = ()
) -> pinned.PinnedObject:
    """``program`` loaded and pinned by the loader, its maps checked against the readers' layouts."""
    obj = pinned.load(program, cflags, loader_args=loader_args)
    try:
        for name, (key_size, value_size) in layouts.items():
            obj.maps[name].check(key_size, value_size)
    except BaseException:
        obj.cleanup()
        raise
    return obj


class LightExecCount(ExecCount):
    """``exec_count`` read from its pins; window_samples and close are ExecCount's own."""

    def load(self) -> None:
        if self._bpf is None:
            self._bpf = load_checked(self.name, [], EXEC_COUNT_LAYOUT)

    def open_window(self, nodes: Iterable[NodeLike]) -> None:
        if self._bpf is None:
            raise ProbeError("exec_count: open_window before load()")
        now = time.monotonic_ns()  # the BPF clock: bpf_ktime_get_ns is CLOCK_MONOTONIC
        for n in nodes:
            key = int(n.cgroup_id)
            if key == 0:  # the host: every cgroup that has no open time of its own
                self._bpf.maps["exec_open_any"].update(_U32.pack(0), _U64.pack(now))
            else:
                self._bpf.maps["exec_open"].update(_U64.pack(key), _U64.pack(now))
            self._opens[key] = now

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("exec_count: snapshot before load()")
        rows = [
            (_U64.unpack(k)[0], [_EXEC_STAT.unpack(v) for v in cpus])
            for k, cpus in self._bpf.maps["exec_count"].percpu_items()
        ]
        self._times = {cg: [(first, last) for _c, first, last in cpus] for cg, cpus in rows}
        return {cg: {"exec": sum(c for c, _f, _l in cpus)} for cg, cpus in rows}


class _LightNeighCounter(NeighEventCounter):
    """NeighEventCounter over pinned maps: the same keys and totals, close() is its own."""

    def load(self) -> None:
        cflags = ["-DSS_FAMILY=2"] if self.ipv4_only else []
        self.bpf = load_checked("neigh_events", cflags, {"ne_totals": (_NE_KEY.size, _NE_TOTAL.size)})

    def snapshot_full(self) -> dict[NeighKey, NeighTotal]:
        if self.bpf is None:
            raise ProbeError("NeighEventCounter used before load()")
        out: dict[NeighKey, NeighTotal] = {}
        for k, cpus in self.bpf.maps["ne_totals"].percpu_items():
            vals = [t for t in (_NE_TOTAL.unpack(v) for v in cpus) if t[0]]
            if vals:
                tgid, kind, cgroup, dev = _NE_KEY.unpack(k)
                key = NeighKey(
                    tgid,
                    KINDS.get(kind, str(kind)),
                    cgroup,
                    dev.split(b"\0", 1)[0].decode("ascii", "replace"),
                )
                out[key] = NeighTotal(
                    count=sum(t[0] for t in vals),
                    first_ns=min(t[1] for t in vals),
                    last_ns=max(t[2] for t in vals),
                )
        return out


class LightNeighEvents(NeighEvents):
    """``neigh_events`` read from its pins (per cgroup and device, as the full probe's)."""

    def __init__(self, ipv4_only: bool = True) -> None:
        self.counter = _LightNeighCounter(ipv4_only=ipv4_only)


class LightSyscallCount(SyscallCount):
    """``syscall_count`` read from its pins; a per-window switch between the filtered and the
    unfiltered build reloads it through the loader, as the full probe recompiles it."""

    def load(self) -> None:
        if self._bpf is not None:
            return
        cflags = ["-DSS_FILTER_SYSCALLS=1"] if self.filter is not None else []
        layouts = {"syscall_count": (_SC_KEY.size, _U64.size), "syscall_filter": (_U32.size, 1)}
        if self.filter is None:  # the unfiltered build never reads the filter: not in its maps
            del layouts["syscall_filter"]
        self._bpf = load_checked(self.name, cflags, layouts)
        for nr in self.filter or ():
            self._filter_slot(nr, True)

    def _filter_slot(self, nr: int, on: bool) -> None:
        self._bpf.maps["syscall_filter"].update(_U32.pack(nr), bytes([int(on)]))

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("syscall_count: snapshot before load()")
        out: Snapshot = {}
        for k, cpus in self._bpf.maps["syscall_count"].percpu_items():
            cg, nr = _SC_KEY.unpack(k)
            counters = out.setdefault(cg, {})
            name = counter_name(nr)
            counters[name] = counters.get(name, 0) + sum(_U64.unpack(v)[0] for v in cpus)
        return out


class LightPktCount(PktCount):
    """``pkt_count`` attached by the loader through pinned XDP links (start-up interfaces, as
    the full probe's); removing the pins detaches it."""

    def load(self) -> None:
        if self._bpf is not None:
            return
        if not self.interfaces:
            raise ProbeError(f"pkt_count: no interfaces to attach to (set ${ENV_IFACES})")
        with in_netns(self.netns):
            try:
                self._ifindex = {socket.if_nametoindex(dev): dev for dev in self.interfaces}
            except OSError as e:
                raise ProbeError(f"pkt_count: attaching XDP failed: {e}") from e
        args = ["--xdp", "pkt_count_xdp", "--ifaces", ",".join(self.interfaces)]
        args += ["--xdp-flags", str(self._flags)]
        if self.netns:
            args += ["--netns", self.netns]
        try:
            self._bpf = load_checked(self.name, [], {"pkt_count": (_U32.size, _PKT_VAL.size)}, args)
        except ProbeError as e:
            raise ProbeError(f"pkt_count: attaching XDP failed: {e}") from e

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("pkt_count: snapshot before load()")
        out = {c: 0 for c in self.counters}
        for k, cpus in self._bpf.maps["pkt_count"].percpu_items():
            dev = self._ifindex.get(_U32.unpack(k)[0])
            if dev is None:
                continue  # an ifindex we did not attach to (cannot happen unless reused)
            for v in cpus:
                for f, n in zip(PKT_FIELDS, _PKT_VAL.unpack(v), strict=True):
                    out[f"if.{dev}.{f}"] += n
        return {0: out}

    def close(self) -> None:
        if self._bpf is not None:
            obj, self._bpf = self._bpf, None
            obj.cleanup()  # the link pins go: XDP detaches


# Programs that never used BCC: the full probe's own code runs in the light one unchanged.
_NO_BCC = ("bpf_stats", "procstat", "neigh_netlink", "flow_count", "map_update")

LIGHT: dict[str, Callable[[], Program]] = {
    "exec_count": LightExecCount,
    "neigh_events": LightNeighEvents.from_env,
    "syscall_count": LightSyscallCount.from_env,
    "pkt_count": LightPktCount.from_env,
    **{name: PROGRAMS[name] for name in _NO_BCC},
}

NOT_LIGHT: dict[str, str] = {}


def light_factory(programs: Iterable[str]) -> Callable[[str], Program]:
    """The light probe's program factory, once the machine and ``programs`` are checked.

    ConfigError naming every program the light probe does not carry; SetupError for what the
    loader would miss (root, BCC, kernel headers, tracefs), checked without importing BCC."""
    from swarmscope.core.errors import ConfigError, Problem
    from swarmscope.probes import bcc_env

    problems = [
        Problem("--programs", n, f"not carried by the light probe ({NOT_LIGHT[n]}): use --mode full")
        for n in programs
        if n in NOT_LIGHT
    ]
    if problems:
        raise ConfigError(problems)
    bcc_env.check(import_bcc=False)
    swept = pinned.sweep_stale()
    if swept:
        import sys

        print(f"probe: removed the pins of light probes that died: {', '.join(swept)}", file=sys.stderr)
    return get_light_program


def get_light_program(name: str) -> Program:
    """A new, not yet loaded light-mode instance of ``name``; ProbeError if light mode lacks it."""
    if name in LIGHT:
        return LIGHT[name]()
    if name in NOT_LIGHT:
        raise ProbeError(
            f"program {name!r} is not carried by the light probe ({NOT_LIGHT[name]}): "
            "run the probe with --mode full"
        )
    known = ", ".join(sorted(PROGRAMS))
    raise ProbeError(f"unknown program {name!r} (known: {known})")
