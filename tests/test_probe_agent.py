"""The probe agent end to end over real gRPC on 127.0.0.1, against a minimal test controller.

The controller here is a small stand-in for controller/fleet.py that follows the proto's
comments: Hello with the controller's proof, Register with the probe's, session_id in the first
message. It records everything it was sent, so an impostor's haul can be checked.
"""

from __future__ import annotations

import http.server
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope import auth
from swarmscope.errors import FleetError, ProbeError
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.programs.base import Snapshot
from swarmscope.sys.cgroups import cgroup_id
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

TOKEN = "test-token-0123456789"


class TestController(pbg.ProbeControlServicer):
    __test__ = False  # not a pytest class

    def __init__(self, token: str = TOKEN, bad_proof: bool = False, heartbeat_s: float = 0.2):
        self.token = token
        self.bad_proof = bad_proof
        self.heartbeat_s = heartbeat_s
        self.registers: list[pb.RegisterRequest] = []
        self.hellos: list[pb.HelloRequest] = []
        self.metadata: list[tuple[str, str]] = []  # every call's metadata
        self._server_nonces: dict[bytes, bytes] = {}
        self.sessions: list[str] = []
        self.commands: queue.Queue[pb.Command | None] = queue.Queue()
        self.messages: queue.Queue[pb.ProbeMessage] = queue.Queue()
        self.rejected = 0
        self._seq = 0

    def Hello(self, request, context):
        self.metadata += list(context.invocation_metadata())
        self.hellos.append(request)
        sn = auth.new_nonce()
        self._server_nonces[sn] = request.probe_nonce
        proof = b"\0" * 32 if self.bad_proof else auth.controller_proof(self.token, request.probe_nonce, sn)
        return pb.HelloReply(server_nonce=sn, proof=proof)

    def Register(self, request, context):
        self.metadata += list(context.invocation_metadata())
        self.registers.append(request)
        pn = self._server_nonces.pop(request.server_nonce, None)
        want = auth.probe_proof(self.token, request.server_nonce, request.nonce, request.probe_id)
        if pn != request.nonce or not auth.check(want, request.proof):
            self.rejected += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad proof")
        sid = uuid.uuid4().hex
        self.sessions.append(sid)
        return pb.RegisterReply(session_id=sid, heartbeat_interval_s=self.heartbeat_s)

    def Session(self, request_iterator, context):
        self.metadata += list(context.invocation_metadata())
        first = next(request_iterator)
        if first.session_id not in self.sessions:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown session")
        self.messages.put(first)

        def read() -> None:
            try:
                for m in request_iterator:
                    self.messages.put(m)
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()
        while context.is_active():
            try:
                cmd = self.commands.get(timeout=0.05)
            except queue.Empty:
                continue
            if cmd is None:
                return
            yield cmd
            if cmd.WhichOneof("kind") == "shutdown":
                return

    def send(self, **kind) -> None:
        self._seq += 1
        self.commands.put(pb.Command(seq=self._seq, **kind))

    def wait_for(self, kind: str, timeout: float = 10.0) -> pb.ProbeMessage:
        deadline = time.monotonic() + timeout
        while True:
            m = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if m.WhichOneof("kind") == kind:
                return m

    def window_result(self, timeout: float = 10.0) -> tuple[list[pb.Reading], pb.WindowDone]:
        readings: list[pb.Reading] = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if m.WhichOneof("kind") == "reading":
                readings.append(m.reading)
            elif m.WhichOneof("kind") == "done":
                return [*readings, *m.done.batch], m.done


