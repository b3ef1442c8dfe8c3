"""Fleet bookkeeping (issue 18, finding 10) and the mutual challenge (finding 3), real gRPC.

A probe that reconnects mid-window keeps its reading; ``done`` is counted by membership;
readings for nodes the window did not ask a probe for are refused; dead probes are pruned; a
captured Register cannot be replayed; the reconnects of a window are reported.
"""

from __future__ import annotations

import time

import grpc
import pytest
from fakeprobe import FakeProbe

from swarmscope.controller.fleet import Fleet
from swarmscope.core import auth
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "bookkeeping-token"


@pytest.fixture
def fleet():
    f = Fleet(token=TOKEN, liveness_s=2.0)
    f.start()
    yield f
    f.stop()


def nodes(*names: str) -> list[pb.NodeInfo]:
    return [pb.NodeInfo(name=n, cgroup_id=i + 100) for i, n in enumerate(names)]


def test_reconnect_mid_window_keeps_the_reading_and_is_reported(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, TOKEN, "host-a", {"exec": 11}).start()
    b = FakeProbe(fleet.address, TOKEN, "host-b", {"exec": 5}).start()
    fleet.wait_for_probes(2, timeout_s=10)
    assert fleet.open_window("r1", "w1", {"host-a": nodes("n1", "n2"), "host-b": nodes("n3")}) == {}
    b.reconnect()  # mid-window: the open window lives on in the probe, the session is new
    fleet.wait_for_probes(2, timeout_s=10)
    readings, missing = fleet.close_window("r1", "w1", timeout_s=10)
    assert missing == []
    assert sorted((r.node, r.counters["exec"]) for r in readings) == [("n1", 11), ("n2", 11), ("n3", 5)]
    assert fleet.take_reconnects("w1") == {"fake-host-b@host-b": 1}
    assert fleet.take_reconnects("w1") == {}  # handed out once
    assert b.sessions == 2
    a.stop()
    b.stop()


def test_close_lost_with_the_session_is_sent_again(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, TOKEN, "host-a", {"exec": 3}).start()
    fleet.wait_for_probes(1, timeout_s=10)
    assert fleet.open_window("r1", "w2", {"host-a": nodes("n1")}) == {}
    a.silent = True  # the close arrives, is not answered, then the connection drops

    import threading

    got: dict[str, object] = {}
    t = threading.Thread(target=lambda: got.update(r=fleet.close_window("r1", "w2", timeout_s=20)))
    t.start()
    deadline = time.monotonic() + 10
    while not any(c.WhichOneof("kind") == "close" for c in a.commands) and time.monotonic() < deadline:
        time.sleep(0.02)
    a.silent = False
    a.reconnect()  # the new session gets the CloseWindow again and answers it
    t.join(20)
    readings, missing = got["r"]  # type: ignore[misc]
    assert missing == [] and [(r.node, r.counters["exec"]) for r in readings] == [("n1", 3)]
    assert fleet.take_reconnects("w2") == {"fake-host-a@host-a": 1}
    a.stop()


def test_done_counts_by_membership_and_readings_only_for_asked_nodes(fleet: Fleet) -> None:
    a = FakeProbe(fleet.address, TOKEN, "host-a").start()
    b = FakeProbe(fleet.address, TOKEN, "host-b").start()
    fleet.wait_for_probes(2, timeout_s=10)
    assert fleet.open_window("r1", "w3", {"host-a": nodes("n1"), "host-b": nodes("n2")}) == {}
    b.silent = True
    # a answers twice, and also sends a reading for b's node and for a node nobody asked for:
    # by length the window would be "done" (2 of 2); by membership b is still missing.
    forged = [
        pb.Reading(run_id="r1", window_id="w3", probe_id="fake-host-b", node="n2", counters={"exec": 999}),
        pb.Reading(run_id="r1", window_id="w3", probe_id="fake-host-a", node="n9", counters={"exec": 999}),
    ]
    for _ in range(2):
        a.out.put(pb.ProbeMessage(done=pb.WindowDone(run_id="r1", window_id="w3", batch=forged)))
    time.sleep(0.3)
    readings, missing = fleet.close_window("r1", "w3", timeout_s=1.5)
    assert [(r.node, r.counters["exec"], r.probe_id) for r in readings] == [("n1", 7, "fake-host-a")]
    assert missing == ["fake-host-b@host-b"]
    assert fleet.readings_rejected == 4
    a.stop()
    b.stop()


