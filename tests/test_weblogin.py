"""Finding 2: the Locust web UI behind Locust's own login (--web-login) with swarmscope's
password; without logging in nothing can be started or read. Real Locust, real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from helpers import ROOT, free_port

LOCUSTFILE = str(ROOT / "tests" / "data" / "weblogin_locustfile.py")
PASSWORD = "correct horse battery"


@pytest.mark.slow
def test_web_ui_needs_the_password(tmp_path: Path) -> None:
    port = free_port()
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWARMSCOPE_WEB_PASSWORD_FILE": str(pw)}
    log = open(tmp_path / "locust.log", "wb")
    p = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--web-login", "--web-host", "127.0.0.1",
         "--web-port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = requests.get(base + "/", allow_redirects=False, timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline and p.poll() is None, "web UI did not come up"
                time.sleep(0.3)
        assert r.status_code == 302 and "/login" in r.headers["Location"]
        anon = requests.Session()
        form = {"user_count": 1, "spawn_rate": 1}
        for method, path in [("post", "/swarm"), ("post", "/stop"), ("get", "/stats/requests")]:
            r = anon.request(method, base + path, data=form, allow_redirects=False, timeout=10)
            assert r.status_code == 302 and "/login" in r.headers["Location"], (path, r.status_code)
        r = anon.post(
            base + "/swarmscope_login", data={"username": "x", "password": "wrong"}, allow_redirects=False
        )
        assert r.status_code == 302 and "/login" in r.headers["Location"]
        assert anon.get(base + "/stats/requests", allow_redirects=False).status_code == 302
        user = requests.Session()
        r = user.post(
            base + "/swarmscope_login", data={"username": "me", "password": PASSWORD}, allow_redirects=False
        )
        assert r.status_code == 302 and "/login" not in r.headers["Location"]
        cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
        r = user.post(base + "/swarm", data=form, timeout=10)
        assert r.status_code == 200 and r.json()["success"] is True
        assert user.get(base + "/stats/requests", timeout=10).json()["state"] in ("spawning", "running")
        assert user.post(base + "/stop", timeout=10).status_code == 200
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def test_missing_password_is_one_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMSCOPE_WEB_PASSWORD")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, "-m", "swarmscope", "controller", "--scenario",
         str(ROOT / "scenarios" / "exec_storm.yaml"), "--web-port", str(free_port())],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0
    assert "--web-login needs a password" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_swarmscope_controller_binds_narrowly_behind_login(tmp_path: Path) -> None:
    """`swarmscope controller` (what the chart runs): master port and fleet on $POD_IP (here
    127.0.0.2, a loopback address that is not the default), web UI on 127.0.0.1 behind the login,
    nothing on 0.0.0.0 but the metrics port (the kubelet's health checks need it)."""
    import psutil

    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    ports = {k: free_port() for k in ("locust", "grpc", "metrics", "web")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWARMSCOPE_WEB_PASSWORD_FILE": str(pw),
           "POD_IP": "127.0.0.2", "SWARMSCOPE_TOKEN": "t" * 20,
           "SWARMSCOPE_WORKER_TOKEN": "w" * 20,
           "SWARMSCOPE_MASTER_KEY_FILE": str(tmp_path / "master.key")}  # fmt: skip
    env["SWARMSCOPE_OUT"] = str(tmp_path / "results")
    log = open(tmp_path / "controller.log", "wb")
    p = subprocess.Popen(
        [sys.executable, "-m", "swarmscope", "controller",
         "--scenario", str(ROOT / "scenarios" / "exec_storm.yaml"),
         *[a for k, v in ports.items() for a in (f"--{k}-port", str(v))]],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{ports['web']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = requests.get(base + "/", allow_redirects=False, timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline and p.poll() is None, (
                    tmp_path / "controller.log"
                ).read_text()
                time.sleep(0.3)
        assert r.status_code == 302 and "/login" in r.headers["Location"]
        # The fleet runs in a child process of the controller (controller/fleet_proc.py: grpc.aio
        # cannot run in a gevent-patched process), so its socket is the child's.
        procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        listening = {
            c.laddr.port: c.laddr.ip.removeprefix("::ffff:")  # v4-mapped on a dual-stack socket
            for proc in procs
            for c in proc.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert listening[ports["locust"]] == "127.0.0.2"
        assert listening[ports["grpc"]] == "127.0.0.2"
        assert listening[ports["web"]] == "127.0.0.1"
        assert listening[ports["metrics"]] == "0.0.0.0"
        user = requests.Session()
        r = user.post(
            base + "/swarmscope_login", data={"username": "me", "password": PASSWORD}, allow_redirects=False
        )
        assert r.status_code == 302 and user.get(base + "/", timeout=10).status_code == 200
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
