"""The probe's waits between reconnects: jittered, so a fleet that lost its upstream at one
instant does not come back at one instant.

    waits = Backoff(base_s=0.5, cap_s=8.0, upstreams=2)
    waits.next(failures)    # seconds to wait after the ``failures``-th failed session in a row
    waits.reset()           # after a healthy session

Two rules. Moving on to the next upstream of a round (``failures`` not a multiple of
``upstreams``): a spread of ``[0, base_s]`` (full jitter; it used to be no wait at all, so every
probe of a dead relay registered with the next upstream in the same few milliseconds). After a
whole round failed: decorrelated jitter (each wait uniform in ``[base_s, 3 x the previous]``,
capped at ``cap_s``), so every wait stays within ``[base_s, cap_s]`` and the waits still grow
about as fast as the doubling they replace. ``rand(lo, hi)`` is injectable (tests); by default
``random.uniform`` of a generator of this object's own. Caveat: a spread does not lower how
many registrations an upstream takes in all, only how many arrive at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    def __init__(
        self,
        base_s: float,
        cap_s: float,
        upstreams: int = 1,
        rand: Callable[[float, float], float] | None = None,
    ):
        self.base_s = base_s
        self.cap_s = max(cap_s, base_s)
        self.upstreams = max(1, upstreams)
        self.rand = rand if rand is not None else random.Random().uniform
        self._last = base_s  # the previous wait after a failed round

    def reset(self) -> None:
        self._last = self.base_s

    def next(self, failures: int) -> float:
        if failures % self.upstreams:
            return self.rand(0.0, self.base_s)
        # Clamped: a rand that strays out of its range (or rounding) never leaves the bounds.
        wait = min(self.cap_s, max(self.base_s, self.rand(self.base_s, 3 * self._last)))
        self._last = wait
        return wait
