"""Failback (probes/failback.py): a probe whose first upstream (a
relay) was not there when it started registers at the controller, then moves to the relay once
it answers, between windows only, and a window through the relay is exact. Real controller
fleet, real `swarmscope relay` processes, the real agent with a stand-in
program, and the `swarmscope probe` CLI with real BPF. Plus the watcher's rules with stand-ins.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from agent_helpers import FakeProgram, _free_port, fake_factory
from probe_helpers import exec_in_cgroup, temp_cgroup
from test_probe_fleet import TOKEN, _probe
from test_relay import start_relay

from swarmscope.controller.fleet import Fleet
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.failback import Failback
from swarmscope.v1 import probe_pb2 as pb

pytestmark = pytest.mark.timeout(180)


def _routes(fleet: Fleet) -> dict[str, str]:
    return {p.probe_id: p.via for p in fleet.probes()}


def _until(what: str, cond, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s:.0f} s"
        time.sleep(0.05)


def test_watcher_moves_once_when_home_answers_and_no_window_is_open() -> None:
    ended = threading.Event()
    answers = iter([False, False, True])
    idle = iter([False, False, False, True])
    moves: list[float] = []
    fb = Failback(0.02, rand=lambda lo, hi: 1.0)
    t = fb.start(ended, lambda: next(answers), lambda: next(idle), lambda: moves.append(time.monotonic()))
    assert t is not None
    t.join(5)
    assert not t.is_alive()
    assert len(moves) == 1 and fb.moved.is_set()
    # Every check and every idle look was used: none skipped, none after the move.
    assert next(answers, "spent") == "spent" and next(idle, "spent") == "spent"


def test_watcher_stops_with_its_session_and_is_off_at_zero() -> None:
    ended = threading.Event()
    calls: list[int] = []
    fb = Failback(0.02, rand=lambda lo, hi: 1.0)
    t = fb.start(ended, lambda: calls.append(1) or False, lambda: True, lambda: pytest.fail("moved"))
    assert t is not None
    time.sleep(0.2)
    ended.set()
    t.join(5)
    assert not t.is_alive() and calls and not fb.moved.is_set()
    assert Failback(0.0).start(ended, lambda: True, lambda: True, lambda: None) is None


@pytest.mark.slow
def test_agent_started_before_its_relay_moves_to_it_between_windows() -> None:
    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0, reconnect_grace_s=6.0)
    fleet.start()
    port = _free_port()
    agent = ProbeAgent(
        f"127.0.0.1:{port},{fleet.address}",
        TOKEN,
        "fb-node",
        ["f"],
        probe_id="fb-1",
        retries=3,
        backoff_s=0.1,
        failback_s=0.5,
        program_factory=fake_factory({"f": FakeProgram("f")}),
    )
    run = threading.Thread(target=agent.run_forever, daemon=True)
    run.start()
    relay = None
    try:
        fleet.wait_for_probes(hosts={"fb-node"}, timeout_s=30)
        assert _routes(fleet) == {"fb-1": ""}  # no relay yet: straight to the controller
        node = {"fb-node": [pb.NodeInfo(name="fb-node", cgroup_id=42)]}
        assert fleet.open_window("run", "w1", node, timeout_s=20) == {}
        relay, addr = start_relay("relay-fb", fleet.address, "--bind", f"127.0.0.1:{port}", token=TOKEN)
        assert addr == f"127.0.0.1:{port}"
        time.sleep(2.0)  # ~4 checks, each answered: the open window holds the probe where it is
        assert _routes(fleet) == {"fb-1": ""}
        readings, missing = fleet.close_window("run", "w1", timeout_s=20)
        assert (missing, [(r.probe_id, r.counters, r.error) for r in readings]) == (
            [],
            [("fb-1", {"ticks": 5}, "")],
        )
        _until("the probe at the relay", lambda: _routes(fleet) == {"fb-1": "relay-fb"})
        assert agent.upstream == addr
        assert fleet.open_window("run", "w2", node, timeout_s=20) == {}
        readings, missing = fleet.close_window("run", "w2", timeout_s=30)
        assert (missing, [(r.probe_id, r.counters, r.error) for r in readings]) == (
            [],
            [("fb-1", {"ticks": 5}, "")],
        )
        assert fleet.take_reconnects("w2") == {}
    finally:
        agent.stop()
        run.join(10)
        if relay is not None:
            relay.kill()
            relay.wait(10)
        fleet.stop()


@pytest.mark.slow
def test_a_stopped_relay_lets_its_probe_move_on_instead_of_stopping_it() -> None:
    """SIGTERM to a relay (a rollout, a scale-down) ends its sessions; it does not tell its
    probes to stop (only the controller's Shutdown is passed on): the agent registers at the
    controller, still running, and a window there is exact."""
    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0, reconnect_grace_s=6.0)
    fleet.start()
    relay, addr = start_relay("relay-stop", fleet.address, token=TOKEN)
    agent = ProbeAgent(
        f"{addr},{fleet.address}",
        TOKEN,
        "st-node",
        ["f"],
        probe_id="st-1",
        retries=3,
        backoff_s=0.1,
        failback_s=0.0,
        program_factory=fake_factory({"f": FakeProgram("f")}),
    )
    run = threading.Thread(target=agent.run_forever, daemon=True)
    run.start()
    try:
        fleet.wait_for_probes(hosts={"st-node"}, timeout_s=30)
        assert _routes(fleet) == {"st-1": "relay-stop"}
        relay.terminate()
        assert relay.wait(15) == 0
        _until("the probe at the controller", lambda: _routes(fleet) == {"st-1": ""})
        assert run.is_alive() and agent.upstream == fleet.address
        node = {"st-node": [pb.NodeInfo(name="st-node", cgroup_id=42)]}
        assert fleet.open_window("run", "ws", node, timeout_s=20) == {}
        readings, missing = fleet.close_window("run", "ws", timeout_s=20)
        assert (missing, [(r.probe_id, r.counters, r.error) for r in readings]) == (
            [],
            [("st-1", {"ticks": 5}, "")],
        )
    finally:
        agent.stop()
        run.join(10)
        relay.kill()
        relay.wait(10)
        fleet.stop()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_cli_started_before_its_relay_moves_to_it() -> None:
    fleet = Fleet(TOKEN)
    fleet.start()
    port = _free_port()
    node = f"nat-fb-{os.getpid()}"
    relay = None
    try:
        with (
            _probe(f"127.0.0.1:{port},{fleet.address}", node, "--failback", "0.5") as proc,
            temp_cgroup("natfb") as cg,
        ):
            fleet.wait_for_probes(hosts={node}, timeout_s=120)
            pid = f"{socket.gethostname()}-{proc.pid}"
            assert _routes(fleet) == {pid: ""}
            relay, _ = start_relay("relay-natfb", fleet.address, "--bind", f"127.0.0.1:{port}", token=TOKEN)
            _until("the probe at the relay", lambda: _routes(fleet) == {pid: "relay-natfb"})
            nodes = {node: [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]}
            assert fleet.open_window("run", "w-fb", nodes, timeout_s=30) == {}
            exec_in_cgroup(cg, 40)
            (r,), missing = fleet.close_window("run", "w-fb", timeout_s=30)
            assert (missing, r.error, r.counters["exec"]) == ([], "", 40)
            assert proc.poll() is None
    finally:
        if relay is not None:
            relay.kill()
            relay.wait(10)
        fleet.stop()
