"""Ctrl-C (issue 18, finding 13; issue 28: every kind through every door).

`locust -f scenarios/exec_storm.py`, headless and web UI, single process and --master/--worker:
SIGINT while a window is in flight stops the test as Locust's users expect (long before -t),
the window closes in order (users and workers stop and send their counts, then the probe reads,
then teardown), its counts are exact (generated == kernel for every node), and the run's status
is ``interrupted``, in the store, the report and the console, never ``ok`` or ``running``.

The matrix (``test_ctrl_c_every_kind_every_door``): a terminal's Ctrl-C, SIGINT to the process
group, on `swarmscope run` (every kind), `locust -f scenarios/<kind>.py --headless` and
`swarmscope controller` + a hand-started worker and probe in its process group (every kind with a
locustfile), once a window is in flight: status ``interrupted``, the report written with what was measured, no
traceback, and nothing left (processes, network namespaces, cgroups, BPF programs, pins, owner
claims under /run/swarmscope/owners), audited without the next run's start-of-run sweep. SIGTERM
(a pod stop) goes to one process, not the group: `swarmscope run` embedded (every kind) and
distributed, and the controller (its worker exits with it; the probe gets its own SIGTERM after).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import sqlite3
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from helpers import (
    BIN,
    ROOT,
    Logged,
    free_port,
    load_report,
    locust_exec_storm,
    locust_master_worker,
    only_run_dir,
    requests_done,
)

sys.path.insert(0, str(ROOT / "bench"))
from fault_harness import OWNERS, _wait_tree_gone, _Watch, leftovers  # bench/: shared with bench/faults.py

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
]


def _wait_for(pred, what: str, timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _window_open(out: pathlib.Path) -> bool:
    db = out / "swarmscope.sqlite"
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return bool(c.execute("SELECT COUNT(*) FROM points").fetchone()[0])
    except sqlite3.Error:
        return False


def _bursts_in_stats(p: Logged) -> bool:
    """Locust's periodic stats table (headless) lists the EXEC bursts once one is done."""
    assert p.poll() is None, "locust exited"
    return any("EXEC" in text for text in p.output())


def _check_interrupted(out: pathlib.Path, stderr: str, windows: int = 1) -> None:
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "interrupted", stderr[-3000:]
    its = rep["points"][0]["iterations"]
    assert len(its) == windows, stderr[-3000:]
    for it in its:
        assert len(it["per_node"]) == 2
        for n in it["per_node"]:
            assert n["kernel"] is not None, f"the probe was torn down before it read: {n}"
            assert n["generated"] == n["kernel"] and n["generated"] > 0, n
    assert "status=interrupted" in stderr and "status=running" not in stderr and "status=ok" not in stderr
    assert "No such file or directory" not in stderr, "a burst outlived its cgroup"


def _sigint_and_wait(p: Logged, limit_s: float = 45.0, sig: int = signal.SIGINT) -> tuple[str, float]:
    """``sig`` to ``p`` (SIGINT: Ctrl-C; SIGTERM: a pod stop) and its exit, checked: 0, no
    traceback, and nothing of its process tree left (processes, netns, cgroups, BPF programs)."""
    watch = _Watch(p.pid)
    watch.sample()
    watch.sample_progs()
    t0 = time.monotonic()
    p.send_signal(sig)
    _, stderr = p.communicate(timeout=120)
    took = time.monotonic() - t0
    assert took < limit_s, f"{signal.Signals(sig).name} took {took:.0f}s: ignored until -t?"
    assert p.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    _wait_tree_gone(watch, 15.0)
    assert leftovers(watch) == [], stderr[-3000:]
    return stderr, took


# Ctrl-C, and SIGTERM: what a pod stop sends (Locust's own SIGTERM handler shut a master down twice)
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])


