"""syscall_count really loaded: N getppid() calls made in a test cgroup -> exactly N counted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from probe_helpers import temp_cgroup

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.programs.base import get_program
from swarmscope.probes.programs.syscall_count import SyscallCount, counter_name, syscall_nr

# Moves itself into cgroup argv[1], then calls getppid (x86_64 nr 110) argv[2] times through
# syscall(2) directly (glibc might cache or skip a wrapper); nothing else in it calls getppid.
CHILD = """
import ctypes, sys
open(sys.argv[1] + "/cgroup.procs", "w").write("0")
libc = ctypes.CDLL(None)
for _ in range(int(sys.argv[2])):
    libc.syscall(110)
"""


def getppid_in_cgroup(cg: object, n: int) -> None:
    subprocess.run([sys.executable, "-c", CHILD, str(cg), str(n)], check=True, timeout=60)


def test_names_and_numbers() -> None:
    assert syscall_nr("getppid") == 110
    assert syscall_nr("110") == 110
    assert counter_name(110) == "sys.getppid"
    assert counter_name(1000) == "sys.1000"
    with pytest.raises(ProbeError, match="unknown syscall"):
        syscall_nr("no_such_call")
    with pytest.raises(ProbeError, match="out of range"):
        syscall_nr(5000)


def test_registry_reads_filter_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMSCOPE_SYSCALLS", "getppid, 39")
    prog = get_program("syscall_count")
    assert isinstance(prog, SyscallCount)
    assert prog.filter == [39, 110]
    assert prog.counters == ("sys.getpid", "sys.getppid")


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.parametrize("filtered", [False, True], ids=["all", "filtered"])
def test_exact_count_per_cgroup(filtered: bool) -> None:
    prog = SyscallCount(["getppid", "getpid"] if filtered else None)
    prog.load()
    try:
        with temp_cgroup("sc") as a, temp_cgroup("sc2") as b:
            before = prog.snapshot()
            getppid_in_cgroup(a, 1234)
            getppid_in_cgroup(b, 17)
            after = prog.snapshot()
            ca, cb = cgroup_id(a), cgroup_id(b)
            assert ca not in before and cb not in before
            assert after[ca]["sys.getppid"] == 1234
            assert after[cb]["sys.getppid"] == 17
            if filtered:
                # Only the chosen syscalls are counted: the child's write/close/exit are not.
                assert set(after[ca]) <= {"sys.getppid", "sys.getpid"}
            else:
                # Unfiltered, the child's other calls after the move are counted too (its write
                # to cgroup.procs entered the kernel before the move, so it is not).
                assert after[ca].get("sys.close", 0) >= 1
                assert after[ca].get("sys.exit_group", 0) == 1
    finally:
        prog.close()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_per_window_filter_and_build_switch() -> None:
    prog = SyscallCount(["getpid"])
    prog.load()
    try:
        with temp_cgroup("scl") as cg:
            cid = cgroup_id(cg)
            prog.configure({"syscall_count.syscalls": ["getppid"]})  # a slot write, no reload
            before = prog.snapshot()
            getppid_in_cgroup(cg, 321)
            assert prog.snapshot()[cid]["sys.getppid"] - before.get(cid, {}).get("sys.getppid", 0) == 321
            filtered_pins = prog._bpf.path
            prog.configure({"syscall_count.syscalls": None})  # the unfiltered build: reloaded
            assert prog.filter is None and prog._bpf.path != filtered_pins  # a new load, new pins
            assert not os.path.exists(filtered_pins)  # the filtered build's pins are gone
            getppid_in_cgroup(cg, 45)
            assert prog.snapshot()[cid]["sys.getppid"] == 45  # counters restart with the reload
    finally:
        prog.close()


def test_probe_once_table_goes_long_with_many_counters() -> None:
    from swarmscope.probes.cli import format_table

    counters = {f"sys.c{i}": i for i in range(12)}
    result = {
        "seconds": 1.0,
        "programs": ["syscall_count"],
        "counters": sorted(counters),
        "total": counters,
        "cgroups": [{"cgroup_id": 5, "path": "/n1", "counters": counters}],
    }
    lines = format_table(result).splitlines()
    assert lines[1].split() == ["CGROUP_ID", "COUNTER", "VALUE", "PATH"]
    # One line per non-zero counter of the cgroup, then the totals; zeros are left out.
    assert len(lines) == 2 + 11 + 11
    assert lines[2].split() == ["5", "sys.c1", "1", "/n1"]
