"""The probe agent as a CLI process (``swarmscope probe``): counts, exit, OTLP spans, metrics
port, and one clear line for a wrong token; against the stand-in controller of agent_helpers."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from agent_helpers import (
    TOKEN,
    AgentThread,
    FakeProgram,
    TestController,
    _free_port,
    fake_factory,
    serve_controller,
)
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope.core import auth
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.agent import ProbeAgent
from swarmscope.v1 import probe_pb2 as pb


@pytest.fixture
def controller() -> Iterator[tuple[TestController, str]]:
    yield from serve_controller()


class OtlpSink:
    """A minimal OTLP/HTTP trace receiver on 127.0.0.1 that keeps the request bodies."""

    def __init__(self) -> None:
        bodies: list[bytes] = []
        self.bodies = bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        out = []
        for body in self.bodies:
            req = ExportTraceServiceRequest.FromString(body)
            out += [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        return out


@pytest.fixture
def otlp_sink() -> Iterator[OtlpSink]:
    sink = OtlpSink()
    yield sink
    sink.server.shutdown()
    sink.server.server_close()


def _probe_cmd(addr: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "swarmscope", "probe", "--controller", addr, *extra]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.parametrize("end", ["shutdown", "sigterm"])
def test_cli_agent_process_counts_and_exits_cleanly(controller, otlp_sink, tmp_path, end) -> None:
    ctl, addr = controller
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    cred = ["--token-file", str(token_file)]
    if end == "sigterm":  # this one holds only its node's key, as the chart's probes do
        key_file = tmp_path / "node-key"
        subprocess.run(
            [sys.executable, "-m", "swarmscope", "node-key", "--node", "cli-node",
             "--token-file", str(token_file), "--out", str(key_file)],
            check=True, env=env,
        )  # fmt: skip
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert key_file.read_text().strip() == auth.node_key(TOKEN, "cli-node")
        cred = ["--node-key-file", str(key_file)]
    proc = subprocess.Popen(
        _probe_cmd(addr, *cred, "--node", "cli-node"),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ctl.wait_for("heartbeat", timeout=30)
        assert ctl.registers[0].node_name == "cli-node"
        with temp_cgroup("cli") as cg:
            node = pb.NodeInfo(name="cli-node", cgroup_id=cgroup_id(cg))
            tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node], traceparent=tp))
            assert ctl.wait_for("ack").ack.ok
            exec_in_cgroup(cg, 6)
            ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
            (r,), _ = ctl.window_result()
        assert dict(r.counters) == {"exec": 6} and r.error == ""
        if end == "shutdown":
            ctl.send(shutdown=pb.Shutdown(reason="test over"))
        else:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        # The window span was flushed over OTLP at exit, in the controller's trace.
        (span,) = otlp_sink.spans()
        assert span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
        assert span.parent_span_id.hex() == "b7ad6b7169203331" and span.name == "probe window"
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_cli_agent_wrong_token_is_one_clear_line(controller) -> None:
    _ctl, addr = controller
    env = {**os.environ, "SWARMSCOPE_TOKEN": "wrong"}
    res = subprocess.run(_probe_cmd(addr), env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("swarmscope: controller 127.0.0.1:") and "failed to prove" in res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1


def test_window_span_is_child_of_controller_traceparent(controller) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    ctl, addr = controller
    good, bad = FakeProgram("good"), FakeProgram("bad")
    run = AgentThread(
        ProbeAgent(
            addr,
            TOKEN,
            "n",
            ["good"],
            probe_id="p-span",
            program_factory=fake_factory({"good": good, "bad": bad}),
        )
    )
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        ctl.wait_for("heartbeat")
        node = pb.NodeInfo(name="x", cgroup_id=42)
        tp = f"00-{trace_id}-{parent_id}-01"
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node], traceparent=tp))
        assert ctl.wait_for("ack").ack.ok
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
        _readings, done = ctl.window_result()
    finally:
        run.stop()
    assert run.error is None  # AgentThread keeps what run_forever raised
    req = ExportTraceServiceRequest.FromString(done.trace)  # the span rides back in WindowDone
    (rs,) = req.resource_spans
    res = {a.key: a.value.string_value for a in rs.resource.attributes}
    assert res["service.name"] == "swarmscope-probe" and res["host.name"] == "n"
    ((span,),) = [ss.spans for ss in rs.scope_spans]
    assert span.name == "probe window" and span.end_time_unix_nano > span.start_time_unix_nano > 0
    assert (span.trace_id.hex(), span.parent_span_id.hex()) == (trace_id, parent_id)
    attrs = {a.key: a.value.string_value for a in span.attributes}
    assert attrs["swarmscope.probe_id"] == "p-span" and attrs["swarmscope.window_id"] == "w"
    (ev,) = span.events
    assert ev.name == "reading"
    assert {a.key: (a.value.string_value or a.value.int_value) for a in ev.attributes} == {
        "node": "x",
        "ticks": 5,
    }
    assert span.status.code == 0  # unset: no reading had an error


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_cli_agent_metrics_port_serves_self_metrics(controller, tmp_path) -> None:
    import urllib.request

    ctl, addr = controller
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = _free_port()
    env = {**os.environ, "SWARMSCOPE_SYSCALLS": "getppid"}
    cmd = _probe_cmd(addr, "--token-file", str(token_file), "--node", "m-node")
    cmd += ["--programs", "exec_count,syscall_count", "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.read().decode()

    try:
        ctl.wait_for("heartbeat", timeout=60)
        assert get("/healthz") == "ok\n"
        with temp_cgroup("metrics") as cg:
            node = pb.NodeInfo(name="m-node", cgroup_id=cgroup_id(cg))
            ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[node]))
            assert ctl.wait_for("ack").ack.ok
            exec_in_cgroup(cg, 4)
            ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
            (r,), _ = ctl.window_result()
        assert dict(r.counters) == {"exec": 4, "sys.getppid": 0}
        text = get("/metrics")
        samples = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
        assert float(samples["swarmscope_probe_windows_opened_total"]) == 1
        assert float(samples["swarmscope_probe_windows_closed_total"]) == 1
        assert float(samples["swarmscope_probe_readings_sent_total"]) == 1
        func = 'func="tracepoint__sched__sched_process_exec",program="exec_count"'
        # Stats are on for the probe's lifetime: its exec program ran at least for our 4 execs.
        assert float(samples[f"swarmscope_probe_program_run_count_total{{{func}}}"]) >= 4
        assert float(samples[f"swarmscope_probe_program_run_time_seconds_total{{{func}}}"]) > 0
        ex = 'map="exec_count",program="exec_count"'
        assert float(samples[f"swarmscope_probe_map_max_entries{{{ex}}}"]) == 65536
        assert 1 <= float(samples[f"swarmscope_probe_map_entries{{{ex}}}"]) <= 65536
        filt = 'map="syscall_filter",program="syscall_count"'
        assert float(samples[f"swarmscope_probe_map_fill_ratio{{{filt}}}"]) == 1.0  # arrays are full
        ctl.send(shutdown=pb.Shutdown(reason="test over"))
        assert proc.wait(timeout=15) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
