"""The probe agent: a node's gRPC client of the controller's ProbeControl service.

    agent = ProbeAgent("127.0.0.1:7070", token, node_name="n1", programs=["exec_count"])
    agent.run_forever()        # returns on Shutdown or stop(); raises FleetError / SetupError

It loads its programs (from the closed registry only), says Hello with a random nonce and
refuses a controller whose proof of the token is wrong before it sends anything derived from the
token (swarmscope.core.auth: the token itself never crosses the wire), then Registers with its own
proof of the controller's one-time nonce, then keeps one Session
stream: OpenWindow -> check its ``options`` against the programs' declared params, apply them
(``configure``), snapshot every program, WindowAck; ReadWindow -> the counters so far in a
WindowDone sent as ``so_far`` (the window stays open); CloseWindow -> snapshot again, one Reading
per node of the window (exact counter deltas, plus the gauges of programs that have
``window_gauges``, e.g. procstat, and the samples of those with ``window_samples``, e.g.
map_update) inside one WindowDone; Shutdown -> return. A heartbeat with the agent's own CPU %
and RSS goes up every ``heartbeat_interval_s``.

Caveats: plain threads (a probe is its own process, never gevent-patched). When the
controller goes away the agent re-registers with bounded, jittered, growing waits
(probes/backoff.py) and then raises FleetError; a wrong token (UNAUTHENTICATED /
PERMISSION_DENIED) is not retried. Served by a later upstream of "a,b,...", it moves back to the
first one when that answers again, between windows (probes/failback.py).
The windows themselves (snapshots, deltas, answers kept for a resent command, options) are
probes/windows.py's: open windows survive a reconnect. With ``tls`` the channel is TLS (mTLS
when it carries a client cert). A dead TCP peer that sends no RST is only noticed when a write
fails (no keepalive pings are used, so the controller needs no ping policy).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from swarmscope import __version__
from swarmscope.core import auth
from swarmscope.core.errors import FleetError
from swarmscope.core.sys import heap
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.core.wire import frames
from swarmscope.probes.backoff import Backoff
from swarmscope.probes.failback import Failback, hello_ok
from swarmscope.probes.programs.base import Program, get_program
from swarmscope.probes.selfusage import SelfUsage
from swarmscope.probes.spans import ProbeSpans
from swarmscope.probes.windows import ProbeWindows
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

if TYPE_CHECKING:  # imported only where there is a kubelet (probes.cli.pod_index): ~1 MiB
    from swarmscope.probes.pods import PodIndex

log = logging.getLogger(__name__)

# A controller that rejects our token (or is not a swarmscope controller) will not change its
# mind on retry: fail at once with a clear message instead of hammering it.
FATAL_CODES = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNIMPLEMENTED,
}


class _SessionLost(Exception):
    """The session or registration failed in a way a retry may fix."""


class ProbeAgent:
    def __init__(
        self,
        controller: str,
        token: str,
        node_name: str,
        programs: list[str],
        heartbeat_s: float = 1.0,
        *,
        probe_id: str | None = None,
        retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        rpc_timeout_s: float = 5.0,
        program_factory: Callable[[str], Program] = get_program,
        metrics: Any = None,
        tls: TLSFiles | None = None,
        pods: PodIndex | None = None,
        rand: Callable[[float, float], float] | None = None,
        failback_s: float = 30.0,
        node_key: str = "",
    ):
        if not programs:
            raise FleetError("a probe needs at least one program")
        self.controller = controller
        # "a,b,c": upstreams in turn (relays first, the controller last): a session that fails
        # goes to the next one, under the same probe id, and its open windows go along.
        self.upstreams = [u.strip() for u in controller.split(",") if u.strip()]
        if not self.upstreams:
            raise FleetError(
                f"a probe needs a controller address (host:port[,host:port...]), got {controller!r}"
            )
        self._up = 0
        self.node_name = node_name
        self.program_names = list(dict.fromkeys(programs))
        self.heartbeat_s = heartbeat_s
        self.hostname = socket.gethostname()
        self.probe_id = probe_id or f"{self.hostname}-{os.getpid()}"
        self.node = node_name or self.hostname  # what it speaks for (the controller's ProbeState.host)
        self.retries = retries
        # Jittered waits (probes/backoff.py); ``rand(lo, hi)`` is injectable for tests.
        self.waits = Backoff(backoff_s, max_backoff_s, len(self.upstreams), rand)
        # Away from upstreams[0], go back when it answers (probes/failback.py); 0 = never.
        self.failback = Failback(failback_s, rand)
        self.rpc_timeout_s = rpc_timeout_s
        # The key it proves: its node's, given (the chart's probes hold no more) or derived
        # from the fleet token.
        self._key = node_key or auth.node_key(token, self.node)
        self.tls = tls if tls is not None and tls.enabled else None
        self._factory = program_factory
        # The probe's own provider: its window spans go back in WindowDone (and over OTLP when
        # an endpoint is set), so the run's trace has them either way.
        self.spans = ProbeSpans("swarmscope-probe", {"host.name": node_name})
        self._programs: dict[str, Program] = {}
        # Optional self-metrics sink (probes.selfmetrics.ProbeSelfMetrics): window_opened(),
        # window_closed(readings).
        self.metrics = metrics
        # Its windows (probes/windows.py): what OpenWindow and CloseWindow are answered with.
        self.windows = ProbeWindows(
            self._programs, probe_id=self.probe_id, node_name=node_name, spans=self.spans, pods=pods
        )
        self._stop = threading.Event()
        self._call: grpc.Future | None = None
        self._out: queue.Queue[pb.ProbeMessage | None] | None = None
        self._lock = threading.RLock()  # re-entrant: stop() may run in a signal handler
        self._usage = SelfUsage()
        self.session_id = ""

    # -- lifecycle -------------------------------------------------------------------------

    def run_forever(self) -> None:
        """Load programs, then register and serve sessions until Shutdown, stop() or give-up."""
        self._load_programs()
        try:
            failures = 0
            last = ""
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    with self._channel() as channel:
                        stub = pbg.ProbeControlStub(channel)
                        session_id, interval = self._register(stub)
                        if self._session(stub, session_id, interval):
                            return
                    last = "the controller ended the session"
                except _SessionLost as e:
                    last = str(e)
                if self._stop.is_set():
                    return
                if self.failback.moved.is_set():  # not a failure: home answers again
                    self.failback.moved.clear()
                    log.info("probe: %s answers again: moving back to it", self.upstreams[0])
                    self._up, failures = 0, 0
                    self.waits.reset()
                    continue
                # A session that ran for a while was healthy: start counting failures afresh.
                if time.monotonic() - started > max(5.0, 3 * self.heartbeat_s):
                    failures = 0
                    self.waits.reset()
                failures += 1
                n = len(self.upstreams)
                if failures > self.retries * n:
                    raise FleetError(
                        f"controller {self.controller} unreachable: gave up after {self.retries} "
                        f"retries (last: {last})"
                    )
                self._up += 1  # the next upstream: a short spread, a longer wait after a round
                delay = self.waits.next(failures)
                log.warning(
                    "probe: %s; retry %d/%d at %s in %.1fs",
                    last,
                    failures,
                    self.retries * n,
                    self.upstream,
                    delay,
                )
                self._stop.wait(delay)
        finally:
            self._close_programs()

    def stop(self) -> None:
        """Make run_forever return soon (safe from another thread or a signal handler)."""
        self._stop.set()
        with self._lock:
            call, out = self._call, self._out
        if out is not None:
            out.put(None)
        if call is not None:
            call.cancel()

    # -- programs ----------------------------------------------------------------------------

    @property
    def programs(self) -> dict[str, Program]:
        """The loaded programs by name (a copy; empty before run_forever loads them)."""
        return dict(self._programs)

    def _load_programs(self) -> None:
        for name in self.program_names:
            prog = self._factory(name)  # only registered names resolve (ProbeError otherwise)
            try:
                prog.load()
            except BaseException:
                self._close_programs()
                raise
            self._programs[name] = prog

    def _close_programs(self) -> None:
        for name, prog in list(self._programs.items()):
            try:
                prog.close()
            except Exception:
                log.exception("probe: closing program %s failed", name)
        self._programs.clear()

    # -- gRPC --------------------------------------------------------------------------------

    @property
    def upstream(self) -> str:
        """The upstream this probe dials now (a relay, or the controller)."""
        return self.upstreams[self._up % len(self.upstreams)]

    def _channel(self, target: str | None = None) -> grpc.Channel:
        target = target or self.upstream
        if self.tls is None:
            return grpc.insecure_channel(target)
        return grpc.secure_channel(target, channel_credentials(self.tls), channel_options(self.tls))

    def _home_answers(self) -> bool:
        with self._channel(self.upstreams[0]) as channel:
            return hello_ok(channel, self._key, self.probe_id, self.node, self.rpc_timeout_s)

    def _rpc_failed(self, what: str, e: grpc.RpcError) -> Exception:
        code = e.code() if hasattr(e, "code") else None
        detail = e.details() if hasattr(e, "details") else str(e)
        msg = f"{what} at {self.upstream} failed: {code.name if code else '?'}: {detail}"
        if code in FATAL_CODES:
            return FleetError(msg + " (check the token / that this is a swarmscope controller)")
        return _SessionLost(msg)

    def _register(self, stub: pbg.ProbeControlStub) -> tuple[str, float]:
        nonce = auth.new_nonce()
        try:
            hello = stub.Hello(
                pb.HelloRequest(probe_nonce=nonce, probe_id=self.probe_id, node=self.node),
                timeout=self.rpc_timeout_s,
            )
        except grpc.RpcError as e:
            raise self._rpc_failed("Hello", e) from e
        # The controller proves itself first: an impostor gets nothing keyed by the token.
        if not auth.check(auth.controller_proof(self._key, nonce, hello.server_nonce), hello.proof):
            raise FleetError(
                f"controller {self.upstream} failed to prove it holds the token "
                "(wrong HMAC proof: an impostor, or this probe's token or node key is not the "
                "controller's): "
                "refusing its commands, sending it nothing more"
            )
        req = pb.RegisterRequest(
            probe_id=self.probe_id,
            hostname=self.hostname,
            node_name=self.node_name,
            kernel_release=os.uname().release,
            programs=list(self._programs),
            nonce=nonce,
            version=__version__,
            server_nonce=hello.server_nonce,
            proof=auth.probe_proof(self._key, hello.server_nonce, nonce, self.probe_id),
        )
        try:
            reply = stub.Register(req, timeout=self.rpc_timeout_s)
        except grpc.RpcError as e:
            raise self._rpc_failed("Register", e) from e
        if not reply.session_id:
            raise _SessionLost("Register returned no session_id")
        interval = reply.heartbeat_interval_s if reply.heartbeat_interval_s > 0 else self.heartbeat_s
        log.info("probe %s registered, session %s", self.probe_id, reply.session_id)
        return reply.session_id, interval

    def _heartbeat(self) -> pb.Heartbeat:
        return pb.Heartbeat(
            unix_ns=time.time_ns(),
            cpu_percent=self._usage.cpu_percent(),
            rss_bytes=self._usage.rss_bytes(),
        )

    def _session(self, stub: pbg.ProbeControlStub, session_id: str, interval: float) -> bool:
        """Serve one Session stream; True when told to shut down (or stopped), False if it ended."""
        self.session_id = session_id
        out: queue.Queue[pb.ProbeMessage | None] = queue.Queue()
        ended = threading.Event()

        def requests() -> Iterator[pb.ProbeMessage]:
            # The first message carries the session_id (every one does); a heartbeat is useful
            # content for it.
            yield pb.ProbeMessage(session_id=session_id, heartbeat=self._heartbeat())
            while True:
                m = out.get()
                if m is None:
                    return
                yield from frames(m)  # a large WindowDone goes in parts (core/wire.py)

        trim_due = threading.Event()  # heap.trim() after start-up and each window, off their path
        trim_due.set()

        def beat() -> None:
            while not ended.wait(interval):
                out.put(pb.ProbeMessage(session_id=session_id, heartbeat=self._heartbeat()))
                if trim_due.is_set():
                    trim_due.clear()
                    heap.trim()

        call = stub.Session(requests())
        with self._lock:
            self._call, self._out = call, out
        if self._stop.is_set():  # stop() raced with the session start
            call.cancel()
        hb = threading.Thread(target=beat, name="probe-heartbeat", daemon=True)
        hb.start()
        if self._up % len(self.upstreams):  # away from home: watch for it
            self.failback.start(ended, self._home_answers, lambda: not self.windows, call.cancel)
        shutdown = False
        try:
            for cmd in call:
                kind = cmd.WhichOneof("kind")
                if kind == "open":
                    out.put(pb.ProbeMessage(session_id=session_id, ack=self.windows.open(cmd.open)))
                    if self.metrics is not None:
                        self.metrics.window_opened()
                elif kind == "close":
                    readings = self.windows.close(cmd.close)
                    if self.metrics is not None:
                        self.metrics.window_closed(len(readings))
                    # One message per window: the readings ride in WindowDone's batch.
                    done = pb.WindowDone(
                        run_id=cmd.close.run_id,
                        window_id=cmd.close.window_id,
                        readings=len(readings),
                        batch=readings,
                        trace=self.spans.take(cmd.close.window_id),
                    )
                    out.put(pb.ProbeMessage(session_id=session_id, done=done))
                    trim_due.set()
                elif kind == "read":  # a read so far: the window stays open
                    got = self.windows.read(cmd.read)
                    so_far = pb.WindowDone(
                        run_id=cmd.read.run_id,
                        window_id=cmd.read.window_id,
                        readings=len(got),
                        batch=got,
                        read_id=cmd.read.read_id,
                    )
                    out.put(pb.ProbeMessage(session_id=session_id, so_far=so_far))
                elif kind == "shutdown":
                    log.info("probe: controller asked to shut down: %s", cmd.shutdown.reason)
                    shutdown = True
                    # Half-close so queued messages still go out; give the controller a moment
                    # to end the stream, then cut it.
                    out.put(None)
                    cutter = threading.Timer(2.0, call.cancel)
                    cutter.daemon = True
                    cutter.start()
                else:
                    log.warning("probe: ignoring unknown command %r (seq %d)", kind, cmd.seq)
        except grpc.RpcError as e:
            if shutdown or self._stop.is_set():
                return True
            raise self._rpc_failed("Session", e) from e
        finally:
            ended.set()
            out.put(None)
            with self._lock:
                self._call, self._out = None, None
            call.cancel()
            hb.join(timeout=interval + 1)
        return shutdown or self._stop.is_set()
