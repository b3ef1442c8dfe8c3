"""The ingress flood's options and the checks made before any load (host allowed, preflight).

    from swarmscope.kinds.ingress_flood.config import INGRESS_FIELDS, host_allowed, preflight
    host_allowed("http://192.0.2.10/", [])     # -> the reason it is refused (not ours)
    preflight("http://10.201.7.2:80/", 5.0)     # one GET; ConfigError saying what is wrong

Traffic goes only to loopback, the ingress namespaces this project made and that exist now
(their /30s, read from the machine: ``targets.ingress.local.own_networks``) or hosts the
scenario lists in ``allow_hosts`` (docs/security.md). The check is made on the *final* URL (the
host joined with the path, as the load generators build it): ``path`` must start with ``/``
and ``host`` may carry no user info, query or fragment, so ``host=http://localhost`` with
``path=@example.invalid/`` cannot send load elsewhere. Neither the preflight nor the load
generators follow redirects. The fault fields sit here with the others the kind needs; the
injectors are in targets.faults.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from swarmscope.controller.options import RunConfig
from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ConfigError, Problem
from swarmscope.targets.faults import FAULT_FIELDS
from swarmscope.targets.faults import names as fault_names

# Characters no URL of ours needs, and that URL parsers disagree on (whitespace, controls,
# backslash): refused in host and path so every parser sees the same host.
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


def _check_host(v: Any) -> str | None:
    if not v:
        return None
    text = str(v)
    try:
        u = urllib.parse.urlsplit(text)
        hostname, _port = u.hostname, u.port
    except ValueError as e:
        return f"is not a valid URL: {e}"
    if u.scheme not in ("http", "https") or not hostname:
        return "must be an http:// or https:// URL with a host (or empty for the local target)"
    if _BAD_URL_CHARS.search(text) or "@" in u.netloc or u.query or u.fragment or "?" in text or "#" in text:
        return "must be scheme://host[:port][/prefix]: no user info, query, fragment, spaces or backslashes"
    return None


def _check_path(v: Any) -> str | None:
    text = str(v)
    if not text.startswith("/"):
        return "must start with / (it is appended to host)"
    if _BAD_URL_CHARS.search(text):
        return "must not contain spaces, control characters or backslashes"
    return None


def target_url(host: str, path: str) -> str:
    """The URL the load goes to: what the preflight, FastHttpUser and k6 all request."""
    return str(host).rstrip("/") + str(path)


INGRESS_FIELDS: list[Field] = [
    Field("host", str, "", "target base URL; empty = start the local nginx target", check=_check_host),
    Field(
        "steps",
        list_of(float),
        [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
        "users per step (closed) or requests/s per step (open)",
        min=1,
        max=100000,
    ),
    Field(
        "step_duration",
        float,
        30.0,
        "seconds each step is held (request-count steps: the most a step may take)",
        min=1,
        max=3600,
    ),
    Field(
        "requests",
        list_of(int),
        None,
        "boom's -n: requests per step (one value for all, or one per step); closed model",
        nullable=True,
        min=1,
        max=10_000_000,
    ),
    Field("engine", str, "locust", "load engine", choices=("locust", "k6")),
    Field(
        "model", str, "closed", "closed (N users) or open (fixed arrival rate)", choices=("closed", "open")
    ),
    Field(
        "open_users",
        int,
        200,
        "open model: users (Locust) / max VUs (k6) serving the schedule",
        min=1,
        max=20000,
    ),
    Field("path", str, "/", "request path (starts with /)", check=_check_path),
    Field(
        "fault",
        str,
        "none",
        "fault to inject (the fault injectors' registry, targets.faults)",
        choices=("none", *fault_names()),
    ),
    Field(
        "fault_at", float, 5.0, "seconds after the first step starts when the fault strikes", min=0, max=86400
    ),
    *FAULT_FIELDS,  # each fault's own options, declared next to it (targets/faults.py)
    Field(
        "restart_delay_s",
        float,
        2.0,
        "local target: the LB supervisor restarts it after this",
        min=0,
        max=600,
    ),
    Field(
        "backends",
        list_of(int),
        None,
        "local target: backend replicas behind the LB (one value, or one per step); empty = 2",
        nullable=True,
        min=1,
        max=64,
    ),
    Field(
        "lb_workers",
        int,
        2,  # the ingress write-up's nginx had two workers (proc1, proc2): docs/seeds.md
        "local target: nginx worker processes of the LB",
        min=1,
        max=64,
    ),
    Field(
        "network_baseline_s",
        int,  # iperf3's -t takes whole seconds (0.5 reads as 0: no end)
        1,
        "local target: seconds of iperf3 each way between host and target namespace before the "
        "first step (the network baseline beside the HTTP figures); 0 = none",
        min=0,
        max=60,
    ),
    Field(
        "allow_hosts",
        list_of(str),
        None,
        "hosts (names or IPs) allowed besides loopback and our namespaces",
        nullable=True,
    ),
    Field(
        "proxy_processes",
        list_of(str),
        None,
        "remote/other target: process names to sample (e.g. nginx)",
        nullable=True,
    ),
    Field(
        "generator_bound_pct",
        float,
        90.0,
        "generator CPU (% of a core) at which a step is flagged",
        min=1,
        max=10000,
    ),
    Field(
        "stop_timeout_s",
        float,
        10.0,
        "end of a step: seconds in-flight requests get to finish (they are counted)",
        min=0.1,
        max=600,
    ),
    Field("preflight_timeout_s", float, 5.0, "preflight request timeout", min=0.1, max=120),
    # Short by default: a connect whose SYNs vanish (a Service endpoint whose pod is gone, the
    # node still sending to its old MAC) otherwise blocks its user for Locust's 60 s, and the
    # outage a kill-pod measures becomes that timeout instead of the target's.
    Field(
        "connect_timeout_s",
        float,
        2.0,
        "Locust users: TCP connect timeout (2 s: the first SYN and one retransmission)",
        min=0.1,
        max=600,
    ),
    Field(
        "request_timeout_s",
        float,
        60.0,
        "Locust users: timeout of one read or write on an open connection (Locust's 60 s)",
        min=0.1,
        max=600,
    ),
    Field("tls_verify", bool, True, "verify TLS certificates (https targets)"),
]


class IngressConfig(RunConfig):
    """An ingress flood's validated options (fields: :data:`INGRESS_FIELDS`)."""

    host: str
    steps: list[float]
    step_duration: float
    requests: list[int] | None
    engine: str
    model: str
    open_users: int
    path: str
    fault: str
    fault_at: float
    restart_delay_s: float
    backends: list[int] | None
    lb_workers: int
    network_baseline_s: int
    allow_hosts: list[str] | None
    proxy_processes: list[str] | None
    generator_bound_pct: float
    stop_timeout_s: float
    preflight_timeout_s: float
    connect_timeout_s: float
    request_timeout_s: float
    tls_verify: bool


