"""Worker side of neighbor writes: the system under test for this worker's share of N.

    d = NeighborDriver(cfg, prefix="w1-")       # on swarmscope:setup; one node "w1-n1"
    d.info()                                    # {"node": "w1-n1", "pid": <the agent's pid>}
    d.run_window(wid, ["w1-n1"], payload, env)  # {"w1-n1": {"generated", "starts", "map_id", ...}}
    d.close()                                   # server, XDP program, namespace gone

At the first window the driver makes its test namespace and loads and attaches its own XDP
program (the agent's map lives in this process, so the probe's ``map_update`` pid filter is this
pid). Per window: a fresh control plane server subprocess (new SQLite file), the map emptied,
this worker's block of generated neighbors (``make_entries(count, start)``) written, then
programmed by the agent here: ``list_program`` lists the snapshot (start = the List call),
``write_watch_program`` watches while a writer subprocess streams put-batches (start = each
batch's send). Times are CLOCK_MONOTONIC, the clock of bpf_ktime on this host. The result also
carries the map read back (== written?) and an XDP packet check in the namespace.

``locust -f``: NeighborWriterUser users (workers/neighbor_user.py) write into a control plane
this driver starts when Locust has no ``--host``, and record each batch here for the current
window; ``take`` returns the entries written and the batches' HdrHistogram (encoded).
Caveat: runs in a gevent-patched Locust process, where grpc needs ``init_gevent`` before its first
channel: the driver does it (``grpc_for_gevent``). Without it the embedded ``swarmscope run`` of
``transport: grpc``, which never imports the locustfile, blocked in grpc's first call, deaf to
Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmscope.core.errors import LoadGenError
from swarmscope.core.node import node_host
from swarmscope.core.sys import owners
from swarmscope.targets.neighbors import records as R
from swarmscope.workers import spans
from swarmscope.workers.driver import report_request
from swarmscope.workers.offloop import off_loop

if TYPE_CHECKING:
    from swarmscope.kinds.neighbor_writes import NeighborConfig

RAW_CAP = 100_000
MAX_BATCH_SPANS = 1000  # spans per node and window (one write per neighbor: N writes)


class _FreeTally:
    """One free-running window of this worker: entries acknowledged and batch latencies."""

    def __init__(self) -> None:
        from swarmscope.workers.http_stats import new_histogram

        self.entries = 0
        self.batches = 0
        self.failures = 0
        self.hist = new_histogram()
        self.raw_us: list[int] = []  # every batch's latency too, up to RAW_CAP (audits, tests)


class NeighborDriver:
    def __init__(self, cfg: NeighborConfig, prefix: str):
        from swarmscope.controller.fleet_loop import grpc_for_gevent
        from swarmscope.workers.nodes import own_cgroup_node

        grpc_for_gevent()  # before any channel: the agent's and the writer's (transport grpc)
        self.cfg = cfg
        self.name = f"{prefix}n1"
        # Locust users of different workers must write disjoint blocks: the worker's number
        # comes from its prefix ("w3-" -> 3; "" in one process -> 0).
        m = re.fullmatch(r"w(\d+)-", prefix)
        self.worker_no = int(m.group(1)) if m else 0
        self.node = own_cgroup_node(self.name)  # the agent's calls are in this cgroup
        self.host = node_host()
        self.pid = os.getpid()  # the agent's pid: the probe's map_update filter
        self._agent_proc: Any = None
        if cfg.transport == "ipc" and cfg.target == "xdp":
            # The fast path's agent is its own process, as a node's agent is (agent_proc.py).
            from swarmscope.kinds.neighbor_writes.fastpath import agent_lib
            from swarmscope.targets.neighbors.agent_proc import AgentProcess

            self._agent_proc = AgentProcess(native=agent_lib())
            self.pid = self._agent_proc.pid
        self.current_window = ""
        self._stack = contextlib.ExitStack()
        self._xdp: Any = None
        self._ns: Any = None
        self._work: Path | None = None
        self._closed = False
        self._cp: Any = None  # locust -f control plane (targets.neighbors.server.ControlPlane)
        self._lock = threading.Lock()
        self._free: dict[str, _FreeTally] = {}
        self._users = 0

    # -- set-up --------------------------------------------------------------------------------
    def describe(self) -> list[dict[str, Any]]:
        return [self.node.describe(self.host)]

    def info(self) -> dict[str, Any]:
        return {"node": self.name, "pid": self.pid}

    def _work_dir(self) -> Path:
        if self._work is None:
            self._work = Path(tempfile.mkdtemp(prefix="ss-neigh-"))
            self._stack.callback(_rmtree, self._work)
        return self._work

    def _datapath(self) -> Any:
        """Namespace + attached XDP program, made once (the first window), torn down at close.
        target=kernel: the namespace only (each window makes its own device, see _kernel)."""
        if self._closed:
            # A window still queued when the worker quits must not make a namespace nobody
            # will delete (seen in the fault matrix: SIGTERM while windows were queued).
            raise LoadGenError("the neighbor driver is closed")
        if self._ns is None:
            from swarmscope.targets.neighbors.netns import VethNetns

            self._ns = self._stack.enter_context(VethNetns())
        if self.cfg.target == "kernel":
            return None
        if self._xdp is None:
            from swarmscope.targets.neighbors.agent import XdpTarget

            # BCC's compile takes seconds (tens under load): in a real thread, so the Locust
            # worker's loop keeps sending heartbeats meanwhile (workers/offloop.py).
            xdp = off_loop(XdpTarget, None, max(1 << 10, max(self.cfg.neighbors)), miss_action="XDP_DROP")
            self._stack.callback(xdp.close)
            off_loop(xdp.attach, self._ns.host_dev)
            self._xdp = xdp
        return self._xdp

    def close(self) -> None:
        self._closed = True
        if self._agent_proc is not None:
            self._agent_proc.close()
            self._agent_proc = None
        if self._cp is not None:
            from swarmscope.targets.neighbors.server import stop

            stop(self._cp.proc)
            self._cp = None
        self._stack.close()

    # -- windows of `swarmscope run` -----------------------------------------------------------
    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any = None
    ) -> dict[str, Any]:
        if self.name not in nodes:
            return {}
        start, count = payload["shares"][self.name]
        t0 = time.perf_counter()
        exc: Exception | None = None
        try:
            res = self._point(payload, int(start), int(count))
        except Exception as e:  # the master hears about it in the result, the run goes on
            exc = e
            res = {"generated": int(count), "start": int(start), "error": f"{type(e).__name__}: {e}"}
        _batch_spans(window_id, self.name, str(payload["mode"]), res)
        report_request(environment, "neighbors", str(payload["mode"]), t0, int(count), exc)
        return {self.name: res}

    def _point(self, p: Mapping[str, Any], start: int, count: int) -> dict[str, Any]:
        from swarmscope.core.sys.bpf import fd_map_id
        from swarmscope.targets.neighbors.server import start_server, stop

        xdp = self._datapath()
        out: dict[str, Any] = {"generated": count, "start": start, "pid": self.pid, "starts": []}
        if xdp is not None:
            off_loop(xdp.clear)
            out["map_id"] = fd_map_id(os.getpid(), xdp.fd)  # the id is global: the agent opens it
            target = xdp
        else:
            target = self._kernel()
            out["device"], out["netns"] = self._ns.dummy, self._ns.name
        if count == 0:  # N smaller than the number of workers: nothing to write here
            out.update(reported=0, problems=[])
            return out
        work = self._work_dir()
        stamp = f"{start}-{count}-{time.monotonic_ns()}"
        db = str(work / f"neigh-{stamp}.db")
        keys, values = R.make_entries(count, start=start)
        ipc = p.get("transport", "ipc") == "ipc"
        sock = str(work / f"cp-{stamp}" / "s") if ipc else ""
        remote = self.cfg.control_plane
        if remote:  # elsewhere (another node): its token from the environment, as an agent's
            from swarmscope.core import auth
            from swarmscope.targets.neighbors.server import TOKEN_ENV

            addr, token, proc = remote, auth.load_token(env=TOKEN_ENV), None
        else:
            cp = start_server(db, socket_path=sock, durability=str(p.get("durability", "fsync")))
            addr, token, proc = cp.address, cp.token, cp.proc
        try:
            if not ipc:  # the network between agent and control plane, beside the latencies
                out["rtt"] = _round_trips(addr, token)
            if remote:
                _expect_empty(addr, token)
            if ipc:
                out.update(self._fast(cp, target, keys, values, start, count, p))
            elif p["mode"] == "list_program":
                out.update(self._list(addr, token, target, keys, values, p))
            elif p["mode"] == "write_watch_program":
                out.update(self._write_watch(addr, token, target, start, count, p))
            else:
                raise LoadGenError(f"mode {p['mode']} runs on transport ipc only")
        finally:
            if proc is not None:
                stop(proc)
            else:  # a long-lived control plane: the next window starts from an empty store
                _delete(addr, token, keys)
            if xdp is None:
                target.close()
            with contextlib.suppress(OSError):
                for suffix in ("", "-wal", "-shm"):
                    os.unlink(db + suffix)
        problems = list(out.pop("problems", []))
        if p["mode"] == "watch_only":  # nothing programmed: the map (or table) must be empty
            held = len(off_loop(xdp.contents)) if xdp is not None else self._ns.neigh_count(self._ns.dummy)
            out.update(reported=out.pop("received"), map_entries=held)
            if held:
                problems.append(f"watch only, yet the datapath holds {held} entries")
        elif xdp is None:
            # The kernel's own clock for a netlink write: the ACK of each send, in this process.
            out["ends"] = [[int(n), int(t)] for n, t in target.table.send_ns]
            out.update(self._verify_kernel(count))
        else:
            out.update(self._verify(xdp, keys, values, start, count, int(p["verify_packets"])))
        out["problems"] = problems + list(out.get("problems", []))
        return out

    def _fast(
        self, cp: Any, target: Any, keys: bytes, values: bytes, start: int, count: int, p: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The window on the control plane's Unix-socket fast path (fastpath.py), then the
        master side's own get/write latencies on the same control plane."""
        from swarmscope.core.sys.bpf import fd_map_id
        from swarmscope.kinds.neighbor_writes import fastpath as F
        from swarmscope.targets.neighbors.agent_proc import LocalAgent

        mode = p["mode"]
        maps: dict[str, Any] = {}
        if self._agent_proc is not None and target is self._xdp:
            agent: Any = self._agent_proc
            maps = {
                "map_id": fd_map_id(os.getpid(), self._xdp.fd),
                "meta_id": fd_map_id(os.getpid(), self._xdp.meta.map_fd),
            }
        else:
            agent = LocalAgent(target)
        if mode == "list_program":
            out = F.list_program(cp, agent, maps, keys, values, p)
        elif mode == "watch_only":
            out = F.watch_only(cp, agent, maps, keys, values, p)
        else:
            out = F.write_watch_program(cp, agent, maps, start, count, p, self._work_dir())
        out["master"] = F.master_latencies(cp, keys, values, int(p.get("master_samples", 0)))
        return out

    def _kernel(self) -> Any:
        """A fresh device in the namespace (the previous window's entries go with the old one)
        and its kernel neighbor table as the agent's target, with a fresh revision file."""
        from swarmscope.targets.neighbors.agent import KernelTarget

        ifindex = self._ns.add_dummy()
        state = self._work_dir() / "kernel-revision"
        state.unlink(missing_ok=True)  # a new control plane per window counts from revision 0
        return KernelTarget(ifindex, self._ns.name, str(state))

    def _verify_kernel(self, count: int) -> dict[str, Any]:
        """The kernel table as ``ip neigh`` lists it (reported) against what was written."""
        have = self._ns.neigh_count(self._ns.dummy)
        problems = [] if have == count else [f"kernel table holds {have} entries, {count} written"]
        return {"reported": have, "problems": problems}

    def _agent(self, addr: str, token: str, target: Any) -> Any:
        from swarmscope.targets.neighbors.agent import Agent
        from swarmscope.v1 import neighbors_pb2 as pb

        agent = Agent(addr, target, token=token)
        # Connected now, as a long-lived agent already is; it has programmed everything up to
        # now (a long-lived control plane keeps earlier windows' revisions: no replay of those).
        agent.revision = max(agent.revision, int(agent.stub.Status(pb.StatusRequest()).revision))
        return agent

    def _list(
        self, addr: str, token: str, target: Any, keys: bytes, values: bytes, p: Mapping[str, Any]
    ) -> dict[str, Any]:
        from swarmscope.workers.neighbor_writer import NeighborWriter

        agent = self._agent(addr, token, target)
        try:
            w = NeighborWriter(addr, token)
            w.status()
            w.write(keys, values, R.PRELOAD_BATCH)  # preload: not timed
            w.close()
            t0 = time.monotonic_ns()
            agent.list_and_program(page_size=int(p["page_size"]))
            t_user = time.monotonic_ns()
        finally:
            agent.close()
        return {"starts": [[len(keys) // R.KEY_SIZE, t0]], "t_user_ns": t_user}

    def _write_watch(
        self, addr: str, token: str, target: Any, start: int, count: int, p: Mapping[str, Any]
    ) -> dict[str, Any]:
        from swarmscope.targets.neighbors.server import TOKEN_ENV

        agent = self._agent(addr, token, target)
        ready = threading.Event()
        th = threading.Thread(target=agent.watch, kwargs={"ready": lambda _r: ready.set()}, daemon=True)
        th.start()
        try:
            if not ready.wait(30):
                raise LoadGenError("the agent's watch did not start")
            time.sleep(0.05)  # the watch stream is registered at the server
            timing_file = self._work_dir() / f"writer-{start}-{count}.json"
            # The writer is its own process, as a user's writer would be (and off this GIL).
            cmd = [
                sys.executable, "-m", "swarmscope.workers.neighbor_writer", "--control-plane", addr,
                "-n", str(count), "--start", str(start), "--batch", str(p["batch_size"]),
                "--out", str(timing_file),
            ]  # fmt: skip
            env = {**os.environ, TOKEN_ENV: token}  # the token never on a command line
            subprocess.run(owners.dying_with_us(cmd, env), check=True, timeout=float(p["timeout_s"]), env=env)
            timing = json.loads(timing_file.read_text())
            timing_file.unlink()
            last = timing["revisions"][-1]
            if not agent.wait_revision(last, float(p["timeout_s"])):
                raise LoadGenError(f"the agent did not reach revision {last}")
            t_user = time.monotonic_ns()
        finally:
            agent.cancel()
            th.join(10)
            agent.close()
        return {
            "starts": R.running(timing["counts"], timing["sends_ns"]),
            "commits": R.running(timing["counts"], timing["commits_ns"]),
            "t_user_ns": t_user,
        }

    def _verify(
        self, xdp: Any, keys: bytes, values: bytes, start: int, count: int, packets: int
    ) -> dict[str, Any]:
        """The map read back (reported) against what was written, and packets through XDP."""
        problems: list[str] = []
        held, differ = off_loop(_compare, xdp, keys, values)  # 1M entries: seconds, off the loop
        if differ:
            problems.append(f"map holds {held} entries, {differ} of the {count} written differ")
        xdp_check: dict[str, int] = {}
        if packets:
            picks = sorted({0, count - 1, *random.sample(range(count), min(packets, count))})[:packets]
            addrs = [_dotted(keys[i * 4 : i * 4 + 4]) for i in picks]
            absent = [_dotted(R.make_keys(1, start + count + 10 + i)) for i in range(2)]
            before = xdp.stats()
            self._ns.send_udp(addrs + absent)
            time.sleep(0.05)
            after = xdp.stats()
            hits, misses = after[0] - before[0], after[1] - before[1]
            xdp_check = {"hits": hits, "misses": misses, "sent_hits": len(addrs), "sent_misses": len(absent)}
            if hits != len(addrs) or misses != len(absent):
                sent = f"{len(addrs)} / {len(absent)}"
                problems.append(f"XDP counted {hits} hits / {misses} misses, sent {sent}")
        return {"reported": held, "problems": problems, "xdp": xdp_check}

    # -- free-running tests (locust -f) ------------------------------------------------------
    def control_plane(self, host: str | None) -> tuple[str, str | None]:
        """(address, token) of the control plane users write to: Locust's --host (its token
        from $SWARMSCOPE_NEIGHBORS_TOKEN), else one this driver starts (with a fresh token)."""
        if host:
            return host, None
        with self._lock:
            if self._cp is None:
                from swarmscope.targets.neighbors.server import start_server

                self._cp = start_server(str(self._work_dir() / "locust.db"))
            return self._cp.address, self._cp.token

    def next_block(self, per_user: int) -> int:
        """First generated-neighbor index of a new user's block (disjoint across workers)."""
        with self._lock:
            u = self._users
            self._users += 1
        return (self.worker_no * 4096 + u) * per_user

    def record(self, window_id: str, entries: int, latency_us: int, ok: bool) -> None:
        from swarmscope.workers.http_stats import HIGH_US, LOW_US

        with self._lock:
            t = self._free.setdefault(window_id, _FreeTally())
            t.batches += 1
            if ok:
                t.entries += entries
                us = max(LOW_US, min(HIGH_US, latency_us))
                t.hist.record_value(us)
                if len(t.raw_us) < RAW_CAP:
                    t.raw_us.append(us)
            else:
                t.failures += 1

    def stop_window(self, window_id: str) -> None:
        """Users record each batch when its ack arrives: nothing is in flight to count."""

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        with self._lock:
            t = self._free.pop(window_id, None) or _FreeTally()
        cp_entries: int | None = None
        if self._cp is not None:
            from swarmscope.workers.neighbor_writer import NeighborWriter

            w = NeighborWriter(self._cp.address, self._cp.token)
            cp_entries = int(w.status().entries)
            w.close()
        return {
            self.name: {
                "free": True,
                "generated": t.entries,
                "batches": t.batches,
                "failures": t.failures,
                "hist": t.hist.encode().decode("ascii"),
                "raw_us": t.raw_us if len(t.raw_us) < RAW_CAP else None,
                "control_plane": self._cp.address if self._cp is not None else "",
                "control_plane_entries": cp_entries,
            }
        }


def _batch_spans(window_id: str, node: str, mode: str, res: Mapping[str, Any]) -> None:
    """One span per put-batch (send -> durable commit), or one for the list-and-program; times
    are CLOCK_MONOTONIC, kept raw in ``swarmscope.mono_*_ns`` (the clock of the probe's BPF
    times) and moved onto the wall clock for the span. Past ``MAX_BATCH_SPANS`` writes (one
    write per neighbor: N of them) a span covers consecutive writes, from the first's send to
    the last's commit, so a window has at most that many spans."""
    starts, ends = res.get("starts") or [], res.get("commits") or []
    if not ends and starts and res.get("t_user_ns"):  # list_program: one list, then programmed
        ends = [[starts[-1][0], int(res["t_user_ns"])]]
    pairs = list(zip(starts, ends, strict=False))
    step = -(-len(pairs) // MAX_BATCH_SPANS) if pairs else 1
    prev = 0
    for i in range(0, len(pairs), step):
        (_, t0), (total, t1) = pairs[i][0], pairs[min(i + step, len(pairs)) - 1][1]
        name = f"batch {node} #{i + 1}" + (f"-{min(i + step, len(pairs))}" if step > 1 else "")
        spans.record(
            window_id,
            name if mode != "list_program" else f"list_program {node}",
            spans.wall_ns(t0),
            spans.wall_ns(t1),
            {
                "swarmscope.node": node,
                "swarmscope.entries": total - prev,
                "swarmscope.writes": min(i + step, len(pairs)) - i,
                "swarmscope.mono_start_ns": t0,
                "swarmscope.mono_end_ns": t1,
                "swarmscope.pid": res.get("pid"),
                "swarmscope.map_id": res.get("map_id"),
            },
        )
        prev = total


def _round_trips(addr: str, token: str, calls: int = 50, connects: int = 5) -> dict[str, Any]:
    """Agent -> control plane: gRPC Status round trips (µs) on one channel, and the kernel's
    TCP RTT (tcp_info.tcpi_rtt, µs) of fresh connections, median of ``connects``."""
    import socket
    import statistics
    import struct

    from swarmscope.workers.neighbor_writer import NeighborWriter

    w = NeighborWriter(addr, token)
    try:
        w.status()  # the channel's connect is not a round trip
        rtts = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            w.status()
            rtts.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        w.close()
    host, port = addr.rsplit(":", 1)
    tcp = []
    for _ in range(connects):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            # struct tcp_info: tcpi_rtt is the u32 at byte 68 (linux/tcp.h), smoothed, in µs.
            tcp.append(struct.unpack_from("I", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 68)[0])
    rtts.sort()
    return {
        "address": addr,
        "grpc_min_us": round(rtts[0], 1),
        "grpc_p50_us": round(statistics.median(rtts), 1),
        "grpc_max_us": round(rtts[-1], 1),
        "tcp_us": statistics.median(tcp),
    }


def _expect_empty(addr: str, token: str) -> None:
    from swarmscope.workers.neighbor_writer import NeighborWriter

    w = NeighborWriter(addr, token)
    try:
        held = int(w.status().entries)
    finally:
        w.close()
    if held:
        raise LoadGenError(
            f"the control plane at {addr} holds {held} entries before the window: one worker per "
            "control plane (an agent programs every entry it holds)"
        )


def _delete(addr: str, token: str, keys: bytes) -> None:
    """Delete this window's entries from a long-lived control plane (one message per
    MAX_BATCH_ENTRIES keys)."""
    from swarmscope.targets.neighbors.server import connect
    from swarmscope.v1 import neighbors_pb2 as pb
    from swarmscope.v1 import neighbors_pb2_grpc as pbg

    step = R.MAX_BATCH_ENTRIES * R.KEY_SIZE
    ch = connect(addr, token)
    try:
        msgs = (pb.NeighborBatch(deleted=keys[a : a + step]) for a in range(0, len(keys), step))
        for _ in pbg.NeighborStoreStub(ch).PutBatch(msgs, timeout=600):
            pass
    finally:
        ch.close()


def _compare(xdp: Any, keys: bytes, values: bytes) -> tuple[int, int]:
    """(entries in the map, written entries it does not hold as written)."""
    got = xdp.contents()
    want = dict(zip(_chunks(keys, R.KEY_SIZE), _chunks(values, R.VALUE_SIZE), strict=True))
    return len(got), 0 if got == want else sum(1 for k in want if got.get(k) != want[k]) or len(got) - len(
        want
    )


def _chunks(b: bytes, size: int) -> list[bytes]:
    return [b[i : i + size] for i in range(0, len(b), size)]


def _dotted(k: bytes) -> str:
    return ".".join(str(x) for x in k)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
