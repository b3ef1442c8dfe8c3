"""``swarmscope relay``'s engine: a fleet towards N probes and one probe towards the controller.

    relay = Relay(["ctl:7070"], token, bind="0.0.0.0:7071")
    relay.start()            # the downstream fleet listens (Hello/Register, TLS/mTLS as the controller's)
    relay.run_forever()      # register upstream (relay=True), announce the roster, serve windows

Downstream it is a ``Fleet`` (controller/fleet.py): the same handshake, per-probe windows,
reconnects, heartbeat pacing and missing rules. Upstream it registers as a relay and sends a
``Roster`` (the probes behind it, as changes, at most every ``roster_s``); the controller routes
those hosts' windows to it (controller/relay_routes.py). One OpenWindow from upstream carries
every node of its hosts (``NodeInfo.host``): the relay opens it on each probe, answers with one
WindowAck per outcome, and at CloseWindow with one WindowDone: every reading as the probes sent
it, the probes done and the probes it lost (``missing``); a ReadWindow (a read so far) the same
way, answered with one ``so_far``. An OpenWindow for a window already
open widens it (a probe that moved here mid-window). Upstreams are a list: when one fails the
relay registers with the next, under the same relay id. Caveat: the relay answers a close after
its own ``window_timeout_s``, which must stay under the controller's close timeout (30 s by
default).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import grpc

from swarmscope import __version__
from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_gc import gc_held
from swarmscope.controller.fleet_state import ProbeState, Window, fill_table
from swarmscope.controller.options import HEARTBEAT_BUDGET
from swarmscope.core import auth
from swarmscope.core.errors import FleetError
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.core.wire import frames
from swarmscope.probes.backoff import Backoff
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

log = logging.getLogger(__name__)


class Relay:
    def __init__(
        self,
        upstreams: list[str],
        token: str,
        bind: str = "0.0.0.0:7071",
        *,
        relay_id: str = "",
        heartbeat_s: float = 1.0,
        liveness_s: float = 5.0,
        heartbeat_budget: float = HEARTBEAT_BUDGET,
        window_timeout_s: float = 20.0,
        roster_s: float = 0.1,
        retries: int = 10,
        tls: TLSFiles | None = None,
        upstream_tls: TLSFiles | None = None,
    ):
        if not upstreams:
            raise FleetError("a relay needs at least one upstream (the controller, or another relay)")
        self.upstreams = list(upstreams)
        self.relay_id = relay_id or f"relay-{socket.gethostname()}-{os.getpid()}"
        self.heartbeat_s = heartbeat_s
        self.window_timeout_s = window_timeout_s
        # A read so far waits this long for its probes here: under the controller's own wait
        # (controller/rolling.py), so a slow probe is named missing, not the whole relay.
        self.read_timeout_s = 1.0
        self.roster_s = roster_s
        self.retries = retries
        self.upstream_tls = upstream_tls if upstream_tls is not None and upstream_tls.enabled else None
        self._token = token
        # Its probes' heartbeats are paced as the controller's are (fleet_state.pace), by the
        # number of probes here: the relay's own heartbeat upstream is paced by the controller.
        self.fleet = Fleet(
            token,
            bind,
            heartbeat_s=heartbeat_s,
            liveness_s=liveness_s,
            tls=tls,
            heartbeat_budget=heartbeat_budget,
        )
        self.fleet.keep_raw = True
        self.fleet.watch = self._watch
        self._changes: deque[tuple[str, str, bool]] = deque()  # (probe id, host, joined)
        self._stop = threading.Event()
        self._out: queue.Queue[pb.ProbeMessage | None] | None = None
        self._call: Any = None

    def start(self) -> int:
        return self.fleet.start()

    def stop(self) -> None:
        self._stop.set()
        out, call = self._out, self._call
        if out is not None:
            out.put(None)
        if call is not None:
            call.cancel()  # the upstream may keep the stream open: do not wait for it

    # -- downstream --------------------------------------------------------------------------
    def _watch(self, state: ProbeState, joined: bool) -> None:
        self._changes.append((state.probe_id, state.host, joined))  # deque: thread-safe append

    # -- upstream ----------------------------------------------------------------------------
    def run_forever(self) -> None:
        """Serve upstream sessions, the next upstream after each failure, until Shutdown/stop()."""
        failures, i = 0, 0
        # Jittered like the probes' (probes/backoff.py): relays that lost one upstream at one
        # instant do not all register with the next one at one instant.
        waits = Backoff(0.5, 8.0, len(self.upstreams))
        try:
            while not self._stop.is_set():
                target = self.upstreams[i % len(self.upstreams)]
                started = time.monotonic()
                try:
                    if self._serve(target):
                        return
                    last = "upstream ended the session"
                except grpc.RpcError as e:
                    last = f"{e.code().name if hasattr(e, 'code') else '?'}"
                if self._stop.is_set():
                    return
                if time.monotonic() - started > 10:
                    failures = 1  # a session that held a while: a new streak
                    waits.reset()
                else:
                    failures += 1
                if failures > self.retries:
                    raise FleetError(f"relay: every upstream failed {self.retries} times (last: {last})")
                i += 1
                log.warning(
                    "relay: upstream %s: %s; trying %s", target, last, self.upstreams[i % len(self.upstreams)]
                )
                # A spread before the next upstream of a round, a growing (bounded) wait after a
                # whole round failed.
                self._stop.wait(waits.next(failures))
        finally:
            # Sessions end, probes stay up: they dial their next upstream (another relay, the
            # controller) and come back by failback. Only the upstream's Shutdown (above) is
            # passed on: a relay stopping is not the run ending (docs/scale-out.md, "Failback").
            self.fleet.stop()

    def _channel(self, target: str) -> grpc.Channel:
        opts = [
            ("grpc.max_send_message_length", 512 * 2**20),
            ("grpc.max_receive_message_length", 512 * 2**20),
        ]
        if self.upstream_tls is None:
            return grpc.insecure_channel(target, opts)
        creds = channel_credentials(self.upstream_tls)
        return grpc.secure_channel(target, creds, opts + channel_options(self.upstream_tls))

    def _register(self, stub: pbg.ProbeControlStub, target: str) -> pb.RegisterReply:
        nonce = auth.new_nonce()
        key = auth.node_key(self._token, self.relay_id)  # a relay registers as its own node
        hello = stub.Hello(
            pb.HelloRequest(probe_nonce=nonce, probe_id=self.relay_id, node=self.relay_id), timeout=10
        )
        if not auth.check(auth.controller_proof(key, nonce, hello.server_nonce), hello.proof):
            raise FleetError(f"upstream {target} failed to prove it holds the token: refusing it")
        return stub.Register(
            pb.RegisterRequest(
                probe_id=self.relay_id,
                hostname=socket.gethostname(),
                node_name=self.relay_id,
                kernel_release=os.uname().release,
                nonce=nonce,
                version=__version__,
                server_nonce=hello.server_nonce,
                proof=auth.probe_proof(key, hello.server_nonce, nonce, self.relay_id),
                relay=True,
            ),
            timeout=10,
        )

    def _serve(self, target: str) -> bool:
        """One upstream session; True when told to shut down (or stopped)."""
        with self._channel(target) as channel:
            stub = pbg.ProbeControlStub(channel)
            reply = self._register(stub, target)
            sid = reply.session_id
            out: queue.Queue[pb.ProbeMessage | None] = queue.Queue()
            self._out = out
            ended = threading.Event()
            # The whole roster first (a new upstream knows nothing of us), then changes.
            self._changes.clear()
            roster = pb.Roster(
                added=[pb.RosterEntry(probe_id=p.probe_id, host=p.host) for p in self.fleet.probes()]
            )

            def requests() -> Iterator[pb.ProbeMessage]:
                yield pb.ProbeMessage(session_id=sid, roster=roster)
                while (m := out.get()) is not None:
                    yield from frames(m)  # a WindowDone for many probes goes in parts (core/wire.py)

            def tick() -> None:
                beat = 0.0
                while not ended.wait(self.roster_s):
                    if time.monotonic() - beat >= (reply.heartbeat_interval_s or self.heartbeat_s):
                        beat = time.monotonic()
                        out.put(pb.ProbeMessage(heartbeat=pb.Heartbeat(unix_ns=time.time_ns())))
                    if self._changes:
                        out.put(pb.ProbeMessage(roster=self._drain()))

            call = self._call = stub.Session(requests())
            ticker = threading.Thread(target=tick, name="relay-tick", daemon=True)
            ticker.start()
            try:
                for cmd in call:
                    kind = cmd.WhichOneof("kind")
                    if kind == "open":
                        self._open(cmd.open, out)
                    elif kind == "close":
                        self._close(cmd.close, out)
                    elif kind == "read":
                        self._read(cmd.read, out)
                    elif kind == "shutdown":
                        self.fleet.shutdown_probes(cmd.shutdown.reason)
                        return True
            except grpc.RpcError:
                if self._stop.is_set():
                    return True
                raise
            finally:
                ended.set()
                out.put(None)
                call.cancel()
            return self._stop.is_set()

    def _drain(self) -> pb.Roster:
        # Each probe's last change only: a probe that left and came back within one roster
        # period would otherwise be both added and removed, and the controller (which applies
        # removals after additions) would mark a connected probe gone.
        last: dict[str, tuple[str, bool]] = {}
        while self._changes:
            pid, host, joined = self._changes.popleft()
            last.pop(pid, None)  # re-inserted: the roster keeps the order of last changes
            last[pid] = (host, joined)
        roster = pb.Roster()
        for pid, (host, joined) in last.items():
            if joined:
                roster.added.add(probe_id=pid, host=host)
            else:
                roster.removed.append(pid)
        return roster

    # -- windows -----------------------------------------------------------------------------
    # begin_* run here, on the upstream reader, in command order (an open that widens a window
    # lands before its close); the waits run in threads of their own.
    def _open(self, cmd: pb.OpenWindow, out: queue.Queue[pb.ProbeMessage | None]) -> None:
        by_host: dict[str, list[pb.NodeInfo]] = {}
        for n in cmd.nodes:
            by_host.setdefault(n.host, []).append(
                pb.NodeInfo(name=n.name, cgroup_id=n.cgroup_id, cgroup_path=n.cgroup_path)
            )
        fleet = self.fleet
        with fleet._lock:
            win, hosts, problems = fleet.begin_open(
                cmd.run_id, cmd.window_id, by_host, list(cmd.programs), cmd.traceparent, cmd.options
            )
        lost = {h: why for h, why in problems.items()}

        def wait() -> None:
            # No collection mid-burst, as at the controller (controller/fleet_gc.py).
            with gc_held(), fleet._lock:
                failed = fleet.wait_acks(win, set(hosts), time.monotonic() + self.window_timeout_s)
                acked = [pid for pid in hosts if pid in win.acks and pid not in failed]
            groups: dict[tuple[bool, str], list[str]] = {(True, ""): acked} if acked else {}
            for pid, why in failed.items():
                groups.setdefault((False, why), []).append(pid)
            for (ok, why), pids in groups.items():
                ack = pb.WindowAck(run_id=cmd.run_id, window_id=cmd.window_id, ok=ok, error=why, probes=pids)
                out.put(pb.ProbeMessage(ack=ack))
            if lost:
                log.warning(
                    "relay: window %s: hosts with no live probe here: %s", cmd.window_id, sorted(lost)
                )

        threading.Thread(target=wait, name="relay-open", daemon=True).start()

    def _close(self, cmd: pb.CloseWindow, out: queue.Queue[pb.ProbeMessage | None]) -> None:
        fleet = self.fleet
        with fleet._lock:
            win = fleet._windows.get(cmd.window_id)
            if win is not None and win.closing:
                return  # a close already under way answers for every probe, widened ones too
            if win is not None:  # a drain asked for goes on to the probes here
                drain = (cmd.drain_prefix, cmd.drain_from, cmd.drain_rounds) if cmd.drain_prefix else None
                fleet.begin_close(win, drain)

        def wait(win: Window | None) -> None:
            missing: list[str] = []
            if win is not None:
                with gc_held(), fleet._lock:
                    missing = fleet.finish_close(win, time.monotonic() + self.window_timeout_s)
            done = pb.WindowDone(run_id=cmd.run_id, window_id=cmd.window_id, missing=missing)
            if win is not None:
                done.probes.extend(sorted(win.done))
                fill_table(done, ((pid, r) for (pid, _node), r in win.raw.items() if pid in win.done))
                done.trace = b"".join(fleet.take_spans(cmd.window_id))
            out.put(pb.ProbeMessage(done=done))

        threading.Thread(target=wait, args=(win,), name="relay-close", daemon=True).start()

    def _read(self, cmd: pb.ReadWindow, out: queue.Queue[pb.ProbeMessage | None]) -> None:
        """A read so far: sent on to the probes here, answered once for all of them (the probes
        that did not answer within ``read_timeout_s`` named in ``missing``)."""

        def wait() -> None:
            readings, missing = self.fleet.read_window(cmd.window_id, self.read_timeout_s)
            answer = pb.WindowDone(
                run_id=cmd.run_id, window_id=cmd.window_id, read_id=cmd.read_id, missing=missing
            )
            answer.probes.extend(sorted({r.probe_id for r in readings}))
            fill_table(answer, ((r.probe_id, r) for r in readings))
            out.put(pb.ProbeMessage(so_far=answer))

        threading.Thread(target=wait, name="relay-read", daemon=True).start()
