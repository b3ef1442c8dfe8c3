"""The ``prometheus`` tracer under test: a counter the system exposes, before and after the window.

    tracer: prometheus
    tracer_prom_url: http://127.0.0.1:9100/metrics
    tracer_prom_metric: gadget_exec_events_total     # a counter (or any monotonic sample)
    tracer_prom_label: node                           # label whose value names the node

Reported per node = the counter's increase over the window, summed over the samples whose
``tracer_prom_label`` value is the node's name, comm or cgroup id. Without a label every sample
counts for the window's only node (a tracer that exports one total). A counter that goes down
(the tracer restarted) is an error, never a negative count. Losses: if ``tracer_prom_lost_metric``
is given, its increase is ``lost``; otherwise the tracer cannot say (None).

Caveat: a scrape is a snapshot; a tracer that exports with a delay (batching, a push gateway)
must be given ``tracer_prom_settle_s`` to catch up before the closing scrape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from swarmscope.controller.tracers.base import NodeKey, TracerConfig, TracerResult, register_tracer
from swarmscope.core.config import Config, Field
from swarmscope.core.errors import TracerError
from swarmscope.core.sys.promscrape import Samples, scrape


class PrometheusTracer:
    name = "prometheus"

    def __init__(self, url: str, metric: str, label: str | None, lost_metric: str | None, settle_s: float):
        self.url, self.metric, self.label = url, metric, label
        self.lost_metric, self.settle_s = lost_metric, settle_s
        self._nodes: list[NodeKey] = []
        self._before: Samples = {}
        self._lost_before: Samples = {}

    def start(self, window_id: str, nodes: list[NodeKey]) -> None:
        if self.label is None and len(nodes) != 1:
            raise TracerError(
                f"tracer_prom_label is needed to split {self.metric} over {len(nodes)} nodes "
                "(without it the counter is one total, for a single node)"
            )
        self._nodes = list(nodes)
        self._before = scrape(self.url, self.metric)
        self._lost_before = scrape(self.url, self.lost_metric) if self.lost_metric else {}

    def _node_of(self, labels: tuple[tuple[str, str], ...]) -> str | None:
        if self.label is None:
            return self._nodes[0].name
        value = dict(labels).get(self.label)
        for n in self._nodes:
            if value in (n.name, n.comm, str(n.cgroup_id) if n.cgroup_id else None):
                return n.name
        return None

    def stop(self) -> TracerResult:
        if self.settle_s:
            time.sleep(self.settle_s)
        try:
            after = scrape(self.url, self.metric)
            lost_after = scrape(self.url, self.lost_metric) if self.lost_metric else {}
        except TracerError as e:
            return TracerResult({n.name: 0 for n in self._nodes}, None, 0, 0, [], error=str(e))
        per_node = {n.name: 0 for n in self._nodes}
        other, errors = 0, []
        for labels, value in after.items():
            delta = value - self._before.get(labels, 0.0)
            if delta < 0:
                errors.append(
                    f"{self.metric}{dict(labels)} went down ({self._before[labels]} -> {value}): restarted?"
                )
                continue
            node = self._node_of(labels)
            if node is None:
                other += int(delta)
            else:
                per_node[node] += int(delta)
        lost = None
        if self.lost_metric:
            lost = int(sum(v - self._lost_before.get(k, 0.0) for k, v in lost_after.items()))
        return TracerResult(
            per_node, lost, 0, len(after), errors[:5], error="; ".join(errors[:1]), other=other
        )


# The prometheus adapter (controller/tracers/prometheus.py): a counter scraped around the window.
FIELDS = [
    Field("tracer_prom_url", str, "", "prometheus tracer: the /metrics URL to scrape"),
    Field("tracer_prom_metric", str, "", "prometheus tracer: the counter of reported events"),
    Field(
        "tracer_prom_label",
        str,
        "",
        "prometheus tracer: label whose value is the node (name, comm or cgroup id)",
    ),
    Field(
        "tracer_prom_lost_metric", str, "", "prometheus tracer: a counter of events the tracer says it lost"
    ),
    Field(
        "tracer_prom_settle_s",
        float,
        0.0,
        "prometheus tracer: wait before the closing scrape",
        min=0,
        max=600,
    ),
]


class PromOptions(Config):
    """The prometheus tracer's own options, typed."""

    tracer_prom_url: str
    tracer_prom_metric: str
    tracer_prom_label: str
    tracer_prom_lost_metric: str
    tracer_prom_settle_s: float


def _check(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (k, "is required when tracer is 'prometheus'")
        for k in ("tracer_prom_url", "tracer_prom_metric")
        if not values.get(k)
    ]


@register_tracer("prometheus", FIELDS, PromOptions, _check)
def _make(cfg: TracerConfig, sentinel: str | None) -> PrometheusTracer:
    del sentinel  # scraped, not exec-triggered: no sentinel
    o = cast(PromOptions, cfg)  # the scenario's config carries every registered tracer's options
    return PrometheusTracer(
        url=o.tracer_prom_url,
        metric=o.tracer_prom_metric,
        label=o.tracer_prom_label or None,
        lost_metric=o.tracer_prom_lost_metric or None,
        settle_s=float(o.tracer_prom_settle_s or 0.0),
    )
