"""trace.json: one OTLP JSON trace per run holding every process's spans, with no OTLP endpoint.

A distributed exec storm (two worker processes, the embedded probe process) must give one trace
with controller, worker and probe spans and no orphan; the workers' burst spans and the probe's
kernel view carry the same counts as the report. For neighbor writes, the probe span's
sys_exit_bpf events and the workers' batch spans give back the report's figures exactly.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from helpers import load_report
from neighbors_util import at_entry, nearest_rank
from trace_helpers import distributed_exec_run, read_spans, run_without_otlp, tree_lines

from swarmscope.core.sys import otlpjson


def root_only(fn: Any) -> Any:
    for m in (
        pytest.mark.root,
        pytest.mark.bpf,
    ):
        fn = m(fn)
    return fn


def check_whole(spans: list[dict]) -> dict[str, dict]:
    """One trace, every parent present (no orphan), exactly one root."""
    by_id = {s["id"]: s for s in spans}
    assert len(by_id) == len(spans), "a span is in trace.json twice"
    assert len({s["trace"] for s in spans}) == 1
    orphans = [s["name"] for s in spans if s["parent"] and s["parent"] not in by_id]
    assert orphans == []
    assert [s["name"] for s in spans if not s["parent"]] == [
        next(s["name"] for s in spans if not s["parent"])
    ]
    return by_id


def test_otlp_json_round_trip() -> None:
    """to_json ∘ from_json is the identity on an OTLP JSON document (ids hex both ways)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("t")
    parent = tracer.start_span("parent", attributes={"n": 3, "x": 1.5, "s": "a", "b": True})
    from opentelemetry import trace

    child = tracer.start_span("child", context=trace.set_span_in_context(parent))
    child.add_event("ev", attributes={"bpf.exit_ns": 2**62 + 1}, timestamp=123)
    child.end(end_time=200)
    parent.end(end_time=300)
    doc = otlpjson.to_json([otlpjson.encode(mem.get_finished_spans())])
    spans = otlpjson.spans_of(doc)
    assert [s["name"] for s in spans] == ["child", "parent"]
    assert spans[0]["parentSpanId"] == spans[1]["spanId"] == format(parent.get_span_context().span_id, "016x")
    assert spans[0]["traceId"] == format(parent.get_span_context().trace_id, "032x")
    assert spans[0]["endTimeUnixNano"] == "200"
    assert otlpjson.attributes(spans[0]["events"][0]["attributes"]) == {"bpf.exit_ns": 2**62 + 1}
    assert otlpjson.attributes(spans[1]["attributes"]) == {"n": 3, "x": 1.5, "s": "a", "b": True}
    # Back to the protobuf request and to JSON again: the same document.
    assert otlpjson.to_json([otlpjson.from_json(doc)]) == doc
    # A span sent twice (its own process's copy and the one sent back) is written once.
    assert otlpjson.to_json([otlpjson.encode(mem.get_finished_spans())] * 2) == doc


@pytest.mark.slow
@root_only
def test_distributed_exec_storm_trace_json(tmp_path: pathlib.Path) -> None:
    run_dir = distributed_exec_run(tmp_path / "results")
    rep = load_report(run_dir)
    spans = read_spans(run_dir)
    by_id = check_whole(spans)
    print("\n".join(tree_lines(spans)))
    assert spans[0]["trace"] == rep["trace_id"]
    assert {s["service"] for s in spans} == {"swarmscope", "swarmscope-worker", "swarmscope-probe"}
    iterations = sorted((s for s in spans if s["name"].startswith("iteration ")), key=lambda s: s["start"])
    assert len(iterations) == 2
    for it, rit in zip(iterations, rep["points"][0]["iterations"], strict=True):
        kids = [s for s in spans if s["parent"] == it["id"]]
        assert by_id[it["parent"]]["name"] == "point nodes=2"
        names = sorted((s["service"], s["name"]) for s in kids)
        assert names == [
            ("swarmscope", "window w1-n1"),
            ("swarmscope", "window w2-n1"),
            ("swarmscope-probe", "probe window"),
            ("swarmscope-worker", "burst w1-n1"),
            ("swarmscope-worker", "burst w2-n1"),
        ]
        (probe,) = [s for s in kids if s["service"] == "swarmscope-probe"]
        for n in rit["per_node"]:
            (burst,) = [s for s in kids if s["name"] == f"burst {n['node']}"]
            assert burst["attrs"]["swarmscope.generated"] == n["generated"] > 0
            assert probe["attrs"][f"swarmscope.kernel.{n['node']}.exec"] == n["kernel"] == n["generated"]
            # The burst ran inside the window (one host, one clock).
            assert probe["start"] <= burst["start"] < burst["end"] <= probe["end"]
            # exec_count's first/last exec of the window (BPF clock), and the event at the last.
            first, last = (probe["attrs"][f"swarmscope.bpf.{n['node']}.{k}"] for k in ("first_ns", "last_ns"))
            evs = [e for e in probe["events"] if e["name"] == "exec.window"]
            (ev,) = [e for e in evs if e["attrs"]["node"] == n["node"]]
            assert (ev["attrs"]["bpf.enter_ns"], ev["attrs"]["bpf.exit_ns"]) == (first, last)
            assert 0 < first <= last and probe["start"] <= ev["t"] <= probe["end"]
        # Two worker processes made the bursts, a third process the probe span.
        pids = {s["service"]: set() for s in kids}
        for s in kids:
            pids[s["service"]].add(s["pid"])
        assert len(pids["swarmscope-worker"]) == 2 and len(pids["swarmscope-probe"]) == 1
        assert not pids["swarmscope-probe"] & pids["swarmscope-worker"]


