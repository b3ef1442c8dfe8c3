"""``swarmscope relay``: run a relay between N probes and the controller (controller/relay.py).

    swarmscope relay --upstream ctl:7070 --token-file /etc/swarmscope/token --bind 0.0.0.0:7071
    swarmscope probe --controller relay-a:7071,relay-b:7071,ctl:7070 ...   # probes: a list

Settings, each flag else its variable, else the default: ``--upstream`` ($SWARMSCOPE_RELAY_UPSTREAM,
comma-separated: the controller, or relays, tried in turn), ``--bind`` ($SWARMSCOPE_RELAY_BIND),
``--relay-id`` ($SWARMSCOPE_RELAY_ID, default relay-<hostname>-<pid>: stable per process),
``--token-file`` ($SWARMSCOPE_TOKEN). TLS towards the probes: ``--tls-cert``/``--tls-key``
($SWARMSCOPE_RELAY_TLS_CERT/_KEY), with ``--tls-client-ca`` ($SWARMSCOPE_RELAY_TLS_CLIENT_CA) for
mTLS; towards the upstream: the probe's ``--upstream-tls-*`` ($SWARMSCOPE_TLS_CA/_CERT/_KEY/
_SERVER_NAME). Caveat: no gevent here (grpc.aio runs in this process).
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from swarmscope.controller.options import HEARTBEAT_BUDGET
from swarmscope.core.errors import ConfigError, Problem

# flag -> (env var, default, help): every option declares its variable here, once.
OPTIONS: dict[str, tuple[str, str, str]] = {
    "upstream": (
        "SWARMSCOPE_RELAY_UPSTREAM",
        "",
        "comma-separated upstreams (controller or relays), in turn",
    ),
    "bind": ("SWARMSCOPE_RELAY_BIND", "0.0.0.0:7071", "address the probes dial"),
    "relay-id": ("SWARMSCOPE_RELAY_ID", "", "this relay's id upstream (default relay-<hostname>-<pid>)"),
    "tls-cert": ("SWARMSCOPE_RELAY_TLS_CERT", "", "TLS towards the probes: this relay's certificate (PEM)"),
    "tls-key": ("SWARMSCOPE_RELAY_TLS_KEY", "", "TLS towards the probes: the key of --tls-cert (PEM)"),
    "tls-client-ca": ("SWARMSCOPE_RELAY_TLS_CLIENT_CA", "", "mTLS: the CA that signs probes' certificates"),
    "upstream-tls-ca": ("SWARMSCOPE_TLS_CA", "", "TLS upstream: the CA of the upstream's certificate"),
    "upstream-tls-cert": ("SWARMSCOPE_TLS_CERT", "", "mTLS upstream: this relay's client certificate"),
    "upstream-tls-key": ("SWARMSCOPE_TLS_KEY", "", "mTLS upstream: the key of --upstream-tls-cert"),
    "upstream-tls-server-name": ("SWARMSCOPE_TLS_SERVER_NAME", "", "TLS upstream: the name to check"),
}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "relay",
        help="run a relay: N probes' sessions in, one batch per window up to the controller",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, (env, default, what) in OPTIONS.items():
        p.add_argument(f"--{flag}", help=f"{what} [${env}]" + (f" (default {default})" if default else ""))
    p.add_argument(
        "--token-file", metavar="FILE", help="file holding the shared token (else $SWARMSCOPE_TOKEN)"
    )
    p.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat seconds handed to probes")
    p.add_argument("--liveness", type=float, default=5.0, help="seconds of silence before a probe is gone")
    p.add_argument(
        "--heartbeat-budget",
        type=float,
        default=HEARTBEAT_BUDGET,
        help="heartbeats/s from all probes here: past it, --heartbeat and --liveness are handed out "
        f"longer, in proportion (default {HEARTBEAT_BUDGET:g})",
    )
    p.add_argument(
        "--window-timeout",
        type=float,
        default=20.0,
        help="seconds a close waits for probes (< the controller's)",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=10,
        help="failed upstream sessions in a row before the relay gives up (waits grow to 8 s "
        "each, jittered; the chart sets more, so a controller replaced by an upgrade does not "
        "end its relays) (default 10)",
    )
    p.set_defaults(func=run)


def settings(args: argparse.Namespace) -> dict[str, str]:
    """Each option: its flag, else its variable, else its default."""
    out = {}
    for flag, (env, default, _) in OPTIONS.items():
        out[flag] = getattr(args, flag.replace("-", "_"), None) or os.environ.get(env, "") or default
    return out


def run(args: argparse.Namespace) -> int:
    from swarmscope.controller.relay import Relay
    from swarmscope.core import auth
    from swarmscope.core.tls import TLSFiles

    s = settings(args)
    upstreams = [u.strip() for u in s["upstream"].split(",") if u.strip()]
    problems = []
    if not upstreams:
        problems.append(Problem("--upstream", "upstream", "required (or set $SWARMSCOPE_RELAY_UPSTREAM)"))
    if bool(s["tls-cert"]) != bool(s["tls-key"]):
        problems.append(
            Problem("--tls-cert", "tls", "TLS towards the probes needs both --tls-cert and --tls-key")
        )
    if s["tls-client-ca"] and not s["tls-cert"]:
        problems.append(Problem("--tls-client-ca", "tls", "mTLS needs --tls-cert and --tls-key too"))
    if (s["upstream-tls-cert"] or s["upstream-tls-key"]) and not s["upstream-tls-ca"]:
        problems.append(Problem("--upstream-tls-ca", "tls", "a client certificate needs --upstream-tls-ca"))
    if args.heartbeat_budget <= 0:
        problems.append(Problem("--heartbeat-budget", "heartbeat_budget", "must be > 0"))
    if args.window_timeout <= 0:
        problems.append(Problem("--window-timeout", "window_timeout", "must be > 0"))
    if args.retries < 1:
        problems.append(Problem("--retries", "retries", "must be >= 1"))
    if problems:
        raise ConfigError(problems)
    token = auth.load_token(args.token_file)
    relay = Relay(
        upstreams,
        token,
        s["bind"],
        relay_id=s["relay-id"],
        heartbeat_s=args.heartbeat,
        liveness_s=args.liveness,
        heartbeat_budget=args.heartbeat_budget,
        window_timeout_s=args.window_timeout,
        retries=args.retries,
        tls=TLSFiles(cert=s["tls-cert"], key=s["tls-key"], ca=s["tls-client-ca"]),
        upstream_tls=TLSFiles(
            cert=s["upstream-tls-cert"],
            key=s["upstream-tls-key"],
            ca=s["upstream-tls-ca"],
            server_name=s["upstream-tls-server-name"],
        ),
    )
    port = relay.start()
    print(f"swarmscope relay {relay.relay_id} listening on port {port}", flush=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: relay.stop())
    relay.run_forever()
    return 0
