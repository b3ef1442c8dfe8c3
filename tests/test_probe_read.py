"""A read so far (ReadWindow): the real probe (``swarmscope probe``: BCC in its loader, the
pinned maps read by the probe) answers with its counts since the window opened and keeps the
window open; a second read sees more, the close is still the exact total. One probe dials the
controller's fleet directly, one through a real ``swarmscope relay`` process; real execs in a
throw-away cgroup."""

from __future__ import annotations

import pytest
from probe_helpers import exec_in_cgroup, probe_cli, temp_cgroup
from test_relay import start_relay

from swarmscope.controller.fleet import Fleet
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "read-so-far-token-0123"
pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.bpf]


def _execs(readings: list) -> dict[str, int]:
    assert [r.error for r in readings] == [""] * len(readings)
    return {r.node: r.counters["exec"] for r in readings}


def test_read_so_far_direct_and_through_a_relay_keeps_the_window_exact() -> None:
    fleet = Fleet(TOKEN, liveness_s=5.0)
    fleet.start()
    relay, relay_addr = start_relay("relay-r", fleet.address, token=TOKEN)
    env = {"SWARMSCOPE_TOKEN": TOKEN}
    try:
        with (
            probe_cli(["--controller", fleet.address, "--node", "direct", "--programs", "exec_count"], env),
            probe_cli(["--controller", relay_addr, "--node", "relayed", "--programs", "exec_count"], env),
            temp_cgroup("rd") as cg,
        ):
            fleet.wait_for_probes(hosts={"direct", "relayed"}, timeout_s=120)  # BCC compiles first
            cid = cgroup_id(cg)
            nodes = {h: [pb.NodeInfo(name=f"n-{h}", cgroup_id=cid)] for h in ("direct", "relayed")}
            assert fleet.open_window("run", "w-rd", nodes, programs=["exec_count"]) == {}
            exec_in_cgroup(cg, 30)
            readings, missing = fleet.read_window("w-rd", timeout_s=5)
            assert missing == []
            assert _execs(readings) == {"n-direct": 30, "n-relayed": 30}
            exec_in_cgroup(cg, 20)
            readings, missing = fleet.read_window("w-rd", timeout_s=5)
            assert missing == []
            assert _execs(readings) == {"n-direct": 50, "n-relayed": 50}  # not reset by the first read
            exec_in_cgroup(cg, 7)
            readings, missing = fleet.close_window("run", "w-rd", timeout_s=20)
            assert missing == []
            assert _execs(readings) == {"n-direct": 57, "n-relayed": 57}  # the close: the exact total
            assert fleet.read_window("w-rd", timeout_s=1) == ([], [])  # closed: nothing to read
    finally:
        relay.terminate()
        relay.wait(timeout=30)
        fleet.stop()
