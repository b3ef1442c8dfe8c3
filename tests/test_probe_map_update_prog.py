"""map_update through the registry: a child in a test cgroup makes N element updates and one
batch of M into a map it created -> exactly N+1 calls and N+M entries counted for that cgroup,
for its (pid, cmd) and for the map's id."""

from __future__ import annotations

import os
import time

import pytest
from probe_helpers import map_updates_in_cgroup as _child
from probe_helpers import temp_cgroup

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.programs.base import delta_by_cgroup, get_program
from swarmscope.probes.programs.map_update import MapUpdateCount


def test_env_pids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMSCOPE_MAP_UPDATE_PIDS", "12,34")
    prog = get_program("map_update")
    assert isinstance(prog, MapUpdateCount)
    assert prog.tracer.pids == [12, 34]
    monkeypatch.setenv("SWARMSCOPE_MAP_UPDATE_PIDS", "x")
    with pytest.raises(
        ProbeError, match=r"\$SWARMSCOPE_MAP_UPDATE_PIDS \(map_update.pids\): item 0: must be an integer"
    ):
        get_program("map_update")


@pytest.mark.root
@pytest.mark.bpf
def test_registry_map_update_counts_calls_entries_and_map_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARMSCOPE_MAP_UPDATE_PIDS", raising=False)
    n, m = 37, 250
    prog = get_program("map_update")
    prog.load()
    try:
        with temp_cgroup("mapupd") as cg:
            before = prog.snapshot()
            with _child(cg, n, m) as (pid, mid):
                time.sleep(0.3)  # > poll_s: the pump has resolved the fd
                after = prog.snapshot()
            got = delta_by_cgroup(before, after).get(cgroup_id(cg), {})
        delivered, dropped, in_map = prog.ringbuf_stats()  # type: ignore[attr-defined]
    finally:
        prog.close()
    print(f"map {mid} pid {pid}: {got}")
    assert got["map_update.calls"] == n + 1
    assert got["map_update.entries"] == n + m
    assert got["map_update.elem.calls"] == n
    assert got["map_update.batch.entries"] == m
    assert got[f"map_update.pid.{pid}.elem.entries"] == n
    assert got[f"map_update.pid.{pid}.batch.calls"] == 1
    assert got[f"map_update.map.{mid}.entries"] == n + m
    assert got[f"map_update.map.{mid}.calls"] == n + 1
    assert after[0]["map_update.ringbuf_dropped"] == 0
    # The host's other map updates count too, so only bounds are exact here.
    assert dropped == 0 and delivered >= n + 1 and in_map >= n + 1


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_nodes_mode_records_the_window_nodes_cgroups_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """map_update.nodes (a worker in a pod, whose pids are not the host's): the calls of every
    process in the node's cgroup are counted and sampled with their map's id; this process's own
    updates, outside that cgroup, are not recorded at all."""
    from types import SimpleNamespace

    from swarmscope.core.sys import bpf

    monkeypatch.delenv("SWARMSCOPE_MAP_UPDATE_PIDS", raising=False)
    n, m = 11, 300
    prog = MapUpdateCount(pids=[])
    prog.load()
    own = bpf.map_create(bpf.BPF_MAP_TYPE_HASH, "ss_test_own", 4, 8, 16)
    try:
        with temp_cgroup("mapupdnodes") as cg:
            node = SimpleNamespace(name="w1-n1", cgroup_id=cgroup_id(cg))
            prog.configure({"map_update.nodes": True})
            prog.open_window([node])
            start = time.time_ns()
            before = prog.snapshot()
            with _child(cg, n, m) as (_pid, mid):
                for i in range(5):  # outside the node's cgroup: never recorded
                    bpf.map_update_elem(own, i.to_bytes(4, "little"), bytes(8))
                time.sleep(0.3)  # > poll_s: the pump has resolved the fd
                after = prog.snapshot()
                samples = prog.window_samples(start, time.time_ns(), [node])
    finally:
        os.close(own)
        prog.close()
    delta = delta_by_cgroup(before, after)
    assert set(delta) - {0} == {node.cgroup_id}, delta  # nothing of this process's cgroup
    got = delta[node.cgroup_id]
    assert (got["map_update.calls"], got["map_update.entries"]) == (n + 1, n + m)
    calls = samples["w1-n1"]
    assert [s.value for s in calls] == [1] * n + [m]
    assert {s.labels["map_id"] for s in calls} == {str(mid)}
