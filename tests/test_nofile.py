"""RLIMIT_NOFILE (issue 13): processes that hold a socket per probe raise their soft open-files
limit to the hard one. A real `swarmscope relay` started with a soft limit of 64 (hard left as
the test's) takes 150 simulated probes on 150 TCP connections of their own: without the raise
it could accept only ~45 of them (gRPC's accept fails with EMFILE) and the rest never join.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from helpers import ROOT
from test_relay import TOKEN, start_relay

from swarmscope.controller.fleet import Fleet
from swarmscope.core.sys.limits import raise_nofile

sys.path.insert(0, str(ROOT / "bench"))

pytestmark = pytest.mark.timeout(120)
LOW = 64


def _lower_soft() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _soft_hard(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(ln for ln in f if ln.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_raise_nofile_lifts_soft_to_hard_in_a_fresh_process() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= LOW:
        pytest.skip(f"hard RLIMIT_NOFILE {hard}: nothing to raise to")
    code = (
        "import resource; from swarmscope.core.sys.limits import raise_nofile; "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE), raise_nofile(), "
        "resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_lower_soft,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == f"({LOW}, {hard}) ({hard}, {hard}) ({hard}, {hard})"
    # Already at the hard limit: unchanged.
    assert raise_nofile() == resource.getrlimit(resource.RLIMIT_NOFILE)


@pytest.mark.slow
def test_relay_started_with_64_open_files_takes_150_connections() -> None:
    from simprobes import SimProbes

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard < 1024:
        pytest.skip(f"hard RLIMIT_NOFILE {hard}: too low for this test")
    n = 150
    fleet = Fleet(TOKEN, liveness_s=30, heartbeat_s=5)
    relay = sims = None
    try:
        fleet.start()
        relay, addr = start_relay("relay-nofile", fleet.address, preexec=_lower_soft)
        assert _soft_hard(relay.pid) == (hard, hard)
        names = [f"nofile-{i:03d}" for i in range(n)]
        # per_channel=1: one TCP connection per probe, as real probes have; the relay is their
        # only upstream before the controller, and a Hello waits 60 s before moving on.
        sims = SimProbes.spawn([addr, fleet.address], TOKEN, names, per_process=n, per_channel=1)
        fleet.wait_for_probes(n, timeout_s=45)
        vias = [p.via for p in fleet.probes() if p.probe_id.startswith("sim-nofile-")]
        assert vias == ["relay-nofile"] * n
    finally:
        if sims is not None:
            sims.stop()
        if relay is not None:
            relay.kill()
            relay.wait(10)
        fleet.stop()
