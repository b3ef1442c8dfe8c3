"""Scrape a Prometheus text endpoint: the project's one parse of the exposition format.

    samples = scrape_all("http://127.0.0.1:9100/metrics")   # {"x_total": {labels: value}}
    counts = scrape(url, "gadget_exec_events_total")        # one metric, a counter's _total too

Used by the ``prometheus`` tracer under test (controller side) and by the flow storm's scrape of
its agent (worker side), so it sits in the core layer both import. Errors are TracerError.
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from swarmscope.core.errors import TracerError

Samples = dict[tuple[tuple[str, str], ...], float]


def scrape_all(url: str, timeout_s: float = 5.0) -> dict[str, Samples]:
    """Every sample ``url`` serves, by sample name (``x_total``, not the family ``x``):
    {name: {labels: value}}. The one Prometheus text parse of the project (the flow storm
    scrapes its agent with it too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError as e:
        raise TracerError(f"cannot scrape {url}: {e}") from e
    out: dict[str, Samples] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
    except ValueError as e:
        raise TracerError(f"{url} did not serve Prometheus text: {e}") from e
    return out


def scrape(url: str, metric: str, timeout_s: float = 5.0) -> Samples:
    """Every sample of ``metric`` (a counter's ``_total`` included) as {labels: value}."""
    names = {metric, metric.removesuffix("_total"), metric + "_total"}
    out: Samples = {}
    for name, samples in scrape_all(url, timeout_s).items():
        if name in names:
            out.update(samples)
    return out