def cross_check(values: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    if values["host"]:
        r = host_allowed(target_url(values["host"], values["path"]), values.get("allow_hosts") or [])
        if r:
            out.append(("host", r))
    counts = values.get("requests")
    if counts:
        if len(counts) not in (1, len(values["steps"])):
            out.append(("requests", f"give one count or one per step ({len(values['steps'])})"))
        if values["model"] != "closed":
            out.append(("requests", "request-count steps use the closed model (boom's -c users)"))
    reps = values.get("backends")
    if reps and values["host"]:
        out.append(("backends", "backend replicas are the local target's (leave host empty)"))
    if reps and len(reps) not in (1, len(values["steps"])):
        out.append(("backends", f"give one replica count or one per step ({len(values['steps'])})"))
    if values["fault"].endswith("-local") and values["host"]:
        out.append(("fault", f"{values['fault']} needs the local target (leave host empty)"))
    return out


def backends_of(cfg: IngressConfig, step: int) -> int:
    """Backend replicas the LB proxies to in ``step`` (the local target; 2 when not given)."""
    reps = cfg.backends or [2]
    return int(reps[step] if len(reps) > 1 else reps[0])


def host_allowed(url: str, allow: list[str]) -> str | None:
    """None when traffic to ``url`` (the final URL) is allowed, else the reason."""
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname or ""
    except ValueError as e:
        return f"{url!r} is not a valid URL: {e}"
    if u.username is not None or u.password is not None or _BAD_URL_CHARS.search(url):
        return f"{url!r} carries user info or characters URL parsers disagree on: refused"
    if host in allow:
        return None
    if host == "localhost":
        return None
    why = f"{host!r} is not loopback or one of our namespaces: add it to allow_hosts to send load there"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return why
    if ip.is_loopback:
        return None
    from swarmscope.targets.ingress.local import own_networks

    if any(ip in n for n in own_networks()):
        return None
    return why


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is the answer, not a new place to go: it could point outside the allow-list."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def preflight(url: str, timeout: float = 5.0, verify: bool = True) -> int:
    """One GET before any load; returns the status (a redirect's 3xx is not followed), raises
    ConfigError saying what is wrong."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        _NoRedirect(), urllib.request.HTTPSHandler(context=ctx), urllib.request.ProxyHandler({})
    )
    try:
        with opener.open(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)  # the server answers: reachable; HTTP errors are counted in the run
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, ssl.SSLError):
            why = f"TLS error talking to {url}: {reason} (set tls_verify=false only for a test server)"
        else:
            why = f"{url} is unreachable: {reason}"
        raise ConfigError([Problem("preflight", "host", why)]) from e
    except (TimeoutError, OSError) as e:
        raise ConfigError([Problem("preflight", "host", f"{url} is unreachable: {e}")]) from e
