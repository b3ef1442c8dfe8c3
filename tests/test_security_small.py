"""Issue 18, finding 11 (the smaller ones; the ClusterRole is the chart's, elsewhere): the native
helper cache trusts only what root or we own, worker cgroup paths stay inside the cgroup mount,
bad ``--out`` / ``master_bind`` are one clear error, metrics servers bind loopback by default.
(Maxima and fsynced reports: tests/test_security_config.py, tests/test_security_report.py.)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from swarmscope.core.errors import ConfigError, SetupError
from swarmscope.core.sys.cgroups import cgroup2_mount, pid_cgroup_rel, resolve_cgroup_id
from swarmscope.kinds import get_kind
from swarmscope.workers import native

needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)
ROOT = pathlib.Path(__file__).resolve().parent.parent


def _planted(root: pathlib.Path, key: str, name: str) -> pathlib.Path:
    d = root / key
    d.mkdir(parents=True)
    exe = d / name
    exe.write_text("#!/bin/sh\necho planted\n")
    exe.chmod(0o755)
    return exe


@needs_root
def test_native_cache_ignores_helpers_it_does_not_own(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = native.Target("tiny", native.SRC_DIR / "tiny.c", ("-static", "-O2"))
    good = tmp_path / "good"
    monkeypatch.setattr(native, "CACHE_ROOTS", [good])
    key_dir = native.build_cached("sec", [target])  # the key of this build, made by us
    assert native.trusted(key_dir / "tiny")
    # Someone else's cache first in line, holding the same key: another user's file, then a
    # group-writable one. Neither is reused; our own build is.
    for how in ("other-user", "group-writable"):
        evil = tmp_path / how
        exe = _planted(evil, key_dir.name, "tiny")
        if how == "other-user":
            os.chown(exe, 65534, 65534)
        else:
            exe.chmod(0o775)
        assert not native.trusted(exe)
        monkeypatch.setattr(native, "CACHE_ROOTS", [evil, good])
        assert native.build_cached("sec", [target]) == key_dir
    # A root the helpers would be built into that another user owns is not used either.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    monkeypatch.setattr(native, "CACHE_ROOTS", [theirs, tmp_path / "mine"])
    assert native.build_cached("sec", [target]).parent == tmp_path / "mine"


def test_cgroup_path_from_a_worker_stays_in_the_mount() -> None:
    for bad in ("../../etc", "/../../etc/passwd", "a/../../../root", f"{cgroup2_mount()}/../../etc"):
        with pytest.raises(SetupError, match="outside the cgroup mount"):
            resolve_cgroup_id(bad)
    with pytest.raises(SetupError, match="NUL"):
        resolve_cgroup_id("a\0b")
    own = pid_cgroup_rel()
    assert own is not None
    assert (
        resolve_cgroup_id(own) == resolve_cgroup_id(f"./{own}/x/..") == os.stat(cgroup2_mount() / own).st_ino
    )


def test_bad_master_bind_is_a_config_error() -> None:
    schema = get_kind("exec_storm").schema
    for bad in ("nohostport", "127.0.0.1:99999", "127.0.0.1:http", "a b:1"):
        with pytest.raises(ConfigError) as ei:
            schema.load(env={}, sets=[f"master_bind={bad}"])
        assert [p.key for p in ei.value.problems] == ["master_bind"]
    with pytest.raises(ConfigError):
        schema.load(env={}, sets=["grpc_bind=nohostport"])
    assert schema.load(env={}, sets=["master_bind=:5557"]).master_bind == ":5557"


@pytest.mark.slow
def test_unwritable_out_is_one_error_not_a_traceback(tmp_path: pathlib.Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "swarmscope", "run", str(ROOT / "scenarios" / "exec_storm.yaml"),
         "--out", "/proc/ss-no-such-dir", "--set", "nodes=1", "--set", "iterations=1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "cannot create the run directory /proc/ss-no-such-dir/" in p.stderr


def _bound_to(port: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.Process().net_connections("tcp") if c.laddr and c.laddr.port == port
            and c.status == psutil.CONN_LISTEN}  # fmt: skip


def test_metrics_servers_bind_loopback_by_default() -> None:
    from swarmscope.controller.metrics import RunMetrics
    from swarmscope.core.events import RunEvents
    from swarmscope.probes.selfmetrics import ProbeSelfMetrics, serve

    m = RunMetrics.attach(RunEvents(), metric="exec")
    port = m.serve(0)
    try:
        assert _bound_to(port) == {"127.0.0.1"}
    finally:
        m.close()
    srv = serve(ProbeSelfMetrics().registry, 0)
    try:
        assert _bound_to(srv.server_address[1]) == {"127.0.0.1"}
    finally:
        srv.shutdown()
        srv.server_close()
    from swarmscope.controller.options import COMMON_FIELDS

    assert next(f for f in COMMON_FIELDS if f.key == "metrics_bind").default == "127.0.0.1"


def test_metrics_server_caps_its_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle connections to /metrics hold a thread each: past the cap a connection is closed
    unanswered (it took a thread and a stack each before), and once the idle ones time out the
    server answers again."""
    import socket

    from swarmscope.probes import selfmetrics

    monkeypatch.setattr(selfmetrics, "MAX_CONNECTIONS", 2)
    monkeypatch.setattr(selfmetrics, "CONNECTION_TIMEOUT_S", 0.5)
    server = selfmetrics.serve(selfmetrics.TextRegistry(), 0)
    port = server.server_address[1]

    def get() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            return b"".join(iter(lambda: s.recv(4096), b""))

    try:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        assert get() == b""  # the third: closed unanswered, the two idle ones hold the slots
        assert [s.recv(1) for s in idle] == [b"", b""]  # the server dropped them at its timeout
        for s in idle:
            s.close()
        assert get().endswith(b"ok\n")
    finally:
        server.shutdown()
        server.server_close()
