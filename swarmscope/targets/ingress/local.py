"""A real local ingress target: nginx load balancer + nginx backend replicas in our own netns.

    with LocalIngress(restart_delay_s=2.0, backends=4) as target:   # 4 replicas started
        target.use_backends(2)       # the LB proxies to the first 2 (nginx reload)
        print(target.url)            # http://10.201.X.2:80/  (inside ss-ingress-<id>)
        target.lb_pids()             # nginx LB master + workers, for the process sampler
        target.kill_lb()             # SIGKILL the LB; the supervisor restarts it later
        target.stall_backends(1.0)   # SIGSTOP the backends for 1 s (a stalled server)
        target.access_log_count()    # requests the LB logged (one line per request)

Layout: a network namespace ``ss-ingress-<id>`` made here, a veth pair with a /30 between the
host and the namespace (host .1, namespace .2), the LB listening on the namespace address and
proxying round-robin to backend replicas on the namespace's loopback: one nginx (one worker)
per replica, on ports 8081, 8082, … (two by default, as before). Only the
namespace we create receives traffic (docs/platform.md#network-traffic: loopback or own namespaces only).

Caveats: needs root (netns, veth). nginx runs with ``daemon off`` as our child so the
supervisor sees it die. The access log is unbuffered so counting lines right after the load
stops is exact. Everything is torn down on exit, also when the body raises.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import psutil

from swarmscope.core.errors import SetupError
from swarmscope.core.sys import owners

log = logging.getLogger(__name__)

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

_COMMON = """
worker_processes {workers};
daemon off;
master_process on;
pid {dir}/{name}.pid;
error_log {dir}/{name}.error.log warn;
worker_rlimit_nofile 65535;
events {{ worker_connections 16384; multi_accept on; }}
http {{
  client_body_temp_path {dir}/tmp_{name};
  proxy_temp_path {dir}/tmp_{name};
  fastcgi_temp_path {dir}/tmp_{name};
  uwsgi_temp_path {dir}/tmp_{name};
  scgi_temp_path {dir}/tmp_{name};
  keepalive_requests 1000000;
  keepalive_timeout 60s;
{body}
}}
"""

_LB_BODY = """
  log_format ss '$msec $status $request_time $upstream_addr';
  access_log {dir}/access.log ss;
  upstream backends {{ {servers} keepalive 64; }}
  server {{
    listen {addr}:{port} reuseport backlog=4096;
    location / {{
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
"""

_BACKEND_BODY = """
  access_log off;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "backend-{i}\\n"; }} }}
