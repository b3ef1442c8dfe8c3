"""Finding 2: a Locust worker without the run's worker token cannot join the master or send it
anything (CURVE handshake refused); one with the token joins. Real Locust processes, real ZMQ."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq
from helpers import ROOT, free_port

from swarmscope.app import workerauth

LOCUSTFILE = str(ROOT / "tests" / "data" / "workerauth_locustfile.py")
TOKEN = "worker-token-for-the-test-0123"


def _locust(tmp: Path, name: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    log = open(tmp / f"{name}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", LOCUSTFILE, *args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMSCOPE_WORKER_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)
    if token is not None:
        env[workerauth.ENV_TOKEN] = token
    return env


def _master(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    return _locust(
        tmp, "master", _env(TOKEN), "--master", "--headless", "-u", "1", "-r", "1", "-t", "1s",
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--expect-workers", "1", "--expect-workers-max-wait", "6",
    )  # fmt: skip


def _wait_listening(port: int, timeout_s: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the master did not listen on {port} in {timeout_s:.0f} s")


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("token", "leaked"),
    [(None, False), ("not-the-worker-token", False), (None, True)],
    ids=["no-token", "wrong-token", "leaked-master-public-key"],
)
def test_worker_without_the_token_cannot_join(tmp_path: Path, token: str | None, leaked: bool) -> None:
    port = free_port()
    master = _master(tmp_path, port)
    worker = _locust(tmp_path, "worker", _env(token), "--worker", "--master-host", "127.0.0.1",
                     "--master-port", str(port))  # fmt: skip
    # A raw ZeroMQ peer, as a rogue pod would be, sends a forged result: in plaintext, or (leaked)
    # with CURVE and the master's public key but a key pair of its own.
    _wait_listening(port)  # the rogue's handshake must really meet the master
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.DEALER)
    if leaked:
        pub, sec = zmq.curve_keypair()
        rogue.curve_serverkey = workerauth.keypair(TOKEN, b"master")[0]
        rogue.curve_publickey, rogue.curve_secretkey = pub, sec
    rogue.setsockopt(zmq.IDENTITY, b"rogue")
    rogue.linger = 0
    rogue.connect(f"tcp://127.0.0.1:{port}")
    try:
        time.sleep(1.0)
        import msgpack

        try:
            rogue.send(
                msgpack.dumps(["swarmscope:result", {"window_id": "w", "per_node": {}}, "rogue"]),
                zmq.NOBLOCK,
            )
        except zmq.Again:
            pass  # the master already dropped the connection at the handshake: nothing to queue
        master.wait(60)
    finally:
        _stop(worker, master)
        rogue.close()
        ctx.term()
    log = (tmp_path / "master.log").read_text()
    assert master.returncode != 0, log
    assert "Gave up waiting for workers to connect" in log, log
    assert "swarmscope:result" not in log and "rogue" not in log.replace("refused a peer", "")
    # Only a peer that knows the master's key reaches the ZAP check; the others fail earlier.
    assert ("refused a peer without the worker token" in log) == leaked, log


@pytest.mark.slow
def test_worker_with_the_token_joins(tmp_path: Path) -> None:
    port = free_port()
    master = _master(tmp_path, port)
    worker = _locust(tmp_path, "worker", _env(TOKEN), "--worker", "--master-host", "127.0.0.1",
                     "--master-port", str(port))  # fmt: skip
    try:
        master.wait(60)
    finally:
        _stop(worker, master)
    log = (tmp_path / "master.log").read_text()
    assert master.returncode == 0, log
    assert "refused a peer" not in log


def test_keys_are_derived_per_role_and_token() -> None:
    mpub, msec = workerauth.keypair(TOKEN, b"master")
    wpub, wsec = workerauth.keypair(TOKEN, b"worker")
    assert len({mpub, wpub, msec, wsec}) == 4
    assert zmq.curve_public(msec) == mpub and zmq.curve_public(wsec) == wpub
    assert workerauth.keypair("other", b"worker") != (wpub, wsec)


def test_swarmscope_run_worker_token_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """swarmscope run, distributed: workers it starts get a fresh token; external workers on a
    non-loopback master need one set (one clear error otherwise)."""
    from swarmscope.app import run
    from swarmscope.core.errors import SetupError

    monkeypatch.setattr(workerauth, "install", lambda: True)  # do not patch Locust in this process
    for var in (workerauth.ENV_TOKEN, workerauth.ENV_TOKEN_FILE):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SetupError, match="needs a worker token"):
        run._worker_token(SimpleNamespace(spawn_workers=False, master_bind="0.0.0.0:5557"), "0.0.0.0")
    assert workerauth.ENV_TOKEN not in os.environ
    run._worker_token(SimpleNamespace(spawn_workers=True, master_bind="0.0.0.0:5557"), "0.0.0.0")
    first = os.environ[workerauth.ENV_TOKEN]
    assert len(first) >= 40
    run._worker_token(SimpleNamespace(spawn_workers=True, master_bind="0.0.0.0:5557"), "0.0.0.0")
    assert os.environ[workerauth.ENV_TOKEN] == first  # a token already set is kept
