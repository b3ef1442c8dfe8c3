"""Per-window program options and per-event samples, through a real agent over real gRPC.

The agent loads the real programs (procstat's sampler, map_update's BPF program); the controller
is the in-test stand-in of tests/test_probe_agent.py. Options ride in OpenWindow.options as
``"<program>.<param>": "<text>"``; a window without them reads with the start-up settings.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
from probe_helpers import temp_cgroup
from test_probe_agent import TOKEN, AgentThread, TestController, _serve
from test_probe_procstat_prog import busy

from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.programs.base import Program, get_program
from swarmscope.probes.programs.procstat import GAUGES, ProcStat
from swarmscope.v1 import probe_pb2 as pb

# argv: cgroup dir, K element updates, B batch entries. Creates a hash map, prints
# "<pid> <map id>", waits for a line on stdin, makes the updates, prints "done", then keeps
# the fd open until stdin closes (the probe resolves fd -> map id while it is open).
UPDATER = """
import os, struct, sys
from swarmscope.core.sys import bpf
open(sys.argv[1] + "/cgroup.procs", "w").write("0")
k, b = int(sys.argv[2]), int(sys.argv[3])
fd = bpf.map_create(1, "ss_opts_test", 4, 8, 4096)  # BPF_MAP_TYPE_HASH, key 4, value 8
print(os.getpid(), bpf.fd_map_id(os.getpid(), fd), flush=True)
sys.stdin.readline()
for i in range(k):
    bpf.map_update_elem(fd, struct.pack("=I", i), struct.pack("=Q", i))
if b:
    keys = b"".join(struct.pack("=I", 10000 + i) for i in range(b))
    vals = b"".join(struct.pack("=Q", i) for i in range(b))
    assert bpf.map_update_batch(fd, keys, vals, 4, 8) == b
