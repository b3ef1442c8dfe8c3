"""Locust master/worker authentication: ZeroMQ CURVE, a master key only the master holds.

    # master: its own key pair (a file that does not exist yet is made, public key in <file>.pub)
    SWARMSCOPE_WORKER_TOKEN_FILE=wtok SWARMSCOPE_MASTER_KEY_FILE=master.key locust -f … --master
    # workers: the token (their key pair) and the master's public key only
    SWARMSCOPE_WORKER_TOKEN_FILE=wtok SWARMSCOPE_MASTER_PUBLIC_KEY_FILE=master.key.pub locust -f … --worker

Locust's master port (ZeroMQ) accepts any peer, and a peer that joins can take users and send
``swarmscope:*`` messages (nodes, results) that change the run's numbers. With a worker token
set, both ends of Locust's socket use CURVE. The master proves a key pair of its own, whose
secret half only the master holds (``$SWARMSCOPE_MASTER_KEY_FILE``, or made in memory
for one ``swarmscope run``); workers hold its public key only, so a worker token does not let anyone act
as the master. Workers prove the key pair derived from the worker token (HMAC-SHA256), which the
master's ZAP handler admits. A peer without the token fails the handshake: it never joins
(``worker_count`` stays 0) and nothing it sends reaches Locust or swarmscope. The master takes a
message's sender from the connection (ZeroMQ's routing id), never from the message, so a worker
cannot send as another; which nodes a worker may speak for is the controller's check
(``controller.role``).

Keys are Z85 text (ZeroMQ's own) or, as the Helm chart generates them, an Ed25519 PEM private
key (the master) and its certificate or public key (the workers), converted to Curve25519 as
libsodium does. ``swarmscope run --set mode=distributed`` makes both per run and gives the
workers it starts the token and the public key through their environment. Caveat: it patches
``locust.rpc.zmqrpc.Server``/``Client`` (Locust has no hook for socket options); all workers of
a run share the token's key pair, so the master tells them apart by connection, not by key.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import logging
import os
import re
import sys
from typing import Any

from swarmscope.core.errors import SetupError, SwarmscopeError
from swarmscope.core.sys.ports import port_in_use

log = logging.getLogger(__name__)

ENV_TOKEN = "SWARMSCOPE_WORKER_TOKEN"
ENV_TOKEN_FILE = "SWARMSCOPE_WORKER_TOKEN_FILE"
ENV_MASTER_KEY_FILE = "SWARMSCOPE_MASTER_KEY_FILE"
ENV_MASTER_PUBLIC = "SWARMSCOPE_MASTER_PUBLIC_KEY"
ENV_MASTER_PUBLIC_FILE = "SWARMSCOPE_MASTER_PUBLIC_KEY_FILE"
ZAP_DOMAIN = b"swarmscope"
_installed: dict[str, Any] = {}

# DER prefixes of an Ed25519 PKCS#8 private key and SubjectPublicKeyInfo (RFC 8410): 32 key bytes follow.
_ED25519_PKCS8 = bytes.fromhex("302e020100300506032b657004220420")
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")
_P = 2**255 - 19


def load_token() -> str:
    """The token from ``$SWARMSCOPE_WORKER_TOKEN_FILE``, else ``$SWARMSCOPE_WORKER_TOKEN``; "" if none."""
    from swarmscope.core.auth import read_secret

    path = os.environ.get(ENV_TOKEN_FILE)
    tok = read_secret(path, ENV_TOKEN, "the worker token")
    if path and not tok:
        raise SetupError(f"the worker token file {path} is empty")
    return tok


def worker_keypair(token: str) -> tuple[bytes, bytes]:
    """(public, secret) CURVE keys, Z85, every worker of the token proves."""
    import zmq
    from zmq.utils import z85

    seed = hmac.new(token.encode(), b"swarmscope/v1 locust worker", hashlib.sha256).digest()
    secret = z85.encode(seed)
    return zmq.curve_public(secret), secret


def new_master_key() -> tuple[bytes, bytes]:
    """A fresh (public, secret) master key pair, Z85."""
    import zmq

    return zmq.curve_keypair()


def _pem(text: str, labels: tuple[str, ...]) -> bytes | None:
    m = re.search(r"-----BEGIN ([A-Z ]+)-----(.*?)-----END \1-----", text, re.S)
    if m is None or m.group(1) not in labels:
        return None
    try:
        return base64.b64decode("".join(m.group(2).split()), validate=True)
    except ValueError:
        return None


def _z85_key(text: str) -> bytes | None:
    from zmq.utils import z85

    if len(text) != 40:
        return None
    try:
        z85.decode(text.encode())
    except (ValueError, KeyError, IndexError):
        return None
    return text.encode()


def parse_secret(text: str, where: str) -> bytes:
    """The master's CURVE secret key (Z85) from Z85 text or an Ed25519 PEM private key."""
    from zmq.utils import z85

    key = _z85_key(text.strip())
    if key is not None:
        return key
    der = _pem(text, ("PRIVATE KEY",))
    if der is not None and der.startswith(_ED25519_PKCS8) and len(der) == len(_ED25519_PKCS8) + 32:
        return z85.encode(hashlib.sha512(der[-32:]).digest()[:32])  # the X25519 scalar of the seed
    raise SetupError(f"{where}: not a master key (40 characters of Z85, or an Ed25519 PEM private key)")


