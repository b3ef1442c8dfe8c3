"""The probe fleet over real gRPC: authentication both ways, windows, missing probes."""

from __future__ import annotations

import time

import grpc
import pytest
from fakeprobe import FakeProbe

from swarmscope.controller.fleet import Fleet
from swarmscope.core import auth
from swarmscope.core.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc


@pytest.fixture
def fleet():
    f = Fleet(token="secret-token", liveness_s=2.0)
    f.start()
    yield f
    f.stop()


def nodes(*names: str) -> list[pb.NodeInfo]:
    return [pb.NodeInfo(name=n, cgroup_id=i + 100) for i, n in enumerate(names)]


def test_window_roundtrip(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, "secret-token", "host-a", {"exec": 11}).start()
    b = FakeProbe(fleet.address, "secret-token", "host-b", {"exec": 5}).start()
    fleet.wait_for_probes(2, timeout_s=10)
    problems = fleet.open_window(
        "r1", "w1", {"host-a": nodes("n1", "n2"), "host-b": nodes("n3")}, programs=["x"]
    )
    assert problems == {}
    readings, missing = fleet.close_window("r1", "w1", timeout_s=10)
    assert missing == []
    got = {r.node: r.counters["exec"] for r in readings}
    assert got == {"n1": 11, "n2": 11, "n3": 5}
    a.stop()
    b.stop()


def test_wrong_token_is_rejected(fleet: Fleet) -> None:
    p = FakeProbe(fleet.address, "not-the-token", "host-x")
    # The probe with the wrong token already refuses the controller's proof (it cannot check it)
    with pytest.raises(AssertionError, match="controller proof"):
        p.register()
    # and a probe that sends a proof made with the wrong token is refused by the controller.
    nonce = auth.new_nonce()
    hello = p.stub.Hello(pb.HelloRequest(probe_nonce=nonce, probe_id="p"))
    with pytest.raises(grpc.RpcError) as ei:
        p.stub.Register(
            pb.RegisterRequest(
                probe_id="p",
                nonce=nonce,
                server_nonce=hello.server_nonce,
                proof=auth.probe_proof("not-the-token", hello.server_nonce, nonce, "p"),
            )
        )
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert fleet.probes(alive_only=False) == []


def test_controller_proof_checks_token(fleet: Fleet) -> None:
    ch = grpc.insecure_channel(fleet.address)
    stub = pb_grpc.ProbeControlStub(ch)
    nonce = auth.new_nonce()
    reply = stub.Hello(pb.HelloRequest(probe_nonce=nonce, probe_id="p", node="n1"))
    key = auth.node_key("secret-token", "n1")  # the proof is keyed by the named node's key
    assert auth.check(auth.controller_proof(key, nonce, reply.server_nonce), reply.proof)
    assert not auth.check(auth.controller_proof("secret-token", nonce, reply.server_nonce), reply.proof)
    assert not auth.check(
        auth.controller_proof(auth.node_key("secret-token", "n2"), nonce, reply.server_nonce), reply.proof
    )
    ch.close()


def test_silent_probe_is_reported_missing_and_others_kept(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, "secret-token", "host-a").start()
    b = FakeProbe(fleet.address, "secret-token", "host-b").start()
    fleet.wait_for_probes(2, timeout_s=10)
    fleet.open_window("r1", "w2", {"host-a": nodes("n1"), "host-b": nodes("n2")})
    b.silent = True
    t0 = time.monotonic()
    readings, missing = fleet.close_window("r1", "w2", timeout_s=1.5)
    assert time.monotonic() - t0 < 5
    assert [r.node for r in readings] == ["n1"]
    assert missing == ["fake-host-b@host-b"]
    a.stop()
    b.stop()


@pytest.mark.slow
def test_dead_probe_detected_without_waiting_full_timeout(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, "secret-token", "host-a").start()
    b = FakeProbe(fleet.address, "secret-token", "host-b").start()
    fleet.wait_for_probes(2, timeout_s=10)
    fleet.open_window("r1", "w3", {"host-a": nodes("n1"), "host-b": nodes("n2")})
    b.silent = True
    b.stop()  # the stream ends: the fleet marks it disconnected
    readings, missing = fleet.close_window("r1", "w3", timeout_s=20)
    assert [r.node for r in readings] == ["n1"] and len(missing) == 1
    a.stop()


def test_open_window_without_probe_for_host_reports_it(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, "secret-token", "host-a").start()
    fleet.wait_for_probes(1, timeout_s=10)
    problems = fleet.open_window("r1", "w4", {"nowhere": nodes("n1"), "host-a": nodes("n2")})
    assert problems == {"nowhere": "no live probe"}
    readings, missing = fleet.close_window("r1", "w4", timeout_s=5)
    assert [r.node for r in readings] == ["n2"] and missing == []
    a.stop()


def test_wait_for_probes_times_out_with_hint(fleet: Fleet) -> None:
    with pytest.raises(FleetError, match="swarmscope probe --controller"):
        fleet.wait_for_probes(1, timeout_s=0.3)


@pytest.mark.slow
def test_options_go_down_and_samples_come_up(fleet: Fleet) -> None:
    from swarmscope.controller.model import ReadingSample

    a = FakeProbe(fleet.address, "secret-token", "host-a").start()
    # Past gRPC's 4 MiB default: a window of many map-update calls is one big WindowDone.
    n = 60_000
    labels = {"pid": "4242", "cmd": "elem", "map_id": "17"}
    a.samples = [
        pb.Sample(series="map_update.call", start_ns=i, end_ns=i + 5, value=1, labels=labels)
        for i in range(n)
    ]
    fleet.wait_for_probes(1, timeout_s=10)
    opts = {"procstat.pids": "1,2", "map_update.pids": "4242"}
    assert fleet.open_window("r1", "w-opt", {"host-a": nodes("n1")}, options=opts) == {}
    readings, missing = fleet.close_window("r1", "w-opt", timeout_s=30)
    (open_cmd,) = [c.open for c in a.commands if c.WhichOneof("kind") == "open"]
    assert dict(open_cmd.options) == opts
    assert missing == [] and len(readings) == 1
    (r,) = readings
    assert len(r.samples) == n
    assert r.samples[7] == ReadingSample("map_update.call", 7, 12, 1, labels)
    a.stop()