@pytest.mark.slow
@root_only
def test_neighbor_trace_kernel_times_equal_report(tmp_path: pathlib.Path) -> None:
    run_dir = run_without_otlp(
        "run", "scenarios/neighbor_writes.yaml", "--set", "neighbors=1000,20000",
        "--set", "modes=write_watch_program", "--set", "batch_size=50", "--out", str(tmp_path / "results"),
    )  # fmt: skip
    rep = load_report(run_dir)
    spans = read_spans(run_dir)
    check_whole(spans)
    iterations = sorted((s for s in spans if s["name"].startswith("iteration ")), key=lambda s: s["start"])
    assert len(iterations) == len(rep["neighbors"]["points"]) == 2
    for it, pt in zip(iterations, rep["neighbors"]["points"], strict=True):
        kids = [s for s in spans if s["parent"] == it["id"]]
        (probe,) = [s for s in kids if s["service"] == "swarmscope-probe"]
        batches = sorted((s for s in kids if s["service"] == "swarmscope-worker"), key=lambda s: s["start"])
        assert sum(b["attrs"]["swarmscope.entries"] for b in batches) == pt["neighbors"]
        pid, map_id = (
            str(batches[0]["attrs"]["swarmscope.pid"]),
            str(batches[0]["attrs"]["swarmscope.map_id"]),
        )
        calls = [
            e["attrs"]
            for e in probe["events"]
            if e["name"] == "map_update.call"
            and e["attrs"]["label.pid"] == pid
            and e["attrs"]["label.map_id"] == map_id
            and e["attrs"]["entries"] > 0
        ]
        assert len(calls) == pt["update_calls"] > 0
        assert sum(c["entries"] for c in calls) == pt["kernel_entries"] == pt["neighbors"]
        # Per-entry latencies from the trace alone: batch sends (worker spans) to the
        # sys_exit_bpf of the update call that wrote the entry (probe events).
        starts, run = [], 0
        for b in batches:
            run += b["attrs"]["swarmscope.entries"]
            starts.append([run, b["attrs"]["swarmscope.mono_start_ns"]])
        ends, run = [], 0
        for c in sorted(calls, key=lambda c: c["bpf.exit_ns"]):
            run += c["entries"]
            ends.append([run, c["bpf.exit_ns"]])
        n = pt["neighbors"]
        lat = [e - s for s, e in zip(at_entry(starts, n), at_entry(ends, n), strict=True)]
        assert round(nearest_rank(lat, 0.50) / 1000, 3) == pt["p50_us"]
        assert round(nearest_rank(lat, 0.99) / 1000, 3) == pt["p99_us"]
        assert round((ends[-1][1] - starts[0][1]) / 1e6, 3) == pt["total_ms"]


@pytest.mark.slow
def test_trace_push_errors_are_clear(tmp_path: pathlib.Path) -> None:
    """No trace.json, no endpoint, an endpoint that refuses: one clear message each, bounded."""
    from helpers import free_port, run_cli

    p = run_cli("trace", "push", str(tmp_path), "--otlp", "http://127.0.0.1:1")
    assert p.returncode == 1 and "cannot read the trace" in p.stderr, p.stderr
    (tmp_path / "trace.json").write_text('{"resourceSpans": []}')
    p = run_cli("trace", "push", str(tmp_path), env={"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert p.returncode == 2 and "no OTLP endpoint" in p.stderr, p.stderr
    p = run_cli("trace", "push", str(tmp_path), "--otlp", f"http://127.0.0.1:{free_port()}", timeout=60)
    assert p.returncode == 1 and "failed after 4 attempts" in p.stderr, p.stderr
