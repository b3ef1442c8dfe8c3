"""exec_count really loaded: exact per-cgroup counts, delta semantics, and `probe --once`.

Also the first/last exec time of a window: K execs in a cgroup between two CLOCK_MONOTONIC
readings give a count of K exactly and before <= first <= last <= after; a later window never
shows an earlier window's times.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope.app import cli
from swarmscope.core.errors import ProbeError, SetupError
from swarmscope.core.sys.cgroups import (
    cgroup2_mount,
    cgroup_id,
    cgroup_paths,
    pid_cgroup_path,
    resolve_cgroup_id,
)
from swarmscope.probes.programs.base import Sample, delta_by_cgroup, delta_by_node, get_program
from swarmscope.probes.programs.exec_count import SERIES, ExecCount, window_times


@dataclass
class Node:
    name: str
    cgroup_id: int


@pytest.fixture(scope="module")
def prog():
    p = get_program("exec_count")
    p.load()
    yield p
    p.close()


def own_cgroup() -> pathlib.Path:
    return pid_cgroup_path()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_exact_counts_per_cgroup_and_no_leak(prog) -> None:
    with temp_cgroup("a") as a, temp_cgroup("b") as b, temp_cgroup("sub", parent=a) as sub:
        before = prog.snapshot()
        exec_in_cgroup(a, 7)
        exec_in_cgroup(b, 3)
        exec_in_cgroup(sub, 5)
        after = prog.snapshot()
        ids = {n: cgroup_id(p) for n, p in (("a", a), ("b", b), ("sub", sub))}
        nodes = [Node(n, i) for n, i in ids.items()] + [Node("host", 0)]
        got = delta_by_node(before, after, nodes, prog.counters)
        # a does not include its child's 5: a simulated node is exactly its own cgroup.
        assert got["a"] == {"exec": 7}
        assert got["b"] == {"exec": 3}
        assert got["sub"] == {"exec": 5}
        # The whole host saw them too, plus the three shells exec'd before they moved.
        assert got["host"]["exec"] >= 15 + 3
        per_cg = delta_by_cgroup(before, after)
        assert {k: per_cg[k]["exec"] for k in ids.values()} == {ids["a"]: 7, ids["b"]: 3, ids["sub"]: 5}
        # The shells themselves were exec'd in this process's cgroup, before moving.
        assert per_cg[cgroup_id(own_cgroup())]["exec"] >= 3
        paths = cgroup_paths(wanted=set(ids.values()))
        assert paths[ids["sub"]] == "/" + str(sub.relative_to(cgroup2_mount()))


@pytest.mark.root
@pytest.mark.bpf
def test_no_events_is_explicit_zero(prog) -> None:
    with temp_cgroup("idle") as idle:
        s1 = prog.snapshot()
        s2 = prog.snapshot()
        assert delta_by_node(s1, s2, [Node("idle", cgroup_id(idle))], prog.counters) == {"idle": {"exec": 0}}


def test_delta_by_node_pure() -> None:
    before = {10: {"exec": 5}, 11: {"exec": 1}}
    after = {10: {"exec": 9}, 11: {"exec": 1}, 12: {"exec": 4}}
    nodes = [Node("n10", 10), Node("n12", 12), Node("gone", 99), Node("host", 0)]
    assert delta_by_node(before, after, nodes, ["exec"]) == {
        "n10": {"exec": 4},
        "n12": {"exec": 4},
        "gone": {"exec": 0},
        "host": {"exec": 8},
    }
    with pytest.raises(ProbeError, match="went down"):
        delta_by_node(after, before, [Node("n10", 10)])
    assert delta_by_cgroup(before, after) == {10: {"exec": 4}, 12: {"exec": 4}}


def test_registry_is_closed() -> None:
    with pytest.raises(ProbeError, match="unknown program 'rm -rf'"):
        get_program("rm -rf")
    with pytest.raises(ProbeError, match="before load"):
        ExecCount().snapshot()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_once_json_sees_a_busy_cgroup() -> None:
    with temp_cgroup("once") as cg:
        # A bounded background load in the cgroup (~100 exec/s, at most ~30 s) while the CLI
        # loads and counts for 1 s; killed as soon as the CLI is done.
        loop = (
            f'echo $$ > "{cg}/cgroup.procs"; n=0; '
            "while [ $n -lt 3000 ]; do /bin/true; sleep 0.01; n=$((n+1)); done"
        )
        busy = subprocess.Popen(["/bin/sh", "-c", loop])
        try:
            out = subprocess.run(
                [sys.executable, "-m", "swarmscope", "probe", "--once", "--seconds", "1", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        finally:
            busy.kill()
            busy.wait()
        doc = json.loads(out)
        assert doc["programs"] == ["exec_count"] and doc["seconds"] == 1.0
        row = next(r for r in doc["cgroups"] if r["cgroup_id"] == cgroup_id(cg))
        assert row["counters"]["exec"] > 0
        assert row["path"] == "/" + cg.name
        assert doc["total"]["exec"] >= row["counters"]["exec"]


def test_probe_once_table_and_setup_error(monkeypatch, capsys) -> None:
    # Not root: one clear SetupError line, no traceback, exit code 3.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["probe", "--once", "--seconds", "0.1"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("swarmscope: cannot load BPF programs; missing: root")
    assert "Traceback" not in err and err.count("\n") == 1


def test_probe_rejects_unknown_program(capsys) -> None:
    assert cli.main(["probe", "--once", "--programs", "exec_count,nope"]) == 2
    assert "nope: unknown program" in capsys.readouterr().err


def test_cgroup2_mount_from_mounts_file(tmp_path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\ncgroup2 /sys/fs/cgroup/my\\040v2 cgroup2 rw 0 0\n"
    )
    assert cgroup2_mount(str(mounts)) == pathlib.Path("/sys/fs/cgroup/my v2")
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    with pytest.raises(SetupError, match="cgroup v2 is not mounted"):
        cgroup2_mount(str(mounts))


def test_resolve_cgroup_id(tmp_path) -> None:
    (tmp_path / "n1").mkdir()
    ino = (tmp_path / "n1").stat().st_ino
    assert resolve_cgroup_id("/n1", root=str(tmp_path)) == ino
    assert resolve_cgroup_id(str(tmp_path / "n1"), root=str(tmp_path)) == ino
    with pytest.raises(SetupError, match="no cgroup at"):
        resolve_cgroup_id("/nope", root=str(tmp_path))


def window(prog, nodes: list[Node], k: int, cg) -> tuple[dict, dict, int, int]:
    """One window as the agent runs it; ``k`` execs in ``cg`` timed by the monotonic clock.

    Returns (counts, samples, before, after); ``prog.opened`` is the monotonic time just before
    open_window.
    """
    start = time.time_ns()
    prog.opened = time.monotonic_ns()
    prog.open_window(nodes)
    s0 = prog.snapshot()
    before = time.monotonic_ns()
    if k:
        exec_in_cgroup(cg, k)
    after = time.monotonic_ns()
    s1 = prog.snapshot()
    end = time.time_ns()
    return delta_by_node(s0, s1, nodes, prog.counters), prog.window_samples(start, end, nodes), before, after


@pytest.mark.root
@pytest.mark.bpf
def test_count_exact_and_times_inside_the_window(prog) -> None:
    with temp_cgroup("times") as cg, temp_cgroup("other") as other:
        node, idle = Node("n1", cgroup_id(cg)), Node("n2", cgroup_id(other))
        counts, samples, before, after = window(prog, [node, idle], 9, cg)
        assert counts == {"n1": {"exec": 9}, "n2": {"exec": 0}}
        (s,) = samples["n1"]
        assert s.series == SERIES and s.value == 0
        assert before <= s.start_ns <= s.end_ns <= after
        assert samples["n2"] == []  # no exec: no times, not zeros
        first1, last1 = s.start_ns, s.end_ns

        # A window with no exec in the cgroup: the previous window's times do not leak in.
        counts, samples, _, _ = window(prog, [node], 0, cg)
        assert counts == {"n1": {"exec": 0}} and samples == {"n1": []}

        # The next window with execs: its own times only, all after the earlier window.
        counts, samples, before, after = window(prog, [node], 4, cg)
        assert counts == {"n1": {"exec": 4}}
        (s,) = samples["n1"]
        assert last1 < before <= s.start_ns <= s.end_ns <= after
        assert first1 <= last1


@pytest.mark.root
@pytest.mark.bpf
def test_host_node_sees_every_cgroup(prog) -> None:
    with temp_cgroup("hosttimes") as cg:
        counts, samples, before, _ = window(prog, [Node("host", 0)], 3, cg)
        assert counts["host"]["exec"] >= 3  # other processes on the host exec too
        (s,) = samples["host"]
        # The host's first may be another process's exec, but never one before the window opened.
        assert prog.opened <= s.start_ns <= s.end_ns
        assert before <= s.end_ns  # the last is at least the last of our 3
        assert isinstance(s, Sample)


def test_window_times_pure() -> None:
    # CPU 0 ran none since the open; CPU 1 both; CPU 2 missed the restart (first before open).
    assert window_times([(5, 8), (20, 30), (9, 25)], opened=10) == (20, 30)
    assert window_times([(5, 8), (0, 0)], opened=10) is None
    assert window_times([(9, 12)], opened=10) == (12, 12)
    assert window_times([], opened=10) is None
