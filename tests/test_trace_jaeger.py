"""Every run is one trace, and it really reaches a Jaeger process over OTLP.

The fixture runs Jaeger v2 as `make tools` built it (tools/build_jaeger.sh, cached by version)
with in-memory storage on loopback ports.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import prebuilt
import pytest
from helpers import ROOT, free_port, load_report, only_run_dir, run_cli
from trace_helpers import OTEL_VARS, distributed_exec_run, read_spans, tree_lines

pytestmark = [
    pytest.mark.cluster,  # Jaeger, built by `make tools`
    pytest.mark.root,
    pytest.mark.bpf,
]


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    binary = prebuilt.run([str(ROOT / "tools" / "build_jaeger.sh")]).strip()
    ports = {
        k: free_port() for k in ("SS_OTLP_GRPC", "SS_OTLP_HTTP", "SS_JAEGER_QUERY", "SS_JAEGER_QUERY_GRPC")
    }
    log = tmp_path_factory.mktemp("jaeger") / "jaeger.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [binary, "--config", str(ROOT / "tests" / "data" / "jaeger.yaml")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **{k: str(v) for k, v in ports.items()}},
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{ports['SS_JAEGER_QUERY']}/api/services", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jaeger did not start:\n{log.read_text()[-2000:]}") from None
            time.sleep(0.3)
    yield ports
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:  # a loaded machine: Jaeger flushes slowly; it has served
        proc.kill()
        proc.wait(10)


def query_trace(port: int, trace_id: str) -> dict:
    """Jaeger's answer for one trace now ({} while it holds none of it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/traces/{trace_id}", timeout=5) as r:
            got: dict = json.loads(r.read())
            return got
    except OSError:
        return {}


def get_trace(port: int, trace_id: str, want_spans: int, timeout_s: float = 30) -> dict:
    """The trace once Jaeger holds ``want_spans`` of its spans; fails (saying how many it had)
    at the timeout, never returns a partial trace."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = query_trace(port, trace_id)
        have = len(last["data"][0]["spans"]) if last.get("data") else 0
        if have >= want_spans:
            return last
        assert time.monotonic() < deadline, f"Jaeger holds {have} of the {want_spans} spans of {trace_id}"
        time.sleep(0.5)


def test_run_trace_reaches_jaeger(jaeger: dict[str, int], tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{jaeger['SS_OTLP_GRPC']}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_SERVICE_NAME": "swarmscope-test",
    }
    p = run_cli(
        "run", "scenarios/exec_storm.yaml", "--set", "nodes=2", "--set", "iterations=2",
        "--set", "burst_s=0.2", "--set", "pause_s=0", "--out", str(out), env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    # run + set up + point + 2 iterations + 2x(2 window + 2 burst) + the probe's 2 window spans
    got = get_trace(jaeger["SS_JAEGER_QUERY"], rep["trace_id"], want_spans=15)
    spans = got["data"][0]["spans"]
    names = sorted(s["operationName"] for s in spans)
    assert names == [
        "burst n1", "burst n1", "burst n2", "burst n2", "iteration 1", "iteration 2", "point nodes=2",
        "probe window", "probe window", "run exec_storm", "set up", "window n1", "window n1", "window n2",
        "window n2",
    ]  # fmt: skip
    windows = [s for s in spans if s["operationName"].startswith("window ")]
    assert len(windows) == 4
    for w in windows:
        tags = {t["key"]: t["value"] for t in w["tags"]}
        assert tags["swarmscope.generated"] == tags["swarmscope.kernel"] > 0
    # Three processes, each with exactly its own spans: the controller's tree, the workers'
    # bursts (their own tracer provider), and the probe, which continued the trace across
    # gRPC (traceparent in OpenWindow). OTEL_SERVICE_NAME names every one of them, as OTel's
    # specification says: one service, told apart by Jaeger's processes.
    procs = got["data"][0]["processes"]
    by_proc: dict[str, list[str]] = {}
    for s in spans:
        by_proc.setdefault(s["processID"], []).append(s["operationName"])
    assert sorted(sorted(v) for v in by_proc.values()) == [
        ["burst n1", "burst n1", "burst n2", "burst n2"],
        ["iteration 1", "iteration 2", "point nodes=2", "run exec_storm", "set up",
         "window n1", "window n1", "window n2", "window n2"],
        ["probe window", "probe window"],
    ]  # fmt: skip
    assert {p["serviceName"] for p in procs.values()} == {"swarmscope-test"}


def test_trace_push_replays_a_run_into_jaeger(jaeger: dict[str, int], tmp_path: pathlib.Path) -> None:
    """A distributed run with no OTLP endpoint, then `swarmscope trace push`: Jaeger holds the
    whole tree (controller, two workers, the probe) as trace.json has it."""
    saved = {k: os.environ.pop(k) for k in OTEL_VARS if k in os.environ}
    try:
        run_dir = distributed_exec_run(tmp_path / "results")
        rep = load_report(run_dir)
        # Nothing reached Jaeger while the run ran.
        # (The run has exited, its exporters flushed or never set: a later span cannot arrive.)
        assert not query_trace(jaeger["SS_JAEGER_QUERY"], rep["trace_id"]).get("data")
        url = f"http://127.0.0.1:{jaeger['SS_OTLP_GRPC']}"
        push = run_cli("trace", "push", str(run_dir), "--otlp", url)
    finally:
        os.environ.update(saved)
    assert push.returncode == 0, push.stderr
    stored = read_spans(run_dir)
    assert f"pushed {len(stored)} spans of trace {rep['trace_id']}" in push.stdout
    got = get_trace(jaeger["SS_JAEGER_QUERY"], rep["trace_id"], want_spans=len(stored))
    assert got.get("data"), f"trace {rep['trace_id']} not in Jaeger: {got}"
    (trace,) = got["data"]
    procs = trace["processes"]
    back = [
        {
            "service": procs[s["processID"]]["serviceName"],
            "name": s["operationName"],
            "id": s["spanID"],
            "parent": next((r["spanID"] for r in s["references"] if r["refType"] == "CHILD_OF"), None),
            "start": s["startTime"],  # µs
        }
        for s in trace["spans"]
    ]
    print("\n".join(tree_lines(back)))
    assert len(back) == len(stored)
    # The same tree (service, name, parent) as trace.json, span for span.
    key = {s["id"]: s for s in back}
    assert {(s["service"], s["name"], s["parent"]) for s in back} == {
        (s["service"], s["name"], s["parent"]) for s in stored
    }
    assert all(s["parent"] is None or s["parent"] in key for s in back), "orphan span in Jaeger"
    assert {s["service"] for s in back} == {"swarmscope", "swarmscope-worker", "swarmscope-probe"}
    probes = [s for s in back if s["service"] == "swarmscope-probe"]
    assert len(probes) == 2
    for s in probes:
        assert key[s["parent"]]["name"].startswith("iteration ")  # the window span
        siblings = [
            b["name"] for b in back if b["parent"] == s["parent"] and b["service"] == "swarmscope-worker"
        ]
        assert sorted(siblings) == ["burst w1-n1", "burst w2-n1"]
