"""The controller's Prometheus endpoint: real HTTP scrape of the counters a window adds."""

from __future__ import annotations

import urllib.request

from swarmscope.controller.metrics import RunMetrics
from swarmscope.controller.model import IterationResult, NodeCount, RunInfo
from swarmscope.core.events import RunEvents


def test_metrics_count_every_window_and_serve_them() -> None:
    events = RunEvents()
    m = RunMetrics.attach(events, metric="exec")
    port = m.serve(0, host="127.0.0.1")
    run = RunInfo("r", "exec_storm", "exec", {}, 0)
    for gen, kern, rep in ((100, 100, 90), (50, 50, 50)):
        res = IterationResult(
            "r", 0, {"nodes": 1}, 1, "w", 0, 1, [NodeCount("n1", gen, kern, rep)], tracer_lost=gen - rep
        )
        events.iteration_done.fire(run=run, result=res)
    events.iteration_done.fire(
        run=run,
        result=IterationResult(
            "r", 0, {}, 2, "w2", 0, 1, [NodeCount("n2", 5, 4, None)], flags=["harness-mismatch:n2"]
        ),
    )
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'swarmscope_exec_generated_total{node="n1"} 150.0' in body
    assert 'swarmscope_exec_kernel_total{node="n1"} 150.0' in body
    assert 'swarmscope_exec_reported_total{node="n1"} 140.0' in body
    assert 'swarmscope_exec_kernel_total{node="n2"} 4.0' in body
    assert "swarmscope_exec_tracer_lost_total 10.0" in body
    assert 'swarmscope_windows_total{status="ok"} 2.0' in body
    assert 'swarmscope_windows_total{status="mismatch"} 1.0' in body
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok\n"
    m.close()