def _serve(ctl: TestController, port: int = 0) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pbg.add_ProbeControlServicer_to_server(ctl, server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, port


@pytest.fixture
def controller() -> Iterator[tuple[TestController, str]]:
    ctl = TestController()
    server, port = _serve(ctl)
    yield ctl, f"127.0.0.1:{port}"
    server.stop(0)


class AgentThread:
    """Runs an agent's run_forever in a thread and keeps what it raised."""

    def __init__(self, agent: ProbeAgent):
        self.agent = agent
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.agent.run_forever()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float = 10.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "agent did not finish"

    def stop(self) -> None:
        self.agent.stop()
        self.join()


class FakeProgram:
    """A stand-in program whose counter grows by 5 per snapshot; ``fail`` makes reads raise."""

    counters: tuple[str, ...] = ("ticks",)

    def __init__(self, name: str, fail: bool = False):
        self.name = name
        self.fail = fail
        self.n = 0
        self.closed = False

    def load(self) -> None:
        pass

    def snapshot(self) -> Snapshot:
        if self.fail:
            raise ProbeError(f"{self.name}: map read failed")
        self.n += 5
        return {42: {"ticks": self.n}}

    def close(self) -> None:
        self.closed = True


def fake_factory(progs: dict[str, FakeProgram]):
    return lambda name: progs[name]


@pytest.mark.root
@pytest.mark.bpf
def test_window_counts_exact_execs(controller) -> None:
    ctl, addr = controller
    run = AgentThread(ProbeAgent(addr, TOKEN, "probe-node", ["exec_count"], probe_id="p1"))
    try:
        first = ctl.wait_for("heartbeat", timeout=30)  # BCC compile + load happen first
        reg = ctl.registers[0]
        assert first.session_id == ctl.sessions[0]
        assert reg.node_name == "probe-node" and list(reg.programs) == ["exec_count"]
        assert len(reg.nonce) >= 16 and reg.probe_id == "p1" and reg.kernel_release
        with temp_cgroup("n1") as n1, temp_cgroup("n2") as n2:
            nodes = [
                pb.NodeInfo(name="n1", cgroup_id=cgroup_id(n1), cgroup_path=str(n1)),
                pb.NodeInfo(name="n2", cgroup_id=cgroup_id(n2), cgroup_path=str(n2)),
                pb.NodeInfo(name="host", cgroup_id=0),
                # By path only (ids are node-local): the probe resolves it under the v2 mount.
                pb.NodeInfo(name="n1-by-path", cgroup_path="/" + n1.name),
                pb.NodeInfo(name="ghost", cgroup_path="/swarmscope-test-no-such-cgroup"),
            ]
            ctl.send(open=pb.OpenWindow(run_id="r1", window_id="w1", nodes=nodes))
            ack = ctl.wait_for("ack").ack
            assert (ack.ok, ack.error, ack.window_id) == (True, "", "w1")
            exec_in_cgroup(n1, 9)
            exec_in_cgroup(n2, 4)
            ctl.send(close=pb.CloseWindow(run_id="r1", window_id="w1"))
            readings, done = ctl.window_result()
        by_node = {r.node: r for r in readings}
        assert done.readings == 5 and set(by_node) == {"n1", "n2", "host", "n1-by-path", "ghost"}
        assert dict(by_node["n1"].counters) == {"exec": 9}
        assert dict(by_node["n1-by-path"].counters) == {"exec": 9}
        ghost = by_node.pop("ghost")
        assert "no cgroup at" in ghost.error and dict(ghost.counters) == {}  # never the host's
        assert dict(by_node["n2"].counters) == {"exec": 4}
        assert by_node["host"].counters["exec"] >= 13 + 2
        for r in by_node.values():
            assert r.error == "" and r.probe_id == "p1" and r.run_id == "r1"
            assert 0 < r.start_unix_ns < r.end_unix_ns
        hb = ctl.wait_for("heartbeat").heartbeat
        assert hb.rss_bytes > 10 * 2**20 and hb.cpu_percent >= 0 and hb.unix_ns > 0
        ctl.send(shutdown=pb.Shutdown(reason="test over"))
        run.join()
        assert run.error is None
    finally:
        run.agent.stop()


def test_wrong_token_is_rejected_without_retry(controller) -> None:
    ctl, addr = controller
    agent = ProbeAgent(
        addr, "not-the-token", "n", ["f"], program_factory=fake_factory({"f": FakeProgram("f")})
    )
    # With another token the probe cannot check the controller's proof: it stops at Hello.
    with pytest.raises(FleetError, match="failed to prove"):
        agent.run_forever()
    assert len(ctl.hellos) == 1 and ctl.registers == []


def test_controller_with_wrong_proof_is_refused() -> None:
    ctl = TestController(bad_proof=True)
    server, port = _serve(ctl)
    try:
        prog = FakeProgram("f")
        run = AgentThread(
            ProbeAgent(f"127.0.0.1:{port}", TOKEN, "n", ["f"], program_factory=fake_factory({"f": prog}))
        )
        try:
            run.join()  # bounded: an agent that accepted the controller would keep running
        finally:
            run.agent.stop()
        assert isinstance(run.error, FleetError)
        assert "failed to prove it holds the token" in str(run.error)
        # The impostor got a Hello and nothing else: no Register, no Session, no token.
        assert len(ctl.hellos) == 1 and ctl.registers == [] and ctl.messages.empty()
        assert prog.closed
        assert impostor_haul_is_worthless(ctl, TOKEN)
    finally:
        server.stop(0)


def impostor_haul_is_worthless(ctl: TestController, token: str) -> bool:
    """What a controller without the token collected holds neither the token nor anything keyed
    by it: the Hello carries only the probe's fresh random nonce and its id."""
    sent = b"".join(h.SerializeToString() for h in ctl.hellos)
    sent += b"".join(k.encode() + (v if isinstance(v, bytes) else v.encode()) for k, v in ctl.metadata)
    assert token.encode() not in sent
    for h in ctl.hellos:
        assert set(f.name for f, _ in h.ListFields()) <= {"probe_nonce", "probe_id"}
    return True


def test_impostor_learns_nothing_reusable() -> None:
    """Finding 3: an impostor controller that cannot prove the token gets no proof it could
    replay to the real controller: the probe sends no Register (and so no probe proof)."""
    real = TestController()
    real_server, real_port = _serve(real)
    impostor = TestController(token="impostor-does-not-know", bad_proof=True)
    server, port = _serve(impostor)
    try:
        run = AgentThread(
            ProbeAgent(
                f"127.0.0.1:{port}", TOKEN, "n", ["f"], program_factory=fake_factory({"f": FakeProgram("f")})
            )
        )
        run.join()
        assert isinstance(run.error, FleetError) and "failed to prove" in str(run.error)
        assert impostor.registers == [] and impostor_haul_is_worthless(impostor, TOKEN)
        # Replaying the Hello it saw to the real controller gives it a server nonce it cannot
        # answer: the probe proof needs the token.
        (hello,) = impostor.hellos
        ch = grpc.insecure_channel(f"127.0.0.1:{real_port}")
        stub = pbg.ProbeControlStub(ch)
        reply = stub.Hello(hello)
        with pytest.raises(grpc.RpcError) as ei:
            stub.Register(
                pb.RegisterRequest(
                    probe_id=hello.probe_id,
                    nonce=hello.probe_nonce,
                    server_nonce=reply.server_nonce,
                    proof=b"x" * 32,
                )
            )
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ch.close()
    finally:
        server.stop(0)
        real_server.stop(0)


def test_failed_program_read_sets_error_not_zero(controller) -> None:
    ctl, addr = controller
    good, bad = FakeProgram("good"), FakeProgram("bad")
    run = AgentThread(
        ProbeAgent(
            addr, TOKEN, "n", ["good", "bad"], program_factory=fake_factory({"good": good, "bad": bad})
        )
    )
    try:
        ctl.wait_for("heartbeat")
        node = pb.NodeInfo(name="x", cgroup_id=42)
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node]))
        assert ctl.wait_for("ack").ack.ok
        bad.fail = True
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
        readings, done = ctl.window_result()
        assert done.readings == 1
        (r,) = readings
        assert "bad: read at close failed" in r.error and "map read failed" in r.error
        assert dict(r.counters) == {"ticks": 5}  # what the good program had

        # A failure at open: the ack says so, and the close reading carries the error too.
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w2", nodes=[node], programs=["bad", "zzz"]))
        ack = ctl.wait_for("ack").ack
        assert not ack.ok and "snapshot at open failed" in ack.error and "zzz: not loaded" in ack.error
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w2"))
        (r2,), _ = ctl.window_result()
        assert "snapshot at open failed" in r2.error and dict(r2.counters) == {}

        # Closing a window never opened is an error reading, not an empty answer.
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="nope"))
        (r3,), done3 = ctl.window_result()
        assert "never opened" in r3.error and done3.readings == 1
    finally:
        run.stop()
    assert run.error is None and good.closed and bad.closed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gives_up_after_bounded_retries() -> None:
    port = _free_port()  # nothing listens here
    agent = ProbeAgent(
        f"127.0.0.1:{port}",
        TOKEN,
        "n",
        ["f"],
        retries=2,
        backoff_s=0.05,
        rpc_timeout_s=1.0,
        program_factory=fake_factory({"f": FakeProgram("f")}),
    )
    t0 = time.monotonic()
    with pytest.raises(FleetError, match="gave up after 2 retries"):
        agent.run_forever()
    assert time.monotonic() - t0 < 10


