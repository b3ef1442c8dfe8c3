"""The fleet's grpc.aio server, and the fleet in a child process for gevent-patched callers.

Real gRPC over sockets: many Sessions on one event loop (no thread per stream), the same window
API through FleetProcess (pickled over a socket pair), a gevent-patched process getting a
FleetProcess from make_fleet and running a window through it, and a dead child reported as a
FleetError instead of a hang.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys

import psutil
import pytest
from fakeprobe import FakeProbe
from helpers import ROOT

from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_proc import FleetProcess, make_fleet
from swarmscope.core.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "aio-token"


def nodes(*names: str) -> list[pb.NodeInfo]:
    return [pb.NodeInfo(name=n, cgroup_id=i + 100) for i, n in enumerate(names)]


def test_forty_probes_on_the_loop_without_a_thread_per_stream() -> None:
    # In a child process (FleetProcess) so that its threads are the server's alone.
    fleet = FleetProcess(TOKEN, liveness_s=5.0)
    fleet.start()
    assert fleet._proc is not None
    server = psutil.Process(fleet._proc.pid)
    one = FakeProbe(fleet.address, TOKEN, "h-first").start()
    fleet.wait_for_probes(1, timeout_s=30)
    threads_one = server.num_threads()
    probes = [FakeProbe(fleet.address, TOKEN, f"h{i:02d}", {"exec": i}) for i in range(40)]
    try:
        for p in probes:
            p.start()
        fleet.wait_for_probes(41, timeout_s=30)
        # The sync server ran two threads per Session (handler + reader): +80 here. Now none.
        print("fleet threads with 1 probe:", threads_one, "with 41:", server.num_threads())
        assert server.num_threads() - threads_one <= 2  # grpc's own pollers may start one or two
        want = {f"h{i:02d}": nodes(f"n{i:02d}") for i in range(40)}
        for w in ("w1", "w2"):
            assert fleet.open_window("r", w, want) == {}
            readings, missing = fleet.close_window("r", w, timeout_s=20)
            assert missing == []
            assert sorted((r.node, r.counters["exec"]) for r in readings) == [
                (f"n{i:02d}", i) for i in range(40)
            ]
    finally:
        for p in [one, *probes]:
            p.stop()
        fleet.stop()


@pytest.mark.slow
def test_fleet_process_serves_the_same_api() -> None:
    fleet = FleetProcess(TOKEN, liveness_s=2.0)
    fleet.start()
    a = FakeProbe(fleet.address, TOKEN, "host-a", {"exec": 11}).start()
    b = FakeProbe(fleet.address, TOKEN, "host-b", {"exec": 5}).start()
    try:
        fleet.wait_for_probes(2, timeout_s=10)
        assert sorted(p.host for p in fleet.probes()) == ["host-a", "host-b"]
        problems = fleet.open_window(
            "r1", "w1", {"host-a": nodes("n1", "n2"), "host-b": nodes("n3"), "gone": nodes("n4")}
        )
        assert problems == {"gone": "no live probe"}
        b.silent = True
        readings, missing = fleet.close_window("r1", "w1", timeout_s=1.5)
        assert sorted((r.node, r.counters["exec"]) for r in readings) == [("n1", 11), ("n2", 11)]
        assert missing == ["fake-host-b@host-b"]
        assert fleet.readings_received == 2
        with pytest.raises(FleetError, match="close of unknown window nope"):
            fleet.close_window("r1", "nope", timeout_s=1)
    finally:
        a.stop()
        b.stop()
        fleet.stop()


def test_both_fleets_close_a_window_with_one_signature() -> None:
    # ControllerRole passes drain= to whichever make_fleet gave it, plainly.
    assert inspect.signature(FleetProcess.close_window) == inspect.signature(Fleet.close_window)


def test_dead_fleet_process_is_a_fleet_error() -> None:
    fleet = FleetProcess(TOKEN)
    fleet.start()
    assert fleet._proc is not None
    os.kill(fleet._proc.pid, signal.SIGKILL)
    fleet._proc.wait(10)
    with pytest.raises(FleetError, match="fleet process"):
        fleet.wait_for_probes(1, timeout_s=5)
    fleet.stop()


GEVENT_SCRIPT = """
from gevent import monkey; monkey.patch_all()
import sys
from swarmscope.controller.fleet_proc import make_fleet
from swarmscope.v1 import probe_pb2 as pb
fleet = make_fleet("aio-token")
print(type(fleet).__name__, fleet.start(), flush=True)
fleet.wait_for_probes(1, timeout_s=20)
assert fleet.open_window("r", "w", {"host-g": [pb.NodeInfo(name="ng", cgroup_id=1)]}) == {}
readings, missing = fleet.close_window("r", "w", timeout_s=20)
print("readings", [(r.node, r.counters["exec"]) for r in readings], "missing", missing, flush=True)
fleet.stop()
"""


@pytest.mark.slow
def test_gevent_process_gets_the_fleet_in_a_child() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", GEVENT_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    kind, port = proc.stdout.readline().split()
    assert kind == "FleetProcess"
    a = FakeProbe(f"127.0.0.1:{port}", TOKEN, "host-g", {"exec": 9}).start()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        a.stop()
    assert proc.returncode == 0, err
    assert out.strip() == "readings [('ng', 9)] missing []"
    assert make_fleet(TOKEN).__class__ is Fleet  # this process is not patched


def test_a_probe_message_that_does_not_parse_ends_its_session_as_invalid_argument() -> None:
    """Reads go through ``context.read()``: a first message or a later one that is not a
    ProbeMessage ends that stream as INVALID_ARGUMENT, and the fleet goes on serving."""
    import grpc

    fleet = Fleet(TOKEN, liveness_s=5.0)
    fleet.start()
    try:
        probe = FakeProbe(fleet.address, TOKEN, "h-bad")
        reply = probe.register()
        channel = grpc.insecure_channel(fleet.address)
        session = channel.stream_stream("/swarmscope.v1.ProbeControl/Session")
        garbage = b"\xff\xff\xff"  # field 31, wire type 7: no such wire type
        first = pb.ProbeMessage(session_id=reply.session_id, heartbeat=pb.Heartbeat(unix_ns=1))
        for stream in ([garbage], [first.SerializeToString(), garbage]):
            with pytest.raises(grpc.RpcError) as e:
                list(session(iter(stream), timeout=20))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert e.value.details() == "not a swarmscope.v1.ProbeMessage"
        channel.close()
        ok = FakeProbe(fleet.address, TOKEN, "h-good", {"exec": 3}).start()
        fleet.wait_for_probes(hosts={"h-good"}, timeout_s=30)
        assert fleet.open_window("r", "w", {"h-good": nodes("n1")}) == {}
        readings, missing = fleet.close_window("r", "w", timeout_s=20)
        assert missing == [] and [(r.node, r.counters) for r in readings] == [("n1", {"exec": 3})]
        ok.stop()
    finally:
        fleet.stop()


@pytest.mark.slow
def test_a_fleet_collects_garbage_less_often_unless_its_process_set_a_pace() -> None:
    code = (
        "import gc, sys; from swarmscope.controller.fleet import Fleet\n"
        "if sys.argv[1] == 'own': gc.set_threshold(1000, 5, 5)\n"
        "f = Fleet('t'); f.start(); print(gc.get_threshold()); f.stop(0)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    seen = []
    for mode in ("default", "own"):
        out = subprocess.run(
            [sys.executable, "-c", code, mode], env=env, capture_output=True, text=True, timeout=60
        )
        seen.append(out.stdout.strip())
    assert seen == ["(200000, 20, 10)", "(1000, 5, 5)"]
