"""Summary statistics against hand-computed values, and the flags a point must raise."""

from __future__ import annotations

import numpy as np
import pytest

from swarmscope.controller.model import IterationResult, NodeCount
from swarmscope.controller.summary import percentile, run_flags, stats, summarize_point


def test_percentiles_by_hand() -> None:
    s = stats([10, 1, 3, 2, 4])
    # sorted 1 2 3 4 10; p50 = rank 2 -> 3; p99 = rank 3.96 -> 4 + 0.96 * (10 - 4) = 9.76
    assert s == {"n": 5, "mean": 4.0, "p50": 3.0, "p99": pytest.approx(9.76), "min": 1, "max": 10}
    # Nones are left out: 1 2 3 4 -> p50 rank 1.5 -> 2.5; p99 rank 2.97 -> 3.97
    s = stats([4, None, 1, 2, None, 3])
    assert (s["n"], s["mean"], s["p50"], s["p99"]) == (4, 2.5, 2.5, pytest.approx(3.97))
    assert stats([5])["p99"] == 5.0 and stats([5])["p50"] == 5.0
    assert (
        stats([])
        == stats([None, None])
        == {
            "n": 0,
            "mean": None,
            "p50": None,
            "p99": None,
            "min": None,
            "max": None,
        }
    )
    assert percentile([0.0, 1.0], 25) == 0.25
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_percentile_agrees_with_numpy_linear() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100, 1001):
        xs = sorted(rng.integers(0, 10_000, n).tolist())
        for p in (0, 1, 50, 90, 99, 99.9, 100):
            assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), rel=1e-12)


def _it(i: int, nodes: list[NodeCount], flags: list[str] | None = None) -> IterationResult:
    return IterationResult(
        run_id="r",
        point=0,
        params={"nodes": 2},
        iteration=i,
        window_id=f"w{i}",
        started_ns=i,
        ended_ns=i + 1,
        per_node=nodes,
        flags=flags or [],
    )


def test_point_summary_and_flags() -> None:
    results = [
        _it(0, [NodeCount("a", 100, 100, 90), NodeCount("b", 50, None, 40, missing=["probe"])]),
        _it(1, [NodeCount("a", 200, 203, 150), NodeCount("b", 60, 60, 60)], ["generator-saturated"]),
    ]
    s = summarize_point(results, planned_iterations=3)
    # iteration totals: generated 150, 260; kernel 100, 263; reported 130, 210
    assert s["summary"]["generated"] == {
        "n": 2,
        "mean": 205.0,
        "p50": 205.0,
        "p99": 258.9,
        "min": 150,
        "max": 260,
    }
    assert s["summary"]["kernel"]["mean"] == 181.5
    # loss per iteration over nodes with both numbers: 1 - 90/100 (b has no kernel), 1 - 210/263
    assert results[0].loss_ratio == pytest.approx(0.1)
    assert s["summary"]["loss_ratio"]["min"] == pytest.approx(0.1)
    assert s["summary"]["loss_ratio"]["max"] == pytest.approx(1 - 210 / 263)
    # totals' loss only over node-iterations that have both numbers: (90+150+60)/(100+203+60)
    assert s["totals"]["loss_ratio"] == pytest.approx(1 - 300 / 363)
    a, b = s["per_node"]
    assert (a["node"], a["generated"], a["kernel"], a["reported"]) == ("a", 300, 303, 240)
    assert a["mismatched_iterations"] == 1 and a["missing_iterations"] == 0
    assert (b["generated"], b["kernel"], b["reported"], b["missing_iterations"]) == (110, 60, 100, 1)
    assert b["loss_ratio"] == 0.0  # only iteration 1 is comparable for b
    flags = {f["flag"]: f for f in s["flags"]}
    assert list(flags) == ["harness-mismatch", "missing", "incomplete", "generator-saturated"]
    assert flags["harness-mismatch"]["where"] == [
        {"iteration": 1, "node": "a", "generated": 200, "kernel": 203}
    ]
    assert flags["missing"]["where"] == [{"iteration": 0, "node": "b", "sources": ["probe"]}]
    assert flags["generator-saturated"]["where"] == [{"iteration": 1}]
    assert "2 of 3" in flags["incomplete"]["message"]


def test_clean_point_has_no_flags_and_run_flags() -> None:
    clean = summarize_point([_it(0, [NodeCount("a", 5, 5, 5)])], planned_iterations=1)
    assert clean["flags"] == [] and clean["summary"]["loss_ratio"]["mean"] == 0.0
    points = [
        {"index": 0, "flags": []},
        {"index": 1, "flags": [{"flag": "missing"}]},
        {"index": 2, "flags": [{"flag": "missing"}, {"flag": "harness-mismatch"}]},
    ]
    assert run_flags(points, "ok") == [
        {"flag": "missing", "points": [1, 2], "message": "missing at point(s) 1, 2"},
        {"flag": "harness-mismatch", "points": [2], "message": "harness-mismatch at point(s) 2"},
    ]
    assert run_flags([], "interrupted")[0]["flag"] == "run-interrupted"


def _win(i: int, per_node: list[tuple[int, int, int | None]]) -> IterationResult:
    nodes = [NodeCount(f"n{j}", g, k, r) for j, (g, k, r) in enumerate(per_node)]
    return IterationResult("r", 0, {"nodes": len(nodes)}, i, f"w{i}", 0, 1, nodes)


def test_loss_vs_reported_is_the_writeups_definition() -> None:
    """The write-up's 35.5 % at 17 nodes is (generated - reported) / reported on p99 values;
    swarmscope's loss_ratio (1 - reported / kernel) is 26.2 % on the same numbers."""
    from swarmscope.controller.model import loss_ratio, loss_vs_reported

    assert round(loss_vs_reported(6501475, 4798623) * 100, 1) == 35.5  # type: ignore[operator]
    assert round(loss_ratio(4798623, 6501475) * 100, 1) == 26.2  # type: ignore[operator]
    assert round(loss_vs_reported(908291, 903637) * 100, 1) == 0.5  # type: ignore[operator]
    assert loss_vs_reported(5, 0) is None and loss_vs_reported(None, 3) is None
    # per iteration: over the nodes with both numbers (n1 has no tracer reading)
    it = _win(1, [(100, 100, 80), (50, 50, None)])
    assert it.loss_vs_reported == 0.25 and it.per_node[0].loss_vs_reported == 0.25
    assert it.to_json()["loss_vs_reported"] == 0.25


def test_p99_comparison_by_hand() -> None:
    # generated totals 100, 200 -> p99 = 100 + 0.99 * 100 = 199; reported 50, 150 -> 149
    s = summarize_point([_win(1, [(60, 60, 30), (40, 40, 20)]), _win(2, [(200, 200, 150)])])
    c = s["p99_comparison"]
    assert c["generated_p99"] == pytest.approx(199.0) and c["reported_p99"] == pytest.approx(149.0)
    assert c["difference"] == pytest.approx(50.0)
    assert c["loss_vs_reported"] == pytest.approx(50.0 / 149.0)
    assert s["summary"]["loss_vs_reported"]["n"] == 2
    assert s["summary"]["loss_vs_reported"]["max"] == pytest.approx(1.0)  # (100 - 50) / 50
    assert s["totals"]["loss_vs_reported"] == pytest.approx((300 - 200) / 200)
    none = summarize_point([_win(1, [(10, 10, None)])])["p99_comparison"]
    assert none == {"generated_p99": 10.0, "reported_p99": None, "difference": None, "loss_vs_reported": None}
