"""The reference flow agent's exported metrics, scraped by the flow storm, against its own word.

A real short `swarmscope run` (agent=reference, a map that holds every flow and one of 300
that does not): per window, the figures scraped from the agent's Prometheus ``/metrics``
(evictions and evicted flows per component, dropped flows, buffer sizes, the ring buffer /
hashmap ratio) equal, exactly, the ones the agent gives directly in its window summary. The
same run checks the reference agent per flow (kinds/flow_storm/perflow.py) from the flow
records it exported: exact, missing, split.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
from test_flow_exporters import _run
from test_flow_storm import _exact, root

from swarmscope.core.sys.promscrape import Samples
from swarmscope.kinds.flow_storm.scrape import agent_metrics, window_metrics

KEYS = ("evictions", "evicted_flows", "dropped_flows", "buffer_sizes", "ringbuf_hashmap_ratio")


def test_window_metrics_is_the_counters_increase_and_the_gauges_at_the_end() -> None:
    def s(**kv: float) -> Samples:
        return {((("component", k),) if k else ()): v for k, v in kv.items()}

    before = {"netobserv_agent_evictions_total": s(hashmap=4.0, exporter=4.0),
              "netobserv_agent_dropped_flows_total": {(): 7.0}}  # fmt: skip
    after = {"netobserv_agent_evictions_total": s(hashmap=9.0, exporter=10.0, accounter=1.0),
             "netobserv_agent_dropped_flows_total": {(): 7.0},
             "netobserv_agent_buffer_size": {(("name", "hashmap-unique"),): 300.0},
             "netobserv_agent_ringbuf_hashmap_ratio": {(): 0.25}}  # fmt: skip
    assert window_metrics(before, after) == {
        "evictions": {"hashmap": 5, "exporter": 6, "accounter": 1},
        "evicted_flows": {},
        "dropped_flows": 0,
        "buffer_sizes": {"hashmap-unique": 300},
        "ringbuf_hashmap_ratio": 0.25,
    }


@pytest.mark.slow
@root
def test_reference_agent_metrics_scraped_equal_its_own_counters(tmp_path: pathlib.Path) -> None:
    rep = _run(tmp_path, "flows=3000", "packets_per_flow=2", "cache_max_flows=100000,300", "rate_pps=20000",
               "cache_timeout_s=60")  # fmt: skip
    rows = _exact(rep, [3000, 3000], 2, 128)
    assert len(rows) == 2
    for row in rows:
        a = row["agent"]
        assert {k: a["scraped"][k] for k in KEYS} == {k: a[k] for k in KEYS}
        assert a["scraped"]["evictions"]["exporter"] == a["exports"] > 0
    big, small = sorted(rep["flow_storm"]["points"], key=lambda q: -q["cache_max_flows"])
    for q in (big, small):
        assert q["scraped_hashmap_evictions"] == q["hashmap_evictions"]
        assert q["scraped_dropped_flows"] == q["dropped_flows"]
        assert q["scraped_ringbuf_hashmap_ratio"] == q["ringbuf_hashmap_ratio"]
    # a 60 s timeout: the big map is evicted once, at the flush; the small one early, and more
    assert big["hashmap_evictions"] == 1 and big["ringbuf_hashmap_ratio"] == 0
    assert small["early_evictions"] > 0 and small["ringbuf_hashmap_ratio"] > 0
    # per flow, from the records the agent exported: the big map's one eviction after the
    # traffic holds every flow whole (2 packets, 2 x 128 frame bytes), one record each
    assert rows[0]["agent"]["cache_max_flows"] == 100000
    assert rows[0]["agent"]["per_flow"] == {"missing": 0, "split": 0, "short": 0, "over": 0, "extra": 0,
                                            "exact": 3000}  # fmt: skip
    assert rows[0]["agent"]["records"] == 3000 and big["exact_flows"] == 3000 and big["split_flows"] == 0
    # the small map evicts mid-traffic: every flow is classified once, none is made up, and a
    # flow in several records is split (records = flows + the extra records of split flows)
    pf = rows[1]["agent"]["per_flow"]
    assert pf["exact"] + pf["short"] + pf["over"] + pf["missing"] == 3000 and pf["extra"] == 0
    assert pf["split"] > 0 and rows[1]["agent"]["records"] > 3000
    assert (small["exact_flows"], small["split_flows"]) == (pf["exact"], pf["split"])


@pytest.mark.slow
@root
def test_scraped_dropped_flows_equal_the_agents_over_two_windows() -> None:
    """A one-page ring buffer behind a 64-flow map, unpaced: the agent drops flows (ring
    buffer full) in each window, and the scraped counters' increase per window is exactly its
    own count, the second window included (the counters are cumulative, the summary is not)."""
    from swarmscope.targets.flow_agent import start_reference
    from swarmscope.workers.flow_netns import FlowNetns

    gen = [sys.executable, "-m", "swarmscope.workers.flow_gen", "--flows", "4000", "--packets-per-flow", "2",
           "--frame-bytes", "128", "--rate", "0", "--max-s", "20"]  # fmt: skip
    dropped = []
    with FlowNetns("ss-f3s") as net:
        agent = start_reference(net.src, net.src_dev, 64, 30.0, ringbuf_pages=1)
        try:
            for _ in range(2):
                agent.start_window()
                before = agent_metrics(agent.metrics_url)
                sent = json.loads(net.exec(gen, timeout=60))
                summary = agent.flush()
                got = window_metrics(before, agent_metrics(agent.metrics_url))
                assert {k: got[k] for k in KEYS} == {k: summary[k] for k in KEYS}
                assert summary["packets"] + summary["dropped_flows"] <= sent["generated"] == 8000
                dropped.append(summary["dropped_flows"])
        finally:
            agent.close()
    assert all(d > 0 for d in dropped), dropped


def test_a_scraper_that_hangs_up_leaves_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """A scraper that resets its connection right after asking (as the run does when stopped
    mid-scrape) is dropped quietly: the agent writes on the run's terminal, where a traceback
    reads as a crash (CI: BrokenPipeError from the agent's /metrics under a SIGTERM'd run)."""
    import socket
    import struct
    import urllib.request
    from types import SimpleNamespace

    from swarmscope.targets.flow_agent.metrics import listening_socket, serve

    totals = {"evictions": dict.fromkeys(("hashmap", "accounter", "exporter"), 0), "dropped": 0}
    totals["evicted_flows"] = dict(totals["evictions"])
    win = SimpleNamespace(
        buffer_sizes={"hashmap-unique": 2000.0}, summary=lambda: {"ringbuf_hashmap_ratio": None}
    )
    sock = listening_socket()
    server = serve(SimpleNamespace(totals=totals, win=win), sock.fileno())
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
    try:
        for _ in range(20):
            c = socket.create_connection(sock.getsockname())
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()  # an RST: the reply, or the read of the request, meets a reset connection
        with urllib.request.urlopen(url, timeout=10) as r:  # and the server still answers
            body = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'netobserv_agent_buffer_size{name="hashmap-unique"} 2000.0' in body
    assert "Traceback" not in capfd.readouterr().err
