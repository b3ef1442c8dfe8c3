"""The fleet's per-message savings (controller/fleet_gc.py, fleet_loop.drain_handoff), over real gRPC.

No automatic garbage collection while a window's open or close is in flight, and the collector
back on after it, also when the window times out or the call fails; the join's survivors
collected once the probes are in (not under a hold); holds that nest and
cross threads; a process that turned the collector off keeps it off. grpc.aio's completions
taken by the batch: the fleet's loop has the wrapped reader, thousands of calls in flight at
once all answer, and two fleets in one process (whose loops share grpc's one socket) both close
their windows with every reading.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import grpc
import pytest
from fakeprobe import FakeProbe

from swarmscope.controller import fleet_loop
from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_gc import gc_held, gc_holds
from swarmscope.core import auth
from swarmscope.core.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc

TOKEN = "gc-token"


def nodes(*names: str) -> list[pb.NodeInfo]:
    return [pb.NodeInfo(name=n, cgroup_id=i + 1) for i, n in enumerate(names)]


class Seen(list[Any]):
    """A FakeProbe's command list that also notes whether the collector ran when each came."""

    def __init__(self) -> None:
        super().__init__()
        self.gc: list[tuple[str, bool]] = []

    def append(self, cmd: Any) -> None:
        self.gc.append((cmd.WhichOneof("kind"), gc.isenabled()))
        super().append(cmd)


def test_no_collection_while_a_window_is_in_flight_and_back_after() -> None:
    assert gc.isenabled()
    fleet = Fleet(TOKEN, liveness_s=5.0)
    fleet.start()
    try:
        probe = FakeProbe(fleet.address, TOKEN, "h1", {"exec": 5})
        seen = probe.commands = Seen()
        probe.start()
        fleet.wait_for_probes(1, timeout_s=30)
        assert fleet.open_window("r", "w1", {"h1": nodes("n1")}) == {}
        assert gc.isenabled() and gc_holds() == 0
        readings, missing = fleet.close_window("r", "w1", timeout_s=20)
        assert missing == [] and [(r.node, r.counters) for r in readings] == [("n1", {"exec": 5})]
        assert seen.gc == [("open", False), ("close", False)]
        assert gc.isenabled() and gc_holds() == 0

        probe.silent = True  # a close that times out releases the hold too
        assert fleet.open_window("r", "w2", {"h1": nodes("n1")}, timeout_s=1.0) != {}
        assert gc.isenabled() and gc_holds() == 0
        with pytest.raises(FleetError):
            fleet.close_window("r", "unknown", timeout_s=1.0)
        assert gc.isenabled() and gc_holds() == 0
        probe.stop()
    finally:
        fleet.stop()


def test_the_joins_survivors_are_collected_once_the_probes_are_in_and_not_under_a_hold() -> None:
    """wait_for_probes ends with one collection of the young generations (fleet_gc.collect_young),
    in the caller's thread; none while a hold is open, none with the collector off."""
    fleet = Fleet(TOKEN, liveness_s=5.0)
    fleet.start()
    runs: list[tuple[str, int]] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.current_thread() is threading.main_thread():
            runs.append((phase, info["generation"]))

    probes = [FakeProbe(fleet.address, TOKEN, f"h{i}", {"exec": 1}).start() for i in range(3)]
    try:
        gc.collect()
        gc.callbacks.append(note)
        fleet.wait_for_probes(3, timeout_s=30)
        assert runs == [("start", 1)]
        runs.clear()
        with gc_held():
            fleet.wait_for_probes(3, timeout_s=30)
        gc.disable()
        try:
            fleet.wait_for_probes(3, timeout_s=30)
        finally:
            gc.enable()
        assert runs == []
    finally:
        if note in gc.callbacks:
            gc.callbacks.remove(note)
        for p in probes:
            p.stop()
        fleet.stop()


def test_holds_nest_across_threads_and_a_process_without_the_collector_keeps_it_off() -> None:
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_held():
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with gc_held():
        t.start()
        assert entered.wait(10)
        with gc_held():
            assert gc_holds() == 3 and not gc.isenabled()
        assert gc_holds() == 2 and not gc.isenabled()
    assert gc_holds() == 1 and not gc.isenabled()  # the other thread still holds it
    leave.set()
    t.join(10)
    assert gc_holds() == 0 and gc.isenabled()

    gc.disable()
    try:
        with gc_held():
            assert gc_holds() == 0 and not gc.isenabled()
        assert not gc.isenabled()  # not ours to turn on
    finally:
        gc.enable()


@pytest.mark.slow
def test_thousands_of_completions_in_flight_all_answer_through_the_drained_reader() -> None:
    fleet = Fleet(TOKEN)
    fleet.start()
    try:
        loop = fleet._aio.loop
        assert loop is not None
        readers = [k.data[0]._callback for k in loop._selector.get_map().values() if k.data[0]]  # type: ignore[attr-defined]
        assert fleet_loop._drained in readers

        async def hellos(n: int) -> int:
            async with grpc.aio.insecure_channel(fleet.address) as ch:
                stub = pb_grpc.ProbeControlStub(ch)
                calls = [
                    stub.Hello(pb.HelloRequest(probe_nonce=auth.new_nonce(), probe_id=f"p{i}"), timeout=60)
                    for i in range(n)
                ]
                replies = await asyncio.gather(*calls)
            return sum(len(r.server_nonce) > 0 for r in replies)

        assert asyncio.run(hellos(3000)) == 3000
    finally:
        fleet.stop()


def test_two_fleets_in_one_process_share_grpcs_socket_and_lose_nothing() -> None:
    fleets = [Fleet(TOKEN, liveness_s=5.0), Fleet(TOKEN, liveness_s=5.0)]
    probes: list[FakeProbe] = []
    results: dict[int, list[tuple[int, list[str]]]] = {}
    try:
        for k, fleet in enumerate(fleets):
            fleet.start()
            probes += [FakeProbe(fleet.address, TOKEN, f"f{k}-h{i}", {"exec": k}).start() for i in range(8)]
        for fleet in fleets:
            fleet.wait_for_probes(8, timeout_s=30)

        def windows(k: int) -> None:
            fleet, hosts = fleets[k], {f"f{k}-h{i}": nodes(f"f{k}-n{i}") for i in range(8)}
            results[k] = []
            for w in range(5):
                assert fleet.open_window("r", f"w{w}", hosts, timeout_s=20) == {}
                readings, missing = fleet.close_window("r", f"w{w}", timeout_s=20)
                assert {r.counters["exec"] for r in readings} == {k}
                results[k].append((len({r.node for r in readings}), missing))

        threads = [threading.Thread(target=windows, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert results == {0: [(8, [])] * 5, 1: [(8, [])] * 5}
    finally:
        for p in probes:
            p.stop()
        for fleet in fleets:
            fleet.stop()
