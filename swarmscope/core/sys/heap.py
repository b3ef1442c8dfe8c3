"""The long-lived processes' heap: out of Python's full collections, and given back to the kernel.

    from swarmscope.core.sys.heap import freeze_setup_heap, trim
    freeze_setup_heap()     # once the process has imported and set up its driver; idempotent
    trim()                  # the probe, after start-up and after each window: free pages go back

A worker process imports Locust, gevent, grpc, OpenTelemetry, numpy and its kind's driver:
about 150,000 objects that live as long as the process. Python's full (oldest-generation)
collection walks every one of them each time it runs: measured at ~38 ms a collection in an
embedded ingress run (``docs/platform.md``), and while it runs no user greenlet sends a request,
so a step gets a gap in its load and latency samples that include the pause. ``gc.freeze()``
moves the objects alive at that moment into a permanent generation that collections skip, so a
full collection walks only what the load itself allocated.

Caveat: a reference cycle among frozen objects that becomes garbage later is never collected.
That is why this runs once per process, after setup, and never per window.

``trim()`` is for the probe (docs/probe.md): start-up (argument parsing, the program registry,
the loader's manifest, the TLS handshake) leaves free chunks scattered in glibc's heaps that
``free()`` keeps, about 2.5 MiB of its RSS in the chart's pod; ``malloc_trim(0)`` returns every
free page to the kernel. Caveat: glibc only (a libc without ``malloc_trim``: a no-op).
"""

from __future__ import annotations

import ctypes
import gc

_frozen = False


def freeze_setup_heap() -> int:
    """Collect once, then freeze what is left; returns how many objects were frozen (0 if this
    process already did it)."""
    global _frozen
    if _frozen:
        return 0
    _frozen = True
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


_libc: ctypes.CDLL | None = None


def trim() -> bool:
    """Give glibc's free heap pages back to the kernel (``malloc_trim(0)``); True if it freed any.

    Costs about a millisecond on the probe's heap; the probe calls it off its response path."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    fn = getattr(_libc, "malloc_trim", None)
    return bool(fn(0)) if fn is not None else False
