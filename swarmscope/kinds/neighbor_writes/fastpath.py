"""One neighbor window on the control plane's fast path (``transport: ipc``, the default).

    out = list_program(cp, agent, maps, keys, values, p)   # {"starts": [[N, t0]], "t_user_ns"}
    out = watch_only(cp, agent, maps, keys, values, p)     # the list received, not programmed
    out = write_watch_program(cp, agent, maps, start, count, p, work)
    out.update(master_latencies(cp, keys, values, samples=20))
    AgentProcess(native=agent_lib())                       # the list's walk compiled, if it builds

``agent`` is the worker's agent process (targets/neighbors/agent_proc.py: its pid is the
probe's filter, it opens the worker's XDP map and its revision map by id, ``maps``) or, for
the kernel table, the same agent in this process (``LocalAgent``); both answer
``call(op=...)`` (docs/neighbors.md).
Times are CLOCK_MONOTONIC (bpf_ktime's clock). The master side's own latencies are measured
after the agent is gone, so they never touch the map: ``get`` of written keys, ``write`` = a
durable put of a written entry with its own value (the state does not change), each a round
trip on an open connection; ``watch`` = a transaction's commit to the agent holding it (from
the write+watch window), also divided by its entries (per state).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import swarmscope.targets.neighbors as neighbors_pkg
from swarmscope.core.errors import LoadGenError
from swarmscope.core.sys import owners
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.ipc import IpcClient
from swarmscope.targets.neighbors.server import TOKEN_ENV, ControlPlane
from swarmscope.workers.neighbor_writer import write_ipc

log = logging.getLogger(__name__)
# -z now: every symbol bound at load, so no first call pays the dynamic linker.
AGENT_LIB_FLAGS = ("-O2", "-Wall", "-shared", "-fPIC", "-Wl,-z,now", "-Wl,--no-as-needed", "-lbpf")


def agent_lib() -> str | None:
    """targets/neighbors/native/agent_list.c built as a shared library, cached like the
    exec-storm helpers (workers/native.py); None, logged, when it cannot be built (no ``cc`` or
    no libbpf-dev): the agent then walks the log in Python, slower at small N."""
    from swarmscope.workers.native import Target, build_cached

    src = Path(neighbors_pkg.__file__).resolve().parent / "native" / "agent_list.c"
    try:
        d = build_cached("agent", [Target("libssagent.so", src, AGENT_LIB_FLAGS)])
    except LoadGenError as e:
        log.warning("neighbor agent: the compiled list is unavailable, using Python: %s", e)
        return None
    return str(d / "libssagent.so")


def _preload(cp: ControlPlane, keys: bytes, values: bytes) -> None:
    c = IpcClient(cp.socket, cp.token)
    try:
        write_ipc(c, keys, values, R.PRELOAD_BATCH)  # not timed
    finally:
        c.close()


def list_program(
    cp: ControlPlane, agent: Any, maps: Mapping[str, Any], keys: bytes, values: bytes, p: Mapping[str, Any]
) -> dict[str, Any]:
    _preload(cp, keys, values)
    r = agent.call(op="list", socket=cp.socket, token=cp.token, **maps, page=int(p["page_size"]))
    return {"starts": [[len(keys) // R.KEY_SIZE, int(r["t0"])]], "t_user_ns": int(r["t_user"])}


def watch_only(
    cp: ControlPlane, agent: Any, maps: Mapping[str, Any], keys: bytes, values: bytes, p: Mapping[str, Any]
) -> dict[str, Any]:
    """The write-up's watch-only point: the same list, copied into the agent, not programmed.
    Its end is the agent's clock (no kernel event); ``received`` is what it holds."""
    from swarmscope.targets.neighbors.agent_proc import digest

    _preload(cp, keys, values)
    r = agent.call(op="watch_only", socket=cp.socket, token=cp.token, **maps)
    n, t1 = int(r["received"]), int(r["t_user"])
    same = r["digest"] == digest(keys, values)
    return {
        "starts": [[len(keys) // R.KEY_SIZE, int(r["t0"])]],
        "ends": [[n, t1]],
        "t_user_ns": t1,
        "received": n,
        "problems": [] if same else [f"the agent received {n} entries, not the {len(keys) // 4} written"],
    }


def write_watch_program(
    cp: ControlPlane,
    agent: Any,
    maps: Mapping[str, Any],
    start: int,
    count: int,
    p: Mapping[str, Any],
    work: Path,
) -> dict[str, Any]:
    # A transaction is programmed in calls of at most 65536 entries (the gRPC watch's page):
    # page_size is the list's page.
    w = agent.call(op="watch", socket=cp.socket, token=cp.token, **maps)
    if w.get("errors"):
        raise LoadGenError(f"the agent's watch did not start: {w['errors']}")
    timing_file = work / f"writer-{start}-{count}-{time.monotonic_ns()}.json"
    # The writer is its own process, as a user's writer would be.
    cmd = [
        sys.executable, "-m", "swarmscope.workers.neighbor_writer", "--control-plane", cp.address,
        "--socket", cp.socket, "-n", str(count), "--start", str(start), "--batch", str(p["batch_size"]),
        "--out", str(timing_file),
    ]  # fmt: skip
    env = {**os.environ, TOKEN_ENV: cp.token}  # the token never on a command line
    try:
        subprocess.run(owners.dying_with_us(cmd, env), check=True, timeout=float(p["timeout_s"]), env=env)
        timing = json.loads(timing_file.read_text())
        timing_file.unlink()
    except BaseException:
        with contextlib.suppress(LoadGenError):
            agent.call(op="wait", revision=0, timeout=0.01)  # ends the watch
        raise
    r = agent.call(op="wait", revision=timing["revisions"][-1], timeout=float(p["timeout_s"]))
    return {
        "starts": R.running(timing["counts"], timing["sends_ns"]),
        "commits": R.running(timing["counts"], timing["commits_ns"]),
        "t_user_ns": int(r["t_user"]),
        "watch": _watch(timing, [tuple(x) for x in r["received"]]),
    }


def _watch(timing: Mapping[str, Any], received: list[tuple[int, ...]]) -> dict[str, Any]:
    """Commit -> the agent holding it, per transaction: µs, and µs per state (entry)."""
    commit = dict(zip(timing["revisions"], timing["commits_ns"], strict=True))
    lat = [(t - commit[rev], n) for rev, n, t in received if rev in commit and n]
    if not lat:
        return {}
    us = [d / 1000 for d, _ in lat]
    per_state = [d / 1000 / n for d, n in lat]
    return {
        "transactions": len(lat),
        "p50_us": round(statistics.median(us), 3),
        "max_us": round(max(us), 3),
        "per_state_us": round(statistics.median(per_state), 4),
    }


def master_latencies(cp: ControlPlane, keys: bytes, values: bytes, samples: int) -> dict[str, Any]:
    """The control plane's own get and write round trips (median µs over ``samples``)."""
    n = len(keys) // R.KEY_SIZE
    if not samples or not n:
        return {}
    c = IpcClient(cp.socket, cp.token)
    gets, puts = [], []
    try:
        for i in random.sample(range(n), min(samples, n)) * max(1, -(-samples // n)):
            k, v = keys[i * 4 : i * 4 + 4], values[i * 12 : i * 12 + 12]
            t0 = time.monotonic_ns()
            got = c.get(k)
            t1 = time.monotonic_ns()
            c.put_batch(k, v)
            t2 = time.monotonic_ns()
            if got is None or got[0] != v:
                raise LoadGenError(f"get of a written key returned {got!r}")
            gets.append((t1 - t0) / 1000)
            puts.append((t2 - t1) / 1000)
    finally:
        c.close()
    return {
        "get_us": round(statistics.median(gets), 3),
        "write_us": round(statistics.median(puts), 3),
        "samples": len(gets),
    }
