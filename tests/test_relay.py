"""Relays (issue 13): a real controller fleet, two real `swarmscope relay` processes and
simulated probes (bench/simprobes.py: real gRPC, the real handshake) with the upstream list
[relay-a, relay-b, controller]. A window through both relays; a window with relay-a SIGKILLed
mid-window (its probes move to relay-b, the window closes with every reading); a window with
relay-b and four probes SIGKILLed (sixteen go straight to the controller, the four are named
missing, exactly). The first also with the compiled simulated probes (bench/simprobes_go), the
pair the fan-in benches measure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import ROOT

from swarmscope.controller.fleet import Fleet
from swarmscope.v1 import probe_pb2 as pb

sys.path.insert(0, str(ROOT / "bench"))

TOKEN = "relay-test-token"
pytestmark = pytest.mark.timeout(120)


def start_relay(
    name: str,
    upstream: str,
    *extra: str,
    token: str = TOKEN,
    preexec: Callable[[], None] | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """A real `swarmscope relay` process; returns it and its address (also used by other tests).
    ``preexec`` runs in the child before the relay starts (e.g. to lower a limit)."""
    env = dict(os.environ, SWARMSCOPE_TOKEN=token, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarmscope",
            "relay",
            "--upstream",
            upstream,
            "--bind",
            "127.0.0.1:0",
            "--relay-id",
            name,
            "--liveness",
            "3",
            "--window-timeout",
            "15",
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert f"swarmscope relay {name} listening on port " in line, line
    return proc, f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}"


def _routes(fleet: Fleet) -> dict[str, str]:
    return {p.probe_id: p.via for p in fleet.probes()}


def _window(
    fleet: Fleet, wid: str, names: list[str], kill: list[int] | None = None
) -> tuple[list, list[str]]:
    nodes = {n: [pb.NodeInfo(name=n, cgroup_id=1)] for n in names}
    assert fleet.open_window("run", wid, nodes, timeout_s=20) == {}
    for pid in kill or []:
        os.kill(pid, signal.SIGKILL)
    return fleet.close_window("run", wid, timeout_s=40)


@pytest.mark.slow
@pytest.mark.parametrize("sim", ["python", "go"])
def test_relay_killed_mid_window_probes_move_and_window_closes_exact(sim: str) -> None:
    from simprobes import COUNTERS, SimProbes
    from simprobes_compiled import GoSimProbes

    Sims = GoSimProbes if sim == "go" else SimProbes

    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0, reconnect_grace_s=6.0)
    fleet.start()
    relays, sims = [], []
    try:
        for name in ("relay-a", "relay-b"):
            relays.append(start_relay(name, fleet.address))
        ups = [relays[0][1], relays[1][1], fleet.address]
        names = [f"node-{i:02d}" for i in range(20)]
        # 16 probes in one process, 4 in another (killed in window 3); even ones start at relay-a.
        sims.append(Sims.spawn(ups, TOKEN, names[:16], per_process=16, per_channel=4, spread=2))
        sims.append(Sims.spawn(ups, TOKEN, names[16:], per_process=4, per_channel=4, spread=2))
        fleet.wait_for_probes(20, timeout_s=60)
        routes = _routes(fleet)
        assert sorted(routes) == [f"sim-{n}" for n in names]
        assert sorted(routes.values()) == ["relay-a"] * 10 + ["relay-b"] * 10
        assert routes["sim-node-00"] == "relay-a" and routes["sim-node-01"] == "relay-b"

        # 1: through both relays, every reading, nothing missing.
        readings, missing = _window(fleet, "w1", names)
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        assert all(r.counters == COUNTERS for r in readings)
        assert fleet.take_reconnects("w1") == {}

        # 2: relay-a SIGKILLed between open and close: its ten probes re-register (same id) at
        # relay-b, their open window moves with them, and the window closes with all twenty.
        readings, missing = _window(fleet, "w2", names, kill=[relays[0][0].pid])
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        assert all(r.counters == COUNTERS for r in readings)
        moved = {f"sim-{n}@{n}": 1 for n in names[0::2]}
        assert fleet.take_reconnects("w2") == moved
        assert set(_routes(fleet).values()) == {"relay-b"}

        # 3: relay-b and the process of four probes SIGKILLed mid-window: sixteen probes go to the
        # controller itself (their last upstream), the four are named missing, exactly.
        readings, missing = _window(fleet, "w3", names, kill=[relays[1][0].pid, sims[1].procs[0].pid])
        assert missing == sorted(f"sim-{n}@{n}" for n in names[16:])
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names[:16]]
        assert all(r.counters == COUNTERS for r in readings)
        assert fleet.take_reconnects("w3") == {f"sim-{n}@{n}": 1 for n in names[:16]}
        assert _routes(fleet) == {f"sim-{n}": "" for n in names[:16]}
    finally:
        for s in sims:
            s.stop()
        for proc, _ in relays:
            proc.kill()
            proc.wait(10)
        fleet.stop()


@pytest.mark.slow
def test_probes_killed_behind_a_live_relay_are_named_missing_by_the_relay() -> None:
    """Six probes behind one relay (their only upstream); two SIGKILLed mid-window. The relay
    names exactly those two in its WindowDone after its own grace (3 s): the controller, whose
    grace is 60 s, closes the window on the relay's word with the four readings."""
    from simprobes import COUNTERS, SimProbes

    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0, reconnect_grace_s=60.0)
    fleet.start()
    relay, addr = start_relay("relay-l", fleet.address)
    names = [f"lost-{i}" for i in range(6)]
    sims = [
        SimProbes.spawn([addr], TOKEN, names[:4], per_process=4, per_channel=2),
        SimProbes.spawn([addr], TOKEN, names[4:], per_process=2, per_channel=2),
    ]
    try:
        fleet.wait_for_probes(6, timeout_s=60)
        assert _routes(fleet) == {f"sim-{n}": "relay-l" for n in names}
        readings, missing = _window(fleet, "l1", names)
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        t0 = time.monotonic()
        readings, missing = _window(fleet, "l2", names, kill=[sims[1].procs[0].pid])
        assert time.monotonic() - t0 < 30  # the relay's answer, not the controller's 40 s timeout
        assert missing == [f"sim-{n}@{n}" for n in names[4:]]
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names[:4]]
        assert all(r.counters == COUNTERS for r in readings)
        assert fleet.take_reconnects("l2") == {}
    finally:
        for s in sims:
            s.stop()
        relay.kill()
        relay.wait(10)
        fleet.stop()


