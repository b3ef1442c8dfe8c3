"""The in-process neighbor sweep (legacy path, kept for target=kernel): every point in this process.

``swarmscope run scenarios/neighbor_writes.yaml`` (swarmscope.kinds.neighbor_writes) runs the
XDP target on the run pipeline: workers, probe windows, exact merging. This module still runs
both targets in one process, loading the map_update tracer itself; the kernel neighbor table
is only here until it is ported.

    python -m swarmscope.targets.neighbors.sweep scenarios/neighbor_writes.yaml \
        [--set neighbors=1000,100000] [--out results/neigh]

    run_sweep(cfg, run_dir) -> {"points": [{"neighbors", "mode", "total_ms", "per_neighbor_us",
                                           "p50_us", "p99_us", "verified", ...}], ...}

Per point a fresh control plane (server subprocess, new SQLite file) is started and the map
emptied. Start and end of every entry:
  list_program        start = the agent's List call; end = kernel exit of the
                      BPF_MAP_UPDATE_BATCH that wrote the entry (map_update tracer)
  write_watch_program start = the writer's send of the entry's batch (writer subprocess);
                      end   = as above, the agent watching in this process.
Entries are matched by order (the agent programs in revision order, entries of a batch keep
their order): entry k ends at the first update call whose running total reaches k.
target=kernel writes the kernel neighbor table of a dummy device in a namespace instead; its
count comes from the neigh tracepoints and an entry's end is the netlink ACK of its send().
Verification per point: the map read back in batches equals exactly what was written, the
kernel saw exactly N map-updated entries, and a sample of programmed IPs sent as UDP packets
in a test namespace are counted as hits by the XDP program (unprogrammed ones as misses).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarmscope.errors import LoadGenError
from swarmscope.kinds.neighbor_writes.results import ARION_US, entry_latencies, percentile, plot
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.server import TOKEN_ENV, start_server, stop
from swarmscope.v1 import neighbors_pb2 as pb


def schema() -> Any:
    """The kind's fields without its pipeline-only check: this path also runs target=kernel."""
    from swarmscope.config import Schema
    from swarmscope.kinds import get_kind

    return Schema(get_kind("neighbor_writes").schema.fields.values())