def parse_public(text: str, where: str) -> bytes:
    """The master's CURVE public key (Z85) from Z85 text, or the Ed25519 key of a PEM certificate
    or public key (the Edwards point's y mapped to Montgomery u = (1 + y) / (1 - y))."""
    from zmq.utils import z85

    key = _z85_key(text.strip())
    if key is not None:
        return key
    der = _pem(text, ("CERTIFICATE", "PUBLIC KEY"))
    at = der.find(_ED25519_SPKI) if der is not None else -1
    if der is None or at < 0 or len(der) < at + len(_ED25519_SPKI) + 32:
        raise SetupError(
            f"{where}: not the master's public key (40 characters of Z85, or a PEM certificate "
            "or public key holding an Ed25519 key)"
        )
    start = at + len(_ED25519_SPKI)
    y = int.from_bytes(der[start : start + 32], "little") & ((1 << 255) - 1)
    u = (1 + y) * pow((1 - y) % _P, _P - 2, _P) % _P
    return z85.encode(u.to_bytes(32, "little"))


def master_secret(make: bool = False) -> bytes:
    """The master's secret key, from ``$SWARMSCOPE_MASTER_KEY_FILE`` (a file that does not exist
    yet is made, 0600, with the public key in ``<file>.pub``); without the variable and with
    ``make``, a fresh one kept in this process's memory only (never in the environment its
    children inherit), the same for the rest of the process."""
    if "master_secret" in _installed:
        return bytes(_installed["master_secret"])
    path = os.environ.get(ENV_MASTER_KEY_FILE, "")
    if not path and make:
        _installed["master_secret"] = new_master_key()[1]
        return bytes(_installed["master_secret"])
    if not path:
        raise SetupError(
            f"a worker token is set, so the Locust master needs its own key: set ${ENV_MASTER_KEY_FILE} "
            "(a file that does not exist yet is made, with the public key for the workers in <file>.pub)"
        )
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_secret(fh.read(), f"${ENV_MASTER_KEY_FILE} {path}")
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as e:
        raise SetupError(f"cannot read the master key {path}: {e}") from e
    public, secret = new_master_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secret + b"\n")
        with open(path + ".pub", "wb") as fh:
            fh.write(public + b"\n")
    except OSError as e:
        raise SetupError(f"cannot make the master key {path}: {e}") from e
    print(
        f"swarmscope: made the master key {path}; give the workers {path}.pub "
        f"(${ENV_MASTER_PUBLIC_FILE}={path}.pub)",
        file=sys.stderr,
    )
    return secret


