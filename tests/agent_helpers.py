"""A stand-in probe controller and agent helpers for the probe-agent tests (real gRPC on
127.0.0.1). The controller follows the proto's comments: Hello with the controller's proof,
Register with the probe's, session_id in the first message; it records everything it was sent,
so an impostor's haul can be checked.

    @pytest.fixture
    def controller(): yield from serve_controller()   # in a test module
"""

from __future__ import annotations

import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent import futures

import grpc

from swarmscope.core import auth
from swarmscope.core.errors import ProbeError
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.programs.base import Snapshot
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
        proof = (
            b"\0" * 32
            if self.bad_proof
            else auth.controller_proof(auth.node_key(self.token, request.node), request.probe_nonce, sn)
        )
        return pb.HelloReply(server_nonce=sn, proof=proof)

    def Register(self, request, context):
        self.metadata += list(context.invocation_metadata())
        self.registers.append(request)
        pn = self._server_nonces.pop(request.server_nonce, None)
        key = auth.node_key(self.token, request.node_name or request.hostname)
        want = auth.probe_proof(key, request.server_nonce, request.nonce, request.probe_id)
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


def serve_controller() -> Iterator[tuple[TestController, str]]:
    """The body of a test module's ``controller`` fixture: a stand-in controller served on
    127.0.0.1 for one test, and its address."""
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