class Bench:
    """What lives across points: the datapath target, the kernel-side clock, the test netns."""

    def __init__(self, cfg: Mapping[str, Any], work: Path):
        self.cfg, self.work = cfg, work
        self.stack = contextlib.ExitStack()
        from swarmscope.targets.neighbors.netns import VethNetns

        self.ns = self.stack.enter_context(VethNetns())
        self.pid = os.getpid()
        self.in_kernel_ns = 0
        if cfg["target"] == "xdp":
            from swarmscope.probes.map_update import MapUpdateTracer
            from swarmscope.targets.neighbors.agent import XdpTarget

            self.tracer = MapUpdateTracer(pids=[self.pid], ringbuf_pages=4096)
            self.tracer.load()
            self.stack.callback(self.tracer.close)
            self.xdp = XdpTarget(None, max(1 << 10, max(cfg["neighbors"])), miss_action="XDP_DROP")
            self.stack.callback(self.xdp.close)
            self.xdp.attach(self.ns.host_dev)
        else:
            from swarmscope.probes.neigh_events import NeighEventCounter

            self.neigh = NeighEventCounter()
            self.neigh.load()
            self.stack.callback(self.neigh.close)

    def close(self) -> None:
        self.stack.close()

    def target(self) -> Any:
        if self.cfg["target"] == "xdp":
            self.xdp.clear()
            return self.xdp
        from swarmscope.targets.neighbors.agent import KernelTarget

        ifindex = self.ns.add_dummy()  # a new device: the previous point's entries are gone
        return KernelTarget(ifindex, self.ns.name, str(self.work / "kernel-revision"))

    def kernel_ends(self, since_ns: int, target: Any) -> tuple[list[tuple[int, int]], int]:
        """[(entries so far, t_ns)] of the kernel's writes and the kernel's entry count."""
        if self.cfg["target"] == "xdp":
            ev = [
                e
                for e in self.tracer.events()
                if e.tgid == self.pid and e.cmd == 26 and e.map_fd == target.fd
            ]
            ends, n = [], 0
            self.in_kernel_ns = 0  # time spent inside the bpf() update calls
            for e in sorted(ev, key=lambda e: e.exit_ns):
                if e.exit_ns >= since_ns and e.processed:
                    n += e.processed
                    ends.append((n, e.exit_ns))
                    self.in_kernel_ns += e.exit_ns - e.enter_ns
            return ends, n
        snap = self.neigh.snapshot().get((self.pid, "update"))
        count = (snap.count if snap else 0) - self._neigh_before
        return list(target.table.send_ns), count

    def point(self, n: int, mode: str) -> dict[str, Any]:
        from swarmscope.targets.neighbors.agent import Agent
        from swarmscope.workers.neighbor_writer import NeighborWriter

        db = tempfile.mktemp(prefix=f"neigh-{n}-", suffix=".db", dir=self.work)
        cp = start_server(db)
        server, addr = cp.proc, cp.address
        target = self.target()
        keys, values = R.make_entries(n, ifindex=0)
        if self.cfg["target"] == "kernel":
            snap = self.neigh.snapshot().get((self.pid, "update"))
            self._neigh_before = snap.count if snap else 0
        try:
            if self.cfg["target"] == "xdp":
                self.tracer.events()  # drain: only this point's updates count
            agent = Agent(addr, target, token=cp.token)
            agent.stub.Status(pb.StatusRequest())  # connect now: a long-lived agent already is
            if mode == "list_program":
                w = NeighborWriter(addr, cp.token)
                w.status()
                w.write(keys, values, self.cfg["batch_size"])  # preload, not timed
                w.close()
                t0 = time.monotonic_ns()
                agent.list_and_program(page_size=self.cfg["page_size"])
                t_user = time.monotonic_ns()
                starts = [(n, t0)]
            else:
                ready = threading.Event()
                th = threading.Thread(
                    target=agent.watch, kwargs={"ready": lambda _r: ready.set()}, daemon=True
                )
                th.start()
                ready.wait(30)
                time.sleep(0.05)  # the watch stream is registered at the server
                out = self.work / f"writer-{n}.json"
                cmd = [
                    sys.executable,
                    "-m",
                    "swarmscope.workers.neighbor_writer",
                    "--control-plane",
                    addr,
                    "-n",
                    str(n),
                    "--batch",
                    str(self.cfg["batch_size"]),
                    "--out",
                    str(out),
                ]
                env = {**os.environ, TOKEN_ENV: cp.token}  # the token never on a command line
                subprocess.run(cmd, check=True, timeout=self.cfg["point_timeout_s"], env=env)
                timing = json.loads(out.read_text())
                last_rev = timing["revisions"][-1]
                if not agent.wait_revision(last_rev, self.cfg["point_timeout_s"]):
                    raise LoadGenError(f"agent did not reach revision {last_rev}")
                t_user = time.monotonic_ns()
                agent.cancel()
                th.join(10)
                run, starts = 0, []
                for c, s in zip(timing["counts"], timing["sends_ns"], strict=True):
                    run += c
                    starts.append((run, s))
                t0 = starts[0][1]
                run, commits = 0, []
                for c, s in zip(timing["counts"], timing["commits_ns"], strict=True):
                    run += c
                    commits.append((run, s))
            ends, kernel_n = self.kernel_ends(t0, target)
            agent.close()
            pt = self.summarize(n, mode, t0, t_user, starts, ends, kernel_n)
            if mode == "write_watch_program":  # the stages: write -> durable commit -> datapath
                to_cp, to_dp = entry_latencies(starts, commits), entry_latencies(commits, ends)
                pt["commit_p50_us"] = round(percentile(to_cp, 0.5) / 1000, 3)
                pt["commit_p99_us"] = round(percentile(to_cp, 0.99) / 1000, 3)
                pt["commit_to_datapath_p50_us"] = round(percentile(to_dp, 0.5) / 1000, 3)
                pt["commit_to_datapath_p99_us"] = round(percentile(to_dp, 0.99) / 1000, 3)
            pt.update(self.verify(target, keys, values, n, kernel_n))
            return pt
        finally:
            stop(server)
            if self.cfg["target"] == "kernel":
                target.close()
            with contextlib.suppress(OSError):
                for suffix in ("", "-wal", "-shm"):
                    os.unlink(db + suffix)

    def summarize(
        self,
        n: int,
        mode: str,
        t0: int,
        t_user: int,
        starts: list[tuple[int, int]],
        ends: list[tuple[int, int]],
        kernel_n: int,
    ) -> dict[str, Any]:
        end = ends[-1][1] if ends else t_user
        lat = entry_latencies(starts, ends)
        total_ms = (end - t0) / 1e6
        return {
            "neighbors": n,
            "mode": mode,
            "target": self.cfg["target"],
            "total_ms": round(total_ms, 3),
            "per_neighbor_us": round(total_ms * 1000 / n, 3),
            "p50_us": round(percentile(lat, 0.50) / 1000, 3),
            "p99_us": round(percentile(lat, 0.99) / 1000, 3),
            "user_total_ms": round((t_user - t0) / 1e6, 3),
            "kernel_entries": kernel_n,
            "update_calls": len(ends),
            "in_update_calls_ms": round(getattr(self, "in_kernel_ns", 0) / 1e6, 3),
            "end_clock": "bpf sys_exit_bpf"
            if self.cfg["target"] == "xdp"
            else "netlink ack (tracepoint count)",
            "arion_per_neighbor_us": ARION_US.get(mode, {}).get(n),
        }

    def verify(self, target: Any, keys: bytes, values: bytes, n: int, kernel_n: int) -> dict[str, Any]:
        problems: list[str] = []
        if kernel_n != n:
            problems.append(f"kernel counted {kernel_n} entries written, expected {n}")
        if self.cfg["target"] == "xdp":
            got = target.contents()
            want = dict(zip(_chunks(keys, 4), _chunks(values, 12), strict=True))
            if got != want:
                problems.append(
                    f"map holds {len(got)} entries, {sum(1 for k in want if got.get(k) != want[k])} differ"
                )
            k = self.cfg["verify_packets"]
            if k:
                sample = sorted({0, n - 1, *random.sample(range(n), min(k, n))})[:k] if n > 1 else [0]
                addrs = [_dotted(keys[i * 4 : i * 4 + 4]) for i in sample]
                absent = [_dotted(R.make_keys(1, n + 10 + i)) for i in range(2)]
                before = self.xdp.stats()
                self.ns.send_udp(addrs + absent)
                time.sleep(0.05)
                after = self.xdp.stats()
                hits, misses = after[0] - before[0], after[1] - before[1]
                if hits != len(addrs) or misses != len(absent):
                    problems.append(
                        f"XDP counted {hits} hits / {misses} misses, sent {len(addrs)} / {len(absent)}"
                    )
        else:
            ifname = self.ns.dummy
            if n <= 200_000:
                have = self.ns.neigh_count(ifname)
                if have != n:
                    problems.append(f"kernel table holds {have} entries on {ifname}, expected {n}")
        return {"verified": not problems, "problems": problems}


