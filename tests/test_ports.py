"""A port already in use is one message naming the port, its holder and the option that moves it
(issue 28: tracebacks for the metrics, gRPC, master and web ports). This test process holds the
port, so the message must name this pid; nothing is measured, so no run_finished traceback."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
from collections.abc import Iterator

import pytest
from helpers import BIN, ROOT, run_cli

pytestmark = pytest.mark.root  # conftest skips it with "not root" (CI is root)


@pytest.fixture
def held() -> Iterator[int]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def _said(stderr: str, what: str, addr: str, option: str) -> None:
    port = addr.rsplit(":", 1)[1]
    line = next(ln for ln in stderr.splitlines() if ln.startswith("swarmscope: cannot listen"))
    assert line.startswith(
        f"swarmscope: cannot listen on {addr} for {what}: port {port} is in use by pid {os.getpid()} ("
    )
    assert line.endswith(f"; stop it, or choose another port ({option})")
    assert "Traceback" not in stderr and "run_started" not in stderr


def _run(tmp: pathlib.Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [a for s in ("iterations=1", *sets) for a in ("--set", s)]
    return run_cli("run", "scenarios/exec_storm.yaml", "--out", str(tmp), *args, timeout=120)


@pytest.mark.slow
def test_metrics_port_in_use(tmp_path: pathlib.Path, held: int) -> None:
    p = _run(tmp_path, f"metrics_port={held}", "metrics_bind=0.0.0.0")
    assert p.returncode == 3
    _said(p.stderr, "Prometheus metrics", f"0.0.0.0:{held}", "metrics_port")


@pytest.mark.slow
def test_grpc_port_in_use(tmp_path: pathlib.Path, held: int) -> None:
    p = _run(tmp_path, f"grpc_bind=127.0.0.1:{held}")
    assert p.returncode == 1
    _said(p.stderr, "probes (gRPC)", f"127.0.0.1:{held}", "grpc_bind; a relay: --bind")


@pytest.mark.slow
def test_master_port_in_use(tmp_path: pathlib.Path, held: int) -> None:
    p = _run(tmp_path, "mode=distributed", "workers=1", f"master_bind=127.0.0.1:{held}")
    assert p.returncode == 3
    _said(
        p.stderr,
        "workers (the Locust master)",
        f"127.0.0.1:{held}",
        "master_bind; locust: --master-bind-port",
    )


@pytest.mark.slow
def test_web_port_in_use(tmp_path: pathlib.Path, held: int) -> None:
    cmd = [
        str(BIN / "locust"),
        "-f",
        "scenarios/exec_storm.py",
        "--web-port",
        str(held),
        "--ss-out",
        str(tmp_path),
    ]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 3
    _said(p.stderr, "Locust's web UI", f"0.0.0.0:{held}", "--web-port")
