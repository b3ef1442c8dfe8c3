"""The controller's side of relays: hosts routed through a relay, and its batched messages.

    items = route(fleet_probes, [(state, cmd), ...])   # commands for relayed probes -> their relay
    handle(fleet, relay_state, msg)                     # a relay's Roster, WindowAck or WindowDone

A relay (``swarmscope relay``, controller/relay.py) registers like a probe with
``RegisterRequest.relay`` set and announces the probes behind it with ``Roster`` messages. Each
one becomes a ``ProbeState`` with ``via`` = the relay's probe id, so the fleet's per-probe window
bookkeeping (expected, acks, done, reconnects, missing) holds unchanged; only the wire differs:
one OpenWindow per relay per window carrying every node of its hosts (``NodeInfo.host`` says
whose), one CloseWindow per relay, one WindowAck per outcome naming its probes, one WindowDone
with every reading, the probes done and the probes the relay lost (``missing``).

A probe that moves (its relay died; it re-registered, same id, at another relay or at the
controller) takes its open windows along: the new relay is sent that probe's OpenWindow (the
probe acknowledges an open it already has without a new snapshot) and, if the window is closing,
the close. Caveat: everything here runs on the fleet's event loop with the fleet's lock held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from swarmscope.controller import fleet_live
from swarmscope.controller.fleet_state import FleetCore, Outbox, ProbeState, SoFar, Window, table_rows
from swarmscope.v1 import probe_pb2 as pb

log = logging.getLogger(__name__)

# A relayed probe's commands go down its relay's stream, never its own: its state shares this
# never-used queue instead of holding one (100,000 queues are ~600,000 objects for the GC to walk).
_NO_OUTBOX = Outbox()


def route(
    probes: dict[str, ProbeState], items: list[tuple[ProbeState, pb.Command | None]]
) -> list[tuple[ProbeState, pb.Command | None]]:
    """Direct probes' commands as they are; relayed probes' merged into one per relay and window.

    Shutdown and end-of-stream are not routed: a relay gets its own and passes shutdown on."""
    if not any(state.via for state, _ in items):
        return items  # no relays in this batch: nothing to merge
    out: list[tuple[ProbeState, pb.Command | None]] = []
    merged: dict[tuple[str, str, str], pb.Command] = {}
    for state, cmd in items:
        if not state.via:
            out.append((state, cmd))
            continue
        relay = probes.get(state.via)
        kind = cmd.WhichOneof("kind") if cmd is not None else None
        if relay is None or cmd is None or kind not in ("open", "close"):
            continue
        body = cmd.open if kind == "open" else cmd.close
        key = (relay.probe_id, kind, body.window_id)
        if kind == "close":
            if key not in merged:
                merged[key] = cmd
                out.append((relay, cmd))
            continue
        batch = merged.get(key)
        if batch is None:
            batch = merged[key] = pb.Command(seq=cmd.seq)
            batch.open.CopyFrom(cmd.open)
            del batch.open.nodes[:]
            out.append((relay, batch))
        for n in cmd.open.nodes:
            batch.open.nodes.add(
                name=n.name, cgroup_id=n.cgroup_id, cgroup_path=n.cgroup_path, host=state.host
            )
    return out


def batch_open(
    fleet: FleetCore,
    batches: dict[str, pb.Command],
    items: list[tuple[ProbeState, pb.Command | None]],
    win: Window,
    state: ProbeState,
    host: str,
) -> None:
    """Add a relayed probe's nodes to its relay's one OpenWindow of this window (lock held):
    no command per probe is built (``Fleet.open_cmd`` builds one only for a probe that moves)."""
    batch = batches.get(state.via)
    if batch is None:
        batch = batches[state.via] = pb.Command(seq=fleet._next_seq(), open=win.template)
        relay = fleet._probes[state.via]
        items.append((relay, batch))
        if win.closing:
            items.append((relay, win.close))
    add = batch.open.nodes.add
    for n in win.node_info[state.probe_id]:
        add(name=n.name, cgroup_id=n.cgroup_id, cgroup_path=n.cgroup_path, host=host)


def close_items(
    fleet: FleetCore, win: Window, cmd: pb.Command | None = None, pids: set[str] | None = None
) -> list[tuple[ProbeState, pb.Command | None]]:
    """The window's close, or ``cmd`` (a ReadWindow), (lock held): to each direct probe of
    ``pids`` (default: every probe the window waits for), and once to each relay with one of
    them (no command per relayed probe to merge)."""
    close, probes = cmd if cmd is not None else win.close, fleet._probes
    items: list[tuple[ProbeState, pb.Command | None]] = []
    relays: set[str] = set()
    for pid in win.expected if pids is None else pids:
        p = probes.get(pid)
        if p is None:
            continue
        if p.via:
            relays.add(p.via)
        else:
            items.append((p, close))
    items += [(r, close) for r in map(probes.get, relays) if r is not None]
    return items


def live(fleet: FleetCore) -> list[ProbeState]:
    """Probes alive now, relays' own sessions aside (lock held): each relay's liveness is looked
    at once, not once per probe behind it."""
    relays: dict[str, bool] = {}
    out = []
    for p in fleet._probes.values():
        if p.relay:
            continue
        if p.via:
            up = relays.get(p.via)
            if up is None:
                up = relays[p.via] = fleet_live.alive(fleet, p.via)
            if p.connected and up:
                out.append(p)
        elif fleet_live.alive(fleet, p.probe_id):
            out.append(p)
    return out


def not_gone(fleet: FleetCore, pids: Iterable[str]) -> set[str]:
    """The probes among ``pids`` that may still answer (lock held). A relayed probe is gone when
    its relay is: asked once per relay, not once per probe (a wait looks at 100,000 of them)."""
    relays: dict[str, bool] = {}
    out = set()
    for pid in pids:
        p = fleet._probes.get(pid)
        if p is not None and p.via and p.connected:
            gone = relays.get(p.via)
            if gone is None:
                gone = relays[p.via] = fleet_live.gone(fleet, p.via)
        else:
            gone = fleet_live.gone(fleet, pid)
        if not gone:
            out.add(pid)
    return out


def handle(fleet: FleetCore, relay: ProbeState, msg: pb.ProbeMessage) -> None:
    kind = msg.WhichOneof("kind")
    if kind == "roster":
        _roster(fleet, relay, msg.roster)
    elif kind == "ack":
        _ack(fleet, relay, msg.ack)
    elif kind == "done":
        _done(fleet, relay, msg.done)
    elif kind == "so_far":
        _so_far(fleet, relay, msg.so_far)


def _routed(fleet: FleetCore, relay: ProbeState, pids: Any) -> list[str]:
    """The probe ids this relay may speak for: those its roster routes through it now."""
    probes = fleet._probes
    return [pid for pid in pids if (p := probes.get(pid)) is not None and p.via == relay.probe_id]


def _roster(fleet: FleetCore, relay: ProbeState, roster: pb.Roster) -> None:
    now = time.monotonic()
    items: list[tuple[ProbeState, pb.Command | None]] = []
    for e in roster.added:
        old = fleet._probes.get(e.probe_id)
        fleet._direct.discard(e.probe_id)  # heartbeats, if any, come through the relay now
        state = ProbeState(
            probe_id=e.probe_id,
            session_id="",
            hostname=e.host,
            node_name=e.host,
            kernel_release="",
            programs=[],
            version="",
            registered_ns=time.time_ns(),
            last_seen=now,
            connected=True,
            via=relay.probe_id,
            outbox=_NO_OUTBOX,
        )
        # Back at the same relay: its own fleet resends what the probe missed. Elsewhere before
        # (another relay, or the controller directly): it moved, and its windows move with it.
        moved = old is not None and old.via != relay.probe_id
        if old is not None:
            state.reconnects = old.reconnects + (1 if moved or not old.connected else 0)
            if not old.via and not old.relay:
                old.outbox.put_nowait(None)  # a direct session it replaced
        fleet._probes[e.probe_id] = state
        if moved:
            log.info("probe %s@%s moved to relay %s", e.probe_id, e.host, relay.probe_id)
            for win in fleet._windows.values():
                if e.probe_id in win.expected and e.probe_id not in win.done:
                    win.reconnects[e.probe_id] = win.reconnects.get(e.probe_id, 0) + 1
                    items.append((state, fleet.open_cmd(win, e.probe_id)))
                    if win.closing:
                        items.append((state, win.close))
    for pid in _routed(fleet, relay, roster.removed):
        p = fleet._probes[pid]
        if p.connected:
            p.connected, p.disconnected_at = False, now
    fleet._send(items)
    fleet._lock.notify_all()


def _ack(fleet: FleetCore, relay: ProbeState, ack: pb.WindowAck) -> None:
    win = fleet._windows.get(ack.window_id)
    if win is None or win.closing:
        return
    for pid in _routed(fleet, relay, ack.probes):
        if pid in win.expected:
            win.acks[pid] = ack
    # Woken by the last ack only: each wake walks every pending probe (a poll finds the gone).
    if len(win.acks) >= len(win.expected):
        fleet._lock.notify_all()


def _take_table(
    fleet: FleetCore,
    relay: ProbeState,
    win: Window,
    done: pb.WindowDone,
    ok: set[str],
    so_far: SoFar | None = None,
) -> None:
    """Keep the table's readings of probes in ``ok``, each for a node the window asked it for
    (in the read ``so_far`` when given): the same rules as ``Fleet.accept``, with no message per
    reading."""
    try:
        rows = table_rows(done.table)
    except ValueError as e:
        fleet.readings_rejected += len(done.table.probe_id)
        log.warning("relay %s: window %s: table refused: %s", relay.probe_id, win.window_id, e)
        return
    if rows and done.run_id != win.run_id:
        fleet.readings_rejected += len(rows)
        return
    nodes, readings, kept = win.nodes, win.readings if so_far is None else so_far.readings, 0
    for r in rows:
        if r.probe_id in ok and r.node in nodes.get(r.probe_id, ()):
            readings[(r.probe_id, r.node)] = r  # keyed by node: a resent close counts once
            kept += 1
    if so_far is None:
        fleet.readings_received += kept
        fleet.readings_rejected += len(rows) - kept


def _done(fleet: FleetCore, relay: ProbeState, done: pb.WindowDone) -> None:
    win = fleet._windows.get(done.window_id)
    if win is None:
        fleet.readings_rejected += len(done.batch)
        return
    ok = {pid for pid in _routed(fleet, relay, done.probes) if pid in win.expected}
    for r in done.batch:
        if r.probe_id in ok:
            fleet.accept(win, r.probe_id, r)
        else:
            fleet.readings_rejected += 1
    _take_table(fleet, relay, win, done, ok)
    win.done |= ok
    if done.trace:  # the relay's probes' OTLP requests, concatenated (protobuf merges them)
        fleet._spans.setdefault(win.window_id, []).append(done.trace)
    for name in done.missing:
        pid = name.rsplit("@", 1)[0]
        if pid in win.expected and pid not in win.done and _routed(fleet, relay, [pid]):
            win.lost[pid] = name
    if win.expected <= win.done | win.lost.keys():  # the last answer wakes the waiter
        fleet._lock.notify_all()


def _so_far(fleet: FleetCore, relay: ProbeState, answer: pb.WindowDone) -> None:
    """A relay's one answer to a ReadWindow for its probes: kept while that read waits."""
    win = fleet._windows.get(answer.window_id)
    so_far = win.reads.get(answer.read_id) if win is not None else None
    if win is None or so_far is None:
        return
    ok = {pid for pid in _routed(fleet, relay, answer.probes) if pid in win.expected}
    for r in answer.batch:
        if r.probe_id in ok:
            fleet.accept(win, r.probe_id, r, so_far)
    _take_table(fleet, relay, win, answer, ok, so_far)
    lost = {n.rsplit("@", 1)[0] for n in answer.missing}
    so_far.answered |= ok | (lost & win.expected)
    fleet._lock.notify_all()
