"""The probe agent: a node's gRPC client of the controller's ProbeControl service.

    agent = ProbeAgent("127.0.0.1:7070", token, node_name="n1", programs=["exec_count"])
    agent.run_forever()        # returns on Shutdown or stop(); raises FleetError / SetupError

It loads its programs (from the closed registry only), says Hello with a random nonce and
refuses a controller whose proof of the token is wrong before it sends anything derived from the
token (swarmscope.core.auth: the token itself never crosses the wire), then Registers with its own
proof of the controller's one-time nonce, then keeps one Session
stream: OpenWindow -> check its ``options`` against the programs' declared params, apply them
(``configure``), snapshot every program, WindowAck; CloseWindow -> snapshot again, one Reading
per node of the window (exact counter deltas, plus the gauges of programs that have
``window_gauges``, e.g. procstat, and the samples of those with ``window_samples``, e.g.
map_update) inside one WindowDone; Shutdown -> return. A heartbeat with the agent's own CPU %
and RSS goes up every ``heartbeat_interval_s``.

Caveats: plain threads (a probe is its own process, never gevent-patched). When the
controller goes away the agent re-registers with bounded, jittered, growing waits
(probes/backoff.py) and then raises FleetError; a wrong token (UNAUTHENTICATED /
PERMISSION_DENIED) is not retried. Served by a later upstream of "a,b,...", it moves back to the
first one when that answers again, between windows (probes/failback.py).
A node given by ``cgroup_path`` with ``cgroup_id`` 0 is resolved here (ids are node-local
inode numbers); one that does not resolve gets a Reading with ``error`` and no counters.
Open windows survive a reconnect, so a CloseWindow on the new session still gets its delta; an
OpenWindow sent again after a reconnect is acknowledged again without a new snapshot, and a
CloseWindow sent again gets the readings it got the first time (the last ``MAX_CLOSED_WINDOWS``
are kept). With ``tls`` the channel is TLS (mTLS when it carries a client cert). A
program that cannot be read yields Readings with ``error`` set, never silent zeros. A dead
TCP peer that sends no RST is only noticed when a write fails (no keepalive pings are used, so
the controller needs no ping policy). Options apply to programs, not windows: a window whose
options change a program while another window reading it is open marks that other window's
readings with an error; bad options fail the ack (naming the key) and the window reads nothing.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from swarmscope import __version__
from swarmscope.core import auth
from swarmscope.core.errors import ConfigError, FleetError, IncompleteSamplesError, SwarmscopeError
from swarmscope.core.sys import heap
from swarmscope.core.sys.cgroups import resolve_cgroup_id
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.core.wire import frames
from swarmscope.probes import window_span
from swarmscope.probes.backoff import Backoff
from swarmscope.probes.failback import Failback, hello_ok
from swarmscope.probes.programs.base import Program, Snapshot, delta_by_node, get_program
from swarmscope.probes.programs.params import window_options
from swarmscope.probes.selfusage import SelfUsage
from swarmscope.probes.spans import ProbeSpans, WindowSpan
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


# Windows opened but never closed (a controller that died mid-window) are dropped, oldest
# first, beyond this many, so a long-lived probe does not grow without bound.
MAX_OPEN_WINDOWS = 256
# Readings of recently closed windows, for a CloseWindow the controller sends again because the
# answer was lost with a session.
MAX_CLOSED_WINDOWS = 64


@dataclass
class _Window:
    run_id: str
    window_id: str
    nodes: list[pb.NodeInfo]
    start_ns: int
    span: WindowSpan
    before: dict[str, Snapshot] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # by program
    node_errors: dict[str, str] = field(default_factory=dict)  # by node name (unresolvable cgroup)
    pods: dict[str, str] = field(default_factory=dict)  # by node name: "namespace/pod/container"


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
        # cgroup path -> pod (the kubelet's directory names); None off Kubernetes.
        self.pods = pods
        self._told: set[tuple[str, str]] = set()  # (node, cgroup path) already logged
        # The probe's own provider: its window spans go back in WindowDone (and over OTLP when
        # an endpoint is set), so the run's trace has them either way.
        self.spans = ProbeSpans("swarmscope-probe", {"host.name": node_name})
        self._programs: dict[str, Program] = {}
        # Optional self-metrics sink (probes.selfmetrics.ProbeSelfMetrics): window_opened(),
        # window_closed(readings).
        self.metrics = metrics
        self._windows: dict[tuple[str, str], _Window] = {}
        self._closed: OrderedDict[tuple[str, str], list[pb.Reading]] = OrderedDict()
        # The options each program was last configured with ({} = start-up settings; None =
        # unknown after a failed configure, so the next window configures it again).
        self._applied: dict[str, dict[str, Any] | None] = {}
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
            self.failback.start(ended, self._home_answers, lambda: not self._windows, call.cancel)
        shutdown = False
        try:
            for cmd in call:
                kind = cmd.WhichOneof("kind")
                if kind == "open":
                    out.put(pb.ProbeMessage(session_id=session_id, ack=self._open(cmd.open)))
                    if self.metrics is not None:
                        self.metrics.window_opened()
                elif kind == "close":
                    readings = self._close(cmd.close)
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

    # -- windows -----------------------------------------------------------------------------

    def _open(self, cmd: pb.OpenWindow) -> pb.WindowAck:
        again = self._windows.get((cmd.run_id, cmd.window_id))
        if again is not None:
            # Sent again after a reconnect (our first ack was lost): keep the first snapshot.
            err = "; ".join(again.errors.values())
            return pb.WindowAck(
                run_id=cmd.run_id, window_id=cmd.window_id, ok=not err, error=err, unix_ns=again.start_ns
            )
        start = time.time_ns()
        # The window span is a child of the controller's window span (W3C traceparent).
        span = self.spans.start(
            "probe window",
            cmd.traceparent,
            start,
            {
                "swarmscope.run_id": cmd.run_id,
                "swarmscope.window_id": cmd.window_id,
                "swarmscope.probe_id": self.probe_id,
                "swarmscope.node": self.node_name,
            },
        )
        w = _Window(cmd.run_id, cmd.window_id, [], start, span)
        for n in list(cmd.nodes) or [pb.NodeInfo(name=self.node_name, cgroup_id=0)]:
            if n.cgroup_id == 0 and n.cgroup_path:
                # Only a path: cgroup ids are node-local inode numbers, so a remote controller
                # may name a cgroup by path and leave the id to the probe.
                try:
                    n = pb.NodeInfo(
                        name=n.name, cgroup_id=resolve_cgroup_id(n.cgroup_path), cgroup_path=n.cgroup_path
                    )
                except SwarmscopeError as e:
                    w.node_errors[n.name] = f"node {n.name}: {e}"
            w.nodes.append(n)
            self._attribute(w, n)
        names = list(cmd.programs) or list(self._programs)
        try:
            options = window_options(cmd.options, names, self._programs)
        except ConfigError as e:
            # Nothing is applied or read: readings under settings the controller did not ask
            # for would be mislabelled.
            w.errors["options"] = "bad options: " + "; ".join(f"{p.key}: {p.reason}" for p in e.problems)
            names = []
            options = {}
        for name in names:
            prog = self._programs.get(name)
            if prog is None:
                w.errors[name] = f"{name}: not loaded on this probe (loaded: {', '.join(self._programs)})"
                continue
            if not self._configure(w, name, prog, options.get(name, {})):
                continue
            try:
                open_window = getattr(prog, "open_window", None)  # WindowOpener programs (exec_count)
                if open_window is not None:
                    open_window([n for n in w.nodes if n.name not in w.node_errors])
                w.before[name] = prog.snapshot()
            except Exception as e:
                w.errors[name] = f"{name}: snapshot at open failed: {e}"
        self._windows[(cmd.run_id, cmd.window_id)] = w
        while len(self._windows) > MAX_OPEN_WINDOWS:
            stale = self._windows.pop(next(iter(self._windows)))
            stale.span.set_error("never closed")
            stale.span.end()
        err = "; ".join(w.errors.values())
        if err:
            log.warning("probe: window %s opened with errors: %s", cmd.window_id, err)
        return pb.WindowAck(run_id=cmd.run_id, window_id=cmd.window_id, ok=not err, error=err, unix_ns=start)

    def _attribute(self, w: _Window, n: pb.NodeInfo) -> None:
        """Name the pod a node's cgroup is (reading, span, one log line per node and path)."""
        if self.pods is None or not n.cgroup_path:
            return
        ref = self.pods.lookup(n.cgroup_path)
        if ref is None:
            return
        w.pods[n.name] = str(ref)
        w.span.set_attribute(f"swarmscope.pod.{n.name}", str(ref))
        if (n.name, n.cgroup_path) not in self._told:
            self._told.add((n.name, n.cgroup_path))
            log.info("probe: node %s cgroup %s (id %d) is pod %s", n.name, n.cgroup_path, n.cgroup_id, ref)

    def _configure(self, w: _Window, name: str, prog: Program, options: dict[str, Any]) -> bool:
        """Apply this window's options to ``prog`` if they differ from the last ones; False if it failed."""
        configure = getattr(prog, "configure", None)  # Configurable programs (procstat, map_update)
        if configure is None or self._applied.get(name, {}) == options:
            return True
        for other in self._windows.values():
            if name in other.before:
                other.errors[name] = _join(
                    other.errors.get(name, ""), f"{name}: options changed by window {w.window_id} while open"
                )
        try:
            configure(options)
        except Exception as e:
            self._applied[name] = None
            w.errors[name] = f"{name}: applying options failed: {e}"
            return False
        self._applied[name] = options
        return True

    def _close(self, cmd: pb.CloseWindow) -> list[pb.Reading]:
        key = (cmd.run_id, cmd.window_id)
        if key in self._closed:  # sent again after a reconnect: the same answer
            return self._closed[key]
        readings = self._read_close(cmd)
        self._closed[key] = readings
        while len(self._closed) > MAX_CLOSED_WINDOWS:
            self._closed.popitem(last=False)
        return readings

    def _read_close(self, cmd: pb.CloseWindow) -> list[pb.Reading]:
        end = time.time_ns()
        w = self._windows.pop((cmd.run_id, cmd.window_id), None)
        if w is None:
            return [
                pb.Reading(
                    run_id=cmd.run_id,
                    window_id=cmd.window_id,
                    probe_id=self.probe_id,
                    node=self.node_name,
                    end_unix_ns=end,
                    error="window was never opened on this probe",
                )
            ]
        counters: dict[str, dict[str, int]] = {n.name: {} for n in w.nodes}
        gauges: dict[str, dict[str, float]] = {n.name: {} for n in w.nodes}
        samples: dict[str, list[pb.Sample]] = {n.name: [] for n in w.nodes}
        errors = dict(w.errors)
        # A node whose cgroup could not be resolved gets no counters (never the host's).
        measurable = [n for n in w.nodes if n.name not in w.node_errors]
        for name, before in w.before.items():
            prog = self._programs[name]
            try:
                per_node = delta_by_node(before, prog.snapshot(), measurable, prog.counters)
            except Exception as e:
                errors[name] = f"{name}: read at close failed: {e}"
                continue
            for node, cs in per_node.items():
                counters[node].update(cs)
            window_gauges = getattr(prog, "window_gauges", None)  # GaugeSource programs (procstat)
            if window_gauges is not None:
                try:
                    for node, gs in window_gauges(w.start_ns, end, measurable).items():
                        gauges[node].update(gs)
                except Exception as e:
                    errors[name] = f"{name}: gauges at close failed: {e}"
            # SampleSource programs (map_update, exec_count)
            window_samples = getattr(prog, "window_samples", None)
            if window_samples is not None:
                try:
                    got = window_samples(w.start_ns, end, measurable)
                except IncompleteSamplesError as e:  # what it has, with the reason it is not all
                    got = e.samples
                    errors[name] = _join(errors.get(name, ""), str(e))
                except Exception as e:
                    got = {}
                    errors[name] = _join(errors.get(name, ""), f"{name}: samples at close failed: {e}")
                for node, ss in got.items():
                    samples[node] += [
                        pb.Sample(
                            series=x.series,
                            start_ns=x.start_ns,
                            end_ns=x.end_ns,
                            value=x.value,
                            labels=x.labels,
                        )
                        for x in ss
                    ]
        readings = [
            pb.Reading(
                run_id=w.run_id,
                window_id=w.window_id,
                probe_id=self.probe_id,
                node=n.name,
                counters=counters[n.name],
                gauges=gauges[n.name],
                samples=samples[n.name],
                start_unix_ns=w.start_ns,
                end_unix_ns=end,
                error="; ".join(
                    [*([w.node_errors[n.name]] if n.name in w.node_errors else []), *errors.values()]
                ),
                pod=w.pods.get(n.name, ""),
            )
            for n in w.nodes
        ]
        window_span.annotate(w.span, readings, end)
        if any(r.error for r in readings):
            w.span.set_error("a reading has an error")
        w.span.end(end_time=end)
        return readings


def _join(*errors: str) -> str:
    return "; ".join(e for e in errors if e)
