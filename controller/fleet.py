"""The probe fleet: the controller's gRPC server that probes register with and stream into.

    fleet = Fleet(token="...", bind="127.0.0.1:0")
    port = fleet.start()
    fleet.wait_for_probes(1, timeout_s=30)
    fleet.open_window(run_id, window_id, nodes_by_host={"host-a": [NodeInfo(...)]},
                      options={"procstat.pids": "123"})     # this window's program options
    readings, missing = fleet.close_window(run_id, window_id, timeout_s=10)
    readings[0].samples     # [ReadingSample("map_update.call", start_ns, end_ns, entries, labels)]

One bidirectional Session per probe (see proto/swarmscope/v1/probe.proto): commands go down a
per-probe queue, readings come up. A window is closed when every probe that acknowledged its
opening has sent ``WindowDone`` — or at the timeout, when the silent ones are returned in
``missing`` and every reading that did arrive is kept. ``options`` are checked by each probe
against its programs' declared params: a bad key or value comes back as that host's problem.
Readings with per-event samples can be large (map_update: up to ``map_update.max_samples`` per
node), so the server accepts messages up to ``MAX_MESSAGE_BYTES``.

Caveat: inside a gevent-patched process (every Locust process) grpc needs
``grpc.experimental.gevent.init_gevent()`` before any server exists; :func:`grpc_for_gevent`
does that once, and only when gevent has patched threading.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from swarmscope import auth
from swarmscope.controller.model import ProbeReading, ReadingSample
from swarmscope.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_gevent_ready = False

# One WindowDone carries every reading of a probe, samples included (~100 bytes each): gRPC's
# 4 MiB default would refuse a window of a few tens of thousands of map-update calls.
MAX_MESSAGE_BYTES = 512 * 2**20


def grpc_for_gevent() -> None:
    """Make grpc cooperate with gevent when this process is monkey-patched (Locust)."""
    global _gevent_ready
    if _gevent_ready:
        return
    try:
        from gevent import monkey

        patched = monkey.is_module_patched("threading")
    except ImportError:
        patched = False
    if patched:
        import grpc.experimental.gevent as grpc_gevent

        grpc_gevent.init_gevent()
    _gevent_ready = True


@dataclass
class ProbeState:
    """What the controller knows of one registered probe."""

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
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    outbox: queue.Queue[pb.Command | None] = field(default_factory=queue.Queue)

    @property
    def host(self) -> str:
        """The node this probe measures: the key workers' nodes are matched against."""
        return self.node_name or self.hostname


@dataclass
class _Window:
    run_id: str
    window_id: str
    expected: set[str]  # probe ids sent OpenWindow
    acks: dict[str, pb.WindowAck] = field(default_factory=dict)
    readings: list[ProbeReading] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    closing: bool = False


