"""The prometheus tracer adapter against a real HTTP /metrics endpoint."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from swarmscope.controller.tracers import NodeKey, make_tracer
from swarmscope.controller.tracers.base import tracer_config
from swarmscope.core.errors import ConfigError, TracerError
from swarmscope.kinds import get_kind


@pytest.fixture
def exporter():
    reg = CollectorRegistry()
    execs = Counter("gadget_exec_events", "exec events seen", ["node"], registry=reg)
    lost = Counter("gadget_lost_events", "events lost", registry=reg)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    yield f"http://127.0.0.1:{server.server_port}/metrics", execs, lost
    server.shutdown()


def test_counts_the_increase_per_node_and_the_losses(exporter) -> None:
    url, execs, lost = exporter
    execs.labels("ss-n1").inc(500)  # before the window: not counted
    t = make_tracer(
        tracer_config(
            tracer="prometheus", tracer_prom_url=url, tracer_prom_metric="gadget_exec_events_total",
            tracer_prom_label="node", tracer_prom_lost_metric="gadget_lost_events",
        )
    )  # fmt: skip
    assert t is not None
    t.start("w1", [NodeKey("n1", cgroup_id=11, comm="ss-n1"), NodeKey("n2", cgroup_id=12, comm="ss-n2")])
    execs.labels("ss-n1").inc(17)
    execs.labels("12").inc(5)  # by cgroup id
    execs.labels("somebody-else").inc(3)
    lost.inc(2)
    res = t.stop()
    assert res.per_node == {"n1": 17, "n2": 5}
    assert res.other == 3 and res.lost == 2 and res.error == ""


def test_a_counter_that_goes_down_is_an_error_not_a_negative_count(exporter) -> None:
    url, execs, _ = exporter
    t = make_tracer(
        tracer_config(tracer="prometheus", tracer_prom_url=url, tracer_prom_metric="gadget_exec_events")
    )
    assert t is not None
    execs.labels("n1").inc(10)
    t.start("w1", [NodeKey("n1")])
    execs.labels("n1")._value.set(4)  # the tracer restarted
    res = t.stop()
    assert res.per_node == {"n1": 0} and "went down" in res.error


def test_unreachable_endpoint_is_a_tracer_error() -> None:
    t = make_tracer(
        tracer_config(
            tracer="prometheus", tracer_prom_url="http://127.0.0.1:9/metrics", tracer_prom_metric="x"
        )
    )
    assert t is not None
    with pytest.raises(TracerError, match="cannot scrape"):
        t.start("w", [NodeKey("n1")])


def test_schema_requires_url_and_metric() -> None:
    with pytest.raises(ConfigError) as ei:
        get_kind("exec_storm").schema.load(sets=["tracer=prometheus"], env={})
    assert {p.key for p in ei.value.problems} == {"tracer_prom_url", "tracer_prom_metric"}
