"""bench/lossless_ceiling.py's search, against a stand-in tracer whose ceiling is known: the
doubling and bisection land within the precision, a generator that falls short ends the search
as "above", and a lossy run is the tracer's limit even when the generator fell short."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
from typing import Any

import pytest

PATH = pathlib.Path(__file__).resolve().parent.parent / "bench" / "lossless_ceiling.py"
spec = importlib.util.spec_from_file_location("lossless_ceiling", PATH)
assert spec and spec.loader
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def fake(ceiling: float, generator_max: float) -> Any:
    def trial(tracer: str, nodes: int, rate: float, windows: int, burst: float) -> dict[str, Any]:
        made = int(min(rate, generator_max) * burst * nodes)
        kept = made if rate <= ceiling else made // 2
        w = {"kernel": made, "reported": kept, "generated": made, "loss": 1 - kept / made}
        return {"rate": rate, "status": "ok", "windows": [w] * windows, "lossless": kept == made,
                "reached": made >= bench.REACHED * rate * burst * nodes}  # fmt: skip

    return trial


def args(**kv: Any) -> argparse.Namespace:
    base = {"tracer": "t", "nodes": 2, "windows": 3, "burst": 1.0, "start": 100.0, "max_rate": 20000.0,
            "precision": 0.1}  # fmt: skip
    return argparse.Namespace(**(base | kv))


@pytest.mark.parametrize("ceiling", [150.0, 1000.0, 5000.0])
def test_search_finds_the_ceiling(monkeypatch: pytest.MonkeyPatch, ceiling: float) -> None:
    monkeypatch.setattr(bench, "trial", fake(ceiling, 1e9))
    log: list[dict[str, Any]] = []
    got = bench.search(args(), log)
    assert got["bound"] == "loss" and got["ceiling"] <= ceiling < got["at"]
    assert got["at"] / got["ceiling"] <= 1.1
    assert all(t["lossless"] == (t["rate"] <= ceiling) for t in log)


def test_a_short_generator_gives_a_lower_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench, "trial", fake(1e9, 700.0))  # the machine makes 700/s per node at most
    got = bench.search(args(), [])
    assert (got["bound"], got["ceiling"], got["above"]) == ("generator", 700.0, True)
    monkeypatch.setattr(bench, "trial", fake(600.0, 700.0))  # lossy above 600 while short: tracer's
    got = bench.search(args(), [])
    assert got["bound"] == "loss" and 600 / 1.1 <= got["ceiling"] <= 600 < got["at"]
