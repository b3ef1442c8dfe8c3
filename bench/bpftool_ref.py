"""bpftool's own run_cnt / run_time_ns for programs a bench loaded: the reference for its ns/run.

    from bpftool_ref import bracket             # bench scripts run with bench/ on sys.path
    ref = bracket({"exec_count": [fd]})         # while the programs are still loaded
    # {"exec_count": {"ids": [412], "bpftool": [run_cnt, run_time_ns], "own_after": [cnt, ns]}}

One ``bpftool prog show --json`` (one exec, all programs) is read, then the bench reads its own
figures again (``own_after``). The counters only grow, so for a bench whose own end-of-window
reading is ``end``: end <= bpftool <= own_after, for run_cnt and run_time_ns alike; a bench that
read another program, another field or summed its functions wrongly falls outside.

Caveats: bpftool leaves the stats out of a program that never ran with stats on (read as 0);
it must be on PATH (tools/setup.sh installs it) or this raises.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from swarmscope.core.sys import bpf


def own(fds: list[int]) -> tuple[list[int], int, int]:
    """(program ids, run_cnt, run_time_ns) summed over the fds, read with BPF_OBJ_GET_INFO."""
    ids, cnt, ns = [], 0, 0
    for fd in fds:
        info = bpf.prog_info(fd)
        ids.append(int(info.id))
        cnt, ns = cnt + info.run_cnt, ns + info.run_time_ns
    return ids, cnt, ns


def bracket(fds_by_name: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        ["bpftool", "prog", "show", "--json"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    tool = {int(p["id"]): p for p in json.loads(out)}
    res: dict[str, dict[str, Any]] = {}
    for name, fds in fds_by_name.items():
        ids, cnt, ns = own(fds)
        progs = [tool[i] for i in ids]  # KeyError: bpftool does not list a program we hold
        res[name] = {
            "ids": ids,
            "bpftool": [sum(p.get("run_cnt", 0) for p in progs), sum(p.get("run_time_ns", 0) for p in progs)],
            "own_after": [cnt, ns],
        }
    return res
