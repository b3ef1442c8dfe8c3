"""Shared test helpers: run the CLI as a subprocess, read reports."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def run_cli(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "swarmscope"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def only_run_dir(out: pathlib.Path) -> pathlib.Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, f"expected one run dir in {out}, found {dirs}"
    return dirs[0]


def load_report(run_dir: pathlib.Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def is_root() -> bool:
    return os.geteuid() == 0


def free_port() -> int:
    """A TCP port free on loopback right now (the usual small race is fine in tests)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def locust_exec_storm(*args: str) -> subprocess.Popen[str]:
    """``locust -f scenarios/exec_storm.py ARGS`` from the repo root, output piped."""
    return subprocess.Popen(
        [str(BIN / "locust"), "-f", "scenarios/exec_storm.py", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def locust_master_worker(
    out: pathlib.Path, run_time: str, burst_s: str
) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    """A headless exec-storm master on a free loopback port and one worker with two nodes."""
    port = free_port()
    master = locust_exec_storm(
        "--master", "--headless", "-u", "2", "-r", "2", "-t", run_time, "--expect-workers", "1",
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--ss-out", str(out), "--ss-burst-s", burst_s,
    )  # fmt: skip
    worker = locust_exec_storm(
        "--worker", "--master-host", "127.0.0.1", "--master-port", str(port), "--ss-nodes", "2"
    )
    return master, worker
