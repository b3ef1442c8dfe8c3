"""bench/http_flood.py stopped by a signal: the tool it runs is stopped and the target's network
namespace, nginx and directory are removed (a killed bench used to leave them)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench" / "http_flood.py"
needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {ln.split()[0] for ln in out.splitlines() if ln.strip()}


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_the_target(tmp_path: pathlib.Path, sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.Popen(
        [sys.executable, str(BENCH), "--paths", "locust", "--repeat", "1", "--out", str(tmp_path / "b.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        m = re.search(r"netns (\S+)", line)
        assert m, line
        ns = m.group(1)
        assert ns in _netns()
        # Wait until the first tool (plain Locust) runs, so the signal lands while one is under way.
        bench = psutil.Process(p.pid)
        deadline = time.monotonic() + 60
        while not _locust(bench.children()) and time.monotonic() < deadline:
            time.sleep(0.1)
        tools = bench.children(recursive=True)
        assert _locust(tools), "the first tool never started"
        p.send_signal(sig)
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err[-2000:]
    assert "stopping, removing the target" in err
    assert ns not in _netns()
    assert not list(pathlib.Path("/tmp").glob(f"{ns}-*"))  # LocalIngress's directory
    assert not [t for t in tools if _alive(t)]  # the tool it ran and nginx


def _locust(procs: list[psutil.Process]) -> bool:
    try:
        return any("locust" in " ".join(c.cmdline()) for c in procs)
    except psutil.NoSuchProcess:
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE  # a zombie waits for init
    except psutil.NoSuchProcess:
        return False