def test_reconnects_when_controller_restarts() -> None:
    ctl = TestController()
    server, port = _serve(ctl)
    prog = FakeProgram("f")
    run = AgentThread(
        ProbeAgent(
            f"127.0.0.1:{port}",
            TOKEN,
            "n",
            ["f"],
            retries=20,
            backoff_s=0.1,
            max_backoff_s=0.5,
            program_factory=fake_factory({"f": prog}),
        )
    )
    try:
        ctl.wait_for("heartbeat")
        node = pb.NodeInfo(name="x", cgroup_id=42)
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node]))
        assert ctl.wait_for("ack").ack.ok
        server.stop(0)
        time.sleep(0.3)
        server, _ = _serve(ctl, port)  # same controller state, new server on the same port
        deadline = time.monotonic() + 10
        while len(ctl.sessions) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(ctl.sessions) == 2, "agent did not re-register"
        # The window opened before the reconnect still closes with its delta.
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
        (r,), _ = ctl.window_result()
        assert r.error == "" and dict(r.counters) == {"ticks": 5}
        ctl.send(shutdown=pb.Shutdown(reason="done"))
        run.join()
        assert run.error is None
    finally:
        run.agent.stop()
        server.stop(0)


class OtlpSink:
    """A minimal OTLP/HTTP trace receiver on 127.0.0.1 that keeps the request bodies."""

    def __init__(self) -> None:
        bodies: list[bytes] = []
        self.bodies = bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        out = []
        for body in self.bodies:
            req = ExportTraceServiceRequest.FromString(body)
            out += [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        return out


@pytest.fixture
def otlp_sink() -> Iterator[OtlpSink]:
    sink = OtlpSink()
    yield sink
    sink.server.shutdown()
    sink.server.server_close()


def _probe_cmd(addr: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "swarmscope.cli", "probe", "--controller", addr, *extra]


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.parametrize("end", ["shutdown", "sigterm"])
def test_cli_agent_process_counts_and_exits_cleanly(controller, otlp_sink, tmp_path, end) -> None:
    ctl, addr = controller
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    proc = subprocess.Popen(
        _probe_cmd(addr, "--token-file", str(token_file), "--node", "cli-node"),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ctl.wait_for("heartbeat", timeout=30)
        assert ctl.registers[0].node_name == "cli-node"
        with temp_cgroup("cli") as cg:
            node = pb.NodeInfo(name="cli-node", cgroup_id=cgroup_id(cg))
            tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node], traceparent=tp))
            assert ctl.wait_for("ack").ack.ok
            exec_in_cgroup(cg, 6)
            ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
            (r,), _ = ctl.window_result()
        assert dict(r.counters) == {"exec": 6} and r.error == ""
        if end == "shutdown":
            ctl.send(shutdown=pb.Shutdown(reason="test over"))
        else:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        # The window span was flushed over OTLP at exit, in the controller's trace.
        (span,) = otlp_sink.spans()
        assert span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
        assert span.parent_span_id.hex() == "b7ad6b7169203331" and span.name == "probe window"
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.root
@pytest.mark.bpf
def test_cli_agent_wrong_token_is_one_clear_line(controller) -> None:
    _ctl, addr = controller
    env = {**os.environ, "SWARMSCOPE_TOKEN": "wrong"}
    res = subprocess.run(_probe_cmd(addr), env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("swarmscope: controller 127.0.0.1:") and "failed to prove" in res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1


def test_window_span_is_child_of_controller_traceparent(controller) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    ctl, addr = controller
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    good, bad = FakeProgram("good"), FakeProgram("bad")
    run = AgentThread(
        ProbeAgent(
            addr,
            TOKEN,
            "n",
            ["good"],
            probe_id="p-span",
            tracer=provider.get_tracer("test"),
            program_factory=fake_factory({"good": good, "bad": bad}),
        )
    )
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        ctl.wait_for("heartbeat")
        node = pb.NodeInfo(name="x", cgroup_id=42)
        tp = f"00-{trace_id}-{parent_id}-01"
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node], traceparent=tp))
        assert ctl.wait_for("ack").ack.ok
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
        ctl.window_result()
    finally:
        run.stop()
    assert run.error is None  # AgentThread keeps what run_forever raised
    (span,) = exporter.get_finished_spans()
    assert span.name == "probe window" and span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (int(trace_id, 16), int(parent_id, 16))
    assert span.attributes is not None and span.attributes["swarmscope.probe_id"] == "p-span"
    (ev,) = span.events
    assert ev.attributes is not None and dict(ev.attributes) == {"node": "x", "ticks": 5}
    assert span.status.is_ok


