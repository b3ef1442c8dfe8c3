"""What a run prints: a progress line per window for every kind, and the one-screen summary of
the ingress steps and the neighbor sweep (swarmscope/app/console.py, each kind's console_cells /
console_summary). Unit tests on reconciled
windows, and a real ingress flood whose printed figures must equal its report.json."""

from __future__ import annotations

import io
import json
import pathlib
import re

import pytest
from helpers import only_run_dir, run_cli

from swarmscope.app.console import IterationPrinter, kind_summary
from swarmscope.controller.model import IterationResult, NodeCount, WindowInfo
from swarmscope.controller.tables import text_table
from swarmscope.kinds import get_kind

STEP = {"step": 0, "users": 10, "requests": 500, "rps": 98.04, "failures": 2,
        "latency_ms": {"p50": 1.234, "p90": 2.0, "p99": 9.999},
        "proxy": {"cpu_pct": 12.345, "rss_kib_max": 18468.0}}  # fmt: skip
POINT = {"neighbors": 1000, "mode": "list_program", "per_neighbor_us": 1.226, "arion_per_neighbor_us": 9.5,
         "p99_us": 1226.3, "generated": 1000}  # fmt: skip


def _result(params: dict, per_node: list[NodeCount], extra: dict, iteration: int = 1) -> IterationResult:
    w = WindowInfo("r", f"w{iteration}", 0, iteration, [n.node for n in per_node])
    return IterationResult("r", 0, params, iteration, w.window_id, 0, 0, per_node, extra=extra)


def test_progress_lines_per_kind() -> None:
    out = io.StringIO()
    p = IterationPrinter(get_kind("exec_storm"), total=4, out=out)
    r = _result({"nodes": 2}, [NodeCount("n1", 40, 40, 39), NodeCount("n2", 10, 11, None)], {})
    assert p.line(r, elapsed_s=2.0) == (
        "[nodes=2 iter 1] 1/4 eta 6s | n1: gen 40 kern 40 rep 39 | n2: gen 10 kern 11 rep - MISMATCH"
    )
    p = IterationPrinter(get_kind("ingress_flood"), total=2, out=out)
    r = _result({"users": 10}, [NodeCount("n1", 500, None)], {"steps": [STEP]})
    assert p.line(r, elapsed_s=30.4) == (
        "[users=10 iter 1] 1/2 eta 30s | Requests 500, Req/s 98.0, Failures 2, p50 ms 1.23, p90 ms 2.00, "
        "p99 ms 10.00, "
        "Proxy CPU % 12.3, Proxy RSS KiB 18,468"
    )
    p = IterationPrinter(get_kind("neighbor_writes"), total=0, out=out)  # a free run: no plan, no eta
    r = _result({"neighbors": 1000, "mode": "list_program"}, [NodeCount("n1", 1000, 1000, 1000)],
                {"neighbors": POINT})  # fmt: skip
    p(result=r)
    assert out.getvalue() == (
        "[neighbors=1000 mode=list_program iter 1] | µs / neighbor 1.226, Arion µs / neighbor 9.500, "
        "p99 µs 1,226.3, Entries written 1,000, Batch p99 ms -\n"
    )


def test_kind_summary_from_report_sections() -> None:
    ingress = {"scenario": "ingress_flood", "sections": {"steps": [STEP, {**STEP, "step": 1, "users": 20}]}}
    assert kind_summary(ingress) == (
        "\ningress steps\n"
        "  Step  Load      Requests  Req/s  Failures  p50 ms  p90 ms  p99 ms  Proxy CPU %  Proxy RSS KiB\n"
        "     0  users=10       500   98.0         2    1.23    2.00   10.00         12.3         18,468\n"
        "     1  users=20       500   98.0         2    1.23    2.00   10.00         12.3         18,468"
    )
    nb = {"scenario": "neighbor_writes", "sections": {"neighbors": {"points": [POINT]}}}
    assert kind_summary(nb) == (
        "\nneighbor sweep\n"
        "  Neighbors  Mode          µs / neighbor  Arion µs / neighbor   p99 µs  Entries written"
        "  Batch p99 ms\n"
        "      1,000  list_program          1.226                9.500  1,226.3            1,000"
        "             -"
    )
    assert kind_summary({"scenario": "exec_storm", "sections": {}}) is None
    assert text_table([("a", "A")], []) == "  A"


@pytest.mark.slow
@pytest.mark.root
def test_ingress_run_prints_progress_and_summary(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    p = run_cli("run", "scenarios/ingress_flood.yaml", "--set", "steps=5,10", "--set", "step_duration=1",
                "--set", "network_baseline_s=0", "--out", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    steps = json.loads((only_run_dir(out) / "report.json").read_text())["sections"]["steps"]
    lines = re.findall(
        r"^\[users=(\d+) iter 1\] (\d)/2 eta \d+s \| Requests ([\d,]+), Req/s ([\d.,]+), Failures ([\d,]+), ",
        p.stderr,
        re.M,
    )
    assert lines == [
        (str(s["users"]), str(i + 1), f"{s['requests']:,}", f"{s['rps']:,.1f}", f"{s['failures']:,}")
        for i, s in enumerate(steps)
    ]
    summary = p.stdout.split("\ningress steps\n")[1].splitlines()
    assert summary[0].split() == ["Step", "Load", "Requests", "Req/s", "Failures", "p50", "ms", "p90", "ms",
                                  "p99", "ms", "Proxy",
                                  "CPU", "%", "Proxy", "RSS", "KiB"]  # fmt: skip
    for s, row in zip(steps, summary[1:], strict=True):
        assert row.split()[:8] == [str(s["step"]), f"users={s['users']}", f"{s['requests']:,}",
                                   f"{s['rps']:,.1f}", f"{s['failures']:,}",
                                   f"{s['latency_ms']['p50']:.2f}", f"{s['latency_ms']['p90']:.2f}",
                                   f"{s['latency_ms']['p99']:.2f}"]  # fmt: skip