def test_dead_probes_are_pruned() -> None:
    f = Fleet(token=TOKEN, liveness_s=0.3, prune_s=0.8)
    f.start()
    try:
        a = FakeProbe(f.address, TOKEN, "host-a").start()
        f.wait_for_probes(1, timeout_s=10)
        a.stop()
        time.sleep(0.5)
        assert [p.probe_id for p in f.probes(alive_only=False)] == ["fake-host-a"]  # not yet
        time.sleep(0.8)
        assert f.probes(alive_only=False) == []
    finally:
        f.stop()


def test_register_cannot_be_replayed(fleet: Fleet) -> None:
    """A Register captured on the wire is refused the second time (its server nonce is spent),
    and a server nonce is good only with the probe nonce of its own Hello."""
    p = FakeProbe(fleet.address, TOKEN, "host-a")
    nonce = auth.new_nonce()
    hello = p.stub.Hello(pb.HelloRequest(probe_nonce=nonce, probe_id=p.probe_id, node="host-a"))
    key = auth.node_key(TOKEN, "host-a")
    req = pb.RegisterRequest(
        probe_id=p.probe_id,
        node_name="host-a",
        nonce=nonce,
        server_nonce=hello.server_nonce,
        proof=auth.probe_proof(key, hello.server_nonce, nonce, p.probe_id),
    )
    assert p.stub.Register(req).session_id
    with pytest.raises(grpc.RpcError) as ei:
        p.stub.Register(req)
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    other = auth.new_nonce()
    hello2 = p.stub.Hello(pb.HelloRequest(probe_nonce=auth.new_nonce(), probe_id=p.probe_id))
    with pytest.raises(grpc.RpcError) as ei:
        p.stub.Register(
            pb.RegisterRequest(
                probe_id=p.probe_id,
                node_name="host-a",
                nonce=other,
                server_nonce=hello2.server_nonce,
                proof=auth.probe_proof(key, hello2.server_nonce, other, p.probe_id),
            )
        )
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    p.stop()


def test_session_needs_a_registered_session_id(fleet: Fleet) -> None:
    p = FakeProbe(fleet.address, TOKEN, "host-a")
    p.session_id = "0" * 32  # guessed, never issued
    call = p.stub.Session(iter([pb.ProbeMessage(session_id=p.session_id, heartbeat=pb.Heartbeat())]))
    with pytest.raises(grpc.RpcError) as ei:
        list(call)
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    p.stop()


def test_reconnects_land_in_the_window_result(fleet: Fleet) -> None:
    """The controller role puts the window's reconnects in its result (report.json:
    points[].iterations[].extra.probe_reconnects)."""
    from swarmscope.controller.model import IterationResult, PointInfo, RunInfo
    from swarmscope.controller.role import ControllerRole
    from swarmscope.core.events import RunEvents

    run = RunInfo("run-1", "exec_storm", "exec", {}, time.time_ns())
    ctl = ControllerRole(
        run, fleet, RunEvents(), reconcile=lambda o: IterationResult.for_window(o.window, o.point, [])
    )
    ctl.add_nodes("worker-1", [{"name": "n1", "host": "host-a", "cgroup_id": 101}])
    a = FakeProbe(fleet.address, TOKEN, "host-a").start()
    fleet.wait_for_probes(1, timeout_s=10)
    point = PointInfo(0, {"nodes": 1}, 1)
    win = ctl.open_window(point, 1, ["n1"])
    a.reconnect()
    ctl.add_results(win.window_id, "worker-1", {"n1": {"generated": 7}})
    result = ctl.close_window(win, point, timeout_s=5)
    assert result.extra["probe_reconnects"] == {"fake-host-a@host-a": 1}
    a.stop()


