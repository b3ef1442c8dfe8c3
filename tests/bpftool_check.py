"""Checks a bench's ns/run against bpftool's figures for the same program (bench/bpftool_ref.py).

check_against_bpftool(prog)   # prog: one program's entry in a bench's --json output
"""

from __future__ import annotations

from typing import Any

# Plausible per-run cost of these small programs (a map update, a tracepoint read) on this
# class of machine: tens to a few thousand ns (measured 60-500 ns here); a wrong unit (us,
# s, a count taken for a time) or a run count of the whole host against one node's time is
# far outside.
NS_PER_RUN = (10, 20_000)


def check_against_bpftool(p: dict[str, Any]) -> None:
    runs, ns = p["runs"], p["run_time_ns"]
    (end_cnt, end_ns), (tool_cnt, tool_ns), (after_cnt, after_ns) = p["end"], p["bpftool"], p["own_after"]
    assert p["ids"], p
    # Monotone counters read in the order bench end -> bpftool -> bench again: bpftool's figure
    # for the same program ids lies between the bench's two, exactly.
    assert end_cnt <= tool_cnt <= after_cnt, p
    assert end_ns <= tool_ns <= after_ns, p
    # ns/run over the window, with bpftool's end figures in place of the bench's: the few runs
    # between the two reads (bpftool's own exec and syscalls) move it by well under 10 %.
    assert runs > 0 and tool_cnt - end_cnt <= 0.05 * runs, p
    tool_per_run = (tool_ns - (end_ns - ns)) / (tool_cnt - (end_cnt - runs))
    per_run = p.get("ns_per_run", p.get("ns_per_event"))
    assert per_run == ns / runs, p
    assert abs(tool_per_run - per_run) <= 0.1 * per_run, (tool_per_run, p)
    assert NS_PER_RUN[0] < per_run < NS_PER_RUN[1], p
