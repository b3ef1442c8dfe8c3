"""The neighbor kind's reconcile of a ``locust -f`` window (one whose point carries no sweep
parameters), including one whose workers all left before sending (a Ctrl-C to the whole group).

    .venv/bin/python -m pytest tests/test_neighbors_reconcile_free.py
"""

from __future__ import annotations

from swarmscope.controller.model import PointInfo, WindowInfo, WindowOutcome
from swarmscope.kinds import load_scenario
from swarmscope.kinds.neighbor_writes.results import reconcile
from swarmscope.workers.http_stats import new_histogram


def _outcome(results: dict) -> WindowOutcome:
    window = WindowInfo(
        run_id="r", window_id="w", point=0, iteration=1, nodes=["n1", "n2"], opened_ns=1, closed_ns=2
    )
    return WindowOutcome(window, PointInfo(0, {"nodes": 2}, 1), results, [], [])


def test_a_free_window_whose_workers_sent_nothing_is_kept_with_its_workers_missing() -> None:
    _kind, cfg = load_scenario("scenarios/neighbor_writes.yaml", [], env={})
    r = reconcile(cfg, _outcome({}))
    assert [(n.node, n.generated, n.missing) for n in r.per_node] == [
        ("n1", None, ["worker"]),
        ("n2", None, ["worker"]),
    ]
    assert (r.extra["locust"]["entries_written"], r.extra["locust"]["batches"]) == (0, 0)


def test_a_free_window_with_one_worker_counts_it() -> None:
    _kind, cfg = load_scenario("scenarios/neighbor_writes.yaml", [], env={})
    h = new_histogram()
    for us in (100, 200, 300):
        h.record_value(us)
    res = {"generated": 30, "batches": 3, "failures": 0, "hist": h.encode().decode("ascii"), "raw_us": [],
           "control_plane": "cp", "control_plane_entries": 30}  # fmt: skip
    r = reconcile(cfg, _outcome({"n1": res}))
    assert [(n.node, n.generated, n.missing) for n in r.per_node] == [
        ("n1", 30, []),
        ("n2", None, ["worker"]),
    ]
    assert (r.extra["locust"]["entries_written"], r.extra["locust"]["batches"], r.flags) == (30, 3, [])
