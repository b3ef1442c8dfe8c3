"""A relay's own upstream list: the first upstream is dead, so the relay registers with the next
(after the jittered wait of probes/backoff.py), announces its probes there, and a window through
it is exact. Real processes: a real fleet, a real `swarmscope relay`, simulated probes
(bench/simprobes.py).
"""

from __future__ import annotations

import socket
import sys

import pytest
from helpers import ROOT
from test_relay import TOKEN, _routes, _window, start_relay

from swarmscope.controller.fleet import Fleet

sys.path.insert(0, str(ROOT / "bench"))

pytestmark = pytest.mark.timeout(120)


def _dead_address() -> str:
    """A loopback port nothing listens on (bound, then closed: refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_relay_skips_a_dead_upstream_and_serves_windows_through_the_next() -> None:
    from simprobes import COUNTERS, SimProbes

    fleet = Fleet(TOKEN, liveness_s=3.0, heartbeat_s=1.0)
    fleet.start()
    proc, address = start_relay("relay-up", f"{_dead_address()},{fleet.address}")
    names = [f"node-{i}" for i in range(4)]
    sims = SimProbes.spawn([address], TOKEN, names, per_process=4, per_channel=4)
    try:
        fleet.wait_for_probes(4, timeout_s=60)
        assert _routes(fleet) == {f"sim-{n}": "relay-up" for n in names}
        readings, missing = _window(fleet, "w1", names)
        assert missing == []
        assert sorted((r.probe_id, r.node) for r in readings) == [(f"sim-{n}", n) for n in names]
        assert all(r.counters == COUNTERS for r in readings)
    finally:
        sims.stop()
        proc.kill()
        proc.wait(10)
        fleet.stop()
