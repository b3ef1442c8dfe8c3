"""The probe (``swarmscope probe``) against the real controller fleet: the BCC loader pins its
programs, the long-lived process reads the pins. Real BPF, real gRPC with mTLS, a relay and
its failover, real execs in a throw-away cgroup."""

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
from swarmscope.probes import pinned
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "fleet-probe-token-0123"
ROOT = Path(__file__).resolve().parent.parent
EXEC_FN = "tracepoint__sched__sched_process_exec"  # its BTF name (the kernel's is truncated)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _probe(
    address: str, node: str, *extra: str, **env: str
) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    args = ["--controller", address, "--node", node, *extra]
    return probe_cli(args, {"SWARMSCOPE_TOKEN": TOKEN, **env})


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


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_counts_exactly_over_mtls_and_its_span_reaches_the_trace(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    otlp_sink = OtlpSink()
    fleet = Fleet(TOKEN, tls=TLSFiles(cert=pki["server.crt"], key=pki["server.key"], ca=pki["ca.crt"]))
    fleet.start()
    node = f"probe-{os.getpid()}"
    args = ["--tls-ca", pki["ca.crt"], "--tls-cert", pki["client.crt"], "--tls-key", pki["client.key"]]
    args += ["--programs", "exec_count,neigh_events,bpf_stats"]
    try:
        with (
            _probe(
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
            # BCC and LLVM lived only in the loader: neither is mapped in the long-lived probe.
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            assert "libbcc" not in maps and "LLVM" not in maps and "libclang" not in maps
            claims = _claims(proc.pid)
            assert sorted(n.split("-")[2] for n in claims) == [
                "exec_count",
                "neigh_events",
            ]  # bpf_stats: none
            paths = [c["path"] for c in claims.values()]
            claims_by = {n.split("-")[2]: c["path"] for n, c in claims.items()}
            assert all(os.path.exists(p) for p in paths)
            # By a path relative to the v2 mount only: the probe resolves the id (on a hybrid
            # host the mount is /sys/fs/cgroup/unified).
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
            # The goal of docs/probe.md, with three programs, mTLS and OTLP export on.
            assert state.programs == ["exec_count", "neigh_events", "bpf_stats"]
            assert 0 < state.rss_bytes <= 40 << 20, state.rss_bytes
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
def test_probe_refuses_a_controller_without_the_token_and_unpins() -> None:
    fleet = Fleet("another-token-456789")
    fleet.start()
    try:
        with _probe(fleet.address, f"nat-bad-{os.getpid()}") as proc:
            assert proc.wait(120) == 1
            assert proc.stderr is not None
            err = proc.stderr.read()
            assert "failed to prove it holds the token" in err, err
            assert _claims(proc.pid) == {}
        assert fleet.probes(alive_only=False) == []
    finally:
        fleet.stop()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_killed_probe_leaves_pins_that_the_sweep_removes(fleet: Fleet) -> None:
    node = f"nat-kill-{os.getpid()}"
    with _probe(fleet.address, node) as proc:
        fleet.wait_for_probes(hosts={node}, timeout_s=120)
        (claim,) = _claims(proc.pid).values()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert os.path.exists(claim["path"])  # nothing ran at the kill
        assert any(n.startswith(f"probe-{proc.pid}-") for n in pinned.sweep_stale())
        assert not os.path.exists(claim["path"]) and _claims(proc.pid) == {}


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_reconnects_mid_window_and_keeps_the_exact_count(fleet: Fleet) -> None:
    node = f"nat-rc-{os.getpid()}"
    port = fleet.address.rsplit(":", 1)[1]
    with _probe(fleet.address, node) as proc, temp_cgroup("natrc") as cg:
        fleet.wait_for_probes(hosts={node}, timeout_s=120)
        nodes = {node: [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]}
        assert fleet.open_window("run", "w-rc", nodes, timeout_s=30) == {}
        exec_in_cgroup(cg, 40)
        # The connection drops mid-window: the kernel closes the probe's socket (ss -K).
        kill = ["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"]
        subprocess.run(kill, check=True, capture_output=True, timeout=10)
        deadline = time.monotonic() + 20
        while not [p for p in fleet.probes() if p.host == node and p.reconnects == 1]:
            assert time.monotonic() < deadline, "the probe did not reconnect"
            time.sleep(0.05)
        exec_in_cgroup(cg, 60)
        (r,), missing = fleet.close_window("run", "w-rc", timeout_s=30)
        assert missing == [] and r.error == "" and r.counters["exec"] == 100
        assert fleet.take_reconnects("w-rc") == {f"{socket.gethostname()}-{proc.pid}@{node}": 1}


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_moves_from_a_killed_relay_to_the_controller_with_its_count(
    fleet: Fleet,
) -> None:
    """``--controller relay,controller``: the probe registers at the relay; the relay is
    SIGKILLed mid-window; the probe re-registers (same id) at the controller, which moves the
    open window to it, and the window closes with every exec of both halves."""
    node = f"nat-rl-{os.getpid()}"
    relay, addr = start_relay("relay-nat", fleet.address, token=TOKEN)
    try:
        with _probe(f"{addr},{fleet.address}", node) as proc, temp_cgroup("natrl") as cg:
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
                assert time.monotonic() < deadline, "the probe did not move to the controller"
                time.sleep(0.05)
            exec_in_cgroup(cg, 45)
            (r,), missing = fleet.close_window("run", "w-rl", timeout_s=30)
            assert (missing, r.error, r.counters["exec"]) == ([], "", 75)
            assert fleet.take_reconnects("w-rl") == {f"{pid}@{node}": 1}
    finally:
        relay.kill()
        relay.wait(10)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_syscall_count_counts_its_startup_and_window_filters_exactly(
    fleet: Fleet,
) -> None:
    node = f"nat-sc-{os.getpid()}"
    with (
        _probe(fleet.address, node, "--programs", "syscall_count", SWARMSCOPE_SYSCALLS="getppid,39") as proc,
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
        # A per-window filter: a slot written into the pinned filter map, no reload.
        opts = {"syscall_count.syscalls": "getppid"}
        assert fleet.open_window("run", "s2", nodes, options=opts, timeout_s=30) == {}
        getppid_in_cgroup(cg, 17)
        (r,), missing = fleet.close_window("run", "s2", timeout_s=30)
        assert missing == [] and r.error == "" and dict(r.counters) == {"sys.getppid": 17}
        fleet.shutdown_probes("test over")
        assert proc.wait(15) == 0


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_pkt_count_counts_packets_exactly_and_detaches_at_exit(fleet: Fleet) -> None:
    node = f"nat-pkt-{os.getpid()}"
    with veth_pair() as (a, b):
        env = {"SWARMSCOPE_PKT_INTERFACES": "ssb", "SWARMSCOPE_PKT_NETNS": b}
        with _probe(fleet.address, node, "--programs", "pkt_count", **env) as proc:
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


def test_probe_has_one_mode() -> None:
    """One probe: no ``--mode`` in its help, and the option is refused as unknown."""
    cmd = [sys.executable, "-m", "swarmscope", "probe"]
    help_text = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--mode" not in help_text and "exec_count" in help_text and "flow_count" in help_text
    p = subprocess.run([*cmd, "--mode", "light", "--once"], capture_output=True, text=True)
    assert p.returncode == 2 and "unrecognized arguments: --mode" in p.stderr, p.stderr
