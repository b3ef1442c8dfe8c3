"""``swarmscope controller --run-once ID``: a restarted headless controller does not run again.

    .venv/bin/python -m pytest tests/test_controller_once.py -v

The chart's headless controller restarts after its run, after a crash and after a node reboot;
each restart ran the scenario again, so a kill-pod fault struck again (issue 16). Here the real
command is started as the chart starts it (``--run-once <release>-r<revision>``), killed during
its run (a pod restart), and started again with the same results directory: the second process
must not start Locust and must keep answering /healthz until it is stopped. A new id (the next
upgrade) runs again. The whole run ending and idling is covered on the real node
(tests/test_realnode_chart_ingress.py: no second kill after the report).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


def _start(tmp: Path, run_id: str, ports: dict[str, int], log: str) -> subprocess.Popen[bytes]:
    sfile = tmp / "scenario.yaml"
    sfile.write_text(yaml.safe_dump({"scenario": "exec_storm", "out": str(tmp / "results"), "iterations": 1}))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SWARMSCOPE_TOKEN": "t" * 20,
        "SWARMSCOPE_WORKER_TOKEN": "w" * 20,
        "SWARMSCOPE_MASTER_KEY_FILE": str(tmp / "master.key"),  # made on first use
    }
    # No worker ever comes: the run waits for it (--expect-workers), i.e. it is under way.
    return subprocess.Popen(
        [sys.executable, "-m", "swarmscope", "controller", "--scenario", str(sfile),
         *[a for k, v in ports.items() for a in (f"--{k}-port", str(v))], "--run-once", run_id,
         "--", "--headless", "--expect-workers", "1"],
        cwd=ROOT, env=env, stdout=open(tmp / log, "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait(what: str, cond: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stop(p: subprocess.Popen[bytes]) -> int:
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise


@pytest.mark.slow
def test_a_restarted_headless_controller_does_not_run_again(tmp_path: Path) -> None:
    ports = {k: free_port() for k in ("locust", "grpc", "metrics", "web")}
    claim = tmp_path / "results" / ".run-once-rel-r3.json"
    first = _start(tmp_path, "rel-r3", ports, "first.log")
    try:
        # Under way: Locust's master port is bound, and the claim was made before it started.
        _wait("the first run's master port", lambda: _listening(ports["locust"]))
        assert json.loads(claim.read_text())["run_id"] == "rel-r3"
    finally:
        _stop(first)  # the pod restart, during the run
    # The container starts again with the same volume: no second run.
    second = _start(tmp_path, "rel-r3", ports, "second.log")
    try:
        _wait("the idle controller's /healthz", lambda: _get(ports["metrics"], "/healthz") == (200, b"ok\n"))
        # Its decision, as it logs it: after this line it starts nothing (no timed guess).
        _wait("the refusal in its log", lambda: "it was cut short" in (tmp_path / "second.log").read_text())
        assert not _listening(ports["locust"])
        assert second.poll() is None  # idle, not exited (the Deployment would restart it)
        assert _stop(second) == 0
    finally:
        if second.poll() is None:
            second.kill()
    text = (tmp_path / "second.log").read_text()
    assert "run rel-r3 was claimed here" in text and "it was cut short" in text, text[-2000:]
    assert "Starting Locust" not in text and "Traceback" not in text, text[-2000:]
    # The next upgrade's id runs.
    third = _start(tmp_path, "rel-r4", ports, "third.log")
    try:
        _wait("the next id's master port", lambda: _listening(ports["locust"]))
    finally:
        _stop(third)
    assert sorted(p.name for p in claim.parent.glob(".run-once-*")) == [
        ".run-once-rel-r3.json",
        ".run-once-rel-r4.json",
    ]


@pytest.mark.slow
def test_run_once_needs_headless(tmp_path: Path) -> None:
    sfile = tmp_path / "scenario.yaml"
    sfile.write_text("scenario: exec_storm\n")
    r = subprocess.run(
        [sys.executable, "-m", "swarmscope", "controller", "--scenario", str(sfile), "--run-once", "x"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "--run-once is for headless runs" in r.stderr, r.stderr