def _chunks(b: bytes, size: int) -> list[bytes]:
    return [b[i : i + size] for i in range(0, len(b), size)]


def _dotted(k: bytes) -> str:
    return ".".join(str(x) for x in k)


def run_sweep(cfg: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    """Run every (N, mode) point; returns the report section and writes neighbors.png."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="neigh-", dir=run_dir))
    bench = Bench(cfg, work)
    points: list[dict[str, Any]] = []
    try:
        for n in cfg["neighbors"]:
            for mode in cfg["modes"]:
                pt = bench.point(n, mode)
                points.append(pt)
                print(json.dumps(pt), file=sys.stderr, flush=True)
    finally:
        bench.close()
    section: dict[str, Any] = {"points": points, "target": cfg["target"]}
    if cfg["plot"] and points:
        plot(points, run_dir / "neighbors.png")
        section["plot"] = "neighbors.png"
    return section


def main(argv: list[str] | None = None) -> int:
    """Run the sweep alone, without the run store (``swarmscope run`` is the normal way)."""
    ap = argparse.ArgumentParser(description="neighbor-writes sweep, standalone (no store, no trace)")
    ap.add_argument("scenario", nargs="?")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--out", default="results/neighbors")
    ns = ap.parse_args(argv)
    cfg = schema().load(file=ns.scenario, sets=["scenario=neighbor_writes", *ns.sets])
    # SIGTERM -> SystemExit, so the namespace and the XDP attachment are cleaned up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(ns.out)
    section = run_sweep(cfg, out)
    (out / "report.json").write_text(json.dumps({"neighbors": section}, indent=2))
    print(json.dumps(section, indent=2))
    return 0 if all(p["verified"] for p in section["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
