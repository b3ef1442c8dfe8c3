"""The Arion agent benchmark's published figures, the reference the neighbor sweep is read against
(docs/neighbors.md). Data only: results.py and summary.py both read it.
"""

from __future__ import annotations

# Arion's published per-neighbor figures (µs): the ArionAgent performance README.
ARION_US: dict[str, dict[int, float]] = {
    "list_program": {
        1: 15,
        5: 12.2,
        100: 10,
        500: 9.6,
        1000: 9.5,
        5000: 9.8,
        10000: 9.36,
        50000: 7.08,
        100000: 6.01,
        500000: 5.85,
        1000000: 5.89,
    },
    "write_watch_program": {5: 180, 100: 150, 1000: 60, 10000: 74.8, 100000: 38, 1000000: 39},
    # "the watch only 100k neighbors latency of 380ms": received by the agent, not programmed.
    "watch_only": {100000: 3.8},
}
# The master side's own figures in the same README ("for 100 gateway nodes cluster"): remote
# get 0.3 ms and write 1 ms per neighbor, and "single-digit us watch latency per state" (< 10).
ARION_MASTER_US = {"get_us": 300.0, "write_us": 1000.0, "watch_per_state_us": 10.0}