print("done", flush=True)
sys.stdin.read()
"""


class Updater:
    def __init__(self, cg: str, k: int, b: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", UPDATER, cg, str(k), str(b)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.pid, self.map_id = (int(x) for x in self.proc.stdout.readline().split())

    def run(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def end(self) -> None:
        self.proc.communicate("", timeout=10)


@pytest.fixture
def controller():
    ctl = TestController()
    server, port = _serve(ctl)
    yield ctl, f"127.0.0.1:{port}"
    server.stop(0)


def _window(
    ctl: TestController, wid: str, nodes: list[pb.NodeInfo], options: dict[str, str], seconds: float = 0.0
) -> tuple[pb.WindowAck, list[pb.Reading]]:
    ctl.send(open=pb.OpenWindow(run_id="r", window_id=wid, nodes=nodes, options=options))
    ack = ctl.wait_for("ack", timeout=30).ack
    time.sleep(seconds)
    ctl.send(close=pb.CloseWindow(run_id="r", window_id=wid))
    readings, _ = ctl.window_result(timeout=30)
    return ack, readings


@pytest.mark.slow
@pytest.mark.root
def test_procstat_pids_per_window_then_startup_selection(controller) -> None:
    ctl, addr = controller
    with temp_cgroup("opt-a") as cg_a, temp_cgroup("opt-b") as cg_b:
        a, b = busy(str(cg_a), 60), busy(str(cg_b), 60)
        progs: dict[str, Program] = {"procstat": ProcStat(pids=[a.pid], interval_s=0.2)}
        run = AgentThread(ProbeAgent(addr, TOKEN, "n", ["procstat"], program_factory=progs.__getitem__))
        try:
            ctl.wait_for("heartbeat", timeout=30)
            nodes = [
                pb.NodeInfo(name="a", cgroup_id=cgroup_id(cg_a)),
                pb.NodeInfo(name="b", cgroup_id=cgroup_id(cg_b)),
                pb.NodeInfo(name="host", cgroup_id=0),
            ]
            ack, readings = _window(ctl, "w-b", nodes, {"procstat.pids": str(b.pid)}, seconds=1.5)
            assert (ack.ok, ack.error) == (True, "")
            g = {r.node: r.gauges for r in readings}
            assert [r.error for r in readings] == ["", "", ""]
            # Exactly the chosen process: b, not the start-up a.
            assert (g["a"]["proc.processes"], g["b"]["proc.processes"], g["host"]["proc.processes"]) == (
                0.0,
                1.0,
                1.0,
            )
            assert g["b"]["proc.ticks"] >= 4 and g["b"]["proc.cpu_pct"] > 10

            # No options: back to the start-up selection (a).
            ack, readings = _window(ctl, "w-startup", nodes, {}, seconds=1.5)
            assert (ack.ok, ack.error) == (True, "")
            g = {r.node: r.gauges for r in readings}
            assert (g["a"]["proc.processes"], g["b"]["proc.processes"], g["host"]["proc.processes"]) == (
                1.0,
                0.0,
                1.0,
            )
        finally:
            run.stop()
            for p in (a, b):
                p.kill()
                p.wait()
    assert run.error is None


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_map_update_samples_every_call_of_the_chosen_pid(controller, monkeypatch) -> None:
    monkeypatch.delenv("SWARMSCOPE_MAP_UPDATE_PIDS", raising=False)  # start-up: every process
    ctl, addr = controller
    k, b = 37, 250
    run = AgentThread(ProbeAgent(addr, TOKEN, "n", ["map_update"]))
    try:
        ctl.wait_for("heartbeat", timeout=60)  # BCC compile + load first
        with temp_cgroup("mu-opt") as cg, temp_cgroup("mu-other") as cg_other:
            chosen, other = Updater(str(cg), k, b), Updater(str(cg_other), 5, 10)
            try:
                nodes = [
                    pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg)),
                    pb.NodeInfo(name="host", cgroup_id=0),
                ]
                ctl.send(
                    open=pb.OpenWindow(
                        run_id="r", window_id="w1", nodes=nodes, options={"map_update.pids": str(chosen.pid)}
                    )
                )
                ack = ctl.wait_for("ack", timeout=30).ack
                assert (ack.ok, ack.error) == (True, "")
                t0 = time.monotonic_ns()
                chosen.run()
                other.run()  # another pid's calls in the same window: not recorded
                t1 = time.monotonic_ns()
                time.sleep(0.3)  # > poll_s: the pump resolved the fds to map ids
                ctl.send(close=pb.CloseWindow(run_id="r", window_id="w1"))
                readings, _ = ctl.window_result(timeout=30)
            finally:
                chosen.end()
                other.end()
        by_node = {r.node: r for r in readings}
        for r in readings:
            assert r.error == ""
            assert len(r.samples) == k + 1
            assert sum(s.value for s in r.samples) == k + b
            assert all(t0 <= s.start_ns <= s.end_ns <= t1 for s in r.samples)  # CLOCK_MONOTONIC
            assert {s.series for s in r.samples} == {"map_update.call"}
            assert {(s.labels["pid"], s.labels["map_id"]) for s in r.samples} == {
                (str(chosen.pid), str(chosen.map_id))
            }
            assert Counter(s.labels["cmd"] for s in r.samples) == {"elem": k, "batch": 1}
            assert [s.value for s in r.samples if s.labels["cmd"] == "batch"] == [b]
        # The counters follow the same selection: the chosen pid only.
        assert by_node["n1"].counters["map_update.calls"] == k + 1
        assert by_node["host"].counters["map_update.calls"] == k + 1
        assert by_node["host"].counters["map_update.entries"] == k + b

        # No options: the start-up settings (every process, no pid list, so no samples).
        with temp_cgroup("mu-again") as cg:
            again = Updater(str(cg), 3, 0)
            try:
                nodes = [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]
                ctl.send(open=pb.OpenWindow(run_id="r", window_id="w2", nodes=nodes))
                assert ctl.wait_for("ack", timeout=30).ack.ok
                again.run()
                time.sleep(0.3)
                ctl.send(close=pb.CloseWindow(run_id="r", window_id="w2"))
                (r2,), _ = ctl.window_result(timeout=30)
            finally:
                again.end()
        assert r2.error == "" and len(r2.samples) == 0
        assert r2.counters["map_update.calls"] == 3

        # More calls than map_update.max_samples: the first ones, and an error saying so.
        with temp_cgroup("mu-many") as cg:
            many = Updater(str(cg), 20, 0)
            try:
                nodes = [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg))]
                opts = {"map_update.pids": str(many.pid), "map_update.max_samples": "10"}
                ctl.send(open=pb.OpenWindow(run_id="r", window_id="w3", nodes=nodes, options=opts))
                assert ctl.wait_for("ack", timeout=30).ack.ok
                many.run()
                time.sleep(0.3)
                ctl.send(close=pb.CloseWindow(run_id="r", window_id="w3"))
                (r3,), _ = ctl.window_result(timeout=30)
            finally:
                many.end()
        assert (
            r3.error
            == "map_update: samples incomplete: 20 calls, only the first 10 kept (map_update.max_samples)"
        )
        assert len(r3.samples) == 10 and r3.counters["map_update.calls"] == 20
        ends = [s.end_ns for s in r3.samples]
        assert ends == sorted(ends)
    finally:
        run.stop()
    assert run.error is None


@pytest.mark.root
@pytest.mark.bpf
def test_bad_options_fail_the_ack_and_the_probe_stays_up(controller, monkeypatch) -> None:
    monkeypatch.delenv("SWARMSCOPE_MAP_UPDATE_PIDS", raising=False)
    ctl, addr = controller
    run = AgentThread(ProbeAgent(addr, TOKEN, "n", ["procstat", "map_update"]))
    try:
        ctl.wait_for("heartbeat", timeout=60)
        node = [pb.NodeInfo(name="host", cgroup_id=0)]
        bad = {
            "procstat.bogus": "1",
            "map_update.pids": "x",
            "procstat.interval": "2",
            "syscall_count.syscalls": "getpid",
            "nosuch.x": "1",
        }
        ack, (r,) = _window(ctl, "w-bad", node, bad)
        assert not ack.ok
        assert ack.error == (
            "bad options: map_update.pids: item 0: must be an integer, not 'x'; "
            "nosuch.x: unknown program 'nosuch' (known: exec_count, syscall_count, pkt_count, "
            "bpf_stats, map_update, neigh_events, neigh_netlink, procstat, flow_count); "
            "procstat.bogus: unknown option (known: procstat.cgroups, procstat.names, procstat.pids); "
            "procstat.interval: start-up only (set $SWARMSCOPE_PROC_INTERVAL when starting the probe); "
            "syscall_count.syscalls: program syscall_count is not read in this window"
        )
        # Nothing was read under settings nobody asked for.
        assert r.error == ack.error and dict(r.counters) == {} and dict(r.gauges) == {}

        ack, (r,) = _window(ctl, "w-good", node, {"map_update.max_samples": "10", "procstat.pids": "1"})
        assert (ack.ok, ack.error, r.error) == (True, "", "")
        assert r.counters["map_update.ringbuf_dropped"] == 0
        assert {k for k in r.gauges if not k.startswith("proc.pid.")} == set(GAUGES)
        assert run.thread.is_alive()
    finally:
        run.stop()
    assert run.error is None


def test_registry_programs_declare_their_params() -> None:
    from swarmscope.probes.programs.base import PROGRAMS, all_program_params, program_params, window_params

    keys = [f.key for f in all_program_params()]
    assert len(keys) == len(set(keys))
    for name in PROGRAMS:
        assert all(f.key.startswith(name + ".") for f in program_params(name))
        assert window_params(name) <= {f.key for f in program_params(name)}
    assert window_params("map_update") == {"map_update.pids", "map_update.max_samples", "map_update.nodes"}
    assert window_params("procstat") == {"procstat.pids", "procstat.names", "procstat.cgroups"}
    assert window_params("syscall_count") == {"syscall_count.syscalls"}


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_syscall_count_filter_changes_without_and_with_reload(monkeypatch) -> None:
    monkeypatch.delenv("SWARMSCOPE_SYSCALLS", raising=False)
    prog = get_program("syscall_count")
    from swarmscope.probes.programs.syscall_count import SyscallCount

    assert isinstance(prog, SyscallCount)
    prog.configure({"syscall_count.syscalls": ["getppid"]})  # before load: just the setting
    prog.load()
    try:
        bpf = prog._bpf
        prog.configure({"syscall_count.syscalls": ["getpid", "getppid"]})
        assert prog._bpf is bpf and prog.counters == ("sys.getpid", "sys.getppid")  # no reload
        prog.configure({"syscall_count.syscalls": None})
        assert prog.filter is None and prog._bpf is not bpf and prog.counters == ()  # reloaded
    finally:
        prog.close()


class FakeConfigurable:
    """A stand-in ``procstat`` that records what it was configured with (no BPF, no sampler)."""

    name = "procstat"
    counters: tuple[str, ...] = ("ticks",)

    def __init__(self) -> None:
        self.configured: list[dict[str, object]] = []

    def load(self) -> None:
        pass

    def snapshot(self) -> dict[int, dict[str, int]]:
        return {0: {"ticks": len(self.configured)}}

    def configure(self, options) -> None:
        self.configured.append(dict(options))

    def close(self) -> None:
        pass


def test_options_apply_only_when_changed_and_mark_an_overlapping_window(controller) -> None:
    ctl, addr = controller
    fake = FakeConfigurable()
    run = AgentThread(ProbeAgent(addr, TOKEN, "n", ["procstat"], program_factory=lambda _: fake))
    try:
        ctl.wait_for("heartbeat")
        node = [pb.NodeInfo(name="host", cgroup_id=0)]
        opts = {"procstat.pids": "7"}
        for wid, o in (("w1", opts), ("w2", opts), ("w3", {})):
            ack, (r,) = _window(ctl, wid, node, o)
            assert (ack.ok, r.error) == (True, "")
        # Typed values; w2 repeated w1's options (no call); w3 went back to start-up ({}).
        assert fake.configured == [{"procstat.pids": [7]}, {}]

        # w5 changes the options while w4 is open: w4's reading says so, w5's is clean.
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w4", nodes=node))
        assert ctl.wait_for("ack").ack.ok
        ctl.send(open=pb.OpenWindow(run_id="r", window_id="w5", nodes=node, options={"procstat.names": "x"}))
        assert ctl.wait_for("ack").ack.ok
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w4"))
        (r4,), _ = ctl.window_result()
        ctl.send(close=pb.CloseWindow(run_id="r", window_id="w5"))
        (r5,), _ = ctl.window_result()
        assert r4.error == "procstat: options changed by window w5 while open"
        assert r5.error == ""
        assert fake.configured[-1] == {"procstat.names": ["x"]}
    finally:
        run.stop()
    assert run.error is None
