"""The flow storm's figures: which are drawn for which agent, from report.json's section."""

from __future__ import annotations

from swarmscope.kinds.flow_storm.plots import flow_plots


def _point(cache: int, ratio: float | None, **extra: float) -> dict:
    return {"flows": 5000, "iteration": 1, "cache_max_flows": cache, "elapsed_s": 3.0,
            "kernel_bytes": 1_920_000,
            "reported_bytes": 1920000, "flows_per_s": 1666.0, "ringbuf_hashmap_ratio": ratio,
            "agent_cpu_pct": 7.0, "agent_rss_mib": 160.0, **extra}  # fmt: skip


def test_reference_agent_gets_every_figure() -> None:
    pts = [_point(c, r, hashmap_flows=15000, ringbuf_flows=rb, dropped_flows=0)
           for c, r, rb in ((50000, 0.0, 0), (2000, 0.02, 300), (300, 0.33, 3700))]  # fmt: skip
    plots = flow_plots(pts)
    assert [p.filename for p in plots] == [
        "flow_bytes.png", "flow_flows_per_s.png", "flow_ratio.png", "flow_cpu_mem.png", "flow_runaway.png"
    ]  # fmt: skip
    assert all(p.png.startswith(b"\x89PNG\r\n\x1a\n") for p in plots)


def test_exporter_and_no_agent_leave_out_what_they_do_not_have() -> None:
    exporter = [{k: v for k, v in _point(100000, None).items() if k != "ringbuf_hashmap_ratio"}]
    assert [p.filename for p in flow_plots(exporter)] == [
        "flow_bytes.png",
        "flow_flows_per_s.png",
        "flow_cpu_mem.png",
    ]
    bare = [{"flows": 1000, "iteration": 1, "elapsed_s": 1.0, "kernel_bytes": 128000, "flows_per_s": 1000.0}]
    assert [p.filename for p in flow_plots(bare)] == ["flow_bytes.png", "flow_flows_per_s.png"]
    assert flow_plots([]) == []
