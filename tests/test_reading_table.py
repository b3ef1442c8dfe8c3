"""A relay's readings by column (WindowDone.table): exact round trip, and the controller's rules.

The relay itself is exercised over real processes in tests/test_relay.py (every reading there
travels in the table); this checks the column format's edges that test cannot reach.
"""

from __future__ import annotations

import time

import pytest

from swarmscope.controller import relay_routes
from swarmscope.controller.fleet import Fleet
from swarmscope.controller.fleet_state import ProbeState, fill_table, table_rows
from swarmscope.controller.model import ProbeReading
from swarmscope.v1 import probe_pb2 as pb


def _reading(node: str, **kw: object) -> pb.Reading:
    return pb.Reading(run_id="r", window_id="w", probe_id="claimed", node=node, **kw)  # type: ignore[arg-type]


def test_round_trip_is_exact_and_row_shaped_readings_stay_in_batch() -> None:
    done = pb.WindowDone(run_id="r", window_id="w")
    rows = [
        (
            "p1",
            _reading("n1", counters={"exec": 7, "fork": 2}, start_unix_ns=10, end_unix_ns=20, pod="ns/a/c"),
        ),
        ("p2", _reading("n2", counters={"fork": 5}, error="exec_count: gone")),
        ("p3", _reading("n3", counters={"x": 1}, gauges={"load": 0.5})),
        ("p4", _reading("n4")),
    ]
    fill_table(done, rows)
    wire = pb.WindowDone.FromString(done.SerializeToString())
    assert wire.readings == 4
    assert [(r.probe_id, r.node, dict(r.gauges)) for r in wire.batch] == [("p3", "n3", {"load": 0.5})]
    assert table_rows(wire.table) == [
        ProbeReading("p1", "n1", {"exec": 7, "fork": 2}, {}, 10, 20, "", [], "ns/a/c"),
        ProbeReading("p2", "n2", {"fork": 5}, {}, 0, 0, "exec_count: gone", [], ""),
        ProbeReading("p4", "n4", {}, {}, 0, 0, "", [], ""),
    ]


def test_columns_that_do_not_line_up_are_refused() -> None:
    t = pb.ReadingTable(probe_id=["p1", "p2"], node=["n1"], start_unix_ns=[0, 0], end_unix_ns=[0, 0],
                        error=["", ""], pod=["", ""])  # fmt: skip
    with pytest.raises(ValueError, match="unequal length"):
        table_rows(t)
    t.node.append("n2")
    t.counters.add(name="exec", rows=[0, 2], values=[1, 2])
    with pytest.raises(ValueError, match="row 2 of 2"):
        table_rows(t)


def test_controller_keeps_only_asked_nodes_of_probes_routed_through_that_relay() -> None:
    fleet = Fleet("token")
    now = time.monotonic()
    relays = [
        ProbeState(
            f"relay-{k}", f"s{k}", "r", f"relay-{k}", "", [], "", 0, last_seen=now, connected=True, relay=True
        )
        for k in (0, 1)
    ]
    for r in relays:
        fleet._probes[r.probe_id] = r
    with fleet._lock:
        for relay, entries in ((relays[0], [("p1", "h1"), ("p2", "h2")]), (relays[1], [("p3", "h3")])):
            added = [pb.RosterEntry(probe_id=p, host=h) for p, h in entries]
            relay_routes.handle(fleet, relay, pb.ProbeMessage(roster=pb.Roster(added=added)))
        win, hosts, problems = fleet.begin_open(
            "r", "w", {h: [pb.NodeInfo(name=f"{h}-n")] for h in ("h1", "h2", "h3")}
        )
        assert problems == {} and sorted(hosts) == ["p1", "p2", "p3"]
        done = pb.WindowDone(run_id="r", window_id="w", probes=["p1", "p2", "p3"])
        fill_table(
            done,
            [
                ("p1", _reading("h1-n", counters={"exec": 3})),
                ("p2", _reading("h1-n", counters={"exec": 4})),  # a node not asked of p2
                ("p3", _reading("h3-n", counters={"exec": 5})),  # p3 is relay-1's, not relay-0's
            ],
        )
        relay_routes.handle(fleet, relays[0], pb.ProbeMessage(done=done))
    assert {k: r.counters for k, r in win.readings.items()} == {("p1", "h1-n"): {"exec": 3}}
    assert (fleet.readings_received, fleet.readings_rejected) == (1, 2)
    assert win.done == {"p1", "p2"}
