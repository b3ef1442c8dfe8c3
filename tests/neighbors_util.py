"""Shared helpers of the tests/test_neighbors_*.py files (real processes, real sockets)."""

from __future__ import annotations

import math
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from swarmscope.core import auth
from swarmscope.targets.neighbors.server import TOKEN_ENV, connect, start_server, stop
from swarmscope.v1 import neighbors_pb2_grpc as pbg

needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


# The tests' control planes share one token, in the environment, so the agents and writers the
# tests start as processes find it as a deployed agent would ($SWARMSCOPE_NEIGHBORS_TOKEN).
TOKEN = os.environ.setdefault(TOKEN_ENV, auth.new_token())


def nearest_rank(values: list[int], q: float) -> int:
    """The q-quantile by its definition (the ceil(q·n)-th smallest), not the code's weighted walk."""
    return sorted(values)[max(0, math.ceil(q * len(values)) - 1)]


def at_entry(totals: list[list[int]], n: int) -> list[int]:
    """Entry k's time (k = 1..n), from running totals [(entries so far, t)]: the first t whose
    total reaches k. The tests' own reading of the spans, beside the code's entry_latencies."""
    return [next(t for total, t in totals if total >= k) for k in range(1, n + 1)]


@contextmanager
def control_plane(db: str) -> Iterator[tuple[subprocess.Popen[str], str, pbg.NeighborStoreStub]]:
    cp = start_server(db, TOKEN)
    p, addr = cp.proc, cp.address
    ch = connect(addr, TOKEN)
    try:
        yield p, addr, pbg.NeighborStoreStub(ch)
    finally:
        ch.close()
        if p.poll() is None:
            stop(p)


@contextmanager
def pin_dir() -> Iterator[str]:
    d = f"/sys/fs/bpf/ss-test-{secrets.token_hex(3)}"
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def agent_cmd(addr: str, pins: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "swarmscope.targets.neighbors.agent",
        "--control-plane",
        addr,
        "--pin-dir",
        pins,
    ]


MODES = ("list_program", "watch_only", "write_watch_program")


def list_calls(first: int, count: int, page: int) -> int:
    """The bpf() update calls the compiled list makes for one worker's block of the List,
    computed here, apart from the code: below PARALLEL_MIN_ENTRIES (or on one CPU) it pages the
    block, ceil(count / page); above, each of LIST_THREADS threads takes the keys that the
    multiplicative hash of agent_list.c gives it and pages those."""
    import array
    from collections import Counter

    from swarmscope.targets.neighbors.ipc_agent import LIST_THREADS, PARALLEL_MIN_ENTRIES
    from swarmscope.targets.neighbors.records import make_keys

    threads = LIST_THREADS
    if threads <= 1 or count < PARALLEL_MIN_ENTRIES:
        return -(-count // page)
    keys = array.array("I")
    keys.frombytes(make_keys(count, first))  # the key's bytes read as the C code's memcpy does
    per_thread = Counter(((k * 2654435761) & 0xFFFFFFFF) * threads >> 32 for k in keys)
    return sum(-(-c // page) for c in per_thread.values())


def check_neighbor_points(
    rep: dict, ns: list[int], workers: int, page: int, batch: int, modes: tuple[str, ...] = MODES
) -> list[dict]:
    """Every point of a pipeline report verified and exact; the kernel clock is the probe's.

    The update calls are known in advance: one per List page of a worker's share
    (list_program), one per put-batch transaction of it (write_watch_program), none at all
    (watch_only: received, not programmed); only the probe's map_update samples of the agents'
    pids and maps can produce that count."""
    from swarmscope.kinds.base import shares

    pts = rep["neighbors"]["points"]
    assert [(p["neighbors"], p["mode"]) for p in pts] == [(n, m) for n in ns for m in modes]
    by_point = {it["window_id"]: it for pt in rep["points"] for it in pt["iterations"]}
    assert len(by_point) == len(pts)
    for p, it in zip(pts, by_point.values(), strict=True):
        n = p["neighbors"]
        assert p["verified"] is True, p["problems"]
        assert p["workers"] == workers == len(it["per_node"])
        ws = it["extra"]["workers"]
        if p["mode"] == "watch_only":  # every entry received, not one bpf() update by the agent
            assert p["generated"] == p["reported"] == n and p["kernel_entries"] == 0
            assert (it["generated"], it["kernel"], it["reported"]) == (n, None, n)
            assert p["update_calls"] == 0 and all(w["pid_samples"] == 0 for w in ws.values())
        else:
            assert p["generated"] == p["kernel_entries"] == p["reported"] == n
            assert (it["generated"], it["kernel"], it["reported"]) == (n, n, n)
            blocks = shares(n, [w["node"] for w in it["per_node"]]).values()
            if p["mode"] == "list_program":
                assert p["update_calls"] == sum(list_calls(first, c, page) for first, c in blocks)
            else:
                assert p["update_calls"] == sum(-(-c // batch) for _, c in blocks)
            assert sum(w["update_calls"] for w in ws.values()) == p["update_calls"]
            assert all(w["pid_samples"] > w["update_calls"] for w in ws.values() if w["generated"])
        assert 0 < p["p50_us"] <= p["p99_us"]
        # the percentiles are those of all workers' per-entry latencies pooled
        pooled = [tuple(x) for lat in it["extra"]["latencies_ns"].values() for x in lat]
        assert sum(w for _, w in pooled) == n
        each = [v for v, w in pooled for _ in range(w)]  # one latency per entry
        assert p["p50_us"] == round(nearest_rank(each, 0.5) / 1000, 3)
        assert p["p99_us"] == round(nearest_rank(each, 0.99) / 1000, 3)
    return pts


RECOUNT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "neighbor_recount.py")


def run_with_recount(out_json: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``swarmscope run ARGS`` with every window's datapath recounted from outside
    (tests/neighbor_recount.py: bpftool map dump / ip neigh), written to ``out_json``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(
        [sys.executable, RECOUNT, out_json, "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=root,
    )


def check_recount(out_json: str, rep: dict) -> None:
    """Every window of the report, every node: the kernel held exactly its share, counted by a
    tool of our own (not the code's ``verified``); the shares add up to the point's N."""
    import json

    with open(out_json) as f:
        found = json.load(f)
    by_window: dict[str, list[dict]] = {}
    for r in found:
        by_window.setdefault(r["window"], []).append(r)
    its = [it for pt in rep["points"] for it in pt["iterations"]]
    assert sorted(by_window) == sorted(it["window_id"] for it in its), found
    for it, p in zip(its, rep["neighbors"]["points"], strict=True):
        rows = by_window[it["window_id"]]
        assert sorted(r["node"] for r in rows) == sorted(n["node"] for n in it["per_node"]), rows
        for r in rows:
            assert r["exact"] and r["found"] == r["expected"], r
        want = 0 if p["mode"] == "watch_only" else p["neighbors"]  # received, not programmed
        assert sum(r["found"] for r in rows) == want, rows
