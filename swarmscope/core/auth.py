"""Shared-token authentication: a mutual challenge in which no key crosses the wire.

    key = node_key(tok, "nodeA")                       # the probe's: given it, or derived from tok
    pn = new_nonce()                                   # probe -> Hello(pn, node="nodeA")
    sn = new_nonce(); cp = controller_proof(key, pn, sn)   # controller (derives key) -> (sn, cp)
    check(controller_proof(key, pn, sn), cp)           # probe: the controller holds the token
    pp = probe_proof(key, sn, pn, probe_id)            # probe -> Register(pn, sn, pp) only now
    check(probe_proof(key, sn, pn, probe_id), pp)      # controller: the probe holds nodeA's key

A probe proves the key of the node it speaks for, derived from the fleet token: the controller
(and a relay) derive any node's, a probe given only its own node's key (the chart's probes)
cannot speak for another node. The probe answers nothing keyed until the controller has proven
itself, so an impostor controller learns a random nonce and nothing it can reuse; the
controller takes each server nonce once, so a captured answer cannot be replayed. The labels
keep a controller proof from ever passing as a probe proof or a node key.
``proof``/``verify``/``token_matches`` are the older single-direction helpers (kept for other
services). Tokens come from a file or an env var
(never a CLI argument, which other users can read in /proc).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from swarmscope.core.errors import SetupError

TOKEN_HEADER = "x-swarmscope-token"
TOKEN_ENV = "SWARMSCOPE_TOKEN"


def new_token() -> str:
    return secrets.token_urlsafe(32)


# Every nonce of the handshake is exactly this long: the fleet refuses others (an unauthenticated
# Hello must not choose how much the fleet keeps).
NONCE_BYTES = 16


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(token: str, nonce: bytes) -> bytes:
    return hmac.new(token.encode(), nonce, hashlib.sha256).digest()


def verify(token: str, nonce: bytes, given: bytes) -> bool:
    return hmac.compare_digest(proof(token, nonce), given)


CONTROLLER_LABEL = b"swarmscope/v1 controller"
PROBE_LABEL = b"swarmscope/v1 probe"
NODE_LABEL = b"swarmscope/v1 node "
NODE_KEY_ENV = "SWARMSCOPE_NODE_KEY"


def node_key(token: str, node: str) -> str:
    """The key a probe of ``node`` proves (hex). Node names are not secret; the key is."""
    return hmac.new(token.encode(), NODE_LABEL + node.encode(), hashlib.sha256).hexdigest()


def controller_proof(token: str, probe_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(token.encode(), CONTROLLER_LABEL + probe_nonce + server_nonce, hashlib.sha256).digest()


def probe_proof(token: str, server_nonce: bytes, probe_nonce: bytes, probe_id: str) -> bytes:
    msg = PROBE_LABEL + server_nonce + probe_nonce + probe_id.encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).digest()


def check(expected: bytes, given: bytes) -> bool:
    return hmac.compare_digest(expected, given)


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def read_secret(path: str | None, env: str, what: str) -> str:
    """A secret from the file ``path`` if given, else from ``$env``, stripped; "" if neither has one."""
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as e:
            raise SetupError(f"cannot read {what} file {path}: {e.strerror}") from e
    return os.environ.get(env, "").strip()


def load_token(path: str | None = None, env: str = TOKEN_ENV) -> str:
    """Read the token from ``path`` if given, else from ``$SWARMSCOPE_TOKEN``."""
    tok = read_secret(path, env, "token")
    if not tok:
        raise SetupError(f"no token: pass --token-file or set {env}")
    return tok
