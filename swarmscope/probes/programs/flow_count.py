"""Packets and bytes per IPv4 5-tuple, counted by XDP (``bpf/flow_count.bpf.c``): flow truth.

    prog = FlowCount()
    prog.load()
    prog.scope(nodes)    # the window's own nodes: only their targets are attached (else: all)
    prog.configure({"flow_count.targets": ["4242:ss-fs-ab12-dst:fsab12d"], "flow_count.max_flows": 2**18})
    prog.snapshot()      # {4242: {"flow.packets": n, "flow.bytes": b, "flow.flows", ".drops", ".other",
                         #         "flow.dev.fsab12cdd.packets": n, ...}}
    prog.window_gauges(t0, t1, nodes)   # per node: flows seen, packets-per-flow histogram, per-flow
                                        # digest (flow_digest); drained
    prog.take_flows()    # {("10.98.0.1", "10.200.0.0", 40000, 20000, 17): (packets, bytes), ...}
    prog.close()

A target is ``<cgroup id>:<netns>:<interface>``: the interface (in that ``ip netns`` namespace)
gets its own loaded object, and its counts are keyed by the cgroup id of the node that drives
it (the worker's), so the agent maps them to nodes like every other program; every counter and
gauge is also given per interface (``flow.dev.<ifname>.<name>``), since workers on one
machine may share a cgroup. Targets are set
per window (the flow storm's workers make their namespaces at set-up) and attached once; a
window with other targets detaches the old ones. Every probe of a distributed run gets every
worker's targets; the window scopes it (``scope``, the nodes the controller gave this probe) and
only targets keyed by one of those nodes' cgroups are attached, so on one kernel shared by
several nodes (tests/realcluster.py) no probe touches another's interfaces. A scoped target whose
namespace is gone is skipped; one in a pod's own namespace directory is entered through a
process of its cgroup (``netns_path``). An interface that already has an XDP program fails the
window with the holder's name (``xdp_holder``: the probe whose pins hold it), never counts
nothing.

The flow table is drained at every window's close (``window_gauges``), so each window's flows
are its own; the totals (``snapshot``) are cumulative, as counters must be. Caveats: XDP sees
received packets only (put the target on the receiving side); generic (skb) mode; each
attachment is one run of the short-lived BCC loader (probes.pinned, a compile of 1-4 s), read
through its pins; ``close()`` must run to detach (a probe killed first leaves the pins to the
next start-up sweep).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import socket
import struct
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ProbeError, SetupError
from swarmscope.core.sys import bpf
from swarmscope.core.sys.cgroups import cgroup2_mount, cgroup_paths, resolve_cgroup_id
from swarmscope.probes import pinned
from swarmscope.probes.flowdigest import flow_digest
from swarmscope.probes.programs.base import NodeLike, Snapshot
from swarmscope.probes.programs.params import startup_values
from swarmscope.probes.programs.pkt_count import XDP_FLAGS_SKB_MODE, in_netns

TOTALS = ("packets", "bytes", "flows", "drops", "other")
COUNTERS = tuple(f"flow.{f}" for f in TOTALS)
DEFAULT_MAX_FLOWS = 1 << 18
FlowKey = tuple[str, str, int, int, int]

PARAMS = [
    Field(
        "flow_count.targets",
        list_of(str),
        None,
        "interfaces to count flows on: <cgroup id>:<netns>:<interface> (comma list)",
        "SWARMSCOPE_FLOW_TARGETS",
        nullable=True,
    ),
    Field(
        "flow_count.max_flows",
        int,
        DEFAULT_MAX_FLOWS,
        "flow table size per interface; an insert into a full table is a counted drop",
        "SWARMSCOPE_FLOW_MAX_FLOWS",
        min=16,
        max=1 << 24,
    ),
]
WINDOW_PARAMS: frozenset[str] = frozenset({"flow_count.targets", "flow_count.max_flows"})


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # an `ip netns` name: never a path


def parse_target(text: str) -> tuple[int, str, str]:
    """``"4242:ns:dev"`` -> (4242, "ns", "dev"). The cgroup may be given as its v2 path (a
    worker in a container on a hybrid-layout host cannot read its id, workers/nodes.py:
    own_cgroup_node), resolved here; 0 when it is not on this node."""
    parts = text.rsplit(":", 2)
    cg = parts[0]
    if len(parts) != 3 or not (cg.isdigit() or cg.startswith("/")) or not parts[2]:
        raise ProbeError(f"flow_count: target {text!r} is not <cgroup id>:<netns>:<interface>")
    if parts[1] and not _NAME.fullmatch(parts[1]):
        raise ProbeError(f"flow_count: target {text!r}: {parts[1]!r} is not a network namespace name")
    if cg.isdigit():
        return int(cg), parts[1], parts[2]
    try:
        return resolve_cgroup_id(cg), parts[1], parts[2]
    except SetupError:
        return 0, parts[1], parts[2]  # another node's cgroup


def netns_path(cgroup: int, name: str) -> str | None:
    """Where this probe enters a target's namespace, or None when the target is not on this
    node. A worker on this machine's mount namespace keeps it in /var/run/netns (its ``ip
    netns`` name is enough); a worker in a pod keeps it in the pod's own /run/netns, which the
    node reaches as ``/proc/<pid>/root/run/netns/<name>`` through any process of the target's
    cgroup. That needs the host PID namespace (the chart's probe has it with workers.flows) and
    ptrace read access (SYS_PTRACE): without them the cgroup's processes are there but none can
    be looked into, which is an error, not a target to skip (a namespace already deleted is)."""
    if not name or os.path.exists(f"/var/run/netns/{name}"):
        return name
    if not cgroup:
        log.info("flow_count: %s skipped: its cgroup is not on this node", name)
        return None
    root = cgroup2_mount()
    rel = cgroup_paths(root, {cgroup}).get(cgroup)
    if rel is None:
        log.info("flow_count: %s skipped: cgroup %d is not on this node", name, cgroup)
        return None  # another node's worker
    try:
        pids = (root / rel.lstrip("/") / "cgroup.procs").read_text().split()
    except OSError:
        return None  # removed since
    looked = False
    for pid in pids:
        path = f"/proc/{pid}/root/run/netns/{name}"
        try:
            if pid != "0" and os.stat(path):  # "0": a process outside this PID namespace
                return path
        except FileNotFoundError:
            looked = True  # this process's /run/netns has no such namespace (deleted)
        except OSError:
            continue  # EACCES without ptrace access; ESRCH: exited
    if looked or not pids:
        log.info(
            "flow_count: %s skipped: not in /run/netns of cgroup %s's %d processes", name, rel, len(pids)
        )
        return None
    raise ProbeError(
        f"flow_count: namespace {name} of cgroup {rel} is not reachable from this probe "
        f"(processes seen: {len(pids)}): the probe needs the host PID namespace and SYS_PTRACE"
    )


log = logging.getLogger(__name__)
_KEY = struct.Struct("<IIHHB3x")  # struct flow_key in bpf/flow_key.h
_VAL = struct.Struct("<QQ")  # struct flow_val {packets, bytes}
_TOT = struct.Struct("<5Q")  # struct flow_tot, in TOTALS order
LAYOUTS = {"flows": (_KEY.size, _VAL.size), "flow_tot": (4, _TOT.size)}


class _Attached:
    """One interface with its own loaded object: the loader attaches it through a pinned XDP
    link; removing the pins (close) detaches it, also when the namespace is already gone."""

    def __init__(self, cgroup: int, netns: str, dev: str, max_flows: int) -> None:
        self.cgroup, self.netns, self.dev = cgroup, netns, dev
        holder = xdp_holder(netns, dev)
        if holder:
            raise ProbeError(f"flow_count: {netns or '(host)'}/{dev} already has an XDP program: {holder}")
        args = ["--xdp", "flow_count_xdp", "--ifaces", dev, "--xdp-flags", str(XDP_FLAGS_SKB_MODE)]
        if netns:
            args += ["--netns", netns]
        try:
            self.bpf = pinned.load(
                "flow_count", [f"-DFLOW_MAX={int(max_flows)}"], loader_args=args, layouts=LAYOUTS
            )
        except ProbeError as e:
            raise ProbeError(f"flow_count: attaching XDP to {netns}/{dev} failed: {e}") from e

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(COUNTERS, 0)
        for _k, cpus in self.bpf.maps["flow_tot"].percpu_items():
            for v in cpus:
                for f, n in zip(TOTALS, _TOT.unpack(v), strict=True):
                    out[f"flow.{f}"] += n
        return out

    def drain(self) -> dict[FlowKey, tuple[int, int]]:
        """Every flow in the table, removed from it (one batch syscall loop, not per key)."""
        out: dict[FlowKey, tuple[int, int]] = {}
        for k, v in self.bpf.maps["flows"].drain():
            saddr, daddr, sport, dport, proto = _KEY.unpack(k)
            out[(_ip(saddr), _ip(daddr), sport, dport, proto)] = _VAL.unpack(v)
        return out

    def close(self) -> None:
        self.bpf.cleanup()  # the link pin goes: XDP detaches


def xdp_holder(netns: str, dev: str) -> str | None:
    """Who holds the XDP hook of ``dev`` in ``netns`` (None: free): the probe whose pin
    directory has the attached program (its pid is in the name, pinned.py), else the program's
    id and name. Checked before the compile, so a second probe fails in milliseconds."""
    with in_netns(netns):  # `ip` forked from this thread runs in the namespace
        out = subprocess.run(["ip", "-j", "link", "show", "dev", dev], capture_output=True, text=True)
    if out.returncode != 0:
        raise ProbeError(f"flow_count: attaching XDP to {netns or '(host)'}/{dev} failed: no such interface")
    prog = (json.loads(out.stdout)[0].get("xdp") or {}).get("prog") or {}
    if not prog.get("id"):
        return None
    pid = int(prog["id"])
    for pin in sorted(glob.glob(f"{pinned.PIN_ROOT}/ss-probe-*/prog_*")):
        try:
            fd = bpf.obj_get(pin)
        except ProbeError:
            continue  # removed since listed
        try:
            if bpf.prog_info(fd).id == pid:
                return f"program {pid} pinned by probe pid {pin.split('-')[2]} ({os.path.dirname(pin)})"
        finally:
            os.close(fd)
    return f"program {pid} ({prog.get('name', '?')}), not pinned by a swarmscope probe"


def _ip(v: int) -> str:
    return socket.inet_ntoa(struct.pack("<I", int(v)))  # stored as the wire's bytes


class FlowCount:
    name: str = "flow_count"
    counters: tuple[str, ...] = COUNTERS

    def __init__(self, targets: Iterable[str] = (), max_flows: int = DEFAULT_MAX_FLOWS) -> None:
        self._startup = (tuple(targets), int(max_flows))
        self._want = self._startup
        # cgroups of the window's nodes (None: unscoped, every target; standalone use)
        self._scope: frozenset[int] | None = None
        self._have: tuple[tuple[tuple[int, str, str], ...], int] | None = None
        self._attached: list[_Attached] = []
        self._loaded = False
        self._last: dict[FlowKey, tuple[int, int]] = {}

    @classmethod
    def from_env(cls) -> FlowCount:
        v = startup_values("flow_count", PARAMS)
        return cls(v["flow_count.targets"] or (), v["flow_count.max_flows"])

    def configure(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - WINDOW_PARAMS
        if unknown:
            raise ProbeError(f"flow_count: not per-window options: {', '.join(sorted(unknown))}")
        if options:
            targets = tuple(options.get("flow_count.targets") or ())
            self._want = (targets, int(options.get("flow_count.max_flows", DEFAULT_MAX_FLOWS)))
        else:
            self._want = self._startup
        if self._loaded:
            self._apply()

    def scope(self, nodes: Iterable[NodeLike]) -> None:
        """Attach only the targets of these nodes (by cgroup) from the next ``configure`` on;
        a node with cgroup 0 (the probe's default node) scopes nothing out."""
        ids = frozenset(int(n.cgroup_id) for n in nodes)
        self._scope = None if 0 in ids else ids

    def _apply(self) -> None:
        targets, max_flows = self._want
        parsed = [parse_target(t) for t in targets]
        mine = [t for t in parsed if self._scope is None or t[0] in self._scope]
        # What is attached, not what was asked: a window scoping to the same targets (its
        # nodes named, where the last had none) costs no detach and no compile.
        want = (tuple(mine), max_flows)
        if self._have == want:
            return
        self._detach()
        if len(mine) < len(parsed):
            log.info("flow_count: %d of %d targets are other nodes'", len(parsed) - len(mine), len(parsed))
        try:
            for cg, ns, dev in mine:
                if (path := netns_path(cg, ns)) is not None:
                    self._attached.append(_Attached(cg, path, dev, max_flows))
        except BaseException:
            self._detach()
            raise
        self._have = want

    def load(self) -> None:
        if not self._loaded:
            self._loaded = True
            self._apply()

    def snapshot(self) -> Snapshot:
        if not self._loaded:
            raise ProbeError("flow_count: snapshot before load()")
        out: Snapshot = {}
        try:
            for a in self._attached:
                tot = out.setdefault(a.cgroup, dict.fromkeys(COUNTERS, 0))
                for c, v in a.totals().items():
                    tot[c] += v
                    # Per interface too: workers on one machine may share a cgroup.
                    tot[f"flow.dev.{a.dev}.{c[len('flow.') :]}"] = v
        except Exception as e:  # a map read fails as BpfError (a ProbeError) or OSError
            raise ProbeError(f"flow_count: reading the totals failed: {e}") from e
        return out

    def window_gauges(
        self, start_ns: int, end_ns: int, nodes: Iterable[NodeLike]
    ) -> dict[str, dict[str, float]]:
        """Per node: flows in the table, and ``flow.hist.<k>`` = flows that had exactly k
        packets (the per-flow check of a run: a generator sending p packets to every flow
        expects {p: flows}). Drains the tables; ``take_flows`` returns what was drained."""
        if not self._loaded:
            raise ProbeError("flow_count: window_gauges before load()")
        drained: list[tuple[_Attached, dict[FlowKey, tuple[int, int]]]] = []
        try:
            for a in self._attached:
                drained.append((a, a.drain()))
        except Exception as e:
            raise ProbeError(f"flow_count: reading the flow table failed: {e}") from e
        self._last = {k: v for _a, flows in drained for k, v in flows.items()}
        out: dict[str, dict[str, float]] = {}
        for n in nodes:
            cg = int(n.cgroup_id)
            mine = [(a, f) for a, f in drained if cg in (0, a.cgroup)]
            g = flow_gauges({k: v for _a, f in mine for k, v in f.items()})
            for a, f in mine:  # per interface too (workers on one machine may share a cgroup)
                g.update({f"flow.dev.{a.dev}.{k[len('flow.') :]}": v for k, v in flow_gauges(f).items()})
            out[n.name] = g
        return out

    def take_flows(self) -> dict[FlowKey, tuple[int, int]]:
        """The flows of the last drain (tests compare them, flow by flow, with the generator)."""
        last, self._last = self._last, {}
        return last

    def _detach(self) -> None:
        while self._attached:
            self._attached.pop().close()
        self._have = None

    def close(self) -> None:
        self._detach()
        self._loaded = False


def flow_gauges(flows: Mapping[FlowKey, tuple[int, int]]) -> dict[str, float]:
    g: dict[str, float] = {
        "flow.seen": float(len(flows)),
        "flow.digest": float(flow_digest((k, p, b) for k, (p, b) in flows.items())),
    }
    for p, _b in flows.values():
        key = f"flow.hist.{p}"
        g[key] = g.get(key, 0.0) + 1
    return g
