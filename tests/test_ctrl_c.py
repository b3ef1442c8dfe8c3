"""Ctrl-C on the Locust path (issue 18, finding 13): `locust -f scenarios/exec_storm.py`.

Headless and web UI, single process and --master/--worker: SIGINT while a window is in flight
stops the test as Locust's users expect (long before -t), the window closes in order (users and
workers stop and send their counts, then the probe reads, then teardown), its counts are exact
(generated == kernel for every node), and the run's status is ``interrupted``, in the store,
the report and the console, never ``ok`` or ``running``.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sqlite3
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from helpers import (
    Logged,
    free_port,
    load_report,
    locust_exec_storm,
    locust_master_worker,
    only_run_dir,
    requests_done,
)

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


def _sigint_and_wait(p: Logged, limit_s: float = 45.0) -> tuple[str, float]:
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=120)
    took = time.monotonic() - t0
    assert took < limit_s, f"Ctrl-C took {took:.0f}s: ignored until -t?"
    return stderr, took


@pytest.mark.slow
def test_ctrl_c_headless(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    p = locust_exec_storm(
        "--headless", "-u", "2", "-r", "2", "-t", "120s", "--ss-out", str(out), "--ss-burst-s", "0.5"
    )
    try:
        _wait_for(lambda: _window_open(out), "the window to open")
        _wait_for(lambda: _bursts_in_stats(p), "a burst in Locust's stats table")
        stderr, _ = _sigint_and_wait(p)
    finally:
        if p.poll() is None:
            p.kill()
    _check_interrupted(out, stderr)


@pytest.mark.slow
def test_ctrl_c_master_worker(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    master, worker = locust_master_worker(out, "120s", "0.5")
    try:
        _wait_for(lambda: _window_open(out), "the window to open")
        _wait_for(lambda: _bursts_in_stats(master), "a burst in the master's stats table")
        stderr, _ = _sigint_and_wait(master)
    finally:
        for p in (master, worker):
            if p.poll() is None:
                p.kill()
        worker.communicate(timeout=30)
    _check_interrupted(out, stderr)


@pytest.mark.slow
def test_ctrl_c_web_ui(tmp_path: pathlib.Path) -> None:
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
        stderr, _ = _sigint_and_wait(p)
    finally:
        if p.poll() is None:
            p.kill()
    _check_interrupted(out, stderr)


@pytest.mark.slow
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


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_of_a_shape_run(tmp_path: pathlib.Path) -> None:
    """A terminal's Ctrl-C (SIGINT to the whole process group) on `locust -f
    scenarios/ingress_flood.py --headless`: the shape's run stops in order (its window closed
    with what was measured, status interrupted, exit 0, no traceback), and the local target's
    namespace and nginx processes are gone. Locust installs its SIGTERM handler only after a
    headless shape ends, so the plug-in must not turn this Ctrl-C into a SIGTERM."""
    out = tmp_path / "results"
    before = _netns()
    p = subprocess.Popen(
        [str(pathlib.Path(__file__).resolve().parent.parent / ".venv/bin/locust"), "-f",
         "scenarios/ingress_flood.py", "--headless", "--only-summary", "--ss-steps", "5,10",
         "--ss-step-duration", "30", "--ss-out", str(out)],
        cwd=pathlib.Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: _window_open(out), "the window to open")
        time.sleep(2)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        _, stderr = p.communicate(timeout=120)
        assert time.monotonic() - t0 < 45, "Ctrl-C ignored until the steps ended?"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "interrupted"
    [step] = rep["sections"]["steps"]
    assert step["users"] == 5 and step["requests"] > 0
    assert {n for n in _netns() - before if n.startswith("ss-ingress-")} == set()
    nginx = subprocess.run(["pgrep", "-af", "nginx"], capture_output=True, text=True).stdout
    assert rep["run_id"].rsplit("-", 1)[-1] not in nginx
