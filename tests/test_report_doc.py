"""docs/report-json.md stays true: its example is what build_report produces, every key is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from swarmscope.controller.model import IterationResult, NodeCount, PointInfo, RunInfo
from swarmscope.controller.report import build_report
from swarmscope.controller.store import ResultStore
from swarmscope.controller.summary import NUMBERS

DOC = Path(__file__).resolve().parent.parent / "docs" / "report-json.md"


def example_report(db: Path) -> dict:
    """The documented example: 1 point (2 nodes) x 2 iterations, a mismatch, a missing tracer."""
    with ResultStore(db) as s:
        run = RunInfo(
            "20261122-031500-ab12",
            "exec_storm",
            "exec",
            {"nodes": [2], "iterations": 2, "tracer.kind": "bpftrace"},
            1795403700000000000,
            "results/20261122-031500-ab12",
            "4bf92f3577b34da6a3ce929d0e0e4736",
        )
        s.save_run(run)
        s.save_point(run.run_id, PointInfo(0, {"nodes": 2}, 2))
        s.save_iteration(
            IterationResult(
                run.run_id,
                0,
                {"nodes": 2},
                0,
                "w-0-0",
                1795403701000000000,
                1795403703000000000,
                [
                    NodeCount("node-0", 4000, 4000, 3990, 10, [], 3998.2),
                    NodeCount("node-1", 4100, 4100, 4100, 0),
                ],
                tracer_lost=10,
            )
        )
        s.save_iteration(
            IterationResult(
                run.run_id,
                0,
                {"nodes": 2},
                1,
                "w-0-1",
                1795403704000000000,
                1795403706000000000,
                [
                    NodeCount("node-0", 4050, 4050, 4050, 0),
                    NodeCount("node-1", 4080, 4081, None, None, ["tracer"]),
                ],
                tracer_lost=0,
                flags=["harness-mismatch"],
            )
        )
        s.add_section(run.run_id, "notes", {"tracer": "bpftrace 0.17"})
        s.finish_run(run.run_id, "ok", 1795403707500000000)
        return build_report(s, run.run_id)


def _doc_example() -> dict:
    m = re.search(r"```json\n(.*?)\n```", DOC.read_text(), re.S)
    assert m, "docs/report-json.md has no ```json example"
    return json.loads(m.group(1))


def test_doc_example_is_real(tmp_path: Path) -> None:
    assert _doc_example() == example_report(tmp_path / "s.sqlite")


def _keys(obj: object, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(obj, list):
        for v in obj:
            out |= _keys(v, prefix.rstrip(".") + "[].")
    return out


def test_every_field_is_documented(tmp_path: Path) -> None:
    text = DOC.read_text()
    keys = {
        re.sub(r"summary\.(" + "|".join(NUMBERS) + ")", "summary.<number>", k)
        for k in _keys(example_report(tmp_path / "s.sqlite"))
    }
    undocumented = [
        k
        for k in sorted(keys - {"notes"})  # "notes" is the example's scenario section
        # config, params, sections, extra and where entries are free-form maps, documented as such
        if not re.match(r"(config|notes|sections|points\[\]\.params|.*\.extra|.*where\[\])\.", k)
        and f"`{k}`" not in text
    ]
    assert not undocumented, f"document these in docs/report-json.md: {undocumented}"
