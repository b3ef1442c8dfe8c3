"""Simulated workers (bench/simworkers.py) against the real master, and the fan-in bench's smoke form.

The master is ``swarmscope run --set mode=distributed`` with a worker token: what the simulated
workers send must be taken exactly as a real worker's (CURVE admits them, their nodes are
announced, every window merges their exact counts, and a hung one is named missing with its
nodes kept), or the bench would measure something else than the real master.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import time

import pytest

BENCH_DIR = pathlib.Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH_DIR))

LINE = re.compile(
    r"^workers=(\d+) windows=(\d+) results=(\d+) lost=(-?\d+) close_p50_ms=(\d+) close_p99_ms=(\d+) "
    r"master_cpu_s_per_window=(\d+\.\d+) master_rss_mib=(\d+)"
)


@pytest.mark.slow
def test_simulated_workers_are_merged_exactly_by_the_real_master() -> None:
    from simworkers import COUNT
    from workers_fanin import run_one

    f = run_one(4, windows=3, burst_s=0.3, stall=0.25, probe_hosts=2, per_process=2)
    rep = f["report"]
    assert rep["status"] == "ok"
    its = rep["points"][0]["iterations"]
    assert len(its) == 3
    (hung,) = f["stalled"]  # one of four hangs at its second run message
    hung_nodes = set(f["stalled_nodes"])
    assert len(hung_nodes) == 1
    # Window 1: every node announced, every count merged exactly, read by its host's probe.
    assert sorted(n["node"] for n in its[0]["per_node"]) == ["w1-n1", "w2-n1", "w3-n1", "w4-n1"]
    for n in its[0]["per_node"]:
        assert (n["generated"], n["kernel"], n["missing"]) == (COUNT, COUNT, []), n
    # Windows 2, 3: the hung worker is named, its node kept (missing "worker", still read by
    # its probe), the three others merged exactly.
    for it in its[1:]:
        assert it["extra"]["silent_workers"] == [hung]
        by_node = {n["node"]: n for n in it["per_node"]}
        assert set(by_node) == {"w1-n1", "w2-n1", "w3-n1", "w4-n1"}
        for name, n in by_node.items():
            if name in hung_nodes:
                assert n["missing"] == ["worker"] and n["kernel"] == COUNT, n
            else:
                assert (n["generated"], n["kernel"], n["missing"]) == (COUNT, COUNT, []), n
    assert (f["results"], f["lost"]) == (3 + 3 + 3 + 1, 0)
    # Their Locust messages were taken as a worker's: no complaint about an unknown worker.
    assert "unknown worker" not in f["master_log"] and "Traceback" not in f["master_log"]


@pytest.mark.slow
def test_a_simulated_worker_without_the_token_is_refused() -> None:
    """CURVE is really on: a simulated worker with another token never gets Locust's ack."""
    import pathlib as pl
    import tempfile

    from simworkers import SimWorkers
    from workers_fanin import Master

    from swarmscope.core import auth

    token = auth.new_token()
    with tempfile.TemporaryDirectory() as d:
        master = Master(pl.Path(d), 1, 1, 0.1, 1, token)
        address = f"127.0.0.1:{master.locust_port}"
        time.sleep(1.0)
        stranger = SimWorkers.spawn(address, auth.new_token(), master.master_public, 1)
        member = None
        try:
            with pytest.raises(TimeoutError, match="0/1 simulated workers acked"):
                stranger.wait_ready(timeout_s=6)
            member = SimWorkers.spawn(
                address, token, master.master_public, 1
            )  # the same master takes the right key
            member.wait_ready(timeout_s=20)
        finally:
            for w in (stranger, member):
                if w is not None:
                    w.stop()
            master.proc.terminate()
            master.proc.wait(30)


@pytest.mark.slow
def test_bench_smallest_form_parses_and_loses_nothing() -> None:
    out = subprocess.run(
        [sys.executable, BENCH_DIR / "workers_fanin.py", "--workers", "5", "--windows", "1"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("workers=")]
    m = LINE.match(line)
    assert m, line
    workers, windows, results, lost = (int(m.group(i)) for i in range(1, 5))
    assert (workers, windows, results, lost) == (5, 1, 5, 0)
    assert int(m.group(8)) > 0  # the master's RSS was sampled


def test_run_message_parts_give_each_worker_its_nodes_at_their_positions() -> None:
    """The master sends each worker only its part; the driver still sees the window's positions
    and node count (ingress_flood shares its users by them)."""
    from swarmscope.core import messages as M

    names = ["w1-n1", "w2-n1", "w1-n2", "w3-n1"]
    owner = {"w1-n1": "a", "w1-n2": "a", "w2-n1": "b", "w3-n1": "c", "w9-n1": "z"}
    parts = M.split_run(names, owner)
    assert parts == {
        "a": {"nodes": ["w1-n1", "w1-n2"], "positions": [0, 2], "node_count": 4},
        "b": {"nodes": ["w2-n1"], "positions": [1], "node_count": 4},
        "c": {"nodes": ["w3-n1"], "positions": [3], "node_count": 4},
    }
    view = M.window_nodes({"window_id": "x", **parts["a"]})
    assert view == ["w1-n1", "", "w1-n2", ""]
    assert (view.index("w1-n2"), len(view)) == (2, 4)
    assert M.window_nodes({"nodes": names}) == names  # embedded: the whole list, as before