@pytest.mark.root
@pytest.mark.bpf
def test_cli_agent_metrics_port_serves_self_metrics(controller, tmp_path) -> None:
    import urllib.request

    ctl, addr = controller
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = _free_port()
    env = {**os.environ, "SWARMSCOPE_SYSCALLS": "getppid"}
    cmd = _probe_cmd(addr, "--token-file", str(token_file), "--node", "m-node")
    cmd += ["--programs", "exec_count,syscall_count", "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.read().decode()

    try:
        ctl.wait_for("heartbeat", timeout=60)
        assert get("/healthz") == "ok\n"
        with temp_cgroup("metrics") as cg:
            node = pb.NodeInfo(name="m-node", cgroup_id=cgroup_id(cg))
            ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node]))
            assert ctl.wait_for("ack").ack.ok
            exec_in_cgroup(cg, 4)
            ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
            (r,), _ = ctl.window_result()
        assert dict(r.counters) == {"exec": 4, "sys.getppid": 0}
        text = get("/metrics")
        samples = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
        assert float(samples["swarmscope_probe_windows_opened_total"]) == 1
        assert float(samples["swarmscope_probe_windows_closed_total"]) == 1
        assert float(samples["swarmscope_probe_readings_sent_total"]) == 1
        func = 'func="tracepoint__sched__sched_process_exec",program="exec_count"'
        # Stats are on for the probe's lifetime: its exec program ran at least for our 4 execs.
        assert float(samples[f"swarmscope_probe_program_run_count_total{{{func}}}"]) >= 4
        assert float(samples[f"swarmscope_probe_program_run_time_seconds_total{{{func}}}"]) > 0
        ex = 'map="exec_count",program="exec_count"'
        assert float(samples[f"swarmscope_probe_map_max_entries{{{ex}}}"]) == 65536
        assert 1 <= float(samples[f"swarmscope_probe_map_entries{{{ex}}}"]) <= 65536
        filt = 'map="syscall_filter",program="syscall_count"'
        assert float(samples[f"swarmscope_probe_map_fill_ratio{{{filt}}}"]) == 1.0  # arrays are full
        ctl.send(shutdown=pb.Shutdown(reason="test over"))
        assert proc.wait(timeout=15) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
