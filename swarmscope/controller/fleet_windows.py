"""The fleet's windows: open on the probes, wait for the acks, close and collect the readings.

    class Fleet(FleetWindows, ...)        # controller/fleet.py: the gRPC side and the probes
    fleet.open_window(run_id, window_id, nodes_by_host={"host-a": [NodeInfo(...)]})
    readings, missing = fleet.close_window(run_id, window_id, timeout_s=10)

The window half of the Fleet (a mixin it inherits): the commands each window sends (to direct
probes, and once per relay through controller/relay_routes.py), the waits on the fleet's
condition, and the readings kept per (probe, node). The server, registration and sessions stay
in fleet.py, which calls ``_resend`` when a probe's new session starts and ``_take`` with what a
probe sent. Caveat: every method here but the public waits expects the fleet's lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from swarmscope.controller import relay_routes
from swarmscope.controller.fleet_gc import gc_held
from swarmscope.controller.fleet_loop import AioServerThread
from swarmscope.controller.fleet_state import ProbeState, SoFar, Window, poll_s, put_all, to_reading
from swarmscope.controller.model import ProbeReading
from swarmscope.core.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb

log = logging.getLogger(__name__)


class FleetWindows:
    """Window bookkeeping over the fleet's probes (fleet.py sets every attribute below)."""

    liveness_s: float
    reconnect_grace_s: float
    prune_s: float
    _lock: threading.Condition
    _sessions: dict[str, ProbeState]
    _direct: set[str]
    _holders: dict[str, str]
    _refused: list[str]
    _pruned_at: float
    _aio: AioServerThread
    _probes: dict[str, ProbeState]
    _windows: dict[str, Window]
    _spans: dict[str, list[bytes]]
    _closed_reconnects: OrderedDict[str, dict[str, int]]
    _seq: int
    keep_raw: bool
    readings_received: int
    readings_rejected: int

    def probes(self, alive_only: bool = True) -> list[ProbeState]:
        raise NotImplementedError  # fleet.py's

    def _send(self, items: list[tuple[ProbeState, pb.Command | None]]) -> None:
        raise NotImplementedError  # fleet.py's

    def take_reconnects(self, window_id: str) -> dict[str, int]:
        """``{probe: reconnects}`` of probes that re-registered while the window was open (once)."""
        with self._lock:
            return self._closed_reconnects.pop(window_id, {})

    # -- windows -------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def open_window(
        self,
        run_id: str,
        window_id: str,
        nodes_by_host: dict[str, list[pb.NodeInfo]],
        programs: list[str] | None = None,
        traceparent: str = "",
        options: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> dict[str, str]:
        """Send OpenWindow to the live probe of every host that has nodes; wait for the acks.

        ``options`` (``{"<program>.<param>": "<text value>"}``) apply to this window only; a
        probe that rejects one (unknown key, bad value) fails its ack with the key named.

        Returns ``{host: problem}`` for hosts whose window is not open (no live probe, no
        acknowledgement in time, or the probe's error). Those nodes will have no kernel count;
        the caller records them as missing and the run goes on.
        """
        with self._lock, gc_held():  # a burst of writes and acks: collect after it (fleet_gc)
            win, hosts, problems = self.begin_open(
                run_id, window_id, nodes_by_host, programs, traceparent, options
            )
            failed = self.wait_acks(win, set(hosts), time.monotonic() + timeout_s)
            problems.update({hosts[pid]: why for pid, why in failed.items()})
        if problems:
            log.warning("window %s: %s", window_id, problems)
        return problems

    def begin_open(
        self,
        run_id: str,
        window_id: str,
        nodes_by_host: Mapping[str, list[pb.NodeInfo]],
        programs: list[str] | None = None,
        traceparent: str = "",
        options: Mapping[str, str] | None = None,
    ) -> tuple[Window, dict[str, str], dict[str, str]]:
        """Send OpenWindow to the live probe of each host (caller holds the lock); no wait.

        A window already open is widened: a relay gets the open of a probe that moved to it
        mid-window, and, if the window is closing, that probe's close right after.
        Returns (window, {probe id: host} sent to, {host: "no live probe"})."""
        live = {p.host: p for p in self.probes()}
        problems = {h: "no live probe" for h in nodes_by_host if h not in live}
        hosts = {live[h].probe_id: h for h in nodes_by_host if h in live}
        win = self._windows.get(window_id)
        if win is None:
            win = self._windows[window_id] = Window(run_id, window_id, nodes={}, opens={}, expected=set())
        win.template = pb.OpenWindow(
            run_id=run_id,
            window_id=window_id,
            traceparent=traceparent,
            programs=list(programs or []),
            options=dict(options or {}),
        )
        items: list[tuple[ProbeState, pb.Command | None]] = []
        batches: dict[str, pb.Command] = {}  # relay id -> its one OpenWindow for all its hosts
        for pid, host in hosts.items():
            state = self._probes[pid]
            win.node_info[pid] = nodes = nodes_by_host[host]
            win.nodes[pid] = {n.name for n in nodes}
            win.expected.add(pid)
            win.opens.pop(pid, None)  # built when first needed (open_cmd): most never are
            if not state.via:
                items.append((state, self.open_cmd(win, pid)))
                if win.closing:
                    items.append((state, win.close))
                continue
            relay_routes.batch_open(self, batches, items, win, state, host)
        self._send(items)
        return win, hosts, problems

    def open_cmd(self, win: Window, pid: str) -> pb.Command:
        """The OpenWindow of one probe of a window (lock held): sent to a direct probe, and sent
        again to a probe that reconnected or moved to another relay."""
        cmd = win.opens.get(pid)
        if cmd is None:
            cmd = win.opens[pid] = pb.Command(seq=self._next_seq(), open=win.template)
            cmd.open.nodes.extend(win.node_info[pid])
        return cmd

    def wait_acks(self, win: Window, pids: set[str], deadline: float) -> dict[str, str]:
        """Wait (lock held) for the acks of ``pids``; return {probe id: problem} of those not open."""
        self._wait_answers(win, win.acks.keys(), deadline, pids)
        if win.closing:  # widened while closing (a relay): the close accounts for every probe
            return {}
        problems = {}
        for pid in pids:
            ack = win.acks.get(pid)
            if ack is None or not ack.ok:
                problems[pid] = f"window not opened: {ack.error if ack else 'no acknowledgement'}"
                win.expected.discard(pid)
        return problems

    def close_window(
        self, run_id: str, window_id: str, timeout_s: float = 30.0, drain: tuple[str, int, int] | None = None
    ) -> tuple[list[ProbeReading], list[str]]:
        """Send CloseWindow; return (readings, probes that did not finish) after all or timeout.
        ``drain`` (prefix, first number, rounds): each probe also runs the tracer's per-CPU sentinels."""
        with self._lock, gc_held():  # a burst of writes and readings: collect after it
            win = self._windows.get(window_id)
            if win is None:
                raise FleetError(f"close of unknown window {window_id}")
            self.begin_close(win, drain)
            missing = self.finish_close(win, time.monotonic() + timeout_s)
            return list(win.readings.values()), missing

    def begin_close(self, win: Window, drain: tuple[str, int, int] | None = None) -> None:
        """Send CloseWindow to every probe the window waits for (caller holds the lock)."""
        win.closing = True
        close = pb.CloseWindow(run_id=win.run_id, window_id=win.window_id)
        if drain is not None:
            close.drain_prefix, close.drain_from, close.drain_rounds = drain
        win.close = pb.Command(seq=self._next_seq(), close=close)
        self._aio.post(put_all, relay_routes.close_items(self, win))

    def finish_close(self, win: Window, deadline: float) -> list[str]:
        """Wait (lock held) until every probe is done, gone, or lost below a relay, or the
        deadline; forget the window; return the names of the probes that did not finish."""
        missing = sorted(map(self._probe_name, self._wait_answers(win, win.done, deadline)))
        if self._windows.get(win.window_id) is win:
            del self._windows[win.window_id]
        if win.reconnects:
            self._closed_reconnects[win.window_id] = {
                self._probe_name(p): n for p, n in win.reconnects.items()
            }
            while len(self._closed_reconnects) > 1024:  # nobody took them: do not grow forever
                self._closed_reconnects.popitem(last=False)
        return missing

    def read_window(self, window_id: str, timeout_s: float = 2.0) -> tuple[list[Any], list[str]]:
        """The counters so far of an open window (ReadWindow; it stays open): every probe that
        acknowledged it answers with its deltas since the open. Returns (readings, the probes
        that did not answer within ``timeout_s``); ([], []) when the window is not open or is
        closing. Readings are ProbeReadings (pb.Readings in a relay's fleet, ``keep_raw``)."""
        with self._lock:
            win = self._windows.get(window_id)
            if win is None or win.closing:
                return [], []
            read_id = self._next_seq()
            cmd = pb.Command(
                seq=read_id, read=pb.ReadWindow(run_id=win.run_id, window_id=window_id, read_id=read_id)
            )
            pids = {pid for pid, ack in win.acks.items() if ack.ok} & win.expected
            so_far = win.reads[read_id] = SoFar()
            self._aio.post(put_all, relay_routes.close_items(self, win, cmd, pids))
            unanswered = self._wait_answers(win, so_far.answered, time.monotonic() + timeout_s, pids)
            win.reads.pop(read_id, None)
            return list(so_far.readings.values()), sorted(map(self._probe_name, unanswered))

    def _wait_answers(
        self, win: Window, answered: AbstractSet[str], deadline: float, pids: set[str] | None = None
    ) -> set[str]:
        """Wait (lock held) until each of ``pids`` is in ``answered``, lost below a relay or gone,
        or the deadline; return those not in ``answered``. The wait of the open's acks, a read's
        answers and (``pids`` None: every probe the window waits for, as a relay widens it) the
        close's readings; the first two end when the window starts closing."""
        while True:
            # Woken by the last answer, or every poll_s to drop gone probes from the wait.
            want = win.expected if pids is None else pids
            pending = want - answered - win.lost.keys()
            left = deadline - time.monotonic()
            if not pending or left <= 0 or (pids is not None and win.closing):
                break
            if not relay_routes.not_gone(self, pending):  # none of them will answer
                break
            self._lock.wait(min(left, poll_s(len(pending))))
        return set(want - answered)

    def take_spans(self, window_id: str) -> list[bytes]:
        """The spans probes sent with a window's readings (OTLP request bytes), removed here."""
        with self._lock:
            return self._spans.pop(window_id, [])

    def _probe_name(self, probe_id: str) -> str:
        p = self._probes.get(probe_id)
        return f"{p.probe_id}@{p.host}" if p else probe_id

    def _resend(self, state: ProbeState) -> None:
        """A new session of a probe: the commands of its open windows that its old one missed."""
        for win in self._windows.values():
            pid = state.probe_id
            if pid not in win.expected:
                continue
            if win.closing and win.close is not None and pid not in win.done:
                put_all([(state, win.close)])  # on the loop: called from Session
            elif not win.closing and pid not in win.acks:
                put_all([(state, self.open_cmd(win, pid))])

    def _take(self, state: ProbeState, window_id: str, readings: list[Any]) -> Window | None:
        """Keep the readings a window asked this probe for (caller holds the lock)."""
        win = self._windows.get(window_id)
        if win is None or state.probe_id not in win.expected:
            self.readings_rejected += len(readings)
            return None
        for r in readings:
            self.accept(win, state.probe_id, r)
        return win

    def _take_so_far(self, state: ProbeState, answer: pb.WindowDone) -> None:
        """A direct probe's answer to a ReadWindow (lock held): kept while that read waits."""
        win = self._windows.get(answer.window_id)
        so_far = win.reads.get(answer.read_id) if win is not None else None
        if win is None or so_far is None or state.probe_id not in win.expected:
            return  # a read that gave up waiting, or a window closed since: nobody waits for it
        for r in answer.batch:
            self.accept(win, state.probe_id, r, so_far)
        so_far.answered.add(state.probe_id)
        self._lock.notify_all()

    def accept(self, win: Window, probe_id: str, r: Any, so_far: SoFar | None = None) -> None:
        """Keep one reading if the window asked ``probe_id`` for its node (lock held): the
        window's, or a read's so far."""
        if r.node not in win.nodes.get(probe_id, ()) or r.run_id != win.run_id:
            self.readings_rejected += 1
            log.warning(
                "probe %s sent a reading for node %r, not asked in window %s", probe_id, r.node, win.window_id
            )
            return
        # Keyed by node: a close answered twice (on both sides of a reconnect) counts once.
        if so_far is not None:
            if self.keep_raw:
                r.probe_id = probe_id  # the authenticated session's, not what the probe claimed
            so_far.readings[(probe_id, r.node)] = r if self.keep_raw else to_reading(r, probe_id)
            return
        if self.keep_raw:
            win.raw[(probe_id, r.node)] = r
        else:
            win.readings[(probe_id, r.node)] = to_reading(r, probe_id)
        self.readings_received += 1