@SIGNALS
def test_ctrl_c_headless(tmp_path: pathlib.Path, sig: int) -> None:
    out = tmp_path / "results"
    p = locust_exec_storm(
        "--headless", "-u", "2", "-r", "2", "-t", "120s", "--ss-out", str(out), "--ss-burst-s", "0.5"
    )
    try:
        _wait_for(lambda: _window_open(out), "the window to open")
        _wait_for(lambda: _bursts_in_stats(p), "a burst in Locust's stats table")
        stderr, _ = _sigint_and_wait(p, sig=sig)
    finally:
        if p.poll() is None:
            p.kill()
    _check_interrupted(out, stderr)


@pytest.mark.slow  # 7-9 s: a master and a worker, stopped
@SIGNALS
def test_ctrl_c_master_worker(tmp_path: pathlib.Path, sig: int) -> None:
    """The signal to the master; it stops its worker, which exits with it."""
    out = tmp_path / "results"
    master, worker = locust_master_worker(out, "120s", "0.5")
    try:
        _wait_for(lambda: _window_open(out), "the window to open")
        _wait_for(lambda: _bursts_in_stats(master), "a burst in the master's stats table")
        watch = _Watch(worker.pid)
        watch.sample()
        stderr, _ = _sigint_and_wait(master, sig=sig)
    finally:
        for p in (master, worker):
            if p.poll() is None:
                p.kill()
        _, worker_err = worker.communicate(timeout=30)
    assert worker.returncode == 0 and "Traceback" not in worker_err, worker_err[-3000:]
    _wait_tree_gone(watch, 15.0)
    assert leftovers(watch) == [], worker_err[-3000:]
    _check_interrupted(out, stderr)


@SIGNALS
def test_ctrl_c_web_ui(tmp_path: pathlib.Path, sig: int) -> None:
    out, port = tmp_path / "results", free_port()
    base = f"http://127.0.0.1:{port}"
    p = locust_exec_storm(
        "--web-host", "127.0.0.1", "--web-port", str(port), "--ss-out", str(out), "--ss-burst-s", "0.5"
    )
    try:

        def up() -> bool:
            try:
                urllib.request.urlopen(base + "/", timeout=2)
                return True
            except OSError:
                assert p.poll() is None, "locust exited"
                return False

        _wait_for(up, "the web UI")
        form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()
        urllib.request.urlopen(base + "/swarm", data=form, timeout=60)
        # Ctrl-C while the swarm runs: a window in flight, with bursts in Locust's own counter
        _wait_for(lambda: _window_open(out) and requests_done(base) > 0, "a burst in the UI's stats")
        stderr, _ = _sigint_and_wait(p, sig=sig)
    finally:
        if p.poll() is None:
            p.kill()
    _check_interrupted(out, stderr)


def test_master_that_gives_up_waiting_for_workers_writes_a_failed_report(tmp_path: pathlib.Path) -> None:
    """Locust's headless master exits through sys.exit when no worker came within
    --expect-workers-max-wait, without its quitting event: the run directory still gets its
    report, "failed", with no window, and Locust's own exit code stays."""
    out = tmp_path / "results"
    p = locust_exec_storm(
        "--master", "--headless", "-u", "1", "-r", "1", "-t", "30s", "--expect-workers", "1",
        "--expect-workers-max-wait", "2", "--master-bind-host", "127.0.0.1",
        "--master-bind-port", str(free_port()), "--ss-out", str(out),
    )  # fmt: skip
    try:
        _, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, stderr[-3000:]
    assert "Gave up waiting for workers" in stderr
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "failed", stderr[-3000:]
    assert rep["points"] == []
    assert "swarmscope: report in" in stderr


