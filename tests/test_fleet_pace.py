"""Heartbeats paced by the fleet's size (controller/fleet_state.py ``pace``), over real gRPC.

A fleet with a 0.5 s heartbeat, a 1 s liveness and a budget of 2 heartbeats a second hands its
n-th direct session max(0.5, n / 2) s and a liveness scaled the same way; each probe keeps what
it was handed. Checked on the controller's fleet, on a real `swarmscope relay` process's
downstream fleet (the same rule for its probes), and that probes behind a relay do not count.
"""

from __future__ import annotations

import threading
import time

import pytest
from fakeprobe import FakeProbe
from test_relay import start_relay

from swarmscope.controller.fleet import Fleet
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "pace-test-token"
pytestmark = pytest.mark.timeout(60)


def _fleet(expect_probes: int = 0) -> Fleet:
    fleet = Fleet(TOKEN, heartbeat_s=0.5, liveness_s=1.0, heartbeat_budget=2.0, expect_probes=expect_probes)
    fleet.start()
    return fleet


def _beat(probe: FakeProbe, stop: threading.Event) -> threading.Thread:
    """Heartbeat at the interval Register handed out, as the agent does."""

    def run() -> None:
        while not stop.wait(probe.reply.heartbeat_interval_s):
            probe.out.put(pb.ProbeMessage(heartbeat=pb.Heartbeat(unix_ns=time.time_ns())))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_scaled_interval_and_liveness_per_probe() -> None:
    fleet = _fleet()
    stop = threading.Event()
    probes = []
    try:
        # One at a time: the n-th is handed max(0.5, n / 2) s, and 2x that as its liveness.
        for name in ("a", "b", "c"):
            probes.append(FakeProbe(fleet.address, TOKEN, name).start())
        _a, b, c = probes
        assert [p.reply.heartbeat_interval_s for p in probes] == [0.5, 1.0, 1.5]
        states = {p.host: p for p in fleet.probes(alive_only=False)}
        assert [(states[h].heartbeat_s, states[h].liveness_s) for h in "abc"] == [
            (0.5, 1.0),
            (1.0, 2.0),
            (1.5, 3.0),
        ]
        fleet.wait_for_probes(hosts={"a", "b", "c"}, timeout_s=10)
        _beat(c, stop)  # c beats at its 1.5 s; a and b fall silent after their first message
        nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in ("b", "c")}
        assert fleet.open_window("run", "w1", nodes, timeout_s=10) == {}
        b.silent = True  # acknowledged the open, answers nothing more
        readings, missing = fleet.close_window("run", "w1", timeout_s=20)
        closed = time.monotonic()
        # The close waited for b until its own (scaled) liveness ran out, not the configured 1 s.
        quiet = closed - states["b"].last_seen
        assert missing == ["fake-b@b"] and [r.node for r in readings] == ["c"]
        assert 2.0 <= quiet < 3.5, quiet
        # c, beating every 1.5 s (slower than the 1 s liveness a small fleet has), stays alive;
        # a went after its 1 s, b after its 2 s.
        seen: set[tuple[str, ...]] = set()
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            seen.add(tuple(sorted(p.host for p in fleet.probes())))
            time.sleep(0.1)
        assert seen == {("c",)}
    finally:
        stop.set()
        for p in probes:
            p.stop()
        fleet.stop()


@pytest.mark.slow
def test_silent_probe_is_lost_after_its_scaled_liveness_not_before() -> None:
    fleet = _fleet()
    probes = []
    try:
        for name in ("a", "b", "c", "d"):  # d is handed 2.0 s: a liveness of 4.0 s
            probes.append(FakeProbe(fleet.address, TOKEN, name).start())
        fleet.wait_for_probes(hosts={"d"}, timeout_s=10)
        d = next(p for p in fleet.probes(alive_only=False) if p.host == "d")
        assert (probes[3].reply.heartbeat_interval_s, d.liveness_s) == (2.0, 4.0)
        # d sent one message (its first) and nothing after: alive for 4 s from it, then lost.
        gone_at = None
        while time.monotonic() - d.last_seen < 8.0:
            if "d" not in {p.host for p in fleet.probes()}:
                gone_at = time.monotonic() - d.last_seen
                break
            time.sleep(0.05)
        assert gone_at is not None and 4.0 <= gone_at < 5.5, gone_at
    finally:
        for p in probes:
            p.stop()
        fleet.stop()


def test_a_fleet_of_known_size_paces_its_first_probe() -> None:
    fleet = _fleet(expect_probes=4)
    probe = FakeProbe(fleet.address, TOKEN, "first")
    try:
        probe.start()
        assert probe.reply.heartbeat_interval_s == 2.0
    finally:
        probe.stop()
        fleet.stop()


def test_relay_paces_its_probes_and_relayed_probes_do_not_count_upstream() -> None:
    fleet = _fleet(expect_probes=4)  # 4 probes in all: 3 behind the relay, 1 direct
    relay, addr = start_relay(
        "relay-p",
        fleet.address,
        *("--heartbeat", "0.5", "--liveness", "1", "--heartbeat-budget", "2"),
        token=TOKEN,
    )
    probes: list[FakeProbe] = []
    try:
        for name in ("r1", "r2", "r3"):
            probes.append(FakeProbe(addr, TOKEN, name).start())
        assert [p.reply.heartbeat_interval_s for p in probes] == [0.5, 1.0, 1.5]
        fleet.wait_for_probes(hosts={"r1", "r2", "r3"}, timeout_s=20)
        # Upstream the relay's own session is paced by the sessions here (it was the first: 0.5 s),
        # not by the 4 probes expected, which beat elsewhere.
        assert next(p.heartbeat_s for p in fleet._probes.values() if p.relay) == 0.5
        # A direct probe: 4 expected (2.0 s); the 3 behind the relay do not count as sessions
        # here (with them, 5 sessions: 2.5 s).
        direct = FakeProbe(fleet.address, TOKEN, "direct")
        probes.append(direct.start())
        assert direct.reply.heartbeat_interval_s == 2.0
    finally:
        for p in probes:
            p.stop()
        relay.kill()
        relay.wait(10)
        fleet.stop()
