"""Issue 18, finding 4: the ingress allow-list holds on the final URL, redirects are never
followed (preflight, FastHttpUser, k6), and only the /30s of namespaces that exist are trusted.

Before the fix ``host=http://localhost`` with ``path=@example.invalid/`` sent the preflight to
example.invalid, every 10.201.0.0/16 address was trusted, and FastHttpUser followed up to 30
redirects wherever they pointed.
"""

from __future__ import annotations

import http.server
import ipaddress
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarmscope.core.errors import ConfigError
from swarmscope.kinds.ingress_flood import KIND
from swarmscope.kinds.ingress_flood.config import host_allowed, preflight, target_url
from swarmscope.targets.ingress.local import LocalIngress, own_networks

needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


def _problems(*sets: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as ei:
        KIND.schema.load(env={}, sets=list(sets))
    return [(p.key, p.reason) for p in ei.value.problems]


def test_path_must_start_with_slash_and_final_url_is_checked() -> None:
    # The reproduced bypass: the path turned "localhost" into user info of example.invalid.
    assert _problems("host=http://localhost", "path=@example.invalid/") == [
        ("path", "must start with / (it is appended to host)")
    ]
    # Checked on the final URL even when the path passed its own check.
    assert host_allowed(target_url("http://localhost", "@example.invalid/"), []) is not None
    for host in (
        "http://user@127.0.0.1/",
        "http://127.0.0.1:80@example.invalid/",
        "http://127.0.0.1/?x=1",
        "http://127.0.0.1/#f",
        "http://127.0.0.1\\@example.invalid/",
    ):
        assert [k for k, _ in _problems(f"host={host}")] == ["host"], host  # fmt: skip
    assert [k for k, _ in _problems("host=http://127.0.0.1", "path=/a b")] == ["path"]
    KIND.schema.load(env={}, sets=["host=http://127.0.0.1:8080/base", "path=/x?y=1"])


def _free_octet() -> int:
    taken = {int(n.network_address.packed[2]) for n in own_networks()}
    return next(o for o in range(250, 0, -1) if o not in taken)


def test_only_namespaces_that_exist_are_trusted() -> None:
    octet = _free_octet()  # no namespace of ours holds 10.201.<octet>.0/30 now
    problems = _problems(f"host=http://10.201.{octet}.2/")
    assert [k for k, _ in problems] == ["host"] and "not loopback or one of our namespaces" in problems[0][1]


@needs_root
def test_a_namespace_made_here_is_trusted_while_it_exists() -> None:
    with LocalIngress() as target:
        net = ipaddress.ip_network(f"{target.host_addr}/30", strict=False)
        assert net in own_networks()
        assert host_allowed(target.url, []) is None
        cfg = KIND.schema.load(env={}, sets=[f"host={target.url}"])
        assert cfg.host == target.url
        # Same /16, another /30: not ours.
        other = ipaddress.ip_address(target.ns_addr) + 4
        assert host_allowed(f"http://{other}/", []) is not None
    assert net not in own_networks()
    assert host_allowed(target.url, []) is not None  # torn down: no longer trusted


class _Servers:
    """A server that redirects every request to a second one, which counts what reaches it."""

    def __init__(self) -> None:
        self.hits = 0
        outer = self

        class Target(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a: object) -> None:
                pass

        self.target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
        where = f"http://127.0.0.1:{self.target.server_address[1]}/elsewhere"

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a: object) -> None:
                pass

        self.redirect = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        self.url = f"http://127.0.0.1:{self.redirect.server_address[1]}"
        for s in (self.target, self.redirect):
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self) -> None:
        for s in (self.target, self.redirect):
            s.shutdown()
            s.server_close()


@pytest.fixture
def servers() -> Iterator[_Servers]:
    s = _Servers()
    yield s
    s.close()


def test_preflight_follows_no_redirect(servers: _Servers) -> None:
    assert preflight(servers.url + "/", timeout=5) == 302
    assert servers.hits == 0


_FLOOD = """
import sys
from locust.env import Environment
from swarmscope.workers.http_users import FloodUser
env = Environment(user_classes=[FloodUser], host=sys.argv[1])
user = FloodUser(env)
print(" ".join(str(user.client.get("/", name="x").status_code) for _ in range(3)))
"""


@pytest.mark.slow
def test_flood_user_follows_no_redirect(servers: _Servers) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-c", _FLOOD, servers.url], capture_output=True, text=True,
                       timeout=60, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["302", "302", "302"]
    assert servers.hits == 0


@pytest.mark.slow
def test_k6_follows_no_redirect(servers: _Servers, tmp_path: Path) -> None:
    from swarmscope.workers.k6 import run_k6

    res = run_k6(servers.url + "/", [1], 1.0, "closed", tmp_path, max_vus=1)
    step = next(iter(res.recorder.steps.values()))
    assert step.requests > 0 and dict(step.statuses) == {"302": step.requests}
    assert servers.hits == 0


# -- finding 12: every request sent to the target is in the report ------------------------------
@pytest.mark.slow
@needs_root
def test_report_total_equals_nginx_access_log(tmp_path: Path) -> None:
    """A real nginx (our LocalIngress, given as ``host``): its access log has exactly the
    report's ``target_requests`` lines, the preflight included."""
    from helpers import load_report, only_run_dir, run_cli

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "ingress_flood.yaml"
    with LocalIngress() as target:
        out = tmp_path / "results"
        p = run_cli("run", str(scenario), "--out", str(out), "--set", f"host={target.url}",
                    "--set", "steps=3,6", "--set", "step_duration=1", "--set", "stop_timeout_s=5",
                    timeout=180)  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
        rep = load_report(only_run_dir(out))
        logged = target.access_log_count()
    ing = rep["ingress"]
    assert ing["preflight_requests"] == 1
    assert ing["requests"] == ing["successes"] > 0  # a healthy target: every request answered
    assert ing["target_requests"] == ing["requests"] + 1
    assert logged == ing["target_requests"]
    firsts = [p["iterations"][0]["extra"]["preflight_requests"] for p in rep["points"]]
    assert firsts == [1, 0]  # counted once, in the first window
