"""Shared test helpers: run the CLI as a subprocess, read reports."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

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


class Logged(subprocess.Popen[str]):
    """A child whose stdout and stderr go to unnamed files, so its output never waits on a full
    pipe that nobody reads (Locust prints a stats table every 2 s); ``communicate()`` waits and
    returns both, as Popen's does; ``output()`` is what it printed so far."""

    def __init__(self, argv: list[str], **kw: Any):
        self.files = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))
        super().__init__(argv, stdout=self.files[0], stderr=self.files[1], text=True, **kw)

    def output(self) -> tuple[str, str]:
        texts = []
        for f in self.files:
            f.seek(0)
            texts.append(f.read())
        return texts[0], texts[1]

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()


def requests_done(base: str) -> int:
    """Locust's own request counter (its web UI's /stats/requests, the "Aggregated" row)."""
    import urllib.request

    with urllib.request.urlopen(base + "/stats/requests", timeout=10) as r:
        return int(json.loads(r.read())["stats"][-1]["num_requests"])


def locust_exec_storm(*args: str) -> Logged:
    """``locust -f scenarios/exec_storm.py ARGS`` from the repo root, its output to files."""
    return Logged([str(BIN / "locust"), "-f", "scenarios/exec_storm.py", *args], cwd=ROOT)


def locust_master_worker(out: pathlib.Path, run_time: str, burst_s: str) -> tuple[Logged, Logged]:
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


def locust_distributed(locustfile: str, workers: int, *opts: str, timeout: float = 180) -> tuple[int, str]:
    """``locust -f LOCUSTFILE --master --headless`` on a free loopback port with ``workers``
    workers, to its end: its exit code and stderr."""
    port = str(free_port())
    common = [str(BIN / "locust"), "-f", locustfile]
    m = subprocess.Popen(
        [*common, "--master", "--headless", "--expect-workers", str(workers), "--master-bind-host",
         "127.0.0.1", "--master-bind-port", port, *opts],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", port]
    ws = [subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
          for _ in range(workers)]  # fmt: skip
    try:
        _, err = m.communicate(timeout=timeout)
    finally:
        if m.poll() is None:
            m.kill()
        for w in ws:
            try:
                w.wait(60)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait(30)
    return m.returncode, err
