"""Faults in a run (issue 18, findings 6 and 7, and a slice of the fault matrix).

A part of a real `swarmscope run` is killed mid-run (bench/fault_harness.py): what was stored
before the kill is kept, the run is marked, and after the next run's start-of-run sweep
nothing it made is left on the machine. bench/faults.py runs the whole matrix; here a few
cells keep it fixed: the controller under SIGTERM for every kind (each owns different
things: cgroups; a netns, a veth with XDP and the neighbor server; a netns, veth and nginx),
the controller under SIGKILL, a probe and a worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, run_cli

sys.path.insert(0, str(ROOT / "bench"))
from fault_harness import CASES, run_fault  # bench/: shared with bench/faults.py

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,sig",
    [
        ("controller", signal.SIGTERM),
        ("controller", signal.SIGKILL),
        ("controller-neighbor", signal.SIGTERM),
        ("controller-ingress", signal.SIGTERM),
        ("probe", signal.SIGKILL),
        ("worker", signal.SIGKILL),
    ],
)
def test_fault_cell(name: str, sig: signal.Signals, tmp_path: pathlib.Path) -> None:
    r = run_fault(CASES[name], sig, tmp_path, after_windows=1, jitter_s=0.5, rng=random.Random(18))
    assert r.killed, r.problems
    assert r.problems == [] and r.leftovers == [], (r.problems, r.leftovers)
    assert r.acked >= 1  # stored when the signal went out (after_windows=1, plus up to 0.5 s)
    if CASES[name].target == "controller":  # nothing is stored after the kill, nothing is lost
        assert (r.status, r.stored) == ("interrupted", r.acked)
    else:  # the run went on without the part: all 12 windows stored, the part's nodes missing
        assert (r.status, r.stored) == ("ok", 12)


@pytest.mark.slow
def test_sigkill_at_point_k_keeps_every_finished_point(tmp_path: pathlib.Path) -> None:
    """Finding 7: a kill after k stored windows keeps all k; the next start marks the run
    interrupted; `swarmscope report` reads it back with those windows."""
    out = tmp_path / "results"
    p = subprocess.Popen(
        [sys.executable, "-m", "swarmscope", "run", "scenarios/exec_storm.yaml",
         "--set", "nodes=1,2,3", "--set", "iterations=2", "--set", "burst_s=0.3", "--set", "pause_s=0.2",
         "--out", str(out)],
        cwd=pathlib.Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    import sqlite3

    db = out / "swarmscope.sqlite"
    deadline = time.monotonic() + 120
    k = 0
    while k < 3:
        assert time.monotonic() < deadline and p.poll() is None, "the run ended before 3 windows"
        if db.exists():
            with contextlib.suppress(sqlite3.Error), sqlite3.connect(db, timeout=5) as c:
                k = c.execute("SELECT COUNT(*) FROM iterations").fetchone()[0]  # once made
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    with sqlite3.connect(db, timeout=5) as c:
        stored = c.execute("SELECT point, iteration FROM iterations ORDER BY point, iteration").fetchall()
    assert len(stored) >= k
    assert stored[:3] == [(0, 1), (0, 2), (1, 1)]  # point 0 finished, point 1 under way
    from swarmscope.app.lifecycle import sweep_stale

    swept = sweep_stale()
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    assert run_dir.name in swept["run"]  # this run (another job's stale run may be swept too)
    rep = run_cli("report", str(run_dir))
    assert rep.returncode == 0, rep.stderr[-2000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert sum(len(pt["iterations"]) for pt in report["points"]) == len(stored)


def test_sweep_removes_what_a_dead_owner_left(tmp_path: pathlib.Path) -> None:
    """Claims of a SIGKILLed process (a netns with a process in it, a veth, a `running` run)
    are swept; a live owner's are not."""
    from swarmscope.app.lifecycle import sweep_stale
    from swarmscope.controller.model import RunInfo
    from swarmscope.controller.store import ResultStore
    from swarmscope.core.sys import owners

    tag = os.urandom(3).hex()
    ns, link, run_id, db = f"ss-lc-{tag}", f"sslc{tag}h", f"lc-{tag}", str(tmp_path / "s.sqlite")
    with ResultStore(db) as store:
        store.save_run(RunInfo(run_id, "exec_storm", "exec", {}, time.time_ns(), str(tmp_path)))
    child = f"""
import subprocess, time
from swarmscope.core.sys import owners
owners.claim("netns", "{ns}"); owners.claim("link", "{link}"); owners.claim("run", "{run_id}", db="{db}")
subprocess.run(["ip", "netns", "add", "{ns}"], check=True)
subprocess.run(["ip", "link", "add", "{link}", "type", "veth", "peer", "name", "{link[:-1]}p"], check=True)
subprocess.Popen(["ip", "netns", "exec", "{ns}", "sleep", "600"], start_new_session=True)
print("READY", flush=True); time.sleep(600)
"""
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        assert ns not in sweep_stale().get("netns", [])  # owner alive: untouched
        p.kill()
        p.wait()
        swept = sweep_stale()
        assert ns in swept["netns"] and link in swept["link"] and run_id in swept["run"]
        assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert subprocess.run(["ip", "link", "show", link], capture_output=True).returncode != 0
        with ResultStore(db) as store:
            assert store.load_run(run_id).status == "interrupted"
        assert not any(n == ns for n, _ in owners.claims("netns"))
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", link], capture_output=True)


def test_status_rule_no_kernel_count_anywhere_is_not_ok() -> None:
    """A run whose every node lacks its kernel count because a source was missing is not ok;
    a kind with no kernel column (ingress: kernel None, nothing missing) is."""
    from swarmscope.app.process import kernel_missing_everywhere
    from swarmscope.controller.model import IterationResult, NodeCount

    def it(*nodes: NodeCount) -> IterationResult:
        return IterationResult("r", 0, {}, 1, "w", 0, 1, list(nodes))

    gone = [NodeCount("n1", 5, None, missing=["probe"]), NodeCount("n2", 6, None, missing=["probe"])]
    assert kernel_missing_everywhere([it(*gone), it(*gone)])
    assert not kernel_missing_everywhere([it(*gone), it(NodeCount("n1", 5, 5), gone[1])])
    assert not kernel_missing_everywhere([it(NodeCount("n1", 5, None))])  # no kernel column
    assert not kernel_missing_everywhere([])


def test_final_status_an_ok_run_with_no_window_is_failed() -> None:
    """`locust -f … -t 3s` whose probes came late ended with no window and said "ok" (seen on
    the real node): an empty run is failed; a measured one stays ok; other statuses stand."""
    from swarmscope.app.process import final_status
    from swarmscope.controller.model import IterationResult, NodeCount

    measured = [IterationResult("r", 0, {}, 1, "w", 0, 1, [NodeCount("n1", 5, 5)])]
    gone = [IterationResult("r", 0, {}, 1, "w", 0, 1, [NodeCount("n1", 5, None, missing=["probe"])])]
    assert final_status("ok", []) == "failed"
    assert final_status("ok", measured) == "ok"
    assert final_status("ok", gone) == "failed"
    assert final_status("interrupted", []) == "interrupted"