class Fleet(pb_grpc.ProbeControlServicer):
    """gRPC server + registry of probes + window bookkeeping."""

    def __init__(
        self,
        token: str,
        bind: str = "127.0.0.1:0",
        heartbeat_s: float = 1.0,
        liveness_s: float = 5.0,
        max_workers: int = 4096,
    ):
        self.token = token
        self.bind = bind
        self.heartbeat_s = heartbeat_s
        self.liveness_s = liveness_s
        self.max_workers = max_workers
        self.port = 0
        self._server: grpc.Server | None = None
        self._lock = threading.Condition()
        self._probes: dict[str, ProbeState] = {}  # by session id
        self._windows: dict[str, _Window] = {}
        self._spans: dict[str, list[bytes]] = {}  # window id -> probes' spans (OTLP request bytes)
        self._seq = 0
        self.readings_received = 0

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> int:
        grpc_for_gevent()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="fleet"),
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_concurrent_streams", 100000),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ],
            maximum_concurrent_rpcs=None,
        )
        pb_grpc.add_ProbeControlServicer_to_server(self, self._server)
        try:
            self.port = self._server.add_insecure_port(self.bind)
        except RuntimeError as e:
            raise FleetError(f"cannot listen on {self.bind} for probes: {e}") from e
        if self.port == 0:
            raise FleetError(f"cannot listen on {self.bind} for probes (address in use?)")
        self._server.start()
        log.info("probe fleet listening on port %d", self.port)
        return self.port

    def stop(self, grace_s: float = 1.0) -> None:
        with self._lock:
            for p in self._probes.values():
                p.outbox.put(None)
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1)
            self._server = None

    @property
    def address(self) -> str:
        host = self.bind.rsplit(":", 1)[0] or "127.0.0.1"
        return f"{host}:{self.port}"

    # -- queries -------------------------------------------------------------------------
    def probes(self, alive_only: bool = True) -> list[ProbeState]:
        now = time.monotonic()
        with self._lock:
            return [
                p
                for p in self._probes.values()
                if not alive_only or (p.connected and now - p.last_seen <= self.liveness_s)
            ]

    def wait_for_probes(self, count: int = 1, timeout_s: float = 60.0, hosts: set[str] | None = None) -> None:
        """Block until ``count`` live probes (or probes for every host in ``hosts``) are connected."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.probes()
            have = {p.host for p in live}
            if (hosts is None and len(live) >= count) or (hosts is not None and hosts <= have):
                return
            if time.monotonic() >= deadline:
                want = f"probes for {sorted(hosts - have)}" if hosts else f"{count} probe(s)"
                raise FleetError(
                    f"timed out after {timeout_s:.0f}s waiting for {want}; connected: "
                    f"{sorted(have) or 'none'}. Is `swarmscope probe --controller {self.address}` running "
                    "with the same token?"
                )
            time.sleep(0.05)

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
        live = {p.host: p for p in self.probes()}
        problems = {h: "no live probe" for h in nodes_by_host if h not in live}
        with self._lock:
            hosts = {live[h].session_id: h for h in nodes_by_host if h in live}
            win = _Window(run_id, window_id, expected=set(hosts))
            self._windows[window_id] = win
            for host in hosts.values():
                cmd = pb.Command(
                    seq=self._next_seq(),
                    open=pb.OpenWindow(
                        run_id=run_id,
                        window_id=window_id,
                        traceparent=traceparent,
                        programs=list(programs or []),
                        nodes=nodes_by_host[host],
                        options=dict(options or {}),
                    ),
                )
                live[host].outbox.put(cmd)
            deadline = time.monotonic() + timeout_s
            while len(win.acks) < len(win.expected):
                # Woken by the last ack, or every 0.25 s to drop dead probes from the wait.
                pending = {s for s in win.expected - set(win.acks) if self._alive(s)}
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    break
                self._lock.wait(min(left, 0.25))
            for sid in list(win.expected):
                ack = win.acks.get(sid)
                if ack is None or not ack.ok:
                    problems[hosts[sid]] = f"window not opened: {ack.error if ack else 'no acknowledgement'}"
                    win.expected.discard(sid)
        if problems:
            log.warning("window %s: %s", window_id, problems)
        return problems

    def close_window(
        self, run_id: str, window_id: str, timeout_s: float = 30.0
    ) -> tuple[list[ProbeReading], list[str]]:
        """Send CloseWindow; return (readings, probes that did not finish) after all or timeout."""
        with self._lock:
            win = self._windows.get(window_id)
            if win is None:
                raise FleetError(f"close of unknown window {window_id}")
            win.closing = True
            for sid in win.expected:
                p = self._probes.get(sid)
                if p is not None:
                    p.outbox.put(
                        pb.Command(
                            seq=self._next_seq(), close=pb.CloseWindow(run_id=run_id, window_id=window_id)
                        )
                    )
            deadline = time.monotonic() + timeout_s
            while len(win.done) < len(win.expected):
                pending = win.expected - win.done
                dead = {s for s in pending if not self._alive(s)}
                if pending <= dead:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.25))
            missing = sorted(self._probe_name(s) for s in win.expected - win.done)
            del self._windows[window_id]
            return list(win.readings), missing

    def take_spans(self, window_id: str) -> list[bytes]:
        """The spans probes sent with a window's readings (OTLP request bytes), removed here."""
        with self._lock:
            return self._spans.pop(window_id, [])

    def shutdown_probes(self, reason: str = "run finished") -> None:
        with self._lock:
            for p in self._probes.values():
                p.outbox.put(pb.Command(seq=self._next_seq(), shutdown=pb.Shutdown(reason=reason)))

    def _alive(self, session_id: str) -> bool:
        p = self._probes.get(session_id)
        return p is not None and p.connected and time.monotonic() - p.last_seen <= self.liveness_s

    def _probe_name(self, session_id: str) -> str:
        p = self._probes.get(session_id)
        return f"{p.probe_id}@{p.host}" if p else session_id

    # -- gRPC service --------------------------------------------------------------------
    def _check_token(self, context: grpc.ServicerContext) -> None:
        md = dict(context.invocation_metadata())
        if not auth.token_matches(self.token, md.get(auth.TOKEN_HEADER)):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad or missing swarmscope token")

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterReply:
        self._check_token(context)
        if len(request.nonce) < 16:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "nonce must be at least 16 bytes")
        sid = uuid.uuid4().hex
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
        )
        with self._lock:
            # A probe that re-registers replaces its old session (same probe id).
            for old_sid, old in list(self._probes.items()):
                if old.probe_id == request.probe_id:
                    old.outbox.put(None)
                    del self._probes[old_sid]
            self._probes[sid] = state
            self._lock.notify_all()
        log.info(
            "probe %s registered for node %s (kernel %s)",
            request.probe_id,
            state.host,
            request.kernel_release,
        )
        return pb.RegisterReply(
            session_id=sid, proof=auth.proof(self.token, request.nonce), heartbeat_interval_s=self.heartbeat_s
        )

    def Session(
        self, request_iterator: Iterator[pb.ProbeMessage], context: grpc.ServicerContext
    ) -> Iterator[pb.Command]:
        self._check_token(context)
        first = next(request_iterator, None)
        if first is None:
            return
        with self._lock:
            state = self._probes.get(first.session_id)
        if state is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "unknown session: call Register first")
            return
        with self._lock:
            state.connected = True
            state.last_seen = time.monotonic()
            self._lock.notify_all()
        self._handle(state, first)
        reader = threading.Thread(target=self._read_loop, args=(state, request_iterator), daemon=True)
        reader.start()
        try:
            while context.is_active():
                try:
                    cmd = state.outbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                if cmd is None:
                    return
                yield cmd
                if cmd.WhichOneof("kind") == "shutdown":
                    return
        finally:
            with self._lock:
                state.connected = False
                self._lock.notify_all()

    def _read_loop(self, state: ProbeState, it: Iterator[pb.ProbeMessage]) -> None:
        try:
            for msg in it:
                self._handle(state, msg)
        except grpc.RpcError:
            pass  # stream ended; liveness marks the probe dead
        finally:
            with self._lock:
                state.connected = False
                self._lock.notify_all()

    def _handle(self, state: ProbeState, msg: pb.ProbeMessage) -> None:
        kind = msg.WhichOneof("kind")
        with self._lock:
            state.last_seen = time.monotonic()
            if kind == "heartbeat":
                state.cpu_percent = msg.heartbeat.cpu_percent
                state.rss_bytes = msg.heartbeat.rss_bytes
            elif kind == "ack":
                win = self._windows.get(msg.ack.window_id)
                if win is not None:
                    win.acks[state.session_id] = msg.ack
                    # Wake the waiter only when the last ack is in: with a thousand probes,
                    # waking it per message makes a window O(N^2).
                    if len(win.acks) >= len(win.expected):
                        self._lock.notify_all()
            elif kind == "reading":
                r = msg.reading
                win = self._windows.get(r.window_id)
                if win is not None:
                    win.readings.append(_reading(r))
                    self.readings_received += 1
            elif kind == "done":
                win = self._windows.get(msg.done.window_id)
                if win is not None:
                    for r in msg.done.batch:
                        win.readings.append(_reading(r))
                    if msg.done.trace:
                        self._spans.setdefault(win.window_id, []).append(msg.done.trace)
                    self.readings_received += len(msg.done.batch)
                    win.done.add(state.session_id)
                    if len(win.done) >= len(win.expected):
                        self._lock.notify_all()


def _reading(r: Any) -> ProbeReading:
    return ProbeReading(
        probe_id=r.probe_id,
        node=r.node,
        counters=dict(r.counters),
        gauges=dict(r.gauges),
        start_ns=r.start_unix_ns,
        end_ns=r.end_unix_ns,
        error=r.error,
        samples=[ReadingSample(s.series, s.start_ns, s.end_ns, s.value, dict(s.labels)) for s in r.samples],
    )
