"""The probe (``swarmscope probe``): BCC only in a short-lived loader process, the long-lived
probe reads pinned maps. Real BPF, real gRPC (the stand-in controller of
agent_helpers), real execs in a throw-away cgroup; what a killed probe leaves is swept."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from agent_helpers import TOKEN, TestController, serve_controller
from probe_helpers import exec_in_cgroup, map_updates_in_cgroup, probe_cli, temp_cgroup

from swarmscope.app import lifecycle
from swarmscope.core.sys import bpf, owners
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.v1 import probe_pb2 as pb


@pytest.fixture
def controller() -> Iterator[tuple[TestController, str]]:
    yield from serve_controller()


@contextlib.contextmanager
def _probe(controller: tuple[TestController, str], node: str) -> Iterator[subprocess.Popen[str]]:
    """``swarmscope probe`` as a process, registered (its first heartbeat in), and
    killed (if still running) at the end."""
    ctl, addr = controller
    args = ["--controller", addr, "--node", node, "--programs", "exec_count,bpf_stats"]
    with probe_cli(args, {"SWARMSCOPE_TOKEN": TOKEN}) as proc:
        ctl.wait_for("heartbeat", timeout=60)
        yield proc


def _claims(pid: int) -> dict[str, dict]:
    """This probe's pin-dir claims, by name."""
    return {n: d for n, d in owners.claims("pindir") if d.get("pid") == pid}


def _prog_loaded(prog_id: int) -> bool:
    fd = bpf.prog_fd_by_id(prog_id)
    if fd is not None:
        os.close(fd)  # an fd held here would keep the program loaded
    return fd is not None


def _pinned_link(pid: int) -> bool:
    paths = [d["path"] for d in _claims(pid).values()]
    return any(os.path.exists(f"{p}/link_tracepoint__sched__sched_process_exec") for p in paths)


def _children(pid: int) -> str:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
        return fh.read().strip()


