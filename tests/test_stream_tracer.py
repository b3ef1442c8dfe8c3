"""The reference streaming tracer (``tracer: stream``): collector, node agent, BPF ring buffer.

The collector tests drive it over a real gRPC socket with hand-made events (no BPF). The
tracer tests really load bpf/exec_stream.bpf.c in the agent subprocess and make exactly K
execs in a fresh cgroup v2 child (a simulated node): unthrottled every exec arrives, one gRPC
message each; throttled the kernel drops and counts every event it had no room for, so
reported + lost == K exactly.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from swarmscope.controller.tracers import TRACER_FIELDS, NodeKey, make_tracer, tracer_cross_check
from swarmscope.controller.tracers.base import TracerConfig
from swarmscope.controller.tracers.selfcheck import exec_in_cgroup
from swarmscope.controller.tracers.stream import Collector, StreamTracer, attribute
from swarmscope.core.config import Schema
from swarmscope.core.errors import ConfigError, SetupError, TracerError
from swarmscope.core.sys.cgroups import cgroup2_mount, cgroup_id, temp_cgroup
from swarmscope.v1 import stream_pb2 as pb
from swarmscope.v1 import stream_pb2_grpc as pb_grpc
from swarmscope.workers.native import ensure_built

IDLE = NodeKey("idle", cgroup_id=1 << 62)  # a node with no execs: must stay at 0


# --------------------------------------------------------------------------- no BPF


def test_config_keys_and_bounds() -> None:
    schema = Schema(TRACER_FIELDS, cross_checks=[tracer_cross_check], cls=TracerConfig)
    sets = ["tracer=stream", "tracer_stream_ringbuf_pages=4", "tracer_stream_collector_rate=0"]
    cfg = schema.load(sets=sets)
    t = make_tracer(cfg)
    assert isinstance(t, StreamTracer)
    assert (t.ringbuf_pages, t.collector_rate, t.consume_rate) == (4, 0.0, 0.0)
    with pytest.raises(ConfigError) as ei:
        schema.load(sets=["tracer=stream", "tracer_stream_ringbuf_pages=6", "tracer_stream_queue=0"])
    text = str(ei.value)
    assert "power of two" in text and "tracer_stream_queue" in text


def test_attribution_by_cgroup_then_comm() -> None:
    nodes = [NodeKey("a", cgroup_id=7), NodeKey("b", comm="ss-node-with-a-long-name")]
    counts = {(7, "x"): 3, (7, "y"): 2, (9, "ss-node-with-a-"): 4, (9, "bash"): 1}
    assert attribute(counts, nodes) == ({"a": 5, "b": 4}, 1)


@pytest.fixture
def collector_server() -> Iterator[tuple[Collector, grpc.Channel]]:
    col = Collector(rate=0, sentinel_prefix="ss-sync-abc")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_EventCollectorServicer_to_server(col, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield col, channel
    finally:
        channel.close()
        server.stop(grace=0).wait(5)


def _events(n: int, cg: int = 5) -> list[pb.ExecEvent]:
    return [pb.ExecEvent(cgroup_id=cg, comm="ss-n1", pid=i, tgid=i) for i in range(n)]


def test_collector_counts_events_skips_sentinels_and_keeps_the_final(collector_server) -> None:
    col, channel = collector_server
    msgs = [
        *_events(40),
        pb.ExecEvent(cgroup_id=1, comm="ss-sync-abc3"),  # a sentinel: seen, never counted
        pb.ExecEvent(cgroup_id=1, comm="ss-sync-abcx"),  # prefix but no number: a host event
        pb.ExecEvent(final=pb.AgentFinal(kernel_drops=9, drops_by_cgroup={5: 7, 1: 2}, sent=42)),
    ]
    summary = pb_grpc.EventCollectorStub(channel).Push(iter(msgs), timeout=10)
    assert summary.received == 42
    assert col.messages == 43 and col.events == 41
    assert col.counts == {(5, "ss-n1"): 40, (1, "ss-sync-abcx"): 1}
    assert col.seen(3) and not col.seen(4)
    assert col.finals[0].drops_by_cgroup[5] == 7


def test_collector_budget_paces_and_lifts(collector_server) -> None:
    col, channel = collector_server
    col.set_rate(200)
    stub = pb_grpc.EventCollectorStub(channel)
    t0 = time.monotonic()
    stub.Push(iter(_events(60)), timeout=10)
    took = time.monotonic() - t0
    assert 0.25 <= took < 0.6, took  # 60 events at 200/s: ~0.3 s
    col.set_rate(0)  # lifted: the same load goes through at once
    t0 = time.monotonic()
    stub.Push(iter(_events(60)), timeout=10)
    assert time.monotonic() - t0 < 0.25
    assert col.events == 120


# --------------------------------------------------------------------------- real BPF


@pytest.fixture
def node_cgroup() -> Iterator[tuple[pathlib.Path, int]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups and load BPF")
    try:
        cgroup2_mount()
    except SetupError:
        pytest.skip("kernel lacks a cgroup v2 mount")
    with temp_cgroup("ss-stream-test") as cg:
        yield cg, cgroup_id(cg)


@pytest.fixture(scope="module")
def tiny() -> pathlib.Path:
    return ensure_built().tiny


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_unthrottled_every_exec_arrives_one_message_each(node_cgroup, tiny) -> None:
    cg, cgid = node_cgroup
    tracer = StreamTracer(ringbuf_pages=64, queue=4096, collector_rate=0, sentinel=tiny)
    k = 2000
    for window in ("w1", "w2"):  # the adapter runs window after window
        tracer.start(window, [NodeKey("n1", cgroup_id=cgid), IDLE])
        exec_in_cgroup(cg, k, tiny)
        res = tracer.stop()
        col = tracer.collector
        assert col is not None
        assert res.error == "", res
        assert res.per_node == {"n1": k, "idle": 0}, res
        assert res.lost == 0
        # One message per event: the K execs, the rest of the host, the sentinels that
        # arrived, and the agent's one closing message — nothing batched, nothing else.
        assert col.messages == k + res.other + len(col.sentinels) + 1
        assert col.sentinels, "readiness and drain sentinels arrive"
        assert not any(comm.startswith(col.prefix) for _, comm in col.counts)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_throttled_loses_and_the_kernel_counts_every_drop(node_cgroup, tiny) -> None:
    cg, cgid = node_cgroup
    # A one-page ring buffer, a short queue and a slow collector: the single pipe is the
    # bottleneck, flow control backs up into the agent, and the kernel drops.
    tracer = StreamTracer(ringbuf_pages=1, queue=16, collector_rate=300, sentinel=tiny)
    k = 4000
    tracer.start("w", [NodeKey("n1", cgroup_id=cgid), IDLE])
    exec_in_cgroup(cg, k, tiny, procs=2)
    res = tracer.stop()
    assert res.error == "", res
    got = res.per_node["n1"]
    assert res.lost is not None and res.lost > 0, res
    assert got < k
    assert got + res.lost == k, res  # exact: drops are counted per cgroup in the kernel
    assert res.per_node["idle"] == 0
    col = tracer.collector
    assert col is not None and not any(comm.startswith(col.prefix) for _, comm in col.counts)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_scope_nodes_ignores_the_rest_of_the_host_and_host_scope_sees_it(node_cgroup, tiny) -> None:
    cg, cgid = node_cgroup
    with temp_cgroup("ss-stream-outside") as out_cg:
        out_id = cgroup_id(out_cg)
        seen = {}
        for scope in ("nodes", "host"):
            tracer = StreamTracer(collector_rate=0, sentinel=tiny, scope=scope)
            tracer.start("w", [NodeKey("n1", cgroup_id=cgid)])
            exec_in_cgroup(cg, 100, tiny)
            exec_in_cgroup(out_cg, 70, tiny)  # a busy neighbour on the same host
            res = tracer.stop()
            assert tracer.collector is not None
            assert res.per_node == {"n1": 100} and res.lost == 0, res
            seen[scope] = sum(c for (g, _), c in tracer.collector.counts.items() if g == out_id)
        assert seen == {"nodes": 0, "host": 70}


@pytest.mark.root
@pytest.mark.bpf
def test_agent_dying_mid_window_is_an_error(node_cgroup, tiny) -> None:
    _cg, cgid = node_cgroup
    tracer = StreamTracer(collector_rate=0, sentinel=tiny)
    tracer.start("w", [NodeKey("n1", cgroup_id=cgid)])
    assert tracer._proc is not None
    os.kill(tracer._proc.pid, signal.SIGKILL)
    tracer._proc.wait(timeout=10)
    res = tracer.stop()
    assert "exited early" in res.error
    assert res.lost is None


def test_agent_that_cannot_start_fails_start_with_its_output(tiny) -> None:
    # A ring buffer size BCC/the kernel refuses (not a power of two, bypassing the config check).
    tracer = StreamTracer(ringbuf_pages=3, sentinel=tiny, ready_timeout_s=30)
    with pytest.raises(TracerError, match="power of two"):
        tracer.start("w", [NodeKey("n1", cgroup_id=5)])
    assert tracer._proc is None