"""
BACKEND_PORT = 8081  # replica i (1-based) listens on BACKEND_PORT + i - 1


# The host side of every namespace's veth this module makes: ssi<6 hex>h (see LocalIngress).
_HOST_VETH = re.compile(r"ssi[0-9a-f]{6}h")


def own_networks() -> list[ipaddress.IPv4Network]:
    """The /30 networks of the ingress namespaces that exist on this machine now (made here).

    Read from the host-side veths' addresses, so a namespace torn down (or never made) is not
    trusted: traffic may go to what swarmscope created, not to the whole 10.201.0.0/16."""
    try:
        out = subprocess.run(
            ["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
        links = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    nets = []
    for link in links:
        if not _HOST_VETH.fullmatch(str(link.get("ifname", ""))):
            continue
        for a in link.get("addr_info", []):
            if a.get("family") == "inet" and int(a.get("prefixlen", 0)) == 30:
                nets.append(ipaddress.IPv4Network(f"{a['local']}/30", strict=False))
    return nets


def _run(*cmd: str) -> None:
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise SetupError(f"{cmd[0]} not found: run tools/setup.sh") from e
    except subprocess.CalledProcessError as e:
        raise SetupError(f"{' '.join(cmd)} failed: {e.stderr.strip()}") from e


class LocalIngress:
    """Context manager owning the namespace, the LB (supervised) and the backends."""

    def __init__(self, restart_delay_s: float = 2.0, lb_workers: int = 1, port: int = 80, backends: int = 2):
        if os.geteuid() != 0:
            raise SetupError("the local ingress target needs root (network namespace, veth)")
        if not os.path.exists(NGINX):
            raise SetupError("nginx not found: run tools/setup.sh (installs nginx-light)")
        self.id = secrets.token_hex(3)
        self.netns = f"ss-ingress-{self.id}"
        # 10.201.<random>.0/30: host .1, namespace .2. Random third octet so parallel runs differ.
        octet = int(self.id[:2], 16)
        self.host_addr = f"10.201.{octet}.1"
        self.ns_addr = f"10.201.{octet}.2"
        self.port = port
        self.restart_delay_s = restart_delay_s
        self.lb_workers = lb_workers
        self.backends = backends  # replicas started
        self.backends_used = backends  # replicas in the LB's upstream now
        self.dir = Path(tempfile.mkdtemp(prefix=f"ss-ingress-{self.id}-"))
        self.veth_host = f"ssi{self.id}h"
        self.veth_ns = f"ssi{self.id}n"
        self._lb: subprocess.Popen[bytes] | None = None
        self._backends: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._sup: threading.Thread | None = None
        self._lock = threading.Lock()
        self.restarts: list[tuple[float, float]] = []  # (died_at, restarted_at), wall clock

    @property
    def url(self) -> str:
        return f"http://{self.ns_addr}:{self.port}/"

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> LocalIngress:
        try:
            self._setup_net()
            self._write_confs()
            self._backends = [self._spawn(f"backend{i}") for i in range(1, self.backends + 1)]
            self._lb = self._spawn("lb")
            self._wait_ready()
            self._sup = threading.Thread(target=self._supervise, name="lb-supervisor", daemon=True)
            self._sup.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._sup is not None:
            self._sup.join(timeout=self.restart_delay_s + 5)
        self._kill_everything_in_netns()
        subprocess.run(["ip", "link", "del", self.veth_host], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        owners.release("link", self.veth_host)
        owners.release("netns", self.netns)

    def _kill_everything_in_netns(self) -> None:
        """Masters first (a live master respawns a killed worker), then whatever is left in the
        namespace (orphaned workers of a killed master), until it is empty."""
        for p in (self._lb, *self._backends):
            if p is not None and p.poll() is None:
                p.kill()
        for _ in range(50):
            r = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
            pids = [int(x) for x in r.stdout.split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for p in (self._lb, *self._backends):
            if p is not None:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log.warning("nginx %d did not exit", p.pid)

    def _setup_net(self) -> None:
        # Claimed first: a run killed right after `ip netns add` still leaves a claim to sweep.
        owners.claim("netns", self.netns)
        owners.claim("link", self.veth_host)
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
        _run("ip", "link", "set", self.veth_ns, "netns", self.netns)
        _run("ip", "addr", "add", f"{self.host_addr}/30", "dev", self.veth_host)
        _run("ip", "link", "set", self.veth_host, "up")
        nsx = ("ip", "netns", "exec", self.netns)
        _run(*nsx, "ip", "addr", "add", f"{self.ns_addr}/30", "dev", self.veth_ns)
        _run(*nsx, "ip", "link", "set", self.veth_ns, "up")
        _run(*nsx, "ip", "link", "set", "lo", "up")

    def _write_confs(self) -> None:
        d = str(self.dir)
        self._write_lb_conf(self.backends_used)
        for i in range(1, self.backends + 1):
            name, body = f"backend{i}", _BACKEND_BODY.format(port=BACKEND_PORT + i - 1, i=i)
            (self.dir / f"tmp_{name}").mkdir(exist_ok=True)
            (self.dir / f"{name}.conf").write_text(_COMMON.format(workers=1, dir=d, name=name, body=body))
        (self.dir / "access.log").touch()

    def _write_lb_conf(self, used: int) -> None:
        d = str(self.dir)
        servers = " ".join(f"server 127.0.0.1:{BACKEND_PORT + i};" for i in range(used))
        body = _LB_BODY.format(dir=d, addr=self.ns_addr, port=self.port, servers=servers)
        (self.dir / "tmp_lb").mkdir(exist_ok=True)
        (self.dir / "lb.conf").write_text(
            _COMMON.format(workers=self.lb_workers, dir=d, name="lb", body=body)
        )

    def use_backends(self, n: int, timeout_s: float = 10.0) -> None:
        """Proxy to the first ``n`` replicas from now on: a new upstream and an nginx reload
        (SIGHUP). Returns once only the new workers run, so a step starts on the new upstream
        and the LB pids read afterwards are the ones that serve it."""
        if not 1 <= n <= self.backends:
            raise SetupError(f"backends {n}: the target started {self.backends} replicas")
        if n == self.backends_used:
            return
        old = set(self.lb_pids()[1:])
        self._write_lb_conf(n)
        pid = self.lb_master_pid()
        if pid is None:
            raise SetupError("the LB is not running")
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = set(self.lb_pids()[1:])
            if len(now) == self.lb_workers and not now & old:
                self.backends_used = n
                return
            time.sleep(0.05)
        raise SetupError(f"the LB did not reload onto {n} backends in {timeout_s:.0f} s")

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        cmd = [
            "ip",
            "netns",
            "exec",
            self.netns,
            NGINX,
            "-p",
            str(self.dir),
            "-c",
            str(self.dir / f"{name}.conf"),
        ]
        # setpriv and ip netns exec exec nginx in place, so the Popen pid is the nginx master. Its
        # own session makes master and workers one process group: a kill takes them all at once.
        return subprocess.Popen(
            owners.dying_with_us(cmd),  # the master goes with us; the sweep takes the rest
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def _wait_ready(self, timeout: float = 10.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in (self._lb, *self._backends):
                if p is not None and p.poll() is not None:
                    err = p.stderr.read().decode() if p.stderr else ""
                    raise SetupError(f"nginx exited at start (code {p.returncode}): {err.strip()}")
            try:
                with socket.create_connection((self.ns_addr, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise SetupError(f"the local LB did not listen on {self.ns_addr}:{self.port} in {timeout:.0f} s")

    def _supervise(self) -> None:
        """Restart the LB ``restart_delay_s`` after it dies (like a pod being rescheduled)."""
        while not self._stop.is_set():
            lb = self._lb
            if lb is not None and lb.poll() is not None:
                died = time.time()
                # Workers of a SIGKILLed master live on and keep serving the socket: kill its
                # process group so the outage is real, as when a pod goes away. (Tracking the
                # worker pids instead raced with the kill: a list read just after it was empty.)
                _kill_group(lb.pid)
                if self._stop.wait(self.restart_delay_s):
                    return
                with self._lock:
                    self._lb = self._spawn("lb")
                try:
                    self._wait_ready()
                except Exception as e:  # keep supervising; the run reports the outage
                    log.error("LB restart failed: %s", e)
                self.restarts.append((died, time.time()))
                log.info("LB restarted after %.2f s", time.time() - died)
            self._stop.wait(0.02)

    # -- what callers use --------------------------------------------------------------------
    def lb_master_pid(self) -> int | None:
        with self._lock:
            lb = self._lb
        return lb.pid if lb is not None and lb.poll() is None else None

    def lb_pids(self) -> list[int]:
        """The LB master and its workers right now (they change after a restart)."""
        return self._tree(self.lb_master_pid())

    def backend_pids(self) -> list[int]:
        return [pid for b in self._backends if b.poll() is None for pid in self._tree(b.pid)]

    @staticmethod
    def _tree(pid: int | None) -> list[int]:
        if pid is None:
            return []
        try:
            p = psutil.Process(pid)
            return [pid, *(c.pid for c in p.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def kill_lb(self) -> float:
        """SIGKILL the LB (master and workers) now; returns the wall-clock time of the kill."""
        pid = self.lb_master_pid()
        if pid is None:
            raise SetupError("the LB is not running")
        t = time.time()
        _kill_group(pid)  # master and workers together: no worker serves on after the kill
        return t

    def stall_backends(self, seconds: float) -> None:
        """Freeze the backends (SIGSTOP) for ``seconds``: a server that stalls, for real."""
        pids = self.backend_pids()
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            for p in pids:
                os.kill(p, signal.SIGCONT)

    def access_log_count(self) -> int:
        with open(self.dir / "access.log", "rb") as fh:
            return sum(1 for _ in fh)

    def access_log_statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with open(self.dir / "access.log", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 1:
                    out[parts[1]] = out.get(parts[1], 0) + 1
        return out


def _kill_group(pgid: int) -> None:
    """SIGKILL a process group made by ``_spawn`` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
