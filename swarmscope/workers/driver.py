"""The worker side of a scenario kind: the driver a Locust worker runs windows with.

    driver = kind.make_driver(cfg, sim_nodes=2, prefix="p123")   # on swarmscope:setup
    driver.describe()          # the nodes it drives, sent to the master
    driver.run_window("w1", ["n1", "n2"], payload, environment)  # -> {node: exact results}
    driver.close()

One driver per worker process, made from the config the master sent (a worker reads no
scenario file). ``run_window`` blocks (gevent-friendly) until the window's load is done and
returns what it generated, exactly; in free-running ``locust -f`` tests the kind's Locust users
count into ``current_window`` and the plug-in calls ``stop_window`` then ``take`` at test stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol


class Driver(Protocol):
    current_window: str  # free-running tests: the window users count into ("" = none)

    def describe(self) -> list[dict[str, Any]]:
        """Nodes: [{"name", "host", "cgroup_id", "cgroup_path", "comm"}]."""
        ...

    def info(self) -> dict[str, Any]:
        """What the controller needs from this worker's set-up (e.g. a target's address)."""
        ...

    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any
    ) -> dict[str, Any]:
        """Run one window's load on the listed nodes this worker owns; {node: results}."""
        ...

    def stop_window(self, window_id: str) -> None:
        """Stop what still runs for the window (test stop) and count it."""
        ...

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        """Remove and return {node: results} of a window."""
        ...

    def close(self) -> None: ...


def report_request(
    environment: Any, request_type: str, name: str, t0: float | None, count: int, exc: BaseException | None
) -> None:
    """Tell Locust about one unit of load (a burst, a batch): its stats table and listeners see it
    as one request of ``request_type``/``name`` that took since ``t0`` (``time.perf_counter()``;
    None: 0 ms) and carried ``count`` (the response length: execs, entries, packets)."""
    if environment is None:
        return
    elapsed_ms = 0.0 if t0 is None else (time.perf_counter() - t0) * 1000
    environment.events.request.fire(
        request_type=request_type,
        name=name,
        response_time=elapsed_ms,
        response_length=int(count),
        exception=exc,
        context={},
    )


def recorded_call(
    environment: Any, driver: Any, request_type: str, name: str, call: Callable[[Any, Callable], dict]
) -> None:
    """One task of a Locust user whose driver counts in windows: wait for the window, run
    ``call(window, record)`` (``record`` keeps partial results, as a stop can cut the call), record
    its result and tell Locust (``report_request``: ``generated`` is the count)."""
    import gevent

    window = driver.current_window
    if not window:
        gevent.sleep(0.05)  # the window opens at test start; a worker may see users first
        return
    t0 = time.perf_counter()
    exc: Exception | None = None
    res: dict[str, Any] = {}
    try:
        res = call(window, lambda r: driver.record(window, r))
        driver.record(window, res)
    except Exception as e:
        exc = e
    report_request(environment, request_type, name, t0, int(res.get("generated", 0)), exc)
