"""top-ebpf's ``-o`` (custom columns, json) and ``--by-KEY`` sort flags: parsing and the table
on known rows (a fake in addition: the real program's table is in test_bpfstats.py)."""

from __future__ import annotations

import argparse

import pytest

from swarmscope.core.errors import ConfigError
from swarmscope.probes.bpfstats import ProgRate, ProgStats
from swarmscope.probes.top_ebpf import COLUMNS, SORT_KEYS, format_table, parse_output, register, sparkline


def _rate(pid: int, name: str, runs: int, ns: int) -> ProgRate:
    p = ProgStats(pid, "xdp", name, "t", runs, ns, 0, map_memlock=2048, owners=[(7, "agent")])
    return ProgRate(p, runs, ns, ns / runs, ns / 1e5)  # CPU % of 1 s


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["top-ebpf", *argv])


def test_parse_output() -> None:
    assert parse_output("table") == ("table", [])  # the default columns
    assert parse_output("json") == ("json", [])
    assert parse_output("custom-columns=id, name,cpu%") == ("table", ["ID", "NAME", "CPU%"])
    assert parse_output("columns=RUNS") == ("table", ["RUNS"])
    with pytest.raises(ConfigError) as e:
        parse_output("custom-columns=id,bogus,nope")
    assert "unknown column(s) BOGUS, NOPE" in str(e.value)
    with pytest.raises(ConfigError, match="expected table, json or custom-columns"):
        parse_output("wide")


def test_sort_flags() -> None:
    assert _parse().sort == "cpu"
    for key in SORT_KEYS:
        assert _parse(f"--by-{key}").sort == key
    assert _parse("-s", "id", "--by-runs").sort == "runs"  # the last one wins
    assert _parse("--by-name", "--name", "^x").name == "^x"  # a filter, not a sort


def test_custom_columns_table() -> None:
    rows = sorted([_rate(12, "b_prog", 10, 5000), _rate(3, "a_prog", 40, 8000)], key=SORT_KEYS["runs"])
    lines = format_table(rows, 1.0, ["ID", "NAME", "RUNS", "CPU%", "PIDS"]).splitlines()
    assert lines[1:] == [
        "ID  NAME    RUNS  CPU%  PIDS",
        " 3  a_prog    40  0.08  7/agent",
        "12  b_prog    10  0.05  7/agent",
    ]
    full = format_table(rows, 1.0).splitlines()
    assert full[1].split() == [c for c in COLUMNS if c != "POD"]  # no row is a pod's
    assert full[2].split() == ["3", "xdp", "a_prog", "40", "8000", "200", "0.08", "0", "2.0K", "7/agent"]
    rows[0].prog.pods = ["ssrn/rn-probes-bhn2s/probe"]  # on a Kubernetes node (probes/pods.py)
    full = format_table(rows, 1.0).splitlines()
    assert full[1].split() == list(COLUMNS)
    assert [ln.split()[-1] for ln in full[2:]] == ["ssrn/rn-probes-bhn2s/probe", "-"]


def test_cpu_trend_sparkline() -> None:
    assert sparkline([0.0, 1.0, 4.0, 8.0, 9.0], top=8.0) == " ▁▄██"
    assert sparkline([0.0, 0.0], top=0.0) == "  "
    rows = [_rate(3, "a_prog", 40, 8000), _rate(12, "b_prog", 10, 5000)]
    trend = {3: [0.02, 0.08], 12: [0.04]}  # one scale for every row: the max, 0.08
    lines = format_table(rows, 1.0, ["ID", "CPU%"], trend).splitlines()
    assert lines[1:] == ["ID  CPU%  CPU_TREND", " 3  0.08  ▂█", "12  0.05  ▄"]
