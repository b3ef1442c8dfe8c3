"""The flow agent's exported metrics, scraped around a window (its Prometheus ``/metrics``).

    before = agent_metrics(agent.metrics_url)      # after the agent said the window started
    ...                                            # traffic; the agent's flush
    window_metrics(before, agent_metrics(url))
    # {"evictions": {"hashmap": 3, ...}, "evicted_flows": {...}, "dropped_flows": 0,
    #  "buffer_sizes": {"hashmap-total": 2000, "hashmap-unique": 2000, "accounter": 0},
    #  "ringbuf_hashmap_ratio": 0.0}

The same shape as the agent's own window summary (targets/flow_agent/agent.py), so the report
holds both side by side and a test compares them key by key. Counters are the increase over the
window (the prometheus tracer's reading, with its parser: core/sys/promscrape.py); the
gauges are read at the end. Caveat: a scrape that fails gives ``{"error": ...}``, not figures.
"""

from __future__ import annotations

from typing import Any

from swarmscope.core.errors import TracerError
from swarmscope.core.sys.promscrape import Samples, scrape_all

P = "netobserv_agent_"


def agent_metrics(url: str) -> dict[str, Samples]:
    return scrape_all(url)


def _by(samples: Samples, label: str) -> dict[str, float]:
    return {dict(k).get(label, ""): v for k, v in samples.items()}


def window_metrics(before: dict[str, Samples], after: dict[str, Samples]) -> dict[str, Any]:
    def delta(name: str, label: str) -> dict[str, int]:
        b = _by(before.get(P + name, {}), label)
        return {k: int(v - b.get(k, 0.0)) for k, v in _by(after.get(P + name, {}), label).items()}

    ratio = after.get(P + "ringbuf_hashmap_ratio", {}).get((), None)
    return {
        "evictions": delta("evictions_total", "component"),
        "evicted_flows": delta("evicted_flows_total", "component"),
        "dropped_flows": delta("dropped_flows_total", "")[""] if P + "dropped_flows_total" in after else None,
        "buffer_sizes": {k: int(v) for k, v in _by(after.get(P + "buffer_size", {}), "name").items()},
        "ringbuf_hashmap_ratio": ratio,
    }


def start_scrape(url: str) -> dict[str, Samples] | str:
    """The agent's metrics as the window starts, or why they could not be read."""
    try:
        return agent_metrics(url)
    except TracerError as e:
        return str(e)


def scraped_window(url: str, before: dict[str, Samples] | str) -> dict[str, Any]:
    """window_metrics against a fresh scrape of ``url``; a failed scrape is named, not raised."""
    if isinstance(before, str):
        return {"error": f"at the window's start: {before}"}
    try:
        return window_metrics(before, agent_metrics(url))
    except TracerError as e:
        return {"error": str(e)}
