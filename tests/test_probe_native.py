"""The native light probe (``swarmscope probe --mode native``): the BCC loader pins exec_count,
then the CLI process becomes the compiled reader (probes/reader, Go). Real BPF, the real
controller fleet over real gRPC with mTLS, real execs in a throw-away cgroup, the reader built
by tools/build_probe_reader.sh (cached by source hash)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from net_helpers import send, veth_pair
from probe_helpers import exec_in_cgroup, probe_cli, temp_cgroup
from test_probe_agent_cli import OtlpSink  # the same OTLP/HTTP receiver
from test_probe_neigh_prog import netns_with_veth, write  # the same netns and writer
from test_probe_syscall_count import getppid_in_cgroup
from test_relay import start_relay
from tls_helpers import make_pki

from swarmscope.controller.fleet import Fleet
from swarmscope.core.sys import bpf, otlpjson, owners
from swarmscope.core.sys.cgroups import cgroup2_mount, cgroup_id
from swarmscope.core.tls import TLSFiles
from swarmscope.probes import native, pinned
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "native-probe-token-0123"
ROOT = Path(__file__).resolve().parent.parent
EXEC_FN = "tracepoint__sched__sched_process_exec"  # its BTF name (the kernel's is truncated)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def reader() -> str:
    p = subprocess.run(
        ["bash", str(native.BUILD)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1]


def _native(
    reader: str, address: str, node: str, *extra: str, **env: str
) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    args = ["--controller", address, "--node", node, "--mode", "native", *extra]
    return probe_cli(args, {"SWARMSCOPE_TOKEN": TOKEN, native.ENV_READER: reader, **env})


def otlpjson_window(span: object) -> str:
    """The swarmscope.window_id attribute of an OTLP protobuf span."""
    (v,) = [a.value.string_value for a in span.attributes if a.key == "swarmscope.window_id"]  # type: ignore[attr-defined]
    return v


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    f = Fleet(TOKEN)
    f.start()
    yield f
    f.stop()


def _claims(pid: int) -> dict[str, dict]:
    return {n: d for n, d in owners.claims("pindir") if d.get("pid") == pid}


@pytest.mark.root
@pytest.mark.bpf
def test_native_probe_counts_exactly_over_mtls_and_its_span_reaches_the_trace(
    reader: str, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    otlp_sink = OtlpSink()
    fleet = Fleet(TOKEN, tls=TLSFiles(cert=pki["server.crt"], key=pki["server.key"], ca=pki["ca.crt"]))
    fleet.start()
    node = f"native-{os.getpid()}"
    args = ["--tls-ca", pki["ca.crt"], "--tls-cert", pki["client.crt"], "--tls-key", pki["client.key"]]
    args += ["--programs", "exec_count,neigh_events,bpf_stats"]
    try:
        with (
            _native(
                reader,
                fleet.address,
                node,
                *args,
                OTEL_EXPORTER_OTLP_ENDPOINT=otlp_sink.url,
                OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            ) as proc,
            temp_cgroup("nat") as cg,
            netns_with_veth() as (ns, dev),
        ):
            fleet.wait_for_probes(hosts={node}, timeout_s=120)  # the loader compiles first
            # The long-lived process is the reader itself (same pid, after execve): no Python.
            assert os.readlink(f"/proc/{proc.pid}/exe") == reader
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            assert "libpython" not in maps and "libbcc" not in maps and "LLVM" not in maps
            claims = _claims(proc.pid)  # the CLI's claims hold across the exec
            assert sorted(n.split("-")[2] for n in claims) == [
                "exec_count",
                "neigh_events",
            ]  # bpf_stats: none
            paths = [c["path"] for c in claims.values()]
            claims_by = {n.split("-")[2]: c["path"] for n, c in claims.items()}
            assert all(os.path.exists(p) for p in paths)
            # By a path relative to the v2 mount only: the reader resolves the id, as the Python
            # agent does (on a hybrid host the mount is /sys/fs/cgroup/unified).
            rel = os.path.relpath(cg, cgroup2_mount())
            nodes = {node: [pb.NodeInfo(name="n1", cgroup_path=rel)]}
            # bpf_stats is host-level: it reads into a host node (cgroup 0) of the same windows.
            fd = bpf.obj_get(f"{claims_by['exec_count']}/prog_{EXEC_FN}")
            prog_id = bpf.prog_info(fd).id
            os.close(fd)
            host = [*nodes[node], pb.NodeInfo(name="host")]
            counted, ran = [], []
            for w, n in (("w1", 37), ("w2", 0), ("w3", 5)):
                assert fleet.open_window("run", w, {node: host}, traceparent=PARENT, timeout_s=30) == {}
                t0 = time.monotonic_ns()
                exec_in_cgroup(cg, n)
                t1 = time.monotonic_ns()
                readings, missing = fleet.close_window("run", w, timeout_s=30)
                assert missing == [] and sorted(x.node for x in readings) == ["host", "n1"]
                (r,) = [x for x in readings if x.node == "n1"]
                (h,) = [x for x in readings if x.node == "host"]
                assert r.error == "" and h.error == ""
                # The exec program runs for every exec on the host, not only ours: at least n.
                ran.append(h.counters[f"prog.{prog_id}.{EXEC_FN}.run_cnt"] >= n)
                assert f"prog.{prog_id}.{EXEC_FN}.run_cnt" not in r.counters  # host-level only
                assert r.counters["neigh.create"] == 0 and r.counters["neigh.update"] == 0
                counted.append(r.counters["exec"])
                if n:
                    (s,) = r.samples
                    assert s.series == "exec.window" and t0 <= s.start_ns <= s.end_ns <= t1
                else:
                    assert r.samples == []
            assert counted == [37, 0, 5] and ran == [True, True, True]
            # neigh_events: 23 entries written from the cgroup (one `ip` exec each).
            assert fleet.open_window("run", "w4", nodes, traceparent=PARENT, timeout_s=30) == {}
            write(cg, ns, dev, 23, "add")
            (r,), missing = fleet.close_window("run", "w4", timeout_s=30)
            assert missing == [] and r.error == ""
            assert r.counters["neigh.create"] == 23 and r.counters[f"neigh.create.dev.{dev}"] == 23
            assert r.counters["exec"] == 23
            (span,) = otlpjson.spans_of(otlpjson.to_json(fleet.take_spans("w1")))
            attrs = otlpjson.attributes(span["attributes"])
            assert span["name"] == "probe window" and span["traceId"] == PARENT.split("-")[1]
            assert span["parentSpanId"] == PARENT.split("-")[2]
            assert attrs["swarmscope.kernel.n1.exec"] == 37 and attrs["swarmscope.window_id"] == "w1"
            names = sorted(e["name"] for e in span["events"])  # n1 and host: a reading and a sample each
            assert names == ["exec.window", "exec.window", "reading", "reading"]
            (state,) = [p for p in fleet.probes() if p.host == node]
            assert (
                state.programs == ["exec_count", "neigh_events", "bpf_stats"]
                and 0 < state.rss_bytes < 40 << 20
            )
            fleet.shutdown_probes("test over")
            assert proc.wait(15) == 0
            assert _claims(proc.pid) == {} and not any(os.path.exists(p) for p in paths)
            # Over OTLP too (http/protobuf, flushed before exit): one span per window, children
            # of the controller's span.
            exported = otlp_sink.spans()
            assert sorted(otlpjson_window(sp) for sp in exported) == ["w1", "w2", "w3", "w4"]
            assert {sp.parent_span_id.hex() for sp in exported} == {PARENT.split("-")[2]}
    finally:
        fleet.stop()
        otlp_sink.server.shutdown()
        otlp_sink.server.server_close()


@pytest.mark.root
@pytest.mark.bpf
def test_native_probe_refuses_a_controller_without_the_token_and_unpins(reader: str) -> None:
    fleet = Fleet("another-token-456789")
    fleet.start()
    try:
        with _native(reader, fleet.address, f"nat-bad-{os.getpid()}") as proc:
            assert proc.wait(120) == 1
            assert proc.stderr is not None
            err = proc.stderr.read()
            assert "failed to prove it holds the token" in err, err
            assert _claims(proc.pid) == {}
        assert fleet.probes(alive_only=False) == []
    finally:
        fleet.stop()


@pytest.mark.root
@pytest.mark.bpf
def test_killed_native_probe_leaves_pins_that_the_sweep_removes(reader: str, fleet: Fleet) -> None:
    node = f"nat-kill-{os.getpid()}"
    with _native(reader, fleet.address, node) as proc:
        fleet.wait_for_probes(hosts={node}, timeout_s=120)
        (claim,) = _claims(proc.pid).values()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert os.path.exists(claim["path"])  # nothing ran at the kill
        assert any(n.startswith(f"probe-{proc.pid}-") for n in pinned.sweep_stale())
        assert not os.path.exists(claim["path"]) and _claims(proc.pid) == {}


@pytest.mark.root
@pytest.mark.bpf
def test_native_probe_reconnects_mid_window_and_keeps_the_exact_count(reader: str, fleet: Fleet) -> None:
    node = f"nat-rc-{os.getpid()}"
    port = fleet.address.rsplit(":", 1)[1]
    with _native(reader, fleet.address, node) as proc, temp_cgroup("natrc") as cg:
        fleet.wait_for_probes(hosts={node}, timeout_s=120)
        nodes = {node: [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]}
        assert fleet.open_window("run", "w-rc", nodes, timeout_s=30) == {}
        exec_in_cgroup(cg, 40)
        # The connection drops mid-window: the kernel closes the reader's socket (ss -K).
        kill = ["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"]
        subprocess.run(kill, check=True, capture_output=True, timeout=10)
        deadline = time.monotonic() + 20
        while not [p for p in fleet.probes() if p.host == node and p.reconnects == 1]:
            assert time.monotonic() < deadline, "the reader did not reconnect"
            time.sleep(0.05)
        exec_in_cgroup(cg, 60)
        (r,), missing = fleet.close_window("run", "w-rc", timeout_s=30)
        assert missing == [] and r.error == "" and r.counters["exec"] == 100
        # The reader is the CLI process after execv: its probe id carries the CLI's pid.
        assert fleet.take_reconnects("w-rc") == {f"{socket.gethostname()}-{proc.pid}@{node}": 1}


@pytest.mark.root
@pytest.mark.bpf
def test_native_probe_moves_from_a_killed_relay_to_the_controller_with_its_count(
    reader: str, fleet: Fleet
) -> None:
    """``--controller relay,controller``: the reader registers at the relay; the relay is
    SIGKILLed mid-window; the reader re-registers (same id) at the controller, which moves the
    open window to it, and the window closes with every exec of both halves."""
    node = f"nat-rl-{os.getpid()}"
    relay, addr = start_relay("relay-nat", fleet.address, token=TOKEN)
    try:
        with _native(reader, f"{addr},{fleet.address}", node) as proc, temp_cgroup("natrl") as cg:
            fleet.wait_for_probes(hosts={node}, timeout_s=120)
            pid = f"{socket.gethostname()}-{proc.pid}"
            assert {p.probe_id: p.via for p in fleet.probes()} == {pid: "relay-nat"}
            nodes = {node: [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]}
            assert fleet.open_window("run", "w-rl", nodes, timeout_s=30) == {}
            exec_in_cgroup(cg, 30)
            relay.kill()
            relay.wait(10)
            deadline = time.monotonic() + 30
            while {p.probe_id: p.via for p in fleet.probes()} != {pid: ""}:
                assert time.monotonic() < deadline, "the reader did not move to the controller"
                time.sleep(0.05)
            exec_in_cgroup(cg, 45)
            (r,), missing = fleet.close_window("run", "w-rl", timeout_s=30)
            assert (missing, r.error, r.counters["exec"]) == ([], "", 75)
            assert fleet.take_reconnects("w-rl") == {f"{pid}@{node}": 1}
    finally:
        relay.kill()
        relay.wait(10)


@pytest.mark.root
@pytest.mark.bpf
def test_native_syscall_count_counts_its_startup_filter_exactly_and_refuses_a_window_filter(
    reader: str,
    fleet: Fleet,
) -> None:
    node = f"nat-sc-{os.getpid()}"
    with (
        _native(
            reader, fleet.address, node, "--programs", "syscall_count", SWARMSCOPE_SYSCALLS="getppid,39"
        ) as proc,
        temp_cgroup("natsc") as cg,
    ):
        fleet.wait_for_probes(hosts={node}, timeout_s=120)
        nodes = {node: [pb.NodeInfo(name="n1", cgroup_path=str(cg))]}
        assert fleet.open_window("run", "s1", nodes, timeout_s=30) == {}
        getppid_in_cgroup(cg, 41)
        (r,), missing = fleet.close_window("run", "s1", timeout_s=30)
        assert missing == [] and r.error == ""
        # The filter's counters only, each present (an explicit zero if none happened).
        assert set(r.counters) == {"sys.getppid", "sys.getpid"} and r.counters["sys.getppid"] == 41
        # A per-window filter would need the BCC loader: the ack fails, naming the key.
        opts = {"syscall_count.syscalls": "openat"}
        problems = fleet.open_window("run", "s2", nodes, options=opts, timeout_s=30)
        assert "syscall_count.syscalls: program syscall_count takes no per-window options" in problems[node]
        fleet.shutdown_probes("test over")
        assert proc.wait(15) == 0


@pytest.mark.root
@pytest.mark.bpf
def test_native_pkt_count_counts_packets_exactly_and_detaches_at_exit(reader: str, fleet: Fleet) -> None:
    node = f"nat-pkt-{os.getpid()}"
    with veth_pair() as (a, b):
        env = {"SWARMSCOPE_PKT_INTERFACES": "ssb", "SWARMSCOPE_PKT_NETNS": b}
        with _native(reader, fleet.address, node, "--programs", "pkt_count", **env) as proc:
            fleet.wait_for_probes(hosts={node}, timeout_s=120)
            assert fleet.open_window("run", "p1", {node: [pb.NodeInfo(name="host")]}, timeout_s=30) == {}
            send(a, 300)
            (r,), missing = fleet.close_window("run", "p1", timeout_s=30)
            assert missing == [] and r.error == ""
            assert r.counters["if.ssb.packets"] == 300 and r.counters["if.ssb.ipv4"] == 300
            assert r.counters["if.ssb.bytes"] == 300 * 142 and r.counters["if.ssb.arp"] == 0
            fleet.shutdown_probes("test over")
            assert proc.wait(15) == 0
        deadline = time.monotonic() + 5  # a removed link pin is released by deferred work
        show = ["ip", "-n", b, "link", "show", "ssb"]
        while "xdp" in (out := subprocess.run(show, capture_output=True, text=True).stdout):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "xdp" not in out


def test_native_mode_refuses_what_it_does_not_carry_naming_each() -> None:
    cmd = [
        sys.executable,
        "-m",
        "swarmscope",
        "probe",
        "--mode",
        "native",
        "--controller",
        "127.0.0.1:1",
    ]
    cmd += ["--programs", "exec_count,neigh_events,map_update,flow_count", "--metrics-port", "9"]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SWARMSCOPE_TOKEN": TOKEN})
    assert p.returncode != 0
    for name in ("map_update", "flow_count", "--metrics-port"):
        assert name in p.stderr, p.stderr
    assert "exec_count:" not in p.stderr and "neigh_events:" not in p.stderr
