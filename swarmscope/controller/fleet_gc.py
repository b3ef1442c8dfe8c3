"""The fleet process's garbage collector: a slower pace, and no collection while a window's
messages are in flight.

    spare_gc()                      # at Fleet.start: thresholds (200000, 20, 10)
    with gc_held():                 # around a window's open (to the last ack) or close
        ...                         # (to the last reading): no automatic collection here
    collect_young()                 # once the probes have joined, before the first window

Why: a window's open or close puts one command on every probe's stream at once, and grpc.aio
keeps ~14 container objects alive per write (and as many per read) until its completion comes
back. Collections that fire mid-burst find all of them alive: each is traced, promoted, and
traced again by the older generations, though reference counting frees every one a moment
later. At 10,000 simulated probes that was about a fifth of the controller's CPU (docs/scale-out.md,
"Where the 60 µs went"). Held, the collector catches up once, when the burst is over.

Caveat: process-wide (the collector is). Holds nest and count across threads and fleets; a
process that disabled the collector itself is left alone. Garbage cycles made during a burst
live until it ends; a hold never outlives its window's timeout.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Python's default collection thresholds, and the fleet's (spare_gc).
_GC_DEFAULT = (700, 10, 10)
_GC_FLEET = (200_000, 20, 10)

_lock = threading.Lock()
_holds = 0  # open holds in this process; the collector is disabled while > 0 (and was enabled)


def spare_gc() -> None:
    """Collect garbage less often in a process that holds a fleet, unless it set its own pace.

    Every message on every stream allocates futures and callbacks, and with thousands of probes
    the long-lived heap (their states, tasks and calls) is large, so Python's default pace
    (a young collection every 700 allocations, a full one often) spent about a quarter to a
    third of the controller's CPU on collections (measured with py-spy at 1,000 and 10,000
    simulated probes). Caveat: process-wide; garbage cycles live longer, memory not freed by
    reference counting is reclaimed later."""
    if gc.get_threshold() == _GC_DEFAULT:
        gc.set_threshold(*_GC_FLEET)


@contextmanager
def gc_held() -> Iterator[None]:
    """No automatic collection inside (see the module's docstring): the first hold disables the
    collector if it was enabled, the last one out enables it again."""
    global _holds
    with _lock:
        if _holds == 0 and not gc.isenabled():
            took = False  # the process runs without automatic collection: not ours to change
        else:
            took = True
            _holds += 1
            if _holds == 1:
                gc.disable()
    try:
        yield
    finally:
        if took:
            with _lock:
                _holds -= 1
                if _holds == 0:
                    gc.enable()


def collect_young() -> None:
    """Collect the young generations now, unless a hold is open or the collector is off.

    Called once the probes have joined (``Fleet.wait_for_probes``): the join leaves ~20
    surviving objects per probe (its state, its stream's pending read) in the young generation.
    Left there, the collection they call for is deferred by the first window's holds to the end
    of its close: ~150 ms added to that close at 10,000 probes, every run (docs/scale-out.md).
    Collected here, before any window, they are promoted once and the windows' own garbage stays
    under the young threshold."""
    with _lock:
        if _holds or not gc.isenabled():
            return
    gc.collect(1)


def gc_holds() -> int:
    """Holds open now (tests)."""
    return _holds