def master_public() -> bytes:
    """The master's public key, for a worker: ``$SWARMSCOPE_MASTER_PUBLIC_KEY_FILE`` or ``…_KEY``."""
    from swarmscope.core.auth import read_secret

    path = os.environ.get(ENV_MASTER_PUBLIC_FILE)
    text = read_secret(path, ENV_MASTER_PUBLIC, "the master's public key")
    if not text:
        raise SetupError(
            f"a worker token is set, so a worker needs the master's public key: set "
            f"${ENV_MASTER_PUBLIC_FILE} (or ${ENV_MASTER_PUBLIC})"
        )
    return parse_public(text, f"${ENV_MASTER_PUBLIC_FILE} {path}" if path else f"${ENV_MASTER_PUBLIC}")


def _fail(e: SwarmscopeError) -> None:
    # Locust makes its runner outside any handler of ours: end here, said, without a traceback.
    print(f"swarmscope: {e}", file=sys.stderr)
    raise SystemExit(e.exit_code) from e


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
    from zmq.utils import z85

    worker_pub, worker_sec = worker_keypair(token)
    allowed = z85.decode(worker_pub)
    original = _installed.setdefault("original", (zmqrpc.Server, zmqrpc.Client))
    base_server, base_client = original

    class CurveServer(base_server):  # type: ignore[misc,valid-type]
        def __init__(self, host: str, port: int):
            try:
                secret = master_secret()
            except SwarmscopeError as e:
                _fail(e)
            zmqrpc.BaseSocket.__init__(self, zmqrpc.zmq.ROUTER, self.ipv4_only(host, port))
            _zap_handler(self.socket.context, allowed)
            self.socket.curve_server = True
            self.socket.curve_secretkey = secret
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
                    _fail(
                        port_in_use(
                            "workers (the Locust master)",
                            f"{host}:{port}",
                            "master_bind; locust: --master-bind-port",
                        )
                    )

        def recv_from_client(self) -> tuple[str, Any]:
            addr, msg = super().recv_from_client()
            if msg.node_id != addr:  # the sender is the authenticated connection, not its claim
                log.error(
                    "locust master: the worker connected as %s sent %s as %s: taken as %s's",
                    addr, msg.type, msg.node_id, addr,
                )  # fmt: skip
                msg.node_id = addr
            return addr, msg

    class CurveClient(base_client):  # type: ignore[misc,valid-type]
        def __init__(self, host: str, port: int, identity: str):
            try:
                master_pub = master_public()
            except SwarmscopeError as e:
                _fail(e)
            zmqrpc.BaseSocket.__init__(self, zmqrpc.zmq.DEALER, self.ipv4_only(host, port))
            self.socket.curve_serverkey = master_pub
            self.socket.curve_publickey = worker_pub
            self.socket.curve_secretkey = worker_sec
            self.socket.setsockopt(zmqrpc.zmq.IDENTITY, identity.encode())
            self._monitor = _say_failed_handshakes(self.socket, f"{host}:{port}")
            self.socket.connect(f"tcp://{host}:{int(port)}")

        def close(self, linger: int | None = None) -> None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
            super().close(linger=linger)

    zmqrpc.Server, zmqrpc.Client = CurveServer, CurveClient  # type: ignore[misc]
    _installed["token"] = token
    return True


def _say_failed_handshakes(sock: Any, where: str) -> Any:
    """Log why a worker's CURVE handshake with the master fails (ZeroMQ retries in silence):
    once, then at most every 30 s while it keeps failing. Returns the monitor socket."""
    import time

    import gevent
    import zmq.green as zmq
    from zmq.utils.monitor import recv_monitor_message

    failed = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    mon = sock.get_monitor_socket(failed | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def watch() -> None:
        said = -1e9
        while True:
            try:
                event = recv_monitor_message(mon)["event"]
            except zmq.ZMQError:
                return  # closed with the worker's socket
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                said = -1e9
            elif time.monotonic() - said >= 30.0:
                said = time.monotonic()
                why = (
                    "refused this worker (its worker token is not the master's)"
                    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                    else "did not prove the master key this worker holds "
                    f"(${ENV_MASTER_PUBLIC_FILE} / ${ENV_MASTER_PUBLIC}): not the run's master, "
                    "or another key"
                )
                log.error("locust worker: the master at %s %s; nothing is sent to it", where, why)

    gevent.spawn(watch)
    return mon


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
