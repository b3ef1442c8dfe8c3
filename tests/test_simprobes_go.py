"""The compiled simulated probes of the fan-in benches (bench/simprobes_go, built by
tools/build_simprobes.sh) against a real in-process controller fleet and real `swarmscope relay`
processes, over real gRPC: 200 register and answer windows with exactly 200 readings of
``{"exec": 1000}``; a SIGKILLed relay's probes move to the next upstream keeping their open
window (test_relay.py's case for the Python simulated probes, the same asserts); a wrong token
joins nobody (the controller's proof is checked before anything is sent keyed by it).
"""

from __future__ import annotations

import sys
import time

import pytest
from helpers import ROOT
from test_relay import TOKEN, _routes, _window, start_relay

from swarmscope.controller.fleet import Fleet

sys.path.insert(0, str(ROOT / "bench"))

from simprobes import COUNTERS
from simprobes_compiled import GoSimProbes, build

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def binary() -> str:
    return build()  # cached by source hash; a SetupError (not a skip) when it does not build


def test_200_register_and_close_windows_with_exact_readings() -> None:
    # Liveness 3 s at a 1 s heartbeat: probes alive after 7 s heartbeat at the interval handed out.
    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0)
    fleet.start()
    sims = None
    try:
        names = [f"node-{i:03d}" for i in range(200)]
        # Two processes, four connections each (50 probes per HTTP/2 connection).
        sims = GoSimProbes.spawn(fleet.address, TOKEN, names, per_process=100, per_channel=50)
        assert len(sims.procs) == 2
        sims.wait_registered(timeout_s=60)
        fleet.wait_for_probes(200, timeout_s=30)
        assert sims.registered.value == 200
        probes = fleet.probes()
        assert sorted((p.probe_id, p.hostname, p.node_name, p.via) for p in probes) == [
            (f"sim-{n}", n, n, "") for n in names
        ]
        for w in ("w1", "w2"):
            readings, missing = _window(fleet, w, names)
            assert missing == []
            assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
            assert [r.counters for r in readings] == [COUNTERS] * 200
        time.sleep(7.0)
        assert len(fleet.probes(alive_only=True)) == 200
        assert sims.registered.value == 200  # counted once each, never again
    finally:
        if sims is not None:
            sims.stop()
        fleet.stop()
    assert [p.returncode for p in sims.procs] == [0, 0]  # stdin closed: each ended on its own


def test_relay_killed_mid_window_probes_move_and_window_closes_exact() -> None:
    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0, reconnect_grace_s=6.0)
    fleet.start()
    relays, sims = [], []
    try:
        for name in ("relay-a", "relay-b"):
            relays.append(start_relay(name, fleet.address))
        ups = [relays[0][1], relays[1][1], fleet.address]
        names = [f"node-{i:02d}" for i in range(20)]
        # 16 probes in one process, 4 in another (killed in window 3); even ones start at relay-a.
        sims.append(GoSimProbes.spawn(ups, TOKEN, names[:16], per_process=16, per_channel=4, spread=2))
        sims.append(GoSimProbes.spawn(ups, TOKEN, names[16:], per_process=4, per_channel=4, spread=2))
        fleet.wait_for_probes(20, timeout_s=60)
        routes = _routes(fleet)
        assert sorted(routes) == [f"sim-{n}" for n in names]
        assert sorted(routes.values()) == ["relay-a"] * 10 + ["relay-b"] * 10
        assert routes["sim-node-00"] == "relay-a" and routes["sim-node-01"] == "relay-b"

        readings, missing = _window(fleet, "w1", names)
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        assert all(r.counters == COUNTERS for r in readings)
        assert fleet.take_reconnects("w1") == {}

        # relay-a SIGKILLed between open and close: its ten probes re-register (same id) at
        # relay-b, keeping the open window, which closes with all twenty.
        readings, missing = _window(fleet, "w2", names, kill=[relays[0][0].pid])
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        assert all(r.counters == COUNTERS for r in readings)
        assert fleet.take_reconnects("w2") == {f"sim-{n}@{n}": 1 for n in names[0::2]}
        assert set(_routes(fleet).values()) == {"relay-b"}

        # relay-b and the process of four SIGKILLed mid-window: sixteen go to the controller
        # itself (their last upstream), the four are named missing, exactly.
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


def test_wrong_token_joins_nobody_and_says_why(capfd: pytest.CaptureFixture[str]) -> None:
    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0)
    fleet.start()
    sims = None
    try:
        sims = GoSimProbes.spawn(fleet.address, "not-the-token", ["node-x", "node-y"], per_process=2)
        deadline, err = time.monotonic() + 15, ""
        while "failed to join" not in err:  # its report comes every 0.2 s
            assert time.monotonic() < deadline
            time.sleep(0.2)
            err += capfd.readouterr().err
        assert "controller proof does not verify at passthrough:///" + fleet.address in err
        assert sims.registered.value == 0
        assert fleet.probes(alive_only=False) == []
    finally:
        if sims is not None:
            sims.stop()
        fleet.stop()