@pytest.mark.slow
def test_relay_tries_its_upstreams_in_turn_and_refuses_one_without_the_token() -> None:
    """Upstreams [a closed port, the controller]: the relay registers at the second, same id,
    and a window through it is exact. A relay whose only upstream cannot prove the token exits
    1 at once, having sent it nothing keyed by the token."""
    from simprobes import COUNTERS, SimProbes

    fleet = Fleet(TOKEN, liveness_s=3.0)
    fleet.start()
    with socket.socket() as s:  # a port nothing listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
        relay, addr = start_relay("relay-u", f"{closed},{fleet.address}")
    impostor, _ = start_relay("relay-x", fleet.address, token="not-the-token")
    names = ["up-0", "up-1"]
    sims = SimProbes.spawn([addr], TOKEN, names, per_process=2, per_channel=2)
    try:
        assert impostor.wait(30) == 1
        fleet.wait_for_probes(2, timeout_s=60)
        assert _routes(fleet) == {f"sim-{n}": "relay-u" for n in names}
        readings, missing = _window(fleet, "u1", names)
        assert missing == []
        assert sorted((r.probe_id, r.node, r.counters == COUNTERS) for r in readings) == [
            (f"sim-{n}", n, True) for n in names
        ]
    finally:
        sims.stop()
        for proc in (relay, impostor):
            proc.kill()
            proc.wait(10)
        fleet.stop()