def test_a_worker_speaks_only_for_the_nodes_it_announced(fleet: Fleet) -> None:
    """Issue 27 finding 3: a second worker announcing a node another live worker holds is refused
    (the node keeps its host and cgroup), and results a worker sends for a node it did not
    announce are not merged; both refusals are in the window's result and the log."""
    from swarmscope.controller.model import IterationResult, PointInfo, RunInfo, WindowOutcome
    from swarmscope.controller.role import ControllerRole
    from swarmscope.core.events import RunEvents

    seen: dict[str, dict[str, object]] = {}

    def rule(o: WindowOutcome) -> IterationResult:
        seen.update(o.results)
        return IterationResult.for_window(o.window, o.point, [])

    run = RunInfo("run-1", "exec_storm", "exec", {}, time.time_ns())
    ctl = ControllerRole(run, fleet, RunEvents(), reconcile=rule)
    ctl.add_nodes("worker-1", [{"name": "n1", "host": "host-a", "cgroup_id": 101}])
    refused = ctl.add_nodes("worker-2", [{"name": "n1", "host": "host-b", "cgroup_id": 666}])
    assert (ctl.nodes["n1"].host, ctl.nodes["n1"].cgroup_id, ctl.nodes["n1"].worker) == (
        "host-a",
        101,
        "worker-1",
    )
    assert refused == ["worker worker-2 announced node n1, which worker worker-1 holds: refused"]
    a = FakeProbe(fleet.address, TOKEN, "host-a").start()
    fleet.wait_for_probes(1, timeout_s=10)
    point = PointInfo(0, {"nodes": 1}, 1)
    win = ctl.open_window(point, 1, ["n1"])
    ctl.add_results(win.window_id, "worker-1", {"n1": {"generated": 7}})
    ctl.add_results(win.window_id, "worker-2", {"n1": {"generated": 999999}})
    result = ctl.close_window(win, point, timeout_s=5)
    a.stop()
    assert seen == {"n1": {"generated": 7}}
    assert result.extra["refused"] == [
        "worker worker-2 announced node n1, which worker worker-1 holds: refused",
        "worker worker-2 sent results for node n1, which it did not announce: refused",
    ]
    # A node whose worker is gone can be taken over (a worker pod restarted on its node).
    assert (
        ctl.add_nodes("worker-3", [{"name": "n1", "host": "host-a", "cgroup_id": 102}], alive=lambda w: False)
        == []
    )
    assert ctl.nodes["n1"].worker == "worker-3"


def test_a_probe_speaks_only_for_its_own_node(fleet: Fleet) -> None:
    """Issue 27 finding 4: a second probe claiming a node whose probe is live is refused (named in
    the log and the window's result), so the genuine probe's reading stands; a probe holding
    another node's key cannot register for this node at all."""
    from swarmscope.controller.model import IterationResult, PointInfo, RunInfo, WindowOutcome
    from swarmscope.controller.role import ControllerRole
    from swarmscope.core.events import RunEvents

    seen: list[tuple[str, str, int]] = []

    def rule(o: WindowOutcome) -> IterationResult:
        seen.extend((r.probe_id, r.node, r.counters["exec"]) for r in o.readings)
        return IterationResult.for_window(o.window, o.point, [])

    run = RunInfo("run-1", "exec_storm", "exec", {}, time.time_ns())
    ctl = ControllerRole(run, fleet, RunEvents(), reconcile=rule)
    ctl.add_nodes("worker-1", [{"name": "nodeA", "host": "nodeA", "cgroup_id": 0}])
    genuine = FakeProbe(fleet.address, TOKEN, "nodeA", counters={"exec": 7}).start()
    fleet.wait_for_probes(1, timeout_s=10)
    second = FakeProbe(fleet.address, TOKEN, "nodeA", counters={"exec": 999999}, probe_id="impostor")
    with pytest.raises(grpc.RpcError) as ei:
        second.register()
    assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS
    # A probe given only nodeB's key (the chart gives each probe its own node's) claims nodeA.
    other = FakeProbe(
        fleet.address, "", "nodeA", probe_id="from-nodeB", node_key=auth.node_key(TOKEN, "nodeB")
    )
    with pytest.raises(AssertionError, match="controller proof"):  # its check of the controller fails
        other.register()
    nonce = auth.new_nonce()
    hello = other.stub.Hello(pb.HelloRequest(probe_nonce=nonce, probe_id="from-nodeB", node="nodeA"))
    with pytest.raises(grpc.RpcError) as ei:
        other.stub.Register(
            pb.RegisterRequest(
                probe_id="from-nodeB",
                node_name="nodeA",
                nonce=nonce,
                server_nonce=hello.server_nonce,
                proof=auth.probe_proof(other.node_key, hello.server_nonce, nonce, "from-nodeB"),
            )
        )
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    point = PointInfo(0, {"nodes": 1}, 1)
    win = ctl.open_window(point, 1, ["nodeA"])
    ctl.add_results(win.window_id, "worker-1", {"nodeA": {"generated": 7}})
    result = ctl.close_window(win, point, timeout_s=5)
    genuine.stop()
    assert seen == [("fake-nodeA", "nodeA", 7)]
    assert result.extra["refused"] == [
        "probe impostor registered for node nodeA, which live probe fake-nodeA holds: refused"
    ]