# -- every kind through every door ---------------------------------------------------------------
# Each kind's run, long enough that a window is in flight when Ctrl-C comes. A swept door waits
# for its first window stored, so windows are short (5 s steps, 4 s phases: 20 s each waited for
# nothing); a locust door signals in the first window, seconds before the next.
VALUES: dict[str, dict[str, object]] = {
    "exec_storm": {"nodes": [2], "iterations": 60, "burst_s": 0.5},
    "ingress_flood": {"steps": [5, 10, 15], "step_duration": 5, "network_baseline_s": 0},
    "neighbor_writes": {"neighbors": [2000, 3000, 4000, 5000, 6000, 7000, 8000], "page_size": 1000,
                        "batch_size": 500},
    "flow_storm": {"flows": [1000], "iterations": 30, "rate_pps": 2000, "cache_max_flows": [100000]},
    "ebpf_cost": {"tools": ["open"], "duration_s": 4, "iterations": 3},
}  # fmt: skip
# A free-running door's close waits for its workers' results at most window_timeout_s, set long
# here: a close that waited for a worker already gone (the whole group Ctrl-C'd: it can quit
# before sending) showed as an exit that long after the signal (it was 30 s, the default).
FREE_CLOSE_S = 100
# Locust's own options of the free-running doors: the ingress flood's shape runs its steps.
LOCUST = {"exec_storm": ["-u", "2", "-r", "2", "-t", "120s"], "ingress_flood": [],
          "neighbor_writes": ["-u", "1", "-r", "1", "-t", "120s"],
          "flow_storm": ["-u", "1", "-r", "1", "-t", "120s"]}  # fmt: skip
# `swarmscope run` embedded (every kind) and distributed (its workers spawned; ebpf_cost is embedded only)
CELLS = [("run", k, signal.SIGINT) for k in VALUES] + [
    (d, k, signal.SIGINT) for d in ("distributed", "locust", "controller") for k in LOCUST
]
# SIGTERM (a pod stop): the headless shape, which Locust leaves without a SIGTERM handler; and
# `swarmscope run` (every kind embedded, distributed) and the controller (each kind with a locustfile)
CELLS += [("locust", "ingress_flood", signal.SIGTERM)]
CELLS += [("run", k, signal.SIGTERM) for k in VALUES] + [
    (d, k, signal.SIGTERM) for d in ("distributed", "controller") for k in LOCUST
]


def _iterations(out: pathlib.Path) -> int:
    try:
        with sqlite3.connect(out / "swarmscope.sqlite", timeout=5) as c:
            return int(c.execute("SELECT COUNT(*) FROM iterations").fetchone()[0])
    except sqlite3.Error:
        return 0


def _window_in_flight(metrics: str) -> bool:
    """The controller's /metrics says a window is open on the probes (swarmscope_window_open)."""
    try:
        with urllib.request.urlopen(metrics, timeout=2) as r:
            return "\nswarmscope_window_open 1.0" in r.read().decode()
    except OSError:
        return False