@pytest.mark.slow
def test_real_agent_over_mtls_moves_from_a_killed_relay_to_the_controller(tmp_path: Path) -> None:
    """The real probe agent (stand-in programs) with ``--controller relay,controller``, mTLS on
    both levels: a plaintext probe is refused by the relay; SIGKILL the relay mid-window and
    the agent re-registers (same id) at the controller, whose window closes with its delta."""
    from agent_helpers import FakeProgram, fake_factory
    from fakeprobe import FakeProbe
    from tls_helpers import make_pki

    from swarmscope.core.tls import TLSFiles
    from swarmscope.probes.agent import ProbeAgent

    pki = make_pki(tmp_path / "pki")
    fleet = Fleet(
        TOKEN,
        liveness_s=3.0,
        reconnect_grace_s=6.0,
        tls=TLSFiles(cert=pki["server.crt"], key=pki["server.key"], ca=pki["ca.crt"]),
    )
    fleet.start()
    relay, addr = start_relay(
        "relay-m",
        fleet.address,
        *("--tls-cert", pki["server.crt"], "--tls-key", pki["server.key"], "--tls-client-ca", pki["ca.crt"]),
        *("--upstream-tls-ca", pki["ca.crt"], "--upstream-tls-cert", pki["client.crt"]),
        *("--upstream-tls-key", pki["client.key"]),
    )
    client = TLSFiles(cert=pki["client.crt"], key=pki["client.key"], ca=pki["ca.crt"])
    agent = ProbeAgent(
        f"{addr},{fleet.address}",
        TOKEN,
        "agent-node",
        ["f"],
        probe_id="agent-1",
        retries=3,
        backoff_s=0.1,
        tls=client,
        program_factory=fake_factory({"f": FakeProgram("f")}),
    )
    run = threading.Thread(target=agent.run_forever, daemon=True)
    run.start()
    try:
        plain = FakeProbe(addr, TOKEN, "host-plain")
        with pytest.raises(Exception, match="UNAVAILABLE"):
            plain.register()
        plain.stop()
        fleet.wait_for_probes(hosts={"agent-node"}, timeout_s=30)
        assert _routes(fleet) == {"agent-1": "relay-m"}
        node = [pb.NodeInfo(name="agent-node", cgroup_id=42)]
        assert fleet.open_window("run", "wm", {"agent-node": node}, timeout_s=20) == {}
        os.kill(relay.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while _routes(fleet) != {"agent-1": ""} and time.monotonic() < deadline:
            time.sleep(0.05)
        readings, missing = fleet.close_window("run", "wm", timeout_s=30)
        assert missing == []
        assert [(r.probe_id, r.node, r.counters, r.error) for r in readings] == [
            ("agent-1", "agent-node", {"ticks": 5}, "")
        ]
        assert fleet.take_reconnects("wm") == {"agent-1@agent-node": 1}
        assert agent.upstream == fleet.address
    finally:
        agent.stop()
        run.join(10)
        relay.kill()
        relay.wait(10)
        fleet.stop()


def test_relay_cli_reports_every_bad_setting_at_once(monkeypatch, capsys) -> None:
    from swarmscope.app.cli import main

    for var in ("SWARMSCOPE_RELAY_UPSTREAM", "SWARMSCOPE_RELAY_TLS_CERT", "SWARMSCOPE_RELAY_TLS_KEY"):
        monkeypatch.delenv(var, raising=False)
    rc = main(["relay", "--tls-cert", "c.pem", "--window-timeout", "0", "--retries", "0"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--upstream" in err and "--tls-cert" in err and "--window-timeout" in err, err
    assert "--retries: retries: must be >= 1" in err, err


def test_python_relay_roster_carries_each_probes_last_change_only() -> None:
    """A probe that left and came back within one roster period is announced as added, not
    added and removed (the controller applies removals last: it would mark it gone); one that
    came and left is announced as removed."""
    from swarmscope.controller.relay import Relay

    relay = Relay(["127.0.0.1:1"], TOKEN, bind="127.0.0.1:0")
    relay._changes.extend(
        [("p", "h1", False), ("q", "h2", True), ("p", "h1", True), ("q", "h2", False), ("r", "h3", True)]
    )
    roster = relay._drain()
    assert [(e.probe_id, e.host) for e in roster.added] == [("p", "h1"), ("r", "h3")]
    assert list(roster.removed) == ["q"]
    assert not relay._changes
