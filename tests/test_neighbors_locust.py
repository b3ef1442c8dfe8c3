"""The Locust locustfile drives real writers: every acknowledged batch is a Locust request."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from neighbors_util import control_plane

from swarmscope.v1 import neighbors_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def test_locust_writers_counted_as_requests(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, addr, stub):
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / "neighbor_writes.py"),
               "--headless", "-u", "3", "-r", "3", "-t", "6s", "--stop-timeout", "5", "--host", addr,
               "--neighbor-batch", "500", "--neighbors-per-user", "5000", "--csv", str(tmp_path / "l"),
               "--only-summary", "--exit-code-on-error", "1"]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr[-2000:]
        rows = {row["Name"]: row for row in csv.DictReader(open(tmp_path / "l_stats.csv"))}
        put = rows["PutBatch"]
        assert int(put["Failure Count"]) == 0
        assert int(put["Request Count"]) == 30  # 3 users x 5000 / 500
        st = stub.Status(pb.StatusRequest())
        assert (st.entries, st.revision) == (15_000, 30)
