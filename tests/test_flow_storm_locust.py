"""`locust -f scenarios/flow_storm.py`: a burst cut by the test's stop is counted, and Locust exits.

The free-running path (FlowStormUser, workers/flow_user.py): two users take turns on one
worker's namespace pair, the run time ends while the first burst is still sending, the
generator is stopped and its exact counts recorded, and the process exits (it used to hang
there: the cut burst recorded its counts under the generator's lock). The kernel's count of the
window's packets and bytes equals the bursts' exactly.
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest
from helpers import BIN, ROOT, load_report, only_run_dir
from test_flow_storm import root


@pytest.mark.slow
@root
def test_locust_f_flow_storm_exits_and_counts_the_cut_burst(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    cmd = [
        str(BIN / "locust"), "-f", "scenarios/flow_storm.py", "--headless", "-u", "2", "-r", "2", "-t", "4s",
        "--ss-flows", "20000", "--ss-rate-pps", "5000", "--ss-packets-per-flow", "2", "--ss-agent", "none",
        "--ss-out", str(out),
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)  # a hang fails here
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "ok", rep["flags"]
    (it,) = [it for pt in rep["points"] for it in pt["iterations"]]
    (n,) = it["per_node"]
    row = it["extra"]["flows"][n["node"]]
    # 40000 packets at 5000/s take 8 s: the one burst that ran was cut by the 4 s run time
    assert row["bursts"] == 1 and 0 < row["generated"] < 40000
    assert n["generated"] == n["kernel"] == row["kernel"]["packets"] == row["generated"]
    assert row["kernel"]["bytes"] == row["bytes"] == 128 * row["generated"]
    assert row["problems"] == [] and it["flags"] == []
