"""A worker's own spans: one per burst, request step or neighbor batch, children of the window
span the controller named in the run message's W3C ``traceparent``.

    with spans.window(window_id, traceparent) as w:       # the plug-in, around run_window
        ... driver: spans.record(window_id, "burst n1", start_ns, end_ns, {"swarmscope.generated": 5})
    blob = w.take()        # OTLP request bytes: sent back in the result message

Spans are made by this process's own provider (service ``swarmscope-worker``), buffered per
window and sent back with the window's results, so the run's trace.json has them with no OTLP
endpoint; with one set (``OTEL_*``) they are exported from here too. Times are wall-clock ns;
:func:`wall_ns` converts a CLOCK_MONOTONIC time (the clock of bpf_ktime and of the neighbor
driver) taken on this host.

Caveats: a window without a traceparent (``locust -f`` free-running tests) records no spans,
since they would have no parent in the run's trace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.context import Context

from swarmscope.core.node import node_host
from swarmscope.core.sys import otel
from swarmscope.core.sys.otlpjson import WINDOW_ATTR, WindowSpans

_lock = threading.Lock()
_buf: WindowSpans | None = None
_parents: dict[str, Context] = {}
_begun: dict[str, int] = {}  # window_id -> wall ns when a free-running window began here


def _spans() -> WindowSpans:
    global _buf
    with _lock:
        if _buf is None:
            _buf = WindowSpans("swarmscope-worker", {"host.name": node_host()})
        return _buf


class _Window:
    def __init__(self, window_id: str):
        self.window_id = window_id

    def take(self) -> bytes:
        """This window's finished spans as OTLP request bytes (b"" without a traceparent)."""
        return _spans().take(self.window_id) if _buf is not None else b""


@contextmanager
def window(window_id: str, traceparent: str) -> Iterator[_Window]:
    """While the block runs, spans recorded for ``window_id`` are children of ``traceparent``."""
    parent = otel.extract(traceparent)
    if parent is not None:
        with _lock:
            _parents[window_id] = parent
    try:
        yield _Window(window_id)
    finally:
        with _lock:
            _parents.pop(window_id, None)


def begin(window_id: str, traceparent: str) -> None:
    """A free-running window (Locust's own start/stop: the chart's controller) starts on this
    worker: what is recorded for it until :func:`finish` is a child of ``traceparent``."""
    parent = otel.extract(traceparent)
    with _lock:
        _begun[window_id] = time.time_ns()
        if parent is not None:
            _parents[window_id] = parent


def finish(window_id: str, per_node: Mapping[str, Mapping[str, Any]]) -> bytes:
    """End a free-running window: one ``load <node>`` span per node, from :func:`begin` to now,
    with its tally; returns the window's spans as OTLP request bytes (b"" without a traceparent)."""
    end = time.time_ns()
    with _lock:
        start = _begun.pop(window_id, end)
    for node, t in per_node.items():
        attrs = {f"swarmscope.{k}": t.get(k) for k in ("generated", "failed", "rate")}
        record(window_id, f"load {node}", start, end, {"swarmscope.node": node, **attrs})
    blob = _Window(window_id).take()
    with _lock:
        _parents.pop(window_id, None)
    return blob


def record(
    window_id: str,
    name: str,
    start_ns: int,
    end_ns: int,
    attrs: Mapping[str, Any] | None = None,
    events: list[tuple[str, int, Mapping[str, Any]]] | None = None,
) -> None:
    """A finished span of ``window_id`` (no-op when the window has no traceparent)."""
    with _lock:
        parent = _parents.get(window_id)
    if parent is None:
        return
    span = _spans().tracer.start_span(
        name,
        context=parent,
        start_time=int(start_ns),
        attributes={WINDOW_ATTR: window_id, **{k: v for k, v in (attrs or {}).items() if v is not None}},
    )
    for ev_name, t_ns, ev_attrs in events or []:
        span.add_event(ev_name, attributes=dict(ev_attrs), timestamp=int(t_ns))
    span.end(end_time=int(end_ns))


def wall_ns(monotonic_ns: int) -> int:
    """A CLOCK_MONOTONIC time of this host as wall-clock ns (offset as of now)."""
    return int(monotonic_ns) + time.time_ns() - time.monotonic_ns()
