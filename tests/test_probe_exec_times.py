"""exec_count's first/last exec time per window, with the program really loaded.

K execs in a cgroup between two CLOCK_MONOTONIC readings: the window's count is K exactly and
before <= first <= last <= after; a later window never shows an earlier window's times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope.probes.programs.base import Sample, delta_by_node, get_program
from swarmscope.probes.programs.exec_count import SERIES, window_times
from swarmscope.sys.cgroups import cgroup_id


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
