"""Keep a load generator's long-lived setup heap out of Python's full garbage collections.

    from swarmscope.core.sys.heap import freeze_setup_heap
    freeze_setup_heap()     # once the process has imported and set up its driver; idempotent

A worker process imports Locust, gevent, grpc, OpenTelemetry, numpy and its kind's driver:
about 150,000 objects that live as long as the process. Python's full (oldest-generation)
collection walks every one of them each time it runs: measured at ~38 ms a collection in an
embedded ingress run (``docs/platform.md``), and while it runs no user greenlet sends a request,
so a step gets a gap in its load and latency samples that include the pause. ``gc.freeze()``
moves the objects alive at that moment into a permanent generation that collections skip, so a
full collection walks only what the load itself allocated.

Caveat: a reference cycle among frozen objects that becomes garbage later is never collected.
That is why this runs once per process, after setup, and never per window.
"""

from __future__ import annotations

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
