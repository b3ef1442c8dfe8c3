"""Worker side of ``ebpf_cost``: third-party eBPF tools watching a node, and a busy loop in it.

    d = CostDriver(cfg, prefix="")     # node n1 (a cgroup) + the host; tools started, attached
    d.run_window("w1", ["n1", "host"], {"phase": "busy", "duration_s": 10}, None)
    #  -> {"n1": {"generated": 41234, "loops": 41233, "tools": [...], ...}}
    d.close()

The loop is the write-up's ``while true; do cat /dev/null; done``, bounded in time: it tests for
a stop file with the shell's builtin ``[`` (no exec) and counts its turns, so it execs exactly
``loops`` cats plus the shell itself (it joins the node before its exec): generated = loops + 1,
which the probe's exec counter must equal. In an ``idle`` window nothing runs in the node.

The node's second half is the host (cgroup id 0): its probe reading carries the host-level
``bpf_stats`` counters, every program's run count and time. Each window's result lists the
tools' programs (id, name, type, map memory, owner) so the controller can pick them out.
Free-running (``locust -f scenarios/ebpf_cost.py``, ``swarmscope controller``), CostUser users
(workers/cost_user.py) run loops of ``duration_s`` one after another and ``take`` sums them.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from swarmscope.core.errors import LoadGenError
from swarmscope.core.node import node_host

LOOP = 'n=0; while [ ! -e stop ]; do cat /dev/null; n=$((n+1)); done; echo "$n"'
LOOP_EXECS_OF_ITS_OWN = 1  # the shell's exec into the node


class CostDriver:
    def __init__(self, cfg: Any, prefix: str) -> None:
        from swarmscope.targets.ebpf_tools import start_tools
        from swarmscope.workers.nodes import create_sim_nodes

        self.host = node_host()
        self.group = f"{prefix or 'local'}-cost-{os.getpid()}"
        self.node = create_sim_nodes(self.group, [f"{prefix}n1"], pids_max=64)[0]
        self.host_name = f"{prefix}host"
        self.current_window = ""
        self._free: dict[str, dict[str, Any]] = {}  # free-running windows' tallies
        try:
            self.tools = start_tools(list(cfg.tools), int(self.node.cgroup_id))
            self.programs = self._describe_programs()
        except BaseException:
            self._drop_node()
            raise

    def _describe_programs(self) -> list[dict[str, Any]]:
        from swarmscope.probes import bpfstats
        from swarmscope.targets.ebpf_tools import tool_pids

        progs = bpfstats.list_programs(owners_too=True)
        out = []
        for t in self.tools:
            mine = tool_pids(t)
            for pid in sorted(t.programs):
                p = progs.get(pid)
                if p is None:
                    continue
                # The tool's own process (not another that holds an fd of it for a moment).
                owner = next(((op, oc) for op, oc in p.owners if op in mine), (t.pid, t.name))
                out.append(
                    {
                        "id": p.id,
                        "type": p.type,
                        "name": p.name,
                        "tool": t.name,
                        "pid": owner[0],
                        "comm": owner[1],
                        "map_ids": list(p.map_ids),
                        "map_memlock": p.map_memlock,
                    }
                )
        return out

    def describe(self) -> list[dict[str, Any]]:
        host = {"name": self.host_name, "host": self.host, "cgroup_id": 0, "cgroup_path": "", "comm": ""}
        return [self.node.describe(self.host), host]

    def info(self) -> dict[str, Any]:
        return {"node": self.node.name, "host_node": self.host_name, "programs": self.programs}

    def _drop_node(self) -> None:
        from swarmscope.workers.nodes import destroy_sim_nodes

        destroy_sim_nodes(self.group)

    def close(self) -> None:
        from swarmscope.targets.ebpf_tools import stop_tools

        stop_tools(self.tools)
        self._drop_node()

    def busy_loop(
        self, duration_s: float, on_stop: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """The loop in the node for ``duration_s``; its exact turns and exec count. Interrupted
        (a Locust user killed at test stop), the loop is stopped, ``on_stop`` gets its counts."""
        from swarmscope.workers.nodes import joiner

        work = pathlib.Path(tempfile.mkdtemp(prefix="swarmscope-loop-"))
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", LOOP], cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
                preexec_fn=joiner(self.node), start_new_session=True,
            )  # fmt: skip
            out: str | None = None
            try:
                time.sleep(duration_s)  # gevent-patched in a Locust worker: cooperative
                (work / "stop").touch()
                out, err = proc.communicate(timeout=30)  # a kill can land here too
            except subprocess.TimeoutExpired as e:
                proc.kill()
                proc.communicate()
                raise LoadGenError("the busy loop did not stop within 30 s of its stop file") from e
            except BaseException:
                (work / "stop").touch()
                if out is None:
                    out, _ = proc.communicate(timeout=30)
                if on_stop is not None and out.strip().isdigit():
                    on_stop(_counts(int(out), time.monotonic() - t0))
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        elapsed = time.monotonic() - t0
        try:
            loops = int(out.strip())
        except ValueError as e:
            raise LoadGenError(f"the busy loop failed ({proc.returncode}): {err.strip()[-300:]}") from e
        return _counts(loops, elapsed)

    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any = None
    ) -> dict[str, Any]:
        if self.node.name not in nodes:
            return {}
        duration = float(payload["duration_s"])
        if payload["phase"] == "busy":
            res = self.busy_loop(duration)
        else:
            time.sleep(duration)
            res = {"generated": 0, "loops": 0, "elapsed_s": duration, "rate": 0.0}
        res["tools"] = self.programs
        return {self.node.name: res}

    # -- free-running tests (locust -f, swarmscope controller) ----------------------------------
    def record(self, window_id: str, res: dict[str, Any]) -> None:
        """One loop of a CostUser (workers/cost_user.py) into the window's tally."""
        t = self._free.setdefault(window_id, {"loops_run": 0, **dict.fromkeys(SUMMED, 0)})
        t["loops_run"] += 1
        for k in SUMMED:
            t[k] += res[k]

    def stop_window(self, window_id: str) -> None:
        """A loop cut by test stop records itself when its shell has exited: nothing in flight."""

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        t = self._free.pop(window_id, None) or {"loops_run": 0, **dict.fromkeys(SUMMED, 0)}
        elapsed = float(t["elapsed_s"])
        rate = t["loops"] / elapsed if elapsed > 0 else 0.0
        return {self.node.name: {"free": True, **t, "rate": rate, "tools": self.programs}}


SUMMED = ("generated", "loops", "elapsed_s")


def _counts(loops: int, elapsed: float) -> dict[str, Any]:
    return {
        "generated": loops + LOOP_EXECS_OF_ITS_OWN,
        "loops": loops,
        "elapsed_s": elapsed,
        "rate": loops / elapsed if elapsed > 0 else 0.0,
    }
