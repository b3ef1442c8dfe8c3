"""Locust master/worker authentication: ZeroMQ CURVE keys derived from a shared worker token.

    os.environ["SWARMSCOPE_WORKER_TOKEN"] = token      # or SWARMSCOPE_WORKER_TOKEN_FILE=<file>
    workerauth.install()                               # before Locust makes its master/worker socket

Locust's master port (ZeroMQ) accepts any peer, and a peer that joins can take users and send
``swarmscope:*`` messages (nodes, results) that change the run's numbers. With a worker token
set, both ends of Locust's socket use CURVE: the master's key pair and the one worker key pair
are derived from the token (HMAC-SHA256 with a label each), the master admits through a ZAP
handler only peers that prove the worker key, and workers check the master's key. A peer
without the token fails the handshake: it never joins (``worker_count`` stays 0), and nothing it
sends reaches Locust or swarmscope. The traffic is encrypted too.

Installed by the plug-in at import (``locust -f scenarios/*.py``), so every Locust process of a
run with the variable set uses it; ``swarmscope run --set mode=distributed`` makes a fresh
token per run and hands it to the workers it starts through their environment;
``swarmscope controller``/``worker`` (the chart) read it from the chart's Secret. Caveat: it
patches ``locust.rpc.zmqrpc.Server``/``Client`` (Locust has no hook for socket options); a
token is per run, so every worker of a run shares one key pair.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import sys
from typing import Any

from swarmscope.core.errors import SetupError
from swarmscope.core.sys.ports import port_in_use

log = logging.getLogger(__name__)

ENV_TOKEN = "SWARMSCOPE_WORKER_TOKEN"
ENV_TOKEN_FILE = "SWARMSCOPE_WORKER_TOKEN_FILE"
ZAP_DOMAIN = b"swarmscope"
_installed: dict[str, Any] = {}


def load_token() -> str:
    """The token from ``$SWARMSCOPE_WORKER_TOKEN_FILE``, else ``$SWARMSCOPE_WORKER_TOKEN``; "" if none."""
    from swarmscope.core.auth import read_secret

    path = os.environ.get(ENV_TOKEN_FILE)
    tok = read_secret(path, ENV_TOKEN, "the worker token")
    if path and not tok:
        raise SetupError(f"the worker token file {path} is empty")
    return tok


def keypair(token: str, role: bytes) -> tuple[bytes, bytes]:
    """(public, secret) CURVE keys, Z85, derived from the token for ``role`` (master / worker)."""
    import zmq
    from zmq.utils import z85

    seed = hmac.new(token.encode(), b"swarmscope/v1 locust " + role, hashlib.sha256).digest()
    secret = z85.encode(seed)
    return zmq.curve_public(secret), secret


def install() -> bool:
    """Patch Locust's ZeroMQ sockets to CURVE when a worker token is set; idempotent."""
    token = load_token()
    if not token:
        return False
    if _installed.get("token") == token:
        return True
    import zmq as _zmq

    if not _zmq.has("curve"):
        raise SetupError("a worker token is set but this libzmq has no CURVE support")
    from locust.rpc import zmqrpc

    master_pub, master_sec = keypair(token, b"master")
    worker_pub, worker_sec = keypair(token, b"worker")
    from zmq.utils import z85

    allowed = z85.decode(worker_pub)
    original = _installed.setdefault("original", (zmqrpc.Server, zmqrpc.Client))
    base_server, base_client = original

    class CurveServer(base_server):  # type: ignore[misc,valid-type]
        def __init__(self, host: str, port: int):
            zmqrpc.BaseSocket.__init__(self, zmqrpc.zmq.ROUTER, self.ipv4_only(host, port))
            _zap_handler(self.socket.context, allowed)
            self.socket.curve_server = True
            self.socket.curve_secretkey = master_sec
            self.socket.zap_domain = ZAP_DOMAIN
            if port == 0:
                self.port = self.socket.bind_to_random_port(f"tcp://{host}")
            else:
                try:
                    self.socket.bind(f"tcp://{host}:{int(port)}")
                    self.port = port
                except zmqrpc.zmqerr.ZMQError as e:
                    if e.errno != errno.EADDRINUSE:
                        raise zmqrpc.RPCError(f"Socket bind failure: {e}") from e
                    err = port_in_use(
                        "workers (the Locust master)",
                        f"{host}:{port}",
                        "master_bind; locust: --master-bind-port",
                    )
                    # Locust's main makes the runner outside any handler of ours: end here, said.
                    print(f"swarmscope: {err}", file=sys.stderr)
                    raise SystemExit(err.exit_code) from e

    class CurveClient(base_client):  # type: ignore[misc,valid-type]
        def __init__(self, host: str, port: int, identity: str):
            zmqrpc.BaseSocket.__init__(self, zmqrpc.zmq.DEALER, self.ipv4_only(host, port))
            self.socket.curve_serverkey = master_pub
            self.socket.curve_publickey = worker_pub
            self.socket.curve_secretkey = worker_sec
            self.socket.setsockopt(zmqrpc.zmq.IDENTITY, identity.encode())
            self.socket.connect(f"tcp://{host}:{int(port)}")

    zmqrpc.Server, zmqrpc.Client = CurveServer, CurveClient  # type: ignore[misc]
    _installed["token"] = token
    return True


def _zap_handler(ctx: Any, allowed: bytes) -> None:
    """Answer ZeroMQ's authentication requests in ``ctx``: only the worker key gets in."""
    import gevent
    import zmq.green as zmq

    sock = ctx.socket(zmq.REP)
    sock.linger = 0
    sock.bind("inproc://zeromq.zap.01")

    def serve() -> None:
        while True:
            try:
                frames = sock.recv_multipart()
            except zmq.ZMQError:
                return  # the context is closing
            version, request_id, domain, address, _identity, mechanism = frames[:6]
            creds = frames[6:]
            ok = (
                domain == ZAP_DOMAIN
                and mechanism == b"CURVE"
                and bool(creds)
                and hmac.compare_digest(creds[0], allowed)
            )
            if not ok:
                log.warning(
                    "locust master: refused a peer without the worker token (%s)",
                    address.decode(errors="replace"),
                )
            status = [b"200", b"OK"] if ok else [b"400", b"not a swarmscope worker"]
            sock.send_multipart([version, request_id, *status, b"worker" if ok else b"", b""])

    gevent.spawn(serve)
