"""Shared-token authentication between controller and probes (both directions).

    nonce = new_nonce()
    reply_proof = proof(token, nonce)          # controller computes, probe checks with verify()
    metadata = [(TOKEN_HEADER, token)]         # probe sends on every call; controller checks

The probe trusts only a controller that proves it holds the token; the controller accepts only
probes that present it. Tokens come from a file or an env var (never a CLI argument, which
other users can read in /proc).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from swarmscope.errors import SetupError

TOKEN_HEADER = "x-swarmscope-token"
TOKEN_ENV = "SWARMSCOPE_TOKEN"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def new_nonce() -> bytes:
    return secrets.token_bytes(16)


def proof(token: str, nonce: bytes) -> bytes:
    return hmac.new(token.encode(), nonce, hashlib.sha256).digest()


def verify(token: str, nonce: bytes, given: bytes) -> bool:
    return hmac.compare_digest(proof(token, nonce), given)


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def load_token(path: str | None = None, env: str = TOKEN_ENV) -> str:
    """Read the token from ``path`` if given, else from ``$SWARMSCOPE_TOKEN``."""
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                tok = fh.read().strip()
        except OSError as e:
            raise SetupError(f"cannot read token file {path}: {e.strerror}") from e
    else:
        tok = os.environ.get(env, "").strip()
    if not tok:
        raise SetupError(f"no token: pass --token-file or set {env}")
    return tok
