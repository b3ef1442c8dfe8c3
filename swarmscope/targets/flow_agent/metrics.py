"""The reference flow agent's own metrics, in Prometheus text, under the write-up's names.

    sock = listening_socket()                     # the collector's side: 127.0.0.1, a free port
    serve(agent, sock.fileno())                   # the agent's side (agent.py --metrics-fd)
    # GET http://127.0.0.1:<port>/metrics ->
    #   netobserv_agent_evictions_total{component="hashmap"} 3.0
    #   netobserv_agent_evicted_flows_total{component="accounter"} 120.0
    #   netobserv_agent_dropped_flows_total 0.0
    #   netobserv_agent_buffer_size{name="hashmap-unique"} 2000.0   (and hashmap-total, accounter)
    #   netobserv_agent_ringbuf_hashmap_ratio 0.06

Counters are cumulative over the agent's life (a window is the increase between two scrapes,
as Prometheus reads any counter); the two gauges are the current window's (largest map and
accounter occupancy seen at an eviction; ring buffer over hashmap evicted flows, absent before
the hashmap evicted anything). The socket is made by the process that starts the agent and
passed down as a file descriptor, because the agent runs inside the flow storm's namespace,
whose loopback the scraper (in the host namespace) cannot reach. Caveat: a scrape reads the
agent's counters from another thread, unlocked; a scrape taken between ``flush`` and the next
``start`` (the flow storm's) sees them at rest.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

from prometheus_client.registry import Collector

from swarmscope.probes import selfmetrics
from swarmscope.probes.selfmetrics import BoundedHTTPServer

PREFIX = "netobserv_agent_"
COMPONENTS = ("hashmap", "accounter", "exporter")


def listening_socket() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 at a port the kernel picks (never a fixed one)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.set_inheritable(True)
    return s


class AgentCollector(Collector):
    """prometheus_client collector over an agent's ``totals`` and current ``win``."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        t, w = self.agent.totals, self.agent.win
        per = ["component"]
        ev = CounterMetricFamily(PREFIX + "evictions", "Eviction events, per component", labels=per)
        fl = CounterMetricFamily(PREFIX + "evicted_flows", "Evicted flows, per component", labels=per)
        for c in COMPONENTS:
            ev.add_metric([c], t["evictions"][c])
            fl.add_metric([c], t["evicted_flows"][c])
        yield ev
        yield fl
        yield CounterMetricFamily(PREFIX + "dropped_flows", "Dropped: ring buffer full", value=t["dropped"])
        bs = GaugeMetricFamily(PREFIX + "buffer_size", "Largest occupancy at an eviction, this window",
                               labels=["name"])  # fmt: skip
        for name, v in w.buffer_sizes.items():
            bs.add_metric([name], v)
        yield bs
        ratio = w.summary()["ringbuf_hashmap_ratio"]
        if ratio is not None:
            doc = "Ring buffer / hashmap evicted flows, this window"
            yield GaugeMetricFamily(PREFIX + "ringbuf_hashmap_ratio", doc, value=ratio)


def serve(agent: Any, fd: int) -> BoundedHTTPServer:
    """Serve ``/metrics`` on the inherited listening socket ``fd``, from a daemon thread (the
    probe's bounded server: a scraper that hangs up mid-reply is dropped quietly, not a traceback
    on the run's terminal)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))
    return selfmetrics.serve(registry, 0, fd=fd)
