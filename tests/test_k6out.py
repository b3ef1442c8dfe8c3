"""swarmscope's k6 output (workers/k6out, compiled into k6 by ``tools/build_k6.sh --swarmscope``):
one line per request, the same samples k6's own CSV output has, and what workers/k6.py folds.

Real k6 (the binary the k6 path runs) against the real local nginx in our own netns.
"""

from __future__ import annotations

import csv
import json
import os
import pathlib
import subprocess
from collections import Counter
from collections.abc import Iterator

import prebuilt
import pytest

from swarmscope.core.errors import LoadGenError
from swarmscope.targets.ingress.local import LocalIngress
from swarmscope.workers.http_stats import StepRecorder
from swarmscope.workers.k6 import POINTS_HEADER, SCRIPT, fold_points, k6_binary, run_k6

needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


@pytest.fixture(scope="module")
def k6() -> str:
    return prebuilt.found(lambda: k6_binary(build=False))


@pytest.fixture(scope="module")
def target() -> Iterator[LocalIngress]:
    with LocalIngress() as t:
        yield t


def _log_lines(t: LocalIngress) -> int:
    with open(t.dir / "access.log", "rb") as fh:
        return sum(1 for line in fh if line.strip())


@pytest.mark.slow
@needs_root
def test_one_line_per_request_equal_to_k6s_own_csv(
    tmp_path: pathlib.Path, k6: str, target: LocalIngress
) -> None:
    """One k6 run writing both outputs: our file has exactly one line per request nginx logged,
    and its lines are k6's http_req_duration CSV rows (end µs, duration, step, status), no more."""
    ours, theirs = tmp_path / "points.txt", tmp_path / "points.csv"
    before = _log_lines(target)
    p = subprocess.run(
        [k6, "run", "--quiet", "--no-usage-report", "-e", f"TARGET={target.url}", "-e", "STEPS=2,3",
         "-e", "STEP_DURATION=1", "--system-tags", "scenario,status,error_code",
         "--summary-export", str(tmp_path / "summary.json"),
         "--out", f"swarmscope={ours}", "--out", f"csv={theirs}", str(SCRIPT)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "K6_CSV_TIME_FORMAT": "unix_micro"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    logged = _log_lines(target) - before
    lines = ours.read_text().splitlines()
    assert lines[0] == POINTS_HEADER
    rows = [ln.split(",") for ln in lines[1:]]
    assert len(rows) == logged > 100  # one line per request, every request
    assert {r[0] for r in rows} == {"r"} and {len(r) for r in rows} == {6}
    assert {(r[4], r[5]) for r in rows} == {("200", "")}
    with open(theirs, encoding="utf-8", newline="") as fh:
        csv_rows = [r for r in csv.DictReader(fh) if r["metric_name"] == "http_req_duration"]
    # k6's CSV writes the duration in ms with 6 decimals (ns); ours writes ns.
    want = Counter((r["timestamp"], round(float(r["metric_value"]) * 1e6), r["scenario"]) for r in csv_rows)
    assert Counter((r[1], int(r[2]), r[3]) for r in rows) == want
    assert {k[2] for k in want} == {"step0", "step1"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["http_reqs"]["count"] == logged

    # What the worker reads: fold_points over this file gives each step's lines, exactly.
    rec = StepRecorder(1.0, 0.0, keep_timeline=True, n_steps=2)
    assert fold_points(ours, rec) == 0
    per_step = Counter(r[3] for r in rows)
    assert {s: st.requests for s, st in rec.steps.items()} == {0: per_step["step0"], 1: per_step["step1"]}
    assert all(st.requests > 0 and not st.failures for st in rec.steps.values())
    assert sorted(t for t, _ok in rec.timeline) == sorted(int(r[1]) / 1e6 for r in rows)


@pytest.mark.slow
@needs_root
def test_dropped_iterations_are_counted(tmp_path: pathlib.Path, k6: str, target: LocalIngress) -> None:
    """Open model at 20,000/s with one VU: k6 drops iterations, and the worker's count of them
    (the file's ``d`` lines) equals k6's own summary; the requests still equal nginx's lines."""
    before = _log_lines(target)
    res = run_k6(target.url, [20000], 1.0, "open", tmp_path, max_vus=1, keep_points=True)
    (step,) = res.recorder.steps.values()
    assert res.dropped_iterations == res.summary_export["metrics"]["dropped_iterations"]["count"] > 0
    assert step.requests == _log_lines(target) - before > 0 and not step.failures
    kinds = Counter(ln.split(",", 1)[0] for ln in (tmp_path / "k6-points.txt").read_text().splitlines()[1:])
    assert kinds["r"] == step.requests and kinds["d"] > 0 and set(kinds) == {"r", "d"}


def test_fold_refuses_a_file_that_is_not_ours(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "k6-points.csv"
    f.write_text("metric_name,timestamp,metric_value\nhttp_req_duration,1,2.5\n")
    with pytest.raises(LoadGenError, match="not swarmscope's k6 output"):
        fold_points(f, StepRecorder(1.0, 0.0))


def test_fold_reads_requests_errors_and_drops(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "k6-points.txt"
    f.write_text(
        POINTS_HEADER + "\n"
        "r,1000000500000,250000000,step0,200,\n"  # ended at 1,000,000.5 s after 250 ms
        "r,1000001000000,1000,step1,0,1211\n"  # a refused connection: no status, k6 error 1211
        "d,1000001000000,3,step1,,\n"
    )
    rec = StepRecorder(1.0, 999_999.0, keep_timeline=True, n_steps=2)
    assert fold_points(f, rec) == 3
    assert rec.steps[0].requests == 1 and not rec.steps[0].failures
    assert rec.steps[1].requests == 1 and dict(rec.steps[1].failures) == {"k6 error 1211": 1}
    assert rec.timeline == [(1_000_000.5, True), (1_000_001.0, False)]