def _start_door(door: str, kind: str, tmp: pathlib.Path, metrics_port: int) -> dict[str, Logged]:
    """The door's processes, each in a session of its own (a terminal each), by role."""
    sfile = tmp / f"{kind}.yaml"
    values = {"scenario": kind, "out": str(tmp / "results"), "metrics_port": metrics_port, **VALUES[kind]}
    if door in ("locust", "controller"):
        values["window_timeout_s"] = FREE_CLOSE_S
    if door == "distributed":
        values.update(mode="distributed", workers=2, master_bind=f"127.0.0.1:{free_port()}")
    sfile.write_text(yaml.safe_dump(values))
    started: dict[str, Logged] = {}

    def start(role: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        # The first is a terminal's foreground job; the controller's probe and worker join its
        # process group, as when one shell script starts them all: one Ctrl-C reaches every one.
        group = next(iter(started.values())).pid if started else 0  # 0: a new group, led by it
        started[role] = Logged(argv, cwd=ROOT, env={**os.environ, **(env or {})}, process_group=group)

    if door in ("run", "distributed"):
        start("run", [str(BIN / "swarmscope"), "run", str(sfile)])
    elif door == "locust":
        start("locust", [str(BIN / "locust"), "-f", f"scenarios/{kind}.py", "--headless",
                         "--ss-scenario-file", str(sfile), *LOCUST[kind]])  # fmt: skip
    else:
        token, (locust_port, grpc_port) = tmp / "token", (free_port(), free_port())
        token.write_text("ctrl-c-token")
        env = {"SWARMSCOPE_TOKEN": "ctrl-c-token", "SWARMSCOPE_NODE_HOST": "hA"}
        start("controller", [
            str(BIN / "swarmscope"), "controller", "--scenario", str(sfile),
            "--locust-port", str(locust_port), "--grpc-port", str(grpc_port),
            "--metrics-port", str(metrics_port), "--web-port", str(free_port()),
            "--", "--headless", "--expect-workers", "1", *LOCUST[kind],
        ], env)  # fmt: skip
        start("probe", [str(BIN / "swarmscope"), "probe", "--controller", f"127.0.0.1:{grpc_port}",
                        "--token-file", str(token), "--node", "hA", "--retries", "60"], env)  # fmt: skip
        start("worker", [str(BIN / "swarmscope"), "worker", "--controller", "127.0.0.1",
                         "--locust-port", str(locust_port)], env)  # fmt: skip
    return started


@pytest.mark.slow  # 31 real runs, 23-61 s each
@pytest.mark.parametrize(
    "door,kind,sig", CELLS, ids=[f"{d}-{k}{'-sigterm' if g == signal.SIGTERM else ''}" for d, k, g in CELLS]
)
def test_ctrl_c_every_kind_every_door(tmp_path: pathlib.Path, door: str, kind: str, sig: int) -> None:
    out, port, locust = tmp_path / "results", free_port(), door in ("locust", "controller")
    procs = _start_door(door, kind, tmp_path, port)
    first = next(iter(procs.values()))  # the run, locust, or the controller: the run's terminal
    watches = [_Watch(p.pid) for p in procs.values()]
    try:
        # Visible state: a window open on the probes (the controller's /metrics) and, for a
        # swept run, one stored before it.
        deadline = time.monotonic() + 180
        while not (
            _window_in_flight(f"http://127.0.0.1:{port}/metrics") and (locust or _iterations(out) >= 1)
        ):
            for w in watches:
                w.sample()
            assert first.poll() is None, first.output()[1][-3000:]
            assert time.monotonic() < deadline, first.output()[1][-3000:]
            time.sleep(0.1)
        for w in watches:
            w.sample()
            w.sample_progs()
        stored = _iterations(out)
        t0 = time.monotonic()
        if sig == signal.SIGINT:  # a terminal's Ctrl-C: the whole process group
            os.killpg(first.pid, sig)
        else:  # a pod stop: the one process; what it started must go with it
            first.send_signal(sig)
        for role, p in procs.items():
            if role == "probe" and sig == signal.SIGTERM:
                procs["controller"].wait(120)  # the probe serves the next run: its own pod's stop
                p.send_signal(sig)
            p.wait(120)
        took = time.monotonic() - t0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)
    for w in watches:
        _wait_tree_gone(w, 15.0)
    texts = {role: "\n".join(p.output()) for role, p in procs.items()}
    for role, text in texts.items():
        assert "Traceback" not in text, f"{role}: {text[-3000:]}"
    assert first.returncode == (0 if locust else 130), texts
    if locust:  # its worker's result, sent or not, was not waited for past the worker's exit
        assert took < FREE_CLOSE_S, f"{took:.0f}s: {texts}"
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "interrupted", texts
    kept = sum(len(p["iterations"]) for p in rep["points"])
    if locust:  # the window in flight: closed in order and kept
        assert kept == 1, rep["points"]
    else:  # every window stored before the Ctrl-C is kept
        assert kept >= stored >= 1, rep["points"]
    # Nothing left, seen from the processes themselves (bench/fault_harness.py): their processes,
    # the namespaces and cgroups they were in, the BPF programs they held, their pins and links.
    left = [x for w in watches for x in leftovers(w)]
    pids = {pid for w in watches for pid in w.procs}
    for claim in OWNERS.glob("*/*"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(claim.read_text()).get("pid") in pids:
                left.append(f"owner claim {claim}")
    assert left == [], texts
