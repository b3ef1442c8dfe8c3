"""The probe agent end to end over real gRPC on 127.0.0.1, against a minimal test controller
(tests/agent_helpers.py); the agent as a CLI process is in test_probe_agent_cli.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from agent_helpers import (
    TOKEN,
    AgentThread,
    FakeProgram,
    TestController,
    _free_port,
    _serve,
    fake_factory,
    serve_controller,
)
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope.core.errors import FleetError
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.agent import ProbeAgent
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg


@pytest.fixture
def controller() -> Iterator[tuple[TestController, str]]:
    yield from serve_controller()


@pytest.mark.slow
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


@pytest.mark.parametrize("controller", ["", ",", " , "])
def test_a_probe_needs_an_address(controller: str) -> None:
    with pytest.raises(FleetError, match="needs a controller address"):
        ProbeAgent(controller, "t", "n", ["f"], program_factory=fake_factory({"f": FakeProgram("f")}))


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
    by it: the Hello carries only the probe's fresh random nonce, its id and its node's name."""
    from swarmscope.core import auth

    sent = b"".join(h.SerializeToString() for h in ctl.hellos)
    sent += b"".join(k.encode() + (v if isinstance(v, bytes) else v.encode()) for k, v in ctl.metadata)
    assert token.encode() not in sent
    for h in ctl.hellos:
        assert set(f.name for f, _ in h.ListFields()) <= {"probe_nonce", "probe_id", "node"}
        assert auth.node_key(token, h.node).encode() not in sent
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


def test_probe_cli_without_an_address_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from swarmscope.app import cli

    monkeypatch.delenv("SWARMSCOPE_CONTROLLER", raising=False)
    assert cli.main(["probe", "--controller", ",", "--node", "n"]) == 2
    err = capsys.readouterr().err
    assert "--controller" in err and "required" in err and "Traceback" not in err
