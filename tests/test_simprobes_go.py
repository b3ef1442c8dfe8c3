"""The compiled simulated probes of the fan-in benches (bench/simprobes_go, built by
tools/go_build.sh) against a real in-process controller fleet and real `swarmscope relay`
processes, over real gRPC: 200 register and answer windows with exactly 200 readings of
``{"exec": 1000}``; a wrong token joins nobody (the controller's proof is checked before
anything is sent keyed by it). A SIGKILLed relay's probes moving with their open window:
tests/test_relay.py (sim="go").
"""

from __future__ import annotations

import sys
import time

import prebuilt
import pytest
from helpers import ROOT
from test_relay import TOKEN, _window

from swarmscope.controller.fleet import Fleet

sys.path.insert(0, str(ROOT / "bench"))

from simprobes import COUNTERS
from simprobes_compiled import GoSimProbes, build

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", autouse=True)
def binary() -> str:
    return prebuilt.found(build)  # built by `make tools` (cached by source hash)


@pytest.mark.slow
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
