"""locust -f scenarios/neighbor_writes.py: users write real put-batches, merged exactly on the master."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from helpers import free_port, only_run_dir
from neighbors_util import needs_root

from swarmscope.workers.http_stats import latency_ms, new_histogram

ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = str(ROOT / "scenarios" / "neighbor_writes.py")
pytestmark = [needs_root]


@pytest.mark.slow
def test_master_and_two_workers_merge_exactly(tmp_path: Path) -> None:
    port = free_port()
    master = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--master", "--headless",
              "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "2",
              "-u", "4", "-r", "4", "-t", "8s", "--stop-timeout", "5", "--csv", str(tmp_path / "l"),
              "--only-summary", "--ss-out", str(tmp_path / "out"), "--ss-batch-size", "500",
              "--ss-neighbors-per-user", "5000", "--ss-grpc-bind", "127.0.0.1:0"]  # fmt: skip
    worker = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker", "--master-host", "127.0.0.1",
              "--master-port", str(port)]  # fmt: skip
    m = subprocess.Popen(master, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ws = [subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        _out, err = m.communicate(timeout=120)
    finally:
        for w in ws:
            w.wait(30)
    assert m.returncode == 0, err[-3000:]
    rows = {row["Name"]: row for row in csv.DictReader(open(tmp_path / "l_stats.csv"))}
    assert (int(rows["PutBatch"]["Request Count"]), int(rows["PutBatch"]["Failure Count"])) == (40, 0)
    rep = json.loads((only_run_dir(tmp_path / "out") / "report.json").read_text())
    (free,) = rep["neighbors"]["locust"]
    # 4 users x 5000 entries, two workers each with its own control plane
    assert (free["entries_written"], free["control_plane_entries"], free["batches"]) == (20_000, 20_000, 40)
    workers = rep["points"][0]["iterations"][0]["extra"]["workers"]
    assert sorted(workers) == ["w1-n1", "w2-n1"]
    assert all(w["generated"] == 10_000 and w["batches"] == 20 for w in workers.values())
    one = new_histogram()  # one histogram of every batch's latency, from both workers
    for w in workers.values():
        for us in w["raw_us"]:
            one.record_value(us)
    merged = HdrHistogram.decode(free["hist"].encode("ascii"))
    assert merged.get_total_count() == one.get_total_count() == 40
    assert free["batch_latency_ms"] == latency_ms(one)
    assert latency_ms(merged) == latency_ms(one)


def _exact(out: Path, users: int, per_user: int, batch: int) -> None:
    """Every user wrote its neighbors once, in batches, and the control plane holds each."""
    rep = json.loads((only_run_dir(out) / "report.json").read_text())
    assert rep["status"] == "ok", rep["flags"]
    (free,) = rep["neighbors"]["locust"]
    n = users * per_user
    assert (free["entries_written"], free["control_plane_entries"], free["batches"]) == (n, n, n // batch)
    assert HdrHistogram.decode(free["hist"].encode("ascii")).get_total_count() == n // batch


@pytest.mark.slow
def test_locust_f_headless(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "-u", "2", "-r", "2", "-t", "5s",
           "--stop-timeout", "5", "--only-summary", "--ss-out", str(tmp_path / "out"),
           "--ss-batch-size", "500", "--ss-neighbors-per-user", "2000",
           "--ss-grpc-bind", "127.0.0.1:0"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    _exact(tmp_path / "out", 2, 2000, 500)


@pytest.mark.slow
def test_web_ui(tmp_path: Path) -> None:
    """Started and stopped through Locust's HTTP API, as the UI's buttons do; quit by SIGTERM."""
    from test_webui import Locust, get

    out = tmp_path / "out"
    opts = ["--ss-batch-size", "500", "--ss-neighbors-per-user", "2000", "--ss-grpc-bind", "127.0.0.1:0"]
    with Locust(LOCUSTFILE, out, *opts) as loc:
        assert get(loc.base + "/swarm", {"user_count": 2, "spawn_rate": 2})["success"] is True
        loc.wait_requests(8)  # 2 users x 2000 neighbors in batches of 500
        get(loc.base + "/stop", {})
        loc.wait_windows(1)
        loc.quit_report(out)
    _exact(out, 2, 2000, 500)
