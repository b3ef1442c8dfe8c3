"""The probe fleet: the controller's gRPC server that probes register with and stream into.

    fleet = Fleet(token="...", bind="127.0.0.1:0")
    port = fleet.start()
    fleet.wait_for_probes(1, timeout_s=30)
    fleet.open_window(run_id, window_id, nodes_by_host={"host-a": [NodeInfo(...)]},
                      options={"procstat.pids": "123"})     # this window's program options
    readings, missing = fleet.close_window(run_id, window_id, timeout_s=10)
    readings[0].samples     # [ReadingSample("map_update.call", start_ns, end_ns, entries, labels)]

Probes authenticate with the mutual challenge of swarmscope.core.auth (Hello, then Register: the
token never crosses the wire); with ``tls`` the port speaks TLS, and with ``tls.ca`` only
probes holding a certificate that CA signed get in (mTLS). One bidirectional Session per probe
(see proto/swarmscope/v1/probe.proto): commands go down a per-probe queue, readings come up.

Windows are tracked per probe (its ``probe_id``), not per session: a probe that reconnects
mid-window (a new Register, same id) gets the commands its old session missed again (the open
if unacknowledged, the close if unanswered) and keeps its reading; the reconnect is counted
(``take_reconnects``). A window is closed when every probe that acknowledged its opening is in
its ``done`` set — or at the timeout, or once every silent probe is gone (disconnected for
longer than ``reconnect_grace_s``, or silent for its liveness): the silent ones are returned in
``missing`` and every reading that did arrive is kept. A reading counts only for a node the
window asked that probe for, once per node; probes gone for ``prune_s`` are forgotten (the rules:
controller/fleet_live.py). Each probe is handed ``heartbeat_s``, or longer in a fleet of more
than ``heartbeat_budget * heartbeat_s`` direct sessions (``fleet_state.pace``: the fleet's
heartbeats stay near the budget), and a liveness of ``liveness_s`` scaled by the same factor:
per probe, fixed at its Register.
``options`` are checked by each probe against its programs' declared params: a bad key or
value comes back as that host's problem.
Before a session is authenticated the server holds little for a stranger: its gRPC receive
limit is ``wire.WIRE_LIMIT`` (1 MiB) on every call, Hello nonces are exactly 16 bytes, pending
Hellos are bounded (controller/fleet_hello.py) and a Session must send its first message within
``first_message_s``. Readings with per-event samples can be large (map_update: up to
``map_update.max_samples`` per node): an authenticated session sends those in parts, joined up
to ``wire.MAX_MESSAGE_BYTES`` (core/wire.py).

The window bookkeeping is controller/fleet_windows.py's (a mixin of Fleet). The server is grpc.aio
on an event loop of its own thread (controller/fleet_loop.py): a task
per stream, not a thread. Caveat: grpc.aio does not run in a gevent-patched process (every
Locust one): there ``controller.fleet_proc.make_fleet`` runs this Fleet in a child process.
``fleet_loop.grpc_for_gevent`` (for the sync grpc servers that do run there, e.g. the stream tracer's)
needs calling before any such server exists, once, and only when gevent has patched threading.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import grpc

from swarmscope.controller import fleet_live, relay_routes
from swarmscope.controller.fleet_gc import collect_young, spare_gc
from swarmscope.controller.fleet_hello import PendingHellos
from swarmscope.controller.fleet_loop import (
    AioServerThread,
    gevent_patched,
    parse_request,
    probe_control_handlers,
    read_loop,
    refuse,
)
from swarmscope.controller.fleet_state import ProbeState, Window, few, pace, put_all
from swarmscope.controller.fleet_windows import FleetWindows
from swarmscope.controller.options import HEARTBEAT_BUDGET
from swarmscope.core import auth, wire
from swarmscope.core.errors import FleetError
from swarmscope.core.sys.limits import raise_nofile
from swarmscope.core.tls import TLSFiles, server_credentials
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

# How long a Session may take to send its first (authenticating) message.
FIRST_MESSAGE_S = 30.0


# The fleet's gRPC server. No BDP-probing override: turning it off was measured to change
# neither what an unauthenticated flood leaves behind nor its peak (bench/abuse.py, issue 27).
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_concurrent_streams", 100000),
    # Every call, the unauthenticated ones included: larger messages come in parts.
    ("grpc.max_receive_message_length", wire.WIRE_LIMIT),
]


class Fleet(FleetWindows, pb_grpc.ProbeControlServicer):
    """gRPC server (grpc.aio, on a loop thread of its own) + registry of probes + window bookkeeping.

    The bookkeeping is shared by the loop (the handlers) and the callers' threads under one
    ``threading.Condition``, held briefly and never across an ``await``.
    """

    def __init__(
        self,
        token: str,
        bind: str = "127.0.0.1:0",
        heartbeat_s: float = 1.0,
        liveness_s: float = 5.0,
        max_workers: int = 0,  # unused since the server is grpc.aio (kept for callers)
        *,
        tls: TLSFiles | None = None,
        reconnect_grace_s: float | None = None,
        prune_s: float | None = None,
        heartbeat_budget: float = HEARTBEAT_BUDGET,
        expect_probes: int = 0,
    ):
        self.token = token
        self.bind = bind
        self.heartbeat_s = heartbeat_s
        self.liveness_s = liveness_s
        # Heartbeats/s from all direct sessions (controller/options.py), and the fleet size
        # expected (0: unknown), so that the first probes of a big fleet get its interval too.
        self.heartbeat_budget = heartbeat_budget
        self.expect_probes = expect_probes
        self.max_workers = max_workers
        self.tls = tls if tls is not None and tls.enabled else None
        # How long a disconnected probe may take to come back before its windows stop waiting.
        self.reconnect_grace_s = liveness_s if reconnect_grace_s is None else reconnect_grace_s
        self.prune_s = max(60.0, 10 * liveness_s) if prune_s is None else prune_s
        self.port = 0
        self._aio = AioServerThread("fleet")
        self._lock = threading.Condition()
        self._probes: dict[str, ProbeState] = {}  # by probe id: its current session
        self._sessions: dict[str, ProbeState] = {}  # by session id, current and replaced ones
        self._direct: set[str] = set()  # ids in _probes with a session here (not via a relay)
        self._holders: dict[str, str] = {}  # host -> the probe id that last registered for it here
        self._refused: list[str] = []  # registrations refused for a held node, until taken
        self.hellos = PendingHellos()
        self.first_message_s = FIRST_MESSAGE_S
        self._windows: dict[str, Window] = {}
        self._spans: dict[str, list[bytes]] = {}  # window id -> probes' spans (OTLP request bytes)
        self._closed_reconnects: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._seq = 0
        self._pruned_at = 0.0
        self.readings_received = 0
        self.readings_rejected = 0  # for a node, window or probe the window did not ask for
        # A relay's downstream fleet keeps readings as they came (Window.raw), to forward them.
        self.keep_raw = False
        # Called (under the lock) with a probe's state and True when its session starts, False
        # when its current session ends: how a relay learns the roster it announces upstream.
        self.watch: Callable[[ProbeState, bool], None] | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> int:
        if gevent_patched():
            raise FleetError(
                "the fleet's grpc.aio server cannot run in a gevent-patched process: "
                "use controller.fleet_proc.FleetProcess there"
            )
        spare_gc()
        # One socket per probe (or per relay's connection): an inherited soft limit of 1,024
        # would stop accepting there while probes past it retry for ever (sys/limits.py).
        raise_nofile()
        self.port = self._aio.start(
            lambda server: server.add_generic_rpc_handlers((probe_control_handlers(self),)),
            self.bind,
            options=SERVER_OPTIONS,
            credentials=server_credentials(self.tls) if self.tls is not None else None,
        )
        self._aio.post(self._expire_hellos)
        log.info("probe fleet listening on port %d (%s)", self.port, self._mode())
        return self.port

    def _expire_hellos(self) -> None:
        """On the loop, every half TTL: stale Hellos go even when no new Hello comes."""
        with self._lock:
            self.hellos.expire(time.monotonic())
        if self._aio.loop is not None:
            self._aio.loop.call_later(self.hellos.ttl_s / 2, self._expire_hellos)

    def _mode(self) -> str:
        if self.tls is None:
            return "plaintext"
        return "mTLS" if self.tls.ca else "TLS"

    def stop(self, grace_s: float = 1.0) -> None:
        with self._lock:
            self._send([(p, None) for p in self._probes.values()])
        self._aio.stop(grace_s)

    def _send(self, items: list[tuple[ProbeState, pb.Command | None]]) -> None:
        """Queue commands on probes' streams: one hop to the loop for the whole batch."""
        if items:
            self._aio.post(put_all, relay_routes.route(self._probes, items))

    @property
    def address(self) -> str:
        host = self.bind.rsplit(":", 1)[0] or "127.0.0.1"
        return f"{host}:{self.port}"

    # -- queries -------------------------------------------------------------------------
    def probes(self, alive_only: bool = True) -> list[ProbeState]:
        with self._lock:
            fleet_live.prune(self)
            if alive_only:
                return relay_routes.live(self)
            return [p for p in self._probes.values() if not p.relay]

    def wait_for_probes(self, count: int = 1, timeout_s: float = 60.0, hosts: set[str] | None = None) -> None:
        """Block until ``count`` live probes (or probes for every host in ``hosts``) are connected."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.probes()
            have = {p.host for p in live}
            if (hosts is None and len(live) >= count) or (hosts is not None and hosts <= have):
                collect_young()  # the join's survivors, before the first window (fleet_gc)
                return
            if time.monotonic() >= deadline:
                want = f"probes for {few(hosts - have)}" if hosts else f"{count} probe(s)"
                raise FleetError(
                    f"timed out after {timeout_s:.0f}s waiting for {want}; connected: "
                    f"{few(have) if have else 'none'}. Is `swarmscope probe --controller "
                    f"{self.address}` running with the same token?"
                )
            # Each look walks every probe: with thousands, look less often, not less surely.
            time.sleep(0.05 if len(live) < 500 else 0.5)

    def take_refusals(self) -> list[str]:
        """Registrations refused since the last call: a node another live probe holds (once)."""
        with self._lock:
            refused, self._refused = self._refused, []
            return refused

    def shutdown_probes(self, reason: str = "run finished") -> None:
        with self._lock:
            self._send(
                [
                    (p, pb.Command(seq=self._next_seq(), shutdown=pb.Shutdown(reason=reason)))
                    for p in self._probes.values()
                ]
            )

    # -- gRPC service --------------------------------------------------------------------
    async def Hello(self, request: pb.HelloRequest, context: grpc.aio.ServicerContext) -> pb.HelloReply:
        if len(request.probe_nonce) != auth.NONCE_BYTES:
            why = f"probe_nonce must be exactly {auth.NONCE_BYTES} bytes"
            refuse(context, grpc.StatusCode.INVALID_ARGUMENT, why)
            return pb.HelloReply()
        server_nonce = auth.new_nonce()
        with self._lock:
            self.hellos.add(context.peer(), server_nonce, bytes(request.probe_nonce), time.monotonic())
        proof = auth.controller_proof(
            auth.node_key(self.token, request.node), request.probe_nonce, server_nonce
        )
        return pb.HelloReply(server_nonce=server_nonce, proof=proof)

    async def Register(
        self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterReply:
        with self._lock:
            probe_nonce = self.hellos.take(bytes(request.server_nonce), time.monotonic())  # one use only
        # The proof is keyed by the node it registers for: a probe holding another node's key fails.
        host = request.node_name or request.hostname
        key = auth.node_key(self.token, host)
        expected = auth.probe_proof(key, request.server_nonce, request.nonce, request.probe_id)
        if probe_nonce is None or probe_nonce != request.nonce or not auth.check(expected, request.proof):
            why = f"bad proof for node {host!r}, or a server nonce not fresh from Hello"
            refuse(context, grpc.StatusCode.UNAUTHENTICATED, why)
            return pb.RegisterReply()
        with self._lock:
            holder = fleet_live.claim(self, host, request.probe_id)
        if holder:
            refuse(context, grpc.StatusCode.ALREADY_EXISTS, f"node {host} is held by live probe {holder}")
            return pb.RegisterReply()
        sid = uuid.uuid4().hex
        # One hold of the lock from counting the sessions to adding this one: registrations that
        # arrive together are paced by distinct sizes, as if one by one.
        with self._lock:
            n = len(self._direct) + (request.probe_id not in self._direct)  # this one included
            # A relay is paced by the sessions here only: expect_probes counts the probes behind it.
            size = n if request.relay else max(n, self.expect_probes)
            interval, liveness = pace(self.heartbeat_s, self.liveness_s, size, self.heartbeat_budget)
            state = ProbeState(
                probe_id=request.probe_id,
                session_id=sid,
                hostname=request.hostname,
                node_name=request.node_name,
                kernel_release=request.kernel_release,
                programs=list(request.programs),
                version=request.version,
                registered_ns=time.time_ns(),
                last_seen=time.monotonic(),
                relay=request.relay,
                heartbeat_s=interval,
                liveness_s=liveness,
            )
            # A probe that re-registers replaces its old session (same probe id); its windows stay.
            old = self._probes.get(request.probe_id)
            if old is not None:
                if not old.via:  # a relayed one has no stream here (relay_routes._NO_OUTBOX)
                    old.outbox.put_nowait(None)  # on the loop: Register is a handler
                state.reconnects = old.reconnects + 1
                for win in self._windows.values():
                    if request.probe_id in win.expected:
                        win.reconnects[request.probe_id] = win.reconnects.get(request.probe_id, 0) + 1
            self._probes[request.probe_id] = state
            self._direct.add(request.probe_id)
            self._sessions[sid] = state
            fleet_live.prune(self)
            self._lock.notify_all()
        log.info(
            "probe %s registered for node %s (kernel %s, heartbeat %.3gs)%s",
            request.probe_id,
            state.host,
            request.kernel_release,
            interval,
            f", reconnect {state.reconnects}" if state.reconnects else "",
        )
        return pb.RegisterReply(session_id=sid, heartbeat_interval_s=interval)

    async def Session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        # A coroutine handler (context.write); reads in a task of their own, by context.read()
        # (never mixed with request_iterator: one async-generator step less per message).
        try:
            raw = await asyncio.wait_for(context.read(), self.first_message_s)
        except TimeoutError:
            refuse(context, grpc.StatusCode.UNAUTHENTICATED, "no session message in time")
            return
        except (grpc.RpcError, grpc.aio.UsageError, asyncio.CancelledError):
            return
        if raw is grpc.aio.EOF:
            return
        first = parse_request(pb.ProbeMessage, raw, context)
        if first is None:
            return
        with self._lock:
            state = self._sessions.get(first.session_id)
            if state is not None and self._probes.get(state.probe_id) is not state:
                state = None  # a replaced session cannot be resumed
        if state is None:
            refuse(context, grpc.StatusCode.UNAUTHENTICATED, "unknown session: call Hello and Register first")
            return
        with self._lock:
            state.connected = True
            state.last_seen = time.monotonic()
            self._resend(state)
            if self.watch is not None:
                self.watch(state, True)
            self._lock.notify_all()
        self._handle(state, first)
        bad: list[str] = []  # a message that did not parse ends the stream as INVALID_ARGUMENT

        def hung_up() -> None:  # the probe hung up: end the writer too
            self._ended(state)
            state.outbox.put_nowait(None)

        reader = asyncio.create_task(read_loop(context, lambda msg: self._handle(state, msg), bad, hung_up))
        outbox, write = state.outbox, context.write
        try:
            while True:
                data = await outbox.get()
                if data is None:  # after a Shutdown too (put_all)
                    if bad:
                        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, bad[0])
                    return
                await write(data)
        finally:
            reader.cancel()
            self._ended(state)

    def _ended(self, state: ProbeState) -> None:
        with self._lock:
            if state.connected:
                state.connected = False
                state.disconnected_at = time.monotonic()
                if self.watch is not None and self._probes.get(state.probe_id) is state:
                    self.watch(state, False)
            self._lock.notify_all()

    def _handle(self, state: ProbeState, msg: pb.ProbeMessage) -> None:
        kind = msg.WhichOneof("kind")
        pid = state.probe_id
        with self._lock:
            state.last_seen = time.monotonic()
            if kind == "heartbeat":
                state.cpu_percent = msg.heartbeat.cpu_percent
                state.rss_bytes = msg.heartbeat.rss_bytes
            elif state.relay and kind in ("ack", "done", "roster", "so_far"):
                relay_routes.handle(self, state, msg)
            elif kind == "ack":
                win = self._windows.get(msg.ack.window_id)
                if win is not None and pid in win.expected and not win.closing:
                    win.acks[pid] = msg.ack
                    # Wake the waiter only when the last ack is in: with a thousand probes,
                    # waking it per message makes a window O(N^2).
                    if len(win.acks) >= len(win.expected):
                        self._lock.notify_all()
            elif kind == "reading":
                self._take(state, msg.reading.window_id, [msg.reading])
            elif kind == "so_far":
                self._take_so_far(state, msg.so_far)
            elif kind == "done":
                win = self._take(state, msg.done.window_id, list(msg.done.batch))
                if win is not None:
                    if msg.done.trace and pid not in win.done:  # once per probe, resends aside
                        self._spans.setdefault(win.window_id, []).append(msg.done.trace)
                    win.done.add(pid)
                    if win.expected <= win.done:
                        self._lock.notify_all()
