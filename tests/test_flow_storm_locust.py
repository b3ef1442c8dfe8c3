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
from helpers import BIN, ROOT, load_report, locust_distributed, only_run_dir
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


OPTS = ["--ss-flows", "1000", "--ss-rate-pps", "5000", "--ss-packets-per-flow", "1", "--ss-agent", "none"]


def _exact(out: pathlib.Path, nodes: int) -> None:
    """Per node: the kernel counted every packet and byte the bursts sent."""
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "ok", rep["flags"]
    (it,) = [it for pt in rep["points"] for it in pt["iterations"]]
    assert len(it["per_node"]) == nodes and it["flags"] == []
    for n in it["per_node"]:
        row = it["extra"]["flows"][n["node"]]
        assert row["bursts"] >= 1 and n["generated"] > 0
        assert n["generated"] == n["kernel"] == row["kernel"]["packets"] == row["generated"]
        assert row["kernel"]["bytes"] == row["bytes"] == 128 * row["generated"]


@pytest.mark.slow
@root
def test_web_ui(tmp_path: pathlib.Path) -> None:
    """Started and stopped through Locust's HTTP API, as the UI's buttons do; quit by SIGTERM."""
    from test_webui import Locust, get

    out = tmp_path / "results"
    with Locust("scenarios/flow_storm.py", out, *OPTS) as loc:
        assert get(loc.base + "/swarm", {"user_count": 1, "spawn_rate": 1})["success"] is True
        loc.wait_requests(2)  # two bursts done
        get(loc.base + "/stop", {})
        loc.wait_windows(1)
        loc.quit_report(out)
    _exact(out, 1)


@pytest.mark.slow
@root
def test_master_and_two_workers(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    rc, err = locust_distributed("scenarios/flow_storm.py", 2, "-u", "2", "-r", "2", "-t", "8s",
                                 "--stop-timeout", "5", "--ss-out", str(out), *OPTS, timeout=120)  # fmt: skip
    assert rc == 0, err[-3000:]
    _exact(out, 2)  # one node per worker, each with its own namespace pair
