"""Issue 18 finding 2: a Locust worker without the run's worker token cannot join the master or
send it anything (CURVE handshake refused); one with the token joins. Issue 27 finding 3: the
worker token does not make its holder the master (the master's key is its own). Real Locust
processes, real ZMQ."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq
from helpers import ROOT, free_port, stop_procs

from swarmscope.app import workerauth

LOCUSTFILE = str(ROOT / "tests" / "data" / "workerauth_locustfile.py")
TOKEN = "worker-token-for-the-test-0123"


def _locust(tmp: Path, name: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    log = open(tmp / f"{name}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", LOCUSTFILE, *args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _env(token: str | None, tmp: Path | None = None, master: bool = False) -> dict[str, str]:
    """A Locust process's environment: the worker token; the master's key file (made on first
    use) for the master, its public key for a worker."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SWARMSCOPE_WORKER_TOKEN", "SWARMSCOPE_MASTER"))
    }
    env["PYTHONPATH"] = str(ROOT)
    if token is not None:
        env[workerauth.ENV_TOKEN] = token
    if tmp is not None:
        key = tmp / "master.key"
        if not key.exists():  # made here, not by the master: a worker started with it reads .pub at once
            pub, sec = zmq.curve_keypair()
            key.write_bytes(sec)
            key.chmod(0o600)
            Path(f"{key}.pub").write_bytes(pub)
        env["SWARMSCOPE_MASTER_KEY_FILE" if master else "SWARMSCOPE_MASTER_PUBLIC_KEY_FILE"] = (
            str(key) if master else f"{key}.pub"
        )
    return env


def _master(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    return _locust(
        tmp, "master", _env(TOKEN, tmp, master=True),
        "--master", "--headless", "-u", "1", "-r", "1", "-t", "1s",
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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("token", "leaked"),
    [(None, False), ("not-the-worker-token", False), (None, True)],
    ids=["no-token", "wrong-token", "leaked-master-public-key"],
)
def test_worker_without_the_token_cannot_join(tmp_path: Path, token: str | None, leaked: bool) -> None:
    port = free_port()
    master = _master(tmp_path, port)
    worker = _locust(tmp_path, "worker", _env(token, tmp_path), "--worker", "--master-host", "127.0.0.1",
                     "--master-port", str(port))  # fmt: skip
    # A raw ZeroMQ peer, as a rogue pod would be, sends a forged result: in plaintext, or (leaked)
    # with CURVE and the master's public key but a key pair of its own.
    _wait_listening(port)  # the rogue's handshake must really meet the master
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.DEALER)
    if leaked:
        pub, sec = zmq.curve_keypair()
        rogue.curve_serverkey = (tmp_path / "master.key.pub").read_bytes()
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
        stop_procs([worker, master], 15)
        rogue.close()
        ctx.term()
    log = (tmp_path / "master.log").read_text()
    assert master.returncode != 0, log
    assert "Gave up waiting for workers to connect" in log, log
    assert "swarmscope:result" not in log and "rogue" not in log.replace("refused a peer", "")
    # Only a peer that knows the master's public key reaches the ZAP check (the worker with the
    # wrong token has it, as workers do; the rogue has it when leaked); the others fail earlier.
    assert ("refused a peer without the worker token" in log) == (leaked or token is not None), log
    if token is not None:  # and the worker says why it is not let in
        wlog = (tmp_path / "worker.log").read_text()
        assert "refused this worker (its worker token is not the master's)" in wlog, wlog


@pytest.mark.slow
def test_worker_with_the_token_joins(tmp_path: Path) -> None:
    port = free_port()
    master = _master(tmp_path, port)
    worker = _locust(tmp_path, "worker", _env(TOKEN, tmp_path), "--worker", "--master-host", "127.0.0.1",
                     "--master-port", str(port))  # fmt: skip
    try:
        master.wait(60)
    finally:
        stop_procs([worker, master], 15)
    log = (tmp_path / "master.log").read_text()
    assert master.returncode == 0, log
    assert "refused a peer" not in log


def _token_derived_master_secret(token: str) -> bytes:
    """The master's secret key as swarmscope derived it from the worker token before issue 27:
    what any holder of the token (every worker pod) could compute."""
    from zmq.utils import z85

    return z85.encode(hmac.new(token.encode(), b"swarmscope/v1 locust master", hashlib.sha256).digest())


@pytest.mark.slow  # 13 s: a real master and an impostor's worker
def test_a_worker_token_holder_cannot_act_as_the_master(tmp_path: Path) -> None:
    """Issue 27 finding 3: an impostor holding the worker token (as every worker pod does) listens
    as the master with the key it can derive from the token and pushes ``swarmscope:setup`` to a
    real worker. The worker holds the real master's public key only: the handshake fails, the
    impostor hears nothing from it and the worker takes no setup."""
    import msgpack

    port = free_port()
    ctx = zmq.Context()
    impostor = ctx.socket(zmq.ROUTER)
    impostor.curve_server = True
    impostor.curve_secretkey = _token_derived_master_secret(TOKEN)
    impostor.linger = 0
    impostor.bind(f"tcp://127.0.0.1:{port}")
    worker = _locust(tmp_path, "worker", _env(TOKEN, tmp_path), "--worker", "--master-host", "127.0.0.1",
                     "--master-port", str(port))  # fmt: skip
    heard: list[str] = []
    try:
        deadline = time.monotonic() + 12.0  # the worker starts, says client_ready and heartbeats each second
        while time.monotonic() < deadline and worker.poll() is None:
            if impostor.poll(200):
                ident, raw = impostor.recv_multipart()
                heard.append(msgpack.loads(raw)[0])
                if heard[-1] == "client_ready":  # as Locust's master: the worker waits for this
                    impostor.send_multipart([ident, msgpack.dumps(["ack", {"index": 0}, ident.decode()])])
                setup = {"cfg": {"scenario": "exec_storm"}, "sim_nodes": 1, "prefix": "impostor-"}
                impostor.send_multipart([ident, msgpack.dumps(["swarmscope:setup", setup, ident.decode()])])
        time.sleep(1.0)  # a setup sent last has time to arrive
    finally:
        stop_procs([worker], 15)
        impostor.close()
        ctx.term()
    log = (tmp_path / "worker.log").read_text()
    assert heard == [], f"the worker talked to the impostor: {heard[:3]}\n{log}"
    assert "accepted swarmscope:setup" not in log, log
    assert "did not prove the master key this worker holds" in log, log


