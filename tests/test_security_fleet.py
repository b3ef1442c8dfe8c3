"""Issue 27, finding 1: the fleet (the controller's, and the relay's downstream, which is the
same class) holds little for a caller that has not authenticated.

Real gRPC over loopback: Hello nonces are exactly 16 bytes; an unauthenticated call over the
1 MiB wire limit is refused by gRPC before any handler; pending Hellos are capped per peer and
expire on a timer with no other Hello coming; a Session that sends nothing is ended; an
authenticated session's large WindowDone arrives in parts, and parts past the cap end it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from fakeprobe import FakeProbe

from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_hello import PendingHellos
from swarmscope.controller.relay import Relay
from swarmscope.core import auth, wire
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

TOKEN = "security-fleet-token"


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    f = Fleet(TOKEN, liveness_s=5.0)
    f.hellos = PendingHellos(ttl_s=0.6, per_peer=8, total=100)
    f.first_message_s = 0.5
    f.start()
    yield f
    f.stop(0)


def stub(address: str) -> pbg.ProbeControlStub:
    return pbg.ProbeControlStub(grpc.insecure_channel(address))


def code(fn: object, *args: object, **kw: object) -> grpc.StatusCode:
    try:
        fn(*args, **kw)  # type: ignore[operator]
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_hello_nonce_is_exactly_sixteen_bytes(fleet: Fleet) -> None:
    s = stub(fleet.address)
    assert (
        code(s.Hello, pb.HelloRequest(probe_nonce=b"x" * 15), timeout=5) == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (
        code(s.Hello, pb.HelloRequest(probe_nonce=b"x" * 17), timeout=5) == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code(s.Hello, pb.HelloRequest(probe_nonce=b"x" * 16), timeout=5) == grpc.StatusCode.OK
    assert len(fleet.hellos) == 1


def test_unauthenticated_calls_over_the_wire_limit_are_refused(fleet: Fleet) -> None:
    s = stub(fleet.address)
    big = b"x" * (wire.WIRE_LIMIT + 1)
    assert code(s.Hello, pb.HelloRequest(probe_nonce=big), timeout=10) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert code(s.Register, pb.RegisterRequest(nonce=big), timeout=10) == grpc.StatusCode.RESOURCE_EXHAUSTED
    call = s.Session(iter([pb.ProbeMessage(session_id="x", part=pb.Part(data=big))]), timeout=10)
    assert code(list, call) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(fleet.hellos) == 0


def test_pending_hellos_are_capped_per_peer_and_expire_on_a_timer(fleet: Fleet) -> None:
    s = stub(fleet.address)
    for _ in range(20):
        s.Hello(pb.HelloRequest(probe_nonce=auth.new_nonce()), timeout=5)
    assert len(fleet.hellos) == 8  # one peer (127.0.0.1): its 8 newest
    time.sleep(1.5)  # ttl 0.6 s, swept every 0.3 s: no Hello needed to drop them
    with fleet._lock:
        assert len(fleet.hellos) == 0


def test_pending_hellos_total_cap_evicts_the_oldest() -> None:
    h = PendingHellos(ttl_s=30, per_peer=3, total=5)
    for i in range(4):
        for j in range(3):
            h.add(f"ipv4:10.0.0.{i}:{1000 + j}", bytes([i, j]), b"n" * 16, 0.0)
    assert len(h) == 5
    assert h.take(bytes([0, 0]), 1.0) is None  # the oldest went
    assert h.take(bytes([3, 2]), 1.0) == b"n" * 16
    assert h.take(bytes([3, 2]), 1.0) is None  # one use only
    assert h.take(bytes([3, 1]), 31.0) is None  # stale


def test_a_silent_session_is_ended(fleet: Fleet) -> None:
    def nothing() -> Iterator[pb.ProbeMessage]:
        time.sleep(5)
        yield from ()

    t0 = time.monotonic()
    call = stub(fleet.address).Session(nothing(), timeout=4)
    assert code(list, call) == grpc.StatusCode.UNAUTHENTICATED
    assert time.monotonic() - t0 < 3


@pytest.mark.slow
def test_a_large_reading_after_authentication_arrives_in_parts(fleet: Fleet) -> None:
    probe = FakeProbe(fleet.address, TOKEN, "h1", {"exec": 3})
    probe.samples = [pb.Sample(series="s", start_ns=i, end_ns=i, value=i) for i in range(300_000)]
    probe.start()
    try:
        fleet.wait_for_probes(1, timeout_s=10)
        assert fleet.open_window("r", "w", {"h1": [pb.NodeInfo(name="n1", cgroup_id=5)]}) == {}
        readings, missing = fleet.close_window("r", "w", timeout_s=20)
        assert missing == []
        assert [len(r.samples) for r in readings] == [300_000]
        assert readings[0].samples[-1].value == 299_999
    finally:
        probe.stop()


def test_parts_past_the_message_cap_end_the_session(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", 3 * wire.PART_BYTES)
    monkeypatch.setattr(wire.Reassembly.__init__, "__defaults__", (3 * wire.PART_BYTES,))
    probe = FakeProbe(fleet.address, TOKEN, "h1")
    probe.register()
    chunk = pb.Part(data=b"x" * wire.PART_BYTES)
    first = pb.ProbeMessage(session_id=probe.session_id, heartbeat=pb.Heartbeat(unix_ns=1))
    msgs = [first] + [pb.ProbeMessage(session_id=probe.session_id, part=chunk)] * 5
    call = probe.stub.Session(iter(msgs), timeout=10)
    try:
        list(call)
    except grpc.RpcError as e:
        assert (e.code(), e.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"a message in parts over {3 * wire.PART_BYTES} bytes",
        )
    else:
        raise AssertionError("the session took 5 MiB of parts past a 3 MiB cap")


def test_the_relay_downstream_has_the_same_limits() -> None:
    relay = Relay(["127.0.0.1:1"], TOKEN, bind="127.0.0.1:0")
    port = relay.fleet.start()
    try:
        s = stub(f"127.0.0.1:{port}")
        big = pb.HelloRequest(probe_nonce=b"x" * (wire.WIRE_LIMIT + 1))
        assert code(s.Hello, big, timeout=10) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (
            code(s.Hello, pb.HelloRequest(probe_nonce=b"x" * 17), timeout=5)
            == grpc.StatusCode.INVALID_ARGUMENT
        )
    finally:
        relay.fleet.stop(0)


def test_the_fleet_server_sets_no_bdp_probe_override() -> None:
    # Turning BDP probing off was measured to change nothing a flood leaves behind nor its peak
    # (bench/abuse.py before and after, issue 27): one option fewer to explain, none to keep.
    from swarmscope.controller.fleet import SERVER_OPTIONS

    assert dict(SERVER_OPTIONS) == {
        "grpc.so_reuseport": 0,
        "grpc.max_concurrent_streams": 100000,
        "grpc.max_receive_message_length": wire.WIRE_LIMIT,
    }
