"""The fleet's records: one registered probe (or relay), one open window, and their helpers.

    state = ProbeState(probe_id="p1", session_id=sid, hostname="n1", node_name="n1", ...)
    state.host          # the node it measures: what workers' nodes are matched against

Split out of controller/fleet.py so the fleet and the relay routing (controller/relay_routes.py)
share them. Caveat: ``outbox`` (an ``Outbox``) is only for the fleet's event loop to touch.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from swarmscope.controller.model import ProbeReading, ReadingSample
from swarmscope.v1 import probe_pb2 as pb


class Outbox:
    """A probe's commands down its stream (serialized; None ends it), for the loop only.

    What asyncio.Queue does here with less: no size bound, no task counting (``join``), one
    waiter. Its cost is paid per command per probe on the controller's one core."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: deque[bytes | None] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def put_nowait(self, data: bytes | None) -> None:
        self.items.append(data)
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():  # cancelled with its writer
                w.set_result(None)

    async def get(self) -> bytes | None:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.items.popleft()

    def qsize(self) -> int:
        return len(self.items)


@dataclass
class ProbeState:
    """What the controller knows of one registered probe (its current session)."""

    probe_id: str
    session_id: str
    hostname: str
    node_name: str
    kernel_release: str
    programs: list[str]
    version: str
    registered_ns: int
    last_seen: float = 0.0  # time.monotonic() of the last message
    connected: bool = False
    disconnected_at: float = 0.0  # time.monotonic() when its stream ended (0: never connected)
    reconnects: int = 0  # registrations after the first one
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    relay: bool = False  # a relay's own session: it measures nothing, its Roster routes hosts
    via: str = ""  # a probe behind a relay: that relay's probe id (its commands go down there)
    # The heartbeat interval its RegisterReply handed it, and the silence after which it is gone:
    # per probe, since probes that joined a smaller fleet hold a shorter interval (``pace``).
    # A relayed probe has neither here: its relay's session answers for it.
    heartbeat_s: float = 0.0
    liveness_s: float = 0.0
    # Commands down the stream, serialized (put_all); None ends it. Only the fleet's event loop
    # touches it (Fleet._send).
    outbox: Outbox = field(default_factory=Outbox)

    @property
    def host(self) -> str:
        """The node this probe measures: the key workers' nodes are matched against."""
        return self.node_name or self.hostname


@dataclass
class Window:
    run_id: str
    window_id: str
    nodes: dict[str, set[str]]  # probe id -> names of the nodes it was asked to read
    opens: dict[str, pb.Command]  # probe id -> its OpenWindow (sent again after a reconnect)
    expected: set[str]  # probe ids whose reading the window waits for
    acks: dict[str, pb.WindowAck] = field(default_factory=dict)
    readings: dict[tuple[str, str], ProbeReading] = field(default_factory=dict)  # (probe, node)
    done: set[str] = field(default_factory=set)
    closing: bool = False
    close: pb.Command | None = None
    reconnects: dict[str, int] = field(default_factory=dict)  # probe id -> reconnects while open
    # Raw readings as they came (probe id -> its pb.Readings), kept only when the fleet is a
    # relay's downstream: it forwards them upstream as they are, with no conversion.
    raw: dict[tuple[str, str], Any] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # probe id -> name, reported lost by a relay
    template: pb.OpenWindow | None = None  # the window's OpenWindow without nodes
    node_info: dict[str, list[pb.NodeInfo]] = field(default_factory=dict)  # probe id -> its nodes
    reads: dict[int, SoFar] = field(default_factory=dict)  # read id -> a read so far under way


@dataclass
class SoFar:
    """One read of an open window so far (ReadWindow): the readings and the probes that answered."""

    readings: dict[tuple[str, str], Any] = field(default_factory=dict)  # (probe, node)
    answered: set[str] = field(default_factory=set)


def pace(floor_s: float, liveness_s: float, sessions: int, budget: float) -> tuple[float, float]:
    """(heartbeat interval, liveness) for a probe joining a fleet of ``sessions`` direct sessions
    (itself included): the interval that keeps ``sessions`` heartbeats under ``budget`` a
    second, never under ``floor_s``; liveness grows with it (the same number of missed beats).

        pace(1.0, 5.0, 400, 500.0)     # (1.0, 5.0): a small fleet, as configured
        pace(1.0, 5.0, 10_000, 500.0)  # (20.0, 100.0)

    Caveat: the interval is fixed at Register (the protocol has no way to change it later), so
    probes that joined while the fleet was smaller keep beating faster; without a size known in
    advance (``Fleet(expect_probes=)``) a fleet of N joined one by one sends up to
    ``budget * (1 + ln(N / (budget * floor_s)))`` heartbeats a second, not ``budget``."""
    if budget <= 0 or floor_s <= 0:
        return floor_s, liveness_s
    interval = max(floor_s, sessions / budget)
    return interval, liveness_s * interval / floor_s


def few(names: set[str], n: int = 20) -> str:
    """Up to ``n`` names and how many more: an error about 10,000 probes stays readable."""
    s = sorted(names)
    return str(s[:n]) + (f" and {len(s) - n} more" if len(s) > n else "")


