"""The swarmscope tab's rows per kind, from reconciled windows (no Locust, no browser): the
numbers a reader sees, formatted as the tab shows them."""

from __future__ import annotations

from types import SimpleNamespace

from swarmscope.app.webui import live
from swarmscope.controller.model import IterationResult, NodeCount, WindowInfo
from swarmscope.controller.tables import three_number_rows
from swarmscope.kinds import get_kind


def _result(per_node: list[NodeCount], extra: dict, iteration: int = 1) -> IterationResult:
    w = WindowInfo("r", f"w{iteration}", 0, iteration, [n.node for n in per_node])
    return IterationResult("r", 0, {}, iteration, w.window_id, 0, 0, per_node, extra=extra)


def test_exec_rows() -> None:
    r = _result([NodeCount("n1", 4000, 4000, 3990), NodeCount("n2", 10, 11, None)], {})
    assert three_number_rows([r]) == [
        {"window": "0.1", "node": "n1", "generated": "4,000", "kernel": "4,000", "reported": "3,990",
         "loss": "0.2500", "harness": "yes"},
        {"window": "0.1", "node": "n2", "generated": "10", "kernel": "11", "reported": "-",
         "loss": "-", "harness": "MISMATCH"},
    ]  # fmt: skip


def test_ingress_rows() -> None:
    steps = [
        {"step": 0, "users": 10, "requests": 500, "rps": 50.0, "failures": 0,
         "latency_ms": {"p50": 1.234, "p90": 2.0, "p99": 9.999},
         "proxy": {"cpu_pct": 12.345, "rss_kib_max": 18468.0}},
        {"step": 1, "rate": 200, "requests": 900, "latency_ms": {"p50": 3.0, "p90": 4.0, "p99": 5.0}},
    ]  # fmt: skip
    # The window's proxy figures are never a step's: a step without its own shows it missing.
    r = _result(
        [NodeCount("n1", 1400, None)], {"steps": steps, "proxy": {"cpu_pct": 7.0, "rss_kib_max": 100}}
    )
    assert get_kind("ingress_flood").live_rows([r]) == [
        {"step": "0", "load": "users=10", "requests": "500", "rps": "50.0", "failures": "0", "p50": "1.23",
         "p90": "2.00", "p99": "10.00", "cpu": "12.3", "rss": "18,468"},
        {"step": "1", "load": "rate=200", "requests": "900", "rps": "-", "failures": "-", "p50": "3.00",
         "p90": "4.00", "p99": "5.00", "cpu": "-", "rss": "-"},
    ]  # fmt: skip


def test_neighbor_rows_and_open_window() -> None:
    pt = {"neighbors": 1000000, "mode": "list_program", "per_neighbor_us": 0.81234,
          "arion_per_neighbor_us": 1.0, "p99_us": 1234.56, "generated": 1000000}  # fmt: skip
    free = {"entries_written": 5000, "batch_latency_ms": {"p99": 3.25}}
    rows = get_kind("neighbor_writes").live_rows(
        [_result([], {"neighbors": pt}), _result([], {"locust": free}, 2)]
    )
    assert rows == [
        {"neighbors": "1,000,000", "mode": "list_program", "perneighbor": "0.812", "arion": "1.000",
         "p99": "1,234.6", "entries": "1,000,000", "batchp99": "-"},
        {"neighbors": "-", "mode": "locust -f", "perneighbor": "-", "arion": "-", "p99": "-",
         "entries": "5,000", "batchp99": "3.25"},
    ]  # fmt: skip
    proc = SimpleNamespace(kind=get_kind("neighbor_writes"), controller=None, run=None)
    data = live(proc, WindowInfo("r", "w9", 0, 3, []))
    assert data["open_window"] == "w9"
    rest = ("mode", "perneighbor", "arion", "p99", "entries", "batchp99")
    assert data["rows"] == [{"neighbors": "0.3 open", **dict.fromkeys(rest, "…")}]
