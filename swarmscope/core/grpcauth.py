"""Token check and call-rate cap for swarmscope's own gRPC services, as interceptors.

    server = grpc.server(pool, interceptors=[Guard(token, calls_per_s=5000)])   # every method
    channel = token_channel("127.0.0.1:7000", token, options=[...])           # every call sends it

The check is the probe fleet's (``swarmscope.core.auth``: the shared token in the
``x-swarmscope-token`` metadata, compared in constant time by ``auth.token_matches``), applied
to every method of a service at once, so a method added later cannot be left open. A call
without the token ends UNAUTHENTICATED before the method runs; a call over the rate cap ends
RESOURCE_EXHAUSTED (a token bucket shared by all peers: ``calls_per_s`` sustained, ``burst`` at
once), so a flood of calls costs the server a metadata check each, not a database write.

Caveats: the token travels in plaintext unless the channel is TLS (the neighbor control plane
listens on loopback or inside the run's own namespace). When the fleet's authentication
changes (issue 18, finding 3), it changes here for every service that uses this module.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from swarmscope.core import auth


class RateLimit:
    """A token bucket: ``take()`` is True while the rate (and burst) allow one more call."""

    def __init__(self, per_s: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.per_s = float(per_s)
        self.burst = float(burst if burst is not None else max(1.0, per_s))
        self._clock = clock
        self._tokens = self.burst
        self._t = clock()
        self._lock = threading.Lock()
        self.refused = 0

    def take(self, n: float = 1.0) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._t) * self.per_s)
            self._t = now
            if self._tokens >= n:
                self._tokens -= n
                return True
            self.refused += 1
            return False


def _refusing(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, detail: str) -> grpc.RpcMethodHandler:
    """The same kind of handler as ``handler`` (unary/stream on either side), aborting at once."""

    def abort(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, detail)

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort, **kwargs)
    return grpc.unary_unary_rpc_method_handler(abort, **kwargs)


class Guard(grpc.ServerInterceptor):
    """Server side: the token on every call, then the call-rate cap (None: no cap)."""

    def __init__(self, token: str, calls_per_s: float | None = None, burst: float | None = None):
        if not token:
            raise ValueError("a guarded service needs a token")
        self.token = token
        self.limit = RateLimit(calls_per_s, burst) if calls_per_s else None
        self.denied = 0

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:  # fmt: skip
        handler = continuation(details)
        if handler is None:  # unknown method: gRPC answers UNIMPLEMENTED
            return None
        given = dict(details.invocation_metadata or ()).get(auth.TOKEN_HEADER)
        if not auth.token_matches(self.token, given if isinstance(given, str) else None):
            self.denied += 1
            return _refusing(handler, grpc.StatusCode.UNAUTHENTICATED, "bad or missing swarmscope token")
        if self.limit is not None and not self.limit.take():
            return _refusing(handler, grpc.StatusCode.RESOURCE_EXHAUSTED, "call rate over the server's cap")
        return handler


class _Details(
    collections.namedtuple(
        "_Details", ["method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"]
    ),
    grpc.ClientCallDetails,
):
    pass


class _AddToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, token: str):
        self.token = token

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        md = [*(d.metadata or ()), (auth.TOKEN_HEADER, self.token)]
        return _Details(d.method, d.timeout, md, d.credentials, d.wait_for_ready, d.compression)

    def intercept_unary_unary(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._details(d), request)

    def intercept_unary_stream(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._details(d), request)

    def intercept_stream_unary(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._details(d), requests)

    def intercept_stream_stream(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._details(d), requests)


def token_channel(address: str, token: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A channel whose every call carries ``token`` (for a service behind :class:`Guard`)."""
    return grpc.intercept_channel(grpc.insecure_channel(address, options=options or []), _AddToken(token))
