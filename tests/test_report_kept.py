"""A kind's report section that cannot be built or stored costs that section, not the report.

A real `swarmscope run` of the exec storm (embedded probe, real BPF) whose kind's ``sections``
is replaced, in the run's own process, by one that raises or returns a value JSON cannot hold:
report.json and report.html are still written with every window, the status is "failed", the
exit code says so, and ``section_errors`` names what is missing and why.

    .venv/bin/python -m pytest tests/test_report_kept.py -v
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from helpers import ROOT, is_root, load_report, only_run_dir

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not is_root(), reason="needs root: the embedded probe loads BPF"),
    pytest.mark.timeout(180),
]

# The run's own process, with the kind's sections replaced before the CLI starts.
RUN = """
import sys
from gevent import monkey

monkey.patch_all()  # first, as the CLI does
from swarmscope.app import cli
from swarmscope.kinds import get_kind

how = sys.argv.pop(1)

def broken(self, cfg, results, run_dir):
    if not results:  # the checks' dry run of the report's shape, before the run
        return {}
    if how == "raises":
        raise TypeError("a kind's bug")
    return {"iterations_seen": len(results), "odd": float("nan")}

type(get_kind("exec_storm")).sections = broken
sys.exit(int(cli.main(sys.argv[1:]) or 0))
"""


@pytest.mark.parametrize("how", ["raises", "unstorable"])
def test_a_section_that_fails_leaves_the_report_and_says_what_is_missing(
    tmp_path: pathlib.Path, how: str
) -> None:
    out = tmp_path / "results"
    p = subprocess.run(
        [sys.executable, "-c", RUN, how, "run", "scenarios/exec_storm.yaml", "--set", "nodes=1",
         "--set", "iterations=2", "--set", "burst_s=0.3", "--set", "pause_s=0", "--out", str(out)],
        capture_output=True, text=True, timeout=150, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 1, p.stderr[-3000:]
    run_dir = only_run_dir(out)
    rep = load_report(run_dir)
    assert rep["status"] == "failed"
    iterations = rep["points"][0]["iterations"]
    assert [it["iteration"] for it in iterations] == [1, 2]
    assert all(it["generated"] == it["kernel"] for it in iterations), iterations
    assert (run_dir / "report.html").stat().st_size > 1000
    if how == "raises":
        assert rep["section_errors"] == [{"section": "*", "error": "TypeError: a kind's bug"}]
        assert "Traceback" in p.stderr and "TypeError: a kind's bug" in p.stderr
    else:  # the section that JSON cannot hold is named; nothing else of the kind's was lost
        (err,) = rep["section_errors"]
        assert err["section"] == "odd" and "not JSON-serialisable" in err["error"], err
        assert rep["iterations_seen"] == 2