def _mapped(pid: int) -> str:
    with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as fh:
        return fh.read()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_counts_execs_exactly_without_bcc_and_unpins_at_exit(controller) -> None:
    ctl = controller[0]
    with _probe(controller, "pin-node") as proc:
        assert list(ctl.registers[0].programs) == ["exec_count", "bpf_stats"]
        # The loader pinned under a claimed directory of the probe's own (not the loader's).
        (claim,) = _claims(proc.pid).values()
        pins = sorted(os.listdir(claim["path"]))
        assert pins == [
            "link_tracepoint__sched__sched_process_exec",
            "map_exec_count",
            "map_exec_open",
            "map_exec_open_any",
            "prog_tracepoint__sched__sched_process_exec",
        ]
        # A stable property, not a timing: neither BCC nor LLVM is mapped in the long-lived probe.
        maps = _mapped(proc.pid)
        assert "libLLVM" not in maps and "libbcc" not in maps and "libclang" not in maps
        with temp_cgroup("pinned") as cg:
            node = pb.NodeInfo(name="pin-node", cgroup_id=cgroup_id(cg))
            for window, execs in (("w1", 37), ("w2", 0), ("w3", 5)):
                ctl.send(open=pb.OpenWindow(run_id="r", window_id=window, nodes=[node]))
                assert ctl.wait_for("ack").ack.ok
                before = time.monotonic_ns()
                exec_in_cgroup(cg, execs)
                after = time.monotonic_ns()
                ctl.send(close=pb.CloseWindow(run_id="r", window_id=window))
                (r,), done = ctl.window_result()
                assert r.error == "" and dict(r.counters) == {"exec": execs}
                # First/last exec times restart per window: none in w2, w3's own in w3.
                if execs:
                    (s,) = r.samples
                    assert s.series == "exec.window" and before <= s.start_ns <= s.end_ns <= after
                else:
                    assert list(r.samples) == []
                assert done.trace  # the window span rides back
        ctl.send(shutdown=pb.Shutdown(reason="test over"))
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        assert not os.path.exists(claim["path"]) and _claims(proc.pid) == {}


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_killed_probe_leaves_pins_that_the_next_run_sweeps(controller) -> None:
    with _probe(controller, "pin-killed") as proc:
        (name, claim), *_ = _claims(proc.pid).items()
        fd = bpf.obj_get(f"{claim['path']}/prog_tracepoint__sched__sched_process_exec")
        prog_id = bpf.prog_info(fd).id
        os.close(fd)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=15)
        # The pinned link keeps the program attached after its probe died...
        assert os.path.isdir(claim["path"]) and _prog_loaded(prog_id)
        swept = lifecycle.sweep_stale()
        assert name in swept.get("pindir", []), json.dumps(swept)
        # ...until the sweep unpins it: the kernel frees the program (RCU: shortly after).
        assert not os.path.exists(claim["path"])
        deadline = time.monotonic() + 10
        while _prog_loaded(prog_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _prog_loaded(prog_id)


@pytest.mark.root
def test_failed_load_leaves_no_pin_dir_and_no_claim() -> None:
    from swarmscope.core.errors import ProbeError
    from swarmscope.probes import pinned

    before = {n for n, d in owners.claims("pindir") if d.get("pid") == os.getpid()}
    with pytest.raises(ProbeError, match=r"loading no_such: the loader exited 1: .*no BPF program 'no_such'"):
        pinned.load("no_such")
    assert {n for n, d in owners.claims("pindir") if d.get("pid") == os.getpid()} == before
    assert not [e for e in os.listdir(pinned.PIN_ROOT) if e.startswith(f"ss-probe-{os.getpid()}-no_such")]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_map_update_samples_come_from_the_pinned_ring_buffer_without_bcc(controller) -> None:
    """map_update in nodes mode: the calls of the node's cgroup, exactly, with one sample per
    call read from the pinned ring buffer through libbpf (no BCC in the long-lived probe)."""
    ctl, addr = controller
    n, m = 13, 250
    args = ["--controller", addr, "--node", "mu-node", "--programs", "map_update"]
    env = {"SWARMSCOPE_TOKEN": TOKEN, "SWARMSCOPE_MAP_UPDATE_NODES": "1"}
    with probe_cli(args, env) as proc:
        ctl.wait_for("heartbeat", timeout=60)
        maps = _mapped(proc.pid)
        assert "libLLVM" not in maps and "libbcc" not in maps and "libclang" not in maps
        with temp_cgroup("mu") as cg:
            node = pb.NodeInfo(name="mu-node", cgroup_id=cgroup_id(cg))
            ctl.send(open=pb.OpenWindow(run_id="r", window_id="w1", nodes=[node]))
            assert ctl.wait_for("ack").ack.ok
            with map_updates_in_cgroup(cg, n, m) as (pid, mid):
                time.sleep(0.3)  # > poll_s: the pump resolved the fd while the child holds it
                ctl.send(close=pb.CloseWindow(run_id="r", window_id="w1"))
                (r,), _done = ctl.window_result()
        assert r.error == ""
        assert (r.counters["map_update.calls"], r.counters["map_update.entries"]) == (n + 1, n + m)
        assert r.counters[f"map_update.map.{mid}.entries"] == n + m
        assert [s.value for s in r.samples] == [1] * n + [m]
        assert {(s.labels["pid"], s.labels["map_id"]) for s in r.samples} == {(str(pid), str(mid))}
        ctl.send(shutdown=pb.Shutdown(reason="test over"))
        assert proc.wait(timeout=15) == 0
    assert _claims(proc.pid) == {}


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_once_counts_a_cgroup_and_leaves_no_pins() -> None:
    with temp_cgroup("once") as cg:
        cmd = [sys.executable, "-m", "swarmscope", "probe", "--once", "--seconds", "6", "--json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            # The window starts once the loader is done (the claim comes before it): wait for
            # the pinned link and the loader's exit, then exec.
            deadline = time.monotonic() + 60
            while not (_pinned_link(proc.pid) and not _children(proc.pid)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _pinned_link(proc.pid), "the probe never pinned its program"
            time.sleep(1.0)  # the first snapshot follows the loader's exit by milliseconds
            exec_in_cgroup(cg, 9)
            out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
        rows = {r["cgroup_id"]: r["counters"] for r in json.loads(out)["cgroups"]}
        assert rows[cgroup_id(cg)] == {"exec": 9} and proc.returncode == 0
    assert _claims(proc.pid) == {}