def put_all(items: list[tuple[ProbeState, pb.Command | None]]) -> None:
    """Queue commands on streams, each distinct command serialized once (a window's close goes
    to every probe as the same bytes). A Shutdown is followed by the end of the stream."""
    wire: dict[int, tuple[bytes, bool]] = {}
    for state, cmd in items:
        if cmd is None:
            state.outbox.put_nowait(None)
            continue
        data = wire.get(id(cmd))
        if data is None:
            data = wire[id(cmd)] = (cmd.SerializeToString(), cmd.HasField("shutdown"))
        state.outbox.put_nowait(data[0])
        if data[1]:
            state.outbox.put_nowait(None)


def to_reading(r: Any, probe_id: str) -> ProbeReading:
    return ProbeReading(
        probe_id=probe_id,  # the authenticated session's, not what the message claims
        node=r.node,
        counters=dict(r.counters.items()),
        gauges=dict(r.gauges.items()) if r.gauges else {},
        start_ns=r.start_unix_ns,
        end_ns=r.end_unix_ns,
        error=r.error,
        samples=[ReadingSample(s.series, s.start_ns, s.end_ns, s.value, dict(s.labels)) for s in r.samples]
        if r.samples
        else [],
        pod=getattr(r, "pod", ""),  # namespace/pod/container (probes/pods.py); "" off Kubernetes
        drained=list(getattr(r, "drained", ())),
    )


def fill_table(done: pb.WindowDone, rows: Iterable[tuple[str, Any]]) -> None:
    """Put a relay's readings (probe id, pb.Reading) into ``done``: by column in ``done.table``,
    or as they are in ``done.batch`` when they carry gauges, samples or drain sentinels (rare, and
    row-shaped)."""
    pids: list[str] = []
    nodes: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    errors: list[str] = []
    pods: list[str] = []
    cols: dict[str, tuple[list[int], list[int]]] = {}
    for pid, r in rows:
        if r.gauges or r.samples or r.drained:
            r.probe_id = pid  # the authenticated session's, not what the probe claimed
            done.batch.append(r)
            continue
        i = len(pids)
        pids.append(pid)
        nodes.append(r.node)
        starts.append(r.start_unix_ns)
        ends.append(r.end_unix_ns)
        errors.append(r.error)
        pods.append(r.pod)
        for k, v in r.counters.items():
            col = cols.get(k)
            if col is None:
                col = cols[k] = ([], [])
            col[0].append(i)
            col[1].append(v)
    t = done.table
    t.probe_id.extend(pids)
    t.node.extend(nodes)
    t.start_unix_ns.extend(starts)
    t.end_unix_ns.extend(ends)
    t.error.extend(errors)
    t.pod.extend(pods)
    for name, (idx, values) in cols.items():
        t.counters.add(name=name, rows=idx, values=values)
    done.readings = len(done.batch) + len(pids)


def table_rows(t: pb.ReadingTable) -> list[ProbeReading]:
    """The readings of a ``ReadingTable``, or ValueError when its columns do not line up."""
    # Plain lists first: iterating a protobuf container costs far more per item.
    pids, nodes, starts, ends, errors, pods = (
        list(c) for c in (t.probe_id, t.node, t.start_unix_ns, t.end_unix_ns, t.error, t.pod)
    )
    n = len(pids)
    if any(len(c) != n for c in (nodes, starts, ends, errors, pods)):
        raise ValueError(f"columns of unequal length ({n} probe ids)")
    counters: list[dict[str, int]] = [{} for _ in range(n)]
    for col in t.counters:
        name = col.name
        if len(col.rows) != len(col.values):
            raise ValueError(f"counter {name!r}: {len(col.rows)} rows, {len(col.values)} values")
        for i, v in zip(list(col.rows), list(col.values), strict=True):
            if i >= n:
                raise ValueError(f"counter {name!r}: row {i} of {n}")
            counters[i][name] = v
    return [
        ProbeReading(pid, node, c, {}, start, end, error, [], pod)
        for pid, node, c, start, end, error, pod in zip(
            pids, nodes, counters, starts, ends, errors, pods, strict=True
        )
    ]


def poll_s(pending: int) -> float:
    """How often a wait looks at gone probes: each look walks the pending ones, so with many
    (100,000 behind relays) look once a second; the last answer wakes the waiter at once."""
    return 0.25 if pending < 1000 else 1.0


class FleetCore(Protocol):
    """The part of the Fleet (fleet.py) that fleet_live.py and relay_routes.py read and call.

    The Fleet calls them with itself; typed by this protocol they need not import fleet.py, so
    the imports of the fleet's modules run one way (fleet -> relay_routes -> fleet_live -> state).
    """

    liveness_s: float
    reconnect_grace_s: float
    prune_s: float
    readings_received: int
    readings_rejected: int
    _lock: threading.Condition
    _probes: dict[str, ProbeState]
    _sessions: dict[str, ProbeState]
    _direct: set[str]
    _holders: dict[str, str]
    _refused: list[str]
    _windows: dict[str, Window]
    _spans: dict[str, list[bytes]]
    _pruned_at: float

    def _send(self, items: list[tuple[ProbeState, pb.Command | None]]) -> None: ...

    def _next_seq(self) -> int: ...

    def open_cmd(self, win: Window, pid: str) -> pb.Command: ...

    def accept(self, win: Window, probe_id: str, r: Any, so_far: SoFar | None = None) -> None: ...
