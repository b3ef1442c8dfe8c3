"""Bench: the two session-6 changes of the neighbor path at 1M, each A/B in the same run.

    sudo .venv/bin/python bench/neighbors_ab.py [-n 1000000] [--rounds 3]

1. **The compiled list, 1 thread against LIST_THREADS** (targets/neighbors/native/agent_list.c):
   N entries in put-batches of 5000 in a real control plane, listed into a fresh BPF hash map
   by the agent (in this process, the same ctypes call the agent process makes), the two
   variants alternating ``rounds`` times, each into a fresh map. Prints µs per entry (wall)
   and the CPU-seconds of the list, median of the rounds.
2. **The store's in-memory state, applied per commit against at the first read**
   (targets/neighbors/store.py, ``UNAPPLIED_MAX_BYTES`` 0 = per commit): N entries committed
   in batches of 5000 to a Store (with the shared log's append, as the server does); prints the
   CPU-seconds and wall seconds of the writes, median of the rounds.

Wall figures move with the machine's load; the CPU-seconds and the ratios of one run are the
comparison. Needs root (BPF).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH = 5000


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def list_ab(n: int, rounds: int) -> dict[str, Any]:
    from swarmscope.core.sys import bpf
    from swarmscope.kinds.neighbor_writes.fastpath import agent_lib
    from swarmscope.targets.neighbors import records as R
    from swarmscope.targets.neighbors.agent_proc import _MapTarget
    from swarmscope.targets.neighbors.ipc import IpcClient
    from swarmscope.targets.neighbors.ipc_agent import LIST_THREADS, IpcAgent
    from swarmscope.targets.neighbors.server import start_server, stop
    from swarmscope.workers.neighbor_writer import write_ipc

    lib = agent_lib()
    if lib is None:
        raise SystemExit("the compiled list did not build (cc, libbpf-dev)")
    d = tempfile.mkdtemp(prefix="ss-nab-")
    cp = start_server(os.path.join(d, "n.db"), socket_path=os.path.join(d, "cp", "s"))
    keys, values = R.make_entries(n)
    res: dict[int, list[tuple[float, float]]] = {1: [], LIST_THREADS: []}
    try:
        c = IpcClient(cp.socket, cp.token)
        write_ipc(c, keys, values, BATCH)
        c.close()
        for _ in range(rounds):
            for threads in res:
                fd = bpf.map_create(1, "ss_nab", R.KEY_SIZE, R.VALUE_SIZE, n)
                t = _MapTarget(bpf.map_info(fd).id)
                a = IpcAgent(cp.socket, cp.token, t, native=lib)
                assert a.native is not None
                a.native.threads = threads
                args = a.native_args(65536)
                c0, t0 = _cpu(), time.monotonic_ns()
                got = a.native.fn(*args)
                t1, c1 = time.monotonic_ns(), _cpu()
                if a.native_done(got) != n:
                    raise SystemExit(f"listed {got} entries, not {n}")
                a.close()
                held = len(bpf.map_read_all(fd))
                t.close()
                os.close(fd)
                if held != n:
                    raise SystemExit(f"the map holds {held} entries, not {n}")
                res[threads].append(((t1 - t0) / 1000 / n, c1 - c0))
    finally:
        stop(cp.proc)
    return {
        threads: {
            "us_per_entry": round(statistics.median(x for x, _ in v), 3),
            "cpu_s": round(statistics.median(c for _, c in v), 3),
        }
        for threads, v in res.items()
    }


def state_ab(n: int, rounds: int) -> dict[str, Any]:
    import swarmscope.targets.neighbors.store as S
    from swarmscope.targets.neighbors import records as R
    from swarmscope.targets.neighbors.shmlog import LogWriter

    keys, values = R.make_entries(n)
    default = S.UNAPPLIED_MAX_BYTES
    res: dict[str, list[tuple[float, float]]] = {"per commit": [], "at first read": []}
    try:
        for _ in range(rounds):
            for name in res:
                S.UNAPPLIED_MAX_BYTES = 0 if name == "per commit" else default
                d = tempfile.mkdtemp(prefix="ss-nab-")
                st, log = S.Store(os.path.join(d, "s.db")), LogWriter(capacity=64 << 20)
                st.on_commit = lambda rev, k, v, dl, log=log: log.append(rev, k, v, dl)
                c0, t0 = _cpu(), time.perf_counter()
                for i in range(0, n, BATCH):
                    st.commit(keys[i * 4 : (i + BATCH) * 4], values[i * 12 : (i + BATCH) * 12])
                t1, c1 = time.perf_counter(), _cpu()
                if len(st.values) != n:
                    raise SystemExit("the store does not hold every entry")
                st.close()
                log.close()
                for f in os.listdir(d):
                    os.unlink(os.path.join(d, f))
                os.rmdir(d)
                res[name].append((t1 - t0, c1 - c0))
    finally:
        S.UNAPPLIED_MAX_BYTES = default
    return {
        name: {
            "wall_s": round(statistics.median(w for w, _ in v), 3),
            "cpu_s": round(statistics.median(c for _, c in v), 3),
        }
        for name, v in res.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; niceness {os.nice(0)}; N = {ns.n}", flush=True)
    lst = list_ab(ns.n, ns.rounds)
    for threads, r in lst.items():
        print(f"list, {threads} thread(s): {r['us_per_entry']} µs/entry, {r['cpu_s']} CPU-s (goal ≤ 1 µs)")
    st = state_ab(ns.n, ns.rounds)
    for name, r in st.items():
        print(f"store, state applied {name}: {r['cpu_s']} CPU-s, {r['wall_s']} s wall for {ns.n} entries")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
