"""The fleet's liveness rules: which probes are alive, which will not answer, which to forget.

    fleet_live.alive(fleet, probe_id)   # connected, and heard from within its liveness
    fleet_live.gone(fleet, probe_id)    # no answer will come: a window stops waiting for it
    fleet_live.prune(fleet)             # forget probes disconnected for longer than prune_s
    fleet_live.claim(fleet, host, pid)  # a node to one live probe: "" or the probe holding it

A direct probe (or relay) is alive while connected and heard from (any message) within its own
``liveness_s``, paced at its Register with its heartbeat interval (fleet_state.pace: probes that
joined a bigger fleet beat less often and are given longer). A probe behind a relay is alive while
its relay lists it and the relay is. Disconnected, a probe is gone after ``reconnect_grace_s``
(not paced: it is how long a reconnect takes, whatever the heartbeat). Caveat: every function
here expects the fleet's lock held.
"""

from __future__ import annotations

import logging
import time

from swarmscope.controller.fleet_state import FleetCore

log = logging.getLogger(__name__)


def alive(fleet: FleetCore, probe_id: str) -> bool:
    p = fleet._probes.get(probe_id)
    if p is not None and p.via:  # behind a relay: alive while listed and the relay is
        return p.connected and alive(fleet, p.via)
    return (
        p is not None and p.connected and time.monotonic() - p.last_seen <= (p.liveness_s or fleet.liveness_s)
    )


def claim(fleet: FleetCore, host: str, probe_id: str) -> str:
    """Give node ``host`` to ``probe_id`` unless another live probe holds it; return that holder
    ("" when given). A refusal is logged and kept for the next window's result (take_refusals)."""
    holder = fleet._holders.get(host, "")
    if holder and holder != probe_id and alive(fleet, holder):
        why = f"probe {probe_id} registered for node {host}, which live probe {holder} holds: refused"
        fleet._refused.append(why)
        log.error("%s", why)
        return holder
    fleet._holders[host] = probe_id
    return ""


def gone(fleet: FleetCore, probe_id: str) -> bool:
    """No answer will come: unknown, silent too long, or disconnected past the reconnect grace."""
    p = fleet._probes.get(probe_id)
    if p is None:
        return True
    now = time.monotonic()
    if p.via and p.connected:
        return gone(fleet, p.via)  # its relay answers for it
    if p.connected:
        return now - p.last_seen > (p.liveness_s or fleet.liveness_s)
    since = p.disconnected_at or p.last_seen
    return now - since > fleet.reconnect_grace_s


def prune(fleet: FleetCore) -> None:
    """Forget probes disconnected for longer than ``prune_s``.

    A walk over every probe, so at most once per ``prune_s / 10`` (≤ 1 s): run on every
    Register it made joining N probes O(N²) (10,000 probes took minutes)."""
    now = time.monotonic()
    if now - fleet._pruned_at < min(1.0, fleet.prune_s / 10):
        return
    fleet._pruned_at = now
    for pid, p in list(fleet._probes.items()):
        if not p.connected and now - (p.disconnected_at or p.last_seen) > fleet.prune_s:
            del fleet._probes[pid]
            fleet._direct.discard(pid)
            fleet._sessions.pop(p.session_id, None)
            log.info(
                "probe %s@%s pruned: gone for %.0fs", pid, p.host, now - (p.disconnected_at or p.last_seen)
            )
    for sid, p in list(fleet._sessions.items()):
        if fleet._probes.get(p.probe_id) is not p and not p.connected:
            del fleet._sessions[sid]  # a replaced session whose stream has ended