@pytest.mark.slow  # 7 s: a real master and two workers
def test_a_worker_cannot_send_as_another(tmp_path: Path) -> None:
    """The master takes a message's sender from the authenticated connection: a peer with the
    token that names another worker in its message is taken as itself (and the log says so)."""
    import msgpack

    port = free_port()
    master = _master(tmp_path, port)
    _wait_listening(port)
    ctx = zmq.Context()
    peer = ctx.socket(zmq.DEALER)
    peer.curve_serverkey = (tmp_path / "master.key.pub").read_bytes()
    peer.curve_publickey, peer.curve_secretkey = workerauth.worker_keypair(TOKEN)
    peer.setsockopt(zmq.IDENTITY, b"peer-1")
    peer.linger = 0
    peer.connect(f"tcp://127.0.0.1:{port}")
    try:
        peer.send(msgpack.dumps(["swarmscope:nodes", {"nodes": []}, "victim-worker"]))
        master.wait(60)
    finally:
        stop_procs([master], 15)
        peer.close()
        ctx.term()
    log = (tmp_path / "master.log").read_text()
    assert "master took swarmscope:nodes from peer-1" in log, log
    assert "from victim-worker" not in log, log
    assert "sent swarmscope:nodes as victim-worker: taken as peer-1's" in log, log


def test_master_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing key file is made (0600, public key beside it) and read back the same; the chart's
    Ed25519 PEM pair gives the same Curve25519 pair as ZeroMQ computes; bad keys are one clear error."""
    from swarmscope.core.errors import SetupError

    monkeypatch.setattr(workerauth, "_installed", {})
    key = tmp_path / "m.key"
    monkeypatch.setenv(workerauth.ENV_MASTER_KEY_FILE, str(key))
    sec = workerauth.master_secret()
    assert key.stat().st_mode & 0o777 == 0o600
    pub = Path(f"{key}.pub").read_text().strip().encode()
    assert zmq.curve_public(sec) == pub and workerauth.master_secret() == sec
    monkeypatch.setenv(workerauth.ENV_MASTER_PUBLIC_FILE, f"{key}.pub")
    assert workerauth.master_public() == pub
    # An Ed25519 key and certificate made by Helm's genPrivateKey / genSelfSignedCertWithKey.
    pem_key = (ROOT / "tests" / "data" / "master-ed25519.key").read_text()
    pem_cert = (ROOT / "tests" / "data" / "master-ed25519.crt").read_text()
    assert zmq.curve_public(workerauth.parse_secret(pem_key, "k")) == workerauth.parse_public(pem_cert, "c")
    with pytest.raises(SetupError, match="not a master key"):
        workerauth.parse_secret(pem_cert, "the file")
    with pytest.raises(SetupError, match="not the master's public key"):
        workerauth.parse_public("x" * 39, "the file")
    monkeypatch.delenv(workerauth.ENV_MASTER_KEY_FILE)
    with pytest.raises(SetupError, match="needs its own key"):
        workerauth.master_secret()
    assert workerauth.worker_keypair(TOKEN) != workerauth.worker_keypair("other")


def test_swarmscope_run_worker_token_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """swarmscope run, distributed: workers it starts get a fresh token; external workers on a
    non-loopback master need one set (one clear error otherwise)."""
    from swarmscope.app import run
    from swarmscope.core.errors import SetupError

    monkeypatch.setattr(workerauth, "install", lambda: True)  # do not patch Locust in this process
    monkeypatch.setattr(workerauth, "_installed", {})
    for var in (workerauth.ENV_TOKEN, workerauth.ENV_TOKEN_FILE, workerauth.ENV_MASTER_KEY_FILE,
                workerauth.ENV_MASTER_PUBLIC, workerauth.ENV_MASTER_PUBLIC_FILE):  # fmt: skip
        # set, then deleted: monkeypatch records the delete and so removes what run._worker_token
        # sets below at the test's end (a bare delenv of an unset var records nothing, and the
        # token leaked into later tests' workers)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    with pytest.raises(SetupError, match="needs a worker token"):
        run._worker_token(SimpleNamespace(spawn_workers=False, master_bind="0.0.0.0:5557"), "0.0.0.0")
    assert workerauth.ENV_TOKEN not in os.environ
    run._worker_token(SimpleNamespace(spawn_workers=True, master_bind="0.0.0.0:5557"), "0.0.0.0")
    first = os.environ[workerauth.ENV_TOKEN]
    assert len(first) >= 40
    run._worker_token(SimpleNamespace(spawn_workers=True, master_bind="0.0.0.0:5557"), "0.0.0.0")
    assert os.environ[workerauth.ENV_TOKEN] == first  # a token already set is kept
    # The workers get the master's public key; its secret key is in this process's memory only.
    master_pub = os.environ[workerauth.ENV_MASTER_PUBLIC].encode()
    assert zmq.curve_public(workerauth.master_secret()) == master_pub
    assert all(workerauth.master_secret().decode() not in v for v in os.environ.values())
