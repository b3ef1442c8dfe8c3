"""XDP datapath and kernel-side clocks: real BPF programs, a veth pair in our own namespace."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from helpers import load_report, only_run_dir
from neighbors_util import check_neighbor_points, check_recount, needs_root, run_with_recount

from swarmscope.core.sys import bpf
from swarmscope.probes.map_update import CMD_UPDATE_BATCH, CMD_UPDATE_ELEM, MapUpdateTracer
from swarmscope.probes.neigh_events import NeighEventCounter
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.agent import KernelTarget, XdpTarget
from swarmscope.targets.neighbors.netns import VethNetns

pytestmark = [needs_root, pytest.mark.bpf]


@pytest.fixture(scope="module")
def xdp():
    t = XdpTarget(None, max_entries=1 << 17, miss_action="XDP_DROP")
    yield t
    t.close()


def dotted(k: bytes) -> str:
    return ".".join(map(str, k))


@pytest.mark.slow
def test_map_update_tracer_counts_every_update_with_time(xdp: XdpTarget) -> None:
    tr = MapUpdateTracer(pids=[os.getpid()])
    tr.load()
    try:
        xdp.clear()
        tr.events()
        t0 = time.monotonic_ns()
        k, v = R.make_entries(20_000)
        for a in range(0, 20_000, 3000):  # 7 batch calls, the last one short
            bpf.map_update_batch(xdp.fd, k[a * 4 : (a + 3000) * 4], v[a * 12 : (a + 3000) * 12])
        for i in range(25):
            xdp.set_revision(i)  # 25 single-element updates of another map
        t1 = time.monotonic_ns()
        ev = tr.events()
        batch = [e for e in ev if e.cmd == CMD_UPDATE_BATCH]
        elem = [e for e in ev if e.cmd == CMD_UPDATE_ELEM]
        assert [e.processed for e in batch] == [3000] * 6 + [2000]
        assert len(elem) == 25 and all(e.processed == 1 for e in elem)
        assert all(t0 <= e.enter_ns <= e.exit_ns <= t1 for e in ev)
        assert {e.map_fd for e in batch} == {xdp.fd} and bpf.fd_map_id(os.getpid(), xdp.fd)
        tot = tr.snapshot()
        assert tot[(os.getpid(), CMD_UPDATE_BATCH)].entries >= 20_000
        assert tr.dropped() == 0
    finally:
        tr.close()


def test_xdp_handles_programmed_neighbors_as_programmed(xdp: XdpTarget) -> None:
    with VethNetns() as ns:
        xdp.clear()
        xdp.attach(ns.host_dev)
        try:
            k, v = R.make_entries(50_000, ifindex=0)
            for a in range(0, 50_000, 8192):
                xdp.apply(k[a * 4 : (a + 8192) * 4], v[a * 12 : (a + 8192) * 12])
            got = xdp.contents()  # read back in batches
            keys = [k[i : i + 4] for i in range(0, len(k), 4)]
            assert got == dict(zip(keys, R.split_values(v), strict=True))
            sample = random.sample(range(50_000), 20)
            absent = [dotted(R.make_keys(1, 60_000 + i)) for i in range(5)]
            before = xdp.stats()
            ns.send_udp([dotted(k[i * 4 : i * 4 + 4]) for i in sample], per_addr=3)
            ns.send_udp(absent)
            time.sleep(0.1)
            after = xdp.stats()
            assert after[0] - before[0] == 60  # hits: 20 programmed IPs x 3 packets
            assert after[1] - before[1] == 5  # misses: the 5 unprogrammed IPs
            xdp.apply(b"", b"", deleted=k[: 10 * 4])  # delete 10: their packets now miss
            before = xdp.stats()
            ns.send_udp([dotted(k[i * 4 : i * 4 + 4]) for i in range(10)])
            time.sleep(0.1)
            assert xdp.stats()[1] - before[1] == 10
        finally:
            xdp.bpf.remove_xdp(ns.host_dev.encode())
            xdp.attached.remove(ns.host_dev)


@pytest.mark.slow
def test_kernel_neighbor_table_target_counted_by_tracepoints(tmp_path: Path) -> None:
    ne = NeighEventCounter()
    ne.load()
    try:
        with VethNetns() as ns:
            ifindex = ns.add_dummy()
            t = KernelTarget(ifindex, ns.name, str(tmp_path / "rev"))
            before = ne.snapshot().get((os.getpid(), "update"))
            k, v = R.make_entries(3000)
            assert t.apply(k, v) == 3000
            after = ne.snapshot()[(os.getpid(), "update")]
            assert after.count - (before.count if before else 0) == 3000
            assert ns.neigh_count(ns.dummy) == 3000
            assert len(t.table.send_ns) == -(-3000 // 256)
            t.set_revision(9)
            assert t.revision() == 9
            t.close()
    finally:
        ne.close()


@pytest.mark.slow
def test_pipeline_small_points_verified(tmp_path: Path) -> None:
    """N=1 and 2000 through `swarmscope run`: a worker's agent, the probe's kernel clock."""
    out, recount = tmp_path / "out", str(tmp_path / "recount.json")
    p = run_with_recount(
        recount, "scenarios/neighbor_writes.yaml", "--set", "neighbors=1,2000", "--set", "batch_size=500",
        "--set", "page_size=1000", "--set", "verify_packets=8", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    check_recount(recount, rep)  # bpftool's dump of the map, not the code's "verified"
    pts = check_neighbor_points(rep, [1, 2000], workers=1, page=1000, batch=500)
    for p in pts:
        assert p["p99_us"] <= p["total_ms"] * 1000 + 1  # rounding
        if p["mode"] == "write_watch_program":  # write -> commit -> datapath, each stage > 0
            assert 0 < p["commit_p50_us"] <= p["commit_p99_us"] < p["p99_us"]
            assert 0 < p["commit_to_datapath_p50_us"] < p["p99_us"]
    assert [p["update_calls"] for p in pts if p["neighbors"] == 2000] == [2, 0, 4]
    assert (only_run_dir(out) / "neighbors.png").stat().st_size > 10_000


@pytest.mark.slow
def test_kernel_table_target_on_the_pipeline_distributed(tmp_path: Path) -> None:
    """target=kernel through `swarmscope run`, two worker processes: each programs its own
    device's table; the probe's neigh_events counts per device (both workers share a cgroup)."""
    out, recount = tmp_path / "out", str(tmp_path / "recount.json")
    p = run_with_recount(
        recount, "scenarios/neighbor_writes.yaml", "--set", "target=kernel", "--set", "neighbors=701",
        "--set", "modes=list_program,write_watch_program",
        "--set", "batch_size=300", "--set", "plot=false", "--set", "mode=distributed",
        "--set", "workers=2", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    check_recount(recount, rep)  # ip neigh in each worker's namespace, not the code's "verified"
    pts = rep["neighbors"]["points"]
    assert [p["mode"] for p in pts] == ["list_program", "write_watch_program"]
    for p in pts:
        assert p["problems"] == [] and p["verified"] is True
        assert (p["generated"], p["kernel_entries"], p["reported"]) == (701, 701, 701)
        assert p["target"] == "kernel" and p["end_clock"].startswith("netlink ack")
        assert p["workers"] == 2 and 0 < p["p50_us"] <= p["p99_us"] <= p["total_ms"] * 1000 + 1
    # per node: the kernel's count of that worker's device, its share of N exactly
    nodes = [c for pt in rep["points"] for it in pt["iterations"] for c in it["per_node"]]
    assert sorted(c["kernel"] for c in nodes) == [350, 350, 351, 351]
    assert all(c["generated"] == c["kernel"] == c["reported"] for c in nodes)
